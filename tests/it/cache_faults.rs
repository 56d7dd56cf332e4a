//! The files under faults, through the binary with the mock model: a corrupt cache
//! (named, with the way out; `cache check` and `cache repair` recover), a full disk
//! (simulated with a file-size limit, RLIMIT_FSIZE through `ulimit -f`, which needs no
//! privileges: the run stops with a named error, what was stored is kept, no output file
//! appears, a rerun completes), and a read-only cache (a tmpfs remounted read-only when
//! this process is root and may mount, file modes when not root; skipped, saying so, for
//! root without mount rights, whom file modes do not stop).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_nlg-judge")
}

fn input(dir: &Path, contexts: usize) -> PathBuf {
    let path = dir.join("input.jsonl");
    let mut text = String::new();
    for c in 0..contexts {
        for k in 0..2 {
            text.push_str(&format!(
                "{{\"context_id\": \"d{c}\", \"context\": \"Document {c}.\", \"candidate_id\": \"s{k}\", \"candidate\": \"Summary {k} of document {c}.\"}}\n"
            ));
        }
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn score(input: &Path, cache: &Path, output: &Path, attribute: &str) -> Command {
    let mut command = Command::new(bin());
    command.args(["score", "--model", "mock", "--method", "prompt"]);
    command.args(["--attribute", attribute, "--input"]);
    command
        .arg(input)
        .arg("--cache")
        .arg(cache)
        .arg("--output")
        .arg(output);
    command
}

fn run(command: &mut Command) -> (bool, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().unwrap();
    (
        status.success(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn cache(action: &str, path: &Path) -> (bool, String, String) {
    run(Command::new(bin())
        .args(["cache", action, "--cache"])
        .arg(path))
}

/// The label results `cache check` counts.
fn stored(path: &Path) -> usize {
    let (_, out, _) = cache("check", path);
    out.split(": ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {out}"))
}

#[test]
fn a_corrupt_cache_is_named_with_the_way_out_and_repair_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path(), 20);
    let db = dir.path().join("results.sqlite");
    let first = dir.path().join("first.jsonl");
    let (ok, _, err) = run(&mut score(&input, &db, &first, "coherence"));
    assert!(ok, "{err}");
    assert_eq!(stored(&db), 40);
    // Damage the file: its header and a page in the middle.
    let mut bytes = std::fs::read(&db).unwrap();
    let middle = bytes.len() / 2;
    bytes[..100].fill(0xA5);
    bytes[middle..middle + 1024].fill(0x5A);
    std::fs::write(&db, &bytes).unwrap();

    let again = dir.path().join("again.jsonl");
    let (ok, _, err) = run(&mut score(&input, &db, &again, "coherence"));
    assert!(!ok);
    assert!(err.contains("is damaged"), "{err}");
    assert!(err.contains("nlg-judge cache repair --cache"), "{err}");
    assert!(!again.exists());

    let (ok, out, err) = cache("check", &db);
    assert!(!ok, "{out}");
    assert!(
        out.contains("problem:") && err.contains("cache repair"),
        "{out}{err}"
    );
    let (ok, out, err) = cache("repair", &db);
    assert!(ok, "{out}{err}");
    assert!(out.contains("moved the damaged cache to"), "{out}");
    let (ok, out, _) = cache("check", &db);
    assert!(ok && out.contains("sound"), "{out}");

    let (ok, _, err) = run(&mut score(&input, &db, &again, "coherence"));
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&again).unwrap()
    );
}

#[test]
fn a_full_disk_stops_the_run_with_a_named_error_and_keeps_what_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path(), 400);
    let db = dir.path().join("results.sqlite");
    let output = dir.path().join("out.jsonl");
    // Files may grow to 96 KiB; SIGXFSZ is ignored so that writes fail with EFBIG.
    let limited = format!(
        "trap '' XFSZ; ulimit -f 96; exec \"$0\" score --model mock --method prompt --attribute coherence --input '{}' --cache '{}' --output '{}'",
        input.display(),
        db.display(),
        output.display()
    );
    let (ok, _, err) = run(Command::new("sh").args(["-c", &limited, bin()]));
    assert!(!ok, "the run fit in the limit");
    assert!(
        err.contains("is full (or refused a write)") && err.contains("are kept"),
        "{err}"
    );
    assert!(!output.exists(), "an output file appeared");
    let kept = stored(&db);
    assert!(kept > 0 && kept < 800, "{kept} results kept");
    let (ok, _, err) = run(&mut score(&input, &db, &output, "coherence"));
    assert!(ok, "{err}");
    assert_eq!(stored(&db), 800);
    assert_eq!(
        std::fs::read_to_string(&output).unwrap().lines().count(),
        800
    );
}

/// A tmpfs mounted at a folder (root with mount rights only), unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path) -> Option<Self> {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let mounted = root
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
        mounted.then(|| Self(dir.to_path_buf()))
    }

    fn remount(&self, options: &str) -> bool {
        Command::new("mount")
            .args(["-o", options])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn set_writable(dir: &Path, writable: bool) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let mode = if writable { 0o644 } else { 0o444 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mode = if writable { 0o755 } else { 0o555 };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_read_only_cache_stops_new_work_with_a_named_error_and_stays_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path(), 10);
    let folder = dir.path().join("cache");
    std::fs::create_dir(&folder).unwrap();
    let tmpfs = Tmpfs::mount(&folder);
    if tmpfs.is_none() && is_root() {
        eprintln!("skipped: root without mount rights cannot make a folder read-only");
        return;
    }
    let db = folder.join("results.sqlite");
    let (ok, _, err) = run(&mut score(
        &input,
        &db,
        &dir.path().join("first.jsonl"),
        "coherence",
    ));
    assert!(ok, "{err}");
    match &tmpfs {
        Some(tmpfs) => assert!(tmpfs.remount("remount,ro")),
        None => set_writable(&folder, false),
    }
    let other = dir.path().join("fluency.jsonl");
    let (ok, _, err) = run(&mut score(&input, &db, &other, "fluency"));
    match &tmpfs {
        Some(tmpfs) => assert!(tmpfs.remount("remount,rw")),
        None => set_writable(&folder, true),
    }
    assert!(!ok);
    assert!(err.contains("cannot be written"), "{err}");
    assert!(err.contains("results.sqlite"), "{err}");
    assert!(!other.exists());
    assert_eq!(stored(&db), 20);
}

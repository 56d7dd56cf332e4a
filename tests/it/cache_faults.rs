//! The files under faults, through the binary with the mock model: a corrupt cache
//! (named, with the way out; `cache check` and `cache repair` recover), a full disk
//! (simulated with a file-size limit, RLIMIT_FSIZE through `ulimit -f`, which needs no
//! privileges: the run stops with a named error, what was stored is kept, no output file
//! appears, a rerun completes), and a read-only cache (a tmpfs remounted read-only when
//! this process is root and may mount, file modes when not root; skipped, saying so, for
//! root without mount rights, whom file modes do not stop). A cache with one 4 KiB page
//! overwritten (a leaf, or the root of a table's b-tree) loses through `cache repair`
//! exactly the entries that page held, and nothing else.

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

/// Label results stored under their keys, text results under theirs.
type Stored = (
    Vec<(nlg_judge::engine::CacheKey, nlg_judge::engine::LabelResult)>,
    Vec<(String, String)>,
);

/// A cache of 600 label results and 60 text results (every fifth long enough to spill into
/// overflow pages), written and closed (its log checkpointed into the file); returns the
/// keys with what was stored under them.
fn filled_cache(path: &Path) -> Stored {
    use nlg_judge::engine::{CacheKey, LabelResult, LabelScore, ResultCache, TokenPrompt};
    let cache = ResultCache::open(path).unwrap();
    let mut labels = Vec::new();
    for i in 0..600u32 {
        let prompt = TokenPrompt {
            input: vec![i, i * 7 + 1, 3],
            decoder_prefix: Vec::new(),
        };
        let key = CacheKey::new(
            "model-fingerprint",
            "pairwise/c1",
            &prompt,
            vec![vec![1], vec![2]],
        );
        let result = LabelResult {
            labels: vec![
                LabelScore {
                    tokens: vec![1],
                    logprob: -0.001 * f64::from(i) - 0.5,
                },
                LabelScore {
                    tokens: vec![2],
                    logprob: -1.0 / (1.0 + f64::from(i)),
                },
            ],
            prompt_tokens: i as usize + 3,
        };
        cache.put(&key, &result).unwrap();
        labels.push((key, result));
    }
    let mut texts = Vec::new();
    for i in 0..60 {
        let length = if i % 5 == 0 { 6000 + 37 * i } else { 40 + i };
        let value: String = (0..length)
            .map(|k| char::from(b'a' + ((k * 7 + i) % 26) as u8))
            .collect();
        let key = format!("key-{i:03}");
        cache
            .put_text("model-fingerprint", "geval-steps", &key, &value)
            .unwrap();
        texts.push((key, value));
    }
    drop(cache);
    (labels, texts)
}

/// Overwrite page `page` (1-based) of a 4 KiB-page file with garbage that is no page
/// type; returns how many entries the page held (its cell count).
fn overwrite_page(path: &Path, page: usize) -> usize {
    let mut bytes = std::fs::read(path).unwrap();
    let start = (page - 1) * 4096;
    let cells = usize::from(u16::from_be_bytes([bytes[start + 3], bytes[start + 4]]));
    let mut state = 0x2545_f491_u32 ^ page as u32;
    for byte in &mut bytes[start..start + 4096] {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        *byte = (state >> 16) as u8;
    }
    bytes[start] = 0xA7;
    std::fs::write(path, bytes).unwrap();
    cells
}

#[test]
fn the_page_reader_gives_every_entry_of_a_sound_cache_once() {
    use rusqlite::types::Value;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sound.sqlite");
    filled_cache(&path);
    let scan = nlg_judge::engine::cache_pages::scan(&std::fs::read(&path).unwrap(), &[]);
    assert_eq!((scan.unreadable_pages, scan.undecodable), (0, 0));
    let connection = rusqlite::Connection::open(&path).unwrap();
    let rows = |sql: &str| -> Vec<String> {
        let mut statement = connection.prepare(sql).unwrap();
        let width = statement.column_count();
        let mut rows: Vec<String> = statement
            .query_map([], |row| {
                (0..width)
                    .map(|i| row.get::<_, Value>(i))
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .unwrap()
            .map(|row| format!("{:?}", row.unwrap()))
            .collect();
        rows.sort();
        rows
    };
    let sorted = |found: &[Vec<Value>]| -> Vec<String> {
        let mut rows: Vec<String> = found.iter().map(|row| format!("{row:?}")).collect();
        rows.sort();
        rows
    };
    let label = rows("SELECT model, template, prompt, labels, logprobs, CAST(label_mass AS REAL), prompt_tokens FROM label_results");
    let text = rows("SELECT model, kind, key, value FROM text_results");
    assert_eq!((label.len(), text.len()), (600, 60));
    assert_eq!(sorted(&scan.label_rows), label);
    assert_eq!(sorted(&scan.text_rows), text);
}

#[test]
fn repair_after_one_overwritten_page_keeps_every_entry_of_the_other_pages() {
    let dir = tempfile::tempdir().unwrap();
    let sound = dir.path().join("sound.sqlite");
    let (labels, texts) = filled_cache(&sound);
    let bytes = std::fs::read(&sound).unwrap();
    assert_eq!(u16::from_be_bytes([bytes[16], bytes[17]]), 4096);
    let pages = bytes.len() / 4096;
    let root: i64 = rusqlite::Connection::open(&sound)
        .unwrap()
        .query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'label_results'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    let root = usize::try_from(root).unwrap();
    assert_eq!(
        bytes[(root - 1) * 4096],
        0x02,
        "label_results's root is no interior page"
    );
    // A leaf in the second half of the file, and the root of label_results: SQLite's own
    // reader finds no entry of that table below a damaged root.
    let leaf = (pages / 2..pages)
        .find(|&p| bytes[(p - 1) * 4096] == 0x0A)
        .expect("a leaf page");
    for page in [leaf, root] {
        let path = dir.path().join(format!("damaged-{page}.sqlite"));
        std::fs::copy(&sound, &path).unwrap();
        let held = overwrite_page(&path, page);
        assert!(held > 0, "page {page} held no entries");
        let (ok, out, err) = cache("repair", &path);
        assert!(ok, "{out}{err}");
        assert!(
            out.contains(&format!("lost: 1 of its {pages} pages could not be read")),
            "{out}"
        );
        let (ok, out, _) = cache("check", &path);
        assert!(ok && out.contains("sound"), "{out}");

        let repaired = nlg_judge::engine::ResultCache::open(&path).unwrap();
        let mut missing = 0;
        for (key, stored) in &labels {
            match repaired.get(key).unwrap() {
                Some(found) => assert_eq!(&found, stored),
                None => missing += 1,
            }
        }
        for (key, value) in &texts {
            match repaired
                .get_text("model-fingerprint", "geval-steps", key)
                .unwrap()
            {
                Some(found) => assert_eq!(&found, value),
                None => missing += 1,
            }
        }
        assert_eq!(missing, held, "page {page}: {out}");
    }
}

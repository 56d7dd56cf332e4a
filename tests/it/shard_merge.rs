//! Sharded runs through the binary with the tiny T5 fixture: a compare run split into 3
//! shards (by `--shard`, by Slurm's variables both ways, by Kubernetes' index) and merged
//! is byte-identical to one run; a killed shard resumes to the same output; `merge`
//! refuses a missing shard, a duplicated context and a mismatched fingerprint by name;
//! `score` shards merge the same way.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SHARD_VARIABLES: [&str; 5] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "JOB_COMPLETION_INDEX",
];

fn command(args: &[String], env: &[(&str, String)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nlg-judge"));
    command.args(args);
    for name in SHARD_VARIABLES {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    command
}

fn run(args: &[String], env: &[(&str, String)]) -> Output {
    command(args, env).output().expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Six contexts of three candidates; by FNV-1a mod 3, d1 and d6 go to shard 0, d3 and d5
/// to shard 1, d2 and d4 to shard 2.
fn input_lines() -> String {
    let mut lines = String::new();
    let texts = [
        "The council approved the new park on Monday.",
        "Rain is expected all week in the north.",
        "The museum reopened after a long renovation.",
        "A new bridge links the two towns.",
        "The team won the final in extra time.",
        "Prices of coffee rose sharply this year.",
    ];
    for (k, context) in texts.iter().enumerate() {
        for (c, candidate) in ["A short summary.", "Summary the of words.", "It happened."]
            .iter()
            .enumerate()
        {
            lines.push_str(&format!(
                "{{\"context_id\": \"d{}\", \"context\": \"{context}\", \"candidate_id\": \"c{c}\", \"candidate\": \"{candidate}\", \"scores\": {{\"coherence\": {}}}}}\n",
                k + 1,
                (c + k) % 3 + 1
            ));
        }
    }
    lines
}

struct Setup {
    _model: tempfile::TempDir,
    model: String,
    dir: tempfile::TempDir,
    input: PathBuf,
}

impl Setup {
    fn new() -> Self {
        let model_dir = common::t5::fixture_model_dir();
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.jsonl");
        std::fs::write(&input, input_lines()).unwrap();
        Self {
            model: model_dir.path().display().to_string(),
            _model: model_dir,
            dir,
            input,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `compare` writing `NAME.jsonl` and `NAME_pairs.jsonl`, with its own cache.
    fn compare(&self, name: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "compare",
            "--model",
            &self.model,
            "--attribute",
            "coherence",
            "--input",
            self.input.to_str().unwrap(),
            "--output",
            self.path(&format!("{name}.jsonl")).to_str().unwrap(),
            "--comparisons-out",
            self.path(&format!("{name}_pairs.jsonl")).to_str().unwrap(),
            "--cache",
            self.path(&format!("{name}.sqlite")).to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    fn merge(&self, outputs: &[PathBuf], into: &Path) -> Output {
        let mut args = vec!["merge".to_string()];
        args.extend(outputs.iter().map(|p| p.display().to_string()));
        args.extend([
            "--input".to_string(),
            self.input.display().to_string(),
            "--output".to_string(),
            into.display().to_string(),
        ]);
        run(&args, &[])
    }
}

fn cached_rows(cache: &Path) -> usize {
    let Ok(db) =
        rusqlite::Connection::open_with_flags(cache, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    db.query_row("SELECT COUNT(*) FROM label_results", [], |row| {
        row.get::<_, i64>(0)
    })
    .map(|n| n as usize)
    .unwrap_or(0)
}

#[test]
fn three_shards_merge_to_the_single_run_and_merge_refuses_bad_sets() {
    let setup = Setup::new();
    let single = run(&setup.compare("single", &[]), &[]);
    assert!(single.status.success(), "{}", text(&single.stderr));
    let single_scores = std::fs::read(setup.path("single.jsonl")).unwrap();
    let single_pairs = std::fs::read(setup.path("single_pairs.jsonl")).unwrap();
    assert_eq!(text(&single_scores).lines().count(), 18);
    assert_eq!(text(&single_pairs).lines().count(), 36);

    // (how, extra arguments, environment) per shard index.
    type Way = fn(usize) -> (Vec<String>, Vec<(&'static str, String)>);
    let ways: [(&str, Way, &str); 4] = [
        (
            "flag",
            |i| (vec!["--shard".into(), format!("{i}/3")], vec![]),
            "--shard",
        ),
        (
            "slurm-count",
            |i| {
                (
                    vec![],
                    vec![
                        ("SLURM_ARRAY_TASK_ID", i.to_string()),
                        ("SLURM_ARRAY_TASK_COUNT", "3".into()),
                    ],
                )
            },
            "SLURM_ARRAY_TASK_COUNT",
        ),
        (
            "slurm-range",
            |i| {
                (
                    vec![],
                    vec![
                        ("SLURM_ARRAY_TASK_ID", (i + 4).to_string()),
                        ("SLURM_ARRAY_TASK_MIN", "4".into()),
                        ("SLURM_ARRAY_TASK_MAX", "6".into()),
                    ],
                )
            },
            "SLURM_ARRAY_TASK_MAX - SLURM_ARRAY_TASK_MIN + 1",
        ),
        (
            "kubernetes",
            |i| {
                (
                    vec!["--shards".into(), "3".into()],
                    vec![("JOB_COMPLETION_INDEX", i.to_string())],
                )
            },
            "JOB_COMPLETION_INDEX",
        ),
    ];
    for (how, way, reason) in ways {
        let mut scores = Vec::new();
        let mut pairs = Vec::new();
        for i in 0..3 {
            let name = format!("{how}{i}");
            let (extra, env) = way(i);
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let out = run(&setup.compare(&name, &extra), &env);
            assert!(out.status.success(), "{how} {i}: {}", text(&out.stderr));
            let log = text(&out.stderr);
            assert!(log.contains(&format!("shard {i}/3 taken (")), "{log}");
            assert!(log.contains(reason), "{how}: {log}");
            assert!(log.contains("2 of the input's 6 contexts"), "{log}");
            scores.push(setup.path(&format!("{name}.jsonl")));
            pairs.push(setup.path(&format!("{name}_pairs.jsonl")));
        }
        // Shard outputs given in any order.
        scores.reverse();
        let merged = setup.path(&format!("{how}_merged.jsonl"));
        let out = setup.merge(&scores, &merged);
        assert!(out.status.success(), "{how}: {}", text(&out.stderr));
        assert_eq!(std::fs::read(&merged).unwrap(), single_scores, "{how}");
        // The shards' diagnostics combine into the merged run's, each shard's kept: the
        // comparisons counted are the single run's, and so is every check's value
        // (count-weighted means of the shards').
        let read = |path: &Path| -> serde_json::Value {
            let mut name = path.as_os_str().to_owned();
            name.push(".diagnostics.json");
            serde_json::from_str(&std::fs::read_to_string(name).unwrap()).unwrap()
        };
        let (combined, whole) = (read(&merged), read(&setup.path("single.jsonl")));
        assert_eq!(combined["shards"].as_array().unwrap().len(), 3, "{how}");
        for check in whole["checks"].as_array().unwrap() {
            let name = check["name"].as_str().unwrap();
            let merged_check = combined["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("{how}: no {name} combined"));
            assert_eq!(merged_check["count"], check["count"], "{how} {name}");
            let (a, b) = (
                merged_check["value"].as_f64().unwrap(),
                check["value"].as_f64().unwrap(),
            );
            assert!((a - b).abs() < 1e-9, "{how} {name}: {a} vs {b}");
        }
        let merged_pairs = setup.path(&format!("{how}_merged_pairs.jsonl"));
        let out = setup.merge(&pairs, &merged_pairs);
        assert!(out.status.success(), "{how}: {}", text(&out.stderr));
        assert_eq!(std::fs::read(&merged_pairs).unwrap(), single_pairs, "{how}");
    }

    let shard = |i: usize| setup.path(&format!("flag{i}.jsonl"));
    let into = setup.path("refused.jsonl");

    // A missing shard.
    let out = setup.merge(&[shard(0), shard(2)], &into);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("missing shard: no output of shard 1/3"),
        "{}",
        text(&out.stderr)
    );

    // A duplicated context: shard 1's sidecar also claims shard 0's d1.
    let forged = setup.path("forged.jsonl");
    std::fs::copy(shard(1), &forged).unwrap();
    let sidecar = std::fs::read_to_string(setup.path("flag1.jsonl.shard.json")).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&sidecar).unwrap();
    value["contexts"].as_array_mut().unwrap().push("d1".into());
    std::fs::write(setup.path("forged.jsonl.shard.json"), value.to_string()).unwrap();
    let out = setup.merge(&[shard(0), forged, shard(2)], &into);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("duplicate context: \"d1\""),
        "{}",
        text(&out.stderr)
    );

    // A mismatched fingerprint: shard 2 again with another seed.
    let out = run(
        &setup.compare("seed2", &["--shard", "2/3", "--seed", "7"]),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = setup.merge(&[shard(0), shard(1), setup.path("seed2.jsonl")], &into);
    assert!(!out.status.success());
    let error = text(&out.stderr);
    assert!(
        error.contains("fingerprint mismatch") && error.contains("`seed`"),
        "{error}"
    );
    assert!(!into.exists());
    // Shards that ran with other options are the user's input error (exit 2), and the
    // differing values read as the options were given, not as Rust's debug text.
    assert_eq!(out.status.code(), Some(2), "{error}");
    let out = run(
        &setup.compare(
            "random2",
            &["--shard", "2/3", "--design", "random", "--comparisons", "2"],
        ),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = setup.merge(&[shard(0), shard(1), setup.path("random2.jsonl")], &into);
    let error = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{error}");
    assert!(
        error.contains("`comparisons` (\"default\" versus \"2\")"),
        "{error}"
    );
    assert!(!error.contains("Some("), "{error}");

    // Bad shard requests are named.
    let out = run(&setup.compare("bad", &["--shard", "3/3"]), &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("out of range"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &setup.compare("bad", &[]),
        &[("JOB_COMPLETION_INDEX", "1".into())],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--shards N"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_killed_shard_resumes_to_the_same_output() {
    let setup = Setup::new();
    let whole = run(&setup.compare("whole", &["--shard", "1/3"]), &[]);
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    let expected = std::fs::read(setup.path("whole.jsonl")).unwrap();
    let needed = cached_rows(&setup.path("whole.sqlite"));
    assert_eq!(
        needed, 12,
        "two contexts of three candidates, 6 comparisons each"
    );

    // Kill the shard as soon as it has cached a result (or at its end, on a fast machine).
    let cache = setup.path("killed.sqlite");
    let mut child = command(&setup.compare("killed", &["--shard", "1/3"]), &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait::until("the shard to cache a result or end", || {
        cached_rows(&cache) > 0 || child.try_wait().unwrap().is_some()
    });
    let _ = child.kill();
    let _ = child.wait();
    let before = cached_rows(&cache);
    assert!(before >= 1 && before <= needed, "{before}");

    let resumed = run(&setup.compare("killed", &["--shard", "1/3"]), &[]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert_eq!(std::fs::read(setup.path("killed.jsonl")).unwrap(), expected);
    assert_eq!(cached_rows(&cache), needed);
}

#[test]
fn score_shards_merge_to_the_single_run() {
    let setup = Setup::new();
    let score = |name: &str, extra: &[&str]| {
        let mut args: Vec<String> = [
            "score",
            "--model",
            &setup.model,
            "--method",
            "prompt",
            "--attribute",
            "coherence",
            "--input",
            setup.input.to_str().unwrap(),
            "--output",
            setup.path(&format!("{name}.jsonl")).to_str().unwrap(),
            "--cache",
            setup.path("score.sqlite").to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = run(&args, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        setup.path(&format!("{name}.jsonl"))
    };
    let single = std::fs::read(score("single", &[])).unwrap();
    let shards: Vec<PathBuf> = (0..3)
        .map(|i| score(&format!("s{i}"), &["--shard", &format!("{i}/3")]))
        .collect();
    let merged = setup.path("merged.jsonl");
    let out = setup.merge(&shards, &merged);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&merged).unwrap(), single);
}

//! The `correlate` subcommand end to end, through the built binary: JSON output,
//! dotted field paths, bootstrap reproducibility, and the errors users meet (missing
//! file, malformed line, missing or mistyped field). The SummEval checks run when the
//! shared data is present (`../shared/data`, or `NLG_JUDGE_DATA`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use approx::assert_abs_diff_eq;
use serde_json::Value;
use tempfile::NamedTempFile;

fn nlg_judge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(args)
        .output()
        .expect("the nlg-judge binary runs")
}

fn jsonl(lines: &[&str]) -> NamedTempFile {
    let mut file = NamedTempFile::new().expect("temp file");
    for line in lines {
        writeln!(file, "{line}").expect("write temp file");
    }
    file
}

fn path_of(file: &NamedTempFile) -> &str {
    file.path().to_str().expect("utf-8 temp path")
}

fn json_output(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON object")
}

fn stderr_of(output: &Output) -> String {
    assert!(!output.status.success(), "expected a failure");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The constructed set of src/stats/meta.rs, with nested scores: g1 has a constant
/// prediction, g2 constant human scores.
const CONSTRUCTED: [&str; 12] = [
    r#"{"context_id": "g1", "system_id": "s1", "m": {"score": 2.0}, "human": {"coh": 1}}"#,
    r#"{"context_id": "g1", "system_id": "s2", "m": {"score": 2.0}, "human": {"coh": 3}}"#,
    r#"{"context_id": "g1", "system_id": "s3", "m": {"score": 2.0}, "human": {"coh": 2}}"#,
    r#"{"context_id": "g2", "system_id": "s1", "m": {"score": 1.0}, "human": {"coh": 4}}"#,
    r#"{"context_id": "g2", "system_id": "s2", "m": {"score": 3.0}, "human": {"coh": 4}}"#,
    r#"{"context_id": "g2", "system_id": "s3", "m": {"score": 2.0}, "human": {"coh": 4}}"#,
    r#"{"context_id": "g3", "system_id": "s1", "m": {"score": 0.5}, "human": {"coh": 1}}"#,
    r#"{"context_id": "g3", "system_id": "s2", "m": {"score": 0.9}, "human": {"coh": 2}}"#,
    r#"{"context_id": "g3", "system_id": "s3", "m": {"score": 0.7}, "human": {"coh": 3}}"#,
    r#"{"context_id": "g4", "system_id": "s1", "m": {"score": 3.0}, "human": {"coh": 2}}"#,
    r#"{"context_id": "g4", "system_id": "s2", "m": {"score": 1.0}, "human": {"coh": 5}}"#,
    r#"{"context_id": "g4", "system_id": "s3", "m": {"score": 2.5}, "human": {"coh": 4}}"#,
];

/// 12 contexts of 3 systems with a prediction that follows the human score with
/// deterministic noise: enough contexts for bootstrap intervals (10 at least).
fn many_contexts() -> Vec<String> {
    (0..36)
        .map(|k| {
            let (group, system) = (k / 3, k % 3);
            let human = ((group * 7 + system * 3) % 5) as f64 + 1.0;
            let pred = human + ((k * 37 % 11) as f64 - 5.0) / 4.0;
            format!(
                r#"{{"context_id": "g{group}", "system_id": "s{system}", "m": {{"score": {pred}}}, "human": {{"coh": {human}}}}}"#
            )
        })
        .collect()
}

fn assert_coefficients(report: &Value, expected: [f64; 3]) {
    for (name, want) in ["pearson", "spearman", "kendall"].into_iter().zip(expected) {
        let got = report[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name} in {report}"));
        assert_abs_diff_eq!(got, want, epsilon = 1e-12);
    }
}

#[test]
fn json_report_with_dotted_paths_and_both_skip_rules() {
    let file = jsonl(&CONSTRUCTED);
    let base = ["correlate", "--input", path_of(&file), "--pred", "m.score"];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(["--human", "human.coh", "--json"]);
        args.extend(extra);
        json_output(&nlg_judge(&args))
    };

    // scipy 1.17.1 + numpy 2.4.6 (tests/reference/stats_reference.py): mean over groups
    // of stats.pearsonr / spearmanr / kendalltau.
    let authors = run(&[]);
    assert_eq!(authors["level"], "summary");
    assert_eq!(authors["skip"], "authors");
    assert_coefficients(
        &authors,
        [
            -0.1303473704045435,
            -0.16666666666666666,
            -0.2222222222222222,
        ],
    );
    assert_eq!(
        (authors["n_groups"].as_u64(), authors["n_items"].as_u64()),
        (Some(3), Some(9))
    );

    let geval = run(&["--skip", "geval"]);
    assert_coefficients(&geval, [-0.19552105560681526, -0.25, -0.3333333333333333]);
    assert_eq!(
        (geval["n_groups"].as_u64(), geval["n_items"].as_u64()),
        (Some(2), Some(6))
    );

    let system = run(&["--level", "system"]);
    assert_eq!(system["level"], "system");
    assert_coefficients(&system, [0.8267540335004899, 0.5, 0.33333333333333337]);
    assert_eq!(system["n_systems"].as_u64(), Some(3));

    let pooled = run(&["--level", "pooled"]);
    assert_coefficients(
        &pooled,
        [
            0.10422408476979865,
            0.20404963376924382,
            0.15934820215421497,
        ],
    );
    assert_eq!(pooled["n_items"].as_u64(), Some(12));
    assert!(pooled.get("ci").is_none());
}

#[test]
fn undefined_coefficients_are_null() {
    let file = jsonl(&[
        r#"{"context_id": "a", "p": 1, "h": 3}"#,
        r#"{"context_id": "a", "p": 2, "h": 3}"#,
    ]);
    let report = json_output(&nlg_judge(&[
        "correlate",
        "--input",
        path_of(&file),
        "--pred",
        "p",
        "--human",
        "h",
        "--json",
    ]));
    assert!(report["pearson"].is_null(), "{report}");
    assert_eq!(report["n_groups"].as_u64(), Some(0));
    assert_eq!(report["n_groups_skipped"].as_u64(), Some(1));
}

#[test]
fn bootstrap_is_reproducible_and_reported() {
    let lines = many_contexts();
    let file = jsonl(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    let run = |seed: &str| {
        json_output(&nlg_judge(&[
            "correlate",
            "--input",
            path_of(&file),
            "--pred",
            "m.score",
            "--human",
            "human.coh",
            "--level",
            "pooled",
            "--bootstrap",
            "200",
            "--seed",
            seed,
            "--ci",
            "0.9",
            "--json",
        ]))
    };
    let first = run("5");
    assert_eq!(first, run("5"));
    let ci = &first["ci"];
    assert_eq!(ci["resamples"].as_u64(), Some(200));
    assert_eq!(ci["confidence"].as_f64(), Some(0.9));
    let bounds = ci["spearman"].as_array().expect("[lower, upper]");
    let (lower, upper) = (bounds[0].as_f64().unwrap(), bounds[1].as_f64().unwrap());
    let estimate = first["spearman"].as_f64().unwrap();
    assert!(
        lower <= estimate && estimate <= upper,
        "{estimate} not in {bounds:?}"
    );
    assert_ne!(first["ci"], run("6")["ci"]);
}

#[test]
fn text_table_lists_coefficients_and_interval() {
    let file = jsonl(&CONSTRUCTED);
    let output = nlg_judge(&[
        "correlate",
        "--input",
        path_of(&file),
        "--pred",
        "m.score",
        "--human",
        "human.coh",
        "--bootstrap",
        "50",
    ]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("summary (skip rule: authors)"), "{text}");
    assert!(text.contains("3 used, 1 skipped"), "{text}");
    // Three contexts are too few for an interval: none is printed, and the table says why.
    assert!(
        text.contains("no interval: 3 groups (contexts) only; a bootstrap over fewer than 10"),
        "{text}"
    );
    assert!(
        text.contains("pearson      -0.1303\n") && !text.contains('['),
        "{text}"
    );

    let lines = many_contexts();
    let file = jsonl(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    let output = nlg_judge(&[
        "correlate",
        "--input",
        path_of(&file),
        "--pred",
        "m.score",
        "--human",
        "human.coh",
        "--bootstrap",
        "50",
    ]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("12 used, 0 skipped"), "{text}");
    assert!(text.contains("95% CI (50 resamples, seed 0)"), "{text}");
    assert!(text.contains("   ["), "{text}");
}

#[test]
fn missing_file_is_named() {
    let stderr = stderr_of(&nlg_judge(&[
        "correlate",
        "--input",
        "/no/such/scores.jsonl",
        "--pred",
        "p",
        "--human",
        "h",
    ]));
    assert!(
        stderr.contains("cannot open input file /no/such/scores.jsonl"),
        "{stderr}"
    );
}

#[test]
fn malformed_line_is_named() {
    let file = jsonl(&[
        r#"{"context_id": "a", "p": 1, "h": 3}"#,
        "",
        r#"{"context_id": "a", "p": 2, "h": "#,
    ]);
    let stderr = stderr_of(&nlg_judge(&[
        "correlate",
        "--input",
        path_of(&file),
        "--pred",
        "p",
        "--human",
        "h",
    ]));
    assert!(
        stderr.contains(&format!("{}:3: not valid JSON", path_of(&file))),
        "{stderr}"
    );
}

#[test]
fn missing_field_is_named_with_line_and_flag() {
    let file = jsonl(&[
        r#"{"context_id": "a", "s": {"p": 1}, "h": 3}"#,
        r#"{"context_id": "a", "s": {"q": 2}, "h": 1}"#,
    ]);
    let stderr = stderr_of(&nlg_judge(&[
        "correlate",
        "--input",
        path_of(&file),
        "--pred",
        "s.p",
        "--human",
        "h",
    ]));
    assert!(
        stderr.contains(&format!("{}:2", path_of(&file))),
        "{stderr}"
    );
    assert!(
        stderr.contains("field `s.p` (--pred) is missing"),
        "{stderr}"
    );

    // The default group field is context_id; a file without it says so.
    let file = jsonl(&[r#"{"doc": "a", "p": 1, "h": 3}"#]);
    let stderr = stderr_of(&nlg_judge(&[
        "correlate",
        "--input",
        path_of(&file),
        "--pred",
        "p",
        "--human",
        "h",
    ]));
    assert!(
        stderr.contains("field `context_id` (--group) is missing"),
        "{stderr}"
    );
}

#[test]
fn quoted_number_and_non_object_lines_are_rejected() {
    let file = jsonl(&[r#"{"context_id": "a", "p": "0.5", "h": 3}"#]);
    let stderr = stderr_of(&nlg_judge(&[
        "correlate",
        "--input",
        path_of(&file),
        "--pred",
        "p",
        "--human",
        "h",
    ]));
    assert!(stderr.contains(":1"), "{stderr}");
    assert!(
        stderr.contains("field `p` (--pred) is the string \"0.5\""),
        "{stderr}"
    );

    let file = jsonl(&["[1, 2]"]);
    let stderr = stderr_of(&nlg_judge(&[
        "correlate",
        "--input",
        path_of(&file),
        "--pred",
        "p",
        "--human",
        "h",
    ]));
    assert!(
        stderr.contains(":1: expected a JSON object, found an array"),
        "{stderr}"
    );
}

/// SummEval (`summeval.jsonl` in the shared data), when present.
fn summeval() -> Option<PathBuf> {
    let root = std::env::var_os("NLG_JUDGE_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    let path = root.join("summeval/summeval.jsonl");
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipping: {} not found (set NLG_JUDGE_DATA)",
            path.display()
        );
        None
    }
}

#[test]
fn summeval_coherence_against_itself_is_one() {
    let Some(path) = summeval() else { return };
    let report = json_output(&nlg_judge(&[
        "correlate",
        "--input",
        path.to_str().unwrap(),
        "--pred",
        "coherence",
        "--human",
        "coherence",
        "--group",
        "doc_id",
        "--json",
    ]));
    assert_coefficients(&report, [1.0, 1.0, 1.0]);
    assert_eq!(
        (report["n_groups"].as_u64(), report["n_items"].as_u64()),
        (Some(100), Some(1600))
    );
}

#[test]
fn summeval_coherence_against_relevance_matches_scipy() {
    let Some(path) = summeval() else { return };
    let run = |level: &str| {
        json_output(&nlg_judge(&[
            "correlate",
            "--input",
            path.to_str().unwrap(),
            "--pred",
            "coherence",
            "--human",
            "relevance",
            "--group",
            "doc_id",
            "--level",
            level,
            "--json",
        ]))
    };
    // scipy 1.17.1 (tests/reference/stats_reference.py on summeval.jsonl, grouped by
    // doc_id): per-document pearsonr / spearmanr / kendalltau averaged; per-system
    // means; pooled.
    assert_coefficients(
        &run("summary"),
        [0.5993950429458637, 0.5912489576959704, 0.4965640493833859],
    );
    let system = run("system");
    assert_coefficients(&system, [0.8349150213923056, 0.823529411764706, 0.7]);
    assert_eq!(system["n_systems"].as_u64(), Some(16));
    assert_coefficients(
        &run("pooled"),
        [0.659761315580832, 0.6544189979260334, 0.5274477795919115],
    );
}

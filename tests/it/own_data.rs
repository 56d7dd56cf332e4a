//! A user's own data end to end through the binary with the tiny T5 fixture: an
//! attribute of one's own (`--adjective`), `--task custom` nouns, human keys matched
//! case-insensitively (or a warning), a boolean in `scores`, and `compare --correlate`
//! agreeing with `correlate` on the output file.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

fn nlg_judge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The README's demo data: stories with `Empathy` (capitalised) and a boolean flag.
fn stories() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/data/stories.jsonl")
        .to_str()
        .unwrap()
        .to_string()
}

/// `(spearman, kendall, pearson)` values and interval bounds from a correlate table.
fn coefficients(table: &str) -> Vec<(String, Vec<f64>)> {
    table
        .lines()
        .filter(|l| {
            ["pearson", "spearman", "kendall"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .map(|l| {
            let name = l.split_whitespace().next().unwrap().to_string();
            let numbers = l
                .split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == ',')
                .filter_map(|w| w.parse::<f64>().ok())
                .collect();
            (name, numbers)
        })
        .collect()
}

#[test]
fn own_attribute_and_custom_nouns_reach_the_prompt_and_correlate_agrees() {
    let model = common::t5::fixture_model_dir();
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("ranked.jsonl");
    let input = stories();
    let run = nlg_judge(&[
        "compare",
        "--model",
        model.path().to_str().unwrap(),
        "--attribute",
        "empathy",
        "--adjective",
        "more empathetic",
        "--task",
        "custom",
        "--item",
        "Story",
        "--context-label",
        "Prompt",
        "--template",
        "c2",
        "--input",
        &input,
        "--output",
        output.to_str().unwrap(),
        "--no-cache",
        "--show-prompt",
        "--correlate",
    ]);
    let stdout = text(&run.stdout);
    let stderr = text(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    for phrase in [
        "Prompt:",
        "Story A:",
        "Story B:",
        "Which Story is more empathetic relative to the prompt, Story A or Story B?",
    ] {
        assert!(stderr.contains(phrase), "`{phrase}` missing:\n{stderr}");
    }
    assert!(stdout.contains("human scores `Empathy`"), "{stdout}");
    // No warning about the human scores (the judge diagnostics below the table may warn:
    // the fixture's random weights do not judge).
    assert!(
        !stdout.lines().any(|l| l.starts_with("warning")),
        "{stdout}"
    );

    // The output rows carry the human scores and the system ids: no join needed.
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&output)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["system_id"], "sys-a");
    assert_eq!(first["scores"]["Empathy"], 4.7);

    let correlate = nlg_judge(&[
        "correlate",
        "--input",
        output.to_str().unwrap(),
        "--pred",
        "score",
        "--human",
        "scores.Empathy",
        "--bootstrap",
        "1000",
    ]);
    assert!(correlate.status.success(), "{}", text(&correlate.stderr));
    let expected = coefficients(&text(&correlate.stdout));
    let printed = coefficients(&stdout);
    assert_eq!(expected.len(), 3, "{}", text(&correlate.stdout));
    assert_eq!(printed.len(), 3, "{stdout}");
    for ((name, want), (got_name, got)) in expected.iter().zip(&printed) {
        assert_eq!(name, got_name);
        assert_eq!(want.len(), got.len(), "{name}: {want:?} vs {got:?}");
        for (w, g) in want.iter().zip(got) {
            assert!((w - g).abs() < 1e-12, "{name}: {want:?} vs {got:?}");
        }
    }

    // The same numbers from the output joined with the input on (context_id, candidate_id).
    let joined = |human_file: &str| {
        nlg_judge(&[
            "correlate",
            "--pred-file",
            output.to_str().unwrap(),
            "--human-file",
            human_file,
            "--pred",
            "score",
            "--human",
            "scores.Empathy",
            "--bootstrap",
            "1000",
        ])
    };
    let join = joined(&input);
    assert!(join.status.success(), "{}", text(&join.stderr));
    assert_eq!(coefficients(&text(&join.stdout)), expected);
    // An input row with no prediction is refused, with the count.
    let extra = dir.path().join("extra.jsonl");
    let mut rows = std::fs::read_to_string(&input).unwrap();
    rows.push_str(
        &rows
            .lines()
            .next()
            .unwrap()
            .replace("\"warm\"", "\"extra\""),
    );
    rows.push('\n');
    std::fs::write(&extra, rows).unwrap();
    let refused = joined(extra.to_str().unwrap());
    assert!(!refused.status.success());
    let error = text(&refused.stderr);
    assert!(
        error.contains("1 rows of") && error.contains("`extra`"),
        "{error}"
    );
}

#[test]
fn an_own_attribute_without_a_phrase_is_refused_by_name() {
    let run = nlg_judge(&[
        "compare",
        "--model",
        "no-such-model",
        "--attribute",
        "empathy",
        "--input",
        &stories(),
    ]);
    assert!(!run.status.success());
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("`empathy`") && stderr.contains("--adjective"),
        "{stderr}"
    );
    let run = nlg_judge(&[
        "compare",
        "--model",
        "no-such-model",
        "--attribute",
        "coherence",
        "--task",
        "custom",
        "--item",
        "Story",
        "--input",
        &stories(),
    ]);
    assert!(
        text(&run.stderr).contains("--context-label"),
        "{}",
        text(&run.stderr)
    );
}

#[test]
fn no_matching_human_key_is_warned_about_with_the_keys_that_exist() {
    let model = common::t5::fixture_model_dir();
    let run = nlg_judge(&[
        "compare",
        "--model",
        model.path().to_str().unwrap(),
        "--attribute",
        "fluency",
        "--input",
        &stories(),
        "--no-cache",
    ]);
    let stderr = text(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("`fluency`")
            && warnings[0].contains("Coherence, Empathy")
            && !warnings[0].contains("rater_unsure"),
        "{stderr}"
    );
    // Case-insensitive: `coherence` finds `Coherence`, no warning.
    let run = nlg_judge(&[
        "compare",
        "--model",
        model.path().to_str().unwrap(),
        "--attribute",
        "coherence",
        "--input",
        &stories(),
        "--no-cache",
    ]);
    let stderr = text(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        !stderr.lines().any(|l| l.starts_with("warning")),
        "{stderr}"
    );
}

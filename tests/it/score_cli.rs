//! `nlg-judge score` through the binary with the tiny T5 fixture (random weights, the real
//! T5 tokenizer): G-Eval, prompt scoring and GPTScore on an encoder-decoder model, the
//! resumable cache, output that `correlate` reads as it is, and argument errors.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn nlg_judge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const INPUT: &str = r#"{"context_id": "d1", "context": "The council approved the new park on Monday.", "candidate_id": "a", "candidate": "The council approved a park.", "reference": "A park was approved.", "scores": {"coherence": 4.0}, "system_id": "S1"}
{"context_id": "d1", "context": "The council approved the new park on Monday.", "candidate_id": "b", "candidate": "Monday park the.", "reference": "A park was approved.", "scores": {"coherence": 1.5}, "system_id": "S2"}
{"context_id": "d1", "context": "The council approved the new park on Monday.", "candidate_id": "c", "candidate": "A new park was approved by the council.", "reference": "A park was approved.", "scores": {"coherence": 3.0}, "system_id": "S3"}
{"context_id": "d2", "context": "Rain is expected all week.", "candidate_id": "a", "candidate": "It will rain.", "scores": {"coherence": 3.5}, "system_id": "S1"}
"#;

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn check_distribution(line: &Value, low: i64, high: i64) {
    let score = line["score"].as_f64().unwrap();
    assert!(score >= low as f64 && score <= high as f64, "{line}");
    let probabilities = line["probabilities"].as_object().unwrap();
    let mut keys: Vec<i64> = probabilities.keys().map(|k| k.parse().unwrap()).collect();
    keys.sort_unstable();
    assert_eq!(keys, (low..=high).collect::<Vec<_>>());
    let total: f64 = probabilities.values().map(|v| v.as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
    let raw: f64 = line["raw_probabilities"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!((raw - line["label_mass"].as_f64().unwrap()).abs() < 1e-12);
}

#[test]
fn geval_on_t5_is_cached_resumable_and_correlatable() {
    let model = common::t5::fixture_model_dir();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, INPUT).unwrap();
    let output = dir.path().join("out.jsonl");
    let cache = dir.path().join("cache.sqlite");
    let steps = dir.path().join("steps.txt");
    let args = [
        "score",
        "--model",
        model.path().to_str().unwrap(),
        "--method",
        "geval",
        "--attribute",
        "coherence",
        "--reference",
        "--max-step-tokens",
        "12",
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--steps-out",
        steps.to_str().unwrap(),
    ];
    // d2's candidate has no reference: refused before the model loads (issue 60; it
    // used to stop after the model had written the steps), naming the row.
    let run = nlg_judge(&args);
    assert_eq!(run.status.code(), Some(2));
    let error = text(&run.stderr);
    assert!(!error.contains("written by the model"), "{error}");
    assert!(
        error.contains("candidate `a` of context `d2` (") && error.contains("in.jsonl:4)"),
        "{error}"
    );

    let args: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| *a != "--reference")
        .collect();
    let run = nlg_judge(&args);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(text(&run.stderr).contains("evaluation steps written by the model"));
    assert!(
        text(&run.stdout).contains("4 computed, 0 from the cache"),
        "{}",
        text(&run.stdout)
    );
    let first = std::fs::read(&output).unwrap();
    let scored = lines(&output);
    assert_eq!(scored.len(), 4);
    for line in &scored {
        check_distribution(line, 1, 5);
    }
    assert_eq!(scored[1]["candidate_id"], "b");
    assert_eq!(scored[1]["system_id"], "S2");
    assert_eq!(scored[1]["scores"]["coherence"], 1.5);
    assert!(std::fs::read_to_string(&steps).unwrap().starts_with("1."));

    let rerun = nlg_judge(&args);
    assert!(rerun.status.success(), "{}", text(&rerun.stderr));
    assert!(text(&rerun.stderr).contains("evaluation steps from the cache"));
    assert!(text(&rerun.stdout).contains("0 computed, 4 from the cache"));
    assert_eq!(std::fs::read(&output).unwrap(), first);

    let correlate = nlg_judge(&[
        "correlate",
        "--input",
        output.to_str().unwrap(),
        "--pred",
        "score",
        "--human",
        "scores.coherence",
        "--level",
        "pooled",
        "--json",
    ]);
    assert!(correlate.status.success(), "{}", text(&correlate.stderr));
    assert!(
        text(&correlate.stdout).contains("spearman"),
        "{}",
        text(&correlate.stdout)
    );
}

#[test]
fn prompt_scoring_and_gptscore_on_t5() {
    let model = common::t5::fixture_model_dir();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, INPUT).unwrap();
    let output = dir.path().join("out.jsonl");
    for method in ["prompt", "gptscore"] {
        let run = nlg_judge(&[
            "score",
            "--model",
            model.path().to_str().unwrap(),
            "--method",
            method,
            "--attribute",
            "fluency",
            "--no-cache",
            "--show-prompt",
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ]);
        assert!(run.status.success(), "{method}: {}", text(&run.stderr));
        assert!(
            text(&run.stderr).contains("measures the summary's fluency") || method == "gptscore"
        );
        let scored = lines(&output);
        assert_eq!(scored.len(), 4);
        for line in &scored {
            if method == "prompt" {
                check_distribution(line, 1, 10);
            } else {
                assert!(line["score"].as_f64().unwrap() < 0.0, "{line}");
                assert!(line.get("probabilities").is_none());
            }
        }
    }
}

#[test]
fn argument_errors_are_reported_before_loading_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, INPUT).unwrap();
    let base = [
        "score",
        "--model",
        "no-such-model",
        "--no-cache",
        "--attribute",
        "coherence",
        "--input",
        input.to_str().unwrap(),
    ];
    let error = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        let run = nlg_judge(&args);
        assert!(!run.status.success());
        text(&run.stderr)
    };
    assert!(error(&["--method", "prompt", "--steps", "s.txt"])
        .contains("--steps applies to --method geval"));
    assert!(error(&["--scale", "5-1"]).contains("low < high"));
    let missing = error(&["--criteria", "/nonexistent/crit.toml"]);
    assert!(missing.contains("/nonexistent/crit.toml"), "{missing}");
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\n").unwrap();
    assert!(error(&["--steps", empty.to_str().unwrap()]).contains("is empty"));
}

/// G-Eval criteria as one free-text string (the metrics-service example's form): the
/// scale comes from the `(1-3)` range in the text, else --scale, else 1-5, and the task
/// prompt is the introduction the model reads.
#[test]
fn geval_criteria_given_as_free_text() {
    let model = common::t5::fixture_model_dir();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, INPUT).unwrap();
    let steps = dir.path().join("steps.txt");
    std::fs::write(&steps, "1. Read the text.\n2. Rate its flow.\n").unwrap();
    let output = dir.path().join("out.jsonl");
    let run_with = |criteria: &str, extra: &[&str]| {
        let mut args = vec![
            "score",
            "--model",
            model.path().to_str().unwrap(),
            "--method",
            "geval",
            "--criteria-text",
            criteria,
            "--task-prompt",
            "You will evaluate the quality of a generated text.",
            "--steps",
            steps.to_str().unwrap(),
            "--no-cache",
            "--show-prompt",
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        nlg_judge(&args)
    };
    let run = run_with(
        "Coherence (1-3): evaluate the logical flow and connection between sentences.",
        &["--scale", "1-10"],
    );
    let stderr = text(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("the range in the criteria text"),
        "{stderr}"
    );
    assert!(stderr.contains("You will evaluate the quality of a generated text."));
    assert!(stderr.contains("Coherence (1-3): evaluate the logical flow"));
    assert!(stderr.contains("- Coherence:"), "{stderr}");
    lines(&output)
        .iter()
        .for_each(|l| check_distribution(l, 1, 3));

    // No range in the text: --scale, else 1-5.
    let run = run_with("Politeness: is the text polite?", &["--scale", "0-4"]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(text(&run.stderr).contains("the requested scale"));
    lines(&output)
        .iter()
        .for_each(|l| check_distribution(l, 0, 4));
    let run = run_with("Politeness: is the text polite?", &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(text(&run.stderr).contains("the default 1-5"));
    lines(&output)
        .iter()
        .for_each(|l| check_distribution(l, 1, 5));

    // A range that is no usable scale is refused before any model work, and named.
    let run = run_with("Coherence (5-1): flow", &[]);
    assert!(!run.status.success());
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("--criteria-text") && stderr.contains("(5-1)"),
        "{stderr}"
    );
}

//! `nlg-judge metric` end to end: output rows carry the library's scores, paraphrases
//! from a paraphrase file join the references (max over them can only raise a score),
//! and bad input is named.

use std::process::Command;

use nlg_judge::metrics::{score_lexical, Aggregation, LexicalMetric, LexicalOptions};
use nlg_judge::pararef::reference_id;
use serde_json::Value;

fn nlg_judge(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(args)
        .output()
        .expect("the binary runs")
}

const INPUT: &str = r#"{"context_id": "d1", "candidate_id": "s1", "candidate": "A feline rested on the rug.", "reference": "The cat sat on the mat."}
{"context_id": "d1", "candidate_id": "s2", "candidate": "The cat sat on a mat.", "references": ["The cat sat on the mat.", "A cat was sitting on the mat."]}
"#;

#[test]
fn scores_equal_the_library_and_paraphrases_join_the_references() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, INPUT).unwrap();
    let paraphrases = dir.path().join("p.jsonl");
    let reference = "The cat sat on the mat.";
    std::fs::write(
        &paraphrases,
        format!(
            "{}\n",
            serde_json::json!({"reference_id": reference_id(reference), "reference": reference,
                "paraphrases": ["A feline rested on the rug."], "failed": 0})
        ),
    )
    .unwrap();
    let output = dir.path().join("out.jsonl");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "metric",
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = nlg_judge(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<Value> = std::fs::read_to_string(&output)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (rows, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (plain, _) = run(&["--agg", "mean"]);
    assert_eq!(plain.len(), 2);
    assert_eq!(plain[1]["candidate_id"], "s2");
    let mean = LexicalOptions {
        aggregation: Aggregation::Mean,
        stemmer: false,
    };
    for metric in LexicalMetric::ALL {
        let expected = score_lexical(
            metric,
            "The cat sat on a mat.",
            &["The cat sat on the mat.", "A cat was sitting on the mat."],
            mean,
        )
        .unwrap();
        assert_eq!(
            plain[1]["metrics"][metric.name()].as_f64().unwrap(),
            expected,
            "{metric}"
        );
    }
    let (base, _) = run(&[]);
    let (expanded, stderr) = run(&["--paraphrases", paraphrases.to_str().unwrap(), "--corpus"]);
    assert!(stderr.contains("corpus BLEU"), "{stderr}");
    let score = |rows: &[Value], metric: &str| rows[0]["metrics"][metric].as_f64().unwrap();
    for metric in ["bleu", "chrf", "rouge1", "rougeL"] {
        assert!(score(&expanded, metric) > score(&base, metric), "{metric}");
    }
    assert!((score(&expanded, "bleu") - 100.0).abs() < 1e-9);
}

#[test]
fn bad_input_and_unknown_metrics_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"context_id\": 1, \"candidate_id\": 2, \"candidate\": \"x\", \"reference\": \"y\"}\n{\"context_id\": 1, \"candidate_id\": 3, \"candidate\": \"x\"}\n",
    )
    .unwrap();
    let out = nlg_judge(&["metric", "--input", input.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Input errors exit with 2, as on every command.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("in.jsonl:2") && stderr.contains("no reference"),
        "{stderr}"
    );
    let out = nlg_judge(&[
        "metric",
        "--metric",
        "meteor",
        "--input",
        input.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown metric 'meteor'"), "{stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
}

#[test]
fn bertscore_of_a_candidate_equal_to_its_reference_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"context_id\": 1, \"candidate_id\": 1, \"candidate\": \"The cat sat on the mat.\", \"reference\": \"The cat sat on the mat.\"}\n{\"context_id\": 1, \"candidate_id\": 2, \"candidate\": \"Stocks fell.\", \"references\": [\"The cat sat on the mat.\", \"Markets dropped.\"]}\n",
    )
    .unwrap();
    let out = nlg_judge(&[
        "metric",
        "--metric",
        "bertscore,chrf",
        "--input",
        input.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let f1 = |i: usize| rows[i]["metrics"]["bertscore"].as_f64().unwrap();
    assert!((f1(0) - 1.0).abs() < 1e-6, "{}", f1(0));
    assert!(f1(1) > 0.0 && f1(1) < 1.0, "{}", f1(1));
}

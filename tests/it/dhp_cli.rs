//! `nlg-judge dhp` from the command line: rule-based perturbation of a user's
//! question-answering file (resumed after a torn write), `analyze --json` against the
//! scipy fixtures, `report`, and named errors for bad input.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn nlg_judge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(args)
        .env(
            "NLG_JUDGE_CACHE",
            std::env::temp_dir().join("nlg-judge-dhp-cli-test"),
        )
        .output()
        .unwrap()
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn error(output: &Output) -> String {
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).to_string()
}

fn write_qa(path: &Path) {
    let mut text = String::new();
    for i in 0..5 {
        text.push_str(&format!(
            "{{\"id\": \"q{i}\", \"question\": \"Where did explorer number {i} land?\", \
\"context\": \"The explorer landed on the northern coast in 1642 after a long voyage.\", \
\"answer\": \"Explorer {i} landed on the northern coast of the island in 1642, after a voyage of many months.\"}}\n"
        ));
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn perturb_writes_rows_and_resumes_after_a_torn_line() {
    let dir = tempfile::tempdir().unwrap();
    let qa = dir.path().join("qa.jsonl");
    write_qa(&qa);
    let out = dir.path().join("p.jsonl");
    let args = |out: &Path| {
        vec![
            "dhp".to_string(),
            "perturb".into(),
            "--task".into(),
            "question-answering".into(),
            "--input".into(),
            qa.display().to_string(),
            "--rule-only".into(),
            "--output".into(),
            out.display().to_string(),
        ]
    };
    let full_args = args(&out);
    let full_args: Vec<&str> = full_args.iter().map(String::as_str).collect();
    let stdout = ok(&nlg_judge(&full_args));
    // 4 character-level perturbations + random answer, 5 items
    assert!(stdout.contains("25 rows made now (25 ok"), "{stdout}");
    let full = std::fs::read_to_string(&out).unwrap();
    let rows: Vec<Value> = full
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let first = &rows[0];
    for field in [
        "item_id",
        "task",
        "perturbation",
        "level",
        "degree",
        "method",
        "original",
        "perturbed",
        "status",
    ] {
        assert!(first.get(field).is_some(), "missing {field}");
    }
    assert_eq!(first["task"], "question-answering");
    assert_eq!(first["method"], "rule");
    let deleted = rows
        .iter()
        .find(|r| r["perturbation"] == "char-deletion-major")
        .unwrap();
    let count = |v: &Value| v.as_str().unwrap().chars().count();
    assert_eq!(
        count(&deleted["original"]) - count(&deleted["perturbed"]),
        25
    );

    // a run killed mid-line: 7 rows and a torn eighth, then resumed
    let part = dir.path().join("part.jsonl");
    let lines: Vec<&str> = full.lines().collect();
    std::fs::write(
        &part,
        format!("{}\n{}", lines[..7].join("\n"), &lines[7][..30]),
    )
    .unwrap();
    let part_args = args(&part);
    let part_args: Vec<&str> = part_args.iter().map(String::as_str).collect();
    let stdout = ok(&nlg_judge(&part_args));
    assert!(stdout.contains("18 rows made now"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&part).unwrap(), full);
}

#[test]
fn analyze_json_equals_the_scipy_fixture() {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/dhp/analysis_cases.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let case = &fixture["cases"][2];
    let dir = tempfile::tempdir().unwrap();
    let scores = dir.path().join("scores.jsonl");
    let rows: String = case["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{r}\n"))
        .collect();
    std::fs::write(&scores, rows).unwrap();
    let weights = dir.path().join("w.toml");
    std::fs::write(&weights, case["weights_toml"].as_str().unwrap()).unwrap();
    let stdout = ok(&nlg_judge(&[
        "dhp",
        "analyze",
        "--scores",
        scores.to_str().unwrap(),
        "--weights",
        weights.to_str().unwrap(),
        "--json",
    ]));
    let got: Value = serde_json::from_str(&stdout).unwrap();
    let want = &case["expected"];
    for key in ["D_avg", "D_min", "D_ew_avg", "D_ew_min"] {
        let (a, b) = (got[key].as_f64().unwrap(), want[key].as_f64().unwrap());
        assert!((a - b).abs() < 1e-9, "{key}: {a} vs {b}");
    }
    for (g, w) in got["perturbations"]
        .as_array()
        .unwrap()
        .iter()
        .zip(want["perturbations"].as_array().unwrap())
    {
        assert_eq!(g["name"], w["name"]);
        for key in ["p_combined", "p_ew"] {
            let (a, b) = (g[key].as_f64().unwrap(), w[key].as_f64().unwrap());
            assert!((a - b).abs() <= 1e-9 * b, "{key}: {a} vs {b}");
        }
        for key in ["D", "D_ew"] {
            let (a, b) = (g[key].as_f64().unwrap(), w[key].as_f64().unwrap());
            assert!((a - b).abs() < 1e-9, "{key}: {a} vs {b}");
        }
        assert!(g["degree"].is_string() && g["level"].is_string() && g["n"].is_u64());
    }

    // report: Markdown table and a PNG
    let analysis = dir.path().join("a.json");
    std::fs::write(&analysis, &stdout).unwrap();
    let figure = dir.path().join("f.png");
    let page = dir.path().join("r.html");
    let markdown = ok(&nlg_judge(&[
        "dhp",
        "report",
        "--run",
        &format!("fixture={}", analysis.display()),
        "--figure",
        figure.to_str().unwrap(),
        "--report",
        page.to_str().unwrap(),
    ]));
    // The HTML report: the chart inline, the same tables as escaped HTML.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<h2>Discernment by run</h2>"), "{html}");
    assert!(html.contains("<svg") && html.contains(">typos-minor</td>"));
    assert!(html.contains("<td>fixture</td>"));
    assert!(markdown.contains("| fixture |"), "{markdown}");
    assert!(
        markdown.contains("| typos-minor | C | minor | 30 |"),
        "{markdown}"
    );
    assert!(std::fs::metadata(&figure).unwrap().len() > 1000);
}

#[test]
fn bad_input_gets_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.jsonl");
    let message = error(&nlg_judge(&[
        "dhp",
        "perturb",
        "--task",
        "story-completion",
        "--perturbations",
        "reorder-minor",
        "--output",
        out.to_str().unwrap(),
        "--data-dir",
        "/nonexistent",
    ]));
    assert!(message.contains("/nonexistent"), "{message}");
    let qa = dir.path().join("qa.jsonl");
    write_qa(&qa);
    let message = error(&nlg_judge(&[
        "dhp",
        "perturb",
        "--task",
        "question-answering",
        "--input",
        qa.to_str().unwrap(),
        "--perturbations",
        "reorder-minor",
        "--output",
        out.to_str().unwrap(),
    ]));
    assert!(
        message.contains("unknown perturbation `reorder-minor`"),
        "{message}"
    );
    let message = error(&nlg_judge(&[
        "dhp", "perturb", "--task", "poetry", "--output", "x.jsonl",
    ]));
    assert!(message.contains("poetry"), "{message}");
    let scores = dir.path().join("s.jsonl");
    std::fs::write(
        &scores,
        "{\"item\": 1, \"perturbation\": \"original\", \"metric\": \"fluency\", \"score\": 3}\n\
         {\"item\": 1, \"perturbation\": \"typos\", \"level\": \"C\", \"metric\": \"fluency\"}\n",
    )
    .unwrap();
    let message = error(&nlg_judge(&[
        "dhp",
        "analyze",
        "--scores",
        scores.to_str().unwrap(),
    ]));
    assert!(
        message.contains("s.jsonl:2: missing field `score`"),
        "{message}"
    );
}

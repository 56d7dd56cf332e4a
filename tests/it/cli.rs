//! The `convert` and `compare` commands through the binary: data conversion and the
//! argument errors reported before any model is loaded.

use std::path::PathBuf;
use std::process::Command;

use nlg_judge::data::{find_shared_data_dir, read_contexts};

fn nlg_judge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
}

#[test]
fn convert_writes_readable_generic_jsonl() {
    let Some(data) = find_shared_data_dir() else {
        eprintln!("shared data not found; skipping");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (dataset, contexts, per_context) in
        [("summeval", 3, 16), ("topicalchat", 2, 6), ("webnlg", 4, 0)]
    {
        let output = dir.path().join(format!("{dataset}.jsonl"));
        let status = nlg_judge()
            .args(["convert", "--dataset", dataset, "--limit-contexts"])
            .arg(contexts.to_string())
            .arg("--data-dir")
            .arg(&data)
            .arg("--output")
            .arg(&output)
            .status()
            .unwrap();
        assert!(status.success(), "{dataset}");
        let read = read_contexts(&output).unwrap();
        assert_eq!(read.len(), contexts, "{dataset}");
        if per_context > 0 {
            assert!(read.iter().all(|c| c.candidates.len() == per_context));
        }
    }
}

fn compare_error(extra: &[&str], input: &PathBuf) -> String {
    let output = nlg_judge()
        .args([
            "compare",
            "--model",
            "no-such-model",
            "--no-cache",
            "--input",
        ])
        .arg(input)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    // Input and option errors exit with 2 (like usage errors), and so does a model that
    // does not exist; `no-such-model` is only looked for once the input and options
    // passed, so the callers can tell which stopped the run.
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn compare_reports_bad_arguments_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"context_id\":\"d\",\"context\":\"c\",\"candidate_id\":\"a\",\"candidate\":\"x\"}\n\
         {\"context_id\":\"d\",\"context\":\"c\",\"candidate_id\":\"b\",\"candidate\":\"y\"}\n",
    )
    .unwrap();
    let error = compare_error(&["--attribute", "wit"], &input);
    assert!(
        error.contains("unknown attribute `wit`") && !error.contains("no-such-model"),
        "{error}"
    );

    let template = dir.path().join("t.txt");
    std::fs::write(&template, "{a} {b} {summary}").unwrap();
    let error = compare_error(
        &[
            "--attribute",
            "fluency",
            "--template",
            template.to_str().unwrap(),
        ],
        &input,
    );
    assert!(
        error.contains("t.txt")
            && error.contains("`{summary}`")
            && !error.contains("no-such-model"),
        "{error}"
    );

    let error = compare_error(
        &[
            "--attribute",
            "fluency",
            "--design",
            "symmetric",
            "--comparisons",
            "3",
        ],
        &input,
    );
    assert!(
        error.contains("even") && !error.contains("no-such-model"),
        "{error}"
    );

    let missing = dir.path().join("missing.jsonl");
    let error = compare_error(&["--attribute", "fluency"], &missing);
    assert!(
        error.contains("missing.jsonl") && !error.contains("no-such-model"),
        "{error}"
    );

    // Everything valid but the model: the error names the unknown model.
    let error = compare_error(&["--attribute", "fluency"], &input);
    assert!(error.contains("no-such-model"), "{error}");
}

fn reproduce_error(args: &[&str]) -> String {
    let output = nlg_judge()
        .arg("reproduce")
        .args(args)
        .args(["--model", "no-such-model", "--no-cache"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    String::from_utf8(output.stderr).unwrap()
}

#[test]
fn reproduce_reports_bad_data_and_grids_before_loading_a_model() {
    let error = reproduce_error(&["summeval", "--data-dir", "/no/such/data"]);
    assert!(
        error.contains("/no/such/data/summeval/summeval.jsonl"),
        "{error}"
    );
    let error = reproduce_error(&["webnlg", "--limit-docs", "0"]);
    assert!(error.contains("--limit-docs"), "{error}");
    let Some(data) = find_shared_data_dir() else {
        eprintln!("shared data not found; skipping the grid checks");
        return;
    };
    let data = data.to_string_lossy().into_owned();
    let common = ["--data-dir", data.as_str(), "--limit-docs", "1"];
    let mut args = vec!["topicalchat"];
    args.extend(common);
    args.extend(["--grid", "4,7"]);
    let error = reproduce_error(&args);
    assert!(error.contains("R = 7") && error.contains("even"), "{error}");
    // Six responses allow at most 30 ordered pairs.
    let mut args = vec!["topicalchat"];
    args.extend(common);
    args.extend(["--grid", "32"]);
    let error = reproduce_error(&args);
    assert!(error.contains("N(N-1) = 30"), "{error}");
    // With good arguments the model is the first thing to fail.
    let mut args = vec!["topicalchat"];
    args.extend(common);
    let error = reproduce_error(&args);
    assert!(error.contains("no-such-model"), "{error}");
}

//! A candidate too long for the model does not sink its context: it is named (id,
//! context, input line, tokens needed) and left out, the other candidates are compared
//! and ranked, and the diagnostics carry a `too_long` warning. In the library with a
//! mock of a small window, and through the binary with SmolLM2 (8192 tokens) and a
//! 50,000-word candidate, as a user met it.

use std::process::Command;

use nlg_judge::engine::{MockScorer, ModelInfo, Scorer};
use nlg_judge::judge::diagnostics::{too_long, Audience, Status};
use nlg_judge::judge::pairwise::fit::set_aside_over_long;
use nlg_judge::judge::pairwise::CompareRequest;
use nlg_judge::progress::Progress;

use crate::common;

#[test]
fn over_long_candidates_are_named_and_the_rest_are_ranked() {
    let long = "word ".repeat(400);
    let contexts = vec![
        common::contexts::context_of(
            "d1",
            "A short article.",
            &[
                ("a".into(), "A summary.".into()),
                ("huge".into(), long.clone()),
                ("b".into(), "Another summary.".into()),
            ],
        ),
        // Two candidates, one too long: nothing left to compare with.
        common::contexts::context_of(
            "d2",
            "Another article.",
            &[("c".into(), "Short.".into()), ("big".into(), long)],
        ),
        common::contexts::context_of(
            "d3",
            "Fine.",
            &[("e".into(), "One.".into()), ("f".into(), "Two.".into())],
        ),
    ];
    let mock = MockScorer::new();
    let info = ModelInfo {
        context_window: 1000,
        ..mock.info().clone()
    };
    let mock = mock.with_info(info);
    let options = CompareRequest::new("coherence")
        .options(Progress::none())
        .unwrap();
    let (kept, aside) = set_aside_over_long(&mock, contexts, &options).unwrap();
    let kept_ids: Vec<(&str, Vec<&str>)> = kept
        .iter()
        .map(|c| {
            (
                c.id.as_str(),
                c.candidates.iter().map(|k| k.id.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(kept_ids, [("d1", vec!["a", "b"]), ("d3", vec!["e", "f"])]);
    let named: Vec<(&str, &str)> = aside
        .iter()
        .map(|s| (s.context_id.as_str(), s.candidate_id.as_str()))
        .collect();
    assert_eq!(named, [("d1", "huge"), ("d2", "big"), ("d2", "c")]);
    assert!(
        aside[0].tokens > Some(1000) && aside[0].limit == 1000,
        "{aside:?}"
    );
    assert_eq!(aside[2].tokens, None, "nothing left to meet");
    let check = too_long(&aside, Audience::CommandLine).unwrap();
    assert_eq!(check.status, Status::Warn);
    assert!(
        check.message.starts_with("3 candidates not ranked")
            && check.message.contains("`huge` of context `d1`"),
        "{}",
        check.message
    );
}

#[test]
fn a_50000_word_candidate_is_left_out_by_name_and_the_others_ranked() {
    let model = common::card_file("smollm2-135m-instruct");
    let _ = model;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let row = |id: &str, text: &str| {
        serde_json::json!({"context_id": "news", "context": "The council met on Monday and \
            approved the new budget for the town's libraries.", "candidate_id": id,
            "candidate": text})
        .to_string()
    };
    let lines = [
        row("S1", "The council approved the library budget."),
        row("P0", &"budget ".repeat(50_000)),
        row("S2", "Libraries get a new budget from the council."),
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let output = dir.path().join("out.jsonl");
    let run = Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(["compare", "--model", "smollm2-135m-instruct", "--no-cache"])
        .args(["--attribute", "coherence", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let at = format!("{}:2", input.display());
    assert!(
        stdout.contains("WARNING too_long: 1 candidate not ranked")
            && stdout.contains(&format!("`P0` of context `news` ({at})"))
            && stdout.contains("more than the model's window of 8192"),
        "{stdout}"
    );
    let written = std::fs::read_to_string(&output).unwrap();
    let ids: Vec<String> = written
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["candidate_id"].to_string())
        .collect();
    assert_eq!(ids, ["\"S1\"", "\"S2\""]);
    let mut sidecar = output.as_os_str().to_owned();
    sidecar.push(".diagnostics.json");
    let diagnostics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sidecar).unwrap()).unwrap();
    assert!(diagnostics["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "too_long" && c["status"] == "warn"));
}

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

/// Relative rubric grading with feedback keeps room for the feedback: a candidate whose
/// direct comparison fits, but not with the feedback's token bound after it, is set aside
/// (a generation past the window would fail the run), named with the feedback's share, and
/// the remedy offers less feedback room or none.
#[test]
fn relative_grading_keeps_room_for_the_feedback() {
    use nlg_judge::engine::Conventions;
    use nlg_judge::judge::rubric::relative::RelativeGrading;
    use nlg_judge::judge::rubric::Rubric;
    use nlg_judge::judge::Task;

    let contexts = vec![common::contexts::context_of(
        "d1",
        "A short article.",
        &[
            ("a".into(), "A summary.".into()),
            ("mid".into(), "word ".repeat(200)),
            ("b".into(), "Another summary.".into()),
        ],
    )];
    let mock = MockScorer::new().with_conventions(Conventions {
        rubric_protocol: Some("prometheus".into()),
        ..Conventions::default()
    });
    let rubric = Rubric::builtin("coherence", Task::Summary).unwrap();
    let direct = RelativeGrading::new(&mock, rubric, None, None, false).unwrap();
    // The mock counts bytes: the longest direct comparison (`mid` against `a`).
    let longest = direct
        .choice_request(&mock, &contexts[0], (1, 0))
        .map(|r| mock.encode_prompt(&r.prompt).unwrap().input.len())
        .unwrap();
    let shortest = direct
        .choice_request(&mock, &contexts[0], (0, 2))
        .map(|r| mock.encode_prompt(&r.prompt).unwrap().input.len())
        .unwrap();
    // A window that holds every direct comparison, and the short pair with 100 tokens of
    // feedback, but not `mid`'s comparisons with them.
    let window = longest + 50;
    assert!(shortest + 100 + 8 < window && longest + 100 > window);
    let info = ModelInfo {
        context_window: window,
        ..mock.info().clone()
    };
    let mock = mock.with_info(info);
    let options_with = |feedback: Option<usize>| {
        let mut options = CompareRequest::new("coherence")
            .options(Progress::none())
            .unwrap();
        let relative = RelativeGrading {
            feedback_tokens: feedback,
            ..direct.clone()
        };
        options.relative = Some(Box::new(relative));
        options
    };
    let (kept, aside) = set_aside_over_long(&mock, contexts.clone(), &options_with(None)).unwrap();
    assert!(aside.is_empty(), "{aside:?}");
    assert_eq!(kept[0].candidates.len(), 3);
    let (kept, aside) = set_aside_over_long(&mock, contexts, &options_with(Some(100))).unwrap();
    let ids: Vec<&str> = kept[0].candidates.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(aside[0].candidate_id, "mid");
    assert_eq!(aside[0].feedback_tokens, Some(100));
    assert!(aside[0].tokens.unwrap() > window, "{aside:?}");
    assert!(
        aside[0]
            .describe()
            .contains("(100 of them for the feedback)"),
        "{}",
        aside[0].describe()
    );
    let remedy = too_long(&aside, Audience::CommandLine)
        .unwrap()
        .remedy
        .unwrap();
    assert!(
        remedy.contains("--max-feedback-tokens") && remedy.contains("--no-feedback"),
        "{remedy}"
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

//! Thinking judges (issue 59, item 3): a protocol with reasoning markers makes each
//! answer in two rounds (the reasoning within its budget, then the feedback and verdict),
//! the reasoning kept in the output, a reasoning left open closed before the verdict is
//! read and counted, markers inside the reasoning never taken for the verdict, and
//! thinking switched off where the protocol says how. A scripted mock judge stands in for
//! the model: it reasons when its answer starts empty and answers after `Feedback:`.

use std::sync::{Arc, Mutex};

use nlg_judge::data::{Candidate, Context};
use nlg_judge::engine::MockScorer;
use nlg_judge::judge::rubric::protocol::Origin;
use nlg_judge::judge::rubric::run::RubricMethod;
use nlg_judge::judge::rubric::{FormatOutcome, Rubric, RubricProtocol};
use nlg_judge::judge::{run_scoring, ResolvedMethod, ScoreRun, Task};
use nlg_judge::progress::Progress;

const THINKER: &str = r#"
name = "thinker"

[absolute]
user = "Grade this {{ output_noun }}: {{ response }}"
opening = "Feedback:"
marker = "Score:"
separator = " "

[reasoning]
open = "<think>"
close = "</think>"
after_close = "\n\n"
off = "<think>\n\n</think>\n\n"
"#;

/// What the scripted judge writes when it reasons: a score quoted inside the reasoning,
/// a closing marker, and an answer the reasoning round never keeps (it stops at `</think>`).
const REASONING: &str = "<think>\nIt may be Score: 5? No, less.\n</think>\n\nFeedback: unseen";

fn contexts() -> Vec<Context> {
    let candidate = |id: &str| Candidate {
        id: id.into(),
        text: format!("summary {id}"),
        reference: None,
        scores: Default::default(),
        system_id: None,
        metadata: Default::default(),
        source: None,
    };
    vec![Context {
        id: "d".into(),
        text: String::new(),
        candidates: vec![candidate("one"), candidate("two")],
    }]
}

/// Prompts a scripted judge saw.
type Seen = Arc<Mutex<Vec<String>>>;

/// The judge, the prompts it was asked to continue, and those its labels were read after.
fn judge(reasons: bool) -> (MockScorer, Seen, Seen) {
    let generated: Seen = Arc::default();
    let labelled: Seen = Arc::default();
    let (g, l) = (Arc::clone(&generated), Arc::clone(&labelled));
    let judge = MockScorer::new()
        .with_generation(move |prompt: &str| {
            g.lock().unwrap().push(prompt.to_string());
            Ok(if prompt.ends_with("Feedback:") {
                " Fair.\nScore: 4".to_string()
            } else if reasons {
                REASONING.to_string()
            } else {
                "Feedback: Direct.\nScore: 2".to_string()
            })
        })
        .with_labels(move |prompt: &str, labels: &[String]| {
            l.lock().unwrap().push(prompt.to_string());
            Ok(labels
                .iter()
                .map(|label| if label.trim() == "4" { 0.6f64 } else { 0.1 }.ln())
                .collect())
        });
    (judge, generated, labelled)
}

fn grade(judge: &mut MockScorer, budget: Option<usize>, off: bool) -> ScoreRun {
    let protocol = RubricProtocol::from_toml(THINKER, Origin::Inline).unwrap();
    let rubric = Rubric::builtin("coherence", Task::Summary).unwrap();
    let method = RubricMethod::new(judge, rubric, Some(protocol), Some(60), false)
        .unwrap()
        .with_thinking(budget, off)
        .unwrap();
    run_scoring(
        judge,
        &contexts(),
        &ResolvedMethod::Rubric(method),
        &Progress::none(),
        None,
    )
    .unwrap()
}

#[test]
fn a_thinking_judge_reasons_first_and_its_verdict_is_read_after_the_reasoning() {
    let (mut judge, generated, labelled) = judge(true);
    let run = grade(&mut judge, None, false);
    // Two rounds per candidate: the reasoning from an empty answer, then the feedback
    // after the closed reasoning and the opening.
    let generated = generated.lock().unwrap();
    assert_eq!(generated.len(), 4, "{generated:?}");
    assert!(generated[..2]
        .iter()
        .all(|p| p.ends_with("summary one") || p.ends_with("summary two")));
    for prompt in &generated[2..] {
        assert!(
            prompt.ends_with("<think>\nIt may be Score: 5? No, less.\n</think>\n\nFeedback:"),
            "{prompt:?}"
        );
    }
    // The score is read after the verdict's marker, not the one quoted in the reasoning.
    for prompt in labelled.lock().unwrap().iter() {
        assert!(
            prompt.ends_with("</think>\n\nFeedback: Fair.\nScore:"),
            "{prompt:?}"
        );
    }
    for entry in &run.candidates {
        assert_eq!(
            entry.reasoning.as_deref(),
            Some("It may be Score: 5? No, less.")
        );
        assert_eq!(entry.feedback.as_deref(), Some("Fair."));
        assert_eq!(entry.format, Some(FormatOutcome::Kept));
        assert!(!entry.reasoning_cut);
        assert_eq!(entry.distribution.as_ref().unwrap().argmax, 4);
    }
    let format = run.diagnostics.get("format").unwrap();
    assert!(!format.message.contains("left open"), "{}", format.message);
}

#[test]
fn a_reasoning_cut_at_its_budget_is_closed_before_the_verdict_and_counted() {
    let (mut judge, _, labelled) = judge(true);
    // The mock's tokens are bytes: the reasoning is cut after `<think>\nIt`.
    let run = grade(&mut judge, Some(10), false);
    for prompt in labelled.lock().unwrap().iter() {
        assert!(
            prompt.ends_with("<think>\nIt\n</think>\n\nFeedback: Fair.\nScore:"),
            "{prompt:?}"
        );
    }
    for entry in &run.candidates {
        assert!(entry.reasoning_cut);
        assert_eq!(entry.reasoning.as_deref(), Some("It"));
        assert_eq!(entry.format, Some(FormatOutcome::Kept));
    }
    let format = run.diagnostics.get("format").unwrap();
    assert!(
        format
            .message
            .contains("2 reasoning(s) left open at the reasoning budget"),
        "{}",
        format.message
    );
}

#[test]
fn thinking_off_opens_the_answer_with_an_empty_reasoning_in_one_round() {
    let (mut judge, generated, labelled) = judge(true);
    let run = grade(&mut judge, None, true);
    let generated = generated.lock().unwrap();
    assert_eq!(generated.len(), 2, "one round per candidate: {generated:?}");
    for prompt in generated.iter() {
        assert!(
            prompt.ends_with("<think>\n\n</think>\n\nFeedback:"),
            "{prompt:?}"
        );
    }
    for prompt in labelled.lock().unwrap().iter() {
        assert!(
            prompt.ends_with("</think>\n\nFeedback: Fair.\nScore:"),
            "{prompt:?}"
        );
    }
    assert!(run
        .candidates
        .iter()
        .all(|c| c.reasoning.is_none() && !c.reasoning_cut));
}

#[test]
fn a_judge_that_does_not_reason_is_read_from_its_first_answer() {
    let (mut judge, generated, labelled) = judge(false);
    let run = grade(&mut judge, None, false);
    // No second round: what it wrote was its whole answer, read without an opening it
    // never saw.
    assert_eq!(generated.lock().unwrap().len(), 2);
    for prompt in labelled.lock().unwrap().iter() {
        assert!(prompt.ends_with("Feedback: Direct.\nScore:"), "{prompt:?}");
    }
    for entry in &run.candidates {
        assert_eq!(entry.feedback.as_deref(), Some("Feedback: Direct."));
        assert!(entry.reasoning.is_none());
    }
}

#[test]
fn reasoning_options_are_refused_where_the_protocol_has_no_reasoning() {
    let (judge, _, _) = judge(true);
    let rubric = Rubric::builtin("coherence", Task::Summary).unwrap();
    let plain = RubricMethod::new(
        &judge,
        rubric.clone(),
        Some(RubricProtocol::plain()),
        Some(60),
        false,
    )
    .unwrap();
    let error = format!(
        "{:#}",
        plain.clone().with_thinking(Some(100), false).unwrap_err()
    );
    assert!(error.contains("has no reasoning"), "{error}");
    let error = format!("{:#}", plain.with_thinking(None, true).unwrap_err());
    assert!(error.contains("has no reasoning"), "{error}");
    let no_off = THINKER.replace("off = \"<think>\\n\\n</think>\\n\\n\"\n", "");
    let protocol = RubricProtocol::from_toml(&no_off, Origin::Inline).unwrap();
    let method = RubricMethod::new(&judge, rubric, Some(protocol), Some(60), false).unwrap();
    let error = format!("{:#}", method.with_thinking(None, true).unwrap_err());
    assert!(error.contains("cannot switch thinking off"), "{error}");
}

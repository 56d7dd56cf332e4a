//! Rubric grading against transformers (issue 51): a tiny random-weight Mistral judge
//! (`tests/fixtures/rubric/tiny_mistral`) grades the example of `inputs.json` in
//! Prometheus 2's protocol, and everything the run reads must equal what
//! `make_parity_fixture.py` computed with transformers from the same prompt: the prompt's
//! tokens, the greedy feedback (token for token, and its text), where the marker went, and
//! the score distribution read after it, within 1e-4 (normalised; raw relative to its
//! size). Cases: absolute grading with and without a reference answer, without feedback
//! (the score right after the prompt, through the prefix trie), and relative grading's
//! P(A).

use std::path::{Path, PathBuf};

use crate::common;
use crate::rubric::example;
use nlg_judge::arch::{Precision, WeightPolicy};
use nlg_judge::data::{Candidate, Context};
use nlg_judge::engine::{load_decoder, DecoderScorer, DecoderSettings, LoadOptions, Scorer};
use nlg_judge::judge::attribute::{Attribute, Task};
use nlg_judge::judge::pairwise::run::{run_compare, CompareOptions};
use nlg_judge::judge::pairwise::{Design, PairwiseTemplate};
use nlg_judge::judge::rubric::protocol::Start;
use nlg_judge::judge::rubric::relative::RelativeGrading;
use nlg_judge::judge::rubric::run::RubricMethod;
use nlg_judge::judge::rubric::{FormatOutcome, RubricProtocol};
use nlg_judge::judge::{run_scoring, ResolvedMethod};
use nlg_judge::progress::Progress;
use nlg_judge::rank::RankMethod;
use nlg_judge::runtime::{resolve_model, ChatTemplate};
use serde_json::Value;

/// Agreement asked of every probability (f32 model arithmetic against transformers' f32).
const TOLERANCE: f64 = 1e-4;

pub(crate) fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rubric")
}

fn reference() -> Value {
    let path = fixture_dir().join("parity.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

pub(crate) fn case<'a>(reference: &'a Value, name: &str) -> &'a Value {
    reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name} in parity.json"))
}

pub(crate) fn numbers(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

pub(crate) fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn judge() -> DecoderScorer {
    load_judge("tiny_mistral").1
}

/// The fixture checkpoint directory `name` loaded as a user's: the chat template
/// nlg-judge recognised in it, and the judge.
pub(crate) fn load_judge(name: &str) -> (ChatTemplate, DecoderScorer) {
    let cache = tempfile::tempdir().unwrap();
    let options = LoadOptions {
        resolve: common::resolve_options_in(cache.path()),
        device: "cpu".to_string(),
        weights: WeightPolicy::F32,
        precision: Precision::F32,
        decoder: DecoderSettings::default(),
        memory: Default::default(),
        progress: Default::default(),
    };
    let dir = fixture_dir().join(name);
    let resolved = resolve_model(dir.to_str().unwrap(), &options.resolve).unwrap();
    let template = resolved.chat_template.clone();
    (template, load_decoder(&resolved, &options).unwrap())
}

fn candidate(id: &str, text: &str, reference: &str) -> Candidate {
    Candidate {
        id: id.to_string(),
        text: text.to_string(),
        reference: Some(reference.to_string()),
        scores: Default::default(),
        system_id: None,
        metadata: Default::default(),
        source: None,
    }
}

/// The example as one context: the response (and, for relative grading, response B).
pub(crate) fn example_context(both: bool) -> Context {
    let (_, inputs) = example();
    let text = |key: &str| inputs[key].as_str().unwrap().to_string();
    let mut candidates = vec![candidate("a", &text("response"), &text("reference"))];
    if both {
        candidates.push(candidate("b", &text("response_b"), &text("reference")));
    }
    Context {
        id: "example".into(),
        text: text("context"),
        candidates,
    }
}

pub(crate) fn assert_close(ours: &[f64], theirs: &[f64], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}");
    for (k, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            (a - b).abs() <= TOLERANCE,
            "{what}[{k}]: ours {a}, transformers {b} (ours {ours:?}, transformers {theirs:?})"
        );
    }
}

/// Raw probabilities are tiny for a random model: compare them relative to their size.
pub(crate) fn assert_close_relative(ours: &[f64], theirs: &[f64], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}");
    for (k, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            (a - b).abs() <= TOLERANCE * b.abs(),
            "{what}[{k}]: ours {a}, transformers {b}"
        );
    }
}

fn outcome(name: &str) -> FormatOutcome {
    match name {
        "max-tokens" => FormatOutcome::Cut,
        "eos" => FormatOutcome::Missing,
        other => panic!("fixture finish {other}"),
    }
}

fn absolute_case(scorer: &mut DecoderScorer, name: &str, with_reference: bool, feedback: bool) {
    let reference = reference();
    let expected = case(&reference, name);
    let max_tokens = reference["max_feedback_tokens"].as_u64().unwrap() as usize;
    let (rubric, _) = example();
    let method = RubricMethod::new(
        scorer,
        rubric,
        Some(RubricProtocol::prometheus()),
        feedback.then_some(max_tokens),
        with_reference,
    )
    .unwrap();
    let context = example_context(false);
    // The prompt's tokens: our chat wrapping and tokenisation against transformers'.
    let request = method
        .feedback_request(
            scorer,
            &context,
            &context.candidates[0],
            Start::Feedback(""),
            max_tokens,
        )
        .unwrap();
    assert_eq!(
        scorer.encode_prompt(&request.prompt).unwrap().input,
        ids(&expected["prompt_ids"]),
        "{name}: prompt tokens"
    );
    let run = run_scoring(
        scorer,
        std::slice::from_ref(&context),
        &ResolvedMethod::Rubric(method),
        &Progress::none(),
        None,
    )
    .unwrap();
    let entry = &run.candidates[0];
    if feedback {
        assert_eq!(
            entry.feedback.as_deref(),
            Some(expected["feedback"].as_str().unwrap().trim()),
            "{name}: the greedy feedback"
        );
        assert_eq!(
            entry.format,
            Some(outcome(expected["finish"].as_str().unwrap())),
            "{name}: format"
        );
    } else {
        assert!(entry.feedback.is_none(), "{name}");
    }
    let distribution = entry.distribution.as_ref().expect("a distribution");
    assert_eq!(distribution.scores, [1, 2, 3, 4, 5]);
    assert_close(
        &distribution.normalised,
        &numbers(&expected["normalised"]),
        &format!("{name}: normalised"),
    );
    assert_close_relative(
        &distribution.raw,
        &numbers(&expected["raw"]),
        &format!("{name}: raw"),
    );
    let expectation: f64 = distribution
        .normalised
        .iter()
        .zip(1..)
        .map(|(p, s)| p * s as f64)
        .sum();
    assert!((entry.score - expectation).abs() < 1e-9, "{name}: score");
}

#[test]
fn prometheus_absolute_grading_reads_what_transformers_reads() {
    let mut scorer = judge();
    absolute_case(&mut scorer, "absolute", true, true);
    absolute_case(&mut scorer, "absolute_no_reference", false, true);
    absolute_case(&mut scorer, "absolute_direct", true, false);
}

#[test]
fn prometheus_relative_grading_reads_p_a_as_transformers_does() {
    let reference = reference();
    let expected = case(&reference, "relative");
    let max_tokens = reference["max_feedback_tokens"].as_u64().unwrap() as usize;
    let mut scorer = judge();
    let (rubric, _) = example();
    let task = Task::Summary;
    let mut options = CompareOptions::new(
        task,
        Attribute::named("coherence").unwrap(),
        PairwiseTemplate::builtin("c1", task).unwrap(),
    );
    options.design = Design::Full;
    options.rank = RankMethod::WinRatio;
    let relative = RelativeGrading::new(
        &scorer,
        rubric,
        Some(RubricProtocol::prometheus()),
        Some(max_tokens),
        true,
    )
    .unwrap();
    options.relative = Some(Box::new(relative));
    let result = run_compare(&mut scorer, &[example_context(true)], &options, None).unwrap();
    let context = &result.contexts[0];
    let forward = context
        .comparisons
        .iter()
        .find(|c| context.candidate_ids[c.first] == "a" && context.candidate_ids[c.second] == "b")
        .expect("the response shown first against response B");
    let p_a = numbers(&expected["normalised"])[0];
    assert!(
        (forward.p_a - p_a).abs() <= TOLERANCE,
        "P(A): ours {}, transformers {p_a}",
        forward.p_a
    );
    let reading = &result.feedbacks[&("example".to_string(), "a".to_string(), "b".to_string())];
    assert_eq!(
        reading.feedback,
        expected["feedback"].as_str().unwrap().trim()
    );
    assert_eq!(
        reading.format,
        outcome(expected["finish"].as_str().unwrap())
    );
}

//! Rubric grading against transformers where the base family's chat template matters
//! (issue 59): tiny random-weight judges of the new families, each a checkpoint directory
//! loaded as a user's (`tests/fixtures/rubric/tiny_llama31`, `tiny_llama31_pairwise`,
//! `tiny_qwen3`, `tiny_qwen3_thinking`, `tiny_phi35`, `tiny_qwen25`), grade the example
//! of `inputs.json`, and everything the run reads must equal what
//! `make_parity_llama31.py` / `make_parity_qwen3.py` / `make_parity_phi35.py` /
//! `make_parity_qwen25.py` computed with transformers: the prompt's token ids (transformers' `apply_chat_template`), the greedy
//! feedback (token for token as text), its format outcome, and the distribution read after
//! the last result marker, within 1e-4 (scores: normalised, and raw relative to its size;
//! relative grading: P(A)).
//!
//! - Llama 3.1 (`llama3.1`: the dated system header) in Selene Mini's protocol, with and
//!   without a reference, and without feedback; its relative grading's P(A) with feedback
//!   and without (`tiny_llama31_pairwise`, the same model on a tokenizer trained on the
//!   pairwise prompt).
//! - Qwen3 (ChatML, Qwen3-0.6B's template) in `plain-thinking` with thinking off: the
//!   answer opens with the empty reasoning `<think>\n\n</think>\n\n` that
//!   `enable_thinking=False` writes, then `Feedback:`; with feedback and without. With
//!   thinking on (`tiny_qwen3_thinking`, the same model with another seed): the reasoning
//!   round after apply_chat_template's prompt, cut at its budget and closed by us
//!   (`\n</think>\n\n`), then the feedback round after it and `Feedback:`.
//! - Phi-3.5 (`phi3`; Llama 2's tokenizer with byte fallback, role tokens that take the
//!   newline after them) in GLIDER's protocol, each score read on its own line after
//!   `<score>`; with feedback, which the model ends with `<|end|>` (not the checkpoint's
//!   eos: the run stops at the chat template's end of turn), and without.
//! - Qwen2.5 (ChatML, Qwen2.5-Instruct's template with its default system message, which
//!   Prometheus's own system messages replace) in Prometheus 2's protocol, as M-Prometheus
//!   is prompted: absolute with and without a reference, without feedback, and relative
//!   grading's P(A) with feedback.

use crate::rubric::example;
use crate::rubric_parity::{
    assert_close, assert_close_relative, case, example_context, fixture_dir, ids, load_judge,
    numbers,
};
use nlg_judge::engine::{DecoderScorer, Scorer};
use nlg_judge::judge::attribute::{Attribute, Task};
use nlg_judge::judge::pairwise::run::{run_compare, CompareOptions};
use nlg_judge::judge::pairwise::{Design, PairwiseTemplate};
use nlg_judge::judge::rubric::protocol::Start;
use nlg_judge::judge::rubric::relative::RelativeGrading;
use nlg_judge::judge::rubric::run::RubricMethod;
use nlg_judge::judge::rubric::{FormatOutcome, RubricProtocol};
use nlg_judge::judge::{run_scoring, ResolvedMethod, ScoreDistribution};
use nlg_judge::progress::Progress;
use nlg_judge::rank::RankMethod;
use serde_json::Value;

fn reference(file: &str) -> Value {
    let path = fixture_dir().join(file);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// One grading of the example, as a case of `reference` expects it.
struct Grading<'a> {
    reference: &'a Value,
    name: &'a str,
    protocol: &'a str,
    with_reference: bool,
    feedback: bool,
    thinking_off: bool,
}

fn grade(scorer: &mut DecoderScorer, grading: Grading) {
    let Grading {
        reference,
        name,
        protocol,
        with_reference,
        feedback,
        thinking_off,
    } = grading;
    let expected = case(reference, name);
    let max_tokens = reference["max_feedback_tokens"].as_u64().unwrap() as usize;
    let (rubric, _) = example();
    let mut method = RubricMethod::new(
        scorer,
        rubric,
        Some(RubricProtocol::named(protocol).unwrap()),
        feedback.then_some(max_tokens),
        with_reference,
    )
    .unwrap();
    if thinking_off {
        method = method.with_thinking(None, true).unwrap();
    }
    let context = example_context(false);
    if feedback {
        // The prompt's tokens, the answer's opening included: our chat wrapping and
        // tokenisation against transformers' apply_chat_template.
        let request = method
            .feedback_request(
                scorer,
                &context,
                &context.candidates[0],
                Start::Feedback(""),
                max_tokens,
            )
            .unwrap();
        let ours = scorer.encode_prompt(&request.prompt).unwrap().input;
        assert_eq!(ours, ids(&expected["prompt_ids"]), "{name}: prompt tokens");
        if let Some(template) = expected.get("template_ids") {
            let template = ids(template);
            assert!(
                ours.starts_with(&template),
                "{name}: apply_chat_template's tokens {template:?} open the prompt {ours:?}"
            );
        }
    }
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
            Some(expected["feedback"].as_str().unwrap()),
            "{name}: the greedy feedback"
        );
        let format: FormatOutcome = serde_json::from_value(expected["format"].clone()).unwrap();
        assert_eq!(entry.format, Some(format), "{name}: format");
        assert_eq!(
            entry.reasoning, None,
            "{name}: no reasoning with thinking off"
        );
        assert!(!entry.reasoning_cut, "{name}");
    } else {
        assert!(entry.feedback.is_none(), "{name}");
    }
    scores_match(entry.distribution.as_ref(), expected, name);
}

/// The distribution over 1-5 read after the marker, against transformers'.
fn scores_match(distribution: Option<&ScoreDistribution>, expected: &Value, name: &str) {
    let distribution = distribution.expect("a distribution");
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
}

/// Relative grading of the example's response (shown first, as A) against its
/// `response_b` in `protocol`, as case `name` of `reference` expects it: the prompt's token
/// ids, the greedy feedback and its format outcome, and P(A) read after the last marker
/// (right after the prompt and the marker without feedback), within 1e-4.
fn compare(
    scorer: &mut DecoderScorer,
    reference: &Value,
    name: &str,
    protocol: &str,
    with_reference: bool,
    feedback: bool,
) {
    let expected = case(reference, name);
    let max_tokens = reference["max_feedback_tokens"].as_u64().unwrap() as usize;
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
        &*scorer,
        rubric,
        Some(RubricProtocol::named(protocol).unwrap()),
        feedback.then_some(max_tokens),
        with_reference,
    )
    .unwrap();
    let context = example_context(true);
    if feedback {
        let request = relative
            .feedback_request(&*scorer, &context, (0, 1), Start::Feedback(""), max_tokens)
            .unwrap();
        assert_eq!(
            scorer.encode_prompt(&request.prompt).unwrap().input,
            ids(&expected["prompt_ids"]),
            "{name}: prompt tokens"
        );
    }
    options.relative = Some(Box::new(relative));
    let result = run_compare(scorer, &[context], &options, None).unwrap();
    let context = &result.contexts[0];
    let forward = context
        .comparisons
        .iter()
        .find(|c| context.candidate_ids[c.first] == "a" && context.candidate_ids[c.second] == "b")
        .expect("the response shown first against response B");
    let key = ("example".to_string(), "a".to_string(), "b".to_string());
    if feedback {
        let reading = &result.feedbacks[&key];
        assert_eq!(
            reading.feedback,
            expected["feedback"].as_str().unwrap(),
            "{name}: the greedy feedback"
        );
        let format: FormatOutcome = serde_json::from_value(expected["format"].clone()).unwrap();
        assert_eq!(reading.format, format, "{name}: format");
    } else {
        assert!(!result.feedbacks.contains_key(&key), "{name}");
    }
    assert_close(
        &[forward.p_a],
        &numbers(&expected["normalised"])[..1],
        &format!("{name}: P(A)"),
    );
}

#[test]
fn selene_on_llama_3_1_reads_what_transformers_reads() {
    let reference = reference("parity_llama31.json");
    let (template, mut scorer) = load_judge("tiny_llama31");
    assert_eq!(
        template.family(),
        "llama3.1",
        "the template recognised in tokenizer_config.json"
    );
    assert!(scorer.info().conventions.chat);
    for (name, with_reference, feedback) in [
        ("absolute", true, true),
        ("absolute_no_reference", false, true),
        ("absolute_direct", true, false),
    ] {
        grade(
            &mut scorer,
            Grading {
                reference: &reference,
                name,
                protocol: "selene",
                with_reference,
                feedback,
                thinking_off: false,
            },
        );
    }
}

#[test]
fn selene_relative_grading_on_llama_3_1_reads_p_a_as_transformers_does() {
    let reference = reference("parity_llama31_pairwise.json");
    let (template, mut scorer) = load_judge("tiny_llama31_pairwise");
    assert_eq!(template.family(), "llama3.1");
    // Selene's pairwise prompt has no place for a reference answer.
    compare(&mut scorer, &reference, "relative", "selene", false, true);
    compare(
        &mut scorer,
        &reference,
        "relative_direct",
        "selene",
        false,
        false,
    );
}

#[test]
fn plain_thinking_on_qwen3_with_thinking_off_reads_what_transformers_reads() {
    let reference = reference("parity_qwen3.json");
    let (template, mut scorer) = load_judge("tiny_qwen3");
    assert_eq!(
        template.family(),
        "chatml",
        "the template recognised in tokenizer_config.json"
    );
    assert!(scorer.info().conventions.chat);
    for (name, feedback) in [
        ("absolute_no_thinking", true),
        ("absolute_direct_no_thinking", false),
    ] {
        grade(
            &mut scorer,
            Grading {
                reference: &reference,
                name,
                protocol: "plain-thinking",
                with_reference: true,
                feedback,
                thinking_off: true,
            },
        );
    }
}

#[test]
fn plain_thinking_on_qwen3_with_thinking_on_reads_what_transformers_reads() {
    let reference = reference("parity_qwen3_thinking.json");
    let name = "absolute_thinking";
    let expected = case(&reference, name);
    let (template, mut scorer) = load_judge("tiny_qwen3_thinking");
    assert_eq!(template.family(), "chatml");
    let max_tokens = reference["max_feedback_tokens"].as_u64().unwrap() as usize;
    let budget = reference["reasoning_tokens"].as_u64().unwrap() as usize;
    let (rubric, _) = example();
    let method = RubricMethod::new(
        &scorer,
        rubric,
        Some(RubricProtocol::named("plain-thinking").unwrap()),
        Some(max_tokens),
        true,
    )
    .unwrap()
    .with_thinking(Some(budget), false)
    .unwrap();
    let context = example_context(false);
    // The reasoning round's prompt is apply_chat_template's with thinking on; the
    // feedback round's follows the reasoning as we close it, and the opening.
    let thought = expected["thought"].as_str().unwrap();
    for (start, field) in [
        (Start::Reasoning, "template_ids"),
        (Start::Feedback(thought), "prompt_ids"),
    ] {
        let request = method
            .feedback_request(&scorer, &context, &context.candidates[0], start, max_tokens)
            .unwrap();
        assert_eq!(
            scorer.encode_prompt(&request.prompt).unwrap().input,
            ids(&expected[field]),
            "{name}: {field}"
        );
    }
    let run = run_scoring(
        &mut scorer,
        std::slice::from_ref(&context),
        &ResolvedMethod::Rubric(method),
        &Progress::none(),
        None,
    )
    .unwrap();
    let entry = &run.candidates[0];
    // The greedy reasoning (cut at its budget, closed by us), then the greedy feedback.
    assert_eq!(
        entry.reasoning.as_deref(),
        expected["reasoning"].as_str(),
        "{name}: the reasoning"
    );
    assert!(entry.reasoning_cut, "{name}: closed by us");
    assert_eq!(
        entry.feedback.as_deref(),
        expected["feedback"].as_str(),
        "{name}: the greedy feedback"
    );
    let format: FormatOutcome = serde_json::from_value(expected["format"].clone()).unwrap();
    assert_eq!(entry.format, Some(format), "{name}: format");
    scores_match(entry.distribution.as_ref(), expected, name);
}

#[test]
fn glider_on_phi_3_5_reads_what_transformers_reads() {
    let reference = reference("parity_phi35.json");
    let (template, mut scorer) = load_judge("tiny_phi35");
    assert_eq!(
        template.family(),
        "phi3",
        "the template recognised in tokenizer_config.json"
    );
    assert!(scorer.info().conventions.chat);
    // The greedy feedback ends where the model writes `<|end|>`, which the checkpoint's
    // tokenizer_config.json does not call its eos (`<|endoftext|>`).
    assert_eq!(case(&reference, "absolute")["finish"], "eos");
    for (name, feedback) in [("absolute", true), ("absolute_direct", false)] {
        grade(
            &mut scorer,
            Grading {
                reference: &reference,
                name,
                protocol: "glider",
                with_reference: false,
                feedback,
                thinking_off: false,
            },
        );
    }
}

#[test]
fn prometheus_on_qwen_2_5_reads_what_transformers_reads() {
    let reference = reference("parity_qwen25.json");
    let (template, mut scorer) = load_judge("tiny_qwen25");
    assert_eq!(
        template.family(),
        "chatml",
        "the template recognised in tokenizer_config.json"
    );
    // Qwen2.5's default system message, read from the template's tool-free branch
    // (Prometheus gives its own, so it is not written in these prompts).
    assert_eq!(
        template.default_system(),
        reference["default_system"].as_str()
    );
    assert!(scorer.info().conventions.chat);
    for (name, with_reference, feedback) in [
        ("absolute", true, true),
        ("absolute_no_reference", false, true),
        ("absolute_direct", true, false),
    ] {
        grade(
            &mut scorer,
            Grading {
                reference: &reference,
                name,
                protocol: "prometheus",
                with_reference,
                feedback,
                thinking_off: false,
            },
        );
    }
    compare(
        &mut scorer,
        &reference,
        "relative",
        "prometheus",
        true,
        true,
    );
}

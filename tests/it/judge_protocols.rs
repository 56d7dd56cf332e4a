//! The judges' own protocols added in issue 59 (Selene Mini, GLIDER, Skywork-Critic, Auto-J,
//! J1, plain-thinking): each built-in protocol file renders the example of
//! `tests/fixtures/rubric/inputs.json` byte for byte as its authors' code does
//! (`tests/fixtures/rubric/make_judge_fixtures.py`), with and without a reference where the
//! judge has both templates; Auto-J's text through Llama-2's chat template is the string
//! the authors send; each protocol's verdict is read where its model writes it.

use nlg_judge::engine::FinishReason;
use nlg_judge::judge::rubric::protocol::{render, render_relative, PairInput, RubricInput};
use nlg_judge::judge::rubric::reading::read;
use nlg_judge::judge::rubric::relative::read_choice;
use nlg_judge::judge::rubric::{FormatOutcome, Rubric, RubricProtocol};
use nlg_judge::judge::ScoreScale;
use nlg_judge::runtime::card::{ChatSpec, ChatTemplateKind};
use nlg_judge::runtime::ChatTemplate;
use serde_json::Value;

use crate::rubric::{example, fixture};

fn protocol(name: &str) -> RubricProtocol {
    RubricProtocol::named(name).unwrap()
}

/// The example graded: context, reference and the response.
fn absolute(inputs: &Value) -> RubricInput<'_> {
    RubricInput {
        context: inputs["context"].as_str(),
        reference: inputs["reference"].as_str(),
        output: inputs["response"].as_str().unwrap(),
    }
}

/// The example compared: context, no reference, the response as A and `response_b` as B.
fn relative(inputs: &Value) -> PairInput<'_> {
    PairInput {
        context: inputs["context"].as_str(),
        reference: None,
        a: inputs["response"].as_str().unwrap(),
        b: inputs["response_b"].as_str().unwrap(),
    }
}

/// The example's rubric on another scale (the same descriptions where there are as many
/// levels; Auto-J and J1 show none).
fn on_scale(rubric: &Rubric, low: i64, high: i64) -> Rubric {
    let mut rubric = rubric.clone();
    rubric.scale = ScoreScale::new(low, high).unwrap();
    rubric.descriptions = (low..=high).map(|s| format!("level {s}")).collect();
    rubric
}

#[test]
fn selene_prompts_are_the_published_templates_byte_for_byte() {
    let (rubric, inputs) = example();
    let selene = protocol("selene");
    let with = render(&selene, &rubric, &absolute(&inputs)).unwrap();
    assert_eq!(with.system, None);
    assert_eq!(with.user, fixture("selene_absolute.txt"));
    let without = RubricInput {
        reference: None,
        ..absolute(&inputs)
    };
    let rendered = render(&selene, &rubric, &without).unwrap();
    assert_eq!(rendered.user, fixture("selene_absolute_no_reference.txt"));
    let rendered = render_relative(&selene, &rubric, &relative(&inputs)).unwrap();
    assert_eq!(rendered.system, None);
    assert_eq!(rendered.user, fixture("selene_relative.txt"));
    // Trained on 1-5 rubrics only.
    let error = render(&selene, &on_scale(&rubric, 1, 3), &without).unwrap_err();
    assert!(format!("{error:#}").contains("1-5 only"), "{error:#}");
}

#[test]
fn glider_prompt_is_the_published_template_byte_for_byte() {
    let (rubric, inputs) = example();
    let glider = protocol("glider");
    // The template has no place for a reference: with or without one, the same text.
    for reference in [inputs["reference"].as_str(), None] {
        let input = RubricInput {
            reference,
            ..absolute(&inputs)
        };
        let rendered = render(&glider, &rubric, &input).unwrap();
        assert_eq!(rendered.system, None);
        assert_eq!(rendered.user, fixture("glider_absolute.txt"));
    }
    // Any scale: a pass/fail rubric is two lines.
    let rendered = render(&glider, &on_scale(&rubric, 0, 1), &absolute(&inputs)).unwrap();
    assert!(
        rendered
            .user
            .contains("Rubric:\n0: level 0\n1: level 1\n\nYour output"),
        "{}",
        rendered.user
    );
    assert!(glider.relative().is_err());
}

#[test]
fn skywork_critic_prompt_is_the_published_template_and_answers_at_once() {
    let (rubric, inputs) = example();
    let skywork = protocol("skywork-critic");
    let rendered = render_relative(&skywork, &rubric, &relative(&inputs)).unwrap();
    assert_eq!(rendered.system, None);
    assert_eq!(rendered.user, fixture("skywork_critic_relative.txt"));
    let form = skywork.relative().unwrap();
    assert!(!form.feedback);
    assert_eq!(form.marker, "[[");
    assert!(skywork.absolute().is_err());
}

#[test]
fn auto_j_prompts_are_the_published_templates_and_llama2_wraps_them_as_the_authors_do() {
    let (rubric, inputs) = example();
    let autoj = protocol("auto-j");
    let rubric_10 = on_scale(&rubric, 1, 10);
    let single = render(&autoj, &rubric_10, &absolute(&inputs)).unwrap();
    assert_eq!(single.system, None);
    assert_eq!(single.user, fixture("autoj_absolute.txt"));
    // Neither the criterion nor a reference has a place in Auto-J's templates.
    let without = RubricInput {
        reference: None,
        ..absolute(&inputs)
    };
    assert_eq!(render(&autoj, &rubric_10, &without).unwrap(), single);
    let pairwise = render_relative(&autoj, &rubric, &relative(&inputs)).unwrap();
    assert_eq!(pairwise.system, None);
    assert_eq!(pairwise.user, fixture("autoj_relative.txt"));
    // The authors send "[INST] {text} [/INST]" as a raw string (the tokenizer adding
    // <s>); the card's llama2 chat template renders the user message without a system
    // message to the same text (its <s> added by the tokenizer alike).
    let llama2 = ChatTemplate::from_spec(&ChatSpec {
        template: ChatTemplateKind::Llama2,
        default_system: None,
    });
    assert_eq!(
        llama2.render(None, &single.user, ""),
        fixture("autoj_absolute_inst.txt")
    );
    assert_eq!(
        llama2.render(None, &pairwise.user, ""),
        fixture("autoj_relative_inst.txt")
    );
    // Trained to rate on 1-10 only.
    let error = render(&autoj, &rubric, &without).unwrap_err();
    assert!(format!("{error:#}").contains("1-10 only"), "{error:#}");
    let choices = autoj.relative().unwrap().choices.clone().unwrap();
    assert_eq!(choices.labels(), ["Response 1", "Response 2", "Tie"]);
}

#[test]
fn j1_prompts_are_the_published_templates_and_it_thinks_first() {
    let (rubric, inputs) = example();
    let j1 = protocol("j1");
    let pointwise = render(&j1, &on_scale(&rubric, 0, 10), &absolute(&inputs)).unwrap();
    assert_eq!(pointwise.system, None);
    assert_eq!(pointwise.user, fixture("j1_absolute.txt"));
    let pairwise = render_relative(&j1, &rubric, &relative(&inputs)).unwrap();
    assert_eq!(pairwise.system, None);
    assert_eq!(pairwise.user, fixture("j1_relative.txt"));
    let reasoning = j1.reasoning().unwrap();
    assert_eq!(
        (reasoning.open.as_str(), reasoning.close.as_str()),
        ("<think>", "</think>")
    );
    // J1 cannot switch its thinking off.
    assert_eq!(reasoning.off, None);
}

#[test]
fn plain_thinking_is_plain_with_a_reasoning_that_qwen3_can_switch_off() {
    let (rubric, inputs) = example();
    let (plain, thinking) = (RubricProtocol::plain(), protocol("plain-thinking"));
    assert_eq!(
        render(&thinking, &rubric, &absolute(&inputs)).unwrap(),
        render(&plain, &rubric, &absolute(&inputs)).unwrap()
    );
    assert_eq!(
        render_relative(&thinking, &rubric, &relative(&inputs)).unwrap(),
        render_relative(&plain, &rubric, &relative(&inputs)).unwrap()
    );
    for (ours, theirs) in [
        (thinking.absolute().unwrap(), plain.absolute().unwrap()),
        (thinking.relative().unwrap(), plain.relative().unwrap()),
    ] {
        // The model opens <think> itself; plain's opening follows the reasoning.
        assert_eq!(
            (&ours.opening, &ours.marker, &ours.separator, &ours.choices),
            (
                &theirs.opening,
                &theirs.marker,
                &theirs.separator,
                &theirs.choices
            )
        );
    }
    let reasoning = thinking.reasoning().unwrap();
    // Qwen3's generation prompt with enable_thinking=false.
    assert_eq!(reasoning.off.as_deref(), Some("<think>\n\n</think>\n\n"));
}

#[test]
fn each_judge_s_verdict_is_kept_where_its_model_writes_it() {
    use FormatOutcome::{Kept, NoScore};
    let score = |name: &str, low: i64, high: i64, text: &str| {
        let protocol = protocol(name);
        let form = protocol.absolute().unwrap();
        let scale = ScoreScale::new(low, high).unwrap();
        read(form, protocol.reasoning(), scale, text, FinishReason::Stop).format
    };
    assert_eq!(
        score("selene", 1, 5, "**Reasoning:** Clear.\n\n**Result:** 4"),
        Kept
    );
    assert_eq!(
        score(
            "glider",
            0,
            1,
            "<reasoning>\n- fine\n</reasoning>\n<highlight>\nx\n</highlight>\n<score>\n1\n</score>"
        ),
        Kept
    );
    assert_eq!(
        score("auto-j", 1, 10, "Good critique.\n\nRating: [[10]]"),
        Kept
    );
    assert_eq!(score("auto-j", 1, 10, "Rating: [[rating]]"), NoScore);
    // A J1 score inside its reasoning is not the verdict; the one after it is.
    let j1 = "<think> I'd say <score> 3 </score> at first. </think>\n<score> 7.5 </score>";
    assert_eq!(score("j1", 0, 10, j1), Kept);
    let reading = {
        let protocol = protocol("j1");
        read(
            protocol.absolute().unwrap(),
            protocol.reasoning(),
            ScoreScale::new(0, 10).unwrap(),
            j1,
            FinishReason::Stop,
        )
    };
    assert!(
        reading.answer.ends_with("</think>\n<score>"),
        "{}",
        reading.answer
    );
    assert_eq!(
        reading.reasoning.as_deref(),
        Some("I'd say <score> 3 </score> at first.")
    );

    let choice = |name: &str, text: &str| {
        let protocol = protocol(name);
        let form = protocol.relative().unwrap();
        read_choice(form, protocol.reasoning(), text, FinishReason::Stop)
    };
    assert_eq!(
        choice("selene", "**Reasoning:** B is clearer.\n\n**Result:** B").format,
        Kept
    );
    assert_eq!(choice("skywork-critic", "[[A]]").format, Kept);
    let j1 = choice(
        "j1",
        "<think> B is better. </think>\n<answer> [[B]] </answer>",
    );
    assert_eq!(j1.format, Kept);
    assert!(j1.answer.ends_with("\n<answer>"), "{}", j1.answer);
    // Auto-J's missing decision is appended as the authors' phrase ends.
    let autoj = choice("auto-j", "Response 1 is wrong about the date.");
    assert_eq!(
        autoj.answer,
        "Response 1 is wrong about the date.\n\nSo, the final decision is "
    );
}

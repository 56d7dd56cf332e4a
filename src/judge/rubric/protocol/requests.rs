//! The requests of rubric grading in a protocol's absolute form: the feedback's
//! generation, and the label request reading the score after the feedback and the
//! marker (or right after the prompt and the marker, without feedback).

use anyhow::Result;

use super::{Form, RubricInput, RubricProtocol};
use crate::engine::{GenerationRequest, Label, LabelRequest, Prompt, Sampling, Scorer, TextPrompt};
use crate::judge::rubric::Rubric;
use crate::judge::scale::score_label_tokens_after;

/// The prompt with the model's answer so far (`answer`, after the assistant turn's
/// opening for chat models), as the model reads it, and whether it goes through the chat
/// template.
pub fn prompt(
    scorer: &dyn Scorer,
    protocol: &RubricProtocol,
    rubric: &Rubric,
    input: &RubricInput,
    answer: &str,
) -> Result<(TextPrompt, bool)> {
    let rendered = super::render(protocol, rubric, input)?;
    let text = TextPrompt {
        system: rendered.system,
        user: rendered.user,
        answer_prefix: answer.to_string(),
    };
    Ok((text, scorer.info().conventions.chat))
}

/// `text` as a chat prompt or a plain one.
pub fn wrap(text: TextPrompt, chat: bool) -> Prompt {
    if chat {
        Prompt::chat(text)
    } else {
        Prompt::plain(text)
    }
}

/// Where a generation starts in the judge's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start<'a> {
    /// At the very beginning: a thinking judge's reasoning, before the answer's opening.
    Reasoning,
    /// After `.0` (a thinking judge's closed reasoning, else nothing) and the answer's
    /// opening: the feedback and the verdict.
    Feedback(&'a str),
}

impl Start<'_> {
    /// The answer before the generation, in `form`.
    pub fn answer(self, form: &Form) -> String {
        match self {
            Start::Reasoning => String::new(),
            Start::Feedback(thought) => format!("{thought}{}", form.opening),
        }
    }
}

/// The greedy generation of the model's answer from `start` in `form` (the protocol's
/// absolute form as the run opens its answers), at most `max_tokens`.
pub fn feedback_request(
    scorer: &dyn Scorer,
    protocol: &RubricProtocol,
    form: &Form,
    rubric: &Rubric,
    input: &RubricInput,
    start: Start,
    max_tokens: usize,
) -> Result<GenerationRequest> {
    let (text, chat) = prompt(scorer, protocol, rubric, input, &start.answer(form))?;
    Ok(GenerationRequest {
        prompt: wrap(text, chat),
        max_tokens,
        sampling: Sampling::Greedy,
        stop: form.stop.clone(),
    })
}

/// The label request reading the score after `answer` (which ends with the marker): one
/// label per score of the rubric's scale, written as `form` writes it.
pub fn score_request(
    scorer: &dyn Scorer,
    protocol: &RubricProtocol,
    form: &Form,
    rubric: &Rubric,
    input: &RubricInput,
    answer: &str,
) -> Result<LabelRequest> {
    let (answer, written_before) = reading_point(answer, &form.separator);
    let (text, chat) = prompt(scorer, protocol, rubric, input, &answer)?;
    let labels = score_label_tokens_after(scorer, &text, chat, rubric.scale, &written_before)?;
    Ok(LabelRequest {
        prompt: wrap(text, chat),
        labels: labels.into_iter().map(Label::Tokens).collect(),
    })
}

/// Where a result is read after `answer` (which ends with the marker): the answer up to
/// the marker's last visible character, and what the model writes before the result
/// there (the marker's trailing blanks, then `separator`). A marker that ends in a blank
/// (`[RESULT] `) gives its blank to the result, so that `[RESULT] A` is read as the model
/// writes it: the tokenisers of Llama, Mistral and GPT-2 attach a space to the word after
/// it (`▁A`, `ĠA`), and a prompt that ends in a lone space token is one the model never
/// saw before a result.
pub fn reading_point(answer: &str, separator: &str) -> (String, String) {
    let kept = answer.trim_end();
    (
        kept.to_string(),
        format!("{}{separator}", &answer[kept.len()..]),
    )
}

/// The answer read right after the prompt without a feedback (`--no-feedback`): the
/// marker alone (after an empty reasoning, where the protocol can switch thinking off).
pub fn direct_answer(protocol: &RubricProtocol, form: &Form) -> String {
    let off = protocol
        .reasoning()
        .and_then(|r| r.off.as_deref())
        .unwrap_or("");
    format!("{off}{}", form.marker)
}

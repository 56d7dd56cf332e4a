//! Absolute prompt scoring, the comparative-assessment paper's baseline: the model reads
//! the context and one candidate and is asked for a score between 1 and 10,
//!
//! ```text
//! <context>
//!
//! Summary: <candidate>
//!
//! Provide a score between 1 and 10 that measures the summary's coherence
//! ```
//!
//! followed by the model family's `score_suffix` ("\n\nScore:" for Llama-2-chat). The
//! nouns follow the task as in the pairwise prompts (Response for dialogue, Text for
//! data-to-text). The score is the expectation over the scale's score labels (see
//! [`super::scale`]); the argmax and the whole distribution are kept too.

use anyhow::Result;

use super::attribute::Task;
use super::scale::{score_label_tokens, ScoreScale};
use crate::engine::{Conventions, Label, LabelRequest, Prompt, Scorer, TextPrompt};

/// The paper's scale.
pub const DEFAULT_SCALE: ScoreScale = match ScoreScale::const_new(1, 10) {
    Some(scale) => scale,
    None => panic!("1-10 is a valid scale"),
};

/// Cache identity of the prompt-scoring template (bump when the wording changes).
pub const TEMPLATE_ID: &str = "score/prompt-v1";

/// The user text asking for a score of `candidate` (without the model's suffix).
pub fn render(
    task: Task,
    attribute: &str,
    context: &str,
    candidate: &str,
    scale: ScoreScale,
) -> String {
    let item = task.item();
    format!(
        "{context}\n\n{item}: {candidate}\n\nProvide a score between {} and {} that measures the {}'s {attribute}",
        scale.low(),
        scale.high(),
        item.to_lowercase()
    )
}

/// The prompt in the model family's conventions: `score_suffix` appended, the score read
/// right after the prompt (the assistant turn's opening for chat models).
pub fn prompt(conventions: &Conventions, user: String) -> (TextPrompt, bool) {
    let text = TextPrompt {
        system: None,
        user: user + &conventions.score_suffix,
        answer_prefix: String::new(),
    };
    (text, conventions.chat)
}

/// The label request scoring `candidate` on `scale`: one label per score.
pub fn request(
    scorer: &dyn Scorer,
    task: Task,
    attribute: &str,
    context: &str,
    candidate: &str,
    scale: ScoreScale,
) -> Result<LabelRequest> {
    let (text, chat) = prompt(
        &scorer.info().conventions,
        render(task, attribute, context, candidate, scale),
    );
    let labels = score_label_tokens(scorer, &text, chat, scale)?;
    Ok(LabelRequest {
        prompt: if chat {
            Prompt::chat(text)
        } else {
            Prompt::plain(text)
        },
        labels: labels.into_iter().map(Label::Tokens).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_papers_wording_with_task_nouns() {
        let scale = DEFAULT_SCALE;
        assert_eq!(
            render(
                Task::Summary,
                "coherence",
                "The article.",
                "A summary.",
                scale
            ),
            "The article.\n\nSummary: A summary.\n\n\
             Provide a score between 1 and 10 that measures the summary's coherence"
        );
        assert_eq!(
            render(Task::Dialogue, "engagingness", "A: hi", "B: hello", scale),
            "A: hi\n\nResponse: B: hello\n\n\
             Provide a score between 1 and 10 that measures the response's engagingness"
        );
    }

    #[test]
    fn the_score_suffix_ends_the_user_text() {
        let llama = Conventions {
            score_suffix: "\n\nScore:".into(),
            chat: true,
            ..Conventions::default()
        };
        let (text, chat) = prompt(&llama, "Rate it".into());
        assert!(chat);
        assert_eq!(text.user, "Rate it\n\nScore:");
        assert_eq!(text.answer_prefix, "");
    }
}

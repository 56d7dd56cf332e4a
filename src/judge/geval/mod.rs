//! G-Eval (Liu et al., 2023): the model reads a task introduction, the evaluation
//! criteria, evaluation steps it wrote itself, and the input, and fills in a form line
//! ("- Coherence:"); the score is the probability-weighted sum of the scale's scores,
//! `sum_s s * p(s)`.
//!
//! The prompt, section by section:
//!
//! ```text
//! <introduction>
//!
//! Evaluation Criteria:
//!
//! <criterion>
//!
//! Evaluation Steps:
//!
//! <steps>
//!
//! Source Text:            (when there is a context)
//!
//! <context>
//!
//! Reference Summary:      (reference-based mode)
//!
//! <expected output>
//!
//! Summary:
//!
//! <output>
//!
//! Evaluation Form (scores ONLY):
//! - Coherence:
//! ```
//!
//! The whole text is the user's message; the score is read right after it (after the
//! assistant turn's opening for chat models, at the decoder start for T5).
//!
//! - [`criteria`]: the criteria files (built-in and user);
//! - [`free_text`]: criteria given as one string (`"Coherence (1-5): ..."`);
//! - [`steps`]: the auto chain-of-thought, generated once and stored.

pub mod criteria;
pub mod free_text;
pub mod steps;

use anyhow::Result;

pub use criteria::{Criteria, Sections};
pub use free_text::{criteria_from_text, ScaleSource};
pub use steps::{resolve_steps, steps_prompt, Steps, StepsOrigin, StepsSource};

use super::scale::{score_label_tokens, ScoreDistribution};
use crate::engine::{Label, LabelRequest, Prompt, Scorer, TextPrompt};

/// What is rated: the output, with its context and expected output when there are any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GevalInput<'a> {
    pub source: Option<&'a str>,
    pub reference: Option<&'a str>,
    pub output: &'a str,
}

/// The G-Eval prompt text (see the module header).
pub fn render(criteria: &Criteria, steps: &str, input: &GevalInput) -> String {
    let mut text = format!(
        "{}\n\nEvaluation Criteria:\n\n{}\n\nEvaluation Steps:\n\n{}\n\n",
        criteria.introduction,
        criteria.criterion,
        steps.trim()
    );
    let sections = [
        (&criteria.sections.source, input.source),
        (&criteria.sections.reference, input.reference),
        (&criteria.sections.output, Some(input.output)),
    ];
    for (heading, body) in sections {
        if let Some(body) = body {
            text.push_str(&format!("{heading}:\n\n{body}\n\n"));
        }
    }
    text.push_str(&format!(
        "Evaluation Form (scores ONLY):\n- {}:",
        criteria.name
    ));
    text
}

/// The label request rating `input`: one label per score of the criterion's scale.
pub fn request(
    scorer: &dyn Scorer,
    criteria: &Criteria,
    steps: &str,
    input: &GevalInput,
) -> Result<LabelRequest> {
    let chat = scorer.info().conventions.chat;
    let text = TextPrompt::user(render(criteria, steps, input));
    let labels = score_label_tokens(scorer, &text, chat, criteria.scale)?;
    Ok(LabelRequest {
        prompt: if chat {
            Prompt::chat(text)
        } else {
            Prompt::plain(text)
        },
        labels: labels.into_iter().map(Label::Tokens).collect(),
    })
}

/// Rate one input (no cache): the score distribution over the criterion's scale.
pub fn evaluate(
    scorer: &mut dyn Scorer,
    criteria: &Criteria,
    steps: &str,
    input: &GevalInput,
) -> Result<ScoreDistribution> {
    let request = request(scorer, criteria, steps, input)?;
    let result = scorer.label_logprobs(std::slice::from_ref(&request))?;
    let result = result
        .first()
        .ok_or_else(|| anyhow::anyhow!("the scorer returned no result"))?;
    ScoreDistribution::from_result(criteria.scale, result)
}

/// Cache identity of G-Eval results with these criteria and steps.
pub fn template_id(criteria: &Criteria, steps: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(criteria.digest().as_bytes());
    hasher.update([0]);
    hasher.update(steps.trim().as_bytes());
    format!("geval/{}", hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::Task;

    #[test]
    fn sections_appear_in_order_and_absent_ones_are_left_out() {
        let criteria = Criteria::builtin(Task::Summary, "coherence").unwrap();
        let with_all = render(
            &criteria,
            "1. Read.\n2. Rate.\n",
            &GevalInput {
                source: Some("ARTICLE"),
                reference: Some("GOLD"),
                output: "CANDIDATE",
            },
        );
        assert!(with_all.starts_with(&criteria.introduction));
        assert!(with_all.ends_with("\n\nEvaluation Form (scores ONLY):\n- Coherence:"));
        let order = [
            "\n\nEvaluation Criteria:\n\n",
            &criteria.criterion,
            "\n\nEvaluation Steps:\n\n1. Read.\n2. Rate.\n\n",
            "Source Text:\n\nARTICLE\n\n",
            "Reference Summary:\n\nGOLD\n\n",
            "Summary:\n\nCANDIDATE\n\n",
            "Evaluation Form (scores ONLY):",
        ];
        crate::judge::assert_in_order(&with_all, &order);
        let bare = render(
            &criteria,
            "1. Read.",
            &GevalInput {
                source: None,
                reference: None,
                output: "CANDIDATE",
            },
        );
        assert!(!bare.contains("Source Text") && !bare.contains("Reference Summary"));
    }

    #[test]
    fn template_ids_follow_criteria_and_steps() {
        let a = Criteria::builtin(Task::Summary, "coherence").unwrap();
        let b = Criteria::builtin(Task::Summary, "fluency").unwrap();
        assert_ne!(template_id(&a, "1. x"), template_id(&b, "1. x"));
        assert_ne!(template_id(&a, "1. x"), template_id(&a, "1. y"));
        assert_eq!(template_id(&a, "1. x\n"), template_id(&a, "1. x"));
        assert!(template_id(&a, "1. x").starts_with("geval/"));
    }
}

//! G-Eval's auto chain-of-thought: the evaluation steps, written once per model and
//! criterion by the model itself from the task introduction and the criterion, then
//! stored and reused.
//!
//! The steps prompt is the introduction and the criteria followed by "Evaluation Steps:",
//! with the answer opened by "1." so that the model writes a numbered list. Generation is
//! greedy, bounded by a token count, and stops where the model starts writing the rest
//! of the form (or leaves a run of blank lines); only the numbered list is kept (blank
//! lines between items are allowed, the first paragraph that is not an item ends it). The
//! result is kept in the result cache
//! under the model's fingerprint and a hash of the steps prompt as the model reads it, so
//! a second run (or a second process) reads it back instead of generating.
//!
//! Small models often write degenerate steps (one sentence over and over, or next to
//! nothing; see [`crate::judge::diagnostics::steps_problem`]). Those are never stored:
//! the greedy attempt is followed by up to [`SAMPLED_ATTEMPTS`] sampled ones (seeds 1,
//! 2, ...), the first sound list is stored, and when none is sound the run is refused
//! with an error naming `--steps FILE`. Degenerate steps found in the cache (stored by
//! an earlier version) are treated as missing.

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::criteria::Criteria;
use crate::engine::{
    EngineError, FinishReason, Generate, GenerationRequest, Prompt, ResultCache, Sampling, Scorer,
    TextPrompt,
};
use crate::judge::diagnostics::steps_problem;

/// Kind of the steps entries in the result cache's text table.
pub const CACHE_KIND: &str = "geval-steps";

/// Version of the steps prompt and its post-processing (part of the cache key).
const STEPS_VERSION: &str = "geval-steps/v1";

/// Opens the model's answer so that it writes a numbered list.
const ANSWER_OPENING: &str = "1.";

/// Sampled attempts after a degenerate greedy one, before the steps are refused.
pub const SAMPLED_ATTEMPTS: u64 = 3;

/// Temperature and nucleus of the sampled attempts.
const RETRY_TEMPERATURE: f64 = 0.7;
const RETRY_TOP_P: f64 = 0.95;

/// Default bound on generated step tokens.
pub const DEFAULT_MAX_TOKENS: usize = 200;

/// Where the evaluation steps come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepsSource {
    /// Written by the model (once per model and criterion), at most `max_tokens` tokens.
    Generate { max_tokens: usize },
    /// Given by the user, used as they are.
    Given(String),
}

impl Default for StepsSource {
    fn default() -> Self {
        StepsSource::Generate {
            max_tokens: DEFAULT_MAX_TOKENS,
        }
    }
}

/// How the steps in use were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepsOrigin {
    Given,
    Cached,
    Generated,
}

/// The evaluation steps of one criterion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steps {
    pub text: String,
    pub origin: StepsOrigin,
}

/// The prompt asking the model for the evaluation steps of `criteria`.
pub fn steps_prompt(criteria: &Criteria, chat: bool) -> Prompt {
    let text = TextPrompt {
        system: None,
        user: format!(
            "{}\n\nEvaluation Criteria:\n\n{}\n\nEvaluation Steps:\n",
            criteria.introduction, criteria.criterion
        ),
        answer_prefix: ANSWER_OPENING.to_string(),
    };
    if chat {
        Prompt::chat(text)
    } else {
        Prompt::plain(text)
    }
}

/// Strings at which step generation stops: the start of the rest of the form.
fn stop_strings(criteria: &Criteria) -> Vec<String> {
    let mut stops: Vec<String> = [
        "\n\n\n",
        "Evaluation Form",
        "Evaluation Criteria",
        "Example:",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for heading in [&criteria.sections.source, &criteria.sections.output] {
        stops.push(format!("\n{heading}:"));
    }
    stops
}

/// The cache key of the steps `scorer` would write for `criteria` with this bound.
pub fn steps_key(scorer: &dyn Scorer, criteria: &Criteria, max_tokens: usize) -> Result<String> {
    let rendered = scorer.render(&steps_prompt(criteria, scorer.info().conventions.chat))?;
    let mut hasher = Sha256::new();
    for part in [
        STEPS_VERSION,
        &rendered.input,
        &rendered.decoder_prefix,
        &max_tokens.to_string(),
    ] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Have the model write the steps greedily (no cache involved, no check).
pub fn generate_steps(
    scorer: &mut dyn Scorer,
    criteria: &Criteria,
    max_tokens: usize,
) -> Result<String> {
    generate_steps_with(scorer, criteria, max_tokens, Sampling::Greedy)
}

/// Have the model write the steps with `sampling` (no cache involved, no check).
fn generate_steps_with(
    scorer: &mut dyn Scorer,
    criteria: &Criteria,
    max_tokens: usize,
    sampling: Sampling,
) -> Result<String> {
    let request = GenerationRequest {
        prompt: steps_prompt(criteria, scorer.info().conventions.chat),
        max_tokens,
        sampling,
        stop: stop_strings(criteria),
    };
    let generation = scorer
        .generate(&request)
        .with_context(|| format!("cannot generate the evaluation steps of {}", criteria.name))?;
    let mut text = format!("{ANSWER_OPENING}{}", generation.text);
    if generation.finish == FinishReason::MaxTokens {
        // Drop the step the bound cut off, when an earlier one is complete.
        if let Some(end) = text.trim_end().rfind('\n') {
            text.truncate(end);
        }
    }
    Ok(numbered_list(&text))
}

/// Whether a paragraph opens with a list number ("2.", "10)").
fn is_item(paragraph: &str) -> bool {
    let digits = paragraph.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && matches!(paragraph[digits..].chars().next(), Some('.' | ')'))
}

/// The leading numbered list of `text`: its paragraphs up to the first one that is not a
/// list item (the first paragraph is always kept).
fn numbered_list(text: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for paragraph in text.trim().split("\n\n") {
        let paragraph = paragraph.trim();
        if paragraph.is_empty() {
            continue;
        }
        if !kept.is_empty() && !is_item(paragraph) {
            break;
        }
        kept.push(paragraph);
    }
    kept.join("\n")
}

/// Steps the model writes that are not degenerate: the greedy ones, else the first sound
/// one of [`SAMPLED_ATTEMPTS`] sampled attempts; an error naming `--steps FILE` when
/// every attempt is degenerate (a request the model cannot answer well: `BadRequest`).
fn sound_steps(scorer: &mut dyn Scorer, criteria: &Criteria, max_tokens: usize) -> Result<String> {
    let mut problems = Vec::new();
    for attempt in 0..=SAMPLED_ATTEMPTS {
        let sampling = match attempt {
            0 => Sampling::Greedy,
            seed => Sampling::TopP {
                temperature: RETRY_TEMPERATURE,
                top_p: RETRY_TOP_P,
                seed,
            },
        };
        let text = generate_steps_with(scorer, criteria, max_tokens, sampling)?;
        match steps_problem(&text) {
            None => return Ok(text),
            Some(problem) => {
                tracing::warn!(
                    criterion = %criteria.name,
                    attempt,
                    "degenerate evaluation steps: {problem}"
                );
                problems.push(problem);
            }
        }
    }
    Err(EngineError::BadRequest(format!(
        "the model wrote degenerate evaluation steps for {} in all {} attempts (greedy, then \
         sampled with seeds 1 to {SAMPLED_ATTEMPTS}; first: {}); nothing was stored. Write \
         the steps yourself and pass them with --steps FILE (the service: the `steps` \
         field), or use a larger model",
        criteria.name,
        SAMPLED_ATTEMPTS + 1,
        problems.first().map_or("", String::as_str)
    ))
    .into())
}

/// The steps to use for `criteria`: the given ones, else the stored ones, else freshly
/// generated ones (stored when there is a cache).
pub fn resolve_steps(
    scorer: &mut dyn Scorer,
    criteria: &Criteria,
    source: &StepsSource,
    cache: Option<&ResultCache>,
) -> Result<Steps> {
    let max_tokens = match source {
        StepsSource::Given(text) => {
            return Ok(Steps {
                text: text.trim().to_string(),
                origin: StepsOrigin::Given,
            })
        }
        StepsSource::Generate { max_tokens } => *max_tokens,
    };
    let key = steps_key(scorer, criteria, max_tokens)?;
    let fingerprint = scorer.info().fingerprint.clone();
    if let Some(cache) = cache {
        if let Some(text) = cache.get_text(&fingerprint, CACHE_KIND, &key)? {
            if steps_problem(&text).is_none() {
                return Ok(Steps {
                    text,
                    origin: StepsOrigin::Cached,
                });
            }
        }
    }
    let text = sound_steps(scorer, criteria, max_tokens)?;
    if let Some(cache) = cache {
        cache.put_text(&fingerprint, CACHE_KIND, &key, &text)?;
    }
    Ok(Steps {
        text,
        origin: StepsOrigin::Generated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_numbered_list_is_kept() {
        assert_eq!(
            numbered_list("1. Read.\n2. Rate.\n\nThe article is fine.\n\n3. More."),
            "1. Read.\n2. Rate."
        );
        assert_eq!(
            numbered_list("1. Read.\n\n2) Compare.\n\n10. Rate.\n"),
            "1. Read.\n2) Compare.\n10. Rate."
        );
        assert_eq!(numbered_list("1. Only.\n\n\n"), "1. Only.");
        assert!(is_item("12. x") && !is_item("x. 1") && !is_item("3 steps"));
    }
}

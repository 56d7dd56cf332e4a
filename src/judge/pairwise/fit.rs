//! Candidates too long for the model, set aside before a run instead of sinking their
//! whole context: one 50,000-word candidate among three used to fail every comparison
//! of its context with an error naming a request number. Now each candidate whose
//! comparison with the shortest other candidate of its context (in either order) would
//! exceed the model's window is named (id, context, `file:line`, tokens needed) and left
//! out, and the others are compared and ranked among themselves. A context left with
//! fewer than two candidates is not ranked, and said so.
//!
//! Relative rubric grading with feedback also keeps room for the feedback: the judge
//! writes up to its token bound after the prompt, and the choice is read after that.
//!
//! Only tokenisation is asked of the model. A context whose longest possible comparison
//! fits by a byte count (a token holds at least one byte, whatever the tokeniser) is
//! not tokenised at all, so ordinary runs pay nothing.

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::run::{comparison_request_for, pairwise_labels, CompareOptions};
use crate::data::Context;
use crate::engine::{plan_labels, Prompt, Scorer};

/// Room kept for special tokens and the chat template's markers beyond the rendered
/// text's bytes, in the byte-count shortcut.
const TEMPLATE_MARGIN: usize = 64;

/// A candidate left out of a run because its comparisons do not fit the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetAside {
    pub context_id: String,
    pub candidate_id: String,
    /// Where the candidate was read (`file:line`), when it came from a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Tokens its comparison with the shortest other candidate needs (prompt and label);
    /// `None` for a candidate that fits but has no other candidate left to meet.
    pub tokens: Option<usize>,
    /// The model's limit.
    pub limit: usize,
    /// Of `tokens`, those kept for the judge's feedback (relative grading with feedback:
    /// the feedback is generated after the prompt, up to its token bound, and the choice
    /// read after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback_tokens: Option<usize>,
}

impl SetAside {
    /// One line naming the candidate and why.
    pub fn describe(&self) -> String {
        let at = self
            .source
            .as_deref()
            .map_or_else(String::new, |s| format!(" ({s})"));
        match self.tokens {
            Some(tokens) => format!(
                "`{}` of context `{}`{at}: its comparisons need {tokens} tokens{}, more than \
                 the model's window of {}",
                self.candidate_id,
                self.context_id,
                self.feedback_tokens
                    .map_or_else(String::new, |n| format!(" ({n} of them for the feedback)")),
                self.limit
            ),
            None => format!(
                "`{}` of context `{}`{at}: no other candidate of its context is left to compare \
                 it with",
                self.candidate_id, self.context_id
            ),
        }
    }
}

/// `contexts` without the candidates that cannot be compared within the scorer's length
/// limit (and without contexts left with fewer than two candidates), and those set aside.
pub fn set_aside_over_long(
    scorer: &dyn Scorer,
    contexts: Vec<Context>,
    options: &CompareOptions,
) -> Result<(Vec<Context>, Vec<SetAside>)> {
    let Some(limit) = scorer.length_limit() else {
        return Ok((contexts, Vec::new()));
    };
    let feedback_tokens = options.relative.as_ref().and_then(|r| r.feedback_tokens);
    let reserve = feedback_tokens.unwrap_or(0);
    let mut labels: Option<Vec<Vec<u32>>> = None;
    let mut kept = Vec::with_capacity(contexts.len());
    let mut aside = Vec::new();
    for mut context in contexts {
        if context.candidates.len() < 2
            || fits_by_bytes(scorer, &context, options, limit.saturating_sub(reserve))?
        {
            kept.push(context);
            continue;
        }
        let labels = match &labels {
            Some(labels) => labels,
            None => labels.insert(pairwise_labels(scorer)?),
        };
        let longest_label = labels.iter().map(Vec::len).max().unwrap_or(0);
        let needs = tokens_with_shortest_other(scorer, &context, options, labels)
            .with_context(|| format!("context `{}`", context.id))?;
        let mut index = 0;
        context.candidates.retain(|candidate| {
            let (tokens, blamed) = needs[index];
            index += 1;
            let tokens = tokens + longest_label + reserve;
            if tokens > limit && blamed {
                aside.push(SetAside {
                    context_id: context.id.clone(),
                    candidate_id: candidate.id.clone(),
                    source: candidate.source.clone(),
                    tokens: Some(tokens),
                    limit,
                    feedback_tokens,
                });
                false
            } else {
                true
            }
        });
        if context.candidates.len() >= 2 {
            kept.push(context);
        } else {
            // The ones left cannot be compared with anything: set them aside too.
            for candidate in context.candidates {
                aside.push(SetAside {
                    context_id: context.id.clone(),
                    candidate_id: candidate.id,
                    source: candidate.source,
                    tokens: None,
                    limit,
                    feedback_tokens: None,
                });
            }
        }
    }
    Ok((kept, aside))
}

/// Whether every comparison of `context` fits by its bytes: the rendered comparison of
/// its two longest candidates, plus the margin, within `limit`.
fn fits_by_bytes(
    scorer: &dyn Scorer,
    context: &Context,
    options: &CompareOptions,
    limit: usize,
) -> Result<bool> {
    let mut by_length: Vec<usize> = (0..context.candidates.len()).collect();
    by_length.sort_by_key(|&k| std::cmp::Reverse(context.candidates[k].text.len()));
    let request = comparison_request_for(scorer, context, options, (by_length[0], by_length[1]))?;
    let bytes = match &request.prompt {
        Prompt::Tokens(tokens) => tokens.input.len() + tokens.decoder_prefix.len(),
        prompt => {
            let rendered = scorer.render(prompt)?;
            rendered.input.len() + rendered.decoder_prefix.len()
        }
    };
    let labels: usize = [
        &scorer.info().conventions.label_a,
        &scorer.info().conventions.label_b,
    ]
    .iter()
    .map(|label| label.len())
    .max()
    .unwrap_or(0);
    Ok(bytes + labels + TEMPLATE_MARGIN <= limit)
}

/// For each candidate, the prompt tokens of its comparison with the shortest other
/// candidate of its context (the longer of the two orders), and whether a failure is its
/// own: the shortest candidate meets the second shortest, and when that comparison does
/// not fit, the second shortest is the one too long.
fn tokens_with_shortest_other(
    scorer: &dyn Scorer,
    context: &Context,
    options: &CompareOptions,
    labels: &[Vec<u32>],
) -> Result<Vec<(usize, bool)>> {
    let n = context.candidates.len();
    let by_length = |k: &usize| context.candidates[*k].text.len();
    let shortest = (0..n).min_by_key(by_length).unwrap_or(0);
    let second = (0..n)
        .filter(|&k| k != shortest)
        .min_by_key(by_length)
        .unwrap_or(0);
    let mut pairs = Vec::with_capacity(2 * n);
    for i in 0..n {
        let other = if i == shortest { second } else { shortest };
        pairs.push((i, other));
        pairs.push((other, i));
    }
    let requests = pairs
        .iter()
        .map(|&pair| comparison_request_for(scorer, context, options, pair))
        .collect::<Result<Vec<_>>>()?;
    let labels = options.relative.is_none().then_some(labels);
    let planned = plan_labels(scorer, &options.template_id(), requests, labels);
    let lengths: Vec<usize> = planned
        .into_iter()
        .map(|planned| {
            let planned = planned?;
            Ok(match &planned.request.prompt {
                Prompt::Tokens(tokens) => tokens.input.len() + tokens.decoder_prefix.len(),
                _ => 0,
            })
        })
        .collect::<Result<_>>()?;
    Ok(lengths
        .chunks(2)
        .enumerate()
        .map(|(i, both)| (both.iter().copied().max().unwrap_or(0), i != shortest))
        .collect())
}

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
//!
//! [`compare_what_fits`] is the whole rule as every front end takes it (the command line,
//! the service's `/v1/compare`, Python's `Judge.compare`): set aside, compare the rest,
//! and name what was set aside in a `too_long` check of the diagnostics.

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::run::{
    comparison_request_for, pairwise_labels, run_compare, CompareOptions, CompareResult,
};
use crate::data::Context;
use crate::engine::{plan_labels, EngineError, Prompt, ResultCache, Scorer};
use crate::judge::diagnostics::too_long;

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
    /// Why it was set aside, without naming it.
    pub fn reason(&self) -> String {
        match self.tokens {
            Some(tokens) => format!(
                "its comparisons need {tokens} tokens{}, more than the model's window of {}",
                self.feedback_tokens
                    .map_or_else(String::new, |n| format!(" ({n} of them for the feedback)")),
                self.limit
            ),
            None => "no other candidate of its context is left to compare it with".to_string(),
        }
    }

    /// One line naming the candidate and why.
    pub fn describe(&self) -> String {
        let at = self
            .source
            .as_deref()
            .map_or_else(String::new, |s| format!(" ({s})"));
        format!(
            "`{}` of context `{}`{at}: {}",
            self.candidate_id,
            self.context_id,
            self.reason()
        )
    }
}

/// A compare run of the candidates that fit the model.
#[derive(Debug, Clone)]
pub struct FittedRun {
    /// The comparisons and ranking of what fits; its diagnostics carry a `too_long`
    /// warning naming what was set aside (in the words of the options' audience).
    pub result: CompareResult,
    /// The contexts ranked: the input without what was set aside (the result's order).
    pub contexts: Vec<Context>,
    /// The candidates left out, input order.
    pub set_aside: Vec<SetAside>,
}

/// Compare and rank the candidates of `contexts` that fit the scorer's window, setting
/// the others aside ([`set_aside_over_long`]). A request error
/// ([`EngineError::BadRequest`]: exit code 2, a 422, a `ValueError`) when no context keeps
/// two candidates, naming those set aside.
pub fn compare_what_fits(
    scorer: &mut dyn Scorer,
    contexts: Vec<Context>,
    options: &CompareOptions,
    cache: Option<&ResultCache>,
) -> Result<FittedRun> {
    let (contexts, set_aside) = set_aside_over_long(scorer, contexts, options)?;
    if contexts.is_empty() && !set_aside.is_empty() {
        return Err(EngineError::BadRequest(format!(
            "no context has two candidates whose comparison fits the model: {}",
            set_aside
                .iter()
                .map(SetAside::describe)
                .collect::<Vec<_>>()
                .join("; ")
        ))
        .into());
    }
    let mut result = run_compare(scorer, &contexts, options, cache)?;
    if let Some(check) = too_long(&set_aside, options.audience) {
        result.diagnostics.push(check);
    }
    Ok(FittedRun {
        result,
        contexts,
        set_aside,
    })
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

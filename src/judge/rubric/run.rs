//! Rubric grading as a scoring method: the decided method ([`RubricMethod`]) and its
//! feedback step.
//!
//! With feedback (the default), each candidate costs one greedy generation: the model
//! writes its feedback after the rubric prompt. A run's feedbacks go to the engine in one
//! call ([`crate::engine::generate_cached_all`]: one batch, the prompts of a context
//! sharing its computation, each feedback cached as it ends, so a rerun reads it back).
//! Each feedback is read ([`super::reading`]) as it arrives, and its score asked as a
//! label request after the feedback and the marker, which the engine reads from the
//! generation's own state and caches under the key `score` plans it with
//! (`judge::scoring`), so the scoring step finds it. Without feedback the label request
//! follows the prompt and the marker directly, and the whole run goes through the prefix
//! trie like prompt scoring.

use anyhow::{Context as _, Result};

use super::protocol::{self, RubricInput};
use super::reading::{read, Reading};
use super::{Rubric, RubricProtocol};
use crate::data::{Candidate, Context};
use crate::engine::{
    generate_cached_all, plan_label, EngineError, GeneratedCounts, Generation, GenerationReader,
    GenerationRequest, LabelRequest, PlannedLabel, ResultCache, Scorer,
};
use crate::judge::scoring::required_reference;
use crate::progress::Progress;

/// Kind of the feedback generations in the result cache.
pub const FEEDBACK_CACHE_KIND: &str = "rubric-feedback";

/// Default bound on a feedback's tokens (Prometheus 2's feedbacks run to a few hundred).
pub const DEFAULT_FEEDBACK_TOKENS: usize = 512;

/// Version of the rubric prompts and their reading (part of the label cache identity).
const TEMPLATE_VERSION: &str = "rubric/v2";

/// Where the run's protocol came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolSource {
    /// The caller named it (`--protocol`).
    Requested,
    /// The model card's `[judge] protocol`.
    Card,
    /// Neither: the plain format.
    Default,
}

impl ProtocolSource {
    /// As the output rows, the service and Python record it.
    pub fn name(self) -> &'static str {
        match self {
            ProtocolSource::Requested => "requested",
            ProtocolSource::Card => "card",
            ProtocolSource::Default => "default",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ProtocolSource::Requested => "as requested",
            ProtocolSource::Card => "the model card's",
            ProtocolSource::Default => "the default for models without one",
        }
    }
}

/// Rubric grading with everything decided.
#[derive(Debug, Clone, PartialEq)]
pub struct RubricMethod {
    pub rubric: Rubric,
    pub protocol: RubricProtocol,
    pub protocol_source: ProtocolSource,
    /// Most tokens of a feedback; `None`: no feedback, the score is read right after the
    /// prompt and the marker.
    pub feedback_tokens: Option<usize>,
    /// Show each candidate's `reference` as the reference answer.
    pub reference: bool,
}

impl RubricMethod {
    /// Settle the protocol: the requested one, else the card's, else plain; and check that
    /// it can grade on the rubric's scale.
    pub fn new(
        scorer: &dyn Scorer,
        rubric: Rubric,
        requested: Option<RubricProtocol>,
        feedback_tokens: Option<usize>,
        reference: bool,
    ) -> Result<Self> {
        let (protocol, protocol_source) =
            match (requested, scorer.info().conventions.rubric_protocol) {
                (Some(protocol), _) => (protocol, ProtocolSource::Requested),
                (None, Some(protocol)) => (protocol, ProtocolSource::Card),
                (None, None) => (RubricProtocol::Plain, ProtocolSource::Default),
            };
        let probe = RubricInput {
            context: None,
            reference: None,
            output: "",
        };
        // A rubric the protocol cannot grade is the request's fault (exit code 2, a
        // `ValueError`), not the model's.
        protocol::render(protocol, &rubric, &probe)
            .map_err(|e| EngineError::BadRequest(format!("{e:#}")))?;
        Ok(Self {
            rubric,
            protocol,
            protocol_source,
            feedback_tokens,
            reference,
        })
    }

    /// Cache identity of the score labels (the prompt's tokens, feedback included, are
    /// part of every key already).
    pub fn template_id(&self) -> String {
        format!(
            "{TEMPLATE_VERSION}/{}/{}",
            self.protocol,
            if self.feedback_tokens.is_some() {
                "feedback"
            } else {
                "direct"
            }
        )
    }

    /// The marker after which the score is read.
    pub fn marker(&self) -> &'static str {
        protocol::format(self.protocol).marker
    }

    /// What is graded of `candidate`.
    pub fn input<'a>(
        &self,
        context: &'a Context,
        candidate: &'a Candidate,
    ) -> Result<RubricInput<'a>> {
        let reference = if self.reference {
            Some(required_reference(candidate)?)
        } else {
            None
        };
        Ok(RubricInput {
            context: Some(context.text.as_str()).filter(|s| !s.trim().is_empty()),
            reference,
            output: &candidate.text,
        })
    }

    /// The generation of `candidate`'s feedback.
    pub fn feedback_request(
        &self,
        scorer: &dyn Scorer,
        context: &Context,
        candidate: &Candidate,
        max_tokens: usize,
    ) -> Result<GenerationRequest> {
        let input = self.input(context, candidate)?;
        protocol::feedback_request(scorer, self.protocol, &self.rubric, &input, max_tokens)
    }

    /// The label request reading `candidate`'s score after `answer` (the feedback and
    /// the marker), or right after the prompt and the marker without feedback.
    pub fn score_request(
        &self,
        scorer: &dyn Scorer,
        context: &Context,
        candidate: &Candidate,
        answer: Option<&str>,
    ) -> Result<LabelRequest> {
        let input = self.input(context, candidate)?;
        let answer = answer.unwrap_or(protocol::direct_answer(self.protocol));
        protocol::score_request(scorer, self.protocol, &self.rubric, &input, answer)
    }
}

/// Every candidate's feedback, read, per context in input order: one generation per
/// candidate (or its cached copy), all of a run's generations in one engine call (one
/// batch, the prompts sharing their context), each with its score read right after its
/// own feedback and marker and stored in `cache` (so the scoring that follows finds
/// it). Returns the readings and what was computed now.
pub fn feedbacks(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    method: &RubricMethod,
    max_tokens: usize,
    progress: &Progress,
    cache: Option<&ResultCache>,
) -> Result<(Vec<Vec<Reading>>, GeneratedCounts)> {
    let total: usize = contexts.iter().map(|c| c.candidates.len()).sum();
    progress.note(&format!(
        "rubric grading ({} format, {}): writing {total} feedback(s) in one batch (prompts \
         that share a context share its computation), each score read after `{}` as its \
         feedback ends",
        method.protocol,
        method.protocol_source.describe(),
        method.marker()
    ));
    let mut at = Vec::with_capacity(total);
    let mut requests = Vec::with_capacity(total);
    for (c, context) in contexts.iter().enumerate() {
        for (k, candidate) in context.candidates.iter().enumerate() {
            let request = method
                .feedback_request(scorer, context, candidate, max_tokens)
                .with_context(|| {
                    format!("context `{}`, candidate `{}`", context.id, candidate.id)
                })?;
            at.push((c, k));
            requests.push(request);
        }
    }
    let bar = progress.task(total as u64, "feedbacks written (generation)");
    let mut reader = FeedbackReader {
        contexts,
        method,
        at: &at,
        template: method.template_id(),
        readings: vec![None; total],
        bar: &bar,
    };
    let counts = generate_cached_all(scorer, cache, FEEDBACK_CACHE_KIND, &requests, &mut reader)
        .context("writing the rubric feedbacks")?;
    let mut readings: Vec<Vec<Reading>> = contexts
        .iter()
        .map(|c| Vec::with_capacity(c.candidates.len()))
        .collect();
    for ((c, k), reading) in at.iter().zip(reader.readings) {
        let context = &contexts[*c];
        readings[*c].push(reading.with_context(|| {
            format!(
                "context `{}`: no feedback for `{}`",
                context.id, context.candidates[*k].id
            )
        })?);
    }
    Ok((readings, counts))
}

/// Reads each feedback as it arrives and asks its score right after it.
struct FeedbackReader<'a> {
    contexts: &'a [Context],
    method: &'a RubricMethod,
    at: &'a [(usize, usize)],
    template: String,
    readings: Vec<Option<Reading>>,
    bar: &'a crate::progress::ProgressTask,
}

impl GenerationReader for FeedbackReader<'_> {
    fn generation(
        &mut self,
        index: usize,
        generation: &Generation,
        cached: bool,
        scorer: &dyn Scorer,
    ) -> Result<Option<PlannedLabel>> {
        let (c, k) = self.at[index];
        let (context, candidate) = (&self.contexts[c], &self.contexts[c].candidates[k]);
        let reading = read(
            self.method.protocol,
            self.method.rubric.scale,
            &generation.text,
            generation.finish,
        );
        let request = self
            .method
            .score_request(scorer, context, candidate, Some(&reading.answer))
            .and_then(|request| plan_label(scorer, &self.template, request, None))
            .with_context(|| format!("context `{}`, candidate `{}`", context.id, candidate.id))?;
        self.readings[index] = Some(reading);
        if cached {
            self.bar.found_in_cache(1);
        } else {
            self.bar.step(1)?;
        }
        Ok(Some(request))
    }
}

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

use super::protocol::{self, Form, Reasoning, RubricInput, Start};
use super::reading::{read, Reading};
use super::rounds::{write_answers, Answers, RoundNames};
use super::thinking::Thinking;
use super::{Rubric, RubricProtocol};
use crate::data::{Candidate, Context};
use crate::engine::{
    plan_label, EngineError, GeneratedCounts, Generation, GenerationRequest, LabelRequest,
    PlannedLabel, ResultCache, Scorer,
};
use crate::judge::scoring::required_reference;
use crate::progress::Progress;

/// Kind of the feedback generations in the result cache.
pub const FEEDBACK_CACHE_KIND: &str = "rubric-feedback";

/// Default bound on a feedback's tokens (Prometheus 2's feedbacks run to a few hundred).
pub const DEFAULT_FEEDBACK_TOKENS: usize = 512;

/// Version of the rubric prompts and their reading (part of the label cache identity).
const TEMPLATE_VERSION: &str = "rubric/v3";

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

/// The protocol of a run: the requested one, else the one the model card names, else
/// plain; and where it came from.
pub fn settle_protocol(
    scorer: &dyn Scorer,
    requested: Option<RubricProtocol>,
) -> Result<(RubricProtocol, ProtocolSource)> {
    Ok(
        match (requested, &scorer.info().conventions.rubric_protocol) {
            (Some(protocol), _) => (protocol, ProtocolSource::Requested),
            (None, Some(name)) => (
                RubricProtocol::named(name).with_context(|| {
                    format!(
                        "the card of model '{}' names its protocol",
                        scorer.info().name
                    )
                })?,
                ProtocolSource::Card,
            ),
            (None, None) => (RubricProtocol::plain(), ProtocolSource::Default),
        },
    )
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
    /// A thinking judge's reasoning (protocols with `[reasoning]`; ignored by others).
    pub thinking: Thinking,
}

/// Settle how a run treats a thinking judge's reasoning: `budget` (most tokens of a
/// reasoning; `None`: the default) or thinking `off`. Either asked of a protocol without
/// reasoning, or off asked of one that cannot switch it off, is refused.
pub fn settle_thinking(
    protocol: &RubricProtocol,
    budget: Option<usize>,
    off: bool,
) -> Result<Thinking> {
    let Some(reasoning) = protocol.reasoning() else {
        if budget.is_some() || off {
            crate::bad_request!(
                "the {} protocol has no reasoning (its judge does not think before its \
                 verdict): a reasoning budget or thinking off applies to thinking judges' \
                 protocols only",
                protocol.name()
            );
        }
        return Ok(Thinking::default());
    };
    if off {
        if budget.is_some() {
            crate::bad_request!("a reasoning budget and thinking off exclude each other");
        }
        if reasoning.off.is_none() {
            crate::bad_request!(
                "the {} protocol cannot switch thinking off (its file gives no \
                 `reasoning.off` opening)",
                protocol.name()
            );
        }
        return Ok(Thinking::Off);
    }
    match budget {
        Some(0) => crate::bad_request!("a reasoning needs at least one token"),
        Some(budget) => Ok(Thinking::On { budget }),
        None => Ok(Thinking::default()),
    }
}

/// `form` as a run with `thinking` opens its answers: the protocol's `off` text (an
/// empty reasoning) before the opening where thinking is off.
pub fn answer_form(protocol: &RubricProtocol, form: &Form, thinking: Thinking) -> Form {
    let mut form = form.clone();
    if thinking == Thinking::Off {
        if let Some(off) = protocol.reasoning().and_then(|r| r.off.as_deref()) {
            form.opening = format!("{off}{}", form.opening);
        }
    }
    form
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
        let (protocol, protocol_source) = settle_protocol(scorer, requested)?;
        let probe = RubricInput {
            context: None,
            reference: None,
            output: "",
        };
        // A rubric the protocol cannot grade is the request's fault (exit code 2, a
        // `ValueError`), not the model's.
        protocol::render(&protocol, &rubric, &probe)
            .map_err(|e| EngineError::BadRequest(format!("{e:#}")))?;
        // A judge trained to answer at once writes no feedback.
        let feedback_tokens = feedback_tokens.filter(|_| {
            protocol
                .absolute()
                .map(|form| form.feedback)
                .unwrap_or(true)
        });
        Ok(Self {
            rubric,
            protocol,
            protocol_source,
            feedback_tokens,
            reference,
            thinking: Thinking::default(),
        })
    }

    /// The same with a thinking judge's reasoning treated as [`settle_thinking`] says.
    pub fn with_thinking(mut self, budget: Option<usize>, off: bool) -> Result<Self> {
        self.thinking = settle_thinking(&self.protocol, budget, off)?;
        Ok(self)
    }

    /// The protocol's absolute form as this run opens its answers.
    pub fn form(&self) -> Result<Form> {
        Ok(answer_form(
            &self.protocol,
            self.protocol.absolute()?,
            self.thinking,
        ))
    }

    /// Whether feedbacks start with a reasoning round, and its budget.
    pub fn reasoning_budget(&self) -> Option<usize> {
        self.thinking
            .reasoning_budget(&self.protocol, self.feedback_tokens)
    }

    /// Cache identity of the score labels (the prompt's tokens, feedback included, are
    /// part of every key already).
    pub fn template_id(&self) -> String {
        format!(
            "{TEMPLATE_VERSION}/{}/{}",
            self.protocol.cache_name(),
            if self.feedback_tokens.is_some() {
                "feedback"
            } else {
                "direct"
            }
        )
    }

    /// The marker after which the score is read.
    pub fn marker(&self) -> &str {
        self.protocol
            .absolute()
            .map(|form| form.marker.as_str())
            .unwrap_or("")
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

    /// The generation of `candidate`'s answer from `start` (its feedback, or a thinking
    /// judge's reasoning).
    pub fn feedback_request(
        &self,
        scorer: &dyn Scorer,
        context: &Context,
        candidate: &Candidate,
        start: Start,
        max_tokens: usize,
    ) -> Result<GenerationRequest> {
        let input = self.input(context, candidate)?;
        protocol::feedback_request(
            scorer,
            &self.protocol,
            &self.form()?,
            &self.rubric,
            &input,
            start,
            max_tokens,
        )
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
        let form = self.form()?;
        let direct;
        let answer = match answer {
            Some(answer) => answer,
            None => {
                direct = protocol::direct_answer(&self.protocol, &form);
                &direct
            }
        };
        protocol::score_request(scorer, &self.protocol, &form, &self.rubric, &input, answer)
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
    for (c, context) in contexts.iter().enumerate() {
        for k in 0..context.candidates.len() {
            at.push((c, k));
        }
    }
    let mut answers = Feedbacks {
        contexts,
        method,
        form: method.form()?,
        at: &at,
        template: method.template_id(),
        readings: vec![None; total],
    };
    let names = RoundNames {
        reasonings: "reasonings written (generation)",
        feedbacks: "feedbacks written (generation)",
        cache_kind: FEEDBACK_CACHE_KIND,
        writing: "writing the rubric feedbacks",
    };
    let counts = write_answers(
        scorer,
        cache,
        &mut answers,
        method.reasoning_budget(),
        max_tokens,
        &names,
        progress,
    )?;
    let mut readings: Vec<Vec<Reading>> = contexts
        .iter()
        .map(|c| Vec::with_capacity(c.candidates.len()))
        .collect();
    for ((c, k), reading) in at.iter().zip(answers.readings) {
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

/// A run's feedbacks, one per candidate, each score asked right after its feedback.
struct Feedbacks<'a> {
    contexts: &'a [Context],
    method: &'a RubricMethod,
    /// The absolute form as the run opens its answers.
    form: Form,
    /// The candidate (context, candidate index) of each answer.
    at: &'a [(usize, usize)],
    template: String,
    readings: Vec<Option<Reading>>,
}

impl Feedbacks<'_> {
    /// The context and candidate of answer `index`.
    fn place(&self, index: usize) -> (&Context, &Candidate) {
        let (c, k) = self.at[index];
        (&self.contexts[c], &self.contexts[c].candidates[k])
    }
}

impl Answers for Feedbacks<'_> {
    fn count(&self) -> usize {
        self.at.len()
    }

    fn reasoning(&self) -> Option<&Reasoning> {
        self.method.protocol.reasoning()
    }

    fn form(&self) -> &Form {
        &self.form
    }

    fn request(
        &self,
        scorer: &dyn Scorer,
        index: usize,
        start: Start,
        max_tokens: usize,
    ) -> Result<GenerationRequest> {
        let (context, candidate) = self.place(index);
        self.method
            .feedback_request(scorer, context, candidate, start, max_tokens)
            .with_context(|| format!("context `{}`, candidate `{}`", context.id, candidate.id))
    }

    fn read(&self, form: &Form, generation: &Generation) -> Reading {
        let (reasoning, scale) = (self.reasoning(), self.method.rubric.scale);
        read(form, reasoning, scale, &generation.text, generation.finish)
    }

    fn keep(&mut self, index: usize, reading: Reading) {
        self.readings[index] = Some(reading);
    }

    fn verdict(&self, scorer: &dyn Scorer, index: usize) -> Result<PlannedLabel> {
        let (context, candidate) = self.place(index);
        let reading = self.readings[index]
            .as_ref()
            .with_context(|| format!("no feedback kept for candidate `{}`", candidate.id))?;
        self.method
            .score_request(scorer, context, candidate, Some(&reading.answer))
            .and_then(|request| plan_label(scorer, &self.template, request, None))
            .with_context(|| format!("context `{}`, candidate `{}`", context.id, candidate.id))
    }
}

//! The absolute-scoring runner: every candidate of every context scored on its own by
//! prompt scoring, G-Eval, GPTScore or rubric grading, with cached, resumable results.
//!
//! A method is first *resolved* ([`resolve_method`]): the attribute checked, G-Eval's
//! criteria chosen and its evaluation steps obtained (given, stored, or generated once),
//! the rubric's protocol settled (requested, else the model card's, else plain). Rubric
//! grading with feedback first writes each candidate's feedback (one generation each,
//! cached) and then reads its score like the other label methods.
//! Then each context's candidates become requests (planned by the engine's cached
//! runner, [`crate::engine::runner`]); results already in the [`ResultCache`] are reused and the others are sent to the scorer context by context
//! (one call, so the engine shares the prompts' common prefix) and stored one by one as
//! they arrive, so a killed run resumes where it stopped and a rerun computes nothing.
//!
//! [`score_contexts`] is the whole pipeline for library users (the `reproduce` tables);
//! the CLI resolves first so that it can show the prompt before the run.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::absolute;
use super::attribute::{Attribute, Task};
use super::diagnostics::{self, Diagnostics};
use super::geval::{self, Criteria, GevalInput, Steps, StepsSource};
use super::gptscore;
use super::rubric::protocol::Start;
use super::rubric::run::{feedbacks, RubricMethod};
use super::rubric::{FormatOutcome, Reading, Rubric, RubricProtocol};
use super::scale::{ScoreDistribution, ScoreScale};
use crate::data::{Candidate, Context};
use crate::engine::runner::{fill_together, plan_labels, LabelPlan};
use crate::engine::{LabelRequest, ResultCache, Scorer};
use crate::progress::{Progress, ProgressTask};
use crate::stats::Item;

/// How candidates are scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScoreMethod {
    /// Ask for a score between 1 and 10; expectation over the score tokens.
    Prompt,
    /// G-Eval: criteria, auto chain-of-thought steps, form filling; expectation.
    Geval,
    /// GPTScore: mean log-likelihood of the candidate given instruction and context.
    Gptscore,
    /// Rubric grading in the judge model's own format: feedback, then the score read after
    /// the result marker; expectation.
    Rubric,
}

impl ScoreMethod {
    pub fn name(self) -> &'static str {
        match self {
            ScoreMethod::Prompt => "prompt",
            ScoreMethod::Geval => "geval",
            ScoreMethod::Gptscore => "gptscore",
            ScoreMethod::Rubric => "rubric",
        }
    }
}

/// Everything a scoring run needs besides the scorer, the data and the cache.
#[derive(Debug, Clone)]
pub struct ScoreOptions {
    pub method: ScoreMethod,
    pub task: Task,
    /// The judged attribute: names the quality in prompt scoring and GPTScore, and picks
    /// G-Eval's built-in criteria unless `criteria` is given.
    pub attribute: String,
    /// The attribute's comparative phrase or adjective (needed for an attribute that is
    /// not built in, in prompt scoring and GPTScore; see [`Attribute::resolve`]).
    pub adjective: Option<String>,
    /// Prompt scoring's scale (default 1-10); for G-Eval, replaces the criteria's scale.
    pub scale: Option<ScoreScale>,
    /// G-Eval criteria (default: the built-in ones for `task` and `attribute`).
    pub criteria: Option<Criteria>,
    /// G-Eval's evaluation steps.
    pub steps: StepsSource,
    /// G-Eval: show each candidate's reference as the expected output; rubric grading:
    /// as the reference answer.
    pub reference: bool,
    /// Rubric grading's rubric and how it is asked.
    pub rubric: Option<RubricOptions>,
    /// Where to report progress (candidates done).
    pub progress: Progress,
}

/// Rubric grading's choices before the model is known.
#[derive(Debug, Clone, PartialEq)]
pub struct RubricOptions {
    pub rubric: Rubric,
    /// `None`: the model card's protocol, else plain.
    pub protocol: Option<RubricProtocol>,
    /// Most tokens of each feedback; `None`: no feedback, the score read right after the
    /// prompt and the marker.
    pub feedback_tokens: Option<usize>,
    /// Thinking judges: most tokens of a reasoning (`None`: the default).
    pub reasoning_tokens: Option<usize>,
    /// Thinking judges: thinking off, where the protocol can switch it off.
    pub thinking_off: bool,
}

impl ScoreOptions {
    /// Default scale and criteria, generated steps, no reference, no progress bar.
    pub fn new(method: ScoreMethod, task: Task, attribute: &str) -> Self {
        Self {
            method,
            task,
            attribute: attribute.to_string(),
            adjective: None,
            scale: None,
            criteria: None,
            steps: StepsSource::default(),
            reference: false,
            rubric: None,
            progress: Progress::none(),
        }
    }
}

/// A method with everything it needs decided.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolvedMethod {
    Prompt {
        task: Task,
        attribute: Attribute,
        scale: ScoreScale,
    },
    Geval {
        criteria: Criteria,
        steps: Steps,
        reference: bool,
    },
    Gptscore {
        task: Task,
        attribute: Attribute,
    },
    Rubric(RubricMethod),
}

impl ResolvedMethod {
    pub fn method(&self) -> ScoreMethod {
        match self {
            ResolvedMethod::Prompt { .. } => ScoreMethod::Prompt,
            ResolvedMethod::Geval { .. } => ScoreMethod::Geval,
            ResolvedMethod::Gptscore { .. } => ScoreMethod::Gptscore,
            ResolvedMethod::Rubric(_) => ScoreMethod::Rubric,
        }
    }

    /// Cache identity of the method's label results (`None`: not a label method).
    pub fn template_id(&self) -> Option<String> {
        match self {
            ResolvedMethod::Prompt { .. } => Some(absolute::TEMPLATE_ID.to_string()),
            ResolvedMethod::Geval {
                criteria, steps, ..
            } => Some(geval::template_id(criteria, &steps.text)),
            ResolvedMethod::Gptscore { .. } => None,
            ResolvedMethod::Rubric(rubric) => Some(rubric.template_id()),
        }
    }

    /// The scale of a label method.
    pub fn scale(&self) -> Option<ScoreScale> {
        match self {
            ResolvedMethod::Prompt { scale, .. } => Some(*scale),
            ResolvedMethod::Geval { criteria, .. } => Some(criteria.scale),
            ResolvedMethod::Gptscore { .. } => None,
            ResolvedMethod::Rubric(rubric) => Some(rubric.rubric.scale),
        }
    }

    /// The label request scoring `candidate` of `context` (label methods only; rubric
    /// grading with feedback reads its score after the feedback, see [`run_scoring`]).
    pub fn label_request(
        &self,
        scorer: &dyn Scorer,
        context: &Context,
        candidate: &Candidate,
    ) -> Result<LabelRequest> {
        match self {
            ResolvedMethod::Prompt {
                task,
                attribute,
                scale,
            } => absolute::request(
                scorer,
                *task,
                &attribute.name,
                &context.text,
                &candidate.text,
                *scale,
            ),
            ResolvedMethod::Geval {
                criteria,
                steps,
                reference,
            } => {
                let expected = if *reference {
                    Some(required_reference(candidate)?)
                } else {
                    None
                };
                let input = GevalInput {
                    source: Some(context.text.as_str()).filter(|s| !s.trim().is_empty()),
                    reference: expected,
                    output: &candidate.text,
                };
                geval::request(scorer, criteria, &steps.text, &input)
            }
            ResolvedMethod::Gptscore { .. } => bail!("GPTScore asks for no labels"),
            ResolvedMethod::Rubric(rubric) if rubric.feedback_tokens.is_none() => {
                rubric.score_request(scorer, context, candidate, None)
            }
            ResolvedMethod::Rubric(_) => {
                bail!("rubric grading with feedback reads its score after the feedback")
            }
        }
    }
}

/// `candidate`'s reference, where a reference answer was asked for (checked for every
/// candidate before the run by [`check_references`]).
pub(crate) fn required_reference(candidate: &Candidate) -> Result<&str> {
    candidate.reference.as_deref().with_context(|| {
        format!(
            "candidate `{}` has no `reference` (a reference answer was asked for)",
            candidate.id
        )
    })
}

/// With a reference answer asked for (`how`: `--reference`, `reference=True`), before any
/// model loads: every candidate of `contexts` needs a `reference`, and where one
/// reference is shown per comparison (`one_per_context`: relative rubric grading) the
/// candidates of a context must give the same one. Errors name the first candidate at
/// fault with its context and line, and how many more there are.
pub fn check_references(contexts: &[Context], how: &str, one_per_context: bool) -> Result<()> {
    let at = |candidate: &Candidate| {
        candidate
            .source
            .as_deref()
            .map_or_else(String::new, |s| format!(" ({s})"))
    };
    let missing: Vec<(&Context, &Candidate)> = contexts
        .iter()
        .flat_map(|c| c.candidates.iter().map(move |k| (c, k)))
        .filter(|(_, k)| k.reference.is_none())
        .collect();
    if let Some((context, candidate)) = missing.first() {
        let total: usize = contexts.iter().map(|c| c.candidates.len()).sum();
        bail!(
            "{how} shows each candidate's `reference`, but candidate `{}` of context `{}`{} has \
             none ({} of {total} candidates have none): give every row a `reference`, or leave \
             out {how}",
            candidate.id,
            context.id,
            at(candidate),
            missing.len()
        );
    }
    if one_per_context {
        for context in contexts {
            let Some(first) = context.candidates.first() else {
                continue;
            };
            if let Some(other) = context
                .candidates
                .iter()
                .find(|k| k.reference != first.reference)
            {
                bail!(
                    "{how}: candidates `{}`{} and `{}`{} of context `{}` give different \
                     references; relative grading shows one reference answer per comparison, so \
                     a context's candidates must give the same one",
                    first.id,
                    at(first),
                    other.id,
                    at(other),
                    context.id
                );
            }
        }
    }
    Ok(())
}

/// Check the options and settle what the method needs: the attribute, G-Eval's criteria
/// and steps (generated here when needed, once per model and criteria).
pub fn resolve_method(
    scorer: &mut dyn Scorer,
    options: &ScoreOptions,
    cache: Option<&ResultCache>,
) -> Result<ResolvedMethod> {
    Ok(match options.method {
        ScoreMethod::Prompt => ResolvedMethod::Prompt {
            task: options.task,
            attribute: Attribute::for_prompt_scoring(&options.attribute)?,
            scale: options.scale.unwrap_or(absolute::DEFAULT_SCALE),
        },
        ScoreMethod::Gptscore => ResolvedMethod::Gptscore {
            task: options.task,
            attribute: Attribute::resolve_adjective(
                &options.attribute,
                options.adjective.as_deref(),
            )?,
        },
        ScoreMethod::Geval => {
            let mut criteria = match &options.criteria {
                Some(criteria) => criteria.clone(),
                None => Criteria::builtin(options.task, &options.attribute)?,
            };
            if let Some(scale) = options.scale {
                criteria = criteria.with_scale(scale);
            }
            let steps = geval::resolve_steps(scorer, &criteria, &options.steps, cache)?;
            ResolvedMethod::Geval {
                criteria,
                steps,
                reference: options.reference,
            }
        }
        ScoreMethod::Rubric => {
            let chosen = options
                .rubric
                .as_ref()
                .context("rubric grading needs a rubric (--rubric NAME or FILE)")?;
            ResolvedMethod::Rubric(
                RubricMethod::new(
                    scorer,
                    chosen.rubric.clone(),
                    chosen.protocol.clone(),
                    chosen.feedback_tokens,
                    options.reference,
                )?
                .with_thinking(chosen.reasoning_tokens, chosen.thinking_off)?,
            )
        }
    })
}

/// One candidate's score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredCandidate {
    pub context_id: String,
    pub candidate_id: String,
    pub system_id: Option<String>,
    /// Expected score (prompt, G-Eval) or mean token log-probability (GPTScore).
    pub score: f64,
    /// The answer distribution over the scale (prompt, G-Eval, rubric).
    pub distribution: Option<ScoreDistribution>,
    /// Rubric grading with feedback: the model's feedback (the text before its result
    /// marker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// Rubric grading with feedback: whether the model kept to its format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<FormatOutcome>,
    /// Rubric grading with a thinking judge: its reasoning (between its markers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Rubric grading with a thinking judge: the reasoning was left open (cut at its
    /// budget) and closed before the verdict was read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_cut: bool,
    /// The candidate's human scores from the input, carried over for `correlate`.
    pub human: BTreeMap<String, f64>,
}

/// The results of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRun {
    pub method: ResolvedMethod,
    /// Input order: contexts in order, candidates in order.
    pub candidates: Vec<ScoredCandidate>,
    /// Results computed in this run / found in the cache.
    pub computed: usize,
    pub cached: usize,
    /// Whether the judge was judging: label mass, ties, G-Eval's steps, the rubric
    /// judge's format.
    pub diagnostics: Diagnostics,
}

impl ScoreRun {
    /// One meta-evaluation item per candidate with the human score `key`: its context,
    /// its system (else its id), its score and the human score.
    pub fn correlation_items(&self, key: &str) -> Vec<Item> {
        self.candidates
            .iter()
            .filter_map(|c| {
                c.human.get(key).map(|&human| Item {
                    group: c.context_id.clone(),
                    system: c.system_id.clone().unwrap_or(c.candidate_id.clone()),
                    pred: c.score,
                    human,
                })
            })
            .collect()
    }
}

/// Score every candidate of `contexts` (resolve the method, then run it).
pub fn score_contexts(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    options: &ScoreOptions,
    cache: Option<&ResultCache>,
) -> Result<Vec<ScoredCandidate>> {
    let method = resolve_method(scorer, options, cache)?;
    Ok(run_scoring(scorer, contexts, &method, &options.progress, cache)?.candidates)
}

/// The request of candidate `k` of context `c`.
type RequestOf<'a> = dyn Fn(&dyn Scorer, usize, usize) -> Result<LabelRequest> + 'a;

/// The label requests of one context's candidates, tokenised once and keyed.
fn plan_context(
    scorer: &dyn Scorer,
    template: &str,
    context: &Context,
    index: usize,
    request: &RequestOf,
) -> Result<LabelPlan> {
    let requests = (0..context.candidates.len())
        .map(|k| {
            request(scorer, index, k)
                .with_context(|| format!("candidate `{}`", context.candidates[k].id))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut plan = LabelPlan::new();
    let planned = plan_labels(scorer, template, requests, None);
    for (planned, candidate) in planned.into_iter().zip(&context.candidates) {
        plan.push(planned.with_context(|| format!("candidate `{}`", candidate.id))?);
    }
    Ok(plan)
}

fn scored(context: &Context, candidate: &Candidate, score: f64) -> ScoredCandidate {
    ScoredCandidate {
        context_id: context.id.clone(),
        candidate_id: candidate.id.clone(),
        system_id: candidate.system_id.clone(),
        score,
        distribution: None,
        feedback: None,
        format: None,
        reasoning: None,
        reasoning_cut: false,
        human: candidate.scores.clone(),
    }
}

/// Every candidate's score distribution from its label request: planned, looked up in
/// the cache, the rest filled in one call for the whole run; pushed to `run` in input
/// order with the counts of computed and cached results.
fn read_distributions(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    (template, scale): (&str, ScoreScale),
    request: &RequestOf,
    bar: &ProgressTask,
    cache: Option<&ResultCache>,
    run: &mut ScoreRun,
) -> Result<()> {
    let mut plans = Vec::with_capacity(contexts.len());
    let mut cached = 0;
    for (index, context) in contexts.iter().enumerate() {
        let mut plan = plan_context(scorer, template, context, index, request)
            .with_context(|| format!("context `{}`", context.id))?;
        cached += plan.lookup(cache)?;
        plans.push(plan);
    }
    bar.found_in_cache(cached as u64);
    run.cached += cached;
    let asked: usize = plans.iter().map(LabelPlan::len).sum();
    run.computed +=
        fill_together(&mut plans, scorer, cache, &mut |_| bar.step(1)).with_context(|| {
            format!(
                "scoring {} candidates of {} contexts ({})",
                asked - cached,
                contexts.len(),
                super::unfinished(contexts, plans.iter())
            )
        })?;
    for (context, plan) in contexts.iter().zip(plans) {
        let found = plan.into_partial_results();
        for (candidate, result) in context.candidates.iter().zip(found) {
            let result = result.with_context(|| {
                format!("context `{}`: no result for `{}`", context.id, candidate.id)
            })?;
            let distribution =
                ScoreDistribution::from_result(scale, &result).with_context(|| {
                    format!("context `{}`, candidate `{}`", context.id, candidate.id)
                })?;
            let mut entry = scored(context, candidate, distribution.expectation);
            entry.distribution = Some(distribution);
            run.candidates.push(entry);
        }
    }
    Ok(())
}

/// Rubric grading: the feedbacks (one generation per candidate) unless the method asks
/// for none, then every score read after its marker.
fn run_rubric(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    method: &RubricMethod,
    progress: &Progress,
    cache: Option<&ResultCache>,
    run: &mut ScoreRun,
) -> Result<()> {
    let total = contexts.iter().map(|c| c.candidates.len()).sum::<usize>() as u64;
    let ids = (method.template_id(), method.rubric.scale);
    let Some(max_tokens) = method.feedback_tokens else {
        progress.note(&format!(
            "rubric grading ({} format, {}): reading each score right after the rubric prompt \
             and `{}` (no feedback; through the prefix trie)",
            method.protocol,
            method.protocol_source.describe(),
            method.marker()
        ));
        let bar = progress.task(total, "scores read (no feedback)");
        let request: &RequestOf = &|scorer, c, k| {
            let context = &contexts[c];
            method.score_request(scorer, context, &context.candidates[k], None)
        };
        return read_distributions(scorer, contexts, (&ids.0, ids.1), request, &bar, cache, run);
    };
    // The scores are read as each feedback ends, into the result cache (one in memory
    // when the run keeps none), where the scoring below finds them.
    let in_memory;
    let cache = match cache {
        Some(cache) => cache,
        None => {
            in_memory = ResultCache::in_memory()?;
            &in_memory
        }
    };
    let (readings, generated) =
        feedbacks(scorer, contexts, method, max_tokens, progress, Some(cache))?;
    let bar = progress.task(
        total,
        &format!(
            "scores read after `{}` (scoring)",
            method.marker().trim_end()
        ),
    );
    let cache = Some(cache);
    let cached_before = run.cached;
    let request: &RequestOf = &|scorer, c, k| {
        let context = &contexts[c];
        let answer = readings[c][k].answer.as_str();
        method.score_request(scorer, context, &context.candidates[k], Some(answer))
    };
    let first = run.candidates.len();
    read_distributions(scorer, contexts, (&ids.0, ids.1), request, &bar, cache, run)?;
    // Scores read with their feedbacks in this run were computed now, not found.
    let read_now = generated.labels.min(run.cached - cached_before);
    run.cached -= read_now;
    run.computed += read_now;
    let readings: Vec<&Reading> = readings.iter().flatten().collect();
    for (entry, reading) in run.candidates[first..].iter_mut().zip(readings) {
        entry.feedback = Some(reading.feedback.clone());
        entry.format = Some(reading.format);
        entry.reasoning = reading.reasoning.clone();
        entry.reasoning_cut = reading.reasoning_cut;
    }
    tracing::debug!(
        generations = generated.generations,
        scores = generated.labels,
        "rubric feedbacks generated in this run"
    );
    Ok(())
}

/// Score every candidate of `contexts` with a resolved method.
pub fn run_scoring(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    method: &ResolvedMethod,
    progress: &Progress,
    cache: Option<&ResultCache>,
) -> Result<ScoreRun> {
    let total = contexts.iter().map(|c| c.candidates.len()).sum();
    let mut run = ScoreRun {
        method: method.clone(),
        candidates: Vec::with_capacity(total),
        computed: 0,
        cached: 0,
        diagnostics: Diagnostics::default(),
    };
    match method {
        ResolvedMethod::Gptscore { task, attribute } => {
            let bar = progress.task(total as u64, "candidates");
            for context in contexts {
                let requests = context
                    .candidates
                    .iter()
                    .map(|c| {
                        gptscore::request(scorer, *task, attribute, &context.text, &c.text)
                            .with_context(|| {
                                format!("context `{}`, candidate `{}`", context.id, c.id)
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let (likelihoods, computed) = gptscore::score_requests(scorer, &requests, cache)
                    .with_context(|| format!("context `{}`", context.id))?;
                run.computed += computed;
                run.cached += requests.len() - computed;
                for (candidate, likelihood) in context.candidates.iter().zip(likelihoods) {
                    run.candidates
                        .push(scored(context, candidate, likelihood.mean_logprob));
                }
                bar.found_in_cache((requests.len() - computed) as u64);
                bar.step(computed as u64)?;
            }
        }
        ResolvedMethod::Prompt { .. } | ResolvedMethod::Geval { .. } => {
            let bar = progress.task(total as u64, "candidates");
            let template = method
                .template_id()
                .context("a label method has a template id")?;
            let scale = method.scale().context("a label method has a scale")?;
            let request: &RequestOf = &|scorer, c, k| {
                let context = &contexts[c];
                method.label_request(scorer, context, &context.candidates[k])
            };
            read_distributions(
                scorer,
                contexts,
                (&template, scale),
                request,
                &bar,
                cache,
                &mut run,
            )?;
        }
        ResolvedMethod::Rubric(rubric) => {
            run_rubric(scorer, contexts, rubric, progress, cache, &mut run)?;
        }
    }
    run.diagnostics = diagnostics::for_scores(&run, diagnostics::Audience::CommandLine);
    Ok(run)
}

/// `{"1": p1, "2": p2, ...}` in score order.
fn probability_object(scores: &[i64], values: &[f64]) -> String {
    let fields: Vec<String> = scores
        .iter()
        .zip(values)
        .map(|(s, p)| format!("{}:{}", json!(s.to_string()), json!(p)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// One JSON line per candidate, input order: `context_id`, `candidate_id`, `system_id`
/// (when known), `score`, for prompt scoring, G-Eval and rubric grading `argmax`,
/// `probabilities` (normalised over the scale), `raw_probabilities` and `label_mass`,
/// for rubric grading with feedback the model's `feedback` and its `format` (`kept`,
/// `no-score`, `repeated`, `missing`, `cut`), and the input's human `scores` (so that
/// `nlg-judge correlate --pred score --human scores.<name>` reads the file directly).
pub fn write_scored(candidates: &[ScoredCandidate], out: &mut dyn Write) -> Result<()> {
    write_rows(candidates, None, out)
}

/// [`write_scored`] for a whole run, as `score --output` writes it: with rubric grading
/// every row also records how it was graded (`rubric`: the rubric's name, criterion and
/// scale, the protocol, where it came from and the feedback bound; see
/// [`super::rubric::rubric_record`]).
pub fn write_run(run: &ScoreRun, out: &mut dyn Write) -> Result<()> {
    let record = match &run.method {
        ResolvedMethod::Rubric(method) => Some(super::rubric::rubric_record(
            &method.rubric,
            &method.protocol,
            method.protocol_source,
            method.feedback_tokens,
        )),
        _ => None,
    };
    write_rows(&run.candidates, record.as_ref(), out)
}

fn write_rows(
    candidates: &[ScoredCandidate],
    rubric: Option<&serde_json::Value>,
    out: &mut dyn Write,
) -> Result<()> {
    for c in candidates {
        let mut line = format!(
            "{{\"context_id\":{},\"candidate_id\":{}",
            json!(c.context_id),
            json!(c.candidate_id)
        );
        if let Some(system) = &c.system_id {
            line.push_str(&format!(",\"system_id\":{}", json!(system)));
        }
        line.push_str(&format!(",\"score\":{}", json!(c.score)));
        if let Some(d) = &c.distribution {
            line.push_str(&format!(
                ",\"argmax\":{},\"probabilities\":{},\"raw_probabilities\":{},\"label_mass\":{}",
                d.argmax,
                probability_object(&d.scores, &d.normalised),
                probability_object(&d.scores, &d.raw),
                json!(d.mass)
            ));
        }
        if let Some(feedback) = &c.feedback {
            line.push_str(&format!(",\"feedback\":{}", json!(feedback)));
        }
        if let Some(format) = c.format {
            line.push_str(&format!(",\"format\":{}", json!(format.name())));
        }
        if let Some(rubric) = rubric {
            line.push_str(&format!(",\"rubric\":{rubric}"));
        }
        if !c.human.is_empty() {
            line.push_str(&format!(",\"scores\":{}", json!(c.human)));
        }
        line.push_str("}\n");
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}

/// The first candidate's prompt as the model reads it, with the labels (for
/// `--show-prompt`).
pub fn show_first_prompt(
    scorer: &dyn Scorer,
    contexts: &[Context],
    method: &ResolvedMethod,
) -> Result<String> {
    let (context, candidate) = contexts
        .iter()
        .find_map(|c| c.candidates.first().map(|first| (c, first)))
        .context("no candidates")?;
    let (prompt, after) = match method {
        ResolvedMethod::Rubric(
            rubric @ RubricMethod {
                feedback_tokens: Some(max_tokens),
                ..
            },
        ) => {
            let max_tokens = *max_tokens;
            let request = rubric.feedback_request(
                scorer,
                context,
                candidate,
                Start::Feedback(""),
                max_tokens,
            )?;
            (
                request.prompt,
                format!(
                    "the model writes its feedback here (at most {max_tokens} tokens); the score \
                     is read after `{}` ({} format)",
                    rubric.marker(),
                    rubric.protocol
                ),
            )
        }
        ResolvedMethod::Gptscore { task, attribute } => {
            let request =
                gptscore::request(scorer, *task, attribute, &context.text, &candidate.text)?;
            (
                request.prompt,
                format!("continuation scored: {:?}", request.continuation),
            )
        }
        _ => {
            let request = method.label_request(scorer, context, candidate)?;
            let labels: Vec<String> = request
                .labels
                .iter()
                .map(|label| format!("{:?}", scorer.encode_label(label).unwrap_or_default()))
                .collect();
            (
                request.prompt,
                format!("score labels (token ids): {}", labels.join(" ")),
            )
        }
    };
    let rendered = scorer.render(&prompt)?;
    let mut text = format!(
        "--- context `{}`, candidate `{}` ({}) ---\n{}\n",
        context.id,
        candidate.id,
        method.method().name(),
        rendered.input
    );
    if !rendered.decoder_prefix.is_empty() {
        text.push_str(&format!(
            "--- decoder prefix ---\n{}\n",
            rendered.decoder_prefix
        ));
    }
    text.push_str(&format!("--- {after} ---\n"));
    Ok(text)
}

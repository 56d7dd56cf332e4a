//! The absolute-scoring runner: every candidate of every context scored on its own by
//! prompt scoring, G-Eval or GPTScore, with cached, resumable results.
//!
//! A method is first *resolved* ([`resolve_method`]): the attribute checked, G-Eval's
//! criteria chosen and its evaluation steps obtained (given, stored, or generated once).
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
use super::scale::{ScoreDistribution, ScoreScale};
use crate::data::{Candidate, Context};
use crate::engine::runner::{fill_together, plan_labels, LabelPlan};
use crate::engine::{LabelRequest, ResultCache, Scorer};
use crate::progress::Progress;
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
}

impl ScoreMethod {
    pub fn name(self) -> &'static str {
        match self {
            ScoreMethod::Prompt => "prompt",
            ScoreMethod::Geval => "geval",
            ScoreMethod::Gptscore => "gptscore",
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
    /// G-Eval: show each candidate's reference as the expected output.
    pub reference: bool,
    /// Where to report progress (candidates done).
    pub progress: Progress,
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
}

impl ResolvedMethod {
    pub fn method(&self) -> ScoreMethod {
        match self {
            ResolvedMethod::Prompt { .. } => ScoreMethod::Prompt,
            ResolvedMethod::Geval { .. } => ScoreMethod::Geval,
            ResolvedMethod::Gptscore { .. } => ScoreMethod::Gptscore,
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
        }
    }

    /// The scale of a label method.
    pub fn scale(&self) -> Option<ScoreScale> {
        match self {
            ResolvedMethod::Prompt { scale, .. } => Some(*scale),
            ResolvedMethod::Geval { criteria, .. } => Some(criteria.scale),
            ResolvedMethod::Gptscore { .. } => None,
        }
    }

    /// The label request scoring `candidate` of `context` (label methods only).
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
                    Some(candidate.reference.as_deref().with_context(|| {
                        format!(
                            "candidate `{}` has no `reference` (needed with --reference)",
                            candidate.id
                        )
                    })?)
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
        }
    }
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
    /// The answer distribution over the scale (prompt, G-Eval).
    pub distribution: Option<ScoreDistribution>,
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
    /// Whether the judge was judging: label mass, ties, G-Eval's steps.
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

/// The label requests of one context's candidates, tokenised once and keyed.
fn plan_context(
    scorer: &dyn Scorer,
    method: &ResolvedMethod,
    template: &str,
    context: &Context,
) -> Result<LabelPlan> {
    let requests = context
        .candidates
        .iter()
        .map(|candidate| {
            method
                .label_request(scorer, context, candidate)
                .with_context(|| format!("candidate `{}`", candidate.id))
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
        human: candidate.scores.clone(),
    }
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
    let bar = progress.task(total as u64, "candidates");
    let mut run = ScoreRun {
        method: method.clone(),
        candidates: Vec::with_capacity(total),
        computed: 0,
        cached: 0,
        diagnostics: Diagnostics::default(),
    };
    match method {
        ResolvedMethod::Gptscore { task, attribute } => {
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
            let template = method
                .template_id()
                .context("a label method has a template id")?;
            let scale = method.scale().context("a label method has a scale")?;
            let mut plans = Vec::with_capacity(contexts.len());
            for context in contexts {
                let mut plan = plan_context(scorer, method, &template, context)
                    .with_context(|| format!("context `{}`", context.id))?;
                run.cached += plan.lookup(cache)?;
                plans.push(plan);
            }
            bar.found_in_cache(run.cached as u64);
            let asked: usize = plans.iter().map(LabelPlan::len).sum();
            run.computed += fill_together(&mut plans, scorer, cache, &mut |_| bar.step(1))
                .with_context(|| {
                    format!(
                        "scoring {} candidates of {} contexts ({})",
                        asked - run.cached,
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
                    let distribution = ScoreDistribution::from_result(scale, &result)
                        .with_context(|| {
                            format!("context `{}`, candidate `{}`", context.id, candidate.id)
                        })?;
                    let mut entry = scored(context, candidate, distribution.expectation);
                    entry.distribution = Some(distribution);
                    run.candidates.push(entry);
                }
            }
        }
    }
    drop(bar);
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
/// (when known), `score`, for prompt scoring and G-Eval `argmax`, `probabilities`
/// (normalised over the scale), `raw_probabilities` and `label_mass`, and the input's
/// human `scores` (so that `nlg-judge correlate --pred score --human scores.<name>`
/// reads the file directly).
pub fn write_scored(candidates: &[ScoredCandidate], out: &mut dyn Write) -> Result<()> {
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

//! The resumable compare runner: comparisons -> probabilities -> scores and ranks.
//!
//! For every context the design picks the ordered pairs; each pair becomes a label
//! request in the model's conventions, tokenised once and keyed by the engine's cached
//! runner ([`crate::engine::runner`]). Results already in the [`ResultCache`] are
//! reused; the others are sent to the scorer context by context (all of a context's
//! missing comparisons in one call, so the engine can share their prefixes) and stored
//! one by one as they arrive, so a killed run resumes where it stopped. Once every
//! probability is known, the run's decision threshold is set (0.5, or the balanced
//! threshold over all comparisons of the run when debiasing), and each context's
//! candidates are scored, ranked and summarised; with absolute scores as experts
//! ([`CompareOptions::prior`]) the scores are the joint Product of Experts of the
//! comparisons and those scores ([`crate::rank::hybrid`]). Outputs are written in input
//! order with fixed float formats, so a resumed run writes the same bytes as an
//! uninterrupted one.

use std::fmt::Write as _;
use std::io::Write;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::adaptive::{AdaptiveSelector, AdaptiveSettings, Ending};
use super::design::{context_rng, Design};
use super::prior::PriorScores;
use super::template::{first_wins, Fill, PairwiseTemplate};
use crate::data::{find_human_key_among, human_keys, Context};
use crate::engine::runner::{fill_together, plan_labels, LabelPlan, PlannedLabel};
use crate::engine::{Conventions, Label, LabelRequest, LabelResult, ResultCache, Scorer};
use crate::judge::attribute::{Attribute, Nouns, Task};
use crate::judge::diagnostics::{self, Diagnostics};
use crate::judge::rubric::relative::{write_feedbacks, RelativeGrading};
use crate::judge::rubric::{FormatCounts, Reading};
use crate::progress::Progress;
use crate::rank::{
    balanced_threshold, first_position_rate, hybrid_pooled_at_threshold, order_consistency,
    pairwise_accuracy, ranks_from_scores, score_at_threshold, Outcome, RankMethod, Rate, SlopeFit,
};
use crate::stats::Item;

/// Positional debiasing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Debias {
    /// Decide at 0.5; use the probabilities as they are.
    None,
    /// Balanced threshold over the run's comparisons (P(A) = 0.5), and the equivalent
    /// reweighting of the probabilities for the soft rankings.
    Threshold,
}

/// Everything a compare run needs besides the scorer, the data and the cache.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub task: Task,
    /// The prompt nouns (the task's preset unless given).
    pub nouns: Nouns,
    pub attribute: Attribute,
    pub template: PairwiseTemplate,
    pub design: Design,
    /// R for the random, no-repeat and symmetric designs; the budget of the adaptive one.
    pub comparisons: Option<usize>,
    /// Rounds and stop rule of the adaptive design.
    pub adaptive: AdaptiveSettings,
    pub seed: u64,
    pub rank: RankMethod,
    /// A ranking to use instead of `rank` when the judge's diagnostics show `rank`
    /// cannot separate the candidates (a strong positional bias or mostly ties) and the
    /// design compares both orders of its pairs; `None` (the library's and `reproduce`'s
    /// default): always `rank`, as the papers rank. The command line sets Product of
    /// Experts here when `--rank` is not given.
    pub rank_fallback: Option<RankMethod>,
    pub debias: Debias,
    /// Human score field for pairwise accuracy. `None`: the attribute's name, used where
    /// every candidate of a context has it; given: required in every context.
    pub score_field: Option<String>,
    /// Where to report progress (comparisons done).
    pub progress: Progress,
    /// Whose words the diagnostics' remedies use.
    pub audience: crate::judge::diagnostics::Audience,
    /// Relative rubric grading in the judge's own pairwise format instead of `template`
    /// (`compare --rubric`); `None`: the template.
    pub relative: Option<Box<RelativeGrading>>,
    /// Absolute scores as experts beside the comparisons: the scores are then their
    /// joint Product of Experts (`rank` and `rank_fallback` unused), and the adaptive
    /// design's fit is the joint one. `None`: comparisons alone.
    pub prior: Option<PriorScores>,
}

impl CompareOptions {
    /// Full design, win ratio, no debiasing, seed 0, no progress bar.
    pub fn new(task: Task, attribute: Attribute, template: PairwiseTemplate) -> Self {
        Self {
            task,
            nouns: Nouns::of_task(task),
            attribute,
            template,
            design: Design::Full,
            comparisons: None,
            adaptive: AdaptiveSettings::default(),
            seed: 0,
            rank: RankMethod::WinRatio,
            rank_fallback: None,
            debias: Debias::None,
            score_field: None,
            progress: Progress::none(),
            audience: Default::default(),
            relative: None,
            prior: None,
        }
    }

    /// The label cache's name for this run's prompts.
    pub fn template_id(&self) -> String {
        match &self.relative {
            Some(relative) => relative.template_id(),
            None => self.template.id().to_string(),
        }
    }

    /// These options with absolute scores as experts (see [`Self::prior`]): the ranking
    /// is then Product of Experts, with no fallback.
    pub fn with_prior(mut self, prior: Option<PriorScores>) -> Self {
        if prior.is_some() {
            self.rank = RankMethod::Poe;
            self.rank_fallback = None;
        }
        self.prior = prior;
        self
    }
}

/// One comparison's outcome: `p_a` = P(candidate `first`, shown as A, is better).
///
/// Where the judge may call a tie (a relative protocol with a tie label) the three
/// answers are read: `p_a`, `p_b` and `p_tie` are then normalised over A, B and the tie
/// (they sum to one) and `label_mass` is the raw mass of all three. The rankings read
/// [`Comparison::outcome`] (see [`crate::rank`] for how each counts a tie); the positional
/// bias, the consistency, the debiasing threshold and the decisions read
/// [`Comparison::a_over_b`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Comparison {
    pub first: usize,
    pub second: usize,
    pub p_a: f64,
    pub label_mass: f64,
    /// P(B) over A, B and the tie; `None` without a tie label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_b: Option<f64>,
    /// P(tie) over A, B and the tie; `None` without a tie label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_tie: Option<f64>,
}

impl Comparison {
    /// A comparison read from its label result: with two labels (A, B) P(A) over them
    /// ([`first_wins`]) and their mass; with three (A, B, tie) P(A), P(B) and P(tie), each
    /// normalised over the three, and the mass of all three.
    pub fn read(first: usize, second: usize, result: &LabelResult) -> Result<Self> {
        if result.labels.len() != 3 {
            let (p_a, label_mass) = first_wins(result)?;
            return Ok(Self {
                first,
                second,
                p_a,
                label_mass,
                p_b: None,
                p_tie: None,
            });
        }
        let p = result.normalised();
        if !p.iter().all(|p| p.is_finite()) {
            bail!(
                "the three labels got zero probability (log-probs {}, {} and {})",
                result.labels[0].logprob,
                result.labels[1].logprob,
                result.labels[2].logprob
            );
        }
        Ok(Self {
            first,
            second,
            p_a: p[0],
            label_mass: result.label_mass(),
            p_b: Some(p[1]),
            p_tie: Some(p[2]),
        })
    }

    /// P(A) renormalised over A and B: `p_a` itself without a tie label, else
    /// P(A) / (P(A) + P(B)) (0.5 where the judge put everything on the tie).
    pub fn a_over_b(&self) -> f64 {
        match self.p_b {
            None => self.p_a,
            Some(p_b) if self.p_a + p_b > 0.0 => self.p_a / (self.p_a + p_b),
            Some(_) => 0.5,
        }
    }

    /// The comparison as the rankings read it: P(A) over A and B, and P(tie).
    pub fn outcome(&self) -> Outcome {
        match self.p_tie {
            None => Outcome::new(self.first, self.second, self.p_a),
            Some(tie) => Outcome::with_tie(self.first, self.second, self.a_over_b(), tie),
        }
    }

    /// Whether the tie is the most likely of the judge's answers.
    pub fn tie_decided(&self) -> bool {
        match (self.p_b, self.p_tie) {
            (Some(p_b), Some(tie)) => tie > self.p_a && tie > p_b,
            _ => false,
        }
    }
}

/// The results for one context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextResult {
    pub context_id: String,
    pub candidate_ids: Vec<String>,
    /// In design order (sorted by first, then second).
    pub comparisons: Vec<Comparison>,
    /// One per candidate, input order; higher is better.
    pub scores: Vec<f64>,
    /// 1 = best, ties share the average rank.
    pub ranks: Vec<f64>,
    /// P(A) at the run's threshold.
    pub first_position: Rate,
    pub consistency: Rate,
    /// Against the human scores, when the context has them.
    pub accuracy: Option<Rate>,
    /// How the adaptive design went here (`None` for the other designs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveRun>,
    /// With absolute scores as experts: the slope the scores use, in logits per standard
    /// deviation of the absolute scores; one for the whole run ([`CompareResult::prior`]),
    /// repeated here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prior_slope: Option<f64>,
}

/// One context's adaptive selection: the rounds it took and why it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AdaptiveRun {
    pub rounds: usize,
    pub ending: Ending,
}

/// The results of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareResult {
    pub contexts: Vec<ContextResult>,
    /// The decision threshold (0.5 unless debiased).
    pub tau: f64,
    /// P(A) at 0.5, before any debiasing.
    pub first_position_raw: Rate,
    /// P(A) at `tau`.
    pub first_position: Rate,
    pub consistency: Rate,
    pub accuracy: Option<Rate>,
    /// The human score field accuracy was measured against.
    pub score_field: Option<String>,
    /// With absolute scores as experts: the run's one slope from them onto the
    /// comparisons, fitted over every context, and whether it was held at 0 (a negative
    /// slope the comparisons do not support; see [`crate::rank::hybrid`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prior: Option<SlopeFit>,
    /// The input's key matching the attribute (or the asked field), case-insensitively;
    /// `None`: no candidate has human scores for it.
    pub human_key: Option<String>,
    /// Comparisons the scorer computed in this run / found in the cache.
    pub computed: usize,
    pub cached: usize,
    /// The ranking the scores come from (the options' `rank`, or their fallback when the
    /// diagnostics called for it).
    pub rank: RankMethod,
    /// Whether the judge was judging: positional bias, order consistency, ties, label
    /// mass, each with its threshold and remedy.
    pub diagnostics: Diagnostics,
    /// Relative rubric grading: how it graded (the rubric's name, criterion and scale,
    /// the protocol and where it came from, the feedback bound), as every output row
    /// records it ([`crate::judge::rubric::rubric_record`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rubric: Option<serde_json::Value>,
    /// Where the judge may call a tie (a relative protocol with a tie label): how the run
    /// counted the ties ([`ties_note`]); `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ties: Option<String>,
    /// Relative rubric grading's feedbacks, read, by (context id, first id, second id);
    /// empty otherwise.
    #[serde(skip)]
    pub feedbacks: std::collections::BTreeMap<(String, String, String), Reading>,
}

impl CompareResult {
    /// One meta-evaluation item per candidate with the human score `key`: its context, its
    /// system (else its id), its score as the output file writes it (6 decimals) and the
    /// human score. `contexts` are the run's input.
    pub fn correlation_items(&self, contexts: &[Context], key: &str) -> Vec<Item> {
        let mut items = Vec::new();
        for (scored, input) in self.contexts.iter().zip(contexts) {
            for (k, candidate) in input.candidates.iter().enumerate() {
                if let Some(&human) = candidate.scores.get(key) {
                    items.push(Item {
                        group: scored.context_id.clone(),
                        system: candidate.system_id.clone().unwrap_or(candidate.id.clone()),
                        pred: fixed(scored.scores[k], 6)
                            .parse()
                            .unwrap_or(scored.scores[k]),
                        human,
                    });
                }
            }
        }
        items
    }
}

/// One context's planned comparisons.
pub struct Plan {
    /// Ordered pairs `(first, second)` of candidate indices, in design order.
    pub pairs: Vec<(usize, usize)>,
    /// One tokenised, keyed label request per pair.
    pub labels: LabelPlan,
}

/// The label requests of a context's comparisons, in design order, each tokenised once
/// and keyed for the cache; `labels` are the token ids of the scorer's two label words.
pub fn plan_context(
    scorer: &dyn Scorer,
    context: &Context,
    options: &CompareOptions,
    labels: &[Vec<u32>],
) -> Result<Plan> {
    let pairs = design_pairs(context, options)?;
    let labels = plan_pairs(scorer, context, options, labels, &pairs)?;
    Ok(Plan { pairs, labels })
}

/// The label requests of the ordered `pairs` of one context, in the order given.
pub fn plan_pairs(
    scorer: &dyn Scorer,
    context: &Context,
    options: &CompareOptions,
    labels: &[Vec<u32>],
    pairs: &[(usize, usize)],
) -> Result<LabelPlan> {
    let conventions = &scorer.info().conventions;
    let (requests, labels) = match &options.relative {
        Some(relative) => (
            pairs
                .iter()
                .map(|&pair| relative.choice_request(scorer, context, pair))
                .collect::<Result<Vec<_>>>()?,
            None,
        ),
        None => {
            let question = options.attribute.question(&options.nouns.item);
            let requests = pairs
                .iter()
                .map(|&pair| comparison_request(conventions, context, options, &question, pair))
                .collect();
            (requests, Some(labels))
        }
    };
    let mut plan = LabelPlan::new();
    let planned = plan_labels(scorer, &options.template_id(), requests, labels);
    for (planned, &(i, j)) in planned.into_iter().zip(pairs) {
        plan.push(planned.with_context(|| {
            format!(
                "comparison `{}` vs `{}`",
                context.candidates[i].id, context.candidates[j].id
            )
        })?);
    }
    Ok(plan)
}

/// The label request comparing candidate `first` (shown as A) with `second` (as B) of
/// `context`, in the scorer's conventions; for relative rubric grading the request read
/// right after the prompt and the marker (what a feedback is written after).
pub(crate) fn comparison_request_for(
    scorer: &dyn Scorer,
    context: &Context,
    options: &CompareOptions,
    pair: (usize, usize),
) -> Result<LabelRequest> {
    if let Some(relative) = &options.relative {
        let direct = RelativeGrading {
            feedback_tokens: None,
            readings: Default::default(),
            ..(**relative).clone()
        };
        return direct.choice_request(scorer, context, pair);
    }
    let question = options.attribute.question(&options.nouns.item);
    Ok(comparison_request(
        &scorer.info().conventions,
        context,
        options,
        &question,
        pair,
    ))
}

/// The ordered pairs the design compares in `context` (as [`plan_context`] draws them).
pub fn design_pairs(context: &Context, options: &CompareOptions) -> Result<Vec<(usize, usize)>> {
    let mut rng = context_rng(options.seed, &context.id);
    options
        .design
        .pairs(context.candidates.len(), options.comparisons, &mut rng)
}

/// The label request comparing candidate `first` (shown as A) with `second` (as B).
fn comparison_request(
    conventions: &Conventions,
    context: &Context,
    options: &CompareOptions,
    question: &str,
    (first, second): (usize, usize),
) -> LabelRequest {
    let fill = Fill {
        context: &context.text,
        a: &context.candidates[first].text,
        b: &context.candidates[second].text,
        adjective: &options.attribute.adjective,
        item: &options.nouns.item,
        question,
        context_label: &options.nouns.context_label,
    };
    options.template.request(conventions, &fill)
}

/// The token ids of the scorer's two pairwise label words (first, second position).
pub fn pairwise_labels(scorer: &dyn Scorer) -> Result<Vec<Vec<u32>>> {
    let conventions = &scorer.info().conventions;
    [&conventions.label_a, &conventions.label_b]
        .into_iter()
        .map(|text| {
            scorer
                .encode_label(&Label::Text(text.clone()))
                .with_context(|| format!("cannot encode label {text:?}"))
        })
        .collect()
}

/// Compute the comparisons of several option sets into `cache`, one scorer call per
/// context. The attributes of one template differ only in the question at the end, so
/// asking for all of them at once lets the engine compute every shared prefix (context,
/// first candidate, second candidate) once for all attributes. Returns the comparisons
/// (distinct prompts) computed and found in the cache; later [`run_compare`] calls with
/// the same options then read everything from the cache.
pub fn prefetch_comparisons(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    option_sets: &[CompareOptions],
    cache: &ResultCache,
    progress: &Progress,
) -> Result<(usize, usize)> {
    let labels = pairwise_labels(scorer)?;
    let mut per_context = Vec::with_capacity(contexts.len());
    let (mut total, mut cached) = (0, 0);
    for context in contexts {
        let mut distinct = LabelPlan::new();
        let mut seen = std::collections::HashSet::new();
        for options in option_sets {
            let plan = plan_context(scorer, context, options, &labels)
                .with_context(|| format!("context `{}`", context.id))?;
            for (request, key) in plan.labels.requests().iter().zip(plan.labels.keys()) {
                if seen.insert(key.clone()) {
                    distinct.push(PlannedLabel {
                        request: request.clone(),
                        key: key.clone(),
                    });
                }
            }
        }
        total += distinct.len();
        cached += distinct.lookup(Some(cache))?;
        per_context.push(distinct);
    }
    let bar = progress.task(total as u64, "comparisons");
    bar.found_in_cache(cached as u64);
    let missing = total - cached;
    fill_together(&mut per_context, scorer, Some(cache), &mut |_| bar.step(1)).with_context(
        || {
            format!(
                "scoring {missing} comparisons of {} contexts ({})",
                contexts.len(),
                crate::judge::unfinished(contexts, per_context.iter())
            )
        },
    )?;
    drop(bar);
    Ok((total - cached, cached))
}

/// Run pairwise comparative assessment over `contexts`.
pub fn run_compare(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    options: &CompareOptions,
    cache: Option<&ResultCache>,
) -> Result<CompareResult> {
    options.design.check_request(options.comparisons)?;
    if let Some(relative) = &options.relative {
        if relative.feedback_tokens.is_some() && relative.readings.is_empty() {
            return run_relative_with_feedback(scorer, contexts, options, relative, cache);
        }
    }
    let labels = pairwise_labels(scorer)?;
    if options.design == Design::Adaptive {
        return run_adaptive(scorer, contexts, options, cache, &labels);
    }

    let mut plans = Vec::with_capacity(contexts.len());
    let mut cached = 0;
    for context in contexts {
        let mut plan = plan_context(scorer, context, options, &labels)
            .with_context(|| format!("context `{}`", context.id))?;
        cached += plan.labels.lookup(cache)?;
        plans.push(plan);
    }
    let total: usize = plans.iter().map(|p| p.pairs.len()).sum();
    let bar = options.progress.task(total as u64, "comparisons");
    bar.found_in_cache(cached as u64);
    let missing = total - cached;
    let computed = fill_together(
        plans.iter_mut().map(|plan| &mut plan.labels),
        scorer,
        cache,
        &mut |_| bar.step(1),
    )
    .with_context(|| {
        format!(
            "scoring {missing} comparisons of {} contexts ({})",
            contexts.len(),
            crate::judge::unfinished(contexts, plans.iter().map(|plan| &plan.labels))
        )
    })?;
    drop(bar);

    let mut all_comparisons = Vec::with_capacity(contexts.len());
    for (context, plan) in contexts.iter().zip(plans) {
        let mut comparisons = Vec::with_capacity(plan.pairs.len());
        let found: Vec<Option<LabelResult>> = plan.labels.into_partial_results();
        for (&(first, second), result) in plan.pairs.iter().zip(found) {
            let result = result.with_context(|| {
                format!(
                    "context `{}`: no result for comparison {first} vs {second}",
                    context.id
                )
            })?;
            let comparison = Comparison::read(first, second, &result).with_context(|| {
                format!(
                    "context `{}`: `{}` vs `{}`",
                    context.id, context.candidates[first].id, context.candidates[second].id
                )
            })?;
            comparisons.push(comparison);
        }
        all_comparisons.push(comparisons);
    }
    let mut result = summarise(contexts, all_comparisons, options)?;
    result.computed = computed;
    result.cached = cached;
    Ok(result)
}

/// [`run_compare`] for relative rubric grading with feedback: every ordered pair's
/// feedback first (one generation each, cached), then the comparisons read after them;
/// the diagnostics count how often the judge kept to its format.
fn run_relative_with_feedback(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    options: &CompareOptions,
    relative: &RelativeGrading,
    cache: Option<&ResultCache>,
) -> Result<CompareResult> {
    if options.design == Design::Adaptive {
        bail!(
            "relative rubric grading with feedback cannot use --design adaptive (the \
             feedbacks are written before the comparisons are read): add --no-feedback, or \
             use another design"
        );
    }
    let pairs = contexts
        .iter()
        .map(|context| {
            design_pairs(context, options).with_context(|| format!("context `{}`", context.id))
        })
        .collect::<Result<Vec<_>>>()?;
    // The choices are read as each feedback ends, into the result cache (one in memory
    // when the run keeps none), where the comparisons below find them.
    let in_memory;
    let cache = match cache {
        Some(cache) => cache,
        None => {
            in_memory = ResultCache::in_memory()?;
            &in_memory
        }
    };
    let mut relative = Box::new(relative.clone());
    let generated = write_feedbacks(
        scorer,
        contexts,
        &pairs,
        &mut relative,
        &options.progress,
        Some(cache),
    )?;
    let marker = relative.marker().to_string();
    let choices = relative.protocol.relative()?.choices.clone();
    let mut with_feedbacks = options.clone();
    with_feedbacks.relative = Some(relative);
    let mut result = run_compare(scorer, contexts, &with_feedbacks, Some(cache))?;
    // Choices read with their feedbacks in this run were computed now, not found.
    let read_now = generated.labels.min(result.cached);
    result.cached -= read_now;
    result.computed += read_now;
    let feedbacks = with_feedbacks
        .relative
        .map(|r| r.readings)
        .unwrap_or_default();
    let mut counts = FormatCounts::of(feedbacks.values().map(|r| r.format));
    counts.unclosed_reasoning = feedbacks.values().filter(|r| r.reasoning_cut).count();
    result.diagnostics.checks.extend(diagnostics::rubric_format(
        &counts,
        &marker,
        choices.as_ref(),
        options.audience,
    ));
    result.feedbacks = feedbacks;
    Ok(result)
}

/// [`run_compare`] with the adaptive design: every context's selection advances one round
/// at a time, and each round's comparisons of all contexts go to the scorer together
/// (through the cache, so an interrupted run resumes with the same choices).
fn run_adaptive(
    scorer: &mut dyn Scorer,
    contexts: &[Context],
    options: &CompareOptions,
    cache: Option<&ResultCache>,
    labels: &[Vec<u32>],
) -> Result<CompareResult> {
    options.adaptive.check(options.comparisons)?;
    let mut selectors = contexts
        .iter()
        .map(|context| {
            let prior = match &options.prior {
                Some(prior) => Some((prior.for_context(context)?, prior.weight)),
                None => None,
            };
            AdaptiveSelector::with_prior(
                context.candidates.len(),
                options.comparisons,
                &options.adaptive,
                &mut context_rng(options.seed, &context.id),
                prior,
            )
            .with_context(|| format!("context `{}`", context.id))
        })
        .collect::<Result<Vec<_>>>()?;
    let budget: usize = contexts
        .iter()
        .map(|c| {
            let n = c.candidates.len();
            options.comparisons.unwrap_or(n * n.saturating_sub(1))
        })
        .sum();
    let bar = options
        .progress
        .task(budget as u64, "comparisons (at most)");
    let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::new(); contexts.len()];
    let mut comparisons: Vec<Vec<Comparison>> = vec![Vec::new(); contexts.len()];
    let (mut computed, mut cached) = (0, 0);
    loop {
        let mut round: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
        let mut plan = LabelPlan::new();
        for (k, (selector, context)) in selectors.iter_mut().zip(contexts).enumerate() {
            let pairs = selector
                .next_round(&outcomes[k])
                .with_context(|| format!("context `{}`: choosing comparisons", context.id))?;
            if pairs.is_empty() {
                continue;
            }
            plan.append(
                plan_pairs(scorer, context, options, labels, &pairs)
                    .with_context(|| format!("context `{}`", context.id))?,
            );
            round.push((k, pairs));
        }
        if round.is_empty() {
            break;
        }
        let found = plan.lookup(cache)?;
        cached += found;
        bar.found_in_cache(found as u64);
        let asked = plan.len();
        computed += plan
            .fill(scorer, cache, &mut |_| bar.step(1))
            .with_context(|| format!("scoring a round of {asked} comparisons"))?;
        let mut results = plan.into_partial_results().into_iter();
        for (k, pairs) in round {
            let context = &contexts[k];
            for (first, second) in pairs {
                let result = results.next().flatten().with_context(|| {
                    format!(
                        "context `{}`: no result for comparison {first} vs {second}",
                        context.id
                    )
                })?;
                let comparison = Comparison::read(first, second, &result).with_context(|| {
                    format!(
                        "context `{}`: `{}` vs `{}`",
                        context.id, context.candidates[first].id, context.candidates[second].id
                    )
                })?;
                outcomes[k].push(comparison.outcome());
                comparisons[k].push(comparison);
            }
        }
    }
    drop(bar);
    for list in &mut comparisons {
        list.sort_by_key(|c| (c.first, c.second));
    }
    let mut result = summarise(contexts, comparisons, options)?;
    for (context, selector) in result.contexts.iter_mut().zip(&selectors) {
        let ending = selector
            .ending()
            .context("an adaptive selection ended without a reason")?;
        context.adaptive = Some(AdaptiveRun {
            rounds: selector.rounds(),
            ending,
        });
    }
    result.computed = computed;
    result.cached = cached;
    Ok(result)
}

/// Scores, ranks and statistics from the comparisons of every context (one list per
/// context, in the contexts' order), as a run over them would give them.
pub fn summarise(
    contexts: &[Context],
    comparisons: Vec<Vec<Comparison>>,
    options: &CompareOptions,
) -> Result<CompareResult> {
    let all_p: Vec<f64> = comparisons.iter().flatten().map(|c| c.a_over_b()).collect();
    let tau = match options.debias {
        Debias::None => 0.5,
        Debias::Threshold => balanced_threshold(&all_p),
    };
    let wanted = options
        .score_field
        .clone()
        .unwrap_or_else(|| options.attribute.name.clone());
    let names = match &options.score_field {
        Some(key) => vec![key.clone()],
        None => crate::judge::attribute::score_keys(&options.attribute.name),
    };
    let matched = find_human_key_among(contexts, &names)?;
    if matched.is_none() && options.score_field.is_some() {
        bail!(
            "no candidate has the human score `{wanted}`; the human scores are: {}",
            human_keys(contexts).join(", ")
        );
    }
    let field = matched.clone().unwrap_or(wanted);
    let mut out = CompareResult {
        contexts: Vec::with_capacity(contexts.len()),
        tau,
        first_position_raw: Rate::default(),
        first_position: Rate::default(),
        consistency: Rate::default(),
        accuracy: None,
        score_field: None,
        prior: None,
        rubric: options.relative.as_ref().map(|r| {
            crate::judge::rubric::rubric_record(
                &r.rubric,
                &r.protocol,
                r.protocol_source,
                r.feedback_tokens,
            )
        }),
        human_key: matched,
        computed: 0,
        cached: 0,
        rank: options.rank,
        diagnostics: Diagnostics::default(),
        ties: None,
        feedbacks: Default::default(),
    };
    let all_outcomes: Vec<Vec<Outcome>> = comparisons
        .iter()
        .map(|list| list.iter().map(Comparison::outcome).collect())
        .collect();
    let (all_scores, prior) = rank_contexts(contexts, &all_outcomes, options, tau)?;
    out.prior = prior;
    for (((context, comparisons), outcomes), scores) in contexts
        .iter()
        .zip(comparisons)
        .zip(all_outcomes)
        .zip(all_scores)
    {
        let prior_slope = prior.map(|fit| fit.slope);
        let human = context.human_scores(&field);
        if human.is_none() && options.score_field.is_some() {
            bail!(
                "context `{}`: not every candidate has the human score `{field}`",
                context.id
            );
        }
        let accuracy = human.map(|h| pairwise_accuracy(&outcomes, &h, tau));
        if let Some(rate) = accuracy {
            *out.accuracy.get_or_insert_with(Rate::default) += rate;
            out.score_field = Some(field.clone());
        }
        let first_position = first_position_rate(&outcomes, tau);
        let consistency = order_consistency(&outcomes, tau);
        out.first_position_raw += first_position_rate(&outcomes, 0.5);
        out.first_position += first_position;
        out.consistency += consistency;
        out.contexts.push(ContextResult {
            context_id: context.id.clone(),
            candidate_ids: context.candidates.iter().map(|c| c.id.clone()).collect(),
            comparisons,
            ranks: ranks_from_scores(&scores),
            scores,
            first_position,
            consistency,
            accuracy,
            adaptive: None,
            prior_slope,
        });
    }
    out.diagnostics = diagnostics::for_compare(&out, options);
    if let (Some(fallback), None) = (options.rank_fallback, &options.prior) {
        fall_back(&mut out, options, fallback)?;
    }
    let tied = out
        .contexts
        .iter()
        .flat_map(|c| &c.comparisons)
        .any(|c| c.p_tie.is_some());
    if tied {
        let note = ties_note(out.rank);
        if let Some(serde_json::Value::Object(record)) = &mut out.rubric {
            record.insert("ties".to_string(), json!(note));
        }
        out.ties = Some(note);
    }
    Ok(out)
}

/// How a run ranked by `rank` counts a judge's ties, in words (the run's `ties`, the
/// rubric record of every output row).
pub fn ties_note(rank: RankMethod) -> String {
    format!(
        "the judge may answer a tie: p_a, p_b and p_tie are its three answers' \
         probabilities; {}; the positional bias, the order consistency, the debiasing \
         threshold and the decisions read P(A)/(P(A)+P(B))",
        rank.ties_note()
    )
}

/// Every context's scores from its outcomes at threshold `tau`: the options' ranking per
/// context, or with absolute scores the joint fit of every context with one slope
/// (probabilities reweighted to `tau` as the probability-based rankings read them; a
/// negative slope the comparisons do not support held at 0:
/// [`crate::rank::hybrid_fit_pooled`]) and
/// that slope.
fn rank_contexts(
    contexts: &[Context],
    outcomes: &[Vec<Outcome>],
    options: &CompareOptions,
    tau: f64,
) -> Result<(Vec<Vec<f64>>, Option<SlopeFit>)> {
    let Some(prior) = &options.prior else {
        let scores = contexts
            .iter()
            .zip(outcomes)
            .map(|(context, outcomes)| {
                score_at_threshold(options.rank, context.candidates.len(), outcomes, tau)
                    .with_context(|| format!("context `{}`: ranking", context.id))
            })
            .collect::<Result<_>>()?;
        return Ok((scores, None));
    };
    let absolute: Vec<Vec<f64>> = contexts
        .iter()
        .map(|context| prior.for_context(context))
        .collect::<Result<_>>()?;
    let joined: Vec<(usize, &[Outcome], &[f64])> = contexts
        .iter()
        .zip(outcomes)
        .zip(&absolute)
        .map(|((context, outcomes), absolute)| {
            (
                context.candidates.len(),
                outcomes.as_slice(),
                absolute.as_slice(),
            )
        })
        .collect();
    let fit = hybrid_pooled_at_threshold(&joined, prior.weight, tau)
        .context("ranking with the absolute scores")?;
    Ok((fit.scores, Some(fit.slope)))
}

/// Rank with `fallback` instead of the options' method when the diagnostics show that
/// method cannot separate the candidates (ties past their threshold, or an uncorrected
/// positional bias under the win ratio) and the design has both orders of each pair, so
/// that a constant positional bias cancels in the fallback's probabilities. Kept only
/// when it ties fewer candidates; the diagnostics then say what changed and how to get
/// the asked ranking back.
fn fall_back(
    out: &mut CompareResult,
    options: &CompareOptions,
    fallback: RankMethod,
) -> Result<()> {
    let warns = |name: &str| {
        out.diagnostics
            .get(name)
            .is_some_and(diagnostics::Check::is_warning)
    };
    let biased_decisions = warns("positional_bias") && options.rank == RankMethod::WinRatio;
    if fallback == options.rank
        || !diagnostics::both_orders(options.design)
        || !(warns("ties") || biased_decisions)
    {
        return Ok(());
    }
    let mut scores = Vec::with_capacity(out.contexts.len());
    for context in &out.contexts {
        let outcomes: Vec<Outcome> = context
            .comparisons
            .iter()
            .map(Comparison::outcome)
            .collect();
        scores.push(
            score_at_threshold(fallback, context.scores.len(), &outcomes, out.tau)
                .with_context(|| format!("context `{}`: ranking", context.context_id))?,
        );
    }
    let tied = |all: Vec<&[f64]>| diagnostics::ties(&all, "").map_or(0.0, |c| c.value);
    let before = tied(out.contexts.iter().map(|c| c.scores.as_slice()).collect());
    let after = tied(scores.iter().map(Vec::as_slice).collect());
    if !(after < before || (biased_decisions && after <= before)) {
        return Ok(());
    }
    for (context, scores) in out.contexts.iter_mut().zip(scores) {
        context.ranks = ranks_from_scores(&scores);
        context.scores = scores;
    }
    let asked = options.rank;
    out.rank = fallback;
    out.diagnostics = diagnostics::for_compare(out, options);
    out.diagnostics.adjusted = Some(format!(
        "the scores are {} instead of the default {}, which this judge's answers cannot \
         rank (a constant positional bias cancels over both orders); {} gives the papers' \
         ranking",
        method_name(fallback),
        method_name(asked),
        diagnostics::rank_choice(flag_name(asked), options.audience)
    ));
    Ok(())
}

/// A ranking method in words.
pub fn method_name(rank: RankMethod) -> &'static str {
    match rank {
        RankMethod::WinRatio => "win ratio",
        RankMethod::Soft => "soft win ratio",
        RankMethod::BradleyTerry => "Bradley-Terry",
        RankMethod::Poe => "Product of Experts",
    }
}

/// A ranking method as `--rank` takes it.
fn flag_name(rank: RankMethod) -> &'static str {
    match rank {
        RankMethod::WinRatio => "win-ratio",
        RankMethod::Soft => "soft",
        RankMethod::BradleyTerry => "bradley-terry",
        RankMethod::Poe => "poe",
    }
}

/// `x` with `decimals` decimals, never `-0.000...`.
fn fixed(x: f64, decimals: usize) -> String {
    let text = format!("{x:.decimals$}");
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
    }
}

/// One line per candidate, in input order: `context_id, candidate_id, score, rank`
/// (score with 6 decimals; ranks are halves at worst and print exactly), then, from the
/// input `contexts` (the run's, in the same order), the candidate's `system_id` and its
/// human `scores` when it has them, so that `correlate` reads the file as it is.
pub fn write_scores(
    result: &CompareResult,
    contexts: &[Context],
    out: &mut dyn Write,
) -> Result<()> {
    for (index, context) in result.contexts.iter().enumerate() {
        let input = contexts.get(index).filter(|c| c.id == context.context_id);
        for (k, id) in context.candidate_ids.iter().enumerate() {
            let mut line = format!(
                "{{\"context_id\":{},\"candidate_id\":{},\"score\":{},\"rank\":{}",
                json!(context.context_id),
                json!(id),
                fixed(context.scores[k], 6),
                context.ranks[k]
            );
            if let Some(candidate) = input.and_then(|c| c.candidates.get(k)) {
                if let Some(system) = &candidate.system_id {
                    line.push_str(&format!(",\"system_id\":{}", json!(system)));
                }
                if !candidate.scores.is_empty() {
                    line.push_str(&format!(",\"scores\":{}", json!(candidate.scores)));
                }
            }
            if let Some(rubric) = &result.rubric {
                line.push_str(&format!(",\"rubric\":{rubric}"));
            }
            line.push_str("}\n");
            out.write_all(line.as_bytes())?;
        }
    }
    Ok(())
}

/// One line per comparison, in design order: `context_id, a, b, p_a, label_mass`
/// (p_a with 6 decimals, label mass with 6 significant digits); where the judge may call
/// a tie, `p_b` and `p_tie` too (6 decimals; with `p_a` normalised over the three).
pub fn write_comparisons(result: &CompareResult, out: &mut dyn Write) -> Result<()> {
    for context in &result.contexts {
        for c in &context.comparisons {
            let (a, b) = (
                &context.candidate_ids[c.first],
                &context.candidate_ids[c.second],
            );
            // Relative rubric grading's feedback on this pair and whether the judge kept
            // to its format.
            let feedback = result
                .feedbacks
                .get(&(context.context_id.clone(), a.clone(), b.clone()))
                .map(|r| {
                    format!(
                        ",\"feedback\":{},\"format\":{}",
                        json!(r.feedback),
                        json!(r.format.name())
                    )
                })
                .unwrap_or_default();
            let rubric = result
                .rubric
                .as_ref()
                .map(|r| format!(",\"rubric\":{r}"))
                .unwrap_or_default();
            let tie = match (c.p_b, c.p_tie) {
                (Some(p_b), Some(p_tie)) => {
                    format!(",\"p_b\":{},\"p_tie\":{}", fixed(p_b, 6), fixed(p_tie, 6))
                }
                _ => String::new(),
            };
            let line = format!(
                "{{\"context_id\":{},\"a\":{},\"b\":{},\"p_a\":{}{tie},\"label_mass\":{:.5e}{feedback}{rubric}}}\n",
                json!(context.context_id),
                json!(a),
                json!(b),
                fixed(c.p_a, 6),
                c.label_mass
            );
            out.write_all(line.as_bytes())?;
        }
    }
    Ok(())
}

/// The first comparison's prompt as the model will read it (for `--show-prompt`).
pub fn show_first_prompt(
    scorer: &dyn Scorer,
    contexts: &[Context],
    options: &CompareOptions,
) -> Result<String> {
    let Some(context) = contexts.first() else {
        bail!("no contexts");
    };
    let mut rng = context_rng(options.seed, &context.id);
    let n = context.candidates.len();
    let pairs = match options.design {
        Design::Adaptive => {
            let prior = match &options.prior {
                Some(prior) => Some((prior.for_context(context)?, prior.weight)),
                None => None,
            };
            AdaptiveSelector::with_prior(
                n,
                options.comparisons,
                &options.adaptive,
                &mut rng,
                prior,
            )?
            .next_round(&[])?
        }
        design => design.pairs(n, options.comparisons, &mut rng)?,
    };
    let Some(&(i, j)) = pairs.first() else {
        bail!("context `{}` has no comparisons", context.id);
    };
    let request = comparison_request_for(scorer, context, options, (i, j))?;
    let rendered = scorer.render(&request.prompt)?;
    let labels: Vec<String> = request
        .labels
        .iter()
        .map(|l| match l {
            Label::Text(text) => format!("{text:?}"),
            Label::Tokens(ids) => format!("{ids:?}"),
        })
        .collect();
    let mut text = format!(
        "--- context `{}`: A = `{}`, B = `{}`; template {} ---\n{}\n",
        context.id,
        context.candidates[i].id,
        context.candidates[j].id,
        options.template_id(),
        rendered.input
    );
    if !rendered.decoder_prefix.is_empty() {
        let _ = writeln!(text, "--- decoder prefix ---\n{}", rendered.decoder_prefix);
    }
    let _ = writeln!(text, "--- labels: {} ---", labels.join(" | "));
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(probabilities: &[f64]) -> LabelResult {
        LabelResult {
            labels: probabilities
                .iter()
                .map(|p| crate::engine::LabelScore {
                    tokens: vec![],
                    logprob: p.ln(),
                })
                .collect(),
            prompt_tokens: 3,
        }
    }

    #[test]
    fn three_labels_are_read_as_a_b_and_tie() {
        let c = Comparison::read(0, 1, &result(&[0.2, 0.1, 0.5])).unwrap();
        let (p_b, p_tie) = (c.p_b.unwrap(), c.p_tie.unwrap());
        assert!((c.p_a - 0.25).abs() < 1e-12 && (p_b - 0.125).abs() < 1e-12);
        assert!((p_tie - 0.625).abs() < 1e-12 && (c.label_mass - 0.8).abs() < 1e-12);
        assert!((c.a_over_b() - 2.0 / 3.0).abs() < 1e-12 && c.tie_decided());
        let o = c.outcome();
        assert_eq!((o.first, o.second, o.tie), (0, 1, p_tie));
        assert!((o.expected_first() - 0.5625).abs() < 1e-12 && o.tie_decided());
        // All on the tie: A against B is even.
        let all_tie = Comparison::read(0, 1, &result(&[0.0, 0.0, 0.3])).unwrap();
        assert_eq!((all_tie.a_over_b(), all_tie.p_tie), (0.5, Some(1.0)));
        assert!(Comparison::read(0, 1, &result(&[0.0, 0.0, 0.0])).is_err());
        // Two labels: as before, bit for bit.
        let two = result(&[0.3, 0.1]);
        let c = Comparison::read(1, 0, &two).unwrap();
        let (p_a, mass) = first_wins(&two).unwrap();
        assert_eq!(
            (c.p_a, c.label_mass, c.p_b, c.p_tie),
            (p_a, mass, None, None)
        );
        assert_eq!((c.a_over_b(), c.outcome()), (p_a, Outcome::new(1, 0, p_a)));
        assert!(!c.tie_decided());
    }

    #[test]
    fn fixed_formatting_has_no_negative_zero() {
        assert_eq!(fixed(-1e-9, 6), "0.000000");
        assert_eq!(fixed(-0.25, 6), "-0.250000");
        assert_eq!(fixed(0.5, 3), "0.500");
        let mass: f64 = serde_json::from_str(&format!("{:.5e}", 0.000123456789)).unwrap();
        assert_eq!(mass, 0.000123457);
    }
}

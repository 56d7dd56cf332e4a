//! `dhp score`: the judge rates every original and every perturbed text of a perturbation
//! file on each of the task's metrics, each text on its own (no reference shown; the
//! context, such as the article or the story, is shown as the method's prompt has it).
//!
//! Absolute methods (G-Eval expectation, prompt scoring, GPTScore) go through
//! [`crate::judge::run_scoring`]: one context per item whose candidates are the original
//! and its perturbed copies, so the engine shares their common prefix, and every result
//! is kept in the result cache (a killed run resumes from it). G-Eval uses the built-in
//! SummEval criteria for summarization and ours in `templates/dhp/criteria/` otherwise;
//! prompt scoring and GPTScore have summary prompts only, so they apply to summarization.
//!
//! `pairwise` asks the comparative-assessment question for (original, perturbed) in both
//! orders; the probability that the original wins is the mean of the two orders (which
//! cancels positional bias). Rows give the original 0.5 and the perturbed copy `1 - P`,
//! so that the Wilcoxon test of `analyze` tests `P(original wins) > 0.5`.

use std::collections::BTreeMap;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::analyze::{ScoreRow, ORIGINAL};
use super::perturb::{PerturbRow, Status};
use super::task::DhpTask;
use crate::data::{Candidate, Context};
use crate::engine::runner::{plan_labels, LabelPlan};
use crate::engine::{LabelResult, ResultCache, Scorer};
use crate::judge::geval::{Criteria, StepsSource};
use crate::judge::pairwise::template::{first_wins, Fill, PairwiseTemplate};
use crate::judge::{resolve_method, run_scoring, ScoreMethod, ScoreOptions, Task};
use crate::progress::Progress;

/// How texts are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DhpMethod {
    /// G-Eval: expectation of the score over the scale (the paper's method).
    Geval,
    /// Ask for a 1-10 score; expectation.
    Prompt,
    /// Mean token log-likelihood of the text.
    Gptscore,
    /// Probability that the original beats its perturbed copy (both orders).
    Pairwise,
}

impl DhpMethod {
    pub fn name(self) -> &'static str {
        match self {
            DhpMethod::Geval => "geval",
            DhpMethod::Prompt => "prompt",
            DhpMethod::Gptscore => "gptscore",
            DhpMethod::Pairwise => "pairwise",
        }
    }
}

const STORY_CRITERIA: [(&str, &str); 3] = [
    (
        "coherence",
        include_str!("../../templates/dhp/criteria/story-completion/coherence.toml"),
    ),
    (
        "consistency",
        include_str!("../../templates/dhp/criteria/story-completion/consistency.toml"),
    ),
    (
        "fluency",
        include_str!("../../templates/dhp/criteria/story-completion/fluency.toml"),
    ),
];
const TRANSLATION_CRITERIA: [(&str, &str); 2] = [
    (
        "accuracy",
        include_str!("../../templates/dhp/criteria/translation/accuracy.toml"),
    ),
    (
        "fluency",
        include_str!("../../templates/dhp/criteria/translation/fluency.toml"),
    ),
];
const QA_CRITERIA: [(&str, &str); 1] = [(
    "answer-quality",
    include_str!("../../templates/dhp/criteria/question-answering/answer-quality.toml"),
)];

/// The G-Eval criteria of `task`'s `metric`.
pub fn criteria(task: DhpTask, metric: &str) -> Result<Criteria> {
    let table: &[(&str, &str)] = match task {
        DhpTask::Summarization => return Criteria::builtin(Task::Summary, metric),
        DhpTask::StoryCompletion => &STORY_CRITERIA,
        DhpTask::Translation => &TRANSLATION_CRITERIA,
        DhpTask::QuestionAnswering => &QA_CRITERIA,
    };
    let (_, text) = table
        .iter()
        .find(|(name, _)| *name == metric)
        .with_context(|| format!("task {} has no metric `{metric}`", task.name()))?;
    Criteria::parse(text, &format!("DHP criteria {}/{metric}", task.name()))
}

/// The noun of the judged text in pairwise prompts.
fn item_noun(task: DhpTask) -> &'static str {
    match task {
        DhpTask::Summarization => "Summary",
        DhpTask::StoryCompletion => "Ending",
        DhpTask::Translation => "Translation",
        DhpTask::QuestionAnswering => "Answer",
    }
}

/// The adjective of a metric in pairwise prompts ("Which Summary is more coherent").
fn adjective(metric: &str) -> &str {
    match metric {
        "coherence" => "coherent",
        "consistency" => "consistent",
        "fluency" => "fluent",
        "relevance" => "relevant",
        "accuracy" => "accurate",
        "answer-quality" => "helpful",
        other => other,
    }
}

/// The usable rows of a perturbation file, grouped by item (first-seen order), checked
/// to belong to `task` and to agree on each item's original and context.
pub fn group_rows(rows: &[PerturbRow], task: DhpTask) -> Result<Vec<Vec<&PerturbRow>>> {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: BTreeMap<&str, Vec<&PerturbRow>> = BTreeMap::new();
    for row in rows {
        if row.task != task {
            bail!(
                "item `{}`: row of task {}, but scoring task {}",
                row.item_id,
                row.task.name(),
                task.name()
            );
        }
        let group = groups.entry(&row.item_id).or_default();
        if let Some(first) = group.first() {
            if first.original != row.original || first.context != row.context {
                bail!(
                    "item `{}`: rows disagree on the original text or context",
                    row.item_id
                );
            }
        } else {
            order.push(&row.item_id);
        }
        group.push(row);
    }
    Ok(order
        .into_iter()
        .map(|id| groups.remove(id).unwrap_or_default())
        .collect())
}

/// One context per item: the original (candidate id `original`) and every usable
/// perturbed copy (candidate id = perturbation name).
fn contexts(groups: &[Vec<&PerturbRow>]) -> Vec<Context> {
    groups
        .iter()
        .filter_map(|group| {
            let first = group.first()?;
            let mut candidates = vec![candidate(ORIGINAL, &first.original)];
            for row in group {
                if let (Status::Ok, Some(text)) = (row.status, &row.perturbed) {
                    candidates.push(candidate(&row.perturbation, text));
                }
            }
            Some(Context {
                id: first.item_id.clone(),
                text: first.context.clone(),
                candidates,
            })
        })
        .collect()
}

fn candidate(id: &str, text: &str) -> Candidate {
    Candidate {
        id: id.to_string(),
        text: text.to_string(),
        reference: None,
        scores: BTreeMap::new(),
        system_id: None,
        metadata: BTreeMap::new(),
        source: None,
    }
}

/// Settings of a scoring run.
#[derive(Debug, Clone)]
pub struct DhpScoreOptions {
    pub task: DhpTask,
    pub method: DhpMethod,
    /// The metrics to rate (default: all of the task's).
    pub metrics: Vec<String>,
    /// Show the item's context (article, story, source) in the prompt.
    pub with_context: bool,
    /// G-Eval evaluation steps: generated once per model and metric (cached).
    pub steps: StepsSource,
    /// Where the absolute runner reports progress.
    pub progress: Progress,
}

/// What [`score_perturbations`] tells its caller as it goes.
#[derive(Debug, Clone, Copy)]
pub enum ScoreEvent<'a> {
    /// A metric is about to be scored.
    MetricStarted(&'a str),
    /// A metric is done; every row scored so far (all finished metrics), so that a
    /// caller can save them before the next metric starts.
    MetricDone {
        metric: &'a str,
        rows: &'a [ScoreRow],
    },
}

/// Score all usable rows, one metric after another; `on_event` hears each metric start
/// and finish (an error it returns stops the run).
pub fn score_perturbations(
    scorer: &mut dyn Scorer,
    rows: &[PerturbRow],
    options: &DhpScoreOptions,
    cache: Option<&ResultCache>,
    on_event: &mut dyn FnMut(ScoreEvent<'_>) -> Result<()>,
) -> Result<Vec<ScoreRow>> {
    let groups = group_rows(rows, options.task)?;
    let mut contexts = contexts(&groups);
    if !options.with_context {
        for context in &mut contexts {
            context.text.clear();
        }
    }
    let levels: BTreeMap<&str, _> = rows
        .iter()
        .map(|r| (r.perturbation.as_str(), r.level))
        .collect();
    let known = options.task.metrics();
    let mut out = Vec::new();
    for metric in &options.metrics {
        if !known.contains(&metric.as_str()) {
            bail!(
                "task {} has no metric `{metric}` (its metrics: {})",
                options.task.name(),
                known.join(", ")
            );
        }
        on_event(ScoreEvent::MetricStarted(metric))?;
        match options.method {
            DhpMethod::Pairwise => out.extend(pairwise(
                scorer,
                options.task,
                metric,
                &contexts,
                &levels,
                cache,
            )?),
            method => {
                let score_method = match method {
                    DhpMethod::Geval => ScoreMethod::Geval,
                    DhpMethod::Prompt => ScoreMethod::Prompt,
                    _ => ScoreMethod::Gptscore,
                };
                if score_method != ScoreMethod::Geval && options.task != DhpTask::Summarization {
                    bail!(
                        "--method {} has summary prompts only: use it with summarization, or use geval or pairwise",
                        method.name()
                    );
                }
                let mut score_options = ScoreOptions::new(score_method, Task::Summary, metric);
                if score_method == ScoreMethod::Geval {
                    score_options.criteria = Some(criteria(options.task, metric)?);
                }
                score_options.steps = options.steps.clone();
                score_options.progress = options.progress.clone();
                let resolved = resolve_method(scorer, &score_options, cache)
                    .with_context(|| format!("metric `{metric}`"))?;
                let run = run_scoring(scorer, &contexts, &resolved, &options.progress, cache)
                    .with_context(|| format!("metric `{metric}`"))?;
                for scored in run.candidates {
                    let level = if scored.candidate_id == ORIGINAL {
                        None
                    } else {
                        Some(levels[scored.candidate_id.as_str()])
                    };
                    out.push(ScoreRow {
                        item: scored.context_id,
                        perturbation: scored.candidate_id,
                        level,
                        metric: metric.clone(),
                        score: scored.score,
                    });
                }
            }
        }
        on_event(ScoreEvent::MetricDone { metric, rows: &out })?;
    }
    Ok(out)
}

/// The pairwise rows of one metric (see the module header).
fn pairwise(
    scorer: &mut dyn Scorer,
    task: DhpTask,
    metric: &str,
    contexts: &[Context],
    levels: &BTreeMap<&str, super::task::Level>,
    cache: Option<&ResultCache>,
) -> Result<Vec<ScoreRow>> {
    let template = PairwiseTemplate::builtin("c1", Task::Summary)?;
    let template_id = format!("dhp/{}", template.id());
    let conventions = scorer.info().conventions.clone();
    let item = item_noun(task);
    let question = format!("Which {item} is more {}", adjective(metric));
    let mut requests = Vec::new();
    // (context index, candidate index) of each request pair
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (ci, context) in contexts.iter().enumerate() {
        let original = &context.candidates[0];
        for (k, perturbed) in context.candidates.iter().enumerate().skip(1) {
            for (a, b) in [(original, perturbed), (perturbed, original)] {
                let fill = Fill {
                    context: &context.text,
                    a: &a.text,
                    b: &b.text,
                    adjective: adjective(metric),
                    item,
                    question: &question,
                    context_label: "Passage",
                };
                requests.push(template.request(&conventions, &fill));
            }
            pairs.push((ci, k));
        }
    }
    let mut plan = LabelPlan::new();
    for planned in plan_labels(scorer, &template_id, requests, None) {
        plan.push(planned?);
    }
    plan.lookup(cache)?;
    plan.fill(scorer, cache, &mut |_| Ok(()))?;
    let results: Vec<Option<LabelResult>> = plan.into_partial_results();
    let mut out = Vec::new();
    for (ci, context) in contexts.iter().enumerate() {
        out.push(ScoreRow {
            item: context.id.clone(),
            perturbation: ORIGINAL.to_string(),
            level: None,
            metric: metric.to_string(),
            score: 0.5,
        });
        for (pair_index, &(pci, k)) in pairs.iter().enumerate() {
            if pci != ci {
                continue;
            }
            let first = results[2 * pair_index]
                .as_ref()
                .context("missing pairwise result")?;
            let second = results[2 * pair_index + 1]
                .as_ref()
                .context("missing pairwise result")?;
            let (p_original_first, _) = first_wins(first)?;
            let (p_perturbed_first, _) = first_wins(second)?;
            let p_original_wins = 0.5 * (p_original_first + (1.0 - p_perturbed_first));
            let name = &context.candidates[k].id;
            out.push(ScoreRow {
                item: context.id.clone(),
                perturbation: name.clone(),
                level: Some(levels[name.as_str()]),
                metric: metric.to_string(),
                score: 1.0 - p_original_wins,
            });
        }
    }
    Ok(out)
}

/// One JSON line per score row, as `dhp analyze` reads them.
pub fn write_score_rows(rows: &[ScoreRow], out: &mut dyn std::io::Write) -> Result<()> {
    for row in rows {
        let mut value = serde_json::json!({
            "item": row.item,
            "perturbation": row.perturbation,
            "metric": row.metric,
            "score": row.score,
        });
        if let Some(level) = row.level {
            value["level"] = serde_json::json!(level.to_string());
        }
        writeln!(out, "{value}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_metric_has_criteria() {
        for task in [
            DhpTask::Summarization,
            DhpTask::StoryCompletion,
            DhpTask::Translation,
            DhpTask::QuestionAnswering,
        ] {
            for metric in task.metrics() {
                let c = criteria(task, metric).unwrap();
                assert_eq!(c.name.to_lowercase().replace(' ', "-"), *metric);
            }
        }
        assert!(criteria(DhpTask::Translation, "coherence").is_err());
    }
}

//! The HTML report of a run: one self-contained file a person opens in a browser (no
//! network: the styles, the script and the data are inline, and the page's content
//! security policy forbids loading anything).
//!
//! - this module: what the report shows, as plain serialisable types, and builders from
//!   the results of `compare` ([`Report::from_compare`]), `score`
//!   ([`Report::from_scores`]; rubric grading's feedback and format per candidate) and a
//!   jury of either ([`Report::from_jury`]: the jury's ranking, each judge's own run, and
//!   their agreement), plus sections of tables and figures for `reproduce` and
//!   `dhp report` ([`Report::with_markdown`]);
//! - [`html`]: the page: the data as escaped JSON, drawn by the inline script (summary
//!   over contexts, one context at a time with its ranking, matrices and figures);
//! - [`text`]: the same report as Markdown (`--report FILE.md`), every text escaped;
//! - [`markdown`]: our Markdown reports as HTML sections (the other way round).
//!
//! Numbers are the ones the JSONL outputs write (scores and probabilities with 6
//! decimals), so the report and the files agree exactly.

pub mod html;
pub mod markdown;
pub mod text;

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::data::Context;
use crate::judge::diagnostics::Diagnostics;
use crate::judge::jury::{Agreement, JudgeEntry, JuryResult};
use crate::judge::pairwise::CompareResult;
use crate::judge::rubric::FormatOutcome;
use crate::judge::ScoredCandidate;
use crate::rank::Rate;
use crate::stats::{
    bootstrap_ci, kendall_tau_b, meta_evaluate, spearman, BootstrapOptions, Coefficient, Item,
    Level, SkipRule,
};

/// Bootstrap resamples of the contexts for the run's correlation intervals (as
/// `compare --correlate`).
pub const RESAMPLES: usize = 1000;

/// Everything the report shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub title: String,
    /// How the run was made: (what, value) pairs shown at the top (model, attribute...).
    pub facts: Vec<(String, String)>,
    /// Warnings and remarks shown on the summary page.
    pub notes: Vec<String>,
    /// The input: contexts with their candidates' texts, shared by the runs.
    pub contexts: Vec<ContextView>,
    /// Judgements of those contexts (one for `compare` and `score`; a jury's first, then
    /// each judge's own).
    pub runs: Vec<RunView>,
    /// A jury's judges, weights and agreement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jury: Option<JuryView>,
    /// Tables and figures of the run's own report (`reproduce`, `dhp report`), already
    /// HTML (escaped when made); not part of the data.
    #[serde(skip)]
    pub sections: Vec<Section>,
}

/// A context as the input gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextView {
    pub id: String,
    pub text: String,
    pub candidates: Vec<CandidateView>,
}

/// A candidate as the input gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateView {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub text: String,
}

/// Hits out of a total (`[hits, total]` in the data).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fraction(pub usize, pub usize);

impl From<Rate> for Fraction {
    fn from(rate: Rate) -> Self {
        Fraction(rate.hits, rate.total)
    }
}

/// One coefficient with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CoefficientView {
    pub value: Option<f64>,
    pub ci: Option<(f64, f64)>,
}

/// The run's agreement with the human scores (summary level, the authors' skip rule).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorrelationView {
    pub key: String,
    pub level: &'static str,
    pub groups: usize,
    pub groups_skipped: usize,
    pub items: usize,
    pub spearman: CoefficientView,
    pub kendall: CoefficientView,
    pub pearson: CoefficientView,
    pub resamples: usize,
    pub confidence: f64,
    /// Why there are no intervals (too few contexts), as the terminal says it.
    pub no_interval: Option<String>,
}

/// What kind of judgement a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    Pairwise,
    Absolute,
    /// A jury's combined ranking (its judges' own runs follow it).
    Jury,
}

/// A jury's judges and how they agree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JuryView {
    /// Each judge's name and weight, in the jury's order.
    pub judges: Vec<JudgeEntry>,
    pub agreement: Agreement,
    /// Why the weights are not the ones asked for, where they are not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights_note: Option<String>,
}

/// One judgement of every context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunView {
    pub name: String,
    pub kind: RunKind,
    /// What a score is ("win ratio", "G-Eval expected score").
    pub score: String,
    /// The human score compared with, when the input has it.
    pub human_key: Option<String>,
    /// Pairwise: the decision threshold (0.5 unless debiased).
    pub tau: Option<f64>,
    /// Pairwise: P(A) at 0.5 and at `tau`, order consistency, pairwise accuracy.
    pub first_position_raw: Option<Fraction>,
    pub first_position: Option<Fraction>,
    pub consistency: Option<Fraction>,
    pub accuracy: Option<Fraction>,
    pub correlation: Option<CorrelationView>,
    /// Whether the judge was judging (see [`crate::judge::diagnostics`]); its warnings
    /// are also the report's notes.
    pub diagnostics: Option<Diagnostics>,
    /// Absolute: the scale's scores, for the distributions.
    pub scale: Option<Vec<i64>>,
    /// A jury's run: the judges' names, in the order of each context's `judge_scores`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judges: Option<Vec<String>>,
    pub contexts: Vec<RunContext>,
}

/// One context's results in a run, candidates in input order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunContext {
    /// As the output file writes them (6 decimals).
    pub scores: Vec<f64>,
    /// 1 = best; ties share the average rank.
    pub ranks: Vec<f64>,
    /// The human score of each candidate, where it has one.
    pub human: Option<Vec<Option<f64>>>,
    /// Pairwise: `matrix[i * n + j]` = P(candidate i, shown first, is better than j) in
    /// millionths (the comparisons file's 6 decimals), -1 where not compared; for a judge
    /// that may call a tie, P(A) renormalised over A and B (the tie left out).
    pub matrix: Option<Vec<i32>>,
    /// Pairwise with a judge that may call a tie: `p_tie[i * n + j]` = P(tie) (over A, B
    /// and the tie) of candidate i shown first against j, in millionths, -1 where not
    /// compared; absent without a tie label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_tie: Option<Vec<i32>>,
    pub first_position: Option<Fraction>,
    pub consistency: Option<Fraction>,
    pub accuracy: Option<Fraction>,
    /// Within this context, with the human scores (undefined when either is constant).
    pub spearman: Option<f64>,
    pub kendall: Option<f64>,
    /// Absolute: each candidate's normalised probabilities over the scale.
    pub distributions: Option<Vec<Vec<f64>>>,
    /// How the adaptive design ended here.
    pub note: Option<String>,
    /// Rubric grading with feedback: each candidate's feedback (the text before the
    /// result marker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<Vec<Option<String>>>,
    /// Rubric grading with feedback: whether each feedback kept to the judge's format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formats: Option<Vec<Option<FormatOutcome>>>,
    /// A jury's run: each judge's scores, `[judge][candidate]` (6 decimals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge_scores: Option<Vec<Vec<f64>>>,
    /// Relative rubric grading with feedback: the judge's feedback on each comparison, in
    /// design order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair_feedback: Option<Vec<PairFeedback>>,
}

/// The judge's feedback on one comparison (relative rubric grading): candidate `first`
/// shown as A, `second` as B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairFeedback {
    pub first: usize,
    pub second: usize,
    /// The feedback for people (the text before the result marker).
    pub feedback: String,
    /// Whether the feedback kept to the judge's format.
    pub format: FormatOutcome,
}

/// A titled block of trusted HTML (made by [`markdown`] or the figure module).
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub title: String,
    pub html: String,
}

/// `x` with 6 decimals, as the output files write it, read back.
fn six(x: f64) -> f64 {
    let text = format!("{x:.6}");
    text.parse().unwrap_or(x)
}

/// A probability in millionths, exactly the 6 decimals the comparisons file writes.
fn millionths(p: f64) -> i32 {
    let text = format!("{:.6}", p.clamp(0.0, 1.0));
    text.replace('.', "").parse().unwrap_or(-1)
}

fn contexts_view(contexts: &[Context]) -> Vec<ContextView> {
    contexts
        .iter()
        .map(|c| ContextView {
            id: c.id.clone(),
            text: c.text.clone(),
            candidates: c
                .candidates
                .iter()
                .map(|k| CandidateView {
                    id: k.id.clone(),
                    system: k.system_id.clone(),
                    text: k.text.clone(),
                })
                .collect(),
        })
        .collect()
}

fn human_of(context: &Context, key: Option<&str>) -> Option<Vec<Option<f64>>> {
    let key = key?;
    let values: Vec<Option<f64>> = context
        .candidates
        .iter()
        .map(|c| c.scores.get(key).copied())
        .collect();
    values.iter().any(Option::is_some).then_some(values)
}

/// Spearman and Kendall within one context, over the candidates with a human score.
fn within(scores: &[f64], human: Option<&Vec<Option<f64>>>) -> (Option<f64>, Option<f64>) {
    let Some(human) = human else {
        return (None, None);
    };
    let (x, y): (Vec<f64>, Vec<f64>) = scores
        .iter()
        .zip(human)
        .filter_map(|(s, h)| h.map(|h| (*s, h)))
        .unzip();
    if x.len() < 2 {
        return (None, None);
    }
    (
        spearman(&x, &y).ok().flatten(),
        kendall_tau_b(&x, &y).ok().flatten(),
    )
}

/// The summary-level agreement of `items` with intervals, as `compare --correlate`
/// prints it; `None` when it cannot be computed (too few contexts or candidates).
pub fn correlation(items: &[Item], key: &str) -> Option<CorrelationView> {
    let skip = SkipRule::Authors;
    let result = meta_evaluate(items, Level::Summary, skip).ok()?;
    let options = BootstrapOptions {
        resamples: RESAMPLES,
        confidence: 0.95,
        seed: 0,
    };
    let ci = bootstrap_ci(items, Level::Summary, skip, &options, || {}).ok();
    let view = |coefficient: Coefficient, value: Option<f64>| CoefficientView {
        value,
        ci: ci
            .as_ref()
            .and_then(|ci| ci.get(coefficient).interval)
            .map(|i| (i.lower, i.upper)),
    };
    Some(CorrelationView {
        key: key.to_string(),
        level: "summary",
        groups: result.n_groups,
        groups_skipped: result.n_groups_skipped,
        items: result.n_items,
        spearman: view(Coefficient::Spearman, result.correlations.spearman),
        kendall: view(Coefficient::Kendall, result.correlations.kendall),
        pearson: view(Coefficient::Pearson, result.correlations.pearson),
        resamples: RESAMPLES,
        confidence: 0.95,
        no_interval: ci.as_ref().and_then(|ci| ci.withheld.clone()),
    })
}

impl RunView {
    /// A run without comparisons of its own (absolute scores, a jury's ranking): no
    /// threshold, bias or consistency figures, no diagnostics, scale or judges yet.
    fn unpaired(
        name: &str,
        kind: RunKind,
        score: &str,
        human_key: Option<&str>,
        correlation: Option<CorrelationView>,
        contexts: Vec<RunContext>,
    ) -> Self {
        Self {
            name: name.to_string(),
            kind,
            score: score.to_string(),
            human_key: human_key.map(str::to_string),
            tau: None,
            first_position_raw: None,
            first_position: None,
            consistency: None,
            accuracy: None,
            correlation,
            diagnostics: None,
            scale: None,
            judges: None,
            contexts,
        }
    }
}

impl RunContext {
    /// A context's scores with their ranks, nothing else yet.
    fn of_scores(scores: Vec<f64>) -> Self {
        Self {
            ranks: crate::rank::ranks_from_scores(&scores),
            scores,
            human: None,
            matrix: None,
            p_tie: None,
            first_position: None,
            consistency: None,
            accuracy: None,
            spearman: None,
            kendall: None,
            distributions: None,
            note: None,
            feedback: None,
            formats: None,
            judge_scores: None,
            pair_feedback: None,
        }
    }
}

/// The run of a `compare` result over `contexts` (the run's input, same order); `score`
/// names the ranking method.
pub fn compare_run(result: &CompareResult, contexts: &[Context], score: &str) -> Result<RunView> {
    anyhow::ensure!(
        result.contexts.len() == contexts.len()
            && result
                .contexts
                .iter()
                .zip(contexts)
                .all(|(r, c)| r.context_id == c.id && r.scores.len() == c.candidates.len()),
        "the results do not match the input's contexts"
    );
    let key = result.human_key.as_deref();
    let mut runs_contexts = Vec::with_capacity(contexts.len());
    for (scored, input) in result.contexts.iter().zip(contexts) {
        let n = scored.scores.len();
        let mut matrix = vec![-1; n * n];
        let mut p_tie = vec![-1; n * n];
        let mut tied = false;
        for c in &scored.comparisons {
            matrix[c.first * n + c.second] = millionths(c.a_over_b());
            if let Some(p) = c.p_tie {
                p_tie[c.first * n + c.second] = millionths(p);
                tied = true;
            }
        }
        let scores: Vec<f64> = scored.scores.iter().map(|&s| six(s)).collect();
        let human = human_of(input, key);
        let (rho, tau) = within(&scores, human.as_ref());
        let pair_feedback: Vec<PairFeedback> = scored
            .comparisons
            .iter()
            .filter_map(|c| {
                let key = (
                    scored.context_id.clone(),
                    scored.candidate_ids[c.first].clone(),
                    scored.candidate_ids[c.second].clone(),
                );
                result.feedbacks.get(&key).map(|reading| PairFeedback {
                    first: c.first,
                    second: c.second,
                    feedback: reading.feedback.clone(),
                    format: reading.format,
                })
            })
            .collect();
        runs_contexts.push(RunContext {
            pair_feedback: (!pair_feedback.is_empty()).then_some(pair_feedback),
            ranks: scored.ranks.clone(),
            human,
            matrix: Some(matrix),
            p_tie: tied.then_some(p_tie),
            first_position: Some(scored.first_position.into()),
            consistency: Some(scored.consistency.into()),
            accuracy: scored.accuracy.map(Fraction::from),
            spearman: rho,
            kendall: tau,
            note: scored.adaptive.map(|run| {
                format!(
                    "adaptive design: {} comparisons in {} rounds; stopped: {}",
                    scored.comparisons.len(),
                    run.rounds,
                    run.ending.describe()
                )
            }),
            ..RunContext::of_scores(scores)
        });
    }
    let correlation =
        key.and_then(|key| correlation(&result.correlation_items(contexts, key), key));
    Ok(RunView {
        name: result
            .score_field
            .clone()
            .or_else(|| result.human_key.clone())
            .unwrap_or_else(|| "comparisons".to_string()),
        kind: RunKind::Pairwise,
        score: score.to_string(),
        human_key: result.human_key.clone(),
        tau: Some(result.tau),
        first_position_raw: Some(result.first_position_raw.into()),
        first_position: Some(result.first_position.into()),
        consistency: Some(result.consistency.into()),
        accuracy: result.accuracy.map(Fraction::from),
        correlation,
        diagnostics: None,
        scale: None,
        judges: None,
        contexts: runs_contexts,
    })
}

/// The run of a `score` result: `scored` in input order (contexts, then candidates),
/// compared with the human scores `human_key` where given; rubric grading's feedback
/// and format with each candidate.
pub fn score_run(
    name: &str,
    score: &str,
    scored: &[ScoredCandidate],
    contexts: &[Context],
    human_key: Option<&str>,
) -> Result<RunView> {
    let mut next = scored.iter();
    let mut runs_contexts = Vec::with_capacity(contexts.len());
    let mut items = Vec::new();
    let mut scale: Option<Vec<i64>> = None;
    for context in contexts {
        let mut scores = Vec::with_capacity(context.candidates.len());
        let mut distributions = Vec::new();
        let mut feedback = Vec::with_capacity(context.candidates.len());
        let mut formats = Vec::with_capacity(context.candidates.len());
        for candidate in &context.candidates {
            let result = next
                .next()
                .filter(|r| r.context_id == context.id && r.candidate_id == candidate.id)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "the results do not match the input at context `{}`, candidate `{}`",
                        context.id,
                        candidate.id
                    )
                })?;
            scores.push(result.score);
            if let Some(d) = &result.distribution {
                scale.get_or_insert_with(|| d.scores.clone());
                distributions.push(d.normalised.iter().map(|&p| six(p)).collect());
            }
            feedback.push(result.feedback.clone());
            formats.push(result.format);
            if let Some(&human) = human_key.and_then(|k| candidate.scores.get(k)) {
                items.push(Item {
                    group: context.id.clone(),
                    system: candidate.system_id.clone().unwrap_or(candidate.id.clone()),
                    pred: result.score,
                    human,
                });
            }
        }
        let human = human_of(context, human_key);
        let (rho, tau) = within(&scores, human.as_ref());
        let with_feedback = feedback.iter().any(Option::is_some);
        runs_contexts.push(RunContext {
            human,
            spearman: rho,
            kendall: tau,
            distributions: (!distributions.is_empty()).then_some(distributions),
            feedback: with_feedback.then_some(feedback),
            formats: formats.iter().any(Option::is_some).then_some(formats),
            ..RunContext::of_scores(scores)
        });
    }
    let correlation = human_key.and_then(|key| correlation(&items, key));
    Ok(RunView {
        scale,
        ..RunView::unpaired(
            name,
            RunKind::Absolute,
            score,
            human_key,
            correlation,
            runs_contexts,
        )
    })
}

impl Report {
    /// The report of a `compare` run over `contexts` (the run's input, same order).
    /// `score` names the ranking method ("win ratio").
    pub fn from_compare(
        title: &str,
        facts: Vec<(String, String)>,
        result: &CompareResult,
        contexts: &[Context],
        score: &str,
    ) -> Result<Report> {
        let run = compare_run(result, contexts, score)?;
        let mut notes = Vec::new();
        if run.human_key.is_none() {
            notes.push(
                "No human scores match the attribute: no agreement figures (name the key with \
                 --human-key)."
                    .to_string(),
            );
        }
        Ok(Report {
            title: title.to_string(),
            facts,
            notes,
            contexts: contexts_view(contexts),
            runs: vec![run],
            jury: None,
            sections: Vec::new(),
        })
    }

    /// The report of a `score` run: `scored` in input order (contexts, then candidates),
    /// compared with the human scores `human_key` where given. Rubric grading's feedback
    /// and format come with each candidate.
    pub fn from_scores(
        title: &str,
        facts: Vec<(String, String)>,
        name: &str,
        score: &str,
        scored: &[ScoredCandidate],
        contexts: &[Context],
        human_key: Option<&str>,
    ) -> Result<Report> {
        Ok(Report {
            title: title.to_string(),
            facts,
            notes: Vec::new(),
            contexts: contexts_view(contexts),
            runs: vec![score_run(name, score, scored, contexts, human_key)?],
            jury: None,
            sections: Vec::new(),
        })
    }

    /// The report of a jury over `contexts`: the jury's ranking first (named `jury`, its
    /// scores described by `score`, compared with the human scores `human_key`), then
    /// each judge's own run ([`compare_run`], [`score_run`]) with its diagnostics, whose
    /// warnings become notes naming the judge; the judges' weights and agreement.
    pub fn from_jury(
        title: &str,
        facts: Vec<(String, String)>,
        jury: &JuryResult,
        contexts: &[Context],
        score: &str,
        human_key: Option<&str>,
        judges: Vec<(RunView, Diagnostics)>,
    ) -> Result<Report> {
        anyhow::ensure!(
            jury.contexts.len() == contexts.len()
                && jury.contexts.iter().zip(contexts).all(|(j, c)| {
                    j.context_id == c.id
                        && j.candidate_ids.len() == c.candidates.len()
                        && j.candidate_ids
                            .iter()
                            .zip(&c.candidates)
                            .all(|(id, k)| *id == k.id)
                }),
            "the jury's results do not match the input's contexts"
        );
        anyhow::ensure!(
            judges.len() == jury.judges.len(),
            "{} judge runs for {} judges",
            judges.len(),
            jury.judges.len()
        );
        let mut runs_contexts = Vec::with_capacity(contexts.len());
        for (combined, input) in jury.contexts.iter().zip(contexts) {
            let scores: Vec<f64> = combined.scores.iter().map(|&s| six(s)).collect();
            let human = human_of(input, human_key);
            let (rho, tau) = within(&scores, human.as_ref());
            runs_contexts.push(RunContext {
                ranks: combined.ranks.clone(),
                human,
                spearman: rho,
                kendall: tau,
                judge_scores: Some(
                    combined
                        .judge_scores
                        .iter()
                        .map(|judge| judge.iter().map(|&s| six(s)).collect())
                        .collect(),
                ),
                ..RunContext::of_scores(scores)
            });
        }
        let correlation = human_key
            .and_then(|key| correlation(&jury.correlation_items(contexts, key, None), key));
        let names: Vec<String> = jury.judges.iter().map(|j| j.name.clone()).collect();
        let mut runs = vec![RunView {
            judges: Some(names.clone()),
            ..RunView::unpaired(
                "jury",
                RunKind::Jury,
                score,
                human_key,
                correlation,
                runs_contexts,
            )
        }];
        let mut notes = Vec::new();
        if let Some(note) = &jury.weights_note {
            let mut note = note.clone();
            if let Some(first) = note.get(..1) {
                note.replace_range(..1, &first.to_uppercase());
            }
            notes.push(format!("{note}."));
        }
        for ((mut run, diagnostics), name) in judges.into_iter().zip(&names) {
            for check in diagnostics.checks.iter().filter(|c| c.is_warning()) {
                let mut note = format!(
                    "Judge {name}: diagnostics, {}: {}.",
                    check.name, check.message
                );
                if let Some(remedy) = &check.remedy {
                    note.push_str(&format!(" Remedy: {remedy}."));
                }
                notes.push(note);
            }
            run.name = name.clone();
            run.diagnostics = Some(diagnostics);
            runs.push(run);
        }
        Ok(Report {
            title: title.to_string(),
            facts,
            notes,
            contexts: contexts_view(contexts),
            runs,
            jury: Some(JuryView {
                judges: jury.judges.clone(),
                agreement: jury.agreement.clone(),
                weights_note: jury.weights_note.clone(),
            }),
            sections: Vec::new(),
        })
    }

    /// A report of tables and figures only (`dhp report`, `reproduce`): `markdown` as
    /// sections (a section per `##` heading), images named in it replaced by the SVG
    /// figures given by file name.
    pub fn with_markdown(
        title: &str,
        facts: Vec<(String, String)>,
        text: &str,
        figures: &BTreeMap<String, String>,
    ) -> Report {
        Report {
            title: title.to_string(),
            facts,
            notes: Vec::new(),
            contexts: Vec::new(),
            runs: Vec::new(),
            jury: None,
            sections: markdown::sections(text, figures),
        }
    }

    /// The report with the run's judge diagnostics: kept with the run's data, and each
    /// warning (with its remedy) and adjusted default shown as a note on the summary page.
    pub fn with_diagnostics(mut self, diagnostics: &Diagnostics) -> Report {
        for check in diagnostics.checks.iter().filter(|c| c.is_warning()) {
            let mut note = format!("Judge diagnostics, {}: {}.", check.name, check.message);
            if let Some(remedy) = &check.remedy {
                note.push_str(&format!(" Remedy: {remedy}."));
            }
            self.notes.push(note);
        }
        if let Some(adjusted) = &diagnostics.adjusted {
            self.notes.push(format!("Judge diagnostics: {adjusted}."));
        }
        if let Some(run) = self.runs.first_mut() {
            run.diagnostics = Some(diagnostics.clone());
        }
        self
    }

    /// The page.
    pub fn to_html(&self) -> Result<String> {
        html::render(self)
    }

    /// The report as Markdown ([`text`]).
    pub fn to_markdown(&self) -> String {
        text::render(self)
    }

    /// The report in the format `path` names: Markdown for `.md`, else the HTML page
    /// (`compare` and `score`; a report of sections renders them in HTML only).
    pub fn render_for(&self, path: &std::path::Path) -> Result<String> {
        let markdown = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("md"));
        if markdown {
            Ok(self.to_markdown())
        } else {
            self.to_html()
        }
    }

    /// Write the page to `path` (the HTML page whatever its name: a report of sections,
    /// `dhp report`'s, has no Markdown twin).
    pub fn write(&self, path: &std::path::Path) -> Result<()> {
        use anyhow::Context as _;
        std::fs::write(path, self.to_html()?)
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_the_output_files_decimals() {
        assert_eq!(millionths(0.1234565), 123456);
        assert_eq!(millionths(1.0), 1_000_000);
        assert_eq!(millionths(0.0000004), 0);
        assert_eq!(six(0.12345678), 0.123457);
        let (rho, tau) = within(
            &[3.0, 2.0, 1.0, 0.0],
            Some(&vec![Some(4.0), Some(3.0), None, Some(1.0)]),
        );
        assert!((rho.unwrap() - 1.0).abs() < 1e-12 && (tau.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(within(&[1.0], None), (None, None));
    }
}

//! The absolute-scoring rows of the reproduction: prompt scoring (the comparative
//! paper's baseline, a 1-10 score as an expectation over the score tokens), G-Eval and
//! GPTScore, each candidate scored on its own and meta-evaluated like the comparative
//! rows.
//!
//! The rows go through the same cached, resumable runner as `nlg-judge score`
//! ([`crate::judge::run_scoring`]), so a rerun of `reproduce` computes nothing new.
//! G-Eval uses the built-in criteria named by the column's human score field (the
//! quality the annotators rated: Topical-Chat's COH column is `understandability`), or
//! failing that by its attribute; a column without built-in criteria gets no G-Eval cell, and the
//! report shows "-" there.

use anyhow::{Context as _, Result};

use super::experiment::Column;
use super::rows::{AttributeTask, MethodRow, PromptScores, RowSource, SourceRows};
use crate::engine::Scorer;
use crate::judge::geval::{Criteria, StepsSource};
use crate::judge::{resolve_method, run_scoring, ScoreMethod, ScoreOptions, Task};

/// Absolute-scoring methods as rows of the correlation tables.
#[derive(Debug, Clone)]
pub struct AbsoluteSource {
    methods: Vec<ScoreMethod>,
    max_step_tokens: usize,
    /// Columns (label) left without a G-Eval cell, for the run's messages.
    pub skipped: Vec<String>,
}

impl AbsoluteSource {
    /// Rows for `methods`, in that order; G-Eval's steps are written with at most
    /// `max_step_tokens` tokens (once per model and criterion, then cached).
    pub fn new(methods: Vec<ScoreMethod>, max_step_tokens: usize) -> Self {
        Self {
            methods,
            max_step_tokens,
            skipped: Vec::new(),
        }
    }

    /// The row's name in the tables, and whether the comparative paper reports it
    /// (its tables have prompt-scoring rows; G-Eval and GPTScore are extensions here).
    fn row_name(method: ScoreMethod) -> (&'static str, bool) {
        match method {
            ScoreMethod::Prompt => ("prompt scoring", true),
            ScoreMethod::Geval => ("G-Eval", false),
            ScoreMethod::Gptscore => ("GPTScore", false),
            ScoreMethod::Rubric => ("rubric grading", false),
        }
    }

    /// G-Eval's attribute for a column: its human score field when that has built-in
    /// criteria, else its attribute, else none.
    fn geval_attribute(task: Task, column: &Column) -> Option<String> {
        [&column.field, &column.attribute.name]
            .into_iter()
            .find(|name| Criteria::builtin(task, name).is_ok())
            .cloned()
    }
}

impl RowSource for AbsoluteSource {
    fn name(&self) -> &str {
        "absolute scoring"
    }

    fn rows(&mut self, scorer: &mut dyn Scorer, task: &AttributeTask) -> Result<SourceRows> {
        let mut produced = SourceRows::default();
        for &method in &self.methods {
            let attribute = match method {
                ScoreMethod::Geval => {
                    match Self::geval_attribute(task.experiment.task(), task.column) {
                        Some(attribute) => attribute,
                        None => {
                            self.skipped.push(task.column.label.clone());
                            task.progress.note(&format!(
                                "{}: no built-in G-Eval criteria for `{}`; no G-Eval cell",
                                task.column.label, task.column.attribute.name
                            ));
                            continue;
                        }
                    }
                }
                _ => task.column.attribute.name.clone(),
            };
            let mut options = ScoreOptions::new(method, task.experiment.task(), &attribute);
            options.steps = StepsSource::Generate {
                max_tokens: self.max_step_tokens,
            };
            options.progress = task.progress.clone();
            let (name, in_paper) = Self::row_name(method);
            task.progress
                .note(&format!("{}: {name}", task.column.label));
            let resolved = resolve_method(scorer, &options, task.cache)
                .with_context(|| format!("{name} for {}", task.column.label))?;
            let run = run_scoring(scorer, task.contexts, &resolved, &task.progress, task.cache)?;
            produced.computed += run.computed;
            produced.cached += run.cached;
            // The runner keeps input order: contexts in order, candidates in order.
            let mut scores = run.candidates.iter().map(|c| c.score);
            let per_context: Vec<Vec<f64>> = task
                .contexts
                .iter()
                .map(|context| scores.by_ref().take(context.candidates.len()).collect())
                .collect();
            produced.rows.push(MethodRow {
                family: "absolute".to_string(),
                method: name.to_string(),
                debiased: false,
                in_paper,
                per_prompt: vec![PromptScores {
                    prompt: method.name().to_string(),
                    scores: per_context,
                }],
            });
        }
        Ok(produced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::Experiment;

    fn geval_attributes(experiment: Experiment) -> Vec<Option<String>> {
        experiment
            .columns()
            .iter()
            .map(|column| AbsoluteSource::geval_attribute(experiment.task(), column))
            .collect()
    }

    #[test]
    fn geval_criteria_follow_the_rated_quality() {
        let named = |names: &[&str]| -> Vec<Option<String>> {
            names.iter().map(|n| Some(n.to_string())).collect()
        };
        assert_eq!(
            geval_attributes(Experiment::Summeval),
            named(&["coherence", "consistency", "fluency", "relevance"])
        );
        // Topical-Chat's COH column is rated as understandability, CNT as coherence.
        assert_eq!(
            geval_attributes(Experiment::Topicalchat),
            named(&[
                "understandability",
                "coherence",
                "engagingness",
                "naturalness"
            ])
        );
        assert_eq!(
            geval_attributes(Experiment::Webnlg),
            named(&["fluency", "grammar", "semantics"])
        );
    }
}

//! Expert weights (`EW`) for DHP's weighted p-value combination: per perturbation, how
//! much each metric should react to its quality issue.
//!
//! A weights file is TOML with one table per perturbation, named by the perturbation's
//! full name (`typos-minor`) or its family (`typos`, shared by `-minor` and `-major`),
//! mapping metric names to non-negative weights (normalised per perturbation). Metrics a
//! table leaves out weigh 0. The per-task defaults live in `templates/dhp/weights/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Context as _, Result};

use super::task::DhpTask;

/// Perturbation (or family) -> metric -> weight.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    /// Where the weights came from (a path or "default weights of <task>"), for errors.
    pub source: String,
    pub table: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Weights {
    /// Parse weights from TOML text.
    pub fn parse(text: &str, source: &str) -> Result<Self> {
        let value: toml::Table =
            toml::from_str(text).with_context(|| format!("{source}: not valid TOML"))?;
        let mut table = BTreeMap::new();
        for (perturbation, entry) in value {
            let entry = entry.as_table().with_context(|| {
                format!("{source}: `{perturbation}` must be a table of metric = weight")
            })?;
            let mut metrics = BTreeMap::new();
            for (metric, weight) in entry {
                let weight = weight
                    .as_float()
                    .or_else(|| weight.as_integer().map(|i| i as f64))
                    .with_context(|| {
                        format!("{source}: [{perturbation}] {metric} must be a number")
                    })?;
                if !(weight.is_finite() && weight >= 0.0) {
                    bail!(
                        "{source}: [{perturbation}] {metric} = {weight}; weights are non-negative"
                    );
                }
                metrics.insert(metric.clone(), weight);
            }
            if metrics.values().sum::<f64>() <= 0.0 {
                bail!("{source}: [{perturbation}] has no positive weight");
            }
            table.insert(perturbation, metrics);
        }
        Ok(Self {
            source: source.to_string(),
            table,
        })
    }

    /// Read a weights file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read weights file {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The shipped default weights of `task`.
    pub fn default_for(task: DhpTask) -> Result<Self> {
        let text = match task {
            DhpTask::Summarization => {
                include_str!("../../templates/dhp/weights/summarization.toml")
            }
            DhpTask::StoryCompletion => {
                include_str!("../../templates/dhp/weights/story-completion.toml")
            }
            DhpTask::Translation => include_str!("../../templates/dhp/weights/translation.toml"),
            DhpTask::QuestionAnswering => {
                include_str!("../../templates/dhp/weights/question-answering.toml")
            }
        };
        Self::parse(text, &format!("default weights of {}", task.name()))
    }

    /// Every metric the file names must be one of `metrics` (the metrics scored).
    pub fn check_metrics(&self, metrics: &BTreeSet<&str>) -> Result<()> {
        for (perturbation, entry) in &self.table {
            for metric in entry.keys() {
                if !metrics.contains(metric.as_str()) {
                    bail!(
                        "{}: [{perturbation}] names metric `{metric}`, which the scores do not have (they have: {})",
                        self.source,
                        metrics.iter().copied().collect::<Vec<_>>().join(", ")
                    );
                }
            }
        }
        Ok(())
    }

    /// The weights of perturbation `name` over `metrics`, in that order: the table named
    /// `name`, else its family's (the name without `-minor` / `-major`).
    pub fn for_perturbation<'a>(
        &self,
        name: &str,
        metrics: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<f64>> {
        let family = name
            .strip_suffix("-minor")
            .or_else(|| name.strip_suffix("-major"))
            .unwrap_or(name);
        let entry = self
            .table
            .get(name)
            .or_else(|| self.table.get(family))
            .with_context(|| {
                format!(
                    "{}: no weights for perturbation `{name}` (add a table [{family}] or [{name}])",
                    self.source
                )
            })?;
        let weights: Vec<f64> = metrics
            .map(|m| entry.get(m).copied().unwrap_or(0.0))
            .collect();
        if weights.iter().sum::<f64>() <= 0.0 {
            bail!(
                "{}: the weights of `{name}` are all on metrics without scores",
                self.source
            );
        }
        Ok(weights)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_cover_every_perturbation_and_name_only_task_metrics() {
        for task in [
            DhpTask::Summarization,
            DhpTask::StoryCompletion,
            DhpTask::Translation,
            DhpTask::QuestionAnswering,
        ] {
            let weights = Weights::default_for(task).unwrap();
            let metrics: BTreeSet<&str> = task.metrics().iter().copied().collect();
            weights.check_metrics(&metrics).unwrap();
            for p in task.perturbations() {
                weights
                    .for_perturbation(&p.name, task.metrics().iter().copied())
                    .unwrap();
            }
        }
    }

    #[test]
    fn full_names_override_families() {
        let weights = Weights::parse(
            "[typos]\nfluency = 1\n[typos-major]\ncoherence = 2\n",
            "w.toml",
        )
        .unwrap();
        let metrics = ["coherence", "fluency"];
        assert_eq!(
            weights
                .for_perturbation("typos-minor", metrics.iter().copied())
                .unwrap(),
            vec![0.0, 1.0]
        );
        assert_eq!(
            weights
                .for_perturbation("typos-major", metrics.iter().copied())
                .unwrap(),
            vec![2.0, 0.0]
        );
    }

    #[test]
    fn bad_files_get_named_errors() {
        let weights = Weights::parse("[typos]\nfluenzy = 1\n", "w.toml").unwrap();
        let metrics: BTreeSet<&str> = ["fluency"].into_iter().collect();
        let error = weights.check_metrics(&metrics).unwrap_err().to_string();
        assert!(
            error.contains("w.toml: [typos] names metric `fluenzy`"),
            "{error}"
        );
        let error = Weights::parse("[typos]\nfluency = -1\n", "w.toml").unwrap_err();
        assert!(error.to_string().contains("w.toml: [typos] fluency = -1"));
        let error = Weights::parse("typos = 3\n", "w.toml").unwrap_err();
        assert!(error.to_string().contains("must be a table"));
        let error = weights
            .for_perturbation("grammar", ["fluency"].into_iter())
            .unwrap_err();
        assert!(error
            .to_string()
            .contains("no weights for perturbation `grammar`"));
    }
}

//! The comparative-assessment paper's experiments: which data set, which task nouns,
//! and which attributes (the paper's column labels, the attribute the prompts ask about,
//! the human score each is checked against).
//!
//! Topical-Chat follows the shared data README's mapping of the paper's columns to the
//! USR fields (COH = understandability, CNT = "maintains context" coherence, ENG, NAT).
//! WebNLG keeps the nine system teams; the human reference (team `webnlg`) is left out
//! unless asked for, and empty outputs are always left out (see [`crate::data::webnlg`]).

use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::data::{self, group_contexts, limit_contexts, Context};
use crate::judge::attribute::{Attribute, Task};

/// An experiment of the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Experiment {
    /// SummEval summaries: COH, CON, FLU, REL (Tables 1, 5-7; Figures 4-5).
    Summeval,
    /// Topical-Chat responses: COH, CNT, ENG, NAT (Tables 3, 6, 8, 9).
    Topicalchat,
    /// WebNLG data-to-text: FLU, GRA, SEM (Tables 4, 6, 8, 9).
    Webnlg,
}

/// One attribute column of the paper's tables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    /// The paper's label (`COH`).
    pub label: String,
    /// The attribute the prompts ask about (its adjective goes into the template).
    pub attribute: Attribute,
    /// The human score field the predictions are correlated with.
    pub field: String,
}

impl Column {
    fn new(label: &str, attribute: &str, field: &str) -> Result<Self> {
        Ok(Self {
            label: label.to_string(),
            attribute: Attribute::named(attribute)?,
            field: field.to_string(),
        })
    }
}

/// How the data of an experiment is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct DataOptions {
    /// Keep only the first K contexts (documents, dialogues, triple sets).
    pub limit: Option<usize>,
    /// WebNLG: keep the human reference as a candidate.
    pub include_reference: bool,
}

/// An experiment with its contexts read.
#[derive(Debug, Clone)]
pub struct LoadedExperiment {
    pub experiment: Experiment,
    pub contexts: Vec<Context>,
    /// WebNLG: whether the human reference is one of the candidates.
    pub reference_included: bool,
}

impl Experiment {
    /// The data set's name as the paper writes it.
    pub fn title(self) -> &'static str {
        match self {
            Experiment::Summeval => "SummEval",
            Experiment::Topicalchat => "TopicalChat",
            Experiment::Webnlg => "WebNLG",
        }
    }

    /// The lower-case name used on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Summeval => "summeval",
            Experiment::Topicalchat => "topicalchat",
            Experiment::Webnlg => "webnlg",
        }
    }

    /// The task, which fixes the prompts' nouns.
    pub fn task(self) -> Task {
        match self {
            Experiment::Summeval => Task::Summary,
            Experiment::Topicalchat => Task::Dialogue,
            Experiment::Webnlg => Task::DataToText,
        }
    }

    /// The paper's attribute columns, in its order.
    pub fn columns(self) -> Vec<Column> {
        let spec: &[(&str, &str, &str)] = match self {
            Experiment::Summeval => &[
                ("COH", "coherence", "coherence"),
                ("CON", "consistency", "consistency"),
                ("FLU", "fluency", "fluency"),
                ("REL", "relevance", "relevance"),
            ],
            Experiment::Topicalchat => &data::topicalchat::PAPER_COLUMNS,
            Experiment::Webnlg => &[
                ("FLU", "fluency", "fluency"),
                ("GRA", "grammaticality", "grammar"),
                ("SEM", "semantics", "semantics"),
            ],
        };
        spec.iter()
            .map(|(label, attribute, field)| {
                // The names above are all known attributes.
                Column::new(label, attribute, field)
                    .unwrap_or_else(|error| unreachable!("built-in column {label}: {error}"))
            })
            .collect()
    }

    /// Read the experiment's data from the shared data directory.
    pub fn load(self, data_dir: &Path, options: DataOptions) -> Result<LoadedExperiment> {
        let records = match self {
            Experiment::Summeval => data::summeval::read(data_dir)?,
            Experiment::Topicalchat => {
                data::topicalchat::read(data_dir, data::topicalchat::Options::default())?
            }
            Experiment::Webnlg => data::webnlg::read(
                data_dir,
                data::webnlg::Options {
                    include_reference: options.include_reference,
                    keep_empty: false,
                },
            )?,
        };
        let records = limit_contexts(records, options.limit);
        let contexts = group_contexts(records)
            .with_context(|| format!("{} data in {}", self.title(), data_dir.display()))?;
        Ok(LoadedExperiment {
            experiment: self,
            contexts,
            reference_included: self == Experiment::Webnlg && options.include_reference,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::find_shared_data_dir;

    #[test]
    fn columns_follow_the_paper_and_the_data_readme() {
        let labels =
            |e: Experiment| -> Vec<String> { e.columns().into_iter().map(|c| c.label).collect() };
        assert_eq!(labels(Experiment::Summeval), ["COH", "CON", "FLU", "REL"]);
        assert_eq!(
            labels(Experiment::Topicalchat),
            ["COH", "CNT", "ENG", "NAT"]
        );
        assert_eq!(labels(Experiment::Webnlg), ["FLU", "GRA", "SEM"]);
        let topical = Experiment::Topicalchat.columns();
        assert_eq!(topical[0].field, "understandability");
        assert_eq!(topical[0].attribute.adjective, "coherent");
        assert_eq!(topical[1].field, "coherence");
        assert_eq!(topical[1].attribute.adjective, "good a continuation");
        let webnlg = Experiment::Webnlg.columns();
        assert_eq!(webnlg[1].field, "grammar");
        assert_eq!(webnlg[1].attribute.adjective, "grammatically correct");
    }

    #[test]
    fn limited_loading_keeps_whole_contexts_with_every_field() {
        let Some(dir) = find_shared_data_dir() else {
            eprintln!("shared data not found; skipping");
            return;
        };
        for experiment in [
            Experiment::Summeval,
            Experiment::Topicalchat,
            Experiment::Webnlg,
        ] {
            let options = DataOptions {
                limit: Some(2),
                include_reference: false,
            };
            let loaded = experiment.load(&dir, options).unwrap();
            assert_eq!(loaded.contexts.len(), 2, "{experiment:?}");
            for column in experiment.columns() {
                assert!(loaded
                    .contexts
                    .iter()
                    .all(|c| c.human_scores(&column.field).is_some()));
            }
        }
        let with = Experiment::Webnlg
            .load(
                &dir,
                DataOptions {
                    limit: Some(1),
                    include_reference: true,
                },
            )
            .unwrap();
        assert!(with.reference_included);
        assert!(with.contexts[0]
            .candidates
            .iter()
            .any(|c| c.id == data::webnlg::REFERENCE_TEAM));
    }

    #[test]
    fn a_missing_data_directory_is_named() {
        let error = Experiment::Summeval
            .load(Path::new("/no/such/dir"), DataOptions::default())
            .unwrap_err();
        assert!(format!("{error:#}").contains("/no/such/dir"), "{error:#}");
    }
}

//! The Para-Ref experiment on our data: paraphrase the first reference of every chosen
//! WMT22 segment and SummEval document, then correlate each metric with the human scores
//! for one reference, one reference plus k paraphrases (max and mean), and all human
//! references.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};

use super::datasets::{read_summeval, read_wmt22, subset, Item};
use super::generate::{paraphrase_references, ParaphraseOptions, ParaphraseReport};
use super::input::ParaphraseRow;
use crate::engine::{ResultCache, Scorer};

/// One data set of the experiment.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// "wmt22-zh-en", "wmt22-de-en", "summeval".
    pub name: String,
    /// The human score correlated with ("DA z-score", "relevance").
    pub human: String,
    pub items: Vec<Item>,
    /// Paraphrases per reference.
    pub n: usize,
}

/// How much of the data to use.
#[derive(Debug, Clone)]
pub struct Selection {
    pub wmt_pairs: Vec<String>,
    pub wmt_segments: usize,
    /// Paraphrases per reference: one number for all pairs or one per pair.
    pub wmt_paraphrases: Vec<usize>,
    pub summeval_documents: usize,
    pub summeval_paraphrases: usize,
    pub summeval_attribute: String,
    pub seed: u64,
}

/// The chosen subsets of every data set.
pub fn load_datasets(data_dir: &Path, selection: &Selection) -> Result<Vec<Dataset>> {
    let mut out = Vec::new();
    let per_pair = &selection.wmt_paraphrases;
    if per_pair.is_empty() || (per_pair.len() != 1 && per_pair.len() != selection.wmt_pairs.len()) {
        bail!(
            "give one number of paraphrases, or one per WMT pair ({} pairs, {} numbers)",
            selection.wmt_pairs.len(),
            per_pair.len()
        );
    }
    for (index, pair) in selection.wmt_pairs.iter().enumerate() {
        let items = read_wmt22(data_dir, pair)?;
        out.push(Dataset {
            name: format!("wmt22-{pair}"),
            human: "DA z-score".to_string(),
            items: subset(&items, selection.wmt_segments, selection.seed),
            n: per_pair[index.min(per_pair.len() - 1)],
        });
    }
    if selection.summeval_documents > 0 {
        let items = read_summeval(data_dir, &selection.summeval_attribute)?;
        out.push(Dataset {
            name: "summeval".to_string(),
            human: selection.summeval_attribute.clone(),
            items: subset(&items, selection.summeval_documents, selection.seed),
            n: selection.summeval_paraphrases,
        });
    }
    Ok(out)
}

/// Paraphrases of one data set's first references, and what making them cost.
#[derive(Debug, Clone)]
pub struct Paraphrased {
    pub rows: Vec<ParaphraseRow>,
    pub report: ParaphraseReport,
    pub wall_seconds: f64,
}

/// Paraphrase the first reference of every item (cached: a rerun or a resumed run only
/// generates what is missing), writing `<out_dir>/<name>.paraphrases.jsonl`.
pub fn paraphrase_dataset(
    scorer: &mut dyn Scorer,
    cache: Option<&ResultCache>,
    dataset: &Dataset,
    options: &ParaphraseOptions,
    out_dir: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Paraphrased> {
    let references: Vec<String> = dataset
        .items
        .iter()
        .map(|item| item.references[0].clone())
        .collect();
    let options = ParaphraseOptions {
        n: dataset.n,
        ..options.clone()
    };
    let start = Instant::now();
    let (rows, report) = paraphrase_references(scorer, cache, &references, &options, progress)
        .with_context(|| format!("paraphrasing {}", dataset.name))?;
    let wall_seconds = start.elapsed().as_secs_f64();
    let path = paraphrase_path(out_dir, &dataset.name);
    let mut text = String::new();
    for row in &rows {
        text.push_str(&serde_json::to_string(row)?);
        text.push('\n');
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Paraphrased {
        rows,
        report,
        wall_seconds,
    })
}

pub fn paraphrase_path(out_dir: &Path, name: &str) -> PathBuf {
    out_dir.join(format!("{name}.paraphrases.jsonl"))
}

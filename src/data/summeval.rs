//! SummEval (`summeval/summeval.jsonl`) as generic records.
//!
//! One context per CNN/DM article (`doc_id`, the `source` text in its original casing),
//! one candidate per system summary (`candidate_id` = `system_id` = M0..M23), the first
//! reference, and the four expert means (coherence, consistency, fluency, relevance; 1-5).
//! The lower-cased tokenised copies (`source_tok`, `summary_tok`) are not used.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Deserialize;

use super::CandidateRecord;

/// The file inside the shared data directory.
pub const FILE: &str = "summeval/summeval.jsonl";

/// The four annotated attributes.
pub const ATTRIBUTES: [&str; 4] = ["coherence", "consistency", "fluency", "relevance"];

#[derive(Deserialize)]
struct Row {
    doc_id: String,
    system_id: String,
    source: String,
    summary: String,
    reference: Option<String>,
    coherence: f64,
    consistency: f64,
    fluency: f64,
    relevance: f64,
}

/// Read `<data_dir>/summeval/summeval.jsonl`.
pub fn read(data_dir: &Path) -> Result<Vec<CandidateRecord>> {
    let path = data_dir.join(FILE);
    let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut records = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let location = format!("{}:{}", path.display(), index + 1);
        let line = line.with_context(|| format!("{location}: cannot read line"))?;
        if line.trim().is_empty() {
            continue;
        }
        let row: Row = serde_json::from_str(&line)
            .with_context(|| format!("{location}: not a SummEval row"))?;
        let scores = BTreeMap::from([
            ("coherence".to_string(), row.coherence),
            ("consistency".to_string(), row.consistency),
            ("fluency".to_string(), row.fluency),
            ("relevance".to_string(), row.relevance),
        ]);
        records.push(CandidateRecord {
            context_id: row.doc_id,
            context: row.source,
            candidate_id: row.system_id.clone(),
            candidate: row.summary,
            reference: row.reference,
            scores,
            system_id: Some(row.system_id),
            metadata: Default::default(),
        });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{find_shared_data_dir, group_contexts};

    #[test]
    fn hundred_documents_of_sixteen_summaries_with_the_readme_means() {
        let Some(dir) = find_shared_data_dir() else {
            eprintln!("shared data not found; skipping");
            return;
        };
        let records = read(&dir).unwrap();
        let contexts = group_contexts(records.clone()).unwrap();
        assert_eq!(contexts.len(), 100);
        assert!(contexts.iter().all(|c| c.candidates.len() == 16));
        // Means published in the shared data README (computed there over all 1600 rows).
        let expected = [
            ("coherence", 3.4125),
            ("consistency", 4.6604),
            ("fluency", 4.6729),
            ("relevance", 3.7771),
        ];
        for (name, mean) in expected {
            let total: f64 = records.iter().map(|r| r.scores[name]).sum();
            let got = total / records.len() as f64;
            assert!((got - mean).abs() < 5e-5, "{name}: {got} vs {mean}");
        }
        // System order is the same in every document.
        let order: Vec<_> = contexts[0].candidates.iter().map(|c| &c.id).collect();
        assert!(contexts
            .iter()
            .all(|c| c.candidates.iter().map(|c| &c.id).collect::<Vec<_>>() == order));
    }

    #[test]
    fn a_missing_directory_is_named() {
        let error = format!("{:#}", read(Path::new("/nonexistent")).unwrap_err());
        assert!(
            error.contains("/nonexistent/summeval/summeval.jsonl"),
            "{error}"
        );
    }
}

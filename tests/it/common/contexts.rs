//! Small made-up contexts for the pairwise tests: each candidate carries its true quality
//! `q` in its text (where the mock judges read it back with [`quality_after`]) and `5q` as
//! its human coherence score.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use nlg_judge::data::{Candidate, Context};

/// One context per row of `qualities`, one candidate per quality.
pub fn scored_contexts(qualities: &[&[f64]]) -> Vec<Context> {
    qualities
        .iter()
        .enumerate()
        .map(|(d, qs)| Context {
            id: format!("doc{d}"),
            text: format!("Article number {d}."),
            candidates: qs
                .iter()
                .enumerate()
                .map(|(k, &q)| Candidate {
                    id: format!("sys{k}"),
                    text: format!("summary {k} of doc {d} q={q}"),
                    reference: None,
                    scores: BTreeMap::from([("coherence".to_string(), q * 5.0)]),
                    system_id: None,
                    metadata: Default::default(),
                    source: None,
                })
                .collect(),
        })
        .collect()
}

/// A context `id` with text `text` and candidates `(id, text)`, without human scores.
pub fn context_of(id: &str, text: &str, candidates: &[(String, String)]) -> Context {
    Context {
        id: id.to_string(),
        text: text.to_string(),
        candidates: candidates
            .iter()
            .map(|(id, text)| Candidate {
                id: id.clone(),
                text: text.clone(),
                reference: None,
                scores: BTreeMap::new(),
                system_id: None,
                metadata: Default::default(),
                source: None,
            })
            .collect(),
    }
}

/// The logistic function, the mock judges' P(A) from a quality difference.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The quality written at the end of the candidate line after `label` ("Summary A: ...
/// q=0.7").
pub fn quality_after(prompt: &str, label: &str) -> Result<f64> {
    let start = prompt
        .find(label)
        .ok_or_else(|| anyhow!("no {label:?} in prompt"))?;
    let line = prompt[start..].lines().next().unwrap_or_default();
    let q = line
        .rsplit("q=")
        .next()
        .ok_or_else(|| anyhow!("no quality in {line:?}"))?;
    Ok(q.trim().parse()?)
}

//! Small made-up contexts for the pairwise tests: each candidate carries its true quality
//! `q` in its text (where the mock judges read it) and `5q` as its human coherence score.

use std::collections::BTreeMap;

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

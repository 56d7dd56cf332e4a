//! Correlations of reference-based metrics with human scores when the references are one
//! human reference, that reference plus k of its paraphrases (max or mean over the
//! references), or all human references. Pure computation over the data and paraphrases.

use std::collections::HashMap;

use rayon::prelude::*;

use super::datasets::Item;
use super::experiment::Dataset;
use super::input::{reference_id, ParaphraseRow};
use crate::metrics::{aggregate, single, Aggregation, LexicalMetric};
use crate::stats::correlation::kendall_tau_b;

/// Which references a candidate is scored against.
#[derive(Debug, Clone, PartialEq)]
pub enum References {
    /// The first human reference alone.
    First,
    /// The first reference plus its first k paraphrases.
    Paraphrased { k: usize },
    /// Every human reference.
    AllHuman,
}

/// One row of a result table.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionRow {
    pub references: References,
    pub aggregation: Aggregation,
    /// Mean number of references per item.
    pub mean_references: f64,
    /// Kendall tau-b with the human scores, per metric (None when undefined).
    pub taus: Vec<(LexicalMetric, Option<f64>)>,
}

/// The result table of one data set.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetResult {
    pub name: String,
    pub human: String,
    pub items: usize,
    pub outputs: usize,
    pub rows: Vec<ConditionRow>,
}

/// Per output: its human score and its score against every reference of the item
/// (first reference, paraphrases, other human references), per metric.
struct ScoredItem {
    human: Vec<f64>,
    /// `[metric][output][reference]`.
    scores: Vec<Vec<Vec<f64>>>,
    paraphrases: usize,
    human_references: usize,
}

fn score_item(item: &Item, paraphrases: &[String], metrics: &[LexicalMetric]) -> ScoredItem {
    let mut references: Vec<&str> = vec![item.references[0].as_str()];
    references.extend(paraphrases.iter().map(String::as_str));
    references.extend(item.references[1..].iter().map(String::as_str));
    let scores = metrics
        .iter()
        .map(|&metric| {
            item.outputs
                .iter()
                .map(|output| {
                    references
                        .iter()
                        .map(|r| single(metric, &output.text, r, false))
                        .collect()
                })
                .collect()
        })
        .collect();
    ScoredItem {
        human: item.outputs.iter().map(|o| o.human).collect(),
        scores,
        paraphrases: paraphrases.len(),
        human_references: item.references.len(),
    }
}

/// Indices (into an item's reference list) of the references a condition uses.
fn chosen(item: &ScoredItem, references: &References) -> Vec<usize> {
    match references {
        References::First => vec![0],
        References::Paraphrased { k } => (0..=(*k).min(item.paraphrases)).collect(),
        References::AllHuman => std::iter::once(0)
            .chain((1..item.human_references).map(|i| item.paraphrases + i))
            .collect(),
    }
}

/// The table of one data set: reference alone, plus k paraphrases for each of `ks` (max
/// and mean), all human references (max and mean).
pub fn evaluate(
    dataset: &Dataset,
    paraphrases: &[ParaphraseRow],
    metrics: &[LexicalMetric],
    ks: &[usize],
) -> DatasetResult {
    let by_id: HashMap<&str, &ParaphraseRow> = paraphrases
        .iter()
        .map(|row| (row.reference_id.as_str(), row))
        .collect();
    let scored: Vec<ScoredItem> = dataset
        .items
        .par_iter()
        .map(|item| {
            let paras = by_id
                .get(reference_id(&item.references[0]).as_str())
                .map(|row| row.paraphrases.clone())
                .unwrap_or_default();
            score_item(item, &paras, metrics)
        })
        .collect();
    let mut conditions = vec![(References::First, Aggregation::Max)];
    for &k in ks {
        for aggregation in [Aggregation::Max, Aggregation::Mean] {
            conditions.push((References::Paraphrased { k }, aggregation));
        }
    }
    for aggregation in [Aggregation::Max, Aggregation::Mean] {
        conditions.push((References::AllHuman, aggregation));
    }
    let human: Vec<f64> = scored
        .iter()
        .flat_map(|s| s.human.iter().copied())
        .collect();
    let rows = conditions
        .into_iter()
        .map(|(references, aggregation)| {
            let counts: Vec<usize> = scored
                .iter()
                .map(|s| chosen(s, &references).len())
                .collect();
            let taus = metrics
                .iter()
                .enumerate()
                .map(|(m, &metric)| {
                    let predicted: Vec<f64> = scored
                        .iter()
                        .flat_map(|s| {
                            let picks = chosen(s, &references);
                            s.scores[m]
                                .iter()
                                .map(move |per_ref| {
                                    let values: Vec<f64> =
                                        picks.iter().map(|&i| per_ref[i]).collect();
                                    aggregate(&values, aggregation).unwrap_or(0.0)
                                })
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    (metric, kendall_tau_b(&predicted, &human).ok().flatten())
                })
                .collect();
            ConditionRow {
                references,
                aggregation,
                mean_references: counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64,
                taus,
            }
        })
        .collect();
    DatasetResult {
        name: dataset.name.clone(),
        human: dataset.human.clone(),
        items: dataset.items.len(),
        outputs: human.len(),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pararef::datasets::ScoredOutput;

    fn output(text: &str, human: f64) -> ScoredOutput {
        ScoredOutput {
            system: text.to_string(),
            text: text.to_string(),
            human,
        }
    }

    #[test]
    fn a_paraphrase_matching_the_best_output_raises_its_max_score() {
        let item = Item {
            id: "1".into(),
            references: vec!["the cat sat on the mat".into(), "a cat was on a mat".into()],
            outputs: vec![
                output("a feline rested on the rug", 1.0),
                output("the dog ran away", -1.0),
                output("the cat sat", 0.0),
            ],
        };
        let dataset = Dataset {
            name: "toy".into(),
            human: "h".into(),
            items: vec![item.clone()],
            n: 1,
        };
        let paras = vec![ParaphraseRow {
            reference_id: reference_id(&item.references[0]),
            reference: item.references[0].clone(),
            paraphrases: vec!["a feline rested on the rug".into()],
            failed: 0,
        }];
        let result = evaluate(&dataset, &paras, &[LexicalMetric::Rouge1], &[1]);
        let tau = |i: usize| result.rows[i].taus[0].1.unwrap();
        // Reference alone: "the cat sat" scores best, against the human order.
        assert!(tau(0) < 1.0);
        // With the paraphrase under max the human order is recovered exactly.
        assert_eq!(result.rows[1].references, References::Paraphrased { k: 1 });
        assert_eq!(result.rows[1].aggregation, Aggregation::Max);
        assert!((tau(1) - 1.0).abs() < 1e-12, "{}", tau(1));
        assert_eq!(result.rows[1].mean_references, 2.0);
        assert_eq!(result.rows.last().unwrap().references, References::AllHuman);
        assert_eq!(result.outputs, 3);
    }
}

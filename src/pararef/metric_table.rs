//! Every candidate of a metric input scored on the chosen metrics (BLEU, chrF, chrF++,
//! ROUGE-1/2/L, BERTScore) against its references, optionally with their paraphrases:
//! the one route `nlg-judge metric` and the Python package's `nlg_judge.metrics` share.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;

use anyhow::{anyhow, Result};
use serde_json::{json, Map, Value};

use super::input::{reference_id, MetricRow, ParaphraseRow};
use crate::arch::bert::{BertEncoder, TokenEmbeddings};
use crate::metrics::bertscore::{greedy_match, load_encoder, IdfWeights, ENCODER_CARD};
use crate::metrics::{aggregate, score_lexical, Aggregation, LexicalMetric, LexicalOptions};
use crate::runtime::FetchOptions;

/// The metrics asked for by name (`bleu`, `chrf`, `chrf++`, `rouge1`, `rouge2`, `rougeL`,
/// `bertscore`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricSelection {
    pub lexical: Vec<LexicalMetric>,
    pub bertscore: bool,
}

impl MetricSelection {
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Self> {
        let mut selection = Self {
            lexical: Vec::new(),
            bertscore: false,
        };
        for name in names {
            match name.as_ref().trim() {
                "bertscore" => selection.bertscore = true,
                other => selection.lexical.push(other.parse::<LexicalMetric>()?),
            }
        }
        Ok(selection)
    }
}

/// Each row's references followed by their paraphrases (when given).
pub fn expand_references(
    rows: &[MetricRow],
    paraphrases: Option<&HashMap<String, ParaphraseRow>>,
) -> Vec<Vec<String>> {
    rows.iter()
        .map(|row| {
            let mut references = row.references.clone();
            if let Some(paraphrases) = paraphrases {
                for reference in &row.references {
                    if let Some(found) = paraphrases.get(&reference_id(reference)) {
                        references.extend(found.paraphrases.iter().cloned());
                    }
                }
            }
            references
        })
        .collect()
}

/// BERTScore with the encoder loaded once and the references' embeddings kept.
pub struct BertScoring {
    encoder: BertEncoder,
    weights: IdfWeights,
    references: RefCell<HashMap<String, TokenEmbeddings>>,
}

impl BertScoring {
    /// Load the encoder; with `idf`, weight tokens by their idf over `all_references`.
    pub fn new(all_references: &[Vec<String>], idf: bool) -> Result<Self> {
        let encoder = load_encoder(ENCODER_CARD, &FetchOptions::from_env()?)?;
        let special = encoder.special_ids();
        let weights = if idf {
            let mut distinct: Vec<&String> = all_references.iter().flatten().collect();
            distinct.sort();
            distinct.dedup();
            let ids = distinct
                .iter()
                .map(|r| encoder.encode(r))
                .collect::<Result<Vec<_>>>()?;
            IdfWeights::from_references(&ids, &special)
        } else {
            IdfWeights::uniform(&special)
        };
        Ok(Self {
            encoder,
            weights,
            references: Default::default(),
        })
    }

    /// F1 of `candidate` against `references`, aggregated.
    pub fn f1(
        &self,
        candidate: &str,
        references: &[String],
        aggregation: Aggregation,
    ) -> Result<f64> {
        let embedded = self.encoder.embed(candidate)?;
        let mut scores = Vec::with_capacity(references.len());
        for reference in references {
            let mut cache = self.references.borrow_mut();
            if !cache.contains_key(reference) {
                cache.insert(reference.clone(), self.encoder.embed(reference)?);
            }
            scores.push(greedy_match(&embedded, &cache[reference], &self.weights)?.f1);
        }
        aggregate(&scores, aggregation).ok_or_else(|| anyhow!("no references"))
    }
}

/// One output line per row (`context_id`, `candidate_id`, `system_id`?, `metrics` by
/// metric name, `human`?: the input's human scores), as `nlg-judge metric` writes them.
/// The metric values are `metrics`, not `scores`, which names human scores in every
/// other file of the tool. `references[k]` are row
/// `k`'s references (see [`expand_references`]); with `idf`, BERTScore weights tokens by
/// their idf over all of them.
pub fn score_rows(
    rows: &[MetricRow],
    references: &[Vec<String>],
    selection: &MetricSelection,
    options: LexicalOptions,
    idf: bool,
) -> Result<Vec<Value>> {
    let bert = if selection.bertscore {
        Some(BertScoring::new(references, idf)?)
    } else {
        None
    };
    let mut lines = Vec::with_capacity(rows.len());
    for (row, references) in rows.iter().zip(references) {
        let mut scores = Map::new();
        if let Some(bert) = &bert {
            let f1 = bert.f1(&row.candidate, references, options.aggregation)?;
            scores.insert("bertscore".to_string(), json!(f1));
        }
        for &metric in &selection.lexical {
            let score = score_lexical(metric, &row.candidate, references, options)?;
            scores.insert(metric.name().to_string(), json!(score));
        }
        let mut line = Map::new();
        line.insert("context_id".into(), json!(row.context_id));
        line.insert("candidate_id".into(), json!(row.candidate_id));
        if let Some(system) = &row.system_id {
            line.insert("system_id".into(), json!(system));
        }
        line.insert("metrics".into(), Value::Object(scores));
        if !row.scores.is_empty() {
            line.insert("human".into(), json!(row.scores));
        }
        lines.push(Value::Object(line));
    }
    Ok(lines)
}

/// Write `lines` as JSONL.
pub fn write_lines(lines: &[Value], out: &mut dyn Write) -> Result<()> {
    for line in lines {
        serde_json::to_writer(&mut *out, line)?;
        writeln!(out)?;
    }
    Ok(())
}

//! `nlg-judge metric`: reference-based metrics (BLEU, chrF, chrF++, ROUGE-1/2/L) of every
//! candidate, against its references alone or expanded with their paraphrases (Para-Ref).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Map, Value};

use super::compare::write_file;
use crate::metrics::{
    corpus_bleu, corpus_chrf, score_lexical, Aggregation, ChrfConfig, LexicalMetric, LexicalOptions,
};
use crate::pararef::{read_metric_rows, read_paraphrases, reference_id};

/// Arguments of `nlg-judge metric`.
#[derive(Debug, Args)]
pub struct MetricArgs {
    /// Metrics, comma-separated: bleu, chrf, chrf++, rouge1, rouge2, rougeL.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "bleu,chrf,chrf++,rouge1,rouge2,rougeL"
    )]
    pub metric: Vec<String>,

    /// Candidates in the generic JSONL format with `reference` (a string) or
    /// `references` (a list).
    #[arg(long)]
    pub input: PathBuf,

    /// Paraphrases from `nlg-judge paraphrase`: each reference's paraphrases join the
    /// candidate's references.
    #[arg(long)]
    pub paraphrases: Option<PathBuf>,

    /// Several references: max (best reference, the paper's default), mean, or native
    /// (sacrebleu's pooled multi-reference counts for BLEU, its best reference for chrF,
    /// rouge-score's score_multi for ROUGE).
    #[arg(long, default_value = "max")]
    pub agg: String,

    /// Also print corpus-level BLEU and chrF (sacrebleu's corpus_score, all references).
    #[arg(long)]
    pub corpus: bool,

    /// Porter stemmer for ROUGE (rouge-score's use_stemmer).
    #[arg(long)]
    pub stemmer: bool,

    /// One row per candidate: context_id, candidate_id, scores; default: standard output.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

pub fn run(args: MetricArgs) -> Result<()> {
    let mut metrics = Vec::new();
    for name in &args.metric {
        if name == "bertscore" {
            bail!("metric 'bertscore' needs the encoder, which this build does not include");
        }
        metrics.push(name.parse::<LexicalMetric>()?);
    }
    let options = LexicalOptions {
        aggregation: args.agg.parse::<Aggregation>()?,
        stemmer: args.stemmer,
    };
    let rows = read_metric_rows(&args.input)?;
    let paraphrases = match &args.paraphrases {
        Some(path) => Some(read_paraphrases(path)?),
        None => None,
    };
    let mut all_references = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut references = row.references.clone();
        if let Some(paraphrases) = &paraphrases {
            for reference in &row.references {
                if let Some(found) = paraphrases.get(&reference_id(reference)) {
                    references.extend(found.paraphrases.iter().cloned());
                }
            }
        }
        all_references.push(references);
    }
    let mut lines = Vec::with_capacity(rows.len());
    for (row, references) in rows.iter().zip(&all_references) {
        let mut scores = Map::new();
        for &metric in &metrics {
            let score = score_lexical(metric, &row.candidate, references, options)?;
            scores.insert(metric.name().to_string(), json!(score));
        }
        let mut line = Map::new();
        line.insert("context_id".into(), json!(row.context_id));
        line.insert("candidate_id".into(), json!(row.candidate_id));
        if let Some(system) = &row.system_id {
            line.insert("system_id".into(), json!(system));
        }
        line.insert("scores".into(), Value::Object(scores));
        if !row.scores.is_empty() {
            line.insert("human".into(), json!(row.scores));
        }
        lines.push(Value::Object(line));
    }
    let write_lines = |out: &mut dyn Write| -> Result<()> {
        for line in &lines {
            serde_json::to_writer(&mut *out, line)?;
            writeln!(out)?;
        }
        Ok(())
    };
    match &args.output {
        Some(path) => write_file(path, write_lines)?,
        None => write_lines(&mut std::io::stdout().lock())?,
    }
    if args.corpus {
        let candidates: Vec<&str> = rows.iter().map(|r| r.candidate.as_str()).collect();
        let references: Vec<Vec<&str>> = all_references
            .iter()
            .map(|refs| refs.iter().map(String::as_str).collect())
            .collect();
        eprintln!(
            "corpus BLEU {:.4}  chrF {:.4}  chrF++ {:.4}  ({} candidates)",
            corpus_bleu(&candidates, &references),
            corpus_chrf(&candidates, &references, ChrfConfig::CHRF),
            corpus_chrf(&candidates, &references, ChrfConfig::CHRF_PLUS_PLUS),
            candidates.len()
        );
    }
    Ok(())
}

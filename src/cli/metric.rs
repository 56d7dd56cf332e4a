//! `nlg-judge metric`: reference-based metrics (BLEU, chrF, chrF++, ROUGE-1/2/L) of every
//! candidate, against its references alone or expanded with their paraphrases (Para-Ref).

use std::io::Write;
use std::path::PathBuf;

use std::collections::HashMap;

use anyhow::Result;
use clap::Args;
use serde_json::{json, Map, Value};

use super::compare::write_file;
use crate::arch::bert::{BertEncoder, TokenEmbeddings};
use crate::metrics::bertscore::{greedy_match, load_encoder, IdfWeights, ENCODER_CARD};
use crate::metrics::{
    aggregate, corpus_bleu, corpus_chrf, score_lexical, Aggregation, ChrfConfig, LexicalMetric,
    LexicalOptions,
};
use crate::pararef::{read_metric_rows, read_paraphrases, reference_id};
use crate::runtime::FetchOptions;

/// Arguments of `nlg-judge metric`.
#[derive(Debug, Args)]
pub struct MetricArgs {
    /// Metrics, comma-separated: bleu, chrf, chrf++, rouge1, rouge2, rougeL, bertscore
    /// (F1 with all-MiniLM-L6-v2, last layer; fetched on first use).
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

    /// BERTScore: weight tokens by their idf over all references of the input.
    #[arg(long)]
    pub idf: bool,

    /// Porter stemmer for ROUGE (rouge-score's use_stemmer).
    #[arg(long)]
    pub stemmer: bool,

    /// One row per candidate: context_id, candidate_id, scores; default: standard output.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

/// BERTScore with the encoder loaded once and the references' embeddings kept.
struct BertScoring {
    encoder: BertEncoder,
    weights: IdfWeights,
    references: std::cell::RefCell<HashMap<String, TokenEmbeddings>>,
}

impl BertScoring {
    fn new(all_references: &[Vec<String>], idf: bool) -> Result<Self> {
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

    fn f1(&self, candidate: &str, references: &[String], aggregation: Aggregation) -> Result<f64> {
        let embedded = self.encoder.embed(candidate)?;
        let mut scores = Vec::with_capacity(references.len());
        for reference in references {
            let mut cache = self.references.borrow_mut();
            if !cache.contains_key(reference) {
                cache.insert(reference.clone(), self.encoder.embed(reference)?);
            }
            scores.push(greedy_match(&embedded, &cache[reference], &self.weights)?.f1);
        }
        aggregate(&scores, aggregation).ok_or_else(|| anyhow::anyhow!("no references"))
    }
}

pub fn run(args: MetricArgs) -> Result<()> {
    let mut metrics = Vec::new();
    let mut with_bertscore = false;
    for name in &args.metric {
        if name == "bertscore" {
            with_bertscore = true;
        } else {
            metrics.push(name.parse::<LexicalMetric>()?);
        }
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
    let bert = if with_bertscore {
        Some(BertScoring::new(&all_references, args.idf)?)
    } else {
        None
    };
    let mut lines = Vec::with_capacity(rows.len());
    for (row, references) in rows.iter().zip(&all_references) {
        let mut scores = Map::new();
        if let Some(bert) = &bert {
            let f1 = bert.f1(&row.candidate, references, options.aggregation)?;
            scores.insert("bertscore".to_string(), json!(f1));
        }
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

//! `nlg-judge metric`: reference-based metrics (BLEU, chrF, chrF++, ROUGE-1/2/L) of every
//! candidate, against its references alone or expanded with their paraphrases (Para-Ref).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::compare::write_file;
use super::outputs::PlannedPaths;
use crate::metrics::{corpus_bleu, corpus_chrf, Aggregation, ChrfConfig, LexicalOptions};
use crate::pararef::metric_table::{expand_references, score_rows, write_lines, MetricSelection};
use crate::pararef::{read_metric_rows, read_paraphrases};

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

    /// One row per candidate: context_id, candidate_id, system_id, metrics (the values
    /// by metric name) and human (the input's human scores); default: standard output.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

pub fn run(args: MetricArgs) -> Result<()> {
    // Options and input files: a failure here is the user's to fix (exit code 2).
    let (selection, options, rows, paraphrases) = (|| -> Result<_> {
        PlannedPaths::new()
            .input("--input", &args.input)
            .maybe_input("--paraphrases", args.paraphrases.as_deref())
            .output("--output", args.output.as_deref())
            .check()?;
        let selection = MetricSelection::parse(&args.metric)?;
        let options = LexicalOptions {
            aggregation: args.agg.parse::<Aggregation>()?,
            stemmer: args.stemmer,
        };
        let rows = read_metric_rows(&args.input)?;
        let paraphrases = match &args.paraphrases {
            Some(path) => Some(read_paraphrases(path)?),
            None => None,
        };
        Ok((selection, options, rows, paraphrases))
    })()
    .map_err(super::input_error)?;
    let all_references = expand_references(&rows, paraphrases.as_ref());
    let lines = score_rows(&rows, &all_references, &selection, options, args.idf)?;
    match &args.output {
        Some(path) => write_file(path, |out| write_lines(&lines, out))?,
        None => write_lines(&lines, &mut std::io::stdout().lock())?,
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

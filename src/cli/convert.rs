//! `nlg-judge convert`: write a shared human-judgement set in the generic JSONL format.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};

use super::outputs::PlannedPaths;
use crate::data::{self, limit_contexts, summeval, topicalchat, webnlg, write_records};

/// The shared data sets `convert` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dataset {
    /// SummEval: 100 articles x 16 summaries; coherence, consistency, fluency, relevance.
    Summeval,
    /// Topical-Chat (USR): 60 dialogues x 6 responses; the file's score names.
    Topicalchat,
    /// WebNLG 2017: 223 triple sets x 9 systems; fluency, grammar, semantics.
    Webnlg,
}

/// Arguments of `nlg-judge convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Which data set to convert.
    #[arg(long, value_enum)]
    pub dataset: Dataset,

    /// Directory holding the shared human-judgement data.
    #[arg(long, env = "NLG_JUDGE_DATA", default_value = data::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,

    /// Keep only the first K contexts.
    #[arg(long, value_name = "K")]
    pub limit_contexts: Option<usize>,

    /// Output JSONL file.
    #[arg(long)]
    pub output: PathBuf,

    /// Topical-Chat: append the knowledge fact to the dialogue history.
    #[arg(long)]
    pub with_knowledge: bool,

    /// WebNLG: keep the human reference (team `webnlg`) as a candidate.
    #[arg(long)]
    pub include_reference: bool,

    /// WebNLG: keep empty outputs (empty or `null` text) as empty candidates.
    #[arg(long)]
    pub keep_empty: bool,
}

pub fn run(args: ConvertArgs) -> Result<()> {
    PlannedPaths::new()
        .output("--output", Some(&args.output))
        .check()?;
    let records = (|| -> Result<_> {
        Ok(match args.dataset {
            Dataset::Summeval => summeval::read(&args.data_dir)?,
            Dataset::Topicalchat => topicalchat::read(
                &args.data_dir,
                topicalchat::Options {
                    with_knowledge: args.with_knowledge,
                },
            )?,
            Dataset::Webnlg => webnlg::read(
                &args.data_dir,
                webnlg::Options {
                    include_reference: args.include_reference,
                    keep_empty: args.keep_empty,
                },
            )?,
        })
    })()
    .map_err(|e| super::data_error(e, &args.data_dir, "--data-dir"))?;
    let records = limit_contexts(records, args.limit_contexts);
    super::compare::write_file(&args.output, |out| write_records(out, &records))?;
    let contexts = records
        .iter()
        .map(|r| r.context_id.as_str())
        .collect::<HashSet<_>>()
        .len();
    eprintln!(
        "wrote {} candidates in {contexts} contexts to {}",
        records.len(),
        args.output.display()
    );
    Ok(())
}

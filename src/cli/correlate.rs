//! `nlg-judge correlate`: meta-evaluate any metric's predictions (ours or another
//! tool's) against human scores from a JSONL file, at summary, system or pooled
//! level, optionally with bootstrap confidence intervals over groups.
//!
//! Input: one JSON object per line (blank lines skipped). Fields are named by dotted
//! paths into nested objects (`scores.coherence`; a numeric segment indexes an array:
//! `scores.0`). Scores must be JSON numbers: a string such as `"3.5"` is rejected, so
//! that a quoted or mis-exported column cannot pass silently. Group and system ids may
//! be strings or numbers.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;

use crate::data::predictions::{read_joined, read_predictions, Field, PredictionFields};
use crate::stats::report::{report_json, report_table};
use crate::stats::{bootstrap_ci, meta_evaluate, BootstrapOptions, Level, SkipRule};

/// Correlate predictions with human scores (meta-evaluation).
#[derive(Debug, Args)]
pub struct CorrelateArgs {
    /// JSONL file with one scored item per line.
    #[arg(long, value_name = "FILE", required_unless_present = "pred_file")]
    pub input: Option<PathBuf>,

    /// Instead of --input: the predictions (e.g. `compare`'s or `score`'s output),
    /// joined with --human-file on (`context_id`, `candidate_id`); --pred is read here.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "input",
        requires = "human_file"
    )]
    pub pred_file: Option<PathBuf>,

    /// The human scores (e.g. the input of `compare` or `score`); --human and --system
    /// are read here. Every row of either file must have its partner in the other.
    #[arg(long, value_name = "FILE", requires = "pred_file")]
    pub human_file: Option<PathBuf>,

    /// Field holding the metric's prediction (dotted path, e.g. `scores.coherence`);
    /// scores must be JSON numbers, quoted numbers are rejected.
    #[arg(long, value_name = "FIELD")]
    pub pred: String,

    /// Field holding the human score (dotted path).
    #[arg(long, value_name = "FIELD")]
    pub human: String,

    /// Field identifying the context (document, dialogue) an item belongs to: the unit
    /// of summary-level correlation and of bootstrap resampling.
    #[arg(long, value_name = "FIELD", default_value = "context_id")]
    pub group: String,

    /// Field identifying the system that produced the item (read at system level only).
    #[arg(long, value_name = "FIELD", default_value = "system_id")]
    pub system: String,

    /// summary: correlate within each group, then average; system: correlate
    /// per-system means; pooled: correlate all items at once (turn/sample level).
    #[arg(long, value_enum, default_value_t = LevelArg::Summary)]
    pub level: LevelArg,

    /// Summary level only. authors: skip groups with constant human scores, a constant
    /// prediction scores 0; geval: skip groups where either side is constant.
    #[arg(long, value_enum, default_value_t = SkipArg::Authors)]
    pub skip: SkipArg,

    /// Bootstrap confidence intervals with N resamples of the groups.
    #[arg(long, value_name = "N")]
    pub bootstrap: Option<usize>,

    /// Seed of the bootstrap resampling (same seed, same intervals).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// Confidence level of the bootstrap intervals, in (0, 1).
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    pub ci: f64,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LevelArg {
    Summary,
    System,
    Pooled,
}

impl From<LevelArg> for Level {
    fn from(level: LevelArg) -> Self {
        match level {
            LevelArg::Summary => Level::Summary,
            LevelArg::System => Level::System,
            LevelArg::Pooled => Level::Pooled,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SkipArg {
    Authors,
    Geval,
}

impl From<SkipArg> for SkipRule {
    fn from(skip: SkipArg) -> Self {
        match skip {
            SkipArg::Authors => SkipRule::Authors,
            SkipArg::Geval => SkipRule::Geval,
        }
    }
}

pub fn run(args: CorrelateArgs) -> Result<()> {
    let level = Level::from(args.level);
    let skip = SkipRule::from(args.skip);
    let fields = PredictionFields {
        pred: Field::new(&args.pred, "--pred"),
        human: Field::new(&args.human, "--human"),
        group: Field::new(&args.group, "--group"),
        system: (level == Level::System).then(|| Field::new(&args.system, "--system")),
    };
    let (items, source) = match (&args.input, &args.pred_file, &args.human_file) {
        (Some(input), _, _) => (
            read_predictions(input, &fields).map_err(super::input_error)?,
            input.display().to_string(),
        ),
        (None, Some(pred), Some(human)) => (
            read_joined(pred, human, &fields).map_err(super::input_error)?,
            format!("{} joined with {}", pred.display(), human.display()),
        ),
        _ => {
            return Err(super::input_error(anyhow::anyhow!(
                "give --input, or --pred-file with --human-file"
            )))
        }
    };
    let result =
        meta_evaluate(&items, level, skip).with_context(|| format!("meta-evaluating {source}"))?;

    let ci = match args.bootstrap {
        Some(resamples) => {
            let options = BootstrapOptions {
                resamples,
                confidence: args.ci,
                seed: args.seed,
            };
            let progress = ProgressBar::new(resamples as u64);
            let ci = bootstrap_ci(&items, level, skip, &options, || progress.inc(1))
                .with_context(|| format!("bootstrapping {source}"))?;
            progress.finish_and_clear();
            Some(ci)
        }
        None => None,
    };

    if args.json {
        println!("{}", report_json(&result, skip, ci.as_ref()));
    } else {
        print!("{}", report_table(&result, skip, ci.as_ref()));
    }
    Ok(())
}

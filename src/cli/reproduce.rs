//! `nlg-judge reproduce`: the comparative-assessment paper's tables and figures for one
//! data set, with one model, resumable through the result cache.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;

use super::outputs::PlannedPaths;

use super::cache_args::CacheArgs;
use super::model_args::ModelArgs;
use crate::data::DEFAULT_DATA_DIR;
use crate::judge::geval::steps::DEFAULT_MAX_TOKENS;
use crate::judge::ScoreMethod;
use crate::reproduce::report::{page, redraw_figures, terminal_tables};
use crate::reproduce::subset::{check_grid, default_grid};
use crate::reproduce::{
    reproduce, write_outputs, AbsoluteSource, BootstrapSettings, DataOptions, Experiment,
    ReproduceOptions, RowSource,
};

/// Arguments of `nlg-judge reproduce`.
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// The paper's experiment: summeval (COH CON FLU REL), topicalchat (COH CNT ENG NAT),
    /// webnlg (FLU GRA SEM).
    #[arg(value_enum)]
    pub experiment: Experiment,

    #[command(flatten)]
    pub model: ModelArgs,

    /// The shared human-judgement data directory (see its README.md).
    #[arg(long, env = "NLG_JUDGE_DATA", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,

    /// Evaluate only the first K contexts (documents, dialogues, triple sets).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit_docs: Option<u64>,

    /// Output directory for report.md, the CSV files and the figures
    /// [default: reproduction/<EXPERIMENT>].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Seeded draws per point of the subset-of-comparisons curves (the paper used 50).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,

    /// Comparisons per context R of the curves, comma-separated even numbers
    /// [default: about 24 steps up to N(N-1)].
    #[arg(long, value_delimiter = ',', value_name = "R,R,...")]
    pub grid: Option<Vec<usize>>,

    /// Skip the subset-of-comparisons curves.
    #[arg(long)]
    pub no_curves: bool,

    /// Also write the report as one self-contained HTML page (tables and figures).
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,

    /// Only draw the figures again, from the `subset.csv` and `report.md` an earlier run
    /// wrote into --out (no model, no data): after an update of the figures.
    #[arg(long, requires = "out")]
    pub redraw: bool,

    /// Bootstrap resamples of the contexts for the Spearman intervals (0: none).
    #[arg(long, default_value_t = 1000)]
    pub bootstrap: usize,

    /// WebNLG: also compare the human reference (team `webnlg`) as a candidate.
    #[arg(long)]
    pub include_reference: bool,

    /// Absolute-scoring rows next to comparative assessment, comma-separated: prompt
    /// (the paper's 1-10 prompt-scoring baseline), geval (G-Eval with the built-in
    /// criteria and steps the model writes), gptscore (rubric is `score`'s only). Each candidate is scored once per
    /// attribute, far fewer calls than the comparisons.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "prompt,geval"
    )]
    pub absolute: Vec<ScoreMethod>,

    /// No absolute-scoring rows: comparative assessment only.
    #[arg(long, conflicts_with = "absolute")]
    pub no_absolute: bool,

    /// Most tokens the model may write for G-Eval's evaluation steps.
    #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
    pub max_step_tokens: usize,

    #[command(flatten)]
    pub cache: CacheArgs,
}

/// The command line as typed, quoting arguments with spaces.
fn command_line() -> String {
    std::env::args()
        .map(|arg| {
            if arg.contains(char::is_whitespace) || arg.is_empty() {
                format!("{arg:?}")
            } else {
                arg
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn run(args: ReproduceArgs) -> Result<()> {
    if let (true, Some(out)) = (args.redraw, &args.out) {
        for path in redraw_figures(out, args.experiment).map_err(super::input_error)? {
            eprintln!("wrote {}", path.display());
        }
        return Ok(());
    }
    if !args.no_absolute && args.absolute.contains(&ScoreMethod::Rubric) {
        return Err(super::input_error(anyhow::anyhow!(
            "--absolute rubric: rubric grading is not a row of the reproduction; grade with \
             `nlg-judge score --method rubric`"
        )));
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reproduction").join(args.experiment.name()));
    PlannedPaths::new()
        .folder("--out", &out)
        .output("--report", args.report.as_deref())
        .check()?;
    let loaded = args
        .experiment
        .load(
            &args.data_dir,
            DataOptions {
                limit: args.limit_docs.map(|k| k as usize),
                include_reference: args.include_reference,
            },
        )
        .map_err(|e| super::data_error(e, &args.data_dir, "--data-dir"))?;
    let max_candidates = loaded
        .contexts
        .iter()
        .map(|c| c.candidates.len())
        .max()
        .unwrap_or(0);
    let grid = match &args.grid {
        Some(grid) => {
            check_grid(grid, max_candidates)?;
            grid.clone()
        }
        None => default_grid(max_candidates),
    };
    let mut options = ReproduceOptions::new(grid, args.seeds);
    if args.no_curves {
        options.curves = None;
    }
    options.bootstrap = (args.bootstrap > 0).then_some(BootstrapSettings {
        resamples: args.bootstrap,
        confidence: 0.95,
        seed: 0,
    });
    options.progress = super::progress::bars("reproduce");
    options.command = command_line();
    let cache = args.cache.open()?;
    let loading = Instant::now();
    let mut scorer = args.model.load()?;
    options.model_load_seconds = Some(loading.elapsed().as_secs_f64());
    let mut extra: Vec<Box<dyn RowSource>> = Vec::new();
    if !args.no_absolute && !args.absolute.is_empty() {
        let mut methods: Vec<ScoreMethod> = Vec::new();
        for method in &args.absolute {
            if !methods.contains(method) {
                methods.push(*method);
            }
        }
        extra.push(Box::new(AbsoluteSource::new(methods, args.max_step_tokens)));
    }
    let report = reproduce(
        scorer.as_mut(),
        &loaded,
        &options,
        cache.as_ref(),
        &mut extra,
    )?;
    let mut written = write_outputs(&report, &out)?;
    if let Some(path) = &args.report {
        page(&report)?.write(path)?;
        written.push(path.clone());
    }
    print!("{}", terminal_tables(&report));
    for path in written {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

//! Load a model as every command does (memory plan, then the weights) and print how long
//! loading took, for the memory measurements of `benches/memory/run.sh` (peak RSS from
//! `/usr/bin/time -v`). Usage:
//!
//!     cargo run --example load_model -- MODEL [auto|f32|quantized] [auto|f32|bf16|int8]
//!
//! `LOAD_MODEL_AVAILABLE_GIB=N` plans for N GiB instead of `MemAvailable` (to measure a
//! layout whose conservative estimate exceeds what a shared machine reports free; the
//! run may then be killed if the estimate was right).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use nlg_judge::arch::{Precision, WeightPolicy};
use nlg_judge::engine::{load_scorer, LoadOptions};
use nlg_judge::progress::{Progress, ProgressSink};

/// Prints notes on stderr (the memory plan's, the card's).
struct Notes;

impl ProgressSink for Notes {
    fn begin(&self, _total: u64, _unit: &str) {}
    fn advance(&self, _steps: u64) {}
    fn end(&self) {}
    fn note(&self, message: &str) {
        eprintln!("{message}");
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = args
        .first()
        .context("usage: load_model MODEL [weights] [precision]")?;
    let mut options = LoadOptions::from_env()?;
    options.device = "cpu".into();
    options.progress = Progress::to(Arc::new(Notes));
    options.weights = match args.get(1).map(String::as_str).unwrap_or("auto") {
        "auto" => WeightPolicy::Auto,
        "f32" => WeightPolicy::F32,
        "quantized" => WeightPolicy::Quantized,
        other => bail!("unknown weights policy {other}"),
    };
    let precision = args.get(2).map(String::as_str).unwrap_or("auto");
    options.memory.adapt_precision = precision == "auto";
    if let Ok(gib) = std::env::var("LOAD_MODEL_AVAILABLE_GIB") {
        let gib: f64 = gib
            .parse()
            .with_context(|| format!("LOAD_MODEL_AVAILABLE_GIB={gib} is not a number"))?;
        options.memory.available = Some((gib * (1u64 << 30) as f64) as u64);
    }
    options.precision = match precision {
        "auto" | "f32" => Precision::F32,
        "bf16" => Precision::Bf16,
        "int8" => Precision::Int8,
        other => bail!("unknown precision {other}"),
    };
    let start = Instant::now();
    let scorer = load_scorer(model, &options)?;
    println!(
        "loaded {} in {:.1} s",
        scorer.info().name,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

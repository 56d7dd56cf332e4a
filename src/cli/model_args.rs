//! The model arguments every model-using subcommand shares, and loading a scorer from them.

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::arch::{Precision, WeightPolicy};
use crate::engine::{load_scorer, LoadOptions, MockScorer};
use crate::engine::{BatchBudget, DecoderSettings, Scorer, Strategy};

/// Which model to run, where, and how.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model: a card name (see `nlg-judge models list`), a .gguf file, or a directory
    /// with config.json, safetensors weights and tokenizer.json. Card files are fetched
    /// into the cache on first use. `mock[:delay-ms=N,panic-on=TEXT]` is a scripted model
    /// without weights for testing the service and its clients (its answers are not
    /// judgements).
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub model: String,

    /// Device: auto (a GPU when compiled in and present, else the CPU), cpu, cuda[:N],
    /// metal.
    #[arg(long, default_value = "auto")]
    pub device: String,

    /// Quantized GGUF weights: auto dequantises to f32 on CPU (faster there) and keeps
    /// them quantized on GPUs; f32 always dequantises; quantized never does.
    #[arg(long, value_enum, default_value_t = WeightPolicy::Auto)]
    pub weights: WeightPolicy,

    /// Arithmetic of the model's matrix products (CPU, decoder-only models): f32 (exact);
    /// bf16 weights with f32 sums (~1.3x faster; the attention projection's inputs kept to
    /// 16 bits, the others rounded to bf16); int8 weights and activations with integer
    /// sums (least accurate). The output head stays f32. Results are cached per precision.
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,

    /// Most tokens one forward pass computes; bounds memory. Longer prompts are
    /// computed in pieces.
    #[arg(long, default_value_t = BatchBudget::default().max_batch_tokens)]
    pub max_batch_tokens: usize,

    /// Most sequences one forward pass computes.
    #[arg(long, default_value_t = BatchBudget::default().max_batch_rows)]
    pub max_batch_rows: usize,

    /// How prompts are evaluated: tree shares every common prefix once; naive runs each
    /// prompt on its own (a baseline, same results).
    #[arg(long, value_enum, default_value_t = Strategy::Tree)]
    pub strategy: Strategy,
}

/// `--precision` values (mapped onto [`Precision`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    F32,
    Bf16,
    Int8,
}

impl From<PrecisionArg> for Precision {
    fn from(arg: PrecisionArg) -> Self {
        match arg {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::Bf16 => Precision::Bf16,
            PrecisionArg::Int8 => Precision::Int8,
        }
    }
}

impl ModelArgs {
    /// Loading options from these arguments and the environment.
    pub fn load_options(&self) -> Result<LoadOptions> {
        let mut options = LoadOptions::from_env()?;
        options.device = self.device.clone();
        options.weights = self.weights;
        options.precision = self.precision.into();
        options.decoder = DecoderSettings {
            strategy: self.strategy,
            budget: BatchBudget {
                max_batch_tokens: self.max_batch_tokens,
                max_batch_rows: self.max_batch_rows,
            },
        };
        Ok(options)
    }

    /// Resolve, fetch if needed, and load the model (`mock[:...]`: the scripted model,
    /// see [`MockScorer::from_spec`]).
    pub fn load(&self) -> Result<Box<dyn Scorer>> {
        if let Some(mock) = MockScorer::from_spec(&self.model)? {
            return Ok(Box::new(mock));
        }
        load_scorer(&self.model, &self.load_options()?)
    }
}

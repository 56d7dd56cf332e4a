//! The model arguments every model-using subcommand shares, and loading a scorer from them.

use anyhow::Result;
use clap::Args;

use crate::arch::WeightPolicy;
use crate::engine::{load_scorer, LoadOptions};
use crate::engine::{BatchBudget, DecoderSettings, Scorer, Strategy};

/// Which model to run, where, and how.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model: a card name (see `nlg-judge models list`), a .gguf file, or a directory
    /// with config.json, safetensors weights and tokenizer.json. Card files are fetched
    /// into the cache on first use.
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

impl ModelArgs {
    /// Loading options from these arguments and the environment.
    pub fn load_options(&self) -> Result<LoadOptions> {
        let mut options = LoadOptions::from_env()?;
        options.device = self.device.clone();
        options.weights = self.weights;
        options.decoder = DecoderSettings {
            strategy: self.strategy,
            budget: BatchBudget {
                max_batch_tokens: self.max_batch_tokens,
                max_batch_rows: self.max_batch_rows,
            },
        };
        Ok(options)
    }

    /// Resolve, fetch if needed, and load the model.
    pub fn load(&self) -> Result<Box<dyn Scorer>> {
        load_scorer(&self.model, &self.load_options()?)
    }
}

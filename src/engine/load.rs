//! From a `--model` argument to a ready [`Scorer`]: resolve the files, build the model
//! for its architecture on the chosen device, and wrap it with its tokeniser, chat
//! template and conventions.

use anyhow::{bail, Context, Result};

use super::decoder::{DecoderScorer, DecoderSettings};
use super::memory::{plan_decoder, MemoryOptions};
use super::scorer::{ModelInfo, Scorer};
use super::t5_scorer::T5Scorer;
use crate::arch::t5::{T5Config, T5Model, WeightFiles};
use crate::arch::{llama, Precision, WeightPolicy};
use crate::engine::EngineError;
use crate::progress::Progress;
use crate::runtime::{
    load_tokenizer, resolve_model, select_device, Architecture, ResolveOptions, ResolvedModel,
    TextTokenizer, WeightFormat,
};

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub resolve: ResolveOptions,
    /// `auto`, `cpu`, `cuda[:N]` or `metal`.
    pub device: String,
    pub weights: WeightPolicy,
    /// Arithmetic of the decoder blocks' matrix products.
    pub precision: Precision,
    pub decoder: DecoderSettings,
    /// Memory planning (`engine::memory`): precision fallback, available bytes.
    pub memory: MemoryOptions,
    /// Where notes about the load go (a changed plan, a template that differs).
    pub progress: Progress,
}

impl LoadOptions {
    /// Resolution settings from the environment, automatic device and weights.
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            resolve: ResolveOptions::from_env()?,
            device: "auto".to_string(),
            weights: WeightPolicy::Auto,
            precision: Precision::F32,
            decoder: DecoderSettings::default(),
            memory: MemoryOptions::default(),
            progress: Progress::none(),
        })
    }
}

/// Resolve and load `spec` (card name, GGUF file, or checkpoint directory).
pub fn load_scorer(spec: &str, options: &LoadOptions) -> Result<Box<dyn Scorer>> {
    let resolved = resolve_model(spec, &options.resolve)?;
    load_resolved(&resolved, options)
        .with_context(|| format!("cannot load model '{}'", resolved.name))
}

/// Load a resolved model; its resolution notes (an unpinned card, a chat template that
/// differs from the checkpoint's own) go to the progress sink first.
pub fn load_resolved(resolved: &ResolvedModel, options: &LoadOptions) -> Result<Box<dyn Scorer>> {
    for note in &resolved.notes {
        options.progress.note(&format!("note: {note}"));
    }
    match resolved.architecture {
        Architecture::T5 => Ok(Box::new(load_t5(resolved, options)?)),
        Architecture::Bert => anyhow::bail!(
            "model '{}' is a BERT encoder for embedding metrics (bertscore), not a scorer",
            resolved.name
        ),
        decoder => {
            debug_assert_eq!(decoder.kind(), crate::runtime::ModelKind::DecoderOnly);
            Ok(Box::new(load_decoder(resolved, options)?))
        }
    }
}

/// Load an encoder-decoder T5 checkpoint as a [`T5Scorer`].
pub fn load_t5(resolved: &ResolvedModel, options: &LoadOptions) -> Result<T5Scorer> {
    if resolved.format != WeightFormat::Safetensors {
        return Err(
            EngineError::Files("T5 models load from safetensors checkpoints only".into()).into(),
        );
    }
    if options.precision != Precision::F32 {
        bail!(
            "--precision {} applies to decoder-only models; T5 runs in f32",
            options.precision.as_str()
        );
    }
    let device = select_device(&options.device)?;
    let config_path = resolved
        .config
        .as_ref()
        .context("a T5 checkpoint needs its config.json")?;
    let config = T5Config::from_file(config_path)?;
    let files = WeightFiles {
        index: None,
        files: resolved.weights.clone(),
    };
    let model = T5Model::from_files(&config, &files, &device)?;
    let tokenizer = load_tokenizer(resolved)?;
    let mut info = model_info(resolved);
    info.context_window = info.context_window.max(config.context_window);
    Ok(T5Scorer::new(model, tokenizer, info)?
        .with_max_batch_tokens(options.decoder.budget.max_batch_tokens))
}

/// Load a llama-family model as a [`DecoderScorer`], in the weight layout and precision
/// that fit in memory (`engine::memory`).
pub fn load_decoder(resolved: &ResolvedModel, options: &LoadOptions) -> Result<DecoderScorer> {
    let device = select_device(&options.device)?;
    let plan = plan_decoder(resolved, options, device.is_cpu())?;
    if let Some(note) = &plan.note {
        options.progress.note(&format!("note: {note}"));
    }
    // The decoder holds what the plan counted: the budget it planned (the default lowered
    // where that did not fit).
    let mut settings = options.decoder;
    settings.budget.max_arena_bytes = usize::try_from(plan.max_arena_bytes)
        .context("the key/value budget does not fit in this machine's address space")?;
    // On a GPU, bf16 means bf16 activations through candle's products and our level
    // kernels (the CPU's bf16 kernels have no GPU twin): loaded in f32, then converted.
    let gpu_bf16 = !device.is_cpu() && plan.precision == Precision::Bf16;
    let load_precision = if gpu_bf16 {
        Precision::F32
    } else {
        plan.precision
    };
    let model = match resolved.format {
        WeightFormat::Gguf => {
            let [path] = resolved.weights.as_slice() else {
                bail!(
                    "a GGUF model must be one file, got {}",
                    resolved.weights.len()
                );
            };
            llama::from_gguf(path, plan.weights, &device)?.with_precision(load_precision)?
        }
        WeightFormat::Safetensors => {
            let config = resolved
                .config
                .as_ref()
                .context("a safetensors checkpoint needs its config.json")?;
            // Converted block by block: a bf16 model never exists in f32 as a whole.
            llama::from_safetensors_at(config, &resolved.weights, &device, load_precision)?
        }
        WeightFormat::TokenizerOnly => {
            return Err(
                EngineError::Files(format!("'{}' holds a tokenizer only", resolved.name)).into(),
            )
        }
    };
    let model = if gpu_bf16 {
        options.progress.note(
            "note: bf16 on a GPU: bf16 weights and activations, f32 accumulation and output \
             head, label scoring by the level plan",
        );
        model.with_activations(candle_core::DType::BF16)?
    } else {
        model
    };
    let tokenizer = load_tokenizer(resolved)?;
    check_tokenizer_against_model(resolved, &tokenizer, model.config().vocab_size)?;
    let mut info = model_info(resolved);
    // The weights' hash, then what the configuration makes of them (a config.json beside
    // safetensors is not hashed with them), then the precision.
    let configured = format!("{}+{}", info.fingerprint, model.config().identity());
    info.fingerprint = plan.precision.fingerprint(&configured);
    info.context_window = info.context_window.min(model.config().context_length);
    DecoderScorer::new(
        model,
        tokenizer,
        resolved.chat_template.clone(),
        info,
        settings,
    )
}

/// Catch a tokenizer that does not belong to the weights before the first prompt: ids
/// past the model's vocabulary, and a beginning-of-sequence token other than the one
/// `config.json` names (it would start every prompt).
fn check_tokenizer_against_model(
    resolved: &ResolvedModel,
    tokenizer: &TextTokenizer,
    model_vocab: usize,
) -> Result<()> {
    let files = |what: String| -> anyhow::Error { EngineError::Files(what).into() };
    if tokenizer.vocab_size() > model_vocab {
        return Err(files(format!(
            "the tokenizer has {} tokens but the model's vocab_size (embedding rows) is {model_vocab}: tokenizer and weights do not belong together",
            tokenizer.vocab_size()
        )));
    }
    let Some(config) = &resolved.config else {
        return Ok(());
    };
    let text = std::fs::read_to_string(config)
        .with_context(|| format!("cannot read {}", config.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", config.display()))?;
    let special = tokenizer.special();
    if let (true, Some(bos), Some(declared)) = (
        special.add_bos,
        special.bos,
        json.get("bos_token_id").and_then(serde_json::Value::as_u64),
    ) {
        if u64::from(bos) != declared {
            return Err(files(format!(
                "{}: field 'bos_token_id' is {declared} but the tokenizer starts prompts with token {bos}: tokenizer and config disagree",
                config.display()
            )));
        }
    }
    Ok(())
}

/// What methods may know about a resolved model (a scorer's `info()`), before the
/// loaded weights narrow its context window.
pub fn model_info(resolved: &ResolvedModel) -> ModelInfo {
    ModelInfo {
        name: resolved.name.clone(),
        architecture: resolved.architecture.as_str().to_string(),
        kind: resolved.kind(),
        fingerprint: resolved.fingerprint.clone(),
        context_window: resolved.context_window,
        conventions: resolved.conventions.clone(),
    }
}

//! The T5 hyper-parameters as a checkpoint's `config.json` states them, checked once so
//! that the model code can trust them.
//!
//! Covers T5 v1.0 (relu feed-forward, output head tied to the embedding), T5 v1.1 /
//! FlanT5 / mT5 (gated-gelu, untied head) and the other `[gated-]act` combinations
//! transformers accepts. UMT5 (a position-bias table per layer) is refused.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde::Deserialize;

/// The activation inside the feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Relu,
    /// The tanh approximation (transformers' `gelu_new`, used by `gated-gelu`).
    GeluTanh,
    /// The exact erf form (transformers' `gelu`).
    GeluErf,
    Silu,
}

/// Feed-forward kind: `act` (`wi`, `wo`) or `gated-act` (`wi_0`, `wi_1`, `wo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedForwardKind {
    pub gated: bool,
    pub activation: Activation,
}

impl FeedForwardKind {
    /// Parse transformers' `feed_forward_proj` ("relu", "gated-gelu", "gated-silu", ...).
    pub fn parse(text: &str) -> Result<Self> {
        let (gated, name) = match text.split_once('-') {
            Some(("gated", name)) => (true, name),
            Some(_) => bail!("feed_forward_proj {text:?}: expected \"ACT\" or \"gated-ACT\""),
            None => (false, text),
        };
        let activation = match (gated, name) {
            // transformers maps "gated-gelu" to the tanh approximation (`gelu_new`).
            (true, "gelu") | (_, "gelu_new") | (_, "gelu_pytorch_tanh") => Activation::GeluTanh,
            (false, "gelu") => Activation::GeluErf,
            (_, "relu") => Activation::Relu,
            (_, "silu") | (_, "swish") => Activation::Silu,
            _ => bail!("feed_forward_proj {text:?}: unsupported activation {name:?}"),
        };
        Ok(Self { gated, activation })
    }
}

fn default_max_distance() -> usize {
    128
}
fn default_num_buckets() -> usize {
    32
}
fn default_epsilon() -> f64 {
    1e-6
}
fn default_feed_forward() -> String {
    "relu".to_string()
}
fn default_true() -> bool {
    true
}
fn default_eos() -> u32 {
    1
}

/// The fields of `config.json` the model reads (others are ignored).
#[derive(Debug, Clone, Deserialize)]
struct RawConfig {
    #[serde(default)]
    model_type: Option<String>,
    vocab_size: usize,
    d_model: usize,
    d_kv: usize,
    d_ff: usize,
    num_layers: usize,
    #[serde(default)]
    num_decoder_layers: Option<usize>,
    num_heads: usize,
    #[serde(default = "default_num_buckets")]
    relative_attention_num_buckets: usize,
    #[serde(default = "default_max_distance")]
    relative_attention_max_distance: usize,
    #[serde(default = "default_epsilon")]
    layer_norm_epsilon: f64,
    #[serde(default = "default_feed_forward")]
    feed_forward_proj: String,
    #[serde(default = "default_true")]
    tie_word_embeddings: bool,
    /// Written by transformers 5 (which always ties the parameters and keeps the v1.1
    /// "no scaling" choice here); older configs leave it out.
    #[serde(default)]
    scale_decoder_outputs: Option<bool>,
    #[serde(default = "default_true")]
    is_encoder_decoder: bool,
    #[serde(default)]
    pad_token_id: Option<u32>,
    #[serde(default = "default_eos")]
    eos_token_id: u32,
    #[serde(default)]
    decoder_start_token_id: Option<u32>,
    #[serde(default)]
    n_positions: Option<usize>,
}

/// Checked T5 hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct T5Config {
    pub vocab_size: usize,
    pub d_model: usize,
    /// Width of one attention head (`num_heads * d_kv` need not equal `d_model`).
    pub d_kv: usize,
    pub d_ff: usize,
    pub num_encoder_layers: usize,
    pub num_decoder_layers: usize,
    pub num_heads: usize,
    pub relative_attention_num_buckets: usize,
    pub relative_attention_max_distance: usize,
    pub layer_norm_epsilon: f64,
    pub feed_forward: FeedForwardKind,
    /// The output head is the embedding matrix (T5 v1.0) rather than `lm_head.weight`.
    pub tie_word_embeddings: bool,
    /// Multiply the decoder output by `d_model**-0.5` before the head (T5 v1.0).
    pub scale_decoder_outputs: bool,
    pub pad_token_id: u32,
    pub eos_token_id: u32,
    pub decoder_start_token_id: u32,
    /// Training length (`n_positions`), 512 when absent: a guide, not a hard limit.
    pub context_window: usize,
}

impl T5Config {
    /// Read and check `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read T5 config {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("invalid T5 config {}", path.display()))
    }

    /// Parse and check the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<Self> {
        let raw: RawConfig = serde_json::from_str(text).context("cannot parse config.json")?;
        Self::from_raw(raw)
    }

    fn from_raw(raw: RawConfig) -> Result<Self> {
        if let Some(kind) = raw.model_type.as_deref() {
            ensure!(
                matches!(kind, "t5" | "mt5"),
                "model_type {kind:?} is not supported (expected \"t5\" or \"mt5\")"
            );
        }
        ensure!(
            raw.is_encoder_decoder,
            "is_encoder_decoder is false: not a T5 encoder-decoder"
        );
        for (name, value) in [
            ("vocab_size", raw.vocab_size),
            ("d_model", raw.d_model),
            ("d_kv", raw.d_kv),
            ("d_ff", raw.d_ff),
            ("num_layers", raw.num_layers),
            ("num_heads", raw.num_heads),
            (
                "relative_attention_max_distance",
                raw.relative_attention_max_distance,
            ),
        ] {
            ensure!(value > 0, "{name} must be positive");
        }
        // Bidirectional buckets split the table in two halves, each with an exact range.
        ensure!(
            raw.relative_attention_num_buckets >= 4,
            "relative_attention_num_buckets must be at least 4, got {}",
            raw.relative_attention_num_buckets
        );
        ensure!(
            raw.layer_norm_epsilon > 0.0,
            "layer_norm_epsilon must be positive"
        );
        let feed_forward =
            FeedForwardKind::parse(&raw.feed_forward_proj).context("field feed_forward_proj")?;
        let pad = raw.pad_token_id.unwrap_or(0);
        let num_decoder_layers = raw.num_decoder_layers.unwrap_or(raw.num_layers);
        ensure!(
            num_decoder_layers > 0,
            "num_decoder_layers must be positive"
        );
        let config = Self {
            vocab_size: raw.vocab_size,
            d_model: raw.d_model,
            d_kv: raw.d_kv,
            d_ff: raw.d_ff,
            num_encoder_layers: raw.num_layers,
            num_decoder_layers,
            num_heads: raw.num_heads,
            relative_attention_num_buckets: raw.relative_attention_num_buckets,
            relative_attention_max_distance: raw.relative_attention_max_distance,
            layer_norm_epsilon: raw.layer_norm_epsilon,
            feed_forward,
            tie_word_embeddings: raw.tie_word_embeddings,
            scale_decoder_outputs: raw.scale_decoder_outputs.unwrap_or(raw.tie_word_embeddings),
            pad_token_id: pad,
            eos_token_id: raw.eos_token_id,
            decoder_start_token_id: raw.decoder_start_token_id.unwrap_or(pad),
            context_window: raw.n_positions.unwrap_or(512),
        };
        for (name, id) in [
            ("pad_token_id", config.pad_token_id),
            ("eos_token_id", config.eos_token_id),
            ("decoder_start_token_id", config.decoder_start_token_id),
        ] {
            ensure!(
                (id as usize) < config.vocab_size,
                "{name} {id} is outside the vocabulary ({} rows)",
                config.vocab_size
            );
        }
        Ok(config)
    }

    /// `num_heads * d_kv`: the width of the attention projections.
    pub fn inner_dim(&self) -> usize {
        self.num_heads * self.d_kv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAN_T5_BASE: &str = r#"{
        "architectures": ["T5ForConditionalGeneration"], "d_ff": 2048, "d_kv": 64,
        "d_model": 768, "decoder_start_token_id": 0, "dense_act_fn": "gelu_new",
        "dropout_rate": 0.1, "eos_token_id": 1, "feed_forward_proj": "gated-gelu",
        "initializer_factor": 1.0, "is_encoder_decoder": true, "is_gated_act": true,
        "layer_norm_epsilon": 1e-06, "model_type": "t5", "n_positions": 512,
        "num_decoder_layers": 12, "num_heads": 12, "num_layers": 12, "output_past": true,
        "pad_token_id": 0, "relative_attention_max_distance": 128,
        "relative_attention_num_buckets": 32, "tie_word_embeddings": false,
        "use_cache": true, "vocab_size": 32128 }"#;

    #[test]
    fn flan_t5_config_reads_as_gated_gelu_with_an_untied_unscaled_head() {
        let c = T5Config::from_json(FLAN_T5_BASE).unwrap();
        assert_eq!(
            c.feed_forward,
            FeedForwardKind {
                gated: true,
                activation: Activation::GeluTanh
            }
        );
        assert!(!c.tie_word_embeddings);
        assert!(!c.scale_decoder_outputs);
        assert_eq!((c.num_encoder_layers, c.num_decoder_layers), (12, 12));
        assert_eq!(c.inner_dim(), 768);
        assert_eq!(c.context_window, 512);
    }

    #[test]
    fn original_t5_defaults_to_relu_and_a_tied_scaled_head() {
        let c = T5Config::from_json(
            r#"{"vocab_size": 100, "d_model": 8, "d_kv": 2, "d_ff": 16,
                "num_layers": 1, "num_heads": 4}"#,
        )
        .unwrap();
        assert_eq!(c.feed_forward.activation, Activation::Relu);
        assert!(!c.feed_forward.gated);
        assert!(c.tie_word_embeddings && c.scale_decoder_outputs);
        assert_eq!(c.decoder_start_token_id, 0);
        assert_eq!(c.num_decoder_layers, 1);
    }

    #[test]
    fn transformers_5_scale_flag_overrides_the_tie_flag() {
        let text = FLAN_T5_BASE.replace(
            "\"tie_word_embeddings\": false",
            "\"tie_word_embeddings\": true, \"scale_decoder_outputs\": false",
        );
        let c = T5Config::from_json(&text).unwrap();
        assert!(c.tie_word_embeddings);
        assert!(!c.scale_decoder_outputs);
    }

    #[test]
    fn activations_follow_transformers_names() {
        let ungated_gelu = FeedForwardKind::parse("gelu").unwrap();
        assert_eq!(ungated_gelu.activation, Activation::GeluErf);
        assert_eq!(
            FeedForwardKind::parse("gated-silu").unwrap(),
            FeedForwardKind {
                gated: true,
                activation: Activation::Silu
            }
        );
        let err = FeedForwardKind::parse("double-gelu").unwrap_err();
        assert!(err.to_string().contains("gated-ACT"), "{err}");
        let err = FeedForwardKind::parse("gated-tanh").unwrap_err();
        assert!(err.to_string().contains("tanh"), "{err}");
    }

    #[test]
    fn unsupported_configs_are_refused_with_the_field_named() {
        let umt5 = FLAN_T5_BASE.replace("\"model_type\": \"t5\"", "\"model_type\": \"umt5\"");
        let err = T5Config::from_json(&umt5).unwrap_err();
        assert!(format!("{err:#}").contains("umt5"), "{err:#}");

        let bad_ff = FLAN_T5_BASE.replace("gated-gelu", "gated-mish");
        let err = T5Config::from_json(&bad_ff).unwrap_err();
        assert!(format!("{err:#}").contains("feed_forward_proj"), "{err:#}");

        let missing = FLAN_T5_BASE.replace("\"d_kv\": 64,", "");
        let err = T5Config::from_json(&missing).unwrap_err();
        assert!(format!("{err:#}").contains("d_kv"), "{err:#}");

        let bad_eos = FLAN_T5_BASE.replace("\"eos_token_id\": 1", "\"eos_token_id\": 40000");
        let err = T5Config::from_json(&bad_eos).unwrap_err();
        assert!(format!("{err:#}").contains("eos_token_id"), "{err:#}");
    }
}

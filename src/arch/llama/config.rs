//! Hyper-parameters of a llama-family decoder, read from GGUF metadata or a Hugging Face
//! `config.json`.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file;
use serde::Deserialize;

/// The members of the family we implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlamaVariant {
    /// Llama, Llama-2, SmolLM2, Mistral-style: no projection biases.
    Llama,
    /// Qwen2 / Qwen2.5: biases on the query, key and value projections.
    Qwen2,
}

impl LlamaVariant {
    /// The variant an architecture name denotes (`general.architecture` in GGUF,
    /// `model_type` in `config.json`).
    pub fn from_architecture(name: &str) -> Result<Self> {
        match name {
            "llama" | "mistral" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            other => bail!(
                "unknown architecture '{other}': the llama-family code supports llama, mistral and qwen2"
            ),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
        }
    }
}

/// Everything the forward pass needs to know about the shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub variant: LlamaVariant,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Rotate interleaved pairs `(2i, 2i+1)` (GGUF llama, whose q/k rows were permuted at
    /// conversion) rather than halves `(i, i + d/2)` (Hugging Face, GGUF qwen2).
    pub rope_interleaved: bool,
    /// Longest sequence (prompt + answer) the model was trained for.
    pub context_length: usize,
    /// The output head is the token embedding matrix.
    pub tie_embeddings: bool,
}

impl LlamaConfig {
    /// Check the shapes are consistent.
    pub fn validate(&self) -> Result<()> {
        if self.num_heads == 0 || self.num_kv_heads == 0 || self.head_dim == 0 {
            bail!("head counts and head size must be positive");
        }
        if self.num_heads % self.num_kv_heads != 0 {
            bail!(
                "{} attention heads cannot be grouped over {} key/value heads",
                self.num_heads,
                self.num_kv_heads
            );
        }
        if self.head_dim % 2 != 0 {
            bail!(
                "rotary embeddings need an even head size, got {}",
                self.head_dim
            );
        }
        Ok(())
    }

    /// Query heads that share one key/value head.
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }

    /// Read the configuration from GGUF metadata (keys prefixed by the architecture).
    pub fn from_gguf(content: &gguf_file::Content, vocab_size: usize) -> Result<Self> {
        let metadata = &content.metadata;
        let architecture = metadata
            .get("general.architecture")
            .ok_or_else(|| anyhow!("GGUF metadata has no general.architecture"))?
            .to_string()
            .map_err(|e| anyhow!("general.architecture is not a string: {e}"))?
            .clone();
        let variant = LlamaVariant::from_architecture(&architecture)?;
        let get_u32 = |key: &str| -> Result<Option<usize>> {
            let full = format!("{architecture}.{key}");
            metadata
                .get(&full)
                .map(|v| {
                    v.to_u32()
                        .map(|x| x as usize)
                        .map_err(|e| anyhow!("GGUF metadata {full} is not an integer: {e}"))
                })
                .transpose()
        };
        let get_f32 = |key: &str| -> Result<Option<f64>> {
            let full = format!("{architecture}.{key}");
            metadata
                .get(&full)
                .map(|v| {
                    v.to_f32()
                        .map(f64::from)
                        .map_err(|e| anyhow!("GGUF metadata {full} is not a number: {e}"))
                })
                .transpose()
        };
        let require = |key: &str| -> Result<usize> {
            get_u32(key)?.ok_or_else(|| anyhow!("GGUF metadata lacks {architecture}.{key}"))
        };
        let hidden_size = require("embedding_length")?;
        let num_heads = require("attention.head_count")?;
        let num_kv_heads = get_u32("attention.head_count_kv")?.unwrap_or(num_heads);
        let head_dim = match get_u32("rope.dimension_count")? {
            Some(d) => d,
            None => hidden_size / num_heads.max(1),
        };
        if head_dim * num_heads != hidden_size {
            bail!(
                "rope dimension {head_dim} x {num_heads} heads does not match the embedding size {hidden_size} (partial rotary embeddings are not supported)"
            );
        }
        let config = Self {
            variant,
            vocab_size,
            hidden_size,
            intermediate_size: require("feed_forward_length")?,
            num_layers: require("block_count")?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: get_f32("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
            rope_theta: get_f32("rope.freq_base")?.unwrap_or(10_000.0),
            rope_interleaved: variant == LlamaVariant::Llama,
            context_length: require("context_length")?,
            tie_embeddings: !content.tensor_infos.contains_key("output.weight"),
        };
        config.validate()?;
        Ok(config)
    }

    /// Read a Hugging Face `config.json`.
    pub fn from_json_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("invalid model config {}", path.display()))
    }

    /// Parse the text of a Hugging Face `config.json`.
    pub fn from_json(text: &str) -> Result<Self> {
        let raw: HfConfig = serde_json::from_str(text)?;
        let variant = LlamaVariant::from_architecture(&raw.model_type)?;
        if let Some(scaling) = raw.rope_scaling.as_ref().filter(|s| !s.is_null()) {
            bail!("rope_scaling {scaling} is not supported");
        }
        // transformers 5 writes `rope_parameters: {rope_theta, rope_type}` instead of a
        // top-level `rope_theta`.
        let mut rope_theta = raw.rope_theta;
        if let Some(parameters) = raw.rope_parameters.as_ref().filter(|p| !p.is_null()) {
            match parameters.get("rope_type").and_then(|t| t.as_str()) {
                None | Some("default") => {}
                Some(other) => bail!("rope_type '{other}' is not supported"),
            }
            if let Some(theta) = parameters.get("rope_theta") {
                rope_theta = Some(
                    theta
                        .as_f64()
                        .ok_or_else(|| anyhow!("rope_parameters.rope_theta is not a number"))?,
                );
            }
        }
        let num_kv_heads = raw.num_key_value_heads.unwrap_or(raw.num_attention_heads);
        let head_dim = raw
            .head_dim
            .unwrap_or(raw.hidden_size / raw.num_attention_heads.max(1));
        let config = Self {
            variant,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_layers: raw.num_hidden_layers,
            num_heads: raw.num_attention_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta: rope_theta.unwrap_or(10_000.0),
            rope_interleaved: false,
            context_length: raw.max_position_embeddings,
            tie_embeddings: raw.tie_word_embeddings.unwrap_or(false),
        };
        config.validate()?;
        Ok(config)
    }
}

#[derive(Debug, Deserialize)]
struct HfConfig {
    model_type: String,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    max_position_embeddings: usize,
    tie_word_embeddings: Option<bool>,
    rope_scaling: Option<serde_json::Value>,
    rope_parameters: Option<serde_json::Value>,
    #[serde(flatten)]
    _rest: HashMap<String, serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOL_CONFIG: &str = r#"{
        "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
        "max_position_embeddings": 8192, "tie_word_embeddings": true, "rope_scaling": null
    }"#;

    #[test]
    fn hugging_face_config_is_read() -> Result<()> {
        let c = LlamaConfig::from_json(SMOL_CONFIG)?;
        assert_eq!((c.head_dim, c.group_size(), c.num_layers), (64, 3, 30));
        assert!(c.tie_embeddings && !c.rope_interleaved);
        assert_eq!(c.variant, LlamaVariant::Llama);
        Ok(())
    }

    #[test]
    fn unknown_architecture_and_rope_scaling_are_refused() {
        let gpt2 = SMOL_CONFIG.replace("\"llama\"", "\"gpt2\"");
        let err = LlamaConfig::from_json(&gpt2).unwrap_err().to_string();
        assert!(err.contains("unknown architecture 'gpt2'"), "{err}");
        let scaled = SMOL_CONFIG.replace(
            "\"rope_scaling\": null",
            "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}",
        );
        assert!(LlamaConfig::from_json(&scaled).is_err());
    }

    #[test]
    fn transformers_5_rope_parameters_are_read() -> Result<()> {
        let v5 = SMOL_CONFIG.replace(
            "\"rope_theta\": 100000.0",
            "\"rope_parameters\": {\"rope_theta\": 50000.0, \"rope_type\": \"default\"}",
        );
        assert_eq!(LlamaConfig::from_json(&v5)?.rope_theta, 50000.0);
        let scaled = v5.replace("\"default\"", "\"yarn\"");
        assert!(LlamaConfig::from_json(&scaled).is_err());
        Ok(())
    }

    #[test]
    fn heads_must_group_evenly() {
        let bad = SMOL_CONFIG.replace("\"num_key_value_heads\": 3", "\"num_key_value_heads\": 4");
        assert!(LlamaConfig::from_json(&bad).is_err());
    }
}

//! Hyper-parameters of a llama-family decoder (llama, mistral, qwen2, qwen3, gemma2,
//! gemma3, phi3), read from a Hugging Face `config.json` here or from GGUF metadata
//! (`gguf_config.rs`). The families share one forward pass; what sets them apart is a
//! handful of switches in [`LlamaConfig`], each read from the field that family's
//! checkpoints use.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use super::rope::RopeScaling;

/// The members of the family we implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlamaVariant {
    /// Llama 1-3, SmolLM2: no projection biases.
    Llama,
    /// Mistral: llama with an optional sliding window.
    Mistral,
    /// Qwen2 / Qwen2.5: biases on the query, key and value projections.
    Qwen2,
    /// Qwen3: per-head RMSNorm of queries and keys, a head width of its own.
    Qwen3,
    /// Gemma 2: scaled embeddings, `1 + w` norms around both blocks, GeGLU, soft-capping,
    /// sliding windows on alternate layers.
    Gemma2,
    /// Gemma 3 (text): Gemma 2 without soft-capping, with query/key norms and local
    /// layers on a rope base of their own.
    Gemma3,
    /// Phi-3 / 3.5 / 4-mini: fused query/key/value and gate/up projections.
    Phi3,
}

/// Every variant with the names it answers to: `model_type` in `config.json` first, then
/// GGUF's `general.architecture` where llama.cpp calls it otherwise.
const NAMES: &[(LlamaVariant, &[&str])] = &[
    (LlamaVariant::Llama, &["llama"]),
    (LlamaVariant::Mistral, &["mistral"]),
    (LlamaVariant::Qwen2, &["qwen2"]),
    (LlamaVariant::Qwen3, &["qwen3"]),
    (LlamaVariant::Gemma2, &["gemma2"]),
    (LlamaVariant::Gemma3, &["gemma3_text", "gemma3"]),
    (LlamaVariant::Phi3, &["phi3"]),
];

impl LlamaVariant {
    /// The variant an architecture name denotes (`general.architecture` in GGUF,
    /// `model_type` in `config.json`).
    pub fn from_architecture(name: &str) -> Result<Self> {
        NAMES
            .iter()
            .find(|(_, names)| names.contains(&name))
            .map(|(variant, _)| *variant)
            .ok_or_else(|| {
                anyhow!(
                    "unknown architecture '{name}': the decoder code supports {}",
                    Self::supported()
                )
            })
    }

    /// The supported names, for messages.
    pub fn supported() -> String {
        NAMES
            .iter()
            .flat_map(|(_, names)| names.iter().copied())
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(variant, _)| *variant == self)
            .map_or("llama", |(_, names)| names[0])
    }

    /// Gemma's conventions: embeddings times sqrt(hidden), `1 + w` norms, norms after
    /// both blocks as well as before, GeGLU.
    pub fn is_gemma(self) -> bool {
        matches!(self, Self::Gemma2 | Self::Gemma3)
    }

    /// Queries and keys are RMS-normalised per head before rotation.
    pub fn has_qk_norm(self) -> bool {
        matches!(self, Self::Qwen3 | Self::Gemma3)
    }
}

/// The feed-forward block's gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// SwiGLU: `silu(gate) * up`.
    Silu,
    /// GeGLU with the tanh approximation of GELU (`gelu_pytorch_tanh`).
    GeluTanh,
}

/// How one layer attends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayerAttention {
    /// A query at position `p` sees keys at positions `> p - window` only.
    pub window: Option<usize>,
    /// Rotate with the local rope tables (Gemma 3's sliding layers).
    pub local_rope: bool,
}

/// Everything the forward pass needs to know about the shapes and conventions.
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
    /// Dimensions of each query/key head that rotary embeddings rotate: the first ones,
    /// the rest pass through (`head_dim` but for partial rotary embeddings, Phi-4-mini's
    /// `partial_rotary_factor`).
    pub rotary_dim: usize,
    pub rms_norm_eps: f64,
    /// Rope base of the (global) layers.
    pub rope_theta: f64,
    /// How the global layers' frequencies are scaled.
    pub rope_scaling: RopeScaling,
    /// Rope base of local layers (Gemma 3's `rope_local_base_freq`), unscaled.
    pub rope_local_theta: Option<f64>,
    /// Rotate interleaved pairs `(2i, 2i+1)` (GGUF llama, whose q/k rows were permuted at
    /// conversion) rather than halves `(i, i + d/2)` (Hugging Face, GGUF qwen2).
    pub rope_interleaved: bool,
    /// Longest sequence (prompt + answer) the model is run on: the trained window, or
    /// less where a rope rule is exact only inside less (see `rope.rs`).
    pub context_length: usize,
    /// The output head is the token embedding matrix.
    pub tie_embeddings: bool,
    /// Biases on the query, key and value projections.
    pub attention_bias: bool,
    pub activation: Activation,
    /// Attention scores are multiplied by this (`head_dim^-1/2`, or Gemma's
    /// `query_pre_attn_scalar^-1/2`).
    pub attention_scale: f64,
    /// Scores pass through `c * tanh(s / c)` before the softmax (Gemma 2).
    pub attention_softcap: Option<f64>,
    /// Output logits pass through `c * tanh(l / c)` (Gemma 2).
    pub final_softcap: Option<f64>,
    /// Each layer's window and rope tables.
    pub layers: Vec<LayerAttention>,
}

impl LlamaConfig {
    /// A configuration with the llama conventions (no windows, SwiGLU, no soft-capping),
    /// for the given shapes; readers change what their family does otherwise.
    #[allow(clippy::too_many_arguments)]
    pub fn llama_like(
        variant: LlamaVariant,
        vocab_size: usize,
        hidden_size: usize,
        intermediate_size: usize,
        num_layers: usize,
        num_heads: usize,
        num_kv_heads: usize,
        head_dim: usize,
    ) -> Self {
        Self {
            variant,
            vocab_size,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rotary_dim: head_dim,
            rms_norm_eps: 1e-5,
            rope_theta: 10_000.0,
            rope_scaling: RopeScaling::None,
            rope_local_theta: None,
            rope_interleaved: false,
            context_length: 2048,
            tie_embeddings: false,
            attention_bias: variant == LlamaVariant::Qwen2,
            activation: if variant.is_gemma() {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            attention_scale: 1.0 / (head_dim as f64).sqrt(),
            attention_softcap: None,
            final_softcap: None,
            layers: vec![
                LayerAttention {
                    window: None,
                    local_rope: false
                };
                num_layers
            ],
        }
    }

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
        check_rotary_dim(self.rotary_dim, self.head_dim)?;
        if self.layers.len() != self.num_layers {
            bail!(
                "{} layer types for {} layers",
                self.layers.len(),
                self.num_layers
            );
        }
        if self.layers.iter().any(|l| l.window == Some(0)) {
            bail!("a sliding window must hold at least one position");
        }
        if self.layers.iter().any(|l| l.local_rope) && self.rope_local_theta.is_none() {
            bail!("local layers need a local rope base");
        }
        self.rope_scaling
            .inverse_frequencies(self.rope_theta, self.rotary_dim)?;
        Ok(())
    }

    /// Query heads that share one key/value head.
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }

    /// A short identity of everything that changes the model's arithmetic (the variant
    /// and a hash of this configuration), for result-cache keys: the weights' hash alone
    /// does not cover a `config.json` edited beside them.
    pub fn identity(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut text = format!("{self:?}");
        if self.rotary_dim == self.head_dim {
            // Full rotation hashes as before the field existed, keeping cached results.
            text = text.replacen(&format!(", rotary_dim: {}", self.rotary_dim), "", 1);
        }
        let digest = Sha256::digest(text.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-{hex}", self.variant.name())
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
        let variant =
            LlamaVariant::from_architecture(&raw.model_type).context("field 'model_type'")?;
        let num_kv_heads = raw.num_key_value_heads.unwrap_or(raw.num_attention_heads);
        let head_dim = raw
            .head_dim
            .unwrap_or(raw.hidden_size / raw.num_attention_heads.max(1));
        if raw.use_bidirectional_attention == Some(true) {
            bail!(
                "field 'use_bidirectional_attention' is true: only causal decoders are supported"
            );
        }
        let mut c = Self::llama_like(
            variant,
            raw.vocab_size,
            raw.hidden_size,
            raw.intermediate_size,
            raw.num_hidden_layers,
            raw.num_attention_heads,
            num_kv_heads,
            head_dim,
        );
        c.rms_norm_eps = raw.rms_norm_eps;
        c.tie_embeddings = raw.tie_word_embeddings.unwrap_or(variant.is_gemma());
        if let Some(bias) = raw.attention_bias {
            c.attention_bias = bias;
        }
        if let Some(act) = raw
            .hidden_activation
            .as_deref()
            .or(raw.hidden_act.as_deref())
        {
            c.activation = match act {
                "silu" | "swish" => Activation::Silu,
                "gelu_pytorch_tanh" | "gelu_tanh" => Activation::GeluTanh,
                other => bail!(
                    "field 'hidden_act' is '{other}': supported are silu and gelu_pytorch_tanh"
                ),
            };
        }

        // Rope: transformers 4 writes `rope_theta` and `rope_scaling`, transformers 5
        // `rope_parameters` (Gemma 3: one per layer type).
        let (mut global, mut local) = (raw.rope_scaling.clone(), None::<Value>);
        let mut rope_theta = raw.rope_theta;
        let mut local_theta = raw.rope_local_base_freq;
        if let Some(parameters) = raw.rope_parameters.as_ref().filter(|p| !p.is_null()) {
            let (full, sliding) = match parameters.get("full_attention") {
                Some(full) => (full.clone(), parameters.get("sliding_attention").cloned()),
                None => (parameters.clone(), None),
            };
            if let Some(theta) = full.get("rope_theta") {
                rope_theta = Some(theta.as_f64().ok_or_else(|| {
                    anyhow!("field 'rope_parameters.rope_theta' is not a number")
                })?);
            }
            if let Some(sliding) = &sliding {
                if let Some(theta) = sliding.get("rope_theta").and_then(Value::as_f64) {
                    local_theta = Some(theta);
                }
            }
            global = Some(full);
            local = sliding;
        }
        if variant == LlamaVariant::Phi3 {
            // transformers reads Phi-3's old `su` and `yarn` as longrope.
            if let Some(Value::Object(map)) = global.as_mut() {
                for key in ["rope_type", "type"] {
                    if matches!(map.get(key).and_then(Value::as_str), Some("su" | "yarn")) {
                        map.insert(key.to_string(), Value::from("longrope"));
                    }
                }
            }
        }
        c.rope_theta = rope_theta.unwrap_or(10_000.0);
        // Partial rotary embeddings: transformers 5 keeps the factor in `rope_parameters`
        // (which wins when both have one), transformers 4 at the top level.
        let factor_in = |v: Option<&Value>| -> Result<Option<f64>> {
            match v.and_then(|v| v.get("partial_rotary_factor")) {
                None | Some(Value::Null) => Ok(None),
                Some(f) => f
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| anyhow!("field 'partial_rotary_factor' is not a number: {f}")),
            }
        };
        let factor = factor_in(global.as_ref())?
            .or(raw.partial_rotary_factor)
            .unwrap_or(1.0);
        c.rotary_dim = rotary_dim_of(head_dim, factor)
            .with_context(|| format!("field 'partial_rotary_factor' is {factor}"))?;
        if let Some(other) = factor_in(local.as_ref())?.filter(|&f| f != factor) {
            bail!("field 'rope_parameters.sliding_attention.partial_rotary_factor' is {other}, the global layers' {factor}: one rotated width for all layers is supported");
        }
        let (scaling, window) = RopeScaling::from_hf(
            global.as_ref(),
            raw.max_position_embeddings,
            raw.original_max_position_embeddings,
            c.rotary_dim,
        )
        .context("field 'rope_scaling'")?;
        c.rope_scaling = scaling;
        c.context_length = window;
        if let Some(local) = &local {
            let (scaling, _) =
                RopeScaling::from_hf(Some(local), raw.max_position_embeddings, None, c.rotary_dim)
                    .context("field 'rope_parameters.sliding_attention'")?;
            if scaling != RopeScaling::None {
                bail!("field 'rope_parameters.sliding_attention': local layers with scaled rope are not supported");
            }
        }

        // Windows: which layers slide, and how far.
        let window = match variant {
            LlamaVariant::Qwen2 | LlamaVariant::Qwen3 => raw
                .sliding_window
                .filter(|_| raw.use_sliding_window == Some(true)),
            LlamaVariant::Llama => None,
            _ => raw.sliding_window,
        };
        let sliding: Vec<bool> = match (&raw.layer_types, variant) {
            (Some(types), _) => {
                if types.len() != raw.num_hidden_layers {
                    bail!(
                        "field 'layer_types' has {} entries for {} layers",
                        types.len(),
                        raw.num_hidden_layers
                    );
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        "sliding_attention" => Ok(true),
                        "full_attention" => Ok(false),
                        other => bail!(
                            "field 'layer_types' holds '{other}': supported are full_attention and sliding_attention"
                        ),
                    })
                    .collect::<Result<_>>()?
            }
            (None, LlamaVariant::Gemma2) => {
                (0..raw.num_hidden_layers).map(|i| i % 2 == 0).collect()
            }
            (None, LlamaVariant::Gemma3) => {
                let pattern = raw.sliding_window_pattern.unwrap_or(6).max(1);
                (0..raw.num_hidden_layers)
                    .map(|i| (i + 1) % pattern != 0)
                    .collect()
            }
            (None, LlamaVariant::Qwen2 | LlamaVariant::Qwen3) => {
                // transformers: layers from `max_window_layers` on slide.
                let from = raw.max_window_layers.unwrap_or(raw.num_hidden_layers);
                (0..raw.num_hidden_layers).map(|i| i >= from).collect()
            }
            (None, _) => vec![true; raw.num_hidden_layers],
        };
        for (layer, slides) in c.layers.iter_mut().zip(sliding) {
            layer.window = window.filter(|_| slides);
            layer.local_rope = slides && variant == LlamaVariant::Gemma3;
        }
        if variant == LlamaVariant::Gemma3 {
            c.rope_local_theta = Some(local_theta.unwrap_or(10_000.0));
        }
        if variant.is_gemma() {
            let scalar = raw.query_pre_attn_scalar.unwrap_or(head_dim as f64);
            c.attention_scale = 1.0 / scalar.sqrt();
        }
        if variant == LlamaVariant::Gemma2 {
            c.attention_softcap = raw.attn_logit_softcapping;
            c.final_softcap = raw.final_logit_softcapping;
        } else if raw.attn_logit_softcapping.is_some() || raw.final_logit_softcapping.is_some() {
            // Gemma 3 configs carry the fields as null; a value would be a model we do
            // not know.
            bail!(
                "fields 'attn_logit_softcapping' / 'final_logit_softcapping' are set, which {} models do not use",
                variant.name()
            );
        }
        c.validate()?;
        Ok(c)
    }
}

/// The rotated dimensions of a `head_dim`-wide head under `partial_rotary_factor`
/// `factor`: `int(head_dim * factor)` as transformers computes them, checked.
pub fn rotary_dim_of(head_dim: usize, factor: f64) -> Result<usize> {
    let dims = head_dim as f64 * factor;
    if !dims.is_finite() || dims < 0.0 {
        bail!("{head_dim} * {factor} is not a number of dimensions");
    }
    let rotary_dim = dims.trunc() as usize;
    check_rotary_dim(rotary_dim, head_dim)
        .with_context(|| format!("int({head_dim} * {factor}) = {rotary_dim}"))?;
    Ok(rotary_dim)
}

/// Rotary embeddings rotate pairs of dimensions within a head: an even, positive number
/// of them, at most the head's width.
pub fn check_rotary_dim(rotary_dim: usize, head_dim: usize) -> Result<()> {
    if rotary_dim == 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim {
        bail!(
            "rotary embeddings over {rotary_dim} dimensions of {head_dim}-wide heads: they need an even number between 2 and the head size"
        );
    }
    Ok(())
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
    original_max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    rope_local_base_freq: Option<f64>,
    partial_rotary_factor: Option<f64>,
    use_bidirectional_attention: Option<bool>,
    attention_bias: Option<bool>,
    hidden_act: Option<String>,
    hidden_activation: Option<String>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    max_window_layers: Option<usize>,
    sliding_window_pattern: Option<usize>,
    layer_types: Option<Vec<String>>,
    query_pre_attn_scalar: Option<f64>,
    attn_logit_softcapping: Option<f64>,
    final_logit_softcapping: Option<f64>,
    #[serde(flatten)]
    _rest: HashMap<String, Value>,
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
        assert!(c.layers.iter().all(|l| l.window.is_none()));
        Ok(())
    }

    #[test]
    fn unknown_architecture_and_rope_type_are_refused_by_name() {
        let gpt2 = SMOL_CONFIG.replace("\"llama\"", "\"gpt2\"");
        let err = format!("{:#}", LlamaConfig::from_json(&gpt2).unwrap_err());
        assert!(
            err.contains("unknown architecture 'gpt2'")
                && err.contains("model_type")
                && err.contains("gemma3_text"),
            "{err}"
        );
        let scaled = SMOL_CONFIG.replace(
            "\"rope_scaling\": null",
            "\"rope_scaling\": {\"type\": \"mrope\", \"factor\": 2.0}",
        );
        let err = format!("{:#}", LlamaConfig::from_json(&scaled).unwrap_err());
        assert!(
            err.contains("rope_scaling") && err.contains("'mrope'") && err.contains("llama3"),
            "{err}"
        );
    }

    #[test]
    fn transformers_5_rope_parameters_are_read() -> Result<()> {
        let v5 = SMOL_CONFIG.replace(
            "\"rope_theta\": 100000.0",
            "\"rope_parameters\": {\"rope_theta\": 50000.0, \"rope_type\": \"default\"}",
        );
        assert_eq!(LlamaConfig::from_json(&v5)?.rope_theta, 50000.0);
        let scaled = v5.replace("\"default\"", "\"linear\", \"factor\": 4.0");
        assert_eq!(
            LlamaConfig::from_json(&scaled)?.rope_scaling,
            RopeScaling::Linear { factor: 4.0 }
        );
        Ok(())
    }

    #[test]
    fn gemma2_defaults_alternate_windows_and_soft_caps() -> Result<()> {
        let gemma = SMOL_CONFIG
            .replace("\"llama\"", "\"gemma2\"")
            .replace(
                "\"rope_scaling\": null",
                "\"sliding_window\": 4096, \"query_pre_attn_scalar\": 144, \"attn_logit_softcapping\": 50.0, \"final_logit_softcapping\": 30.0",
            );
        let c = LlamaConfig::from_json(&gemma)?;
        assert_eq!(c.layers[0].window, Some(4096));
        assert_eq!(c.layers[1].window, None);
        assert_eq!(c.activation, Activation::GeluTanh);
        assert_eq!(
            (c.attention_softcap, c.final_softcap),
            (Some(50.0), Some(30.0))
        );
        assert!((c.attention_scale - 1.0 / 12.0).abs() < 1e-12);
        Ok(())
    }

    /// Phi-4-mini's config.json as transformers 4 wrote it: the factor at the top level,
    /// longrope factors over the 96 rotated dimensions of 128.
    fn phi4_mini_config(factors: usize) -> String {
        let list = vec!["1.0"; factors].join(",");
        format!(
            r#"{{"model_type": "phi3", "vocab_size": 200064, "hidden_size": 3072,
            "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 24,
            "num_key_value_heads": 8, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
            "partial_rotary_factor": 0.75, "tie_word_embeddings": true,
            "sliding_window": 262144,
            "rope_scaling": {{"type": "longrope", "short_factor": [{list}], "long_factor": [{list}]}}}}"#
        )
    }

    #[test]
    fn partial_rotary_factor_sets_the_rotated_width() -> Result<()> {
        let c = LlamaConfig::from_json(&phi4_mini_config(48))?;
        assert_eq!(
            (c.head_dim, c.rotary_dim, c.context_length),
            (128, 96, 4096)
        );
        assert!(c.tie_embeddings);
        // Factors over the whole head are refused: they must cover the rotated width.
        let err = format!(
            "{:#}",
            LlamaConfig::from_json(&phi4_mini_config(64)).unwrap_err()
        );
        assert!(err.contains("short_factor") && err.contains("48"), "{err}");
        // transformers 5 writes the factor into `rope_parameters`, which wins.
        let v5 = SMOL_CONFIG
            .replace("\"rope_theta\": 100000.0,", "")
            .replace(
                "\"rope_scaling\": null",
                "\"partial_rotary_factor\": 1.0, \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e4, \"partial_rotary_factor\": 0.5}",
            );
        assert_eq!(LlamaConfig::from_json(&v5)?.rotary_dim, 32);
        // Full rotation keeps the identity it had before the field existed: `identity`
        // drops the field's text, found right after `head_dim`.
        let full = LlamaConfig::from_json(SMOL_CONFIG)?;
        assert_eq!(full.rotary_dim, full.head_dim);
        assert!(format!("{full:?}").contains("head_dim: 64, rotary_dim: 64, rms_norm_eps"));
        let mut partial = full.clone();
        partial.rotary_dim = 32;
        assert_ne!(full.identity(), partial.identity());
        Ok(())
    }

    #[test]
    fn odd_or_out_of_range_rotary_widths_name_the_field() {
        for (factor, dims) in [("0.8", "int(64 * 0.8) = 51"), ("1.5", "96"), ("0.0", "= 0")] {
            let text = SMOL_CONFIG.replace(
                "\"rope_scaling\": null",
                &format!("\"partial_rotary_factor\": {factor}"),
            );
            let err = format!("{:#}", LlamaConfig::from_json(&text).unwrap_err());
            assert!(
                err.contains("'partial_rotary_factor'") && err.contains(dims),
                "{factor}: {err}"
            );
        }
        // transformers truncates: 64 * 0.7 = 44.8 rotates 44.
        assert_eq!(rotary_dim_of(64, 0.7).ok(), Some(44));
        assert!(check_rotary_dim(45, 64).is_err() && check_rotary_dim(64, 64).is_ok());
    }

    #[test]
    fn heads_must_group_evenly() {
        let bad = SMOL_CONFIG.replace("\"num_key_value_heads\": 3", "\"num_key_value_heads\": 4");
        assert!(LlamaConfig::from_json(&bad).is_err());
    }
}

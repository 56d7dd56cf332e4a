//! [`LlamaConfig`] from GGUF metadata: llama.cpp's keys, prefixed by
//! `general.architecture` (`llama.embedding_length`, `gemma2.attn_logit_softcapping`,
//! ...), and llama.cpp's conventions where a family's GGUF leaves something out (Gemma's
//! attention scale, Gemma 3's local rope base and layer pattern).

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file;

use super::config::{check_rotary_dim, LlamaConfig, LlamaVariant};
use super::rope::RopeScaling;

/// Frequency factors stored as tensors (llama 3's `rope_freqs`, Phi-3's
/// `rope_factors_short`), read by the loader.
#[derive(Debug, Clone, Default)]
pub struct GgufRopeFactors {
    pub freqs: Option<Vec<f64>>,
    pub short: Option<Vec<f64>>,
}

impl LlamaConfig {
    /// Read the configuration from GGUF metadata (keys prefixed by the architecture).
    pub fn from_gguf(
        content: &gguf_file::Content,
        vocab_size: usize,
        factors: GgufRopeFactors,
    ) -> Result<Self> {
        let metadata = &content.metadata;
        let architecture = metadata
            .get("general.architecture")
            .ok_or_else(|| anyhow!("GGUF metadata has no general.architecture"))?
            .to_string()
            .map_err(|e| anyhow!("general.architecture is not a string: {e}"))?
            .clone();
        let variant = LlamaVariant::from_architecture(&architecture)
            .map_err(|e| anyhow!("GGUF metadata 'general.architecture': {e}"))?;
        let get_u32 = |key: &str| -> Result<Option<usize>> {
            let full = format!("{architecture}.{key}");
            metadata
                .get(&full)
                .map(|v| {
                    v.to_u32()
                        .map(|x| x as usize)
                        .or_else(|_| v.to_u64().map(|x| x as usize))
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
        let get_str = |key: &str| -> Result<Option<String>> {
            let full = format!("{architecture}.{key}");
            metadata
                .get(&full)
                .map(|v| {
                    v.to_string()
                        .cloned()
                        .map_err(|e| anyhow!("GGUF metadata {full} is not a string: {e}"))
                })
                .transpose()
        };
        let require = |key: &str| -> Result<usize> {
            get_u32(key)?.ok_or_else(|| anyhow!("GGUF metadata lacks {architecture}.{key}"))
        };
        let hidden_size = require("embedding_length")?;
        let num_heads = require("attention.head_count")?;
        let num_kv_heads = get_u32("attention.head_count_kv")?.unwrap_or(num_heads);
        let head_dim = match get_u32("attention.key_length")? {
            Some(d) => d,
            None => hidden_size / num_heads.max(1),
        };
        // The rotated dimensions of each head (fewer than `head_dim` for partial rotary
        // embeddings: llama.cpp writes `int(partial_rotary_factor * hidden) / heads`).
        let rotary_dim = get_u32("rope.dimension_count")?.unwrap_or(head_dim);
        check_rotary_dim(rotary_dim, head_dim).with_context(|| {
            format!("GGUF metadata {architecture}.rope.dimension_count is {rotary_dim}")
        })?;
        let num_layers = require("block_count")?;
        let mut c = LlamaConfig::llama_like(
            variant,
            vocab_size,
            hidden_size,
            require("feed_forward_length")?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
        );
        c.rotary_dim = rotary_dim;
        c.rms_norm_eps = get_f32("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5);
        c.rope_theta = get_f32("rope.freq_base")?.unwrap_or(10_000.0);
        // llama.cpp permutes llama's query/key rows for interleaved rotation; the other
        // families rotate halves ("NEOX" order) with rows as stored.
        c.rope_interleaved = matches!(variant, LlamaVariant::Llama | LlamaVariant::Mistral);
        c.tie_embeddings = !content.tensor_infos.contains_key("output.weight");
        let trained = require("context_length")?;
        c.context_length = trained;

        let scaling_type = get_str("rope.scaling.type")?;
        let factor = get_f32("rope.scaling.factor")?;
        let original = get_u32("rope.scaling.original_context_length")?;
        c.rope_scaling = match (scaling_type.as_deref(), factors) {
            (_, GgufRopeFactors { short: Some(short), .. }) => {
                // Phi-3 longrope: the short factors, exact within the original window.
                let original = original.unwrap_or(trained);
                c.context_length = original.min(trained);
                let scale = trained as f64 / original as f64;
                let attention_factor = match get_f32("rope.scaling.attn_factor")? {
                    Some(a) => a,
                    None if scale <= 1.0 => 1.0,
                    None => (1.0 + scale.ln() / (original as f64).ln()).sqrt(),
                };
                RopeScaling::Factors {
                    factors: short,
                    attention_factor,
                }
            }
            (_, GgufRopeFactors { freqs: Some(freqs), .. }) => RopeScaling::Factors {
                factors: freqs,
                attention_factor: 1.0,
            },
            (None | Some("none"), _) => RopeScaling::None,
            (Some("linear"), _) => RopeScaling::Linear {
                factor: factor.ok_or_else(|| {
                    anyhow!("GGUF metadata lacks {architecture}.rope.scaling.factor")
                })?,
            },
            (Some("yarn"), _) => {
                let factor = factor.ok_or_else(|| {
                    anyhow!("GGUF metadata lacks {architecture}.rope.scaling.factor")
                })?;
                RopeScaling::Yarn {
                    factor,
                    original_context: original.unwrap_or(trained),
                    beta_fast: get_f32("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
                    beta_slow: get_f32("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
                    attention_factor: get_f32("rope.scaling.attn_factor")?
                        .unwrap_or(if factor <= 1.0 { 1.0 } else { 0.1 * factor.ln() + 1.0 }),
                    truncate: true,
                }
            }
            (Some(other), _) => bail!(
                "GGUF metadata {architecture}.rope.scaling.type is '{other}': supported are none, linear, yarn, and llama 3 / longrope frequency tensors"
            ),
        };

        let window = get_u32("attention.sliding_window")?.filter(|&w| w > 0);
        let pattern = match variant {
            LlamaVariant::Gemma2 => 2,
            LlamaVariant::Gemma3 => get_u32("attention.sliding_window_pattern")?.unwrap_or(6),
            _ => 0,
        };
        for (index, layer) in c.layers.iter_mut().enumerate() {
            let slides = match variant {
                LlamaVariant::Gemma2 | LlamaVariant::Gemma3 => (index + 1) % pattern.max(1) != 0,
                // Where the key is present every layer slides (llama.cpp writes it for
                // Phi-3; a Mistral v0.1 converted as `llama` may carry it).
                _ => true,
            };
            layer.window = window.filter(|_| slides);
            layer.local_rope = slides && variant == LlamaVariant::Gemma3;
        }
        if variant.is_gemma() {
            // llama.cpp has no key for Gemma's query_pre_attn_scalar: it scales by the
            // head width except for the 27B models (hidden / heads). `attention.scale`, a
            // llama.cpp key of other families, overrides.
            let big = (variant == LlamaVariant::Gemma2 && num_layers == 46)
                || (variant == LlamaVariant::Gemma3 && num_layers == 62);
            let scalar = if big {
                (hidden_size / num_heads) as f64
            } else {
                head_dim as f64
            };
            c.attention_scale = match get_f32("attention.scale")? {
                Some(scale) => scale,
                None => 1.0 / scalar.sqrt(),
            };
        }
        if variant == LlamaVariant::Gemma2 {
            c.attention_softcap = get_f32("attn_logit_softcapping")?.filter(|&s| s > 0.0);
            c.final_softcap = get_f32("final_logit_softcapping")?.filter(|&s| s > 0.0);
        }
        if variant == LlamaVariant::Gemma3 {
            c.rope_local_theta = Some(get_f32("rope.freq_base_swa")?.unwrap_or(10_000.0));
        }
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};

    use super::*;

    /// The metadata of a tiny phi3 GGUF (16-wide heads) rotating `rotated` dimensions.
    fn phi3_content(rotated: u32) -> Content {
        let mut metadata = HashMap::new();
        metadata.insert(
            "general.architecture".to_string(),
            Value::String("phi3".to_string()),
        );
        for (key, value) in [
            ("embedding_length", 32),
            ("attention.head_count", 2),
            ("attention.head_count_kv", 1),
            ("block_count", 2),
            ("feed_forward_length", 64),
            ("context_length", 256),
            ("rope.dimension_count", rotated),
        ] {
            metadata.insert(format!("phi3.{key}"), Value::U32(value));
        }
        Content {
            magic: VersionedMagic::GgufV3,
            metadata,
            tensor_infos: HashMap::new(),
            tensor_data_offset: 0,
        }
    }

    #[test]
    fn rope_dimension_count_sets_the_rotated_width_and_is_checked() -> Result<()> {
        let config = LlamaConfig::from_gguf(&phi3_content(12), 256, Default::default())?;
        assert_eq!((config.head_dim, config.rotary_dim), (16, 12));
        for bad in [11, 18, 0] {
            let err = LlamaConfig::from_gguf(&phi3_content(bad), 256, Default::default())
                .map(|_| ())
                .unwrap_err();
            let err = format!("{err:#}");
            assert!(
                err.contains(&format!("phi3.rope.dimension_count is {bad}")),
                "{err}"
            );
        }
        Ok(())
    }
}

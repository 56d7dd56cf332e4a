//! Building a [`LlamaModel`] from GGUF or safetensors files.
//!
//! GGUF tensors use llama.cpp names (`blk.N.attn_q.weight`) and may be quantized;
//! safetensors use Hugging Face names (`model.layers.N.self_attn.q_proj.weight`).
//! Both end in the same [`LlamaModel`]. What differs by family is which tensors a layer
//! has: Qwen3 and Gemma 3 add query/key norms, the Gemmas norms after both blocks (and
//! store their norms as `w` for `1 + w`: Hugging Face's files are shifted here, llama.cpp
//! shifted its own at conversion), Phi-3 stores fused query/key/value and gate/up
//! matrices, which stay fused (they are the layouts our fused products use).

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::config::{LlamaConfig, LlamaVariant};
use super::gguf_config::GgufRopeFactors;
use super::{DecoderLayer, GateUpProjection, LayerWeights, LlamaModel, QkvProjection};
use crate::arch::linear::{Linear, Precision, WeightPolicy};

/// Open a GGUF file and read its header, refusing truncated files up front.
pub fn read_gguf_header(path: &Path) -> Result<(File, gguf_file::Content)> {
    let mut file =
        File::open(path).with_context(|| format!("cannot open model file {}", path.display()))?;
    let content = gguf_file::Content::read(&mut file)
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("{} is not a readable GGUF file", path.display()))?;
    let file_len = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    for (name, info) in &content.tensor_infos {
        let elements = info.shape.elem_count();
        let bytes = elements / info.ggml_dtype.block_size() * info.ggml_dtype.type_size();
        let end = content.tensor_data_offset + info.offset + bytes as u64;
        if end > file_len {
            bail!(
                "{} is truncated: tensor {name} ends at byte {end} but the file has {file_len} bytes",
                path.display()
            );
        }
    }
    Ok((file, content))
}

/// Load a llama-family model from a GGUF file.
pub fn from_gguf(path: &Path, policy: WeightPolicy, device: &Device) -> Result<LlamaModel> {
    let (mut file, content) = read_gguf_header(path)?;
    let embedding_info = content
        .tensor_infos
        .get("token_embd.weight")
        .ok_or_else(|| anyhow!("{} has no token_embd.weight tensor", path.display()))?;
    let (vocab_size, _) = embedding_info.shape.dims2()?;

    let mut tensor = |name: &str| {
        content
            .tensor(&mut file, name, device)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("cannot read tensor {name} from {}", path.display()))
    };
    let has = |name: &str| content.tensor_infos.contains_key(name);
    let mut vector = |name: &str| -> Result<Option<Vec<f64>>> {
        if !has(name) {
            return Ok(None);
        }
        let values: Vec<f32> = tensor(name)?
            .dequantize(&Device::Cpu)?
            .flatten_all()?
            .to_vec1()?;
        Ok(Some(values.into_iter().map(f64::from).collect()))
    };
    let factors = GgufRopeFactors {
        freqs: vector("rope_freqs.weight")?,
        short: vector("rope_factors_short.weight")?,
    };
    let config = LlamaConfig::from_gguf(&content, vocab_size, factors)
        .with_context(|| format!("unsupported model in {}", path.display()))?;
    let mut tensor = |name: &str| {
        if !has(name) {
            bail!(
                "{} lacks tensor {name}, which a {} model needs",
                path.display(),
                config.variant.name()
            );
        }
        content
            .tensor(&mut file, name, device)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("cannot read tensor {name} from {}", path.display()))
    };

    let embedding_q = tensor("token_embd.weight")?;
    let embedding = embedding_q.dequantize(device)?;
    let head = if config.tie_embeddings {
        Linear::dense(embedding.clone(), None)?
    } else {
        Linear::from_qtensor(tensor("output.weight")?, None, policy, device)?
    };
    let final_norm = tensor("output_norm.weight")?.dequantize(device)?;

    let mut layers = Vec::with_capacity(config.num_layers);
    for index in 0..config.num_layers {
        let p = format!("blk.{index}");
        let mut bias = |name: &str| -> Result<Option<Tensor>> {
            let full = format!("{p}.{name}.bias");
            if has(&full) {
                Ok(Some(tensor(&full)?.dequantize(device)?))
            } else {
                Ok(None)
            }
        };
        let fused_qkv = config.variant == LlamaVariant::Phi3;
        let (q_bias, k_bias, v_bias) = if fused_qkv {
            (None, None, None)
        } else {
            (bias("attn_q")?, bias("attn_k")?, bias("attn_v")?)
        };
        if config.attention_bias && (q_bias.is_none() || k_bias.is_none()) {
            bail!(
                "{}: {} layer {index} lacks its query/key biases ({p}.attn_q.bias)",
                path.display(),
                config.variant.name()
            );
        }
        let mut linear = |name: &str, bias: Option<Tensor>| -> Result<Linear> {
            Linear::from_qtensor(tensor(&format!("{p}.{name}.weight"))?, bias, policy, device)
                .with_context(|| format!("{p}.{name}.weight"))
        };
        let qkv = if fused_qkv {
            QkvProjection::Fused(linear("attn_qkv", None)?)
        } else {
            QkvProjection::Separate {
                q: linear("attn_q", q_bias)?,
                k: linear("attn_k", k_bias)?,
                v: linear("attn_v", v_bias)?,
            }
        };
        let o = linear("attn_output", None)?;
        let gate_up = if fused_qkv {
            // Phi-3: `ffn_up` holds gate and up rows, gate first.
            GateUpProjection::Fused(linear("ffn_up", None)?)
        } else {
            GateUpProjection::Separate {
                gate: linear("ffn_gate", None)?,
                up: linear("ffn_up", None)?,
            }
        };
        let down = linear("ffn_down", None)?;
        let mut norm = |name: &str| -> Result<Tensor> {
            Ok(tensor(&format!("{p}.{name}.weight"))?.dequantize(device)?)
        };
        let (q_norm, k_norm) = if config.variant.has_qk_norm() {
            (Some(norm("attn_q_norm")?), Some(norm("attn_k_norm")?))
        } else {
            (None, None)
        };
        let (post_attn_norm, post_mlp_norm) = if config.variant.is_gemma() {
            (
                Some(norm("post_attention_norm")?),
                Some(norm("post_ffw_norm")?),
            )
        } else {
            (None, None)
        };
        layers.push(
            DecoderLayer::new(
                &config,
                LayerWeights {
                    attn_norm: norm("attn_norm")?,
                    qkv,
                    o,
                    mlp_norm: norm("ffn_norm")?,
                    gate_up,
                    down,
                    q_norm,
                    k_norm,
                    post_attn_norm,
                    post_mlp_norm,
                },
            )
            .with_context(|| format!("{}: layer {index}", path.display()))?,
        );
    }
    LlamaModel::new(config, embedding, layers, final_norm, head, device)
}

/// Load a llama-family model from a Hugging Face checkpoint: `config.json` and one or
/// more safetensors files (f32, f16 or bf16; computed in f32).
pub fn from_safetensors(
    config_path: &Path,
    weight_paths: &[PathBuf],
    device: &Device,
) -> Result<LlamaModel> {
    from_safetensors_at(config_path, weight_paths, device, Precision::F32)
}

/// [`from_safetensors`] with each block's projections converted to `precision` as soon
/// as the block is read, so that the whole model never exists in f32 (an 8B model at
/// bf16 peaks at its bf16 size plus one block in f32).
pub fn from_safetensors_at(
    config_path: &Path,
    weight_paths: &[PathBuf],
    device: &Device,
    precision: Precision,
) -> Result<LlamaModel> {
    let config = LlamaConfig::from_json_file(config_path)?;
    for path in weight_paths {
        if !path.is_file() {
            bail!("weights file {} does not exist", path.display());
        }
    }
    // SAFETY: the files are memory-mapped read-only; we do not modify them while mapped.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(weight_paths, DType::F32, device) }
        .context("cannot map the safetensors weights")?;
    let (h, kv) = (config.hidden_size, config.num_kv_heads * config.head_dim);
    let q_out = config.num_heads * config.head_dim;
    let variant = config.variant;
    let missing = |name: &str| {
        format!(
            "tensor '{name}' (a {} checkpoint needs it) is missing or misshapen in the safetensors files",
            variant.name()
        )
    };
    // Gemma stores norm weights `w` of `x * (1 + w)`.
    let shift = if variant.is_gemma() { 1.0 } else { 0.0 };
    let get_norm = |vb: &VarBuilder, width: usize, name: &str, full: &str| -> Result<Tensor> {
        Ok((vb.get(width, name).with_context(|| missing(full))? + shift)?)
    };
    let model = vb.pp("model");
    let embedding = model
        .get((config.vocab_size, h), "embed_tokens.weight")
        .with_context(|| missing("model.embed_tokens.weight"))?;
    let head = if config.tie_embeddings {
        Linear::dense(embedding.clone(), None)?
    } else {
        Linear::dense(
            vb.get((config.vocab_size, h), "lm_head.weight")
                .with_context(|| missing("lm_head.weight"))?,
            None,
        )?
    };
    let final_norm = get_norm(&model, h, "norm.weight", "model.norm.weight")?;
    let with_bias = config.attention_bias;
    let mut layers = Vec::with_capacity(config.num_layers);
    for index in 0..config.num_layers {
        let layer = model.pp(format!("layers.{index}"));
        let full = |name: &str| format!("model.layers.{index}.{name}");
        let linear = |name: &str, out: usize, inp: usize, bias: bool| -> Result<Linear> {
            let weight = layer
                .get((out, inp), &format!("{name}.weight"))
                .with_context(|| missing(&full(&format!("{name}.weight"))))?;
            let bias = if bias {
                Some(
                    layer
                        .get(out, &format!("{name}.bias"))
                        .with_context(|| missing(&full(&format!("{name}.bias"))))?,
                )
            } else {
                None
            };
            Linear::dense(weight, bias)
        };
        let norm = |name: &str, width: usize| -> Result<Tensor> {
            get_norm(
                &layer,
                width,
                &format!("{name}.weight"),
                &full(&format!("{name}.weight")),
            )
        };
        let i = config.intermediate_size;
        let (qkv, gate_up) = if variant == LlamaVariant::Phi3 {
            (
                QkvProjection::Fused(linear("self_attn.qkv_proj", q_out + 2 * kv, h, false)?),
                GateUpProjection::Fused(linear("mlp.gate_up_proj", 2 * i, h, false)?),
            )
        } else {
            (
                QkvProjection::Separate {
                    q: linear("self_attn.q_proj", q_out, h, with_bias)?,
                    k: linear("self_attn.k_proj", kv, h, with_bias)?,
                    v: linear("self_attn.v_proj", kv, h, with_bias)?,
                },
                GateUpProjection::Separate {
                    gate: linear("mlp.gate_proj", i, h, false)?,
                    up: linear("mlp.up_proj", i, h, false)?,
                },
            )
        };
        let (q_norm, k_norm) = if variant.has_qk_norm() {
            (
                Some(norm("self_attn.q_norm", config.head_dim)?),
                Some(norm("self_attn.k_norm", config.head_dim)?),
            )
        } else {
            (None, None)
        };
        let weights = if variant.is_gemma() {
            LayerWeights {
                attn_norm: norm("input_layernorm", h)?,
                qkv,
                o: linear("self_attn.o_proj", h, q_out, false)?,
                mlp_norm: norm("pre_feedforward_layernorm", h)?,
                gate_up,
                down: linear("mlp.down_proj", h, i, false)?,
                q_norm,
                k_norm,
                post_attn_norm: Some(norm("post_attention_layernorm", h)?),
                post_mlp_norm: Some(norm("post_feedforward_layernorm", h)?),
            }
        } else {
            LayerWeights {
                attn_norm: norm("input_layernorm", h)?,
                qkv,
                o: linear("self_attn.o_proj", h, q_out, false)?,
                mlp_norm: norm("post_attention_layernorm", h)?,
                gate_up,
                down: linear("mlp.down_proj", h, i, false)?,
                q_norm,
                k_norm,
                post_attn_norm: None,
                post_mlp_norm: None,
            }
        };
        layers.push(
            DecoderLayer::new(&config, weights)
                .with_context(|| full("*"))?
                .with_precision(precision)?,
        );
    }
    LlamaModel::new(config, embedding, layers, final_norm, head, device)
}

//! Building a [`LlamaModel`] from GGUF or safetensors files.
//!
//! GGUF tensors use llama.cpp names (`blk.N.attn_q.weight`) and may be quantized;
//! safetensors use Hugging Face names (`model.layers.N.self_attn.q_proj.weight`).
//! Both end in the same [`LlamaModel`].

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::config::{LlamaConfig, LlamaVariant};
use super::{DecoderLayer, LlamaModel};
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
    let config = LlamaConfig::from_gguf(&content, vocab_size)
        .with_context(|| format!("unsupported model in {}", path.display()))?;

    let mut tensor = |name: &str| {
        content
            .tensor(&mut file, name, device)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("cannot read tensor {name} from {}", path.display()))
    };
    let has = |name: &str| content.tensor_infos.contains_key(name);

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
        let (q_bias, k_bias, v_bias) = (bias("attn_q")?, bias("attn_k")?, bias("attn_v")?);
        if config.variant == LlamaVariant::Qwen2 && (q_bias.is_none() || k_bias.is_none()) {
            bail!(
                "{}: qwen2 layer {index} lacks its query/key biases",
                path.display()
            );
        }
        let mut linear = |name: &str, bias: Option<Tensor>| -> Result<Linear> {
            Linear::from_qtensor(tensor(&format!("{p}.{name}.weight"))?, bias, policy, device)
                .with_context(|| format!("{p}.{name}.weight"))
        };
        let q = linear("attn_q", q_bias)?;
        let k = linear("attn_k", k_bias)?;
        let v = linear("attn_v", v_bias)?;
        let o = linear("attn_output", None)?;
        let gate = linear("ffn_gate", None)?;
        let up = linear("ffn_up", None)?;
        let down = linear("ffn_down", None)?;
        let attn_norm = tensor(&format!("{p}.attn_norm.weight"))?.dequantize(device)?;
        let mlp_norm = tensor(&format!("{p}.ffn_norm.weight"))?.dequantize(device)?;
        layers.push(DecoderLayer::new(
            &config, attn_norm, q, k, v, o, mlp_norm, gate, up, down,
        )?);
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
    let model = vb.pp("model");
    let embedding = model
        .get((config.vocab_size, h), "embed_tokens.weight")
        .context("model.embed_tokens.weight")?;
    let head = if config.tie_embeddings {
        Linear::dense(embedding.clone(), None)?
    } else {
        Linear::dense(
            vb.get((config.vocab_size, h), "lm_head.weight")
                .context("lm_head.weight")?,
            None,
        )?
    };
    let final_norm = model.get(h, "norm.weight").context("model.norm.weight")?;
    let with_bias = config.variant == LlamaVariant::Qwen2;
    let mut layers = Vec::with_capacity(config.num_layers);
    for index in 0..config.num_layers {
        let layer = model.pp(format!("layers.{index}"));
        let linear = |name: &str, out: usize, inp: usize, bias: bool| -> Result<Linear> {
            let weight = layer
                .get((out, inp), &format!("{name}.weight"))
                .with_context(|| format!("model.layers.{index}.{name}.weight"))?;
            let bias = if bias {
                Some(
                    layer
                        .get(out, &format!("{name}.bias"))
                        .with_context(|| format!("model.layers.{index}.{name}.bias"))?,
                )
            } else {
                None
            };
            Linear::dense(weight, bias)
        };
        let i = config.intermediate_size;
        layers.push(
            DecoderLayer::new(
                &config,
                layer.get(h, "input_layernorm.weight")?,
                linear("self_attn.q_proj", q_out, h, with_bias)?,
                linear("self_attn.k_proj", kv, h, with_bias)?,
                linear("self_attn.v_proj", kv, h, with_bias)?,
                linear("self_attn.o_proj", h, q_out, false)?,
                layer.get(h, "post_attention_layernorm.weight")?,
                linear("mlp.gate_proj", i, h, false)?,
                linear("mlp.up_proj", i, h, false)?,
                linear("mlp.down_proj", h, i, false)?,
            )?
            .with_precision(precision)?,
        );
    }
    LlamaModel::new(config, embedding, layers, final_norm, head, device)
}

//! Memory at real sizes: how much RAM a decoder-only model needs in each weight layout,
//! read from its files' headers before anything is loaded, and which layout to load it
//! in so that it fits in the memory the machine has free.
//!
//! A 7-8B model dequantised to f32 needs ~32 GB and would be killed on a 24 GB machine;
//! the same model kept as its GGUF blocks needs ~5-9 GB, and with bf16 decoder blocks
//! ~17 GB. [`plan_load`] takes what the user asked for (`--weights`, `--precision`),
//! tries the layouts it allows in order of exactness, and returns the first that fits
//! [`available_memory`] (`MemAvailable` of `/proc/meminfo`), with a note when it is not
//! the first; when none fits it stops with an error naming the need and the options.
//!
//! The estimate: weights as they will be held (decoder-block matrices in the chosen
//! layout; embeddings, norms and an f32 output head as the loaders keep them), plus one
//! block's matrices in f32 (the loaders convert block by block), plus a key/value cache
//! of [`KV_TOKENS`] tokens, activations of one forward pass of `max_batch_tokens`, and a
//! fixed [`OVERHEAD`]. GPUs are not checked (their memory is not `MemAvailable`).

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::{gguf_file, GgmlDType};

use super::load::LoadOptions;
use crate::arch::{Precision, WeightPolicy};
use crate::runtime::{ResolvedModel, WeightFormat};

/// Tokens of key/value cache counted in the estimate (a long judge prompt and its
/// shared prefixes; the context window when it is shorter).
pub const KV_TOKENS: u64 = 4096;

/// Bytes counted for everything else (tokeniser, code, allocator slack, buffers).
pub const OVERHEAD: u64 = 512 << 20;

/// Share of the available memory a plan may use (the rest absorbs estimate errors).
const USABLE_SHARE: f64 = 0.95;

const GIB: f64 = (1u64 << 30) as f64;

/// What a checkpoint's tensors amount to, from its headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WeightSummary {
    /// Elements of the token embedding (held in f32 by every loader).
    pub embedding_params: u64,
    /// Elements of a separate output head (0 when tied to the embedding).
    pub head_params: u64,
    /// Bytes of the output head kept as stored (quantized GGUF blocks), else `4 *` params.
    pub head_kept_bytes: u64,
    /// Elements of the decoder blocks' 2-D weights (the projections).
    pub block_params: u64,
    /// Bytes of the decoder blocks' weights kept as stored: GGUF block types at their
    /// stored size, float types in f32 (the loaders widen them).
    pub block_kept_bytes: u64,
    /// Bytes of the copy candle makes of some quantized block types on their first
    /// product, kept beside the stored blocks (see [`repacked_bytes`]).
    pub block_repack_bytes: u64,
    /// Elements of every other tensor (norms, biases; held in f32).
    pub other_params: u64,
    /// Whether some block weight is stored in a GGUF block (quantized) type.
    pub quantized: bool,
    /// Decoder blocks.
    pub layers: u64,
    /// Width of one block's keys (and values): `kv_heads * head_dim`.
    pub kv_dim: u64,
    pub hidden: u64,
    pub vocab: u64,
}

/// How the decoder blocks' matrices are held after loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Dense f32 (exact; candle's kernels).
    F32,
    /// GGUF blocks as stored (candle's quantized kernels); float tensors widened to f32.
    Stored,
    /// bf16 weights (`--precision bf16`).
    Bf16,
    /// int8 weights (`--precision int8`).
    Int8,
}

impl Layout {
    fn describe(self) -> &'static str {
        match self {
            Layout::F32 => "f32 weights",
            Layout::Stored => "the GGUF weights kept quantized as stored",
            Layout::Bf16 => "bf16 decoder weights",
            Layout::Int8 => "int8 decoder weights",
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

impl WeightSummary {
    /// The summary of a GGUF file, from its header (llama.cpp tensor names).
    pub fn from_gguf(path: &Path) -> Result<Self> {
        let mut file = File::open(path)
            .with_context(|| format!("cannot open model file {}", path.display()))?;
        let content = gguf_file::Content::read(&mut file)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("{} is not a readable GGUF file", path.display()))?;
        let mut summary = Self::default();
        for (name, info) in &content.tensor_infos {
            let dims = info.shape.dims().to_vec();
            let stored = (info.shape.elem_count() / info.ggml_dtype.block_size()
                * info.ggml_dtype.type_size()) as u64;
            let quantized = !matches!(
                info.ggml_dtype,
                GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
            );
            if summary.add(name, &dims, quantized.then_some(stored)) {
                summary.block_repack_bytes +=
                    repacked_bytes(info.ggml_dtype, info.shape.elem_count() as u64);
            }
        }
        summary.finish(path)
    }

    /// The summary of safetensors files, from their JSON headers (Hugging Face names).
    pub fn from_safetensors(paths: &[PathBuf]) -> Result<Self> {
        let mut summary = Self::default();
        for path in paths {
            for (name, dims) in safetensors_shapes(path)? {
                summary.add(&name, &dims, None);
            }
        }
        summary.finish(paths.first().map(PathBuf::as_path).unwrap_or(Path::new("")))
    }

    /// Count one tensor; `quantized_bytes` is its stored size when it is in a GGUF
    /// block type. Whether it is a decoder block's matrix.
    fn add(&mut self, name: &str, dims: &[usize], quantized_bytes: Option<u64>) -> bool {
        let elements: u64 = dims.iter().map(|&d| d as u64).product();
        let kept = quantized_bytes.unwrap_or(4 * elements);
        let base = name.strip_suffix(".weight").unwrap_or(name);
        let is_embedding = base == "token_embd" || base.ends_with("embed_tokens");
        let is_head = base == "output" || base == "lm_head";
        if is_embedding {
            self.embedding_params += elements;
            if let [vocab, hidden] = dims {
                self.vocab = *vocab as u64;
                self.hidden = *hidden as u64;
            }
        } else if is_head {
            self.head_params += elements;
            self.head_kept_bytes += kept;
        } else if dims.len() == 2 {
            self.block_params += elements;
            self.block_kept_bytes += kept;
            self.quantized |= quantized_bytes.is_some();
            let key = base.ends_with("attn_k") || base.ends_with("self_attn.k_proj");
            let fused = base.ends_with("attn_qkv") || base.ends_with("self_attn.qkv_proj");
            if key || fused {
                self.layers += 1;
                // A fused projection hides the key width: count the widest it can be.
                let width = if key { dims[0] } else { dims[1] };
                self.kv_dim = self.kv_dim.max(width as u64);
            }
            return true;
        } else {
            self.other_params += elements;
        }
        false
    }

    fn finish(self, path: &Path) -> Result<Self> {
        if self.embedding_params == 0 || self.block_params == 0 {
            bail!(
                "{}: no token embedding or no decoder-block weights found to size the model",
                path.display()
            );
        }
        Ok(self)
    }

    /// Every parameter.
    pub fn params(&self) -> u64 {
        self.embedding_params + self.head_params + self.block_params + self.other_params
    }

    /// Bytes of the weights once loaded in `layout`.
    pub fn weight_bytes(&self, layout: Layout) -> u64 {
        let blocks = match layout {
            Layout::F32 => 4 * self.block_params,
            Layout::Stored => self.block_kept_bytes + self.block_repack_bytes,
            Layout::Bf16 => 2 * self.block_params,
            // One byte per weight and an f32 scale per row (a rounding error here).
            Layout::Int8 => self.block_params + self.block_params / 256,
        };
        // The model also keeps the head's rows dense in f32 (for the label-only head):
        // a quantized head costs its blocks and the f32 rows.
        let head = match layout {
            Layout::F32 => 4 * self.head_params,
            _ if self.head_kept_bytes != 4 * self.head_params => {
                self.head_kept_bytes + 4 * self.head_params
            }
            _ => 4 * self.head_params,
        };
        blocks + head + 4 * (self.embedding_params + self.other_params)
    }

    /// Bytes of the key/value cache, activations and the rest, for forward passes of at
    /// most `batch_tokens` tokens and a context of `context` tokens.
    pub fn runtime_bytes(&self, context: u64, batch_tokens: u64) -> u64 {
        let kv = 2 * self.layers * self.kv_dim * 4 * context.min(KV_TOKENS);
        // Hidden states and the attention and MLP intermediates (~16 widths of the
        // hidden size per token), and logits for up to 64 rows.
        let activations = (batch_tokens * 16 * self.hidden + 64 * self.vocab) * 4;
        kv + activations + OVERHEAD
    }

    /// Peak bytes of loading and running in `layout`: the held weights, one block's
    /// matrices in f32 while it is converted, and [`Self::runtime_bytes`].
    pub fn need(&self, layout: Layout, context: u64, batch_tokens: u64) -> u64 {
        let one_block_f32 = 4 * self.block_params / self.layers.max(1);
        self.weight_bytes(layout) + one_block_f32 + self.runtime_bytes(context, batch_tokens)
    }
}

/// Names and shapes of the tensors in one safetensors file (its JSON header only).
fn safetensors_shapes(path: &Path) -> Result<Vec<(String, Vec<usize>)>> {
    let mut file =
        File::open(path).with_context(|| format!("cannot open weights {}", path.display()))?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .with_context(|| format!("{} is not a safetensors file", path.display()))?;
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        bail!(
            "{} is not a safetensors file (header of {len} bytes)",
            path.display()
        );
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .with_context(|| format!("{} is truncated in its header", path.display()))?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&header)
        .with_context(|| format!("{} has an unreadable header", path.display()))?;
    let mut shapes = Vec::new();
    for (name, entry) in header {
        if name == "__metadata__" {
            continue;
        }
        let dims = entry
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|dims| {
                dims.iter()
                    .map(|d| d.as_u64().map(|d| d as usize))
                    .collect::<Option<Vec<_>>>()
            })
            .with_context(|| format!("{}: tensor {name} has no shape", path.display()))?;
        shapes.push((name, dims));
    }
    Ok(shapes)
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut fields = line.split_whitespace().skip(1);
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") | None => Some(value * 1024),
        _ => None,
    }
}

/// Memory the kernel says can be used without swapping (`MemAvailable`), lowered to
/// what the cgroup (container) limit leaves, or `None` where `/proc/meminfo` cannot be
/// read (not Linux).
pub fn available_memory() -> Option<u64> {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .as_deref()
        .and_then(parse_meminfo)?;
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(Path::new("/sys/fs/cgroup").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    match (read("memory.max"), read("memory.current")) {
        (Some(max), Some(current)) => Some(available.min(max.saturating_sub(current))),
        _ => Some(available),
    }
}

/// The memory settings of a load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryOptions {
    /// The precision is the default (`--precision auto`): f32, or bf16 where f32 does
    /// not fit.
    pub adapt_precision: bool,
    /// Bytes to plan for instead of [`available_memory`].
    pub available: Option<u64>,
}

/// The plan for loading a resolved decoder-only model on `cpu` (GPUs: as asked).
pub fn plan_decoder(
    resolved: &ResolvedModel,
    options: &LoadOptions,
    cpu: bool,
) -> Result<LoadPlan> {
    let gguf = resolved.format == WeightFormat::Gguf;
    if !cpu {
        return Ok(LoadPlan {
            weights: options.weights,
            precision: options.precision,
            layout: if gguf { Layout::Stored } else { Layout::F32 },
            need: 0,
            note: None,
        });
    }
    let summary = if gguf {
        let [path] = resolved.weights.as_slice() else {
            bail!(
                "a GGUF model must be one file, got {}",
                resolved.weights.len()
            );
        };
        WeightSummary::from_gguf(path)?
    } else {
        WeightSummary::from_safetensors(&resolved.weights)?
    };
    let request = LoadRequest {
        weights: options.weights,
        precision: options.precision,
        adapt_precision: options.memory.adapt_precision,
        gguf,
    };
    plan_load(
        &resolved.name,
        &summary,
        &request,
        options.memory.available.or_else(available_memory),
        resolved.context_window as u64,
        options.decoder.budget.max_batch_tokens as u64,
    )
}

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadRequest {
    pub weights: WeightPolicy,
    pub precision: Precision,
    /// Whether the precision is the default (`--precision auto`): f32, or bf16 where
    /// f32 does not fit.
    pub adapt_precision: bool,
    /// Whether the weights are a GGUF file (else safetensors).
    pub gguf: bool,
}

/// How to load: what to hand to the loaders, and what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadPlan {
    pub weights: WeightPolicy,
    pub precision: Precision,
    pub layout: Layout,
    /// Estimated peak bytes.
    pub need: u64,
    /// Said to the user when the plan is not what the defaults would load.
    pub note: Option<String>,
}

/// The layouts `request` allows, most exact first, each with the loader settings.
fn candidates(request: &LoadRequest) -> Vec<(Layout, WeightPolicy, Precision)> {
    // Converting GGUF blocks to bf16/int8 block by block needs them kept at load.
    let convert_from = if request.gguf && request.weights == WeightPolicy::Auto {
        WeightPolicy::Quantized
    } else {
        request.weights
    };
    let converted = |layout: Layout, precision: Precision| {
        if convert_from == request.weights {
            vec![(layout, request.weights, precision)]
        } else {
            // As before plans existed: dequantised to f32 (the blocks' projections fused)
            // then converted, where that fits.
            vec![
                (layout, WeightPolicy::F32, precision),
                (layout, convert_from, precision),
            ]
        }
    };
    match request.precision {
        Precision::Bf16 if !request.adapt_precision => converted(Layout::Bf16, Precision::Bf16),
        Precision::Int8 => converted(Layout::Int8, Precision::Int8),
        _ => {
            let mut list = Vec::new();
            match request.weights {
                WeightPolicy::Auto | WeightPolicy::F32 => {
                    list.push((Layout::F32, WeightPolicy::F32, Precision::F32))
                }
                WeightPolicy::Quantized => {}
            }
            if request.gguf && request.weights != WeightPolicy::F32 {
                list.push((Layout::Stored, WeightPolicy::Quantized, Precision::F32));
            }
            if request.adapt_precision {
                list.push((Layout::Bf16, convert_from, Precision::Bf16));
            }
            list
        }
    }
}

/// Choose how to load a model described by `summary` so that it fits in `available`
/// bytes (`None`: unknown, load as asked). `context` and `batch_tokens` size the
/// runtime part of the estimate.
pub fn plan_load(
    name: &str,
    summary: &WeightSummary,
    request: &LoadRequest,
    available: Option<u64>,
    context: u64,
    batch_tokens: u64,
) -> Result<LoadPlan> {
    let options = candidates(request);
    let needs: Vec<u64> = options
        .iter()
        .map(|(layout, weights, _)| {
            let mut need = summary.need(*layout, context, batch_tokens);
            if *weights == WeightPolicy::F32 && *layout != Layout::F32 {
                // Dequantised to f32 first, converted after: the f32 model is the peak.
                need = need.max(summary.need(Layout::F32, context, batch_tokens));
            }
            need
        })
        .collect();
    let Some(available) = available else {
        let (layout, weights, precision) = options[0];
        let weights = if weights == WeightPolicy::F32 {
            request.weights
        } else {
            weights
        };
        return Ok(LoadPlan {
            weights,
            precision,
            layout,
            need: needs[0],
            note: None,
        });
    };
    let usable = (available as f64 * USABLE_SHARE) as u64;
    let chosen = needs.iter().position(|&need| need <= usable);
    let Some(index) = chosen else {
        let tried: Vec<String> = options
            .iter()
            .zip(&needs)
            .map(|((layout, _, _), need)| format!("{} with {layout}", gib(*need)))
            .collect();
        bail!(
            "model '{name}' ({:.1}B parameters) needs more memory than is available: about \
             {}, but {} is available (MemAvailable; {:.0}% of it may be used). Options: --precision bf16 (~{}) or \
             int8 (~{}) for the decoder blocks; --weights quantized to keep a GGUF file's \
             blocks as stored{}; a quantized GGUF of the model; or free memory",
            summary.params() as f64 / 1e9,
            tried.join(", "),
            gib(available),
            USABLE_SHARE * 100.0,
            gib(summary.need(Layout::Bf16, context, batch_tokens)),
            gib(summary.need(Layout::Int8, context, batch_tokens)),
            if summary.quantized {
                format!(
                    " (~{})",
                    gib(summary.need(Layout::Stored, context, batch_tokens))
                )
            } else {
                String::new()
            }
        );
    };
    let (layout, weights, precision) = options[index];
    let note = (index > 0).then(|| {
        let first = if options[0].0 == layout {
            format!("dequantising to f32 before converting to {layout}")
        } else {
            options[0].0.to_string()
        };
        let chosen = if options[0].0 == layout {
            format!("{layout} converted block by block from the GGUF blocks")
        } else {
            layout.to_string()
        };
        format!(
            "model '{name}': {first} would need about {}, {} is available: loading {chosen} \
             (about {})",
            gib(needs[0]),
            gib(available),
            gib(needs[index])
        )
    });
    Ok(LoadPlan {
        weights,
        precision,
        layout,
        need: needs[index],
        note,
    })
}

/// What the weights of a model need at each precision, from its parameter counts alone
/// (`embedding`: the embedding's and a separate head's, held in f32 at every precision;
/// `stored`: the size of a GGUF file and its card's block type, e.g. `q4_k_m`, kept as
/// stored, plus those held in f32, plus the copy candle makes of the blocks at the first
/// product ([`repacked_bytes`], counted at the block type's ratio over the file's share of
/// block parameters): for model listings, before anything is downloaded. Runtime memory
/// ([`WeightSummary::runtime_bytes`]) comes on top.
pub fn weight_memory_by_precision(
    parameters: u64,
    embedding: u64,
    stored: Option<(u64, &str)>,
) -> Vec<(&'static str, u64)> {
    let blocks = parameters.saturating_sub(embedding);
    let mut list = vec![
        ("f32", 4 * parameters),
        ("bf16", 2 * blocks + 4 * embedding),
        ("int8", blocks + 4 * embedding),
    ];
    if let Some((stored, block_type)) = stored {
        let block_share = blocks as f64 / parameters.max(1) as f64;
        let repacked = stored as f64 * block_share * repacked_share(block_type);
        list.push(("stored", stored + repacked as u64 + 4 * embedding));
    }
    list
}

/// [`repacked_bytes`] over the stored bytes, for a card's block type (`q4_k_m`: Q4_K,
/// the type of most of its matrices); 0 for a type candle does not repack here.
fn repacked_share(block_type: &str) -> f64 {
    let lower = block_type.to_ascii_lowercase();
    let dtype = match lower.as_str() {
        t if t.starts_with("q4_k") => GgmlDType::Q4K,
        t if t.starts_with("q6_k") => GgmlDType::Q6K,
        t if t.starts_with("q5_k") => GgmlDType::Q5K,
        "q8_0" => GgmlDType::Q8_0,
        "q4_0" => GgmlDType::Q4_0,
        _ => return 0.0,
    };
    let elements = 256 * 16;
    let stored = stored_bytes(dtype, elements);
    repacked_bytes(dtype, elements) as f64 / stored as f64
}

/// Bytes of the copy candle 0.11 makes of a quantized weight of `elements` values in
/// `dtype` the first time it multiplies it, and keeps beside the stored blocks (its
/// `PackedCache`): on x86-64, Q4_K in 16-row tiles with the scales unpacked to f32 (3072
/// bytes per 16 blocks of 144), Q6_K likewise (5120 per 16 of 210, on prompts) and Q8_0
/// offset to unsigned (the same size; AVX-512 VNNI only, counted everywhere); on aarch64
/// Q4_0, Q4_K, Q5_K, Q6_K and Q8_0 interleaved in groups of rows (about the same size).
/// An 8B Q4_K_M model kept as stored grew from 8.7 GiB after loading to 14.5 GiB in its
/// first run on x86-64 before this was counted.
pub fn repacked_bytes(dtype: GgmlDType, elements: u64) -> u64 {
    let stored = stored_bytes(dtype, elements);
    if cfg!(target_arch = "x86_64") {
        match dtype {
            GgmlDType::Q4K => elements / 256 * 3072 / 16,
            GgmlDType::Q6K => elements / 256 * 5120 / 16,
            GgmlDType::Q8_0 => stored,
            _ => 0,
        }
    } else if cfg!(target_arch = "aarch64") {
        match dtype {
            GgmlDType::Q4_0
            | GgmlDType::Q4K
            | GgmlDType::Q5K
            | GgmlDType::Q6K
            | GgmlDType::Q8_0 => stored,
            _ => 0,
        }
    } else {
        0
    }
}

/// Bytes of `elements` values stored as `dtype` blocks.
fn stored_bytes(dtype: GgmlDType, elements: u64) -> u64 {
    elements / dtype.block_size() as u64 * dtype.type_size() as u64
}

/// Bytes in GiB, one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    /// Llama-3-8B's tensors (32 blocks, hidden 4096, 8 key/value heads of 128, MLP
    /// 14336, vocabulary 128256, separate head), block matrices at `block_bytes` per
    /// element where quantized.
    fn llama3_8b(quantized: Option<f64>) -> WeightSummary {
        let mut summary = WeightSummary::default();
        let (h, kv, i, v) = (4096usize, 1024usize, 14336usize, 128256usize);
        let stored =
            |dims: &[usize]| quantized.map(|b| (dims.iter().product::<usize>() as f64 * b) as u64);
        summary.add("token_embd.weight", &[v, h], stored(&[v, h]));
        summary.add("output.weight", &[v, h], stored(&[v, h]));
        summary.add("output_norm.weight", &[h], None);
        for layer in 0..32 {
            for (name, dims) in [
                ("attn_q", [h, h]),
                ("attn_k", [kv, h]),
                ("attn_v", [kv, h]),
                ("attn_output", [h, h]),
                ("ffn_gate", [i, h]),
                ("ffn_up", [i, h]),
                ("ffn_down", [h, i]),
            ] {
                let name = format!("blk.{layer}.{name}.weight");
                summary.add(&name, &dims, stored(&dims));
            }
            summary.add(&format!("blk.{layer}.attn_norm.weight"), &[h], None);
            summary.add(&format!("blk.{layer}.ffn_norm.weight"), &[h], None);
        }
        summary
    }

    fn request(gguf: bool, weights: WeightPolicy, precision: Precision) -> LoadRequest {
        LoadRequest {
            weights,
            precision,
            adapt_precision: false,
            gguf,
        }
    }

    #[test]
    fn llama3_8b_sizes() {
        let s = llama3_8b(Some(4.5 / 8.0));
        assert_eq!(s.layers, 32);
        assert_eq!(s.kv_dim, 1024);
        assert_eq!((s.hidden, s.vocab), (4096, 128256));
        // 8.03B parameters, as published.
        assert!(
            (s.params() as f64 / 1e9 - 8.03).abs() < 0.01,
            "{}",
            s.params()
        );
        // f32: every weight at 4 bytes (~29.9 GiB).
        let f32_gib = s.weight_bytes(Layout::F32) as f64 / G as f64;
        assert!((f32_gib - 29.9).abs() < 0.1, "{f32_gib}");
        // Q4_K-like blocks (4.5 bits, 3.9 GiB with the head's) plus the f32 embedding
        // and the head's f32 rows (~2 GiB each): ~7.8 GiB.
        let stored_gib = s.weight_bytes(Layout::Stored) as f64 / G as f64;
        assert!((stored_gib - 7.85).abs() < 0.05, "{stored_gib}");
        // bf16 blocks (13 GiB) with f32 embedding and a head kept as stored.
        let bf16 = s.weight_bytes(Layout::Bf16);
        assert!(bf16 > s.weight_bytes(Layout::Stored) && bf16 < s.weight_bytes(Layout::F32));
        // Key/value cache: 2 * 32 * 1024 * 4 bytes per token, 4096 tokens = 1 GiB.
        // Plus 64 rows of logits, whatever the batch.
        let logits = 64 * 128256 * 4;
        assert_eq!(s.runtime_bytes(131072, 0) - OVERHEAD - logits, G);
        assert_eq!(s.runtime_bytes(1024, 0) - OVERHEAD - logits, G / 4);
        // Activations: 16 widths of the hidden size per token of a pass.
        let pass = s.runtime_bytes(1024, 2048) - s.runtime_bytes(1024, 0);
        assert_eq!(pass, 2048 * 16 * 4096 * 4);
    }

    #[test]
    fn candles_repacked_copy_is_counted_in_the_stored_layout() {
        // 16 rows of one Q4_K super-block (256 values): 16 blocks of 144 bytes stored,
        // one 3072-byte tile repacked on x86-64.
        let q4k = repacked_bytes(GgmlDType::Q4K, 16 * 256);
        let q6k = repacked_bytes(GgmlDType::Q6K, 16 * 256);
        if cfg!(target_arch = "x86_64") {
            assert_eq!((q4k, q6k), (3072, 5120));
        } else if cfg!(target_arch = "aarch64") {
            assert_eq!((q4k, q6k), (16 * 144, 16 * 210));
        }
        // SmolLM2's Q4_1 and float types are used as stored.
        assert_eq!(repacked_bytes(GgmlDType::Q4_1, 16 * 256), 0);
        assert_eq!(repacked_bytes(GgmlDType::F32, 16 * 256), 0);
        // The stored layout holds both copies; the others convert and drop the blocks.
        let mut s = llama3_8b(Some(4.5 / 8.0));
        let before = s.weight_bytes(Layout::Stored);
        let bf16 = s.weight_bytes(Layout::Bf16);
        s.block_repack_bytes = 6 * G;
        assert_eq!(s.weight_bytes(Layout::Stored), before + 6 * G);
        assert_eq!(s.weight_bytes(Layout::Bf16), bf16);
    }

    #[test]
    fn quantized_gguf_is_kept_as_stored_when_f32_does_not_fit() {
        let s = llama3_8b(Some(4.5 / 8.0));
        let auto = request(true, WeightPolicy::Auto, Precision::F32);
        // 24 GB machine, 22 GiB available: f32 does not fit, the stored blocks do.
        let plan = plan_load("m", &s, &auto, Some(22 * G), 8192, 2048).unwrap();
        assert_eq!(plan.layout, Layout::Stored);
        assert_eq!(plan.weights, WeightPolicy::Quantized);
        assert_eq!(plan.precision, Precision::F32);
        let note = plan.note.unwrap();
        assert!(note.contains("kept quantized"), "{note}");
        // A big machine dequantises as before.
        let plan = plan_load("m", &s, &auto, Some(64 * G), 8192, 2048).unwrap();
        assert_eq!(plan.layout, Layout::F32);
        assert_eq!(plan.weights, WeightPolicy::F32);
        assert_eq!(plan.note, None);
    }

    #[test]
    fn explicit_f32_that_does_not_fit_is_an_error_naming_need_and_options() {
        let s = llama3_8b(Some(4.5 / 8.0));
        let forced = request(true, WeightPolicy::F32, Precision::F32);
        let error = plan_load("big", &s, &forced, Some(22 * G), 8192, 2048)
            .unwrap_err()
            .to_string();
        assert!(error.contains("'big'"), "{error}");
        assert!(error.contains("8.0B parameters"), "{error}");
        assert!(error.contains("22.0 GiB is available"), "{error}");
        assert!(error.contains("--precision bf16"), "{error}");
        assert!(error.contains("--weights quantized"), "{error}");
        // Nothing fits in 4 GiB, even kept quantized.
        let auto = request(true, WeightPolicy::Auto, Precision::F32);
        let error = plan_load("big", &s, &auto, Some(4 * G), 8192, 2048)
            .unwrap_err()
            .to_string();
        assert!(error.contains("kept quantized"), "{error}");
    }

    #[test]
    fn safetensors_fall_back_to_bf16_only_when_precision_is_auto() {
        let s = llama3_8b(None);
        assert!(!s.quantized);
        let mut auto = request(false, WeightPolicy::Auto, Precision::F32);
        auto.adapt_precision = true;
        let plan = plan_load("m", &s, &auto, Some(22 * G), 8192, 2048).unwrap();
        assert_eq!(plan.layout, Layout::Bf16);
        assert_eq!(plan.precision, Precision::Bf16);
        assert!(
            plan.need < 22 * G && plan.need > 16 * G,
            "{}",
            gib(plan.need)
        );
        assert!(plan.note.unwrap().contains("bf16"));
        // Explicit f32: no silent change.
        let explicit = request(false, WeightPolicy::Auto, Precision::F32);
        assert!(plan_load("m", &s, &explicit, Some(22 * G), 8192, 2048).is_err());
        // Small models load as before.
        let mut small = WeightSummary::default();
        small.add("model.embed_tokens.weight", &[1000, 64], None);
        small.add("model.layers.0.self_attn.k_proj.weight", &[64, 64], None);
        let plan = plan_load("s", &small, &auto, Some(22 * G), 8192, 2048).unwrap();
        assert_eq!((plan.layout, plan.note), (Layout::F32, None));
    }

    #[test]
    fn gguf_bf16_converts_from_kept_blocks_unless_f32_is_forced() {
        let s = llama3_8b(Some(4.5 / 8.0));
        let bf16 = request(true, WeightPolicy::Auto, Precision::Bf16);
        let plan = plan_load("m", &s, &bf16, Some(22 * G), 8192, 2048).unwrap();
        assert_eq!(
            (plan.weights, plan.precision),
            (WeightPolicy::Quantized, Precision::Bf16)
        );
        assert!(plan.note.unwrap().contains("block by block"));
        // Where the f32 model fits, as before: dequantised, then converted.
        let plan = plan_load("m", &s, &bf16, Some(64 * G), 8192, 2048).unwrap();
        assert_eq!((plan.weights, plan.note), (WeightPolicy::F32, None));
        // Dequantising everything to f32 first peaks at the f32 size.
        let forced = request(true, WeightPolicy::F32, Precision::Bf16);
        assert!(plan_load("m", &s, &forced, Some(22 * G), 8192, 2048).is_err());
    }

    #[test]
    fn unknown_memory_loads_as_asked() {
        let s = llama3_8b(Some(4.5 / 8.0));
        let auto = request(true, WeightPolicy::Auto, Precision::F32);
        let plan = plan_load("m", &s, &auto, None, 8192, 2048).unwrap();
        assert_eq!(
            (plan.weights, plan.precision),
            (auto.weights, Precision::F32)
        );
    }

    #[test]
    fn card_listing_memory() {
        // Llama-3.1-8B: 8.03B parameters, 1.05B of them in the embedding and head.
        let list = weight_memory_by_precision(
            8_030_261_248,
            1_050_673_152,
            Some((4_920_734_016, "q4_k_m")),
        );
        let get = |name| list.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(get("f32"), 32_121_044_992);
        assert_eq!(get("bf16"), 2 * 6_979_588_096 + 4 * 1_050_673_152);
        assert_eq!(get("int8"), 6_979_588_096 + 4 * 1_050_673_152);
        // Kept as stored, candle's Q4_K tiles (4/3 of the blocks' bytes on x86-64) come on
        // top: 8.7 GiB of file and f32 embedding grew to 14.5 GiB in a run before this.
        let stored = get("stored") as f64;
        let without_copy = (4_920_734_016u64 + 4 * 1_050_673_152) as f64;
        if cfg!(target_arch = "x86_64") {
            let copy = 4_920_734_016.0 * (6_979_588_096.0 / 8_030_261_248.0) * 4.0 / 3.0;
            assert!((stored - without_copy - copy).abs() < 1.0, "{stored}");
            assert!(stored / G as f64 > 13.5, "{}", stored / G as f64);
        }
        // Q4_1 (SmolLM2's file) is multiplied as stored: no copy on x86-64.
        let q4_1 = weight_memory_by_precision(100, 20, Some((60, "q4_1")));
        if cfg!(target_arch = "x86_64") {
            assert_eq!(q4_1[3], ("stored", 60 + 80));
        }
        assert_eq!(weight_memory_by_precision(10, 2, None).len(), 3);
    }

    #[test]
    fn meminfo_is_parsed() {
        let text =
            "MemTotal:       24605756 kB\nMemFree:         1000 kB\nMemAvailable:   22000000 kB\n";
        assert_eq!(parse_meminfo(text), Some(22000000 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_meminfo("MemAvailable: x kB\n"), None);
    }

    #[test]
    fn safetensors_header_is_read_without_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let header = br#"{"__metadata__":{"format":"pt"},"model.embed_tokens.weight":{"dtype":"BF16","shape":[10,4],"data_offsets":[0,80]},"model.layers.0.self_attn.k_proj.weight":{"dtype":"BF16","shape":[2,4],"data_offsets":[80,96]},"model.norm.weight":{"dtype":"BF16","shape":[4],"data_offsets":[96,104]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend(std::iter::repeat_n(0u8, 104));
        std::fs::write(&path, &bytes).unwrap();
        let s = WeightSummary::from_safetensors(&[path]).unwrap();
        assert_eq!(
            (s.embedding_params, s.block_params, s.other_params),
            (40, 8, 4)
        );
        assert_eq!((s.layers, s.kv_dim, s.vocab, s.hidden), (1, 2, 10, 4));
        assert_eq!(s.block_kept_bytes, 32);
        let error = WeightSummary::from_safetensors(&[dir.path().join("none")]).unwrap_err();
        assert!(format!("{error:#}").contains("none"), "{error:#}");
    }
}

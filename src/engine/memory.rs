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
//! The estimate ([`Need`]): weights as they will be held (decoder-block matrices in the
//! chosen layout; embeddings, norms and an f32 output head as the loaders keep them), a
//! fixed [`OVERHEAD`], and the larger of what loading holds beside them (one block's
//! matrices in f32: the loaders convert block by block) and what a run holds: keys and
//! values up to the decoder's budget (`--max-arena-mib`, which bounds generating rows
//! and their prefix cache together, and the level plan's arena; at least [`KV_TOKENS`]
//! positions) and activations of one forward pass of `max_batch_tokens`.
//! [`generation_kv_bytes`] says what budget a generation workload needs; where the
//! default budget does not fit beside the weights, the plan lowers it and says so. GPUs
//! are not checked (their memory is not `MemAvailable`).

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::{gguf_file, GgmlDType};

use super::load::LoadOptions;
use crate::arch::{Precision, WeightPolicy};
use crate::runtime::{ResolvedModel, WeightFormat};

/// Tokens of key/value cache counted at least (a long judge prompt scored along its own
/// path; the context window when it is shorter), and the least key/value budget a plan
/// lowers the default to.
pub const KV_TOKENS: u64 = 4096;

/// Bytes counted for everything else (tokeniser, code, allocator slack, buffers).
pub const OVERHEAD: u64 = 512 << 20;

/// Share of the available memory a plan may use (the rest absorbs estimate errors).
const USABLE_SHARE: f64 = 0.95;

const GIB: f64 = (1u64 << 30) as f64;

/// What one position of keys and values costs a model, all layers together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    /// Decoder blocks.
    pub layers: u64,
    /// Width of one block's keys (and values): `kv_heads * head_dim`.
    pub kv_dim: u64,
    /// Bytes of one element: the activations' type ([`kv_dtype_bytes`]).
    pub dtype_bytes: u64,
}

impl KvShape {
    /// The shape of `layers` blocks of `kv_heads` key/value heads of `head_dim`.
    pub fn new(layers: u64, kv_heads: u64, head_dim: u64, dtype_bytes: u64) -> Self {
        Self {
            layers,
            kv_dim: kv_heads * head_dim,
            dtype_bytes,
        }
    }

    /// Bytes of the keys and values of one position, every layer.
    pub fn position_bytes(&self) -> u64 {
        2 * self.layers * self.kv_dim * self.dtype_bytes
    }
}

/// Bytes of one key/value element for a model run at `precision`: the activations' type.
/// On the CPU the activations are f32 at every precision (bf16 and int8 are the weights'
/// types); on a GPU `--precision bf16` runs bf16 activations.
pub fn kv_dtype_bytes(precision: Precision, cpu: bool) -> u64 {
    match precision {
        Precision::Bf16 if !cpu => 2,
        _ => 4,
    }
}

/// One generating row as the decoder counts it: its prompt, the start of it that the row
/// before it (in prompt order, prefilled through the same trie) already holds, and its
/// token bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowExtent {
    pub prompt: u64,
    pub shared_with_previous: u64,
    pub max_tokens: u64,
}

/// Key/value positions that rows hold at most: each row its prompt past what it shares
/// with the row before it, and its whole token bound. The decoder's admission
/// (`engine/decoder/generate.rs`) counts its rows with this, and [`generation_kv_bytes`]
/// a workload, so the two cannot disagree.
pub fn held_positions(rows: impl IntoIterator<Item = RowExtent>) -> u64 {
    rows.into_iter()
        .map(|row| row.prompt.saturating_sub(row.shared_with_previous) + row.max_tokens)
        .sum()
}

/// A generation workload: `rows` generations of at most `max_tokens` tokens after prompts
/// of `prompt_tokens` tokens whose first `shared_tokens` are the same for every row (a
/// document's article before its candidates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerationLoad {
    pub rows: u64,
    pub prompt_tokens: u64,
    pub shared_tokens: u64,
    pub max_tokens: u64,
}

/// Bytes of keys and values that generating `load` at once holds at most on a model of
/// `shape`: the shared prefix once, each row's own part of its prompt, and each row's
/// whole token bound (`shared + rows * (prompt - shared + max_tokens)` positions). The
/// key/value budget (`--max-arena-mib`) that runs every row of `load` together.
pub fn generation_kv_bytes(shape: &KvShape, load: &GenerationLoad) -> u64 {
    let shared = load.shared_tokens.min(load.prompt_tokens);
    let rows = (0..load.rows).map(|row| RowExtent {
        prompt: load.prompt_tokens,
        shared_with_previous: if row == 0 { 0 } else { shared },
        max_tokens: load.max_tokens,
    });
    shape.position_bytes() * held_positions(rows)
}

/// Capacity of the prefix cache a generating call keeps for itself when its caller gives
/// none: half the key/value budget. The decoder counts the cache's bytes inside the budget
/// (rows are admitted while the rows and the cache together fit), so the budget bounds
/// both.
pub fn own_prefix_cache_bytes(max_arena_bytes: usize) -> usize {
    max_arena_bytes / 2
}

/// The run a plan sizes its runtime memory for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunBudget {
    /// The model's context window (tokens).
    pub context: u64,
    /// Tokens of one forward pass (`--max-batch-tokens`).
    pub batch_tokens: u64,
    /// Bytes of one key/value element ([`kv_dtype_bytes`]).
    pub kv_dtype_bytes: u64,
    /// The decoder's key/value budget (`--max-arena-mib`): what generating rows and their
    /// prefix cache, or the level plan's arena, may hold.
    pub max_arena_bytes: u64,
    /// Whether the budget is the default, which the plan may lower to what fits (with a
    /// note); an explicit `--max-arena-mib` is kept, and an error says what would fit.
    pub adjustable_arena: bool,
}

/// The parts of a plan's estimate, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    /// The weights as they will be held.
    pub weights: u64,
    /// Bytes held beside the weights while loading only: one decoder block's matrices in
    /// f32 while the loaders convert it (the whole f32 model less the weights where a GGUF
    /// file is dequantised before converting).
    pub loading: u64,
    /// Keys and values: the decoder's budget, or [`KV_TOKENS`] positions where larger.
    pub kv: u64,
    /// Activations of one forward pass and logits of 64 rows.
    pub activations: u64,
    /// [`OVERHEAD`].
    pub overhead: u64,
}

impl Need {
    /// Peak bytes: the weights and the overhead, and the larger of what loading adds and
    /// the keys, values and activations of a run (never held at the same time).
    pub fn total(&self) -> u64 {
        self.weights + self.overhead + self.loading.max(self.kv + self.activations)
    }

    /// "18.8 GiB: 16.9 GiB weights, 1.4 GiB keys/values, ..." for notes and errors.
    pub fn describe(&self) -> String {
        format!(
            "{}: {} weights, {} keys/values, {} activations, {} other ({} more while \
             loading, before any keys/values)",
            gib(self.total()),
            gib(self.weights),
            gib(self.kv),
            gib(self.activations),
            gib(self.overhead),
            gib(self.loading)
        )
    }
}

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

    /// The shape of one position of keys and values, in elements of `dtype_bytes`.
    pub fn kv_shape(&self, dtype_bytes: u64) -> KvShape {
        KvShape {
            layers: self.layers,
            kv_dim: self.kv_dim,
            dtype_bytes,
        }
    }

    /// Bytes of [`KV_TOKENS`] positions of keys and values (the context window where
    /// shorter): a long prompt scored along its own path, the least a run holds.
    pub fn kv_estimate_bytes(&self, run: &RunBudget) -> u64 {
        self.kv_shape(run.kv_dtype_bytes).position_bytes() * run.context.min(KV_TOKENS)
    }

    /// Bytes of the activations of one forward pass of `batch_tokens` tokens: hidden
    /// states and the attention and MLP intermediates (~16 widths of the hidden size per
    /// token), and logits for up to 64 rows.
    pub fn activation_bytes(&self, batch_tokens: u64) -> u64 {
        (batch_tokens * 16 * self.hidden + 64 * self.vocab) * 4
    }

    /// The estimate's parts for loading in `layout` and running `run` with a key/value
    /// budget of `arena` bytes: the held weights, one block's matrices in f32 while it is
    /// converted, keys and values (the budget, or [`Self::kv_estimate_bytes`] where that is
    /// more), activations and [`OVERHEAD`].
    pub fn need(&self, layout: Layout, run: &RunBudget, arena: u64) -> Need {
        Need {
            weights: self.weight_bytes(layout),
            loading: 4 * self.block_params / self.layers.max(1),
            kv: arena.max(self.kv_estimate_bytes(run)),
            activations: self.activation_bytes(run.batch_tokens),
            overhead: OVERHEAD,
        }
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
    /// The key/value budget (`--max-arena-mib`) is the default: the plan may lower it to
    /// what fits, and says so.
    pub adapt_arena: bool,
}

/// The plan for loading a resolved decoder-only model on `cpu` (GPUs: as asked).
pub fn plan_decoder(
    resolved: &ResolvedModel,
    options: &LoadOptions,
    cpu: bool,
) -> Result<LoadPlan> {
    let gguf = resolved.format == WeightFormat::Gguf;
    let max_arena_bytes = options.decoder.budget.max_arena_bytes as u64;
    if !cpu {
        return Ok(LoadPlan {
            weights: options.weights,
            precision: options.precision,
            layout: if gguf { Layout::Stored } else { Layout::F32 },
            need: 0,
            parts: Need::default(),
            max_arena_bytes,
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
    let run = RunBudget {
        context: resolved.context_window as u64,
        batch_tokens: options.decoder.budget.max_batch_tokens as u64,
        kv_dtype_bytes: kv_dtype_bytes(options.precision, cpu),
        max_arena_bytes,
        adjustable_arena: options.memory.adapt_arena,
    };
    plan_load(
        &resolved.name,
        &summary,
        &request,
        options.memory.available.or_else(available_memory),
        &run,
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
    /// Estimated peak bytes ([`Need::total`] of `parts`).
    pub need: u64,
    /// The estimate's parts.
    pub parts: Need,
    /// The decoder's key/value budget to run with (`BatchBudget::max_arena_bytes`): the
    /// one asked for, or the default lowered to what fits (said in `note`). The plan counts
    /// exactly this in `parts.kv` (or [`KV_TOKENS`] positions where more).
    pub max_arena_bytes: u64,
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
/// bytes (`None`: unknown, load as asked), for runs of `run`. Layouts are tried most exact
/// first, each with the decoder's key/value budget as given and then, where that budget is
/// the default, lowered to what fits (not below [`KV_TOKENS`] positions): a narrower batch
/// gives the same results, another precision does not.
pub fn plan_load(
    name: &str,
    summary: &WeightSummary,
    request: &LoadRequest,
    available: Option<u64>,
    run: &RunBudget,
) -> Result<LoadPlan> {
    let options = candidates(request);
    let need_of = |option: usize, arena: u64| -> Need {
        let (layout, weights, _) = options[option];
        let mut need = summary.need(layout, run, arena);
        if weights == WeightPolicy::F32 && layout != Layout::F32 {
            // Dequantised to f32 first, converted after: the f32 model is the peak of
            // loading.
            need.loading = summary.weight_bytes(Layout::F32) + need.loading - need.weights;
        }
        need
    };
    let full = run.max_arena_bytes;
    let plan = |option: usize, arena: u64, note: Option<String>| {
        let (layout, weights, precision) = options[option];
        let parts = need_of(option, arena);
        LoadPlan {
            weights,
            precision,
            layout,
            need: parts.total(),
            parts,
            max_arena_bytes: arena,
            note,
        }
    };
    let Some(available) = available else {
        let mut chosen = plan(0, full, None);
        if chosen.weights == WeightPolicy::F32 {
            chosen.weights = request.weights;
        }
        return Ok(chosen);
    };
    let usable = (available as f64 * USABLE_SHARE) as u64;
    // The largest budget (whole MiB, at most `full`) with which `option` fits, if that is
    // at least the least one worth running.
    let fitting_arena = |option: usize| -> Option<u64> {
        let least = summary.kv_estimate_bytes(run);
        if need_of(option, least).total() > usable {
            return None;
        }
        let fixed = need_of(option, 0);
        let room = usable.checked_sub(fixed.weights + fixed.overhead + fixed.activations)?;
        let arena = (room.min(full) >> 20) << 20;
        (arena >= least).then_some(arena)
    };
    for option in 0..options.len() {
        let layout = options[option].0;
        let layout_note = (option > 0).then(|| {
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
                "model '{name}': {first} would need about {}, {} is available: loading {chosen}",
                gib(need_of(0, full).total()),
                gib(available),
            )
        });
        let need = need_of(option, full);
        if need.total() <= usable {
            let note = layout_note.map(|n| format!("{n} (about {})", gib(need.total())));
            return Ok(plan(option, full, note));
        }
        if !run.adjustable_arena {
            continue;
        }
        if let Some(arena) = fitting_arena(option) {
            let lowered = need_of(option, arena);
            let arena_note = format!(
                "model '{name}' with {layout} and the default key/value budget \
                 (--max-arena-mib {}) would need about {}, {} is available: generating with \
                 --max-arena-mib {} (about {}; rows wait for memory, the results are the same)",
                full >> 20,
                gib(need.total()),
                gib(available),
                arena >> 20,
                lowered.describe()
            );
            let note = match layout_note {
                Some(first) => format!("{first}; {arena_note}"),
                None => arena_note,
            };
            return Ok(plan(option, arena, Some(note)));
        }
    }
    let tried: Vec<String> = options
        .iter()
        .enumerate()
        .map(|(option, (layout, _, _))| {
            format!("{} with {layout}", gib(need_of(option, full).total()))
        })
        .collect();
    // An explicit budget that is what does not fit: the budget that would.
    let smaller_budget = if run.adjustable_arena {
        None
    } else {
        (0..options.len()).find_map(|option| {
            fitting_arena(option).map(|arena| {
                format!(
                    "; --max-arena-mib {} (the key/value budget; {} fits with it)",
                    arena >> 20,
                    options[option].0
                )
            })
        })
    };
    let other = |layout: Layout| gib(summary.need(layout, run, full).total());
    bail!(
        "model '{name}' ({:.1}B parameters) needs more memory than is available: about \
         {}, but {} is available (MemAvailable; {:.0}% of it may be used); the first: {}. \
         Options: --precision bf16 (~{}) or int8 (~{}) for the decoder blocks; --weights \
         quantized to keep a GGUF file's blocks as stored{}{}; a quantized GGUF of the model; \
         or free memory",
        summary.params() as f64 / 1e9,
        tried.join(", "),
        gib(available),
        USABLE_SHARE * 100.0,
        need_of(0, full).describe(),
        other(Layout::Bf16),
        other(Layout::Int8),
        if summary.quantized {
            format!(" (~{})", other(Layout::Stored))
        } else {
            String::new()
        },
        smaller_budget.unwrap_or_default()
    );
}

/// What the weights of a model need at each precision, from its parameter counts alone
/// (`embedding`: the embedding's and a separate head's, held in f32 at every precision;
/// `stored`: the size of a GGUF file and its card's block type, e.g. `q4_k_m`, kept as
/// stored, plus those held in f32, plus the copy candle makes of the blocks at the first
/// product ([`repacked_bytes`], counted at the block type's ratio over the file's share of
/// block parameters): for model listings, before anything is downloaded. Runtime memory
/// (keys and values up to the decoder's budget, activations: [`WeightSummary::need`])
/// comes on top.
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

    /// A run with the default key/value budget (4 GiB, adjustable), f32 keys and values.
    fn run(context: u64, batch_tokens: u64) -> RunBudget {
        RunBudget {
            context,
            batch_tokens,
            kv_dtype_bytes: 4,
            max_arena_bytes: 4 * G,
            adjustable_arena: true,
        }
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
        // Key/value cache: 2 * 32 * 1024 * 4 bytes per token, 4096 tokens = 1 GiB, at
        // least (a shorter context window: less).
        assert_eq!(s.kv_estimate_bytes(&run(131072, 0)), G);
        assert_eq!(s.kv_estimate_bytes(&run(1024, 0)), G / 4);
        // Activations: 16 widths of the hidden size per token of a pass, plus 64 rows of
        // logits whatever the batch.
        let logits = 64 * 128256 * 4;
        assert_eq!(s.activation_bytes(0), logits);
        assert_eq!(s.activation_bytes(2048) - logits, 2048 * 16 * 4096 * 4);
        // The decoder's budget counts where it is more than the least.
        let need = s.need(Layout::Bf16, &run(8192, 2048), 4 * G);
        assert_eq!(need.kv, 4 * G);
        assert_eq!(s.need(Layout::Bf16, &run(8192, 2048), G / 2).kv, G);
        // Loading (one block in f32, 0.8 GiB) and running are not at the same time.
        assert_eq!(need.loading, 4 * s.block_params / 32);
        assert_eq!(
            need.total(),
            need.weights + OVERHEAD + 4 * G + s.activation_bytes(2048)
        );
    }

    /// Llama-3-8B's keys and values: 32 layers, 8 heads of 128.
    fn llama3_8b_kv(dtype_bytes: u64) -> KvShape {
        KvShape::new(32, 8, 128, dtype_bytes)
    }

    /// 16 candidates' 512-token feedbacks after 1,000-token prompts that share an
    /// 800-token article.
    const SIXTEEN_FEEDBACKS: GenerationLoad = GenerationLoad {
        rows: 16,
        prompt_tokens: 1000,
        shared_tokens: 800,
        max_tokens: 512,
    };

    #[test]
    fn key_value_bytes_of_a_generation_workload() {
        // One position, every layer: keys and values of 8 * 128 elements in 32 layers.
        let f32 = llama3_8b_kv(4);
        let bf16 = llama3_8b_kv(2);
        assert_eq!(f32.position_bytes(), 2 * 32 * 1024 * 4);
        assert_eq!(f32.position_bytes(), 256 << 10);
        assert_eq!(bf16.position_bytes(), 128 << 10);
        // The article once (800), each candidate's own 200 prompt tokens and 512 generated:
        // 800 + 16 * 712 = 12,192 positions, 2.98 GiB in f32, 1.49 GiB in bf16.
        assert_eq!(generation_kv_bytes(&f32, &SIXTEEN_FEEDBACKS), 3_196_059_648);
        assert_eq!(
            generation_kv_bytes(&bf16, &SIXTEEN_FEEDBACKS),
            1_598_029_824
        );
        // Nothing shared: 16 * 1,512 positions, 5.9 GiB in f32.
        let alone = GenerationLoad {
            shared_tokens: 0,
            ..SIXTEEN_FEEDBACKS
        };
        assert_eq!(generation_kv_bytes(&f32, &alone), 6_341_787_648);
        // One row holds its prompt and its bound; a share longer than the prompt is the
        // prompt; no rows hold nothing.
        let one = GenerationLoad {
            rows: 1,
            ..SIXTEEN_FEEDBACKS
        };
        assert_eq!(generation_kv_bytes(&bf16, &one), 1512 * 131_072);
        let whole = GenerationLoad {
            shared_tokens: 5000,
            ..SIXTEEN_FEEDBACKS
        };
        assert_eq!(
            generation_kv_bytes(&f32, &whole),
            (1000 + 16 * 512) * 262_144
        );
        let none = GenerationLoad {
            rows: 0,
            ..SIXTEEN_FEEDBACKS
        };
        assert_eq!(generation_kv_bytes(&f32, &none), 0);
        // The decoder's count of rows (`held_positions`) is the same arithmetic.
        let rows = [
            RowExtent {
                prompt: 1000,
                shared_with_previous: 0,
                max_tokens: 512,
            },
            RowExtent {
                prompt: 1000,
                shared_with_previous: 800,
                max_tokens: 512,
            },
        ];
        assert_eq!(held_positions(rows), 1512 + 712);
        // Keys and values are the activations' type: f32 on the CPU at every precision.
        assert_eq!(kv_dtype_bytes(Precision::Bf16, true), 4);
        assert_eq!(kv_dtype_bytes(Precision::Int8, true), 4);
        assert_eq!(kv_dtype_bytes(Precision::Bf16, false), 2);
        assert_eq!(kv_dtype_bytes(Precision::F32, false), 4);
    }

    #[test]
    fn an_8b_judge_grading_16_candidates_fits_24_gb_with_int8_or_bf16_weights() {
        let s = llama3_8b(None);
        // The budget that runs all 16 feedbacks at once, f32 keys and values (CPU).
        let kv = generation_kv_bytes(&s.kv_shape(4), &SIXTEEN_FEEDBACKS);
        assert_eq!(kv, 3_196_059_648);
        let run = RunBudget {
            max_arena_bytes: kv,
            adjustable_arena: false,
            ..run(8192, 2048)
        };
        // Activations of a 2,048-token pass and 64 rows of logits; 0.5 GiB overhead.
        let activations = (2048 * 16 * 4096 + 64 * 128_256) * 4;
        let weights = |layout| s.weight_bytes(layout);
        // bf16 blocks (2 bytes a weight) with the embedding and head in f32: 16.9 GiB.
        assert_eq!(weights(Layout::Bf16), 18_162_401_280);
        // int8 blocks (a byte a weight and an f32 scale a row): 10.4 GiB.
        assert_eq!(weights(Layout::Int8), 11_210_342_400);
        assert_eq!(weights(Layout::F32), 32_121_044_992);
        // A 24 GiB machine with 23 GiB available (95% of it usable: 21.85 GiB).
        let available = 23 * G;
        for (precision, layout, need) in [
            (Precision::Int8, Layout::Int8, 15_512_977_408u64), // 14.4 GiB
            (Precision::Bf16, Layout::Bf16, 22_465_036_288),    // 20.9 GiB
        ] {
            let asked = request(false, WeightPolicy::Auto, precision);
            let plan = plan_load("8b", &s, &asked, Some(available), &run).unwrap();
            assert_eq!(plan.layout, layout);
            assert_eq!(plan.need, weights(layout) + OVERHEAD + kv + activations);
            assert_eq!(plan.need, need);
            // The plan counts the decoder's budget, unchanged.
            assert_eq!((plan.parts.kv, plan.max_arena_bytes), (kv, kv));
            assert_eq!(plan.note, None);
        }
        // f32 weights alone are 29.9 GiB.
        let f32 = request(false, WeightPolicy::Auto, Precision::F32);
        let error = plan_load("8b", &s, &f32, Some(available), &run)
            .unwrap_err()
            .to_string();
        assert!(error.contains("33.9 GiB with f32 weights"), "{error}");
        // bf16 needs 22.02 GiB available: with 22 GiB, 2,048-token passes leave 24 MiB too
        // little; 1,024-token passes fit.
        let bf16 = request(false, WeightPolicy::Auto, Precision::Bf16);
        let error = plan_load("8b", &s, &bf16, Some(22 * G), &run)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--max-arena-mib 3025"), "{error}");
        let shorter = RunBudget {
            batch_tokens: 1024,
            ..run
        };
        assert!(plan_load("8b", &s, &bf16, Some(22 * G), &shorter).is_ok());
        // int8 fits 16 GiB available.
        let int8 = request(false, WeightPolicy::Auto, Precision::Int8);
        assert!(plan_load("8b", &s, &int8, Some(16 * G), &run).is_ok());
    }

    #[test]
    fn the_default_key_value_budget_is_lowered_to_what_fits_and_said() {
        let s = llama3_8b(None);
        let bf16 = request(false, WeightPolicy::Auto, Precision::Bf16);
        // 22 GiB available: the default 4 GiB does not fit beside bf16 weights; 95% of
        // 22 GiB less the weights, overhead and activations leaves 3,025 MiB.
        let plan = plan_load("8b", &s, &bf16, Some(22 * G), &run(8192, 2048)).unwrap();
        assert_eq!(plan.layout, Layout::Bf16);
        assert_eq!(plan.max_arena_bytes, 3025 << 20);
        assert_eq!(plan.parts.kv, plan.max_arena_bytes);
        assert!(plan.need <= (22.0 * 0.95 * G as f64) as u64);
        let note = plan.note.unwrap();
        assert!(note.contains("--max-arena-mib 3025"), "{note}");
        assert!(note.contains("--max-arena-mib 4096"), "{note}");
        assert!(note.contains("keys/values"), "{note}");
        // 3,025 MiB runs 15 of the 16 feedbacks at once (1,512 positions for the first,
        // 712 for each after it, 256 KiB each).
        let positions = plan.max_arena_bytes / s.kv_shape(4).position_bytes();
        assert_eq!(1 + (positions - 1512) / 712, 15);
        // Where 4 GiB fits, it stays and nothing is said.
        let plan = plan_load("8b", &s, &bf16, Some(24 * G), &run(8192, 2048)).unwrap();
        assert_eq!((plan.max_arena_bytes, plan.note), (4 * G, None));
        // Not below 4,096 positions (1 GiB here): then the layout does not fit.
        let error = plan_load("8b", &s, &bf16, Some(19 * G), &run(8192, 2048))
            .unwrap_err()
            .to_string();
        assert!(error.contains("keys/values"), "{error}");
        // An explicit budget is kept: the error names the one that fits.
        let explicit = RunBudget {
            adjustable_arena: false,
            ..run(8192, 2048)
        };
        let error = plan_load("8b", &s, &bf16, Some(22 * G), &explicit)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--max-arena-mib 3025"), "{error}");
        // With --precision auto, f32 is not traded for a budget: bf16 with it lowered.
        let mut auto = request(false, WeightPolicy::Auto, Precision::F32);
        auto.adapt_precision = true;
        let plan = plan_load("8b", &s, &auto, Some(22 * G), &run(8192, 2048)).unwrap();
        assert_eq!(
            (plan.layout, plan.max_arena_bytes),
            (Layout::Bf16, 3025 << 20)
        );
        let note = plan.note.unwrap();
        assert!(
            note.contains("loading bf16") && note.contains("3025"),
            "{note}"
        );
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
        let plan = plan_load("m", &s, &auto, Some(22 * G), &run(8192, 2048)).unwrap();
        assert_eq!(plan.layout, Layout::Stored);
        assert_eq!(plan.weights, WeightPolicy::Quantized);
        assert_eq!(plan.precision, Precision::F32);
        let note = plan.note.unwrap();
        assert!(note.contains("kept quantized"), "{note}");
        // A big machine dequantises as before.
        let plan = plan_load("m", &s, &auto, Some(64 * G), &run(8192, 2048)).unwrap();
        assert_eq!(plan.layout, Layout::F32);
        assert_eq!(plan.weights, WeightPolicy::F32);
        assert_eq!(plan.note, None);
    }

    #[test]
    fn explicit_f32_that_does_not_fit_is_an_error_naming_need_and_options() {
        let s = llama3_8b(Some(4.5 / 8.0));
        let forced = request(true, WeightPolicy::F32, Precision::F32);
        let error = plan_load("big", &s, &forced, Some(22 * G), &run(8192, 2048))
            .unwrap_err()
            .to_string();
        assert!(error.contains("'big'"), "{error}");
        assert!(error.contains("8.0B parameters"), "{error}");
        assert!(error.contains("22.0 GiB is available"), "{error}");
        assert!(error.contains("--precision bf16"), "{error}");
        assert!(error.contains("--weights quantized"), "{error}");
        // Nothing fits in 4 GiB, even kept quantized.
        let auto = request(true, WeightPolicy::Auto, Precision::F32);
        let error = plan_load("big", &s, &auto, Some(4 * G), &run(8192, 2048))
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
        let plan = plan_load("m", &s, &auto, Some(22 * G), &run(8192, 2048)).unwrap();
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
        assert!(plan_load("m", &s, &explicit, Some(22 * G), &run(8192, 2048)).is_err());
        // Small models load as before.
        let mut small = WeightSummary::default();
        small.add("model.embed_tokens.weight", &[1000, 64], None);
        small.add("model.layers.0.self_attn.k_proj.weight", &[64, 64], None);
        let plan = plan_load("s", &small, &auto, Some(22 * G), &run(8192, 2048)).unwrap();
        assert_eq!((plan.layout, plan.note), (Layout::F32, None));
    }

    #[test]
    fn gguf_bf16_converts_from_kept_blocks_unless_f32_is_forced() {
        let s = llama3_8b(Some(4.5 / 8.0));
        let bf16 = request(true, WeightPolicy::Auto, Precision::Bf16);
        let plan = plan_load("m", &s, &bf16, Some(22 * G), &run(8192, 2048)).unwrap();
        assert_eq!(
            (plan.weights, plan.precision),
            (WeightPolicy::Quantized, Precision::Bf16)
        );
        assert!(plan.note.unwrap().contains("block by block"));
        // Where the f32 model fits, as before: dequantised, then converted.
        let plan = plan_load("m", &s, &bf16, Some(64 * G), &run(8192, 2048)).unwrap();
        assert_eq!((plan.weights, plan.note), (WeightPolicy::F32, None));
        // Dequantising everything to f32 first peaks at the f32 size.
        let forced = request(true, WeightPolicy::F32, Precision::Bf16);
        assert!(plan_load("m", &s, &forced, Some(22 * G), &run(8192, 2048)).is_err());
    }

    #[test]
    fn unknown_memory_loads_as_asked() {
        let s = llama3_8b(Some(4.5 / 8.0));
        let auto = request(true, WeightPolicy::Auto, Precision::F32);
        let plan = plan_load("m", &s, &auto, None, &run(8192, 2048)).unwrap();
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

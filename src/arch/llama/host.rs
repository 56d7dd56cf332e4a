//! The CPU forward pass on plain buffers: every layer's normalisation, products,
//! attention, gating and residual additions write into buffers the calling thread keeps
//! from pass to pass, so a pass allocates only what it returns (the final hidden states
//! and, when asked, the new keys/values).
//!
//! Built from tensor operations, each layer allocated a dozen outputs whose fresh pages
//! the kernel zeroed, ran SiLU through the library exponential per element, and added the
//! residual stream in separate passes: about a third of a reduced-precision pass on long
//! candidates. Here the residual additions are folded into the output and down products
//! (`Store::Add`), and normalisation and gating are our `pointwise` kernels. The
//! arithmetic is otherwise the tensor path's (same products, same attention kernel), so
//! results agree with it to rounding; it is taken for CPU models whose projections all
//! run on slices (f32 dense, bf16, int8), and the tensor path stays for the rest and for
//! other devices.
//!
//! The families' extras run here too: Gemma's embedding scale, norms after both blocks
//! (the block output goes to a buffer of its own, is normalised, then added) and GeGLU;
//! Qwen3's and Gemma 3's per-head query/key norms (in place on the projection); sliding
//! windows and soft-capped scores inside the attention kernel.

use std::cell::RefCell;

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use nlg_judge_kernels::attention::AttentionDims;
use nlg_judge_kernels::gemm::Store;
use nlg_judge_kernels::pointwise::{rms_norm, silu_gate};
use nlg_judge_kernels::reuse::with_reused;

use super::super::linear::with_cpu_values;
use super::time_split::{timed, Part};
use super::{
    segment, Activation, GateUpProjection, GroupPlan, LlamaModel, QkvProjection, RowGroup,
};

/// Per-token activations of one pass, grown to the largest pass seen and then reused.
#[derive(Default)]
struct Buffers {
    /// The residual stream, `(tokens, hidden)`.
    residual: Vec<f32>,
    /// Its normalised copy, input of the projections.
    normed: Vec<f32>,
    /// Query/key/value projection, `(tokens, q + 2 kv)`.
    qkv: Vec<f32>,
    /// Attention output, `(tokens, heads * head_dim)`.
    attended: Vec<f32>,
    /// Gate and up projections side by side, `(tokens, 2 * intermediate)`.
    gate_up: Vec<f32>,
    /// Gated activation, `(tokens, intermediate)`.
    activated: Vec<f32>,
    /// A block's output before its post-norm (Gemma), `(tokens, hidden)`.
    branch: Vec<f32>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// `buffer[..len]`, growing the buffer first if needed (never shrinking).
fn at_least(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
    &mut buffer[..len]
}

impl LlamaModel {
    /// The attention shape when [`forward_on_buffers`] can run this model: on the CPU,
    /// with the attention kernel, and every projection fused and runnable on slices.
    pub(super) fn buffer_path(&self) -> Option<AttentionDims> {
        if !self.attention_kernel {
            return None;
        }
        let dims = segment::kernel_dims(&self.config, &self.device)?;
        let slices = self.layers.iter().all(|layer| {
            matches!(&layer.qkv, QkvProjection::Fused(l) if l.runs_on_slices())
                && matches!(&layer.gate_up, GateUpProjection::Fused(l) if l.runs_on_slices())
                && layer.o.runs_on_slices()
                && layer.down.runs_on_slices()
        });
        slices.then_some(dims)
    }
}

/// A forward pass of the packed token `ids` of all `groups` (laid out by `plans`) on the
/// buffer path: returns the final-normalised hidden states `(tokens, hidden)` and fills
/// `new_kv` (one list of per-layer keys/values per group) when given.
pub(super) fn forward_on_buffers(
    model: &LlamaModel,
    dims: AttentionDims,
    ids: &[u32],
    groups: &[RowGroup],
    plans: &[GroupPlan],
    new_kv: Option<&mut Vec<Vec<(Tensor, Tensor)>>>,
) -> Result<Tensor> {
    with_reused(&BUFFERS, |buffers| {
        run_pass(model, dims, ids, groups, plans, new_kv, buffers)
    })
}

fn run_pass(
    model: &LlamaModel,
    dims: AttentionDims,
    ids: &[u32],
    groups: &[RowGroup],
    plans: &[GroupPlan],
    mut new_kv: Option<&mut Vec<Vec<(Tensor, Tensor)>>>,
    buffers: &mut Buffers,
) -> Result<Tensor> {
    let c = &model.config;
    let tokens = ids.len();
    let hidden = c.hidden_size;
    let eps = c.rms_norm_eps as f32;
    let q_width = c.num_heads * c.head_dim;
    let qkv_width = q_width + 2 * c.num_kv_heads * c.head_dim;
    let intermediate = c.intermediate_size;

    let Buffers {
        residual,
        normed,
        qkv,
        attended,
        gate_up,
        activated,
        branch,
    } = buffers;
    let residual = at_least(residual, tokens * hidden);
    let normed = at_least(normed, tokens * hidden);
    let qkv = at_least(qkv, tokens * qkv_width);
    let attended = at_least(attended, tokens * q_width);
    let gate_up = at_least(gate_up, tokens * 2 * intermediate);
    let activated = at_least(activated, tokens * intermediate);
    let branch = at_least(branch, tokens * hidden);

    with_cpu_values(&model.embedding, "the token embedding", |table| {
        for (row, &id) in residual.chunks_exact_mut(hidden).zip(ids) {
            let id = id as usize;
            row.copy_from_slice(&table[id * hidden..(id + 1) * hidden]);
        }
    })?;
    if let Some(scale) = model.embedding_scale {
        let scale = scale as f32;
        residual.iter_mut().for_each(|x| *x *= scale);
    }

    for (index, layer) in model.layers.iter().enumerate() {
        let (QkvProjection::Fused(qkv_projection), GateUpProjection::Fused(gate_up_projection)) =
            (&layer.qkv, &layer.gate_up)
        else {
            bail!("layer {index}: the buffer path needs fused projections");
        };
        let step = |what: &str| format!("layer {index}: {what}");

        with_cpu_values(&layer.attn_norm, "an attention norm", |weight| {
            rms_norm(residual, weight, eps, normed)
        })?;
        timed(Part::Products, || {
            qkv_projection.forward_into(normed, tokens, qkv, Store::Overwrite)
        })
        .with_context(|| step("query/key/value projection"))?;
        if let (Some(q_norm), Some(k_norm)) = (&layer.q_norm, &layer.k_norm) {
            let (hd, q_heads, kv_heads) = (c.head_dim, c.num_heads, c.num_kv_heads);
            with_cpu_values(q_norm, "a query norm", |q_weight| {
                with_cpu_values(k_norm, "a key norm", |k_weight| {
                    for row in qkv.chunks_exact_mut(qkv_width) {
                        let (q, rest) = row.split_at_mut(q_heads * hd);
                        normalise_heads(q, q_weight, eps);
                        normalise_heads(&mut rest[..kv_heads * hd], k_weight, eps);
                    }
                })
            })??;
        }
        segment::attend_into(
            dims,
            model.attention_tiles(),
            model.rope_of(index).cpu_tables(c.rope_interleaved),
            c.attention_scale as f32,
            model.masking(index),
            qkv,
            groups,
            plans,
            index,
            new_kv.as_deref_mut(),
            attended,
        )
        .with_context(|| step("attention"))?;
        match &layer.post_attn_norm {
            None => timed(Part::Products, || {
                layer.o.forward_into(attended, tokens, residual, Store::Add)
            })
            .with_context(|| step("output projection"))?,
            Some(post) => {
                timed(Part::Products, || {
                    layer
                        .o
                        .forward_into(attended, tokens, branch, Store::Overwrite)
                })
                .with_context(|| step("output projection"))?;
                add_normalised(residual, branch, normed, post, eps)?;
            }
        }

        with_cpu_values(&layer.mlp_norm, "a feed-forward norm", |weight| {
            rms_norm(residual, weight, eps, normed)
        })?;
        timed(Part::Products, || {
            gate_up_projection.forward_into(normed, tokens, gate_up, Store::Overwrite)
        })
        .with_context(|| step("gate/up projection"))?;
        match c.activation {
            Activation::Silu => silu_gate(gate_up, intermediate, activated),
            Activation::GeluTanh => gelu_tanh_gate(gate_up, intermediate, activated),
        }
        match &layer.post_mlp_norm {
            None => timed(Part::Products, || {
                layer
                    .down
                    .forward_into(activated, tokens, residual, Store::Add)
            })
            .with_context(|| step("down projection"))?,
            Some(post) => {
                timed(Part::Products, || {
                    layer
                        .down
                        .forward_into(activated, tokens, branch, Store::Overwrite)
                })
                .with_context(|| step("down projection"))?;
                add_normalised(residual, branch, normed, post, eps)?;
            }
        }
    }

    let mut out = vec![0f32; tokens * hidden];
    with_cpu_values(&model.final_norm, "the final norm", |weight| {
        rms_norm(residual, weight, eps, &mut out)
    })?;
    Ok(Tensor::from_vec(out, (tokens, hidden), &Device::Cpu)?)
}

/// `residual += rms_norm(branch) * weight`, with `scratch` (as long as `branch`) for the
/// normalised values.
fn add_normalised(
    residual: &mut [f32],
    branch: &[f32],
    scratch: &mut [f32],
    weight: &Tensor,
    eps: f32,
) -> Result<()> {
    with_cpu_values(weight, "a post-norm", |weight| {
        rms_norm(branch, weight, eps, scratch)
    })?;
    residual
        .iter_mut()
        .zip(scratch.iter())
        .for_each(|(r, x)| *r += x);
    Ok(())
}

/// RMS-normalise each `weight.len()`-wide head of `heads` in place.
fn normalise_heads(heads: &mut [f32], weight: &[f32], eps: f32) {
    for head in heads.chunks_exact_mut(weight.len()) {
        let mean = head.iter().map(|x| x * x).sum::<f32>() / head.len() as f32;
        let inverse = 1.0 / (mean + eps).sqrt();
        for (x, w) in head.iter_mut().zip(weight) {
            *x = *x * inverse * w;
        }
    }
}

/// GeGLU: `gelu_tanh(gate) * up` for rows of `[gate | up]` (`2 * width` each), as
/// transformers' `gelu_pytorch_tanh`.
fn gelu_tanh_gate(gate_up: &[f32], width: usize, out: &mut [f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for (out, row) in out
        .chunks_exact_mut(width)
        .zip(gate_up.chunks_exact(2 * width))
    {
        let (gate, up) = row.split_at(width);
        for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
            let inner = SQRT_2_OVER_PI * (g + 0.044_715 * g * g * g);
            *o = 0.5 * g * (1.0 + inner.tanh()) * u;
        }
    }
}

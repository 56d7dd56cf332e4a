//! The CPU attention path: our segment-attention kernel (`nlg-judge-kernels`) over each
//! group's prefix segments read where they lie, with the queries and scratch keys/values
//! in buffers reused across layers and forward passes, and the outputs written into the
//! caller's buffer (`attend_into`, the buffer path) or a fresh tensor (`attend`).
//!
//! candle's broadcast-and-concatenate formulation copied every prefix segment into each
//! row of every chunk of every layer and materialised the scores; here nothing of the
//! prefix is copied and no score tensor exists. CUDA and Metal devices keep candle's
//! operations (the kernels are CPU code).

use std::cell::RefCell;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Storage, Tensor};
use nlg_judge_kernels::attention::{
    segment_attention_masked, segment_attention_tiles, split_rotate, tile_keys, AttentionDims,
    Masking, RopeTables, RowGroup as KernelGroup, Segment,
};
use rayon::prelude::*;

use nlg_judge_kernels::gemm::amx::Unit;

use super::time_split::{timed, Part};
use super::{GroupPlan, KvCache, LlamaConfig, RowGroup};

/// Buffers of the attention path, grown to the largest pass seen and then reused.
#[derive(Default)]
struct Workspace {
    /// Rotated queries, `(tokens, heads * head_dim)`.
    queries: Vec<f32>,
    /// Own keys/values of all groups when the caller keeps none.
    keys: Vec<f32>,
    values: Vec<f32>,
}

thread_local! {
    static WORKSPACE: RefCell<Workspace> = RefCell::new(Workspace::default());
}

/// Grow `buffer` to at least `len` floats (never shrinks, so later passes reuse it).
fn ensure(buffer: &mut Vec<f32>, len: usize) {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
}

/// The shape the kernel sees, when it can take this model on this device.
pub(super) fn kernel_dims(config: &LlamaConfig, device: &Device) -> Option<AttentionDims> {
    let dims = AttentionDims {
        heads: config.num_heads,
        kv_heads: config.num_kv_heads,
        head_dim: config.head_dim,
    };
    (device.is_cpu() && dims.supported()).then_some(dims)
}

/// A contiguous f32 CPU tensor's data, through its storage guard.
macro_rules! cpu_slice {
    ($guard:expr, $layout:expr, $what:expr) => {{
        let storage: &Storage = &$guard;
        let Storage::Cpu(cpu) = storage else {
            bail!("{} is not on the CPU", $what);
        };
        let (start, end) = $layout
            .contiguous_offsets()
            .with_context(|| format!("{} is not contiguous", $what))?;
        &cpu.as_slice::<f32>()?[start..end]
    }};
}

/// A one-row key cache `(1, kv_heads, len, head_dim)` tiled for the vector kernel.
fn tile_cached_keys(dims: AttentionDims, keys: &Tensor) -> Result<Vec<f32>> {
    let keys = keys.contiguous()?;
    let len = keys.dim(2)?;
    let (guard, layout) = keys.storage_and_layout();
    let data = cpu_slice!(guard, layout, "a prefix key cache");
    Ok(tile_keys(dims, data, len)?)
}

/// Attention of every group's tokens from the packed projection `(tokens, q + 2 kv)`,
/// its products on `tiles` in bf16 where given (else the f32 vector kernel);
/// returns `(tokens, heads * head_dim)` (scores multiplied by `scale`), and pushes each group's new `(keys, values)`
/// `(rows, kv_heads, longest row, head_dim)` to `new_kv` when asked.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend(
    dims: AttentionDims,
    tiles: Option<Unit>,
    rope: RopeTables,
    scale: f32,
    masking: Masking,
    projected: &Tensor,
    groups: &[RowGroup],
    plans: &[GroupPlan],
    layer_index: usize,
    new_kv: Option<&mut Vec<Vec<(Tensor, Tensor)>>>,
) -> Result<Tensor> {
    let projected = projected.to_dtype(DType::F32)?.contiguous()?;
    let tokens = projected.dim(0)?;
    let q_width = dims.heads * dims.head_dim;
    let mut out = vec![0f32; tokens * q_width];
    {
        let (guard, layout) = projected.storage_and_layout();
        let data = cpu_slice!(guard, layout, "the attention projection");
        attend_into(
            dims,
            tiles,
            rope,
            scale,
            masking,
            data,
            groups,
            plans,
            layer_index,
            new_kv,
            &mut out,
        )?;
    }
    Ok(Tensor::from_vec(out, (tokens, q_width), &Device::Cpu)?)
}

/// [`attend`] on plain slices: `data` is the packed projection `(tokens, q + 2 kv)` and
/// `out` receives `(tokens, heads * head_dim)`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_into(
    dims: AttentionDims,
    tiles: Option<Unit>,
    rope: RopeTables,
    scale: f32,
    masking: Masking,
    data: &[f32],
    groups: &[RowGroup],
    plans: &[GroupPlan],
    layer_index: usize,
    new_kv: Option<&mut Vec<Vec<(Tensor, Tensor)>>>,
    out: &mut [f32],
) -> Result<()> {
    let q_width = dims.heads * dims.head_dim;
    let kv_row = dims.kv_heads * dims.head_dim;
    let in_width = q_width + 2 * kv_row;
    let tokens: usize = plans.iter().map(|p| p.tokens).sum();
    let own_len = |plan: &GroupPlan| plan.lengths.len() * kv_row * plan.packing.max_len;
    if data.len() != tokens * in_width || out.len() != tokens * q_width {
        bail!(
            "attention of {tokens} tokens got a projection of {} floats (expected {}) and an output of {} (expected {})",
            data.len(),
            tokens * in_width,
            out.len(),
            tokens * q_width
        );
    }

    // The prefix segments of this layer, contiguous, and read through storage guards.
    let mut prefix_tensors = Vec::new();
    for group in groups {
        for segment in &group.prefix {
            let (k, v) = segment.layer(layer_index);
            prefix_tensors.push((k.contiguous()?, v.contiguous()?, k.dim(2)?));
        }
    }
    let guards: Vec<_> = prefix_tensors
        .iter()
        .map(|(k, v, len)| (k.storage_and_layout(), v.storage_and_layout(), *len))
        .collect();
    // The segments' keys tiled as the vector kernel reads them, made once per cache and
    // kept with it, for the groups that ask (the tile kernel reads the keys as they lie).
    let tiled: Vec<Option<&[f32]>> = if tiles.is_none() {
        timed(Part::Attention, || {
            groups
                .iter()
                .flat_map(|group| group.prefix.iter().map(|&s| (s, group.tile_keys)))
                .collect::<Vec<(&KvCache, bool)>>()
                .par_iter()
                .map(|&(segment, tile)| match tile {
                    true => segment.tiled_keys(layer_index, |k| tile_cached_keys(dims, k)),
                    false => Ok(None),
                })
                .collect::<Result<Vec<_>>>()
        })?
    } else {
        vec![None; guards.len()]
    };
    let mut all_segments = Vec::with_capacity(guards.len());
    for (((k_guard, k_layout), (v_guard, v_layout), len), tiled_keys) in guards.iter().zip(tiled) {
        all_segments.push(Segment {
            keys: cpu_slice!(k_guard, k_layout, "a prefix key cache"),
            values: cpu_slice!(v_guard, v_layout, "a prefix value cache"),
            len: *len,
            tiled_keys,
        });
    }

    nlg_judge_kernels::reuse::with_reused(&WORKSPACE, |ws| -> Result<()> {
        ensure(&mut ws.queries, tokens * q_width);
        // Own keys/values: fresh vectors when they are kept (they become the cache),
        // the workspace otherwise.
        let mut kept: Vec<(Vec<f32>, Vec<f32>)> = Vec::new();
        let scratch: usize = plans.iter().map(own_len).sum();
        if new_kv.is_some() {
            kept = plans
                .iter()
                .map(|p| (vec![0f32; own_len(p)], vec![0f32; own_len(p)]))
                .collect();
        } else {
            ensure(&mut ws.keys, scratch);
            ensure(&mut ws.values, scratch);
        }
        let mut offset = 0;
        for (index, plan) in plans.iter().enumerate() {
            let n = own_len(plan);
            let (keys, values) = match kept.get_mut(index) {
                Some((k, v)) => (&mut k[..], &mut v[..]),
                None => (
                    &mut ws.keys[offset..offset + n],
                    &mut ws.values[offset..offset + n],
                ),
            };
            split_rotate(
                dims,
                rope,
                plan.prefix_len,
                &plan.lengths,
                plan.packing.max_len,
                &data[plan.start * in_width..(plan.start + plan.tokens) * in_width],
                &mut ws.queries[plan.start * q_width..(plan.start + plan.tokens) * q_width],
                keys,
                values,
            )?;
            offset += n;
        }

        let mut kernel_groups = Vec::with_capacity(groups.len());
        let (mut segment_at, mut offset) = (0, 0);
        for (index, (group, plan)) in groups.iter().zip(plans).enumerate() {
            let n = own_len(plan);
            let (keys, values) = match kept.get(index) {
                Some((k, v)) => (&k[..], &v[..]),
                None => (&ws.keys[offset..offset + n], &ws.values[offset..offset + n]),
            };
            kernel_groups.push(KernelGroup {
                prefix: &all_segments[segment_at..segment_at + group.prefix.len()],
                lengths: &plan.lengths,
                first_token: plan.start,
                keys,
                values,
                stride: plan.packing.max_len,
            });
            segment_at += group.prefix.len();
            offset += n;
        }
        let queries = &ws.queries[..tokens * q_width];
        timed(Part::Attention, || match tiles {
            Some(unit) => {
                segment_attention_tiles(unit, dims, scale, masking, &kernel_groups, queries, out)
            }
            None => segment_attention_masked(dims, scale, masking, &kernel_groups, queries, out),
        })?;
        drop(kernel_groups);

        if let Some(new_kv) = new_kv {
            for ((k, v), (plan, group_kv)) in kept.into_iter().zip(plans.iter().zip(new_kv)) {
                let shape = (
                    plan.lengths.len(),
                    dims.kv_heads,
                    plan.packing.max_len,
                    dims.head_dim,
                );
                group_kv.push((
                    Tensor::from_vec(k, shape, &Device::Cpu)?,
                    Tensor::from_vec(v, shape, &Device::Cpu)?,
                ));
            }
        }
        Ok(())
    })
}

//! The fused operations of a level pass (issue 38): what the plain-candle level pass does
//! in about thirty tensor operations per layer, in three custom operations.
//!
//! - [`rope_store`]: the pass's keys rotated and written, with its values, into the
//!   layer's key/value arena at each token's arena position (one in-place operation).
//! - [`ragged_attention`]: every query token, rotated on load, attends to its list of
//!   arena ranges (its ancestors' segments, then its own row up to itself) with an online
//!   softmax in tiles of [`TILE`] keys; no score matrix, no gather, no mask.
//! - [`act_mul`]: the gated activation, `act(gate) * up`, in one operation.
//!
//! Each has a CPU implementation here (run by CI on every family) and a CUDA kernel in
//! `level_ops.cu`, compiled by NVRTC on first use, that follows the same loops and the
//! same online-softmax update order. Arithmetic is f32 whatever the storage type (f32,
//! bf16, f16): loads widen, stores round once.

use std::ops::Range;

use anyhow::{bail, Result};
use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp2, CustomOp3, DType, InplaceOp3, Layout, Shape, Storage, Tensor, WithDType,
};
use nlg_judge_kernels::attention::{
    segment_attention_masked, AttentionDims, Masking, RowGroup as KernelGroup, Segment,
};
use rayon::prelude::*;

/// Keys per tile of the online softmax (the CUDA kernel's shared-memory tile).
pub const TILE: usize = 64;

/// The CUDA source of the three kernels.
pub const CUDA_SOURCE: &str = include_str!("level_ops.cu");

/// The attention shape of a layer, as the fused operations need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Leading dimensions of a head that rope rotates (the rest pass through).
    pub rotary_dim: usize,
    /// Rope on pairs `(2i, 2i + 1)` instead of halves `(i, i + d/2)`.
    pub interleaved: bool,
    pub scale: f32,
    /// `score = cap * tanh(score / cap)` before the softmax.
    pub softcap: Option<f32>,
    /// A query sees keys fewer than `window` positions behind it.
    pub window: Option<usize>,
}

impl LevelShape {
    fn q_width(&self) -> usize {
        self.heads * self.head_dim
    }

    fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Columns of a projected row: queries, keys, values.
    fn projected_width(&self) -> usize {
        self.q_width() + 2 * self.kv_width()
    }

    fn check(&self) -> Result<()> {
        if self.kv_heads == 0 || self.heads % self.kv_heads != 0 {
            bail!(
                "{} query heads cannot share {} key/value heads",
                self.heads,
                self.kv_heads
            );
        }
        if self.head_dim == 0 || self.head_dim > 1024 {
            bail!(
                "the fused attention takes head widths of 1 to 1024, not {}",
                self.head_dim
            );
        }
        if self.rotary_dim > self.head_dim || self.rotary_dim % 2 != 0 {
            bail!(
                "rotary width {} does not fit a head of {}",
                self.rotary_dim,
                self.head_dim
            );
        }
        Ok(())
    }
}

/// The per-pass index data of the fused operations, one `u32` upload: each token's arena
/// destination, the offsets of its ranges, its sequence position, then `(start, end,
/// sequence position of start)` for every range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelMeta {
    pub tokens: usize,
    pub words: Vec<u32>,
    /// The rows, for the CPU path, which attends row group by row group.
    rows: Vec<RowSpan>,
    /// One past the largest arena position the pass reads or writes.
    extent: usize,
}

/// A row of the pass on the host: its tokens `first_token..first_token + tokens`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowSpan {
    first_token: usize,
    tokens: usize,
    position: usize,
    segments: Vec<Range<usize>>,
    destination: usize,
}

/// One row of a pass as the fused operations see it.
pub struct MetaRow<'a> {
    pub tokens: usize,
    /// Sequence position of the row's first token.
    pub position: usize,
    /// Arena ranges of its ancestors, in order.
    pub segments: &'a [Range<usize>],
    /// Arena position of its first token (its tokens are written there, in order).
    pub destination: usize,
}

impl LevelMeta {
    pub fn new(rows: &[MetaRow]) -> Result<Self> {
        let tokens: usize = rows.iter().map(|r| r.tokens).sum();
        let mut destinations = Vec::with_capacity(tokens);
        let mut offsets = Vec::with_capacity(tokens + 1);
        let mut positions = Vec::with_capacity(tokens);
        let mut ranges = Vec::new();
        let mut spans = Vec::with_capacity(rows.len());
        let word = |x: usize| -> Result<u32> {
            u32::try_from(x).map_err(|_| anyhow::anyhow!("{x} does not fit the pass index"))
        };
        for row in rows {
            spans.push(RowSpan {
                first_token: destinations.len(),
                tokens: row.tokens,
                position: row.position,
                segments: row.segments.to_vec(),
                destination: row.destination,
            });
            for t in 0..row.tokens {
                destinations.push(word(row.destination + t)?);
                offsets.push(word(ranges.len() / 3)?);
                positions.push(word(row.position + t)?);
                let mut first = 0;
                for segment in row.segments {
                    ranges.extend([word(segment.start)?, word(segment.end)?, word(first)?]);
                    first += segment.len();
                }
                // Its own row's keys up to and including itself.
                ranges.extend([
                    word(row.destination)?,
                    word(row.destination + t + 1)?,
                    word(row.position)?,
                ]);
            }
        }
        offsets.push(word(ranges.len() / 3)?);
        let mut words = destinations;
        words.extend(offsets);
        words.extend(positions);
        words.extend(ranges);
        let mut meta = Self {
            tokens,
            words,
            rows: spans,
            extent: 0,
        };
        // Ranges are forward and end where their token's keys do (the arena bound is
        // checked by each operation against its arena).
        let mut extent = 0;
        for t in 0..tokens {
            extent = extent.max(meta.destination(t) + 1);
            for (start, end, first) in meta.ranges(t) {
                if start > end || first + (end - start) > meta.query_position(t) + 1 {
                    bail!("token {t}'s arena range {start}..{end} does not precede it");
                }
                extent = extent.max(end);
            }
        }
        meta.extent = extent;
        Ok(meta)
    }

    fn destination(&self, t: usize) -> usize {
        self.words[t] as usize
    }

    fn query_position(&self, t: usize) -> usize {
        self.words[2 * self.tokens + 1 + t] as usize
    }

    /// `(start, end, sequence position of start)` of token `t`'s ranges.
    fn ranges(&self, t: usize) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let offsets = &self.words[self.tokens..];
        let ranges = &self.words[3 * self.tokens + 1..];
        (offsets[t] as usize..offsets[t + 1] as usize).map(move |r| {
            (
                ranges[3 * r] as usize,
                ranges[3 * r + 1] as usize,
                ranges[3 * r + 2] as usize,
            )
        })
    }

    /// Checks the index data against an arena of `positions` before a kernel trusts it:
    /// one comparison with the extent found at construction (every layer's operations
    /// ask), the token-by-token walk only to name what is out of bounds.
    fn check(&self, positions: usize) -> Result<()> {
        if self.extent <= positions {
            return Ok(());
        }
        for t in 0..self.tokens {
            if self.destination(t) >= positions {
                bail!(
                    "token {t} writes arena position {} of {positions}",
                    self.destination(t)
                );
            }
            for (start, end, _) in self.ranges(t) {
                if end > positions {
                    bail!("token {t} reads arena range {start}..{end} of {positions}");
                }
            }
        }
        bail!(
            "the pass reaches arena position {} of {positions}",
            self.extent
        )
    }
}

/// Element `j` of head `x` rotated by the tables `cos`, `sin` (`rotary_dim / 2` each).
#[inline]
fn rotated<T: WithDType>(x: &[T], cos: &[T], sin: &[T], j: usize, shape: &LevelShape) -> f32 {
    let value = |i: usize| x[i].to_f64() as f32;
    let table = |t: &[T], i: usize| t[i].to_f64() as f32;
    if j >= shape.rotary_dim {
        return value(j);
    }
    let half = shape.rotary_dim / 2;
    if shape.interleaved {
        let p = j / 2;
        let (c, s) = (table(cos, p), table(sin, p));
        return if j % 2 == 0 {
            value(j) * c - value(j + 1) * s
        } else {
            value(j - 1) * s + value(j) * c
        };
    }
    if j < half {
        value(j) * table(cos, j) - value(j + half) * table(sin, j)
    } else {
        let p = j - half;
        value(j) * table(cos, p) + value(p) * table(sin, p)
    }
}

fn of_f32<T: WithDType>(x: f32) -> T {
    T::from_f64(f64::from(x))
}

/// A contiguous tensor's values on the CPU.
fn cpu_values<'a, T: WithDType>(
    storage: &'a CpuStorage,
    layout: &Layout,
    what: &str,
) -> Result<&'a [T]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        bail!("{what} must be contiguous for the fused level operations");
    };
    Ok(&storage.as_slice::<T>()?[start..end])
}

/// Runs `body` on the CPU values of a tensor captured by an operation (a rope table).
fn with_captured<T: WithDType, R>(
    tensor: &Tensor,
    what: &str,
    body: impl FnOnce(&[T]) -> Result<R>,
) -> Result<R> {
    let (storage, layout) = tensor.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => body(cpu_values::<T>(cpu, layout, what)?),
        _ => bail!("{what} is not on the CPU like the rest of the pass"),
    }
}

fn as_candle<T>(result: Result<T>) -> candle_core::Result<T> {
    result.map_err(|e| candle_core::Error::Msg(format!("{e:#}")))
}

/// Rope on the pass's keys and the arena write of its keys and values: `arena` is
/// `(positions, 2 * kv_width)`, `projected` `(tokens, q + 2 kv width)`.
struct RopeStore<'a> {
    shape: LevelShape,
    meta: &'a LevelMeta,
    cos: &'a Tensor,
    sin: &'a Tensor,
}

/// Writes the pass's rotated keys and its values into `arena` at each token's destination.
pub fn rope_store(
    arena: &Tensor,
    projected: &Tensor,
    meta: &LevelMeta,
    meta_tensor: &Tensor,
    (cos, sin): (&Tensor, &Tensor),
    shape: LevelShape,
) -> Result<()> {
    shape.check()?;
    let (tokens, width) = projected.dims2()?;
    let (positions, arena_width) = arena.dims2()?;
    if tokens != meta.tokens || width != shape.projected_width() {
        bail!(
            "projected ({tokens}, {width}) does not match a pass of {} tokens and width {}",
            meta.tokens,
            shape.projected_width()
        );
    }
    if arena_width != 2 * shape.kv_width() {
        bail!(
            "the arena is {arena_width} wide, not {}",
            2 * shape.kv_width()
        );
    }
    if arena.dtype() != projected.dtype() || cos.dtype() != projected.dtype() {
        bail!("the arena, the projections and the rope tables must share a dtype");
    }
    meta.check(positions)?;
    arena.inplace_op3(
        projected,
        meta_tensor,
        &RopeStore {
            shape,
            meta,
            cos,
            sin,
        },
    )?;
    Ok(())
}

impl RopeStore<'_> {
    fn cpu<T: WithDType>(&self, arena: &mut [T], projected: &[T]) -> Result<()> {
        let s = &self.shape;
        let (q_width, kv_width, half) = (s.q_width(), s.kv_width(), s.rotary_dim / 2);
        let width = s.projected_width();
        with_captured::<T, _>(self.cos, "a rope table", |cos| {
            with_captured::<T, _>(self.sin, "a rope table", |sin| {
                for t in 0..self.meta.tokens {
                    let row = &projected[t * width..(t + 1) * width];
                    let dest = self.meta.destination(t) * 2 * kv_width;
                    let (c, sn) = (
                        &cos[t * half..(t + 1) * half],
                        &sin[t * half..(t + 1) * half],
                    );
                    for i in 0..kv_width {
                        let head = &row[q_width + (i / s.head_dim) * s.head_dim..];
                        arena[dest + i] = of_f32(rotated(head, c, sn, i % s.head_dim, s));
                        arena[dest + kv_width + i] = row[q_width + kv_width + i];
                    }
                }
                Ok(())
            })
        })
    }
}

impl InplaceOp3 for RopeStore<'_> {
    fn name(&self) -> &'static str {
        "level-rope-store"
    }

    fn cpu_fwd(
        &self,
        arena: &mut CpuStorage,
        arena_layout: &Layout,
        projected: &CpuStorage,
        projected_layout: &Layout,
        _meta: &CpuStorage,
        _meta_layout: &Layout,
    ) -> candle_core::Result<()> {
        if arena_layout.contiguous_offsets() != Some((0, arena_layout.shape().elem_count())) {
            candle_core::bail!("the arena must be a whole contiguous tensor");
        }
        let result = match (arena, projected) {
            (CpuStorage::F32(a), p) => {
                cpu_values(p, projected_layout, "projections").and_then(|p| self.cpu::<f32>(a, p))
            }
            (CpuStorage::BF16(a), p) => {
                cpu_values(p, projected_layout, "projections").and_then(|p| self.cpu(a, p))
            }
            (CpuStorage::F16(a), p) => {
                cpu_values(p, projected_layout, "projections").and_then(|p| self.cpu(a, p))
            }
            (a, _) => Err(anyhow::anyhow!(
                "the fused level operations take f32, bf16 or f16, not {:?}",
                a.dtype()
            )),
        };
        as_candle(result)
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        arena: &mut candle_core::CudaStorage,
        arena_layout: &Layout,
        projected: &candle_core::CudaStorage,
        projected_layout: &Layout,
        meta: &candle_core::CudaStorage,
        meta_layout: &Layout,
    ) -> candle_core::Result<()> {
        cuda::rope_store(
            self,
            arena,
            arena_layout,
            projected,
            projected_layout,
            meta,
            meta_layout,
        )
    }
}

/// Attention of every token of a pass over its arena ranges: `(tokens, heads *
/// head_dim)`. Queries are read from `projected` and rotated on load.
struct RaggedAttention<'a> {
    shape: LevelShape,
    meta: &'a LevelMeta,
    cos: &'a Tensor,
    sin: &'a Tensor,
    cpu_path: CpuAttention,
}

/// How the CPU attends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CpuAttention {
    /// Our vector segment-attention kernel (`nlg_judge_kernels::attention`), row group
    /// by row group, where it takes the shape and the values are f32; the tiled loop
    /// otherwise.
    Kernel,
    /// The CUDA kernel's tiled loop, on one core per token: its emulation (tests ask
    /// for it by name; it also serves bf16, f16 and shapes the kernel does not take).
    #[cfg_attr(not(test), allow(dead_code))]
    Tiled,
}

/// The pass's attention output `(tokens, heads * head_dim)` from its projections and the
/// layer's arena (written by [`rope_store`] first).
pub fn ragged_attention(
    projected: &Tensor,
    arena: &Tensor,
    meta: &LevelMeta,
    meta_tensor: &Tensor,
    (cos, sin): (&Tensor, &Tensor),
    shape: LevelShape,
) -> Result<Tensor> {
    attend_with(
        projected,
        arena,
        meta,
        meta_tensor,
        (cos, sin),
        shape,
        CpuAttention::Kernel,
    )
}

fn attend_with(
    projected: &Tensor,
    arena: &Tensor,
    meta: &LevelMeta,
    meta_tensor: &Tensor,
    (cos, sin): (&Tensor, &Tensor),
    shape: LevelShape,
    cpu_path: CpuAttention,
) -> Result<Tensor> {
    shape.check()?;
    let (tokens, width) = projected.dims2()?;
    if tokens != meta.tokens || width != shape.projected_width() {
        bail!(
            "projected ({tokens}, {width}) does not match a pass of {} tokens and width {}",
            meta.tokens,
            shape.projected_width()
        );
    }
    meta.check(arena.dim(0)?)?;
    Ok(projected.apply_op3_no_bwd(
        arena,
        meta_tensor,
        &RaggedAttention {
            shape,
            meta,
            cos,
            sin,
            cpu_path,
        },
    )?)
}

impl RaggedAttention<'_> {
    /// The shape for our segment-attention kernel, when it takes this one.
    fn kernel_dims(&self) -> Option<AttentionDims> {
        let dims = AttentionDims {
            heads: self.shape.heads,
            kv_heads: self.shape.kv_heads,
            head_dim: self.shape.head_dim,
        };
        dims.supported().then_some(dims)
    }

    /// Attention through our segment kernel: adjacent rows continuing the same segments
    /// form a group; each distinct segment is laid out `(kv_heads, len, head_dim)` once
    /// per call, each group's own keys (already rotated and written by [`rope_store`])
    /// `(rows, kv_heads, longest row, head_dim)`, and the queries are rotated here.
    fn cpu_kernel(
        &self,
        dims: AttentionDims,
        projected: &[f32],
        arena: &[f32],
    ) -> Result<Vec<f32>> {
        let s = &self.shape;
        let (q_width, kv_width, d, half) =
            (s.q_width(), s.kv_width(), s.head_dim, s.rotary_dim / 2);
        let width = s.projected_width();
        let tokens = self.meta.tokens;
        let mut queries = vec![0f32; tokens * q_width];
        with_captured::<f32, _>(self.cos, "a rope table", |cos| {
            with_captured::<f32, _>(self.sin, "a rope table", |sin| {
                queries
                    .par_chunks_mut(q_width)
                    .enumerate()
                    .for_each(|(t, q)| {
                        let row = &projected[t * width..(t + 1) * width];
                        let (c, sn) = (
                            &cos[t * half..(t + 1) * half],
                            &sin[t * half..(t + 1) * half],
                        );
                        for head in 0..s.heads {
                            let x = &row[head * d..(head + 1) * d];
                            for (j, q) in q[head * d..(head + 1) * d].iter_mut().enumerate() {
                                *q = rotated(x, c, sn, j, s);
                            }
                        }
                    });
                Ok(())
            })
        })?;
        // Distinct segments by head: keys and values `(kv_heads, len, head_dim)`.
        let by_head = |range: &Range<usize>, offset: usize| -> Vec<f32> {
            let mut out = vec![0f32; range.len() * kv_width];
            for h in 0..s.kv_heads {
                for (j, p) in range.clone().enumerate() {
                    let from = p * 2 * kv_width + offset + h * d;
                    out[(h * range.len() + j) * d..][..d].copy_from_slice(&arena[from..from + d]);
                }
            }
            out
        };
        let mut distinct: Vec<Range<usize>> = Vec::new();
        for row in &self.meta.rows {
            for segment in &row.segments {
                if !distinct.contains(segment) {
                    distinct.push(segment.clone());
                }
            }
        }
        let laid_out: Vec<(Vec<f32>, Vec<f32>)> = distinct
            .par_iter()
            .map(|range| (by_head(range, 0), by_head(range, kv_width)))
            .collect();
        // Groups: runs of adjacent rows with the same segments.
        let mut spans: Vec<&[RowSpan]> = Vec::new();
        let mut start = 0;
        for i in 1..=self.meta.rows.len() {
            let rows = &self.meta.rows;
            if i == rows.len() || rows[i].segments != rows[start].segments {
                spans.push(&rows[start..i]);
                start = i;
            }
        }
        struct Own {
            lengths: Vec<usize>,
            stride: usize,
            keys: Vec<f32>,
            values: Vec<f32>,
            prefix: Vec<usize>,
        }
        let owns: Vec<Own> = spans
            .par_iter()
            .map(|rows| {
                let stride = rows.iter().map(|r| r.tokens).max().unwrap_or(1);
                let mut keys = vec![0f32; rows.len() * kv_width * stride];
                let mut values = vec![0f32; rows.len() * kv_width * stride];
                for (r, row) in rows.iter().enumerate() {
                    for h in 0..s.kv_heads {
                        for t in 0..row.tokens {
                            let from = (row.destination + t) * 2 * kv_width + h * d;
                            let to = ((r * s.kv_heads + h) * stride + t) * d;
                            keys[to..to + d].copy_from_slice(&arena[from..from + d]);
                            values[to..to + d]
                                .copy_from_slice(&arena[from + kv_width..from + kv_width + d]);
                        }
                    }
                }
                let prefix = rows[0]
                    .segments
                    .iter()
                    .map(|segment| distinct.iter().position(|d| d == segment).unwrap_or(0))
                    .collect();
                Own {
                    lengths: rows.iter().map(|r| r.tokens).collect(),
                    stride,
                    keys,
                    values,
                    prefix,
                }
            })
            .collect();
        let prefixes: Vec<Vec<Segment>> = owns
            .iter()
            .map(|own| {
                own.prefix
                    .iter()
                    .map(|&i| Segment {
                        keys: &laid_out[i].0,
                        values: &laid_out[i].1,
                        len: distinct[i].len(),
                        tiled_keys: None,
                    })
                    .collect()
            })
            .collect();
        let groups: Vec<KernelGroup> = spans
            .iter()
            .zip(&owns)
            .zip(&prefixes)
            .map(|((rows, own), prefix)| KernelGroup {
                prefix,
                lengths: &own.lengths,
                first_token: rows[0].first_token,
                keys: &own.keys,
                values: &own.values,
                stride: own.stride,
            })
            .collect();
        let mut out = vec![0f32; tokens * q_width];
        let masking = Masking {
            window: s.window,
            softcap: s.softcap,
        };
        segment_attention_masked(dims, s.scale, masking, &groups, &queries, &mut out)?;
        Ok(out)
    }

    fn cpu<T: WithDType>(&self, projected: &[T], arena: &[T]) -> Result<Vec<T>> {
        let s = &self.shape;
        let (q_width, kv_width, d, half) =
            (s.q_width(), s.kv_width(), s.head_dim, s.rotary_dim / 2);
        let width = s.projected_width();
        let group = s.heads / s.kv_heads;
        let mut out = vec![T::zero(); self.meta.tokens * q_width];
        with_captured::<T, _>(self.cos, "a rope table", |cos| {
            with_captured::<T, _>(self.sin, "a rope table", |sin| {
                out.par_chunks_mut(q_width)
                    .enumerate()
                    .for_each(|(t, out)| {
                        let row = &projected[t * width..(t + 1) * width];
                        let (c, sn) = (
                            &cos[t * half..(t + 1) * half],
                            &sin[t * half..(t + 1) * half],
                        );
                        let query_position = self.meta.query_position(t);
                        let mut q = vec![0f32; d];
                        let mut acc = vec![0f32; d];
                        let mut scores = [0f32; TILE];
                        for head in 0..s.heads {
                            let kv = head / group;
                            let x = &row[head * d..(head + 1) * d];
                            for (j, q) in q.iter_mut().enumerate() {
                                *q = rotated(x, c, sn, j, s);
                            }
                            acc.fill(0.0);
                            let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
                            for (start, end, first) in self.meta.ranges(t) {
                                let mut tile = start;
                                while tile < end {
                                    let n = TILE.min(end - tile);
                                    for (j, score) in scores[..n].iter_mut().enumerate() {
                                        let key_position = first + (tile - start) + j;
                                        *score = if s
                                            .window
                                            .is_none_or(|w| query_position - key_position < w)
                                        {
                                            let k =
                                                &arena[(tile + j) * 2 * kv_width + kv * d..][..d];
                                            let dot: f32 = q
                                                .iter()
                                                .zip(k)
                                                .map(|(&a, &b)| a * (b.to_f64() as f32))
                                                .sum();
                                            let score = dot * s.scale;
                                            match s.softcap {
                                                Some(cap) => (score / cap).tanh() * cap,
                                                None => score,
                                            }
                                        } else {
                                            f32::NEG_INFINITY
                                        };
                                    }
                                    let tile_max = scores[..n]
                                        .iter()
                                        .copied()
                                        .fold(f32::NEG_INFINITY, f32::max);
                                    let new_max = max.max(tile_max);
                                    let correction = if new_max == f32::NEG_INFINITY {
                                        1.0
                                    } else {
                                        (max - new_max).exp()
                                    };
                                    for score in &mut scores[..n] {
                                        *score = if new_max == f32::NEG_INFINITY {
                                            0.0
                                        } else {
                                            (*score - new_max).exp()
                                        };
                                    }
                                    for a in acc.iter_mut() {
                                        *a *= correction;
                                    }
                                    for (j, &p) in scores[..n].iter().enumerate() {
                                        let v = &arena
                                            [(tile + j) * 2 * kv_width + kv_width + kv * d..][..d];
                                        for (a, &x) in acc.iter_mut().zip(v) {
                                            *a += p * (x.to_f64() as f32);
                                        }
                                    }
                                    sum = sum * correction + scores[..n].iter().sum::<f32>();
                                    max = new_max;
                                    tile += n;
                                }
                            }
                            for (o, &a) in out[head * d..(head + 1) * d].iter_mut().zip(&acc) {
                                *o = of_f32(if sum > 0.0 { a / sum } else { 0.0 });
                            }
                        }
                    });
                Ok(())
            })
        })?;
        Ok(out)
    }
}

impl CustomOp3 for RaggedAttention<'_> {
    fn name(&self) -> &'static str {
        "level-ragged-attention"
    }

    fn cpu_fwd(
        &self,
        projected: &CpuStorage,
        projected_layout: &Layout,
        arena: &CpuStorage,
        arena_layout: &Layout,
        _meta: &CpuStorage,
        _meta_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let shape = Shape::from((self.meta.tokens, self.shape.q_width()));
        fn run<T: WithDType>(
            op: &RaggedAttention,
            projected: (&CpuStorage, &Layout),
            arena: (&CpuStorage, &Layout),
        ) -> Result<Vec<T>> {
            op.cpu(
                cpu_values::<T>(projected.0, projected.1, "projections")?,
                cpu_values::<T>(arena.0, arena.1, "the arena")?,
            )
        }
        let inputs = ((projected, projected_layout), (arena, arena_layout));
        let storage = match projected.dtype() {
            DType::F32 => CpuStorage::F32(as_candle(
                match self
                    .kernel_dims()
                    .filter(|_| self.cpu_path == CpuAttention::Kernel)
                {
                    Some(dims) => {
                        cpu_values(inputs.0 .0, inputs.0 .1, "projections").and_then(|p| {
                            self.cpu_kernel(
                                dims,
                                p,
                                cpu_values(inputs.1 .0, inputs.1 .1, "the arena")?,
                            )
                        })
                    }
                    None => run(self, inputs.0, inputs.1),
                },
            )?),
            DType::BF16 => CpuStorage::BF16(as_candle(run(self, inputs.0, inputs.1))?),
            DType::F16 => CpuStorage::F16(as_candle(run(self, inputs.0, inputs.1))?),
            other => candle_core::bail!(
                "the fused level operations take f32, bf16 or f16, not {other:?}"
            ),
        };
        Ok((storage, shape))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        projected: &candle_core::CudaStorage,
        projected_layout: &Layout,
        arena: &candle_core::CudaStorage,
        arena_layout: &Layout,
        meta: &candle_core::CudaStorage,
        meta_layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::ragged_attention(
            self,
            projected,
            projected_layout,
            arena,
            arena_layout,
            meta,
            meta_layout,
        )
    }
}

/// The gated activation of a feed-forward layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatedActivation {
    Silu,
    /// GELU in its tanh form.
    GeluTanh,
}

impl GatedActivation {
    #[inline]
    fn apply(self, g: f32) -> f32 {
        match self {
            Self::Silu => g / (1.0 + (-g).exp()),
            Self::GeluTanh => {
                0.5 * g * (1.0 + (0.797_884_6_f32 * g * (1.0 + 0.044715 * g * g)).tanh())
            }
        }
    }
}

struct ActMul(GatedActivation);

/// `act(gate) * up` for `(rows, width)` matrices; either may be a column view of a wider
/// matrix (the two halves of one gate/up product).
pub fn act_mul(gate: &Tensor, up: &Tensor, activation: GatedActivation) -> Result<Tensor> {
    if gate.dims2()? != up.dims2()? {
        bail!(
            "gate {:?} and up {:?} differ in shape",
            gate.dims(),
            up.dims()
        );
    }
    Ok(gate.apply_op2_no_bwd(up, &ActMul(activation))?)
}

/// `(start offset, row stride)` of a 2-D view whose rows are contiguous.
fn row_view(layout: &Layout, what: &str) -> Result<(usize, usize)> {
    let stride = layout.stride();
    if layout.dims().len() != 2 || stride[1] != 1 {
        bail!("{what} must be a matrix of contiguous rows");
    }
    Ok((layout.start_offset(), stride[0]))
}

impl CustomOp2 for ActMul {
    fn name(&self) -> &'static str {
        "level-act-mul"
    }

    fn cpu_fwd(
        &self,
        gate: &CpuStorage,
        gate_layout: &Layout,
        up: &CpuStorage,
        up_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, width) = gate_layout.shape().dims2()?;
        fn run<T: WithDType>(
            act: GatedActivation,
            (gate, gate_layout): (&CpuStorage, &Layout),
            (up, up_layout): (&CpuStorage, &Layout),
            rows: usize,
            width: usize,
        ) -> Result<Vec<T>> {
            let (gate_start, gate_stride) = row_view(gate_layout, "the gate")?;
            let (up_start, up_stride) = row_view(up_layout, "the up projection")?;
            let (gate, up) = (gate.as_slice::<T>()?, up.as_slice::<T>()?);
            let mut out = vec![T::zero(); rows * width];
            out.par_chunks_mut(width.max(1))
                .enumerate()
                .for_each(|(r, out)| {
                    let g = &gate[gate_start + r * gate_stride..][..width];
                    let u = &up[up_start + r * up_stride..][..width];
                    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
                        *o = of_f32(act.apply(g.to_f64() as f32) * (u.to_f64() as f32));
                    }
                });
            Ok(out)
        }
        let inputs = ((gate, gate_layout), (up, up_layout));
        let storage = match gate.dtype() {
            DType::F32 => CpuStorage::F32(as_candle(run(self.0, inputs.0, inputs.1, rows, width))?),
            DType::BF16 => {
                CpuStorage::BF16(as_candle(run(self.0, inputs.0, inputs.1, rows, width))?)
            }
            DType::F16 => CpuStorage::F16(as_candle(run(self.0, inputs.0, inputs.1, rows, width))?),
            other => candle_core::bail!(
                "the fused level operations take f32, bf16 or f16, not {other:?}"
            ),
        };
        Ok((storage, Shape::from((rows, width))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        gate: &candle_core::CudaStorage,
        gate_layout: &Layout,
        up: &candle_core::CudaStorage,
        up_layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::act_mul(self.0, gate, gate_layout, up, up_layout)
    }
}

#[cfg(feature = "cuda")]
mod cuda;

#[cfg(test)]
mod tests;

//! Segment attention with its two products on AMX tiles: `Q K^T` and `P V` in bf16 with
//! f32 sums (`tdpbf16ps`), the online softmax in f32 between them.
//!
//! Issue 50: once the layers' products run on tiles, attention's products (in f32 on the
//! vector units, see `tile.rs`) become the larger part of a pass. Here they run through
//! the same tile driver as the products (`gemm::amx`): [`Unit::Model`] is the portable
//! model of the instructions, so everything below (packing, blocking, masks, the
//! softmax) is tested on any machine, and [`Unit::Hardware`] the real instructions where
//! `gemm::amx::status` allows bf16 tiles.
//!
//! The work is that of the vector kernel (`mod.rs`): chunks of [`QUERY_CHUNK`] queries
//! (consecutive tokens of consecutive rows, all query heads of one key/value head)
//! against every key tile of the group's prefix segments, then runs of a row's queries
//! against that row's own keys, causally; sliding windows and soft-caps as there. Per
//! key tile of [`KEY_TILE`] = 32 keys, one 32x32 output block of the driver's registers,
//! everything transposed (issue 61) so that the vector work between the products runs
//! with a lane per query (`tile_softmax.rs`):
//! - scores `S^T = K~ Q~^T`: the tile's keys, rounded to bf16 (`K~`), are the `A` rows
//!   (a key's bf16 in order, 16 pairs a tile row: a plain conversion of its floats); the
//!   chunk's queries, times `scale * log2(e)` in f32 and then rounded to bf16 (`Q~`), are
//!   `B` (rows of pairs of head dimensions by 32 queries, 128 bytes a row); head widths
//!   not a multiple of 32 pad with zero pairs, short tiles and absent queries with zeros.
//!   The stored block holds a row per key and a column per query;
//! - the online softmax in f32 on the stored scores (masked keys at `-inf`, so their
//!   probabilities are exactly 0): new maximum, rescale of the sums and outputs where a
//!   maximum moved, then each probability rounded to bf16 (`P~`), and the running sum adds
//!   the ROUNDED probabilities, so the normalised weights are exactly those multiplied;
//!   the probabilities come out as `P~^T` packed as pairs of keys by 32 queries;
//! - `O^T += V~^T P~^T`: the tile's values rounded to bf16, a row per value column of
//!   16 pairs of keys (the `A` operand, one step per 32 columns of the head), times
//!   `P~^T` (`B`); the stored block (a row per value column) is added to the outputs,
//!   kept transposed too until the chunk's end.
//!
//! Each score and output is the same sum of the same products in the same order as with
//! the untransposed operands (`tdpbf16ps` sums each element over its pairs in order; the
//! factors of each product only trade places), so the transposition changed no bit.
//!
//! Every key and value of a distinct prefix segment, and of each row's own positions, is
//! rounded and packed once per call (into buffers the calling thread keeps), as the
//! vector kernel transposes them once. A tile column of `C` depends only on its own `B`
//! column, so a query's result does not depend on its neighbours in a chunk, and the work
//! items run in parallel with results independent of the number of threads. The work
//! around the tiles (packing, the softmax update) runs on the CPU's widest vector path
//! ([`SimdPath`]); every path gives the same bits.
//!
//! Numbers: this differs from the f32 kernel by the bf16 roundings of `Q`, `K`, `P` and
//! `V` (2^-8 relative each); `tests/attention_tiles.rs` derives and checks the bound.

use rayon::prelude::*;
use std::collections::HashMap;

use super::tile::{KEY_TILE, QUERY_CHUNK};
use super::tile_softmax::{Avx2Rows, Avx512Rows, PlainRows, Rows, TileSoftmax, KEY_PAIRS};
use super::{
    at_least, own_tiles, query_chunks, validate, AttentionDims, AttentionError, Masking, OutPtr,
    RowGroup, SimdPath,
};
use crate::gemm::amx::{self, with_config, Operands, Product, TileUnit, Unit, BF16_CONFIG};
use crate::gemm::bf16::round_to_bf16;
use crate::timing::{self, CallTicks, Kernel, Part, Stopwatch};

/// Pairs (u32 words) of one tile row: 16, 64 bytes.
const ROW_PAIRS: usize = 16;
/// Bytes from one row of a `B` operand of 32 columns (queries) to the next.
const B_STRIDE: usize = 4 * QUERY_CHUNK;
/// Value columns per output block (two `A` tiles of 16 rows).
const VALUE_BLOCK: usize = 32;
/// Words of one value block's `A` operand: 32 value columns by 16 pairs of keys.
const VALUE_BLOCK_WORDS: usize = VALUE_BLOCK * KEY_PAIRS;

/// Whether the real tiles can run [`segment_attention_tiles`] here (`gemm::amx::status`).
pub fn tiles_available() -> bool {
    amx::status().bf16
}

/// [`super::segment_attention_masked`] with `Q K^T` and `P V` on `unit`'s tiles in bf16
/// (see the module documentation for the roundings).
///
/// Fails (without running anything) where `unit` is the hardware and
/// [`tiles_available`] is false, and on the inputs the vector kernel refuses.
pub fn segment_attention_tiles(
    unit: Unit,
    dims: AttentionDims,
    scale: f32,
    masking: Masking,
    groups: &[RowGroup],
    queries: &[f32],
    out: &mut [f32],
) -> Result<(), AttentionError> {
    segment_attention_tiles_on(
        SimdPath::best(),
        unit,
        dims,
        scale,
        masking,
        groups,
        queries,
        out,
    )
}

/// [`segment_attention_tiles`] with the work around the tiles (packing, the softmax
/// update) on a chosen vector path: every path gives the same bits (tests compare them).
#[allow(clippy::too_many_arguments)]
pub fn segment_attention_tiles_on(
    path: SimdPath,
    unit: Unit,
    dims: AttentionDims,
    scale: f32,
    masking: Masking,
    groups: &[RowGroup],
    queries: &[f32],
    out: &mut [f32],
) -> Result<(), AttentionError> {
    if masking.window == Some(0) || masking.softcap.is_some_and(|c| c <= 0.0 || !c.is_finite()) {
        return Err(AttentionError(format!(
            "a window must be positive and a soft-cap positive and finite: {masking:?}"
        )));
    }
    if !path.available() {
        return Err(AttentionError(format!(
            "{path:?} is not supported by this CPU"
        )));
    }
    if unit == Unit::Hardware && !tiles_available() {
        return Err(AttentionError(format!(
            "AMX bf16 tiles are not available: {}",
            amx::status().reason.clone().unwrap_or_default()
        )));
    }
    validate(dims, groups, queries, out)?;
    timing::call(Kernel::Attention, |sums| match sums {
        None => run_call::<false>(path, unit, dims, scale, masking, groups, queries, out, None),
        Some(_) => run_call::<true>(path, unit, dims, scale, masking, groups, queries, out, sums),
    });
    Ok(())
}

/// One checked call; with `TIMED`, its parts' ticks added to `sums` (`crate::timing`).
#[allow(clippy::too_many_arguments)]
fn run_call<const TIMED: bool>(
    path: SimdPath,
    unit: Unit,
    dims: AttentionDims,
    scale: f32,
    masking: Masking,
    groups: &[RowGroup],
    queries: &[f32],
    out: &mut [f32],
    sums: Option<&CallTicks>,
) {
    crate::reuse::with_reused(&PACKED, |(prefix_buffer, own_buffer)| {
        let shape = Shape::of(dims);
        let offsets = pack_prefixes::<TIMED>(path, shape, dims, groups, prefix_buffer, sums);
        let own_offsets = pack_own::<TIMED>(path, shape, dims, groups, own_buffer, sums);
        let job = Job {
            dims,
            shape,
            scale: scale * std::f32::consts::LOG2_E,
            window: masking.window,
            softcap: masking
                .softcap
                .map_or(0.0, |c| c * std::f32::consts::LOG2_E),
            groups,
            queries,
            out: OutPtr(out.as_mut_ptr()),
            prefix: prefix_buffer,
            offsets: &offsets,
            own: own_buffer,
            own_offsets: &own_offsets,
            sums,
        };
        match unit {
            // SAFETY: the model runs anywhere; `path` was checked.
            Unit::Model => unsafe { job.run::<amx::TileModel, TIMED>(path) },
            Unit::Hardware => {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `tiles_available` (checked by the caller): the CPU has AMX-BF16
                // and the OS granted the tile state; `path` was checked.
                unsafe {
                    job.run::<amx::Hardware, TIMED>(path)
                }
            }
        }
    });
}

thread_local! {
    /// Packed prefix tiles and own tiles, reused across calls on this thread.
    static PACKED: std::cell::RefCell<(Vec<u32>, Vec<u32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// The packed sizes of one head width.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Head width.
    dim: usize,
    /// Pairs of a packed key row and rows of the queries' operand: the head's pairs,
    /// padded to whole tile rows.
    pairs: usize,
    /// 32-column blocks of the head (value steps per key tile).
    value_blocks: usize,
}

impl Shape {
    fn of(dims: AttentionDims) -> Shape {
        Shape {
            dim: dims.head_dim,
            pairs: (dims.head_dim / 2).next_multiple_of(ROW_PAIRS),
            value_blocks: dims.head_dim.div_ceil(VALUE_BLOCK),
        }
    }

    /// Words of a packed key tile (32 keys of `pairs` words).
    fn key_words(&self) -> usize {
        self.pairs * KEY_TILE
    }

    /// Words of one packed tile: keys, then values (per block, 32 columns by 16 key
    /// pairs).
    fn tile_words(&self) -> usize {
        self.key_words() + self.value_blocks * VALUE_BLOCK_WORDS
    }

    /// The head width padded to whole value blocks (rows of the outputs).
    fn padded(&self) -> usize {
        self.value_blocks * VALUE_BLOCK
    }
}

/// Two values as one bf16 pair (the first in the low half).
#[inline(always)]
fn pair(even: f32, odd: f32) -> u32 {
    round_to_bf16(even) as u32 | ((round_to_bf16(odd) as u32) << 16)
}

/// `row` (an even number of floats) times `scale`, as bf16 pairs into `out` (one word
/// per pair; `out` may be longer: the rest is left).
#[inline(always)]
fn pairs_of(row: &[f32], scale: f32, out: &mut [u32]) {
    for (word, two) in out.iter_mut().zip(row.chunks_exact(2)) {
        *word = pair(two[0] * scale, two[1] * scale);
    }
}

/// `dst[c * rows + r] = src[r * cols + c]` for a `rows x cols` matrix of words (both
/// multiples of 16), in blocks of 16 x 16 on `R`'s instructions.
///
/// # Safety
/// The CPU has `R`'s instructions.
#[inline(always)]
unsafe fn transpose_words<R: Rows>(src: &[u32], rows: usize, cols: usize, dst: &mut [u32]) {
    assert!(rows.is_multiple_of(16) && cols.is_multiple_of(16));
    assert!(src.len() >= rows * cols && dst.len() >= rows * cols);
    for r0 in (0..rows).step_by(16) {
        for c0 in (0..cols).step_by(16) {
            let (from, to) = (&src[r0 * cols + c0..], &mut dst[c0 * rows + r0..]);
            // SAFETY: the caller's promise.
            unsafe { R::transpose16(from, cols, to, rows) };
        }
    }
}

/// Round and pack `len <= KEY_TILE` keys and values (rows of `shape.dim` floats) into
/// `out` (`shape.tile_words()` words; zero wherever no key or dimension lies): keys as
/// the `A` operand of `S^T = K Q^T` (a row of `pairs` words per key: the key's bf16 in
/// order), values as the `A` operands of `O^T = V^T P^T` (per block of 32 value columns,
/// a row of 16 words per column: column `c` of keys `2k` and `2k + 1` in word `k`).
/// `scratch` holds the interleaved values on the way.
///
/// # Safety
/// The CPU has `R`'s instructions.
#[inline(always)]
unsafe fn pack_tile<R: Rows>(
    shape: Shape,
    keys: &[f32],
    values: &[f32],
    len: usize,
    out: &mut [u32],
    scratch: &mut Vec<u32>,
) {
    let dim = shape.dim;
    let out = &mut out[..shape.tile_words()];
    out.fill(0);
    let (key_part, value_part) = out.split_at_mut(shape.key_words());
    for (row, key) in key_part
        .chunks_exact_mut(shape.pairs)
        .zip(keys.chunks_exact(dim).take(len))
    {
        pairs_of(key, 1.0, row);
    }
    // Word (k, c) of `scratch`: column c of keys 2k and 2k + 1 (zero past the tile).
    let padded = shape.padded();
    let interleaved = at_least(scratch, KEY_PAIRS * padded);
    interleaved.fill(0);
    for (k, rows) in values[..len * dim].chunks(2 * dim).enumerate() {
        let (even, odd) = rows.split_at(dim);
        let words = &mut interleaved[k * padded..k * padded + dim];
        if odd.is_empty() {
            for (word, &e) in words.iter_mut().zip(even) {
                *word = pair(e, 0.0);
            }
        } else {
            for ((word, &e), &o) in words.iter_mut().zip(even).zip(odd) {
                *word = pair(e, o);
            }
        }
    }
    // Per block, (c, k) from (k, c): two 16 x 16 transposes.
    for (b, block) in value_part.chunks_exact_mut(VALUE_BLOCK_WORDS).enumerate() {
        for c0 in [0, 16] {
            let from = &interleaved[b * VALUE_BLOCK + c0..];
            // SAFETY: the caller's promise.
            unsafe { R::transpose16(from, padded, &mut block[c0 * KEY_PAIRS..], KEY_PAIRS) };
        }
    }
}

/// [`pack_tile`] on `path`'s instructions.
fn pack_tile_on(
    path: SimdPath,
    shape: Shape,
    keys: &[f32],
    values: &[f32],
    len: usize,
    out: &mut [u32],
    scratch: &mut Vec<u32>,
) {
    #[cfg_attr(
        target_arch = "x86_64",
        target_feature(enable = "avx512f,avx512vl,fma")
    )]
    unsafe fn avx512(s: Shape, k: &[f32], v: &[f32], l: usize, o: &mut [u32], t: &mut Vec<u32>) {
        pack_tile::<Avx512Rows>(s, k, v, l, o, t)
    }
    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
    unsafe fn avx2(s: Shape, k: &[f32], v: &[f32], l: usize, o: &mut [u32], t: &mut Vec<u32>) {
        pack_tile::<Avx2Rows>(s, k, v, l, o, t)
    }
    assert!(path.available());
    // SAFETY: the path's features were checked.
    unsafe {
        match path {
            SimdPath::Avx512 => avx512(shape, keys, values, len, out, scratch),
            SimdPath::Avx2 => avx2(shape, keys, values, len, out, scratch),
            SimdPath::Neon | SimdPath::Portable => {
                pack_tile::<PlainRows>(shape, keys, values, len, out, scratch)
            }
        }
    }
}

/// Every distinct prefix segment packed once, per key/value head and key tile, into
/// `buffer`; where each segment (by the address and length of its keys) starts.
fn pack_prefixes<const TIMED: bool>(
    path: SimdPath,
    shape: Shape,
    dims: AttentionDims,
    groups: &[RowGroup],
    buffer: &mut Vec<u32>,
    sums: Option<&CallTicks>,
) -> HashMap<(usize, usize), usize> {
    let mut offsets = HashMap::new();
    let mut distinct = Vec::new();
    let mut total = 0;
    for segment in groups.iter().flat_map(|g| g.prefix) {
        let key = (segment.keys.as_ptr() as usize, segment.len);
        if segment.len > 0 && !offsets.contains_key(&key) {
            offsets.insert(key, total);
            let size = dims.kv_heads * segment.len.div_ceil(KEY_TILE) * shape.tile_words();
            distinct.push((*segment, size));
            total += size;
        }
    }
    let mut rest = at_least(buffer, total);
    let mut pieces = Vec::with_capacity(distinct.len());
    for (segment, size) in distinct {
        let (piece, tail) = rest.split_at_mut(size);
        pieces.push((segment, piece));
        rest = tail;
    }
    let (dim, words) = (shape.dim, shape.tile_words());
    pieces.into_par_iter().for_each(|(segment, piece)| {
        let mut watch = Stopwatch::<TIMED>::new();
        let tiles = segment.len.div_ceil(KEY_TILE);
        let mut scratch = Vec::new();
        for kv_head in 0..dims.kv_heads {
            for t in 0..tiles {
                let start = t * KEY_TILE;
                let len = KEY_TILE.min(segment.len - start);
                let at = (kv_head * segment.len + start) * dim;
                let range = at..at + len * dim;
                pack_tile_on(
                    path,
                    shape,
                    &segment.keys[range.clone()],
                    &segment.values[range],
                    len,
                    &mut piece[(kv_head * tiles + t) * words..],
                    &mut scratch,
                );
            }
        }
        watch.lap(Part::AttentionPacking);
        watch.flush(sums);
    });
    offsets
}

/// Every group's own positions packed (`(rows, kv_heads, own_tiles)` tiles per group,
/// only the tiles holding real positions filled); where each group's part starts.
fn pack_own<const TIMED: bool>(
    path: SimdPath,
    shape: Shape,
    dims: AttentionDims,
    groups: &[RowGroup],
    buffer: &mut Vec<u32>,
    sums: Option<&CallTicks>,
) -> Vec<usize> {
    let words = shape.tile_words();
    let sizes: Vec<usize> = groups
        .iter()
        .map(|g| g.lengths.len() * dims.kv_heads * own_tiles(g) * words)
        .collect();
    let mut offsets = Vec::with_capacity(groups.len());
    let mut total = 0;
    for size in &sizes {
        offsets.push(total);
        total += size;
    }
    let mut rest = at_least(buffer, total);
    let mut pieces = Vec::with_capacity(groups.len());
    for (group, &size) in groups.iter().zip(&sizes) {
        let (piece, tail) = rest.split_at_mut(size);
        pieces.push((group, piece));
        rest = tail;
    }
    let dim = shape.dim;
    pieces.into_par_iter().for_each(|(group, piece)| {
        let mut watch = Stopwatch::<TIMED>::new();
        let tiles = own_tiles(group);
        let mut scratch = Vec::new();
        for (row, &length) in group.lengths.iter().enumerate() {
            for kv_head in 0..dims.kv_heads {
                let base = (row * dims.kv_heads + kv_head) * group.stride * dim;
                let base_t = (row * dims.kv_heads + kv_head) * tiles;
                for t in 0..length.div_ceil(KEY_TILE) {
                    let start = t * KEY_TILE;
                    let len = KEY_TILE.min(length - start);
                    let at = base + start * dim;
                    pack_tile_on(
                        path,
                        shape,
                        &group.keys[at..at + len * dim],
                        &group.values[at..at + len * dim],
                        len,
                        &mut piece[(base_t + t) * words..],
                        &mut scratch,
                    );
                }
            }
        }
        watch.lap(Part::AttentionPacking);
        watch.flush(sums);
    });
    offsets
}

struct Job<'a> {
    dims: AttentionDims,
    shape: Shape,
    /// `scale * log2(e)`: scores come out in base 2.
    scale: f32,
    window: Option<usize>,
    /// The soft-cap in base 2 (0: none).
    softcap: f32,
    groups: &'a [RowGroup<'a>],
    queries: &'a [f32],
    out: OutPtr,
    prefix: &'a [u32],
    offsets: &'a HashMap<(usize, usize), usize>,
    own: &'a [u32],
    own_offsets: &'a [usize],
    /// Where a timed call's workers add their ticks.
    sums: Option<&'a CallTicks>,
}

/// The running state of one chunk of queries, transposed: a lane per query.
struct Chunk {
    /// Rounded queries as the `B` operand of `S^T = K Q^T`: `Shape::pairs` rows of
    /// [`QUERY_CHUNK`] words (pair `p` of query `q` at `p * QUERY_CHUNK + q`; padding
    /// and absent queries zero).
    q: Vec<u32>,
    /// Unnormalised outputs, a row of [`QUERY_CHUNK`] per dimension of the head padded
    /// to whole value blocks.
    acc: Vec<f32>,
    /// Scores, maxima, sums, masks and probabilities (`P^T`, the `B` operand of `P V`).
    softmax: TileSoftmax,
    /// The `O^T` output blocks of a tile: per block of 32 value columns, a row of the
    /// chunk's queries per column.
    blocks: Vec<[f32; QUERY_CHUNK]>,
}

impl Job<'_> {
    fn chunks(&self, group: &RowGroup) -> usize {
        query_chunks(self.dims, group)
    }

    /// # Safety
    /// `U`'s instructions and `path` must be available on this machine.
    unsafe fn run<U: TileUnit, const TIMED: bool>(&self, path: SimdPath) {
        let items: Vec<(usize, usize)> = self
            .groups
            .iter()
            .enumerate()
            .flat_map(|(g, group)| {
                (0..self.chunks(group) * self.dims.kv_heads).map(move |i| (g, i))
            })
            .collect();
        items.into_par_iter().for_each(|(g, item)| {
            let chunks = self.chunks(&self.groups[g]);
            let (kv_head, chunk) = (item / chunks, item % chunks);
            U::with_this_thread(|unit| {
                // SAFETY: the caller's promise.
                unsafe {
                    with_config(unit, &BF16_CONFIG, |unit| {
                        let mut watch = Stopwatch::<TIMED>::new();
                        let w = &mut watch;
                        match path {
                            SimdPath::Avx512 => self.chunk_avx512(unit, g, kv_head, chunk, w),
                            SimdPath::Avx2 => self.chunk_avx2(unit, g, kv_head, chunk, w),
                            SimdPath::Neon => self.chunk_neon(unit, g, kv_head, chunk, w),
                            SimdPath::Portable => {
                                self.chunk::<U, PlainRows, TIMED>(unit, g, kv_head, chunk, w)
                            }
                        }
                        watch.flush(self.sums);
                    })
                }
            });
        });
    }

    #[cfg_attr(
        target_arch = "x86_64",
        target_feature(enable = "avx512f,avx512vl,fma")
    )]
    unsafe fn chunk_avx512<U: TileUnit, const T: bool>(
        &self,
        u: &mut U,
        g: usize,
        h: usize,
        c: usize,
        w: &mut Stopwatch<T>,
    ) {
        self.chunk::<U, Avx512Rows, T>(u, g, h, c, w)
    }

    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
    unsafe fn chunk_avx2<U: TileUnit, const T: bool>(
        &self,
        u: &mut U,
        g: usize,
        h: usize,
        c: usize,
        w: &mut Stopwatch<T>,
    ) {
        self.chunk::<U, Avx2Rows, T>(u, g, h, c, w)
    }

    #[cfg_attr(target_arch = "aarch64", target_feature(enable = "neon"))]
    unsafe fn chunk_neon<U: TileUnit, const T: bool>(
        &self,
        u: &mut U,
        g: usize,
        h: usize,
        c: usize,
        w: &mut Stopwatch<T>,
    ) {
        self.chunk::<U, PlainRows, T>(u, g, h, c, w)
    }

    /// Chunk `chunk` of key/value head `kv_head` of group `g`.
    ///
    /// # Safety
    /// `U`'s and `R`'s instructions must be available, with [`BF16_CONFIG`] loaded.
    #[inline(always)]
    unsafe fn chunk<U: TileUnit, R: Rows, const TIMED: bool>(
        &self,
        unit: &mut U,
        g: usize,
        kv_head: usize,
        chunk: usize,
        watch: &mut Stopwatch<TIMED>,
    ) {
        let (dims, shape) = (self.dims, self.shape);
        let group = &self.groups[g];
        let (dim, heads_per_kv) = (dims.head_dim, dims.group_size());
        let width = dims.heads * dim;
        let tokens: usize = group.lengths.iter().sum();
        let first_query = chunk * QUERY_CHUNK;
        let n = QUERY_CHUNK.min(tokens * heads_per_kv - first_query);
        let mut st = Chunk {
            q: vec![0; QUERY_CHUNK * shape.pairs],
            acc: vec![0.0; shape.padded() * QUERY_CHUNK],
            softmax: TileSoftmax::new(),
            blocks: vec![[0.0; QUERY_CHUNK]; shape.padded()],
        };
        st.softmax.softcap = self.softcap;

        // Where each query comes from: row, position, output slot; its pairs a row of
        // `rows`, transposed into the operand.
        let mut rows = [0usize; QUERY_CHUNK];
        let mut positions = [0usize; QUERY_CHUNK];
        let mut slots = [0usize; QUERY_CHUNK];
        let mut query_rows = vec![0u32; QUERY_CHUNK * shape.pairs];
        let (mut row, mut row_start) = (0, 0);
        for i in 0..n {
            let query = first_query + i;
            let token = query / heads_per_kv;
            while token >= row_start + group.lengths[row] {
                row_start += group.lengths[row];
                row += 1;
            }
            let head = kv_head * heads_per_kv + query % heads_per_kv;
            rows[i] = row;
            positions[i] = token - row_start;
            slots[i] = (group.first_token + token) * width + head * dim;
            let q = &self.queries[slots[i]..slots[i] + dim];
            pairs_of(q, self.scale, &mut query_rows[i * shape.pairs..]);
        }
        // SAFETY: the caller's promise.
        unsafe { transpose_words::<R>(&query_rows, QUERY_CHUNK, shape.pairs, &mut st.q) };
        watch.lap(Part::AttentionPacking);

        // The shared prefix, as in the vector kernel.
        let prefix_len: usize = group.prefix.iter().map(|s| s.len).sum();
        let words = shape.tile_words();
        let mut segment_start = 0;
        for segment in group.prefix {
            let segment_at = segment_start;
            segment_start += segment.len;
            if segment.len == 0 {
                continue;
            }
            let tiles = segment.len.div_ceil(KEY_TILE);
            let base = self.offsets[&(segment.keys.as_ptr() as usize, segment.len)]
                + kv_head * tiles * words;
            for t in 0..tiles {
                let start = t * KEY_TILE;
                let len = KEY_TILE.min(segment.len - start);
                let softmax = &mut st.softmax;
                for q in 0..QUERY_CHUNK {
                    softmax.visible[q] = if q < n { len as u32 } else { 0 };
                    softmax.first_visible[q] = 0;
                }
                if let Some(window) = self.window {
                    let tile_at = segment_at + start;
                    for (first, &position) in
                        softmax.first_visible[..n].iter_mut().zip(&positions[..n])
                    {
                        let lowest = (prefix_len + position + 1).saturating_sub(window);
                        *first = lowest.saturating_sub(tile_at).min(len) as u32;
                    }
                    if softmax.first_visible[..n]
                        .iter()
                        .all(|&f| f as usize >= len)
                    {
                        continue;
                    }
                }
                let packed = &self.prefix[base + t * words..base + (t + 1) * words];
                self.tile::<U, R, TIMED>(unit, &mut st, 0..n, packed, watch);
            }
        }

        // Each row's own keys, causally: runs of queries from the same row.
        let own = &self.own[self.own_offsets[g]..];
        let mut first = 0;
        while first < n {
            let row = rows[first];
            let mut end = first;
            while end < n && rows[end] == row {
                end += 1;
            }
            let base_t = (row * dims.kv_heads + kv_head) * own_tiles(group);
            let last_position = positions[end - 1];
            let (mut start, mut from) = (0, first);
            while start <= last_position {
                while positions[from] < start {
                    from += 1;
                }
                let len = KEY_TILE.min(last_position + 1 - start);
                let softmax = &mut st.softmax;
                let lanes = softmax.visible.iter_mut().zip(&mut softmax.first_visible);
                for (q, (visible, first_visible)) in lanes.enumerate() {
                    (*visible, *first_visible) = if (from..end).contains(&q) {
                        let position = positions[q];
                        let first = match self.window {
                            Some(window) => (position + 1)
                                .saturating_sub(window)
                                .saturating_sub(start)
                                .min(len),
                            None => 0,
                        };
                        ((position + 1 - start).min(len) as u32, first as u32)
                    } else {
                        (0, 0)
                    };
                }
                let at = (base_t + start / KEY_TILE) * words;
                self.tile::<U, R, TIMED>(unit, &mut st, from..end, &own[at..at + words], watch);
                start += KEY_TILE;
            }
            first = end;
        }

        let mut inverse = [0f32; QUERY_CHUNK];
        for (x, &sum) in inverse.iter_mut().zip(&st.softmax.sum) {
            *x = 1.0 / sum;
        }
        for (i, &slot) in slots.iter().enumerate().take(n) {
            // SAFETY: `slot` is this work item's own (token, head), inside `out`
            // (checked by `validate`); no other item writes it.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.out.0.add(slot), dim) };
            for (d, x) in dst.iter_mut().enumerate() {
                *x = st.acc[d * QUERY_CHUNK + i] * inverse[i];
            }
        }
        watch.lap(Part::AttentionOther);
    }

    /// Queries `run` of the chunk against one packed tile (`Shape::tile_words` words),
    /// their visible keys set in `st.softmax` (and no key for every other query): scores
    /// on the tiles, the softmax update, `P V` on the tiles.
    ///
    /// # Safety
    /// `U`'s and `R`'s instructions must be available, with [`BF16_CONFIG`] loaded.
    #[inline(always)]
    unsafe fn tile<U: TileUnit, R: Rows, const TIMED: bool>(
        &self,
        unit: &mut U,
        st: &mut Chunk,
        run: std::ops::Range<usize>,
        packed: &[u32],
        watch: &mut Stopwatch<TIMED>,
    ) {
        let shape = self.shape;
        // Every load below stays inside these.
        assert!(packed.len() >= shape.tile_words() && st.q.len() >= QUERY_CHUNK * shape.pairs);
        assert!(st.acc.len() >= shape.padded() * QUERY_CHUNK);
        let (keys, values) = packed.split_at(shape.key_words());
        assert!(st.blocks.len() >= shape.padded());
        watch.lap(Part::AttentionOther);
        unit.zero_c();
        for s in 0..shape.pairs / ROW_PAIRS {
            unit.step(
                Product::Bf16,
                Operands {
                    a: keys[s * ROW_PAIRS..].as_ptr().cast(),
                    a_stride: 4 * shape.pairs,
                    b: st.q[s * ROW_PAIRS * QUERY_CHUNK..].as_ptr().cast(),
                    b_stride: B_STRIDE,
                },
            );
        }
        unit.store_c(st.softmax.scores.as_mut_ptr().cast(), B_STRIDE);
        watch.lap(Part::AttentionTiles);

        st.softmax.update_inline::<R>(&mut st.acc);
        watch.lap(Part::AttentionSoftmax);
        // The run's lanes take the products (the others' probabilities are zero anyway).
        let lanes = ((1u64 << run.end) - (1u64 << run.start)) as u32;

        // Every value block's products, then every block's addition into the outputs.
        for b in 0..shape.value_blocks {
            unit.zero_c();
            unit.step(
                Product::Bf16,
                Operands {
                    a: values[b * VALUE_BLOCK_WORDS..].as_ptr().cast(),
                    a_stride: 4 * KEY_PAIRS,
                    b: st.softmax.p.as_ptr().cast(),
                    b_stride: B_STRIDE,
                },
            );
            unit.store_c(st.blocks[b * VALUE_BLOCK..].as_mut_ptr().cast(), B_STRIDE);
        }
        watch.lap(Part::AttentionTiles);
        let rows = &mut st.acc.as_chunks_mut::<QUERY_CHUNK>().0[..shape.padded()];
        R::add_where(rows, &st.blocks[..shape.padded()], lanes);
    }
}

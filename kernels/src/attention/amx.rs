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
//! key tile of [`KEY_TILE`] = 32 keys, one 32x32 output block of the driver's registers:
//! - scores `S = Q~ K~^T`: the chunk's queries, times `scale * log2(e)` in f32 and then
//!   rounded to bf16 (`Q~`), are the `A` rows (padding rows zero); the tile's keys,
//!   rounded to bf16 (`K~`) and packed as pairs of head dimensions by 32 keys (the `B`
//!   layout: the two bf16 of a pair side by side, 128 bytes a row) are `B`; head widths
//!   not a multiple of 32 pad with zero pairs, short tiles with zero keys;
//! - the online softmax in f32 on the stored scores (masked keys at `-inf`, so their
//!   probabilities are exactly 0): new maximum, rescale of the sums and outputs, then
//!   each probability rounded to bf16 (`P~`), and the running sum adds the ROUNDED
//!   probabilities, so the normalised weights are exactly those multiplied;
//! - `P~ V~`: the 32 probabilities of a query (16 pairs of keys, one `A` tile row) times
//!   the tile's values rounded to bf16 and packed as pairs of keys by 32 value columns,
//!   one step per 32 columns of the head; the stored block is added to the f32 outputs.
//!
//! Every key and value of a distinct prefix segment, and of each row's own positions, is
//! rounded and packed once per call (into buffers the calling thread keeps), as the
//! vector kernel transposes them once. A tile row of `C` depends only on its own `A`
//! row, so a query's result does not depend on its neighbours in a chunk, and the work
//! items run in parallel with results independent of the number of threads.
//!
//! Numbers: this differs from the f32 kernel by the bf16 roundings of `Q`, `K`, `P` and
//! `V` (2^-8 relative each); `tests/attention_tiles.rs` derives and checks the bound.

use rayon::prelude::*;
use std::collections::HashMap;

use super::exp::{exp2_non_positive, Separate};
use super::tile::{KEY_TILE, QUERY_CHUNK};
use super::{
    at_least, own_tiles, query_chunks, validate, AttentionDims, AttentionError, Masking, OutPtr,
    RowGroup,
};
use crate::gemm::amx::{self, with_config, Operands, Product, TileUnit, Unit, BF16_CONFIG};
use crate::gemm::bf16::{round_to_bf16, widen};

/// Pairs (u32 words) of one tile row: 16, 64 bytes.
const ROW_PAIRS: usize = 16;
/// Bytes from one row of a packed `B` operand (32 columns of pairs) to the next.
const B_STRIDE: usize = 4 * KEY_TILE;
/// Value columns per output block (two `B` tiles of 16).
const VALUE_BLOCK: usize = 32;

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
    if masking.window == Some(0) || masking.softcap.is_some_and(|c| c <= 0.0 || !c.is_finite()) {
        return Err(AttentionError(format!(
            "a window must be positive and a soft-cap positive and finite: {masking:?}"
        )));
    }
    if unit == Unit::Hardware && !tiles_available() {
        return Err(AttentionError(format!(
            "AMX bf16 tiles are not available: {}",
            amx::status().reason.clone().unwrap_or_default()
        )));
    }
    validate(dims, groups, queries, out)?;
    crate::reuse::with_reused(&PACKED, |(prefix_buffer, own_buffer)| {
        let shape = Shape::of(dims);
        let offsets = pack_prefixes(shape, dims, groups, prefix_buffer);
        let own_offsets = pack_own(shape, dims, groups, own_buffer);
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
        };
        match unit {
            // SAFETY: the model runs anywhere.
            Unit::Model => unsafe { job.run::<amx::TileModel>() },
            Unit::Hardware => {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `tiles_available` (checked above): the CPU has AMX-BF16 and the
                // OS granted the tile state.
                unsafe {
                    job.run::<amx::Hardware>()
                }
            }
        }
    });
    Ok(())
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
    /// Pairs of a query row and rows of a packed key tile: the head's pairs, padded to
    /// whole tile rows.
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

    /// Words of a packed key tile (`pairs` rows of 32 keys).
    fn key_words(&self) -> usize {
        self.pairs * KEY_TILE
    }

    /// Words of one packed tile: keys, then values (per block, 16 key pairs by 32
    /// columns).
    fn tile_words(&self) -> usize {
        self.key_words() + self.value_blocks * ROW_PAIRS * VALUE_BLOCK
    }
}

/// Two values as one bf16 pair (the first in the low half).
fn pair(even: f32, odd: f32) -> u32 {
    round_to_bf16(even) as u32 | ((round_to_bf16(odd) as u32) << 16)
}

/// Round and pack `len <= KEY_TILE` keys and values (rows of `shape.dim` floats) into
/// `out` (`shape.tile_words()` words; zero wherever no key or dimension lies).
fn pack_tile(shape: Shape, keys: &[f32], values: &[f32], len: usize, out: &mut [u32]) {
    let dim = shape.dim;
    let out = &mut out[..shape.tile_words()];
    out.fill(0);
    let (key_part, value_part) = out.split_at_mut(shape.key_words());
    for (j, key) in keys.chunks_exact(dim).take(len).enumerate() {
        for (p, two) in key.chunks_exact(2).enumerate() {
            key_part[p * KEY_TILE + j] = pair(two[0], two[1]);
        }
    }
    for (q, rows) in values[..len * dim].chunks(2 * dim).enumerate() {
        let (even, odd) = rows.split_at(dim);
        for c in 0..dim {
            let at = (c / VALUE_BLOCK) * ROW_PAIRS * VALUE_BLOCK + q * VALUE_BLOCK;
            value_part[at + c % VALUE_BLOCK] = pair(even[c], odd.get(c).copied().unwrap_or(0.0));
        }
    }
}

/// Every distinct prefix segment packed once, per key/value head and key tile, into
/// `buffer`; where each segment (by the address and length of its keys) starts.
fn pack_prefixes(
    shape: Shape,
    dims: AttentionDims,
    groups: &[RowGroup],
    buffer: &mut Vec<u32>,
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
        let tiles = segment.len.div_ceil(KEY_TILE);
        for kv_head in 0..dims.kv_heads {
            for t in 0..tiles {
                let start = t * KEY_TILE;
                let len = KEY_TILE.min(segment.len - start);
                let at = (kv_head * segment.len + start) * dim;
                let range = at..at + len * dim;
                pack_tile(
                    shape,
                    &segment.keys[range.clone()],
                    &segment.values[range],
                    len,
                    &mut piece[(kv_head * tiles + t) * words..],
                );
            }
        }
    });
    offsets
}

/// Every group's own positions packed (`(rows, kv_heads, own_tiles)` tiles per group,
/// only the tiles holding real positions filled); where each group's part starts.
fn pack_own(
    shape: Shape,
    dims: AttentionDims,
    groups: &[RowGroup],
    buffer: &mut Vec<u32>,
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
        let tiles = own_tiles(group);
        for (row, &length) in group.lengths.iter().enumerate() {
            for kv_head in 0..dims.kv_heads {
                let base = (row * dims.kv_heads + kv_head) * group.stride * dim;
                let base_t = (row * dims.kv_heads + kv_head) * tiles;
                for t in 0..length.div_ceil(KEY_TILE) {
                    let start = t * KEY_TILE;
                    let len = KEY_TILE.min(length - start);
                    let at = base + start * dim;
                    pack_tile(
                        shape,
                        &group.keys[at..at + len * dim],
                        &group.values[at..at + len * dim],
                        len,
                        &mut piece[(base_t + t) * words..],
                    );
                }
            }
        }
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
}

/// The running state of one chunk of queries.
struct Chunk {
    /// Rounded queries as pairs, `QUERY_CHUNK` rows of `Shape::pairs` (padding zero).
    q: Vec<u32>,
    /// Unnormalised outputs, `QUERY_CHUNK` rows of the head width padded to whole
    /// value blocks.
    acc: Vec<f32>,
    max: [f32; QUERY_CHUNK],
    sum: [f32; QUERY_CHUNK],
    /// Keys of the current tile each query sees: `first_visible[i]..visible[i]`.
    visible: [usize; QUERY_CHUNK],
    first_visible: [usize; QUERY_CHUNK],
    /// The current tile's scores, then probabilities (`C` blocks as stored).
    scores: [[f32; KEY_TILE]; QUERY_CHUNK],
    /// The rounded probabilities as the `A` operand of `P V` (16 key pairs a row).
    p: [[u32; ROW_PAIRS]; QUERY_CHUNK],
    /// One `P V` output block.
    block: [[f32; VALUE_BLOCK]; QUERY_CHUNK],
}

impl Job<'_> {
    fn chunks(&self, group: &RowGroup) -> usize {
        query_chunks(self.dims, group)
    }

    /// # Safety
    /// `U`'s instructions must be available on this machine.
    unsafe fn run<U: TileUnit>(&self) {
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
            U::with_this_thread(|unit| {
                // SAFETY: the caller's promise.
                unsafe {
                    with_config(unit, &BF16_CONFIG, |unit| {
                        self.chunk(unit, g, item / chunks, item % chunks)
                    })
                }
            });
        });
    }

    /// Chunk `chunk` of key/value head `kv_head` of group `g`.
    ///
    /// # Safety
    /// `U`'s instructions must be available, with [`BF16_CONFIG`] loaded.
    unsafe fn chunk<U: TileUnit>(&self, unit: &mut U, g: usize, kv_head: usize, chunk: usize) {
        let (dims, shape) = (self.dims, self.shape);
        let group = &self.groups[g];
        let (dim, heads_per_kv) = (dims.head_dim, dims.group_size());
        let width = dims.heads * dim;
        let tokens: usize = group.lengths.iter().sum();
        let first_query = chunk * QUERY_CHUNK;
        let n = QUERY_CHUNK.min(tokens * heads_per_kv - first_query);
        let padded = shape.value_blocks * VALUE_BLOCK;
        let mut st = Chunk {
            q: vec![0; QUERY_CHUNK * shape.pairs],
            acc: vec![0.0; QUERY_CHUNK * padded],
            max: [f32::NEG_INFINITY; QUERY_CHUNK],
            sum: [0.0; QUERY_CHUNK],
            visible: [0; QUERY_CHUNK],
            first_visible: [0; QUERY_CHUNK],
            scores: [[0.0; KEY_TILE]; QUERY_CHUNK],
            p: [[0; ROW_PAIRS]; QUERY_CHUNK],
            block: [[0.0; VALUE_BLOCK]; QUERY_CHUNK],
        };

        // Where each query comes from: row, position, output slot.
        let mut rows = [0usize; QUERY_CHUNK];
        let mut positions = [0usize; QUERY_CHUNK];
        let mut slots = [0usize; QUERY_CHUNK];
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
            let packed = &mut st.q[i * shape.pairs..];
            for (p, two) in q.chunks_exact(2).enumerate() {
                packed[p] = pair(two[0] * self.scale, two[1] * self.scale);
            }
        }

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
                st.visible[..n].fill(len);
                st.first_visible[..n].fill(0);
                if let Some(window) = self.window {
                    let tile_at = segment_at + start;
                    for (first, &position) in st.first_visible[..n].iter_mut().zip(&positions[..n])
                    {
                        let lowest = (prefix_len + position + 1).saturating_sub(window);
                        *first = lowest.saturating_sub(tile_at).min(len);
                    }
                    if st.first_visible[..n].iter().all(|&f| f >= len) {
                        continue;
                    }
                }
                let packed = &self.prefix[base + t * words..base + (t + 1) * words];
                self.tile(unit, &mut st, 0, n, packed);
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
                let seen = st.visible[from..end]
                    .iter_mut()
                    .zip(&mut st.first_visible[from..end]);
                for ((visible, first), &position) in seen.zip(&positions[from..end]) {
                    *visible = (position + 1 - start).min(len);
                    *first = match self.window {
                        Some(window) => (position + 1)
                            .saturating_sub(window)
                            .saturating_sub(start)
                            .min(len),
                        None => 0,
                    };
                }
                let at = (base_t + start / KEY_TILE) * words;
                self.tile(unit, &mut st, from, end, &own[at..at + words]);
                start += KEY_TILE;
            }
            first = end;
        }

        for (i, &slot) in slots.iter().enumerate().take(n) {
            let inverse = 1.0 / st.sum[i];
            // SAFETY: `slot` is this work item's own (token, head), inside `out`
            // (checked by `validate`); no other item writes it.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.out.0.add(slot), dim) };
            for (d, x) in dst.iter_mut().zip(&st.acc[i * padded..]) {
                *d = x * inverse;
            }
        }
    }

    /// Queries `first..end` of the chunk against one packed tile (`Shape::tile_words`
    /// words): scores on the tiles, the softmax update, `P V` on the tiles.
    ///
    /// # Safety
    /// `U`'s instructions must be available, with [`BF16_CONFIG`] loaded.
    unsafe fn tile<U: TileUnit>(
        &self,
        unit: &mut U,
        st: &mut Chunk,
        first: usize,
        end: usize,
        packed: &[u32],
    ) {
        let shape = self.shape;
        // Every load below stays inside these.
        assert!(packed.len() >= shape.tile_words() && st.q.len() >= QUERY_CHUNK * shape.pairs);
        let (keys, values) = packed.split_at(shape.key_words());
        unit.zero_c();
        for s in 0..shape.pairs / ROW_PAIRS {
            unit.step(
                Product::Bf16,
                Operands {
                    a: st.q[s * ROW_PAIRS..].as_ptr().cast(),
                    a_stride: 4 * shape.pairs,
                    b: keys[s * ROW_PAIRS * KEY_TILE..].as_ptr().cast(),
                    b_stride: B_STRIDE,
                },
            );
        }
        unit.store_c(st.scores.as_mut_ptr().cast(), 4 * KEY_TILE);

        // Rows outside the run multiply nothing (their results are dropped anyway).
        let (before, rest) = st.p.split_at_mut(first);
        for row in before.iter_mut().chain(&mut rest[end - first..]) {
            *row = [0; ROW_PAIRS];
        }
        for i in first..end {
            self.softmax_update(st, i);
        }

        let padded = shape.value_blocks * VALUE_BLOCK;
        for b in 0..shape.value_blocks {
            unit.zero_c();
            unit.step(
                Product::Bf16,
                Operands {
                    a: st.p.as_ptr().cast(),
                    a_stride: 4 * ROW_PAIRS,
                    b: values[b * ROW_PAIRS * VALUE_BLOCK..].as_ptr().cast(),
                    b_stride: B_STRIDE,
                },
            );
            unit.store_c(st.block.as_mut_ptr().cast(), 4 * VALUE_BLOCK);
            for i in first..end {
                let acc = &mut st.acc[i * padded + b * VALUE_BLOCK..][..VALUE_BLOCK];
                for (a, x) in acc.iter_mut().zip(&st.block[i]) {
                    *a += x;
                }
            }
        }
    }

    /// Fold query `i`'s tile scores into its running maximum and sum, rescale its
    /// outputs, and leave its rounded probabilities in `st.p[i]`.
    fn softmax_update(&self, st: &mut Chunk, i: usize) {
        let (first, visible) = (st.first_visible[i], st.visible[i]);
        if visible <= first {
            // No key of this tile is visible: an exact no-op on the state.
            st.p[i] = [0; ROW_PAIRS];
            return;
        }
        let row = &mut st.scores[i];
        if self.softcap > 0.0 {
            let cap = self.softcap;
            for s in row.iter_mut() {
                *s = cap * (*s / cap).tanh();
            }
        }
        let mut tile_max = f32::NEG_INFINITY;
        for (j, s) in row.iter_mut().enumerate() {
            if j < first || j >= visible {
                *s = f32::NEG_INFINITY;
            } else if *s > tile_max {
                tile_max = *s;
            }
        }
        let old_max = st.max[i];
        let new_max = if tile_max > old_max {
            tile_max
        } else {
            old_max
        };
        let alpha = exp2_non_positive::<Separate>(old_max - new_max);
        if alpha != 1.0 {
            st.sum[i] *= alpha;
            let padded = self.shape.value_blocks * VALUE_BLOCK;
            for x in &mut st.acc[i * padded..(i + 1) * padded] {
                *x *= alpha;
            }
        }
        let mut sum = st.sum[i];
        for (j, two) in row.chunks_exact(2).enumerate() {
            let even = round_to_bf16(exp2_non_positive::<Separate>(two[0] - new_max));
            let odd = round_to_bf16(exp2_non_positive::<Separate>(two[1] - new_max));
            sum += widen(even);
            sum += widen(odd);
            st.p[i][j] = even as u32 | ((odd as u32) << 16);
        }
        st.sum[i] = sum;
        st.max[i] = new_max;
    }
}

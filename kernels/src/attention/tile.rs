//! The inner loops of segment attention: one tile of keys and values against a chunk of
//! queries, with the online-softmax update in between.
//!
//! Everything here is written over fixed-size lane arrays (`[f32; 16]`) with constant
//! trip counts, so that the same source compiles to AVX-512 (one register per lane
//! array), AVX2 (two) or plain scalar code, depending on the target features of the
//! function it is inlined into. Each score and each output is accumulated in one fixed
//! order, whatever block of queries it is computed in: the result for a query depends
//! only on that query and the key tiles it sees, never on its neighbours in a chunk.

use super::exp::exp2_non_positive;
use super::transpose::transpose_tile_on;
use super::SimdPath;

pub(crate) use super::exp::{Fused, MulAdd, Separate};

/// Floats per lane array (one AVX-512 register).
pub(crate) const LANES: usize = 16;
/// Keys per tile.
pub(crate) const KEY_TILE: usize = 32;
/// Query vectors per chunk (one work item).
pub(crate) const QUERY_CHUNK: usize = 32;
/// Queries per score block where the vector registers hold 512 floats (AVX-512: 4 x 32
/// scores in 8 registers; 8 queries spill registers and made the whole kernel five times
/// slower there).
pub(crate) const SCORE_BLOCK_WIDE: usize = 4;
/// Queries per score block where they hold 128 floats (AVX2's 16 x 8, NEON's 32 x 4):
/// 2 x 32 scores and the 32 keys of one dimension; 4 spilled on AVX2.
pub(crate) const SCORE_BLOCK_NARROW: usize = 2;

pub(crate) type Lane = [f32; LANES];

/// The running state of a chunk of queries with `NV * 16`-dimensional heads.
pub(crate) struct ChunkState<const NV: usize> {
    /// Queries, pre-multiplied by `scale * log2(e)` (scores are then in base 2).
    pub q: [[Lane; NV]; QUERY_CHUNK],
    /// Unnormalised outputs.
    pub acc: [[Lane; NV]; QUERY_CHUNK],
    /// Running maximum score, and running sum of `2^(score - max)` kept per lane (see
    /// [`Self::total`]).
    pub max: [f32; QUERY_CHUNK],
    sum: [Lane; QUERY_CHUNK],
    /// How many keys of the current tile each query sees (from its start).
    pub visible: [usize; QUERY_CHUNK],
    /// The first key of the current tile each query sees (0 but where a sliding window
    /// hides the tile's first keys).
    pub first_visible: [usize; QUERY_CHUNK],
    /// Soft-cap of the (base-2) scores, `c * tanh(s / c)`; 0 for none.
    pub softcap: f32,
    /// The current key tile, transposed: `keys_t[v][lane][j]` is dimension
    /// `v * 16 + lane` of key `j` (a copy in the chunk's own memory, at fixed offsets:
    /// read from the shared buffer directly, the score loop does not vectorise).
    keys_t: [[[f32; KEY_TILE]; LANES]; NV],
    /// Scores, then probabilities, of the current tile.
    scores: [[f32; KEY_TILE]; QUERY_CHUNK],
}

impl<const NV: usize> ChunkState<NV> {
    pub const HEAD_DIM: usize = NV * LANES;

    pub fn new() -> Self {
        Self {
            q: [[[0.0; LANES]; NV]; QUERY_CHUNK],
            acc: [[[0.0; LANES]; NV]; QUERY_CHUNK],
            max: [f32::NEG_INFINITY; QUERY_CHUNK],
            sum: [[0.0; LANES]; QUERY_CHUNK],
            visible: [0; QUERY_CHUNK],
            first_visible: [0; QUERY_CHUNK],
            softcap: 0.0,
            keys_t: [[[0.0; KEY_TILE]; LANES]; NV],
            scores: [[0.0; KEY_TILE]; QUERY_CHUNK],
        }
    }

    /// Queries `first..end` of the chunk attend to `len <= KEY_TILE` keys, transposed by
    /// [`transpose_tile_on`](super::transpose::transpose_tile_on) (`keys_t`: `HEAD_DIM * KEY_TILE` floats), and their values
    /// (`len` rows of `HEAD_DIM` floats); query `i` sees the first `visible[i]` of them.
    /// `PV_BLOCK` queries share each load of a value row, `SCORE_BLOCK` each load of a
    /// key column (blocking changes speed only: every score and output is summed in the
    /// same order whatever the block). With `SLICED` and heads of 128 or more (`NV >= 8`) the value blocks
    /// run over one lane array of the head at a time, for registers too few to hold a
    /// block's outputs at the whole head width (AVX2's and NEON's 128 floats: one query of
    /// a 128-wide head is 16 AVX2 registers, 4 queries of one lane array 8). Narrower
    /// heads keep whole-width blocks: slicing them measured slower end to end
    /// (SmolLM2's 64-wide heads, docs/results.md).
    #[inline(always)]
    pub fn tile<M: MulAdd, const PV_BLOCK: usize, const SCORE_BLOCK: usize, const SLICED: bool>(
        &mut self,
        first: usize,
        end: usize,
        keys_t: &[f32],
        values: &[f32],
        len: usize,
    ) {
        let dim = Self::HEAD_DIM;
        assert!(keys_t.len() >= dim * KEY_TILE);
        for (v, block) in self.keys_t.iter_mut().enumerate() {
            for (lane, column) in block.iter_mut().enumerate() {
                let at = (v * LANES + lane) * KEY_TILE;
                column.copy_from_slice(&keys_t[at..at + KEY_TILE]);
            }
        }
        self.attend_loaded::<M, PV_BLOCK, SCORE_BLOCK, SLICED>(first, end, values, len);
    }

    /// [`Self::tile`] for keys as they lie (`len` rows of `HEAD_DIM` floats), transposed
    /// here on `path`: for keys that only this chunk reads (a decoding row's own prompt
    /// and generated keys), where transposing them once for all chunks would only add a
    /// pass over memory.
    #[inline(always)]
    pub fn tile_from_rows<
        M: MulAdd,
        const PV_BLOCK: usize,
        const SCORE_BLOCK: usize,
        const SLICED: bool,
    >(
        &mut self,
        path: SimdPath,
        first: usize,
        end: usize,
        keys: &[f32],
        values: &[f32],
        len: usize,
    ) {
        let dim = Self::HEAD_DIM;
        transpose_tile_on(
            path,
            keys,
            dim,
            len,
            self.keys_t.as_flattened_mut().as_flattened_mut(),
        );
        self.attend_loaded::<M, PV_BLOCK, SCORE_BLOCK, SLICED>(first, end, values, len);
    }

    /// Scores, softmax update and values of queries `first..end` against the tile in
    /// `keys_t`.
    #[inline(always)]
    fn attend_loaded<
        M: MulAdd,
        const PV_BLOCK: usize,
        const SCORE_BLOCK: usize,
        const SLICED: bool,
    >(
        &mut self,
        first: usize,
        end: usize,
        values: &[f32],
        len: usize,
    ) {
        let dim = Self::HEAD_DIM;
        assert!(end <= QUERY_CHUNK && first <= end);
        assert!(len <= KEY_TILE && values.len() >= len * dim);
        let mut i = first;
        while i + SCORE_BLOCK <= end {
            self.score_block::<M, SCORE_BLOCK>(i);
            i += SCORE_BLOCK;
        }
        while i < end {
            self.score_block::<M, 1>(i);
            i += 1;
        }
        for i in first..end {
            self.softmax_update::<M>(i);
        }
        let mut i = first;
        while i + PV_BLOCK <= end {
            if SLICED && NV >= 8 {
                self.value_block_sliced::<M, PV_BLOCK>(i, values, len);
            } else {
                self.value_block::<M, PV_BLOCK>(i, values, len);
            }
            i += PV_BLOCK;
        }
        while i < end {
            if SLICED && NV >= 8 {
                self.value_block_sliced::<M, 1>(i, values, len);
            } else {
                self.value_block::<M, 1>(i, values, len);
            }
            i += 1;
        }
    }

    /// Scores of `N` queries from `first` against the whole tile.
    #[inline(always)]
    fn score_block<M: MulAdd, const N: usize>(&mut self, first: usize) {
        let mut acc = [[0f32; KEY_TILE]; N];
        let mut qd = [0f32; N];
        for v in 0..NV {
            for lane in 0..LANES {
                let column = &self.keys_t[v][lane];
                for (qi, x) in qd.iter_mut().enumerate() {
                    *x = self.q[first + qi][v][lane];
                }
                for (row, &x) in acc.iter_mut().zip(&qd) {
                    for (a, &k) in row.iter_mut().zip(column) {
                        *a = M::mul_add(x, k, *a);
                    }
                }
            }
        }
        for (qi, row) in acc.iter().enumerate() {
            self.scores[first + qi] = *row;
        }
    }

    /// Fold query `i`'s tile scores into its running max and sum; leaves the tile's
    /// probabilities (relative to the new max) in `scores[i]`.
    ///
    /// Written for the vector units: the mask is a select, the maximum a tree of
    /// comparisons (not `f32::max`, whose NaN rules keep it scalar), and the sum stays a
    /// lane array across tiles, reduced once at the end ([`Self::total`]).
    #[inline(always)]
    fn softmax_update<M: MulAdd>(&mut self, i: usize) {
        let (first, visible) = (self.first_visible[i], self.visible[i]);
        let row = &mut self.scores[i];
        if visible <= first {
            // No key of this tile is visible: an exact no-op on the state.
            *row = [0.0; KEY_TILE];
            return;
        }
        if self.softcap > 0.0 {
            let cap = self.softcap;
            for s in row.iter_mut() {
                *s = cap * (*s / cap).tanh();
            }
        }
        for (j, s) in row.iter_mut().enumerate() {
            *s = if j < visible && j >= first {
                *s
            } else {
                f32::NEG_INFINITY
            };
        }
        let mut lane_max = [f32::NEG_INFINITY; LANES];
        for half in row.chunks_exact(LANES) {
            for lane in 0..LANES {
                lane_max[lane] = larger(lane_max[lane], half[lane]);
            }
        }
        let tile_max = tree_max(lane_max);
        let old_max = self.max[i];
        let new_max = larger(old_max, tile_max);
        let alpha = exp2_non_positive::<M>(old_max - new_max);
        let mut lane_sum = self.sum[i];
        if alpha != 1.0 {
            for s in lane_sum.iter_mut() {
                *s *= alpha;
            }
            for lanes in self.acc[i].iter_mut() {
                for x in lanes.iter_mut() {
                    *x *= alpha;
                }
            }
        }
        for half in row.chunks_exact_mut(LANES) {
            for lane in 0..LANES {
                let p = exp2_non_positive::<M>(half[lane] - new_max);
                half[lane] = p;
                lane_sum[lane] += p;
            }
        }
        self.sum[i] = lane_sum;
        self.max[i] = new_max;
    }

    /// Query `i`'s softmax denominator: its lane sums added in a fixed tree order.
    #[inline(always)]
    pub fn total(&self, i: usize) -> f32 {
        let mut s = self.sum[i];
        let mut width = LANES / 2;
        while width > 0 {
            for lane in 0..width {
                s[lane] += s[lane + width];
            }
            width /= 2;
        }
        s[0]
    }

    /// `acc += p V` for `N` queries from `first`.
    #[inline(always)]
    fn value_block<M: MulAdd, const N: usize>(&mut self, first: usize, values: &[f32], len: usize) {
        let dim = Self::HEAD_DIM;
        let mut acc = [[[0f32; LANES]; NV]; N];
        for (qi, a) in acc.iter_mut().enumerate() {
            *a = self.acc[first + qi];
        }
        let mut p = [0f32; N];
        let mut row = [[0f32; LANES]; NV];
        for (j, value) in values.chunks_exact(dim).take(len).enumerate() {
            for (v, lanes) in row.iter_mut().enumerate() {
                lanes.copy_from_slice(&value[v * LANES..(v + 1) * LANES]);
            }
            for (qi, x) in p.iter_mut().enumerate() {
                *x = self.scores[first + qi][j];
            }
            for (a, &x) in acc.iter_mut().zip(&p) {
                for (av, rv) in a.iter_mut().zip(&row) {
                    for (y, &r) in av.iter_mut().zip(rv) {
                        *y = M::mul_add(x, r, *y);
                    }
                }
            }
        }
        for (qi, a) in acc.iter().enumerate() {
            self.acc[first + qi] = *a;
        }
    }
}

/// Helpers of [`ChunkState`] that only the narrow-register paths use.
impl<const NV: usize> ChunkState<NV> {
    /// [`Self::value_block`] one lane array of the head at a time: for each, `N`
    /// queries' sums of that array stay in registers while the tile's keys go by. Each
    /// output still adds the keys' products in key order, so the result is the same.
    #[inline(always)]
    fn value_block_sliced<M: MulAdd, const N: usize>(
        &mut self,
        first: usize,
        values: &[f32],
        len: usize,
    ) {
        let dim = Self::HEAD_DIM;
        for v in 0..NV {
            let mut acc = [[0f32; LANES]; N];
            for (qi, a) in acc.iter_mut().enumerate() {
                *a = self.acc[first + qi][v];
            }
            for (j, value) in values.chunks_exact(dim).take(len).enumerate() {
                let mut row = [0f32; LANES];
                row.copy_from_slice(&value[v * LANES..(v + 1) * LANES]);
                for (qi, a) in acc.iter_mut().enumerate() {
                    let x = self.scores[first + qi][j];
                    for (y, &r) in a.iter_mut().zip(&row) {
                        *y = M::mul_add(x, r, *y);
                    }
                }
            }
            for (qi, a) in acc.iter().enumerate() {
                self.acc[first + qi][v] = *a;
            }
        }
    }
}

/// The larger of two scores; scores are never NaN (a NaN query makes NaN outputs either way).
#[inline(always)]
fn larger(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// The largest of 16 lanes, halving the width each step (vector shuffles, not a chain).
#[inline(always)]
fn tree_max(mut lanes: Lane) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for lane in 0..width {
            lanes[lane] = larger(lanes[lane], lanes[lane + width]);
        }
        width /= 2;
    }
    lanes[0]
}

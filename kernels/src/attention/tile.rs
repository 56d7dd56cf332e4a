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

/// Floats per lane array (one AVX-512 register).
pub(crate) const LANES: usize = 16;
/// Keys per tile.
pub(crate) const KEY_TILE: usize = 32;
/// Query vectors per chunk (one work item).
pub(crate) const QUERY_CHUNK: usize = 32;
/// Queries per score block (4 x 32 scores in registers).
const SCORE_BLOCK: usize = 4;

pub(crate) type Lane = [f32; LANES];

/// `a * b + c`, fused or not: fused only where the CPU has FMA (otherwise it would be a
/// slow library call).
pub(crate) trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// One rounding: the FMA instruction.
pub(crate) struct Fused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// Two roundings: multiply, then add.
pub(crate) struct Separate;

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// Transpose up to [`KEY_TILE`] keys of width `dim` (`len` rows) into `out`
/// (`dim * KEY_TILE` floats, dimension-major, zero past `len`), the layout
/// [`ChunkState::tile_pretransposed`] reads.
pub(crate) fn transpose_tile(keys: &[f32], dim: usize, len: usize, out: &mut [f32]) {
    out[..dim * KEY_TILE].fill(0.0);
    for (j, key) in keys.chunks_exact(dim).take(len).enumerate() {
        for (d, &x) in key.iter().enumerate() {
            out[d * KEY_TILE + j] = x;
        }
    }
}

/// The running state of a chunk of queries with `NV * 16`-dimensional heads.
pub(crate) struct ChunkState<const NV: usize> {
    /// Queries, pre-multiplied by `scale * log2(e)` (scores are then in base 2).
    pub q: [[Lane; NV]; QUERY_CHUNK],
    /// Unnormalised outputs.
    pub acc: [[Lane; NV]; QUERY_CHUNK],
    /// Running maximum score and running sum of `2^(score - max)`.
    pub max: [f32; QUERY_CHUNK],
    pub sum: [f32; QUERY_CHUNK],
    /// How many keys of the current tile each query sees (from its start).
    pub visible: [usize; QUERY_CHUNK],
    /// The current key tile, transposed: `keys_t[v][lane][j]` is dimension
    /// `v * 16 + lane` of key `j`.
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
            sum: [0.0; QUERY_CHUNK],
            visible: [0; QUERY_CHUNK],
            keys_t: [[[0.0; KEY_TILE]; LANES]; NV],
            scores: [[0.0; KEY_TILE]; QUERY_CHUNK],
        }
    }

    /// Queries `first..end` of the chunk attend to `len <= KEY_TILE` keys and values
    /// (`len` rows of `HEAD_DIM` floats each); query `i` sees the first `visible[i]` of them.
    /// `PV_BLOCK` queries share each load of a value row.
    #[inline(always)]
    pub fn tile<M: MulAdd, const PV_BLOCK: usize>(
        &mut self,
        first: usize,
        end: usize,
        keys: &[f32],
        values: &[f32],
        len: usize,
    ) {
        let dim = Self::HEAD_DIM;
        assert!(len <= KEY_TILE && keys.len() >= len * dim && values.len() >= len * dim);
        self.transpose_keys(keys, len);
        self.tile_transposed::<M, PV_BLOCK>(first, end, values, len);
    }

    /// [`Self::tile`] with the keys already transposed by [`transpose_tile`] into
    /// `keys_t` (`HEAD_DIM * KEY_TILE` floats): a copy instead of a transposition, for
    /// prefix tiles that many chunks read.
    #[inline(always)]
    pub fn tile_pretransposed<M: MulAdd, const PV_BLOCK: usize>(
        &mut self,
        first: usize,
        end: usize,
        keys_t: &[f32],
        values: &[f32],
        len: usize,
    ) {
        let dim = Self::HEAD_DIM;
        assert!(len <= KEY_TILE && keys_t.len() >= dim * KEY_TILE && values.len() >= len * dim);
        for (v, block) in self.keys_t.iter_mut().enumerate() {
            for (lane, column) in block.iter_mut().enumerate() {
                let at = (v * LANES + lane) * KEY_TILE;
                column.copy_from_slice(&keys_t[at..at + KEY_TILE]);
            }
        }
        self.tile_transposed::<M, PV_BLOCK>(first, end, values, len);
    }

    #[inline(always)]
    fn tile_transposed<M: MulAdd, const PV_BLOCK: usize>(
        &mut self,
        first: usize,
        end: usize,
        values: &[f32],
        len: usize,
    ) {
        assert!(end <= QUERY_CHUNK && first <= end);
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
            self.softmax_update(i);
        }
        let mut i = first;
        while i + PV_BLOCK <= end {
            self.value_block::<M, PV_BLOCK>(i, values, len);
            i += PV_BLOCK;
        }
        while i < end {
            self.value_block::<M, 1>(i, values, len);
            i += 1;
        }
    }

    #[inline(always)]
    fn transpose_keys(&mut self, keys: &[f32], len: usize) {
        let dim = Self::HEAD_DIM;
        for block in self.keys_t.iter_mut() {
            for column in block.iter_mut() {
                column[len..].fill(0.0);
            }
        }
        for (j, key) in keys.chunks_exact(dim).take(len).enumerate() {
            for (v, block) in self.keys_t.iter_mut().enumerate() {
                for (lane, column) in block.iter_mut().enumerate() {
                    column[j] = key[v * LANES + lane];
                }
            }
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
    #[inline(always)]
    fn softmax_update(&mut self, i: usize) {
        let visible = self.visible[i];
        let row = &mut self.scores[i];
        if visible == 0 {
            // No key of this tile is visible: an exact no-op on the state.
            *row = [0.0; KEY_TILE];
            return;
        }
        for (j, s) in row.iter_mut().enumerate() {
            if j >= visible {
                *s = f32::NEG_INFINITY;
            }
        }
        let mut lane_max = [f32::NEG_INFINITY; LANES];
        for half in row.chunks_exact(LANES) {
            for lane in 0..LANES {
                lane_max[lane] = lane_max[lane].max(half[lane]);
            }
        }
        let tile_max = lane_max.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let old_max = self.max[i];
        let new_max = old_max.max(tile_max);
        let mut lane_sum = [0f32; LANES];
        for half in row.chunks_exact_mut(LANES) {
            for lane in 0..LANES {
                let p = exp2_non_positive(half[lane] - new_max);
                half[lane] = p;
                lane_sum[lane] += p;
            }
        }
        let tile_sum: f32 = lane_sum.iter().sum();
        let alpha = exp2_non_positive(old_max - new_max);
        self.sum[i] = self.sum[i] * alpha + tile_sum;
        self.max[i] = new_max;
        if alpha != 1.0 {
            for lanes in self.acc[i].iter_mut() {
                for x in lanes.iter_mut() {
                    *x *= alpha;
                }
            }
        }
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

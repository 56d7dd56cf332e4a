//! The online-softmax update of the tile attention (`amx.rs`), written for the vector
//! units: one key tile's scores for a chunk of 32 queries, laid out with the queries
//! along the vector lanes.
//!
//! Issue 61: on an AMX machine the tile attention spent 58% of a bf16 run in its softmax
//! update, one query at a time with a scalar exponential per score (each through a
//! library `floorf`): the tiles were not the cost, the plain-Rust work around them was.
//! Here the tile products are arranged so that the update never looks across lanes: the
//! scores come out of the tiles transposed (`S^T = K Q^T`: a row per key, a column per
//! query) and the probabilities go back in transposed (`O^T += V^T P^T`: `P^T`'s rows
//! are pairs of keys, its columns queries, exactly the `B` operand of `tdpbf16ps`). So
//! every step of the update (mask, running maximum, rescale, exponential, bf16
//! rounding, pair packing, running sum) is a vertical operation on rows of 32 queries,
//! and each query's arithmetic is still done in the order the scalar update did it: its
//! maximum over keys in key order, its sum adding the rounded probabilities in key
//! order. Masks are selects, not branches; the outputs are rescaled only when some
//! query's maximum moved.
//!
//! The source is written once over lane arrays (`[f32; 32]`) and compiled for each
//! instruction path ([`SimdPath`]) by inlining into functions with that path's target
//! features, as the vector kernel (`tile.rs`) is; the exponential is `exp.rs`'s. With
//! separate multiply and add (never fused) every path computes the same bits, and the
//! same bits as [`update_rows_scalar`], the one-query-at-a-time update the tile kernel
//! ran before (kept as the tests' reference and the benchmark's baseline).

use super::exp::{exp2_non_positive, Separate};
use super::tile::{KEY_TILE, QUERY_CHUNK};
use super::SimdPath;
use crate::gemm::bf16::{round_to_bf16, widen};

/// Queries of one update (the lanes): a chunk.
pub const QUERIES: usize = QUERY_CHUNK;
/// Keys of one update: a key tile.
pub const KEYS: usize = KEY_TILE;
/// Pairs of keys (rows of the probabilities' `B` operand).
pub const KEY_PAIRS: usize = KEY_TILE / 2;

/// The softmax state of a chunk of [`QUERIES`] queries between key tiles, and the tile
/// in hand, laid out as the transposed tile products write and read it.
#[derive(Debug, Clone)]
pub struct TileSoftmax {
    /// The tile's scores (base 2) as `tilestored` leaves them: `scores[key][query]`.
    /// The update overwrites them (masked keys become `-inf`).
    pub scores: [[f32; QUERIES]; KEYS],
    /// Running maximum score per query (`-inf` before its first visible key).
    pub max: [f32; QUERIES],
    /// Running sum of the rounded probabilities per query (relative to `max`).
    pub sum: [f32; QUERIES],
    /// Keys of the tile query `q` sees: `first_visible[q]..visible[q]`; a query with
    /// `visible <= first_visible` (outside the run being updated, or hidden by a window)
    /// is left exactly as it was.
    pub first_visible: [u32; QUERIES],
    pub visible: [u32; QUERIES],
    /// Soft-cap of the base-2 scores (`c tanh(s / c)`); 0 for none.
    pub softcap: f32,
    /// The rounded probabilities as `tdpbf16ps`'s `B` operand: `p[k][q]` holds query
    /// `q`'s keys `2k` (low half) and `2k + 1` (high half) in bf16; zero for a query
    /// left as it was.
    pub p: [[u32; QUERIES]; KEY_PAIRS],
}

impl Default for TileSoftmax {
    fn default() -> Self {
        Self::new()
    }
}

impl TileSoftmax {
    /// The state before any key: maxima `-inf`, sums 0, no query visible.
    pub fn new() -> Self {
        Self {
            scores: [[0.0; QUERIES]; KEYS],
            max: [f32::NEG_INFINITY; QUERIES],
            sum: [0.0; QUERIES],
            first_visible: [0; QUERIES],
            visible: [0; QUERIES],
            softcap: 0.0,
            p: [[0; QUERIES]; KEY_PAIRS],
        }
    }

    /// Fold the tile's scores into each visible query's running maximum and sum,
    /// rescale its unnormalised outputs `acc` (rows of [`QUERIES`] floats, one per
    /// output dimension: `acc[d * QUERIES + q]`) where its maximum moved, and leave the
    /// rounded probabilities in [`Self::p`], on `path`'s instructions.
    ///
    /// # Panics
    /// If `path` is not available on this CPU, or `acc` is not whole rows.
    pub fn update(&mut self, path: SimdPath, acc: &mut [f32]) {
        assert!(path.available(), "{path:?} is not supported by this CPU");
        assert!(
            acc.len().is_multiple_of(QUERIES),
            "outputs are rows of {QUERIES}"
        );
        // SAFETY: the path's features were checked.
        unsafe {
            match path {
                SimdPath::Avx512 => self.update_avx512(acc),
                SimdPath::Avx2 => self.update_avx2(acc),
                SimdPath::Neon => self.update_neon(acc),
                SimdPath::Portable => self.update_inline::<PlainRows>(acc),
            }
        }
    }

    #[cfg_attr(
        target_arch = "x86_64",
        target_feature(enable = "avx512f,avx512vl,fma")
    )]
    unsafe fn update_avx512(&mut self, acc: &mut [f32]) {
        self.update_inline::<Avx512Rows>(acc)
    }

    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
    unsafe fn update_avx2(&mut self, acc: &mut [f32]) {
        self.update_inline::<Avx2Rows>(acc)
    }

    #[cfg_attr(target_arch = "aarch64", target_feature(enable = "neon"))]
    unsafe fn update_neon(&mut self, acc: &mut [f32]) {
        self.update_inline::<PlainRows>(acc)
    }

    /// [`Self::update`] on the instructions of the function it is inlined into, its row
    /// loops as `R` writes them.
    ///
    /// # Safety
    /// The CPU has `R`'s instructions.
    #[inline(always)]
    pub(crate) unsafe fn update_inline<R: Rows>(&mut self, acc: &mut [f32]) {
        let active: [bool; QUERIES] =
            std::array::from_fn(|q| self.first_visible[q] < self.visible[q]);
        if self.softcap > 0.0 {
            let cap = self.softcap;
            for row in self.scores.iter_mut() {
                for s in row.iter_mut() {
                    *s = cap * (*s / cap).tanh();
                }
            }
        }

        // Keys past every updated query's last visible one (the tail of a short tile, of
        // a causal run) need neither mask nor exponential: their probabilities are
        // exactly 0, and adding 0 leaves a sum as it was (sums are never -0). Whole
        // pairs of keys, so that the pairs' loop below can stop there too.
        let mut seen_keys = 0;
        for (&on, &visible) in active.iter().zip(&self.visible) {
            let seen = if on { visible } else { 0 };
            seen_keys = if seen > seen_keys { seen } else { seen_keys };
        }
        let rows = (seen_keys as usize).next_multiple_of(2).min(KEYS);

        // Masked keys at -inf; each query's maximum over its visible keys, in key order.
        let mut tile_max = [f32::NEG_INFINITY; QUERIES];
        self.mask(rows, &mut tile_max);

        let mut new_max = [0f32; QUERIES];
        let mut alpha = [0f32; QUERIES];
        let mut moved = false;
        for q in 0..QUERIES {
            let old = self.max[q];
            let max = if tile_max[q] > old { tile_max[q] } else { old };
            let a = exp2_non_positive::<Separate>(old - max);
            new_max[q] = if active[q] { max } else { old };
            alpha[q] = if active[q] { a } else { 1.0 };
            moved |= alpha[q] != 1.0;
        }
        if moved {
            // Times 1.0 (a query whose maximum stayed) is exact: one pass for all.
            for (s, &a) in self.sum.iter_mut().zip(&alpha) {
                *s *= a;
            }
            // SAFETY: the caller's promise.
            unsafe { R::scale(acc.as_chunks_mut::<QUERIES>().0, &alpha) };
        }

        // The keys past `rows` are 0 for every updated query, unless its maximum is not
        // finite (NaN scores): then `-inf - max` is NaN, and they run like the others.
        let mut finite = true;
        for (&on, max) in active.iter().zip(&new_max) {
            finite &= !on | max.is_finite();
        }
        let pairs = if finite {
            rows / 2
        } else {
            self.mask(KEYS, &mut [f32::NEG_INFINITY; QUERIES]);
            KEY_PAIRS
        };
        let mut sum = self.sum;
        for (k, p) in self.p.iter_mut().enumerate() {
            if k >= pairs {
                *p = [0; QUERIES];
                continue;
            }
            let (even, odd) = (&self.scores[2 * k], &self.scores[2 * k + 1]);
            for q in 0..QUERIES {
                let e = bf16_bits(exp2_non_positive::<Separate>(even[q] - new_max[q]));
                let o = bf16_bits(exp2_non_positive::<Separate>(odd[q] - new_max[q]));
                let (e, o) = if active[q] { (e, o) } else { (0, 0) };
                let added = sum[q] + f32::from_bits(e << 16) + f32::from_bits(o << 16);
                sum[q] = if active[q] { added } else { sum[q] };
                p[q] = e | (o << 16);
            }
        }
        self.sum = sum;
        self.max = new_max;
    }
}

impl TileSoftmax {
    /// Scores of the first `rows` keys that a query does not see to `-inf`; each query's
    /// maximum over those it sees into `tile_max`, in key order.
    #[inline(always)]
    fn mask(&mut self, rows: usize, tile_max: &mut [f32; QUERIES]) {
        // (Constant trip counts with a test per row: over `[..rows]` the compiler
        // vectorised across rows instead of lanes, with gathers, six times slower.)
        for (j, row) in self.scores.iter_mut().enumerate() {
            if j >= rows {
                break;
            }
            let j = j as u32;
            for q in 0..QUERIES {
                let seen = (j >= self.first_visible[q]) & (j < self.visible[q]);
                let s = if seen { row[q] } else { f32::NEG_INFINITY };
                row[q] = s;
                tile_max[q] = if s > tile_max[q] { s } else { tile_max[q] };
            }
        }
    }
}

/// The loops over rows of [`QUERIES`] lanes (a row per output dimension), written per
/// instruction path: written once over lane arrays, the compiler vectorised them across
/// rows instead, with a gather and a scatter per lane, at AVX-512 (a rescale of the
/// outputs cost more than the rest of the update).
///
/// # Safety
/// Implementations run their path's instructions: callers promise the CPU has them.
pub(crate) unsafe trait Rows {
    /// `rows[r][q] *= alpha[q]`.
    ///
    /// # Safety
    /// The CPU has the implementation's instructions.
    unsafe fn scale(rows: &mut [[f32; QUERIES]], alpha: &[f32; QUERIES]);

    /// `rows[r][q] += add[r][q]` for the lanes `q` whose bit is set in `lanes`, the others
    /// left as they are.
    ///
    /// # Safety
    /// The CPU has the implementation's instructions.
    unsafe fn add_where(rows: &mut [[f32; QUERIES]], add: &[[f32; QUERIES]], lanes: u32);

    /// `dst[c * dst_stride + r] = src[r * src_stride + c]` for `r, c < 16`: a block of the
    /// packing's transposes (`amx.rs`: queries into `B` rows, values into `A` rows).
    ///
    /// # Safety
    /// The CPU has the implementation's instructions.
    ///
    /// # Panics
    /// If either slice is too short for 16 rows of its stride.
    #[inline(always)]
    unsafe fn transpose16(src: &[u32], src_stride: usize, dst: &mut [u32], dst_stride: usize) {
        transpose16_plain(src, src_stride, dst, dst_stride)
    }
}

/// [`Rows::transpose16`] in plain loops.
#[inline(always)]
fn transpose16_plain(src: &[u32], src_stride: usize, dst: &mut [u32], dst_stride: usize) {
    assert!(src.len() >= 15 * src_stride + 16 && dst.len() >= 15 * dst_stride + 16);
    for c in 0..16 {
        for r in 0..16 {
            dst[c * dst_stride + r] = src[r * src_stride + c];
        }
    }
}

/// Plain loops (the portable path, NEON).
pub(crate) struct PlainRows;

// SAFETY: plain Rust.
unsafe impl Rows for PlainRows {
    #[inline(always)]
    unsafe fn scale(rows: &mut [[f32; QUERIES]], alpha: &[f32; QUERIES]) {
        for row in rows {
            for q in 0..QUERIES {
                row[q] *= alpha[q];
            }
        }
    }

    #[inline(always)]
    unsafe fn add_where(rows: &mut [[f32; QUERIES]], add: &[[f32; QUERIES]], lanes: u32) {
        for (row, add) in rows.iter_mut().zip(add) {
            for q in 0..QUERIES {
                let sum = row[q] + add[q];
                row[q] = if lanes >> q & 1 == 1 { sum } else { row[q] };
            }
        }
    }
}

/// AVX-512: a row is two registers, the lanes a mask register.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512Rows;

#[cfg(target_arch = "x86_64")]
// SAFETY: runs AVX-512F instructions only.
unsafe impl Rows for Avx512Rows {
    #[inline(always)]
    unsafe fn scale(rows: &mut [[f32; QUERIES]], alpha: &[f32; QUERIES]) {
        // SAFETY: the caller's promise.
        unsafe { avx512::scale(rows, alpha) }
    }

    #[inline(always)]
    unsafe fn add_where(rows: &mut [[f32; QUERIES]], add: &[[f32; QUERIES]], lanes: u32) {
        // SAFETY: the caller's promise.
        unsafe { avx512::add_where(rows, add, lanes) }
    }

    #[inline(always)]
    unsafe fn transpose16(src: &[u32], src_stride: usize, dst: &mut [u32], dst_stride: usize) {
        // SAFETY: the caller's promise.
        unsafe { avx512::transpose16(src, src_stride, dst, dst_stride) }
    }
}

/// AVX2: a row is four registers; the lanes a blend.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2Rows;

#[cfg(target_arch = "x86_64")]
// SAFETY: runs AVX instructions only.
unsafe impl Rows for Avx2Rows {
    #[inline(always)]
    unsafe fn scale(rows: &mut [[f32; QUERIES]], alpha: &[f32; QUERIES]) {
        // SAFETY: the caller's promise.
        unsafe { avx2::scale(rows, alpha) }
    }

    #[inline(always)]
    unsafe fn add_where(rows: &mut [[f32; QUERIES]], add: &[[f32; QUERIES]], lanes: u32) {
        // SAFETY: the caller's promise.
        unsafe { avx2::add_where(rows, add, lanes) }
    }
}

/// Where the x86 paths do not exist, their names stand for the plain loops (never run:
/// those paths are not available there).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) type Avx512Rows = PlainRows;
#[cfg(not(target_arch = "x86_64"))]
pub(crate) type Avx2Rows = PlainRows;

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::QUERIES;
    use std::arch::x86_64::*;

    pub(super) use super::avx512_transpose::transpose16;

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn scale(rows: &mut [[f32; QUERIES]], alpha: &[f32; QUERIES]) {
        // SAFETY: 32 floats from each array.
        unsafe {
            let a0 = _mm512_loadu_ps(alpha.as_ptr());
            let a1 = _mm512_loadu_ps(alpha.as_ptr().add(16));
            for row in rows {
                let p = row.as_mut_ptr();
                _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), a0));
                _mm512_storeu_ps(p.add(16), _mm512_mul_ps(_mm512_loadu_ps(p.add(16)), a1));
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn add_where(rows: &mut [[f32; QUERIES]], add: &[[f32; QUERIES]], lanes: u32) {
        let (k0, k1) = (lanes as u16, (lanes >> 16) as u16);
        for (row, add) in rows.iter_mut().zip(add) {
            let (p, a) = (row.as_mut_ptr(), add.as_ptr());
            // SAFETY: 32 floats from each array.
            unsafe {
                let x0 = _mm512_loadu_ps(p);
                let x1 = _mm512_loadu_ps(p.add(16));
                let y0 = _mm512_mask_add_ps(x0, k0, x0, _mm512_loadu_ps(a));
                let y1 = _mm512_mask_add_ps(x1, k1, x1, _mm512_loadu_ps(a.add(16)));
                _mm512_storeu_ps(p, y0);
                _mm512_storeu_ps(p.add(16), y1);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512_transpose {
    use std::arch::x86_64::*;

    /// [`super::Rows::transpose16`] in 64 shuffles: pairs of rows interleaved by words,
    /// then by pairs of words (each 128-bit lane then holds four rows of one column), then
    /// the lanes gathered twice.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn transpose16(src: &[u32], src_stride: usize, dst: &mut [u32], dst_stride: usize) {
        assert!(src.len() >= 15 * src_stride + 16 && dst.len() >= 15 * dst_stride + 16);
        // SAFETY: 16 words at each of the 16 rows of either side (asserted).
        unsafe {
            let r: [__m512i; 16] = std::array::from_fn(|i| {
                _mm512_loadu_si512(src.as_ptr().add(i * src_stride).cast())
            });
            let mut t = [_mm512_setzero_si512(); 16];
            for i in 0..8 {
                t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
            }
            // u[4g + j]: column 4L + j of rows 4g..4g + 4, in each lane L.
            let mut u = [_mm512_setzero_si512(); 16];
            for g in 0..4 {
                let t = &t[4 * g..4 * g + 4];
                u[4 * g] = _mm512_unpacklo_epi64(t[0], t[2]);
                u[4 * g + 1] = _mm512_unpackhi_epi64(t[0], t[2]);
                u[4 * g + 2] = _mm512_unpacklo_epi64(t[1], t[3]);
                u[4 * g + 3] = _mm512_unpackhi_epi64(t[1], t[3]);
            }
            for j in 0..4 {
                // Lanes 0 and 2, then 1 and 3, of the row groups 0 and 1, then 2 and 3.
                let low = _mm512_shuffle_i32x4::<0x88>(u[j], u[4 + j]);
                let high = _mm512_shuffle_i32x4::<0xdd>(u[j], u[4 + j]);
                let low2 = _mm512_shuffle_i32x4::<0x88>(u[8 + j], u[12 + j]);
                let high2 = _mm512_shuffle_i32x4::<0xdd>(u[8 + j], u[12 + j]);
                let columns = [
                    (j, _mm512_shuffle_i32x4::<0x88>(low, low2)),
                    (8 + j, _mm512_shuffle_i32x4::<0xdd>(low, low2)),
                    (4 + j, _mm512_shuffle_i32x4::<0x88>(high, high2)),
                    (12 + j, _mm512_shuffle_i32x4::<0xdd>(high, high2)),
                ];
                for (c, column) in columns {
                    _mm512_storeu_si512(dst.as_mut_ptr().add(c * dst_stride).cast(), column);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::QUERIES;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn scale(rows: &mut [[f32; QUERIES]], alpha: &[f32; QUERIES]) {
        // SAFETY: 32 floats from each array.
        unsafe {
            let a: [__m256; 4] =
                std::array::from_fn(|i| _mm256_loadu_ps(alpha.as_ptr().add(8 * i)));
            for row in rows {
                let p = row.as_mut_ptr();
                for (i, &a) in a.iter().enumerate() {
                    let at = p.add(8 * i);
                    _mm256_storeu_ps(at, _mm256_mul_ps(_mm256_loadu_ps(at), a));
                }
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn add_where(rows: &mut [[f32; QUERIES]], add: &[[f32; QUERIES]], lanes: u32) {
        // Lane q's mask: all ones where bit q of `lanes` is set.
        let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        let masks: [__m256; 4] = std::array::from_fn(|i| {
            let word = _mm256_set1_epi32(((lanes >> (8 * i)) & 0xff) as i32);
            _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(word, bits), bits))
        });
        for (row, add) in rows.iter_mut().zip(add) {
            let (p, a) = (row.as_mut_ptr(), add.as_ptr());
            for (i, &mask) in masks.iter().enumerate() {
                // SAFETY: 32 floats from each array.
                unsafe {
                    let x = _mm256_loadu_ps(p.add(8 * i));
                    let sum = _mm256_add_ps(x, _mm256_loadu_ps(a.add(8 * i)));
                    _mm256_storeu_ps(p.add(8 * i), _mm256_blendv_ps(x, sum, mask));
                }
            }
        }
    }
}

/// [`round_to_bf16`] (nearest, ties to even; subnormals to signed zero; NaN quiet) as
/// selects instead of branches, so that it compiles to vector instructions; the bf16 in
/// the low half.
#[inline(always)]
fn bf16_bits(value: f32) -> u32 {
    let bits = value.to_bits();
    let nan = (bits >> 16) | 0x40;
    let zero = (bits >> 16) & 0x8000;
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let finite_or_inf = if bits & 0x7f80_0000 == 0 {
        zero
    } else {
        rounded
    };
    if value.is_nan() {
        nan
    } else {
        finite_or_inf
    }
}

/// The update as the tile kernel ran it before issue 61: one query at a time, its
/// scores a row (`scores[query][key]`), its outputs a row (`acc[query]`, `acc.len() /
/// QUERIES` dimensions each), its probabilities pairs of a row (`p[query][k]`). Queries
/// `first..end` are updated; the rest of `p` is zeroed. Kept as the reference
/// [`TileSoftmax::update`] must equal bit for bit, and as the benchmark's baseline.
#[allow(clippy::too_many_arguments)]
pub fn update_rows_scalar(
    scores: &mut [[f32; KEYS]; QUERIES],
    max: &mut [f32; QUERIES],
    sum: &mut [f32; QUERIES],
    first_visible: &[u32; QUERIES],
    visible: &[u32; QUERIES],
    softcap: f32,
    acc: &mut [f32],
    p: &mut [[u32; KEY_PAIRS]; QUERIES],
    run: std::ops::Range<usize>,
) {
    let width = acc.len() / QUERIES;
    let (before, rest) = p.split_at_mut(run.start);
    for row in before.iter_mut().chain(&mut rest[run.len()..]) {
        *row = [0; KEY_PAIRS];
    }
    for i in run {
        let (first, visible) = (first_visible[i] as usize, visible[i] as usize);
        if visible <= first {
            p[i] = [0; KEY_PAIRS];
            continue;
        }
        let row = &mut scores[i];
        if softcap > 0.0 {
            for s in row.iter_mut() {
                *s = softcap * (*s / softcap).tanh();
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
        let old_max = max[i];
        let new_max = if tile_max > old_max {
            tile_max
        } else {
            old_max
        };
        let alpha = exp2_non_positive::<Separate>(old_max - new_max);
        if alpha != 1.0 {
            sum[i] *= alpha;
            for x in &mut acc[i * width..(i + 1) * width] {
                *x *= alpha;
            }
        }
        let mut total = sum[i];
        for (j, two) in row.chunks_exact(2).enumerate() {
            let even = round_to_bf16(exp2_non_positive::<Separate>(two[0] - new_max));
            let odd = round_to_bf16(exp2_non_positive::<Separate>(two[1] - new_max));
            total += widen(even);
            total += widen(odd);
            p[i][j] = even as u32 | ((odd as u32) << 16);
        }
        sum[i] = total;
        max[i] = new_max;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transposes_transpose() {
        let (src_stride, dst_stride) = (40, 19);
        let src: Vec<u32> = (0..16 * src_stride as u32).collect();
        let want = {
            let mut dst = vec![u32::MAX; 16 * dst_stride];
            transpose16_plain(&src[3..], src_stride, &mut dst, dst_stride);
            dst
        };
        for r in 0..16 {
            for c in 0..16 {
                assert_eq!(want[c * dst_stride + r], src[3 + r * src_stride + c]);
            }
        }
        // Untouched past the 16 words of each row.
        assert_eq!(want[dst_stride - 1], u32::MAX);
        #[cfg(target_arch = "x86_64")]
        if SimdPath::Avx512.available() {
            let mut dst = vec![u32::MAX; 16 * dst_stride];
            // SAFETY: the CPU has AVX-512F.
            unsafe { Avx512Rows::transpose16(&src[3..], src_stride, &mut dst, dst_stride) };
            assert_eq!(dst, want);
        }
    }

    #[test]
    fn the_select_rounding_is_the_branching_one() {
        // Every exponent and sign with the mantissa's ends, halves and a stride through
        // the rest: ties (odd and even), carries into the exponent, subnormals, the
        // infinities and NaNs.
        let mut mantissas: Vec<u32> = vec![0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1_7fff];
        mantissas.extend([0x1_8000, 0x7f_ffff, 0x7f_8000, 0x7f_7fff, 0x40_0000]);
        mantissas.extend((0..0x80_0000).step_by(0x1_2345));
        for sign in [0u32, 1] {
            for exponent in 0..=255u32 {
                for &mantissa in &mantissas {
                    let bits = sign << 31 | exponent << 23 | mantissa;
                    let x = f32::from_bits(bits);
                    assert_eq!(bf16_bits(x), round_to_bf16(x) as u32, "{bits:#010x}");
                }
            }
        }
    }
}

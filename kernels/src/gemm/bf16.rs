//! `y = x W^T` with `W` stored as bfloat16 and f32 accumulation.
//!
//! The weight is rounded to bf16 once, at load, into panels of [`NR`] output columns whose
//! inner dimension is interleaved in pairs: exactly the operand layout of AVX512-BF16's
//! `vdpbf16ps`, which multiplies 16 pairs of bf16 and adds both products into 16 f32
//! lanes. Activations are rounded to bf16 (nearest, ties to even) on the fly, per call.
//!
//! The portable path reproduces the instruction's arithmetic exactly: per pair it adds
//! the odd product, then the even one, each addition rounded to f32 (products of two
//! bf16 are exact in f32), and it flushes subnormal sums to zero as the instruction does.
//! Subnormal inputs are flushed to zero when rounding to bf16, so both paths give
//! bit-identical results wherever the sums stay in f32's normal range. Where they do
//! not, CPUs themselves disagree (an AMD Zen 4 rounds a sum just above the smallest
//! normal one unit differently from a Zen 5, measured on `vdpbf16ps`): such calls run
//! the portable tiles on every path, by the magnitude check the AVX2 path below uses.
//!
//! The AVX2 path (no bf16 arithmetic in the CPU) widens both operands to f32 in
//! registers (a bf16 is the top half of an f32: a mask for the odd value of a pair, a
//! shift for the even one) and adds each product with one FMA, in the same order. The
//! product of two bf16 has 16 significant bits, so it is exact in f32 and the FMA rounds
//! exactly as the separate product and sum do, unless a product leaves f32's normal
//! range. That cannot happen when the smallest nonzero magnitudes of both operands
//! multiply to at least 2^-100 and the largest to at most 2^126: every nonzero partial
//! sum is then a multiple of a power of two no smaller than 2^-126, so nothing is ever
//! flushed either. The weight's extremes are found at load and the activations' per
//! call; a call outside those bounds (never seen in a model) runs the portable tiles, so
//! the AVX2 path, too, gives the portable numbers bit for bit.
//!
//! The aarch64 NEON path is the AVX2 path's method with 128-bit registers: the same
//! widened pairs, `fmla` (fused, as the FMA) in the same order, the same bounds check,
//! so it too gives the portable numbers bit for bit. (The BF16 extension's `bfdot` and
//! `bfmmla` would not: they round and flush their sums differently.)

use super::amx::{self, Unit};
use super::tiles::{for_each_tile, panel_count, Store, MR, NR, WIDE_MR};
use super::Isa;
use crate::cpu::CpuFeatures;

/// A weight matrix `(rows, cols)` = `(out_features, in_features)` packed as bf16 pairs.
#[derive(Debug, Clone)]
pub struct Bf16Matrix {
    rows: usize,
    cols: usize,
    /// Inner dimension in pairs: `cols` rounded up to even, halved.
    pairs: usize,
    /// Panel `p`, pair `k`, column `c` at `(p * pairs + k) * NR + c`: the bf16 of
    /// `W[p*NR + c][2k]` in the low half, of `W[p*NR + c][2k + 1]` in the high half.
    /// Columns past `rows` and the odd tail of the inner dimension are zero.
    packed: Vec<u32>,
    /// Whether activations are split into two bf16 parts (see [`Self::split_activations`]).
    split: bool,
    /// Smallest nonzero and largest magnitude of the stored weight (`f32::MAX` and 0
    /// when it is all zero; the largest may be infinite or NaN).
    magnitudes: Magnitudes,
}

/// The smallest nonzero and the largest magnitude among some values, and whether all
/// were finite (the fast path's precondition, see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Magnitudes {
    smallest: f32,
    largest: f32,
    finite: bool,
}

impl Magnitudes {
    const EMPTY: Magnitudes = Magnitudes {
        smallest: f32::MAX,
        largest: 0.0,
        finite: true,
    };

    fn of(values: impl IntoIterator<Item = f32>) -> Magnitudes {
        values.into_iter().fold(Self::EMPTY, |m, v| m.with(v))
    }

    #[inline]
    fn with(self, value: f32) -> Magnitudes {
        let magnitude = value.abs();
        Magnitudes {
            smallest: if magnitude > 0.0 {
                self.smallest.min(magnitude)
            } else {
                self.smallest
            },
            largest: self.largest.max(magnitude),
            finite: self.finite && value.is_finite(),
        }
    }

    /// Whether every product of a value of `self` and one of `other` is exact in f32 and
    /// every partial sum of such products normal or zero.
    fn products_stay_normal(self, other: Magnitudes) -> bool {
        let smallest = self.smallest as f64 * other.smallest as f64;
        let largest = self.largest as f64 * other.largest as f64;
        self.finite && other.finite && smallest >= 2f64.powi(-100) && largest <= 2f64.powi(126)
    }
}

impl Bf16Matrix {
    /// Round a row-major `(rows, cols)` f32 matrix to bf16 and pack it.
    pub fn from_f32(weight: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(
            weight.len(),
            rows * cols,
            "weight holds {} values, expected {rows}x{cols}",
            weight.len()
        );
        let pairs = cols.div_ceil(2);
        let panels = panel_count(rows);
        let mut packed = vec![0u32; panels * pairs * NR];
        for row in 0..rows {
            let (panel, c) = (row / NR, row % NR);
            let source = &weight[row * cols..(row + 1) * cols];
            for k in 0..pairs {
                let even = source[2 * k];
                let odd = source.get(2 * k + 1).copied().unwrap_or(0.0);
                packed[(panel * pairs + k) * NR + c] = pack_pair(even, odd);
            }
        }
        let magnitudes = Magnitudes::of(
            packed
                .iter()
                .flat_map(|&pair| [widen(pair as u16), widen((pair >> 16) as u16)]),
        );
        Self {
            rows,
            cols,
            pairs,
            packed,
            split: false,
            magnitudes,
        }
    }

    /// This matrix multiplying activations split into two bf16 parts, `x = hi + lo` with
    /// `hi` = `x` rounded to bf16 and `lo` = the remainder rounded to bf16, both products
    /// accumulated: the activations keep 16 bits of mantissa instead of 8, so the only
    /// coarse rounding left is the weights'. Twice the products of the plain kernel.
    pub fn split_activations(self, split: bool) -> Self {
        Self { split, ..self }
    }

    /// Whether activations are split (see [`Self::split_activations`]).
    pub fn splits_activations(&self) -> bool {
        self.split
    }

    /// Output features (rows of `W`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (columns of `W`).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Pairs of the inner dimension (`cols` rounded up to even, halved).
    pub(super) fn pairs(&self) -> usize {
        self.pairs
    }

    /// Weight panel `p`: `pairs` rows of [`NR`] pairs, one per output column.
    pub(super) fn panel(&self, p: usize) -> &[u32] {
        &self.packed[p * self.pairs * NR..(p + 1) * self.pairs * NR]
    }

    /// The stored weight widened back to f32, row-major `(rows, cols)`.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut weight = vec![0f32; self.rows * self.cols];
        for row in 0..self.rows {
            let (panel, c) = (row / NR, row % NR);
            for col in 0..self.cols {
                let pair = self.packed[(panel * self.pairs + col / 2) * NR + c];
                let half = if col % 2 == 0 { pair } else { pair >> 16 };
                weight[row * self.cols + col] = widen(half as u16);
            }
        }
        weight
    }

    /// `out = x W^T` for row-major `x` `(m, cols)` and `out` `(m, rows)`, on the best
    /// instruction path this machine has.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32]) {
        self.product(Self::isa_for_rows(m), x, m, out, Store::Overwrite)
    }

    /// `out += x W^T` (a residual connection added in place), on the best path.
    pub fn matmul_add(&self, x: &[f32], m: usize, out: &mut [f32]) {
        self.product(Self::isa_for_rows(m), x, m, out, Store::Add)
    }

    /// [`Self::matmul`] on AMX tiles, the real ones or their portable model (tests run
    /// the model on any machine).
    ///
    /// # Panics
    /// If the shapes disagree, or `unit` is the hardware and it is not available here.
    pub fn matmul_tiles(&self, unit: Unit, x: &[f32], m: usize, out: &mut [f32]) {
        self.check_input(x, m);
        amx::bf16_product(unit, self, x, m, out, Store::Overwrite)
    }

    /// The path [`Self::matmul`] takes on this machine for `m` rows: AMX tiles from
    /// [`amx::MIN_ROWS`] rows where they run, else [`Self::best_vector_isa`].
    pub fn isa_for_rows(m: usize) -> Isa {
        match Self::best_isa() {
            Isa::Amx if m < amx::MIN_ROWS => Self::best_vector_isa(),
            best => best,
        }
    }

    /// The widest path this machine runs: AMX tiles where they run (or their portable
    /// model, where `NLG_JUDGE_TILES=model` asks for it: [`amx::TILES_ENV`]), else
    /// [`Self::best_vector_isa`].
    pub fn best_isa() -> Isa {
        if amx::bf16_unit().is_some() {
            Isa::Amx
        } else {
            Self::best_vector_isa()
        }
    }

    /// The widest vector (not tile) path on this machine.
    pub fn best_vector_isa() -> Isa {
        let cpu = CpuFeatures::get();
        if cpu.avx512f && cpu.avx512bf16 {
            Isa::Avx512
        } else if cpu.avx2 && cpu.fma {
            Isa::Avx2
        } else if cpu.neon {
            Isa::Neon
        } else {
            Isa::Portable
        }
    }

    /// Whether [`Self::matmul_on`] can run `isa` here.
    pub fn supports(isa: Isa) -> bool {
        let cpu = CpuFeatures::get();
        match isa {
            Isa::Portable => true,
            Isa::Amx => amx::bf16_unit().is_some(),
            Isa::Avx512 => cpu.avx512f && cpu.avx512bf16,
            Isa::Avx2 => cpu.avx2 && cpu.fma,
            Isa::Neon => cpu.neon,
            Isa::AvxVnni | Isa::Dotprod => false,
        }
    }

    /// [`Self::matmul`] on a chosen path (tests compare the paths).
    ///
    /// # Panics
    /// If the shapes disagree, or `isa` is not supported here (see [`Self::supports`]).
    pub fn matmul_on(&self, isa: Isa, x: &[f32], m: usize, out: &mut [f32]) {
        self.product(isa, x, m, out, Store::Overwrite)
    }

    /// # Panics
    /// If `x` does not hold `m` rows of [`Self::cols`].
    fn check_input(&self, x: &[f32], m: usize) {
        assert_eq!(
            x.len(),
            m * self.cols,
            "input holds {} values, expected {m}x{}",
            x.len(),
            self.cols
        );
    }

    fn product(&self, isa: Isa, x: &[f32], m: usize, out: &mut [f32], store: Store) {
        assert!(
            Self::supports(isa),
            "{isa:?} bf16 products are not available here"
        );
        self.check_input(x, m);
        if isa == Isa::Amx {
            let unit = amx::bf16_unit().expect("checked by supports");
            return amx::bf16_product(unit, self, x, m, out, store);
        }
        // The rounded activations live in a buffer the calling thread keeps from call to
        // call (a fresh one per product cost page zeroing); a nested call, should one
        // ever happen while the buffer is in use, gets a fresh one.
        crate::reuse::with_reused(&ACTIVATIONS, |buffer| {
            let layout = PairRows::dense(m, self.pairs);
            let len = layout.len();
            activation_pairs(x, self.cols, layout, self.split, buffer);
            let (hi, lo) = buffer.split_at(len);
            let hi = &hi[..len];
            let lo = if self.split { &lo[..len] } else { &lo[..0] };
            #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
            if Some(isa) == WIDE_ISA {
                return crate::reuse::with_reused(&WIDENED, |wide| {
                    let (wide, magnitudes) = widen_pairs(hi, lo, wide);
                    if magnitudes.products_stay_normal(self.magnitudes) {
                        let (hi, lo) = wide.split_at(2 * len);
                        self.wide_tiles(hi, lo, m, out, store);
                    } else {
                        self.tiles(Isa::Portable, hi, lo, m, out, store);
                    }
                });
            }
            // CPUs differ where sums leave the normal range (an AMD Zen 4's `vdpbf16ps`
            // rounds a sum just above the smallest normal differently from a Zen 5's and
            // from the portable model): such calls (never seen in a model) run the
            // portable tiles, so that every CPU gives the same numbers.
            let isa = if isa == Isa::Avx512 {
                let magnitudes = Magnitudes::of(
                    hi.iter()
                        .chain(lo)
                        .flat_map(|&pair| [widen(pair as u16), widen((pair >> 16) as u16)]),
                );
                if magnitudes.products_stay_normal(self.magnitudes) {
                    isa
                } else {
                    Isa::Portable
                }
            } else {
                isa
            };
            self.tiles(isa, hi, lo, m, out, store);
        });
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    /// The [`WIDE_ISA`] tiles of the product of widened activations `hi` (and `lo`, empty
    /// when not split), each `(m, pairs)` pairs of f32 (odd value first).
    fn wide_tiles(&self, hi: &[f32], lo: &[f32], m: usize, out: &mut [f32], store: Store) {
        let pairs = self.pairs;
        let tile = |row0: usize, rows: usize, panel: usize| -> [[f32; NR]; WIDE_MR] {
            let span = 2 * row0 * pairs..2 * (row0 + rows) * pairs;
            let a = &hi[span.clone()];
            let a_lo = if lo.is_empty() { lo } else { &lo[span] };
            let w = &self.packed[panel * pairs * NR..(panel + 1) * pairs * NR];
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `supports` checked AVX2 and FMA at run time (the only caller).
            let values = unsafe { avx2::tile(a, a_lo, rows, pairs, w) };
            #[cfg(target_arch = "aarch64")]
            // SAFETY: `supports` checked NEON at run time (the only caller).
            let values = unsafe { neon::tile(a, a_lo, rows, pairs, w) };
            values
        };
        for_each_tile(m, self.rows, out, store, tile);
    }

    /// The tiles of the product of `hi` (and `lo`, the activations' second parts, when
    /// split; empty otherwise), each `(m, pairs)`.
    fn tiles(&self, isa: Isa, hi: &[u32], lo: &[u32], m: usize, out: &mut [f32], store: Store) {
        let pairs = self.pairs;
        let tile = |row0: usize, rows: usize, panel: usize| -> [[f32; NR]; MR] {
            let span = row0 * pairs..(row0 + rows) * pairs;
            let a = &hi[span.clone()];
            let a_lo = if lo.is_empty() { lo } else { &lo[span] };
            let w = &self.packed[panel * pairs * NR..(panel + 1) * pairs * NR];
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `supports` checked AVX-512F and AVX512-BF16 at run time.
                Isa::Avx512 => unsafe { avx512::tile(a, a_lo, rows, pairs, w) },
                _ => portable_tile(a, a_lo, rows, pairs, w),
            }
        };
        for_each_tile(m, self.rows, out, store, tile);
    }
}

/// The path that multiplies widened activations ([`Bf16Matrix::wide_tiles`]) on this
/// architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const WIDE_ISA: Option<Isa> = if cfg!(target_arch = "x86_64") {
    Some(Isa::Avx2)
} else {
    Some(Isa::Neon)
};

/// Round to bf16, nearest with ties to even; subnormals become (signed) zero, NaN stays
/// NaN.
pub fn round_to_bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    if bits & 0x7f80_0000 == 0 {
        return ((bits >> 16) & 0x8000) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// A bf16 as f32 (exact).
pub fn widen(half: u16) -> f32 {
    f32::from_bits((half as u32) << 16)
}

fn pack_pair(even: f32, odd: f32) -> u32 {
    round_to_bf16(even) as u32 | ((round_to_bf16(odd) as u32) << 16)
}

thread_local! {
    /// Rounded activations of the products this thread runs, reused from call to call.
    static ACTIVATIONS: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The same widened to f32 pairs for the AVX2 and NEON paths.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    static WIDENED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The bf16 pairs of `hi` then `lo` widened to f32 pairs, odd value first, into `wide`
/// (grown as needed; the returned slice holds exactly those), and their magnitudes.
fn widen_pairs<'a>(hi: &[u32], lo: &[u32], wide: &'a mut Vec<f32>) -> (&'a [f32], Magnitudes) {
    let len = 2 * (hi.len() + lo.len());
    if wide.len() < len {
        wide.resize(len, 0.0);
    }
    let wide = &mut wide[..len];
    let mut magnitudes = Magnitudes::EMPTY;
    for (target, &pair) in wide.chunks_exact_mut(2).zip(hi.iter().chain(lo)) {
        let (odd, even) = (widen((pair >> 16) as u16), widen(pair as u16));
        target[0] = odd;
        target[1] = even;
        magnitudes = magnitudes.with(odd).with(even);
    }
    (wide, magnitudes)
}

/// What rounding `value` to bf16 leaves out (0 for infinities and NaN, whose rounding
/// keeps them whole).
fn remainder(value: f32) -> f32 {
    if value.is_finite() {
        value - widen(round_to_bf16(value))
    } else {
        0.0
    }
}

/// Where [`activation_pairs`] puts the rounded activations: `rows` rows (at least `m`)
/// of `stride` pairs (at least `pairs`); the vector paths use `m` rows of `pairs`, the
/// tiles pad both to whole tiles.
#[derive(Debug, Clone, Copy)]
pub(super) struct PairRows {
    /// Rows of activations.
    pub m: usize,
    /// Pairs of one row (the inner dimension, rounded up to even, halved).
    pub pairs: usize,
    /// Pairs from one row to the next in the buffer.
    pub stride: usize,
    /// Rows in the buffer (the rows past `m` hold zeros).
    pub rows: usize,
}

impl PairRows {
    /// `m` rows of `pairs` pairs, no padding.
    pub fn dense(m: usize, pairs: usize) -> PairRows {
        PairRows {
            m,
            pairs,
            stride: pairs,
            rows: m,
        }
    }

    /// Values in one part (`rows * stride`).
    pub fn len(&self) -> usize {
        self.rows * self.stride
    }
}

/// `x` `(m, cols)` rounded to bf16 pairs into `packed[..layout.len()]` as `layout` says,
/// the odd tail and all padding zero (every value of that range is written); with
/// `split`, the remainders of that rounding, rounded to bf16 in turn, into the next
/// `layout.len()` values.
pub(super) fn activation_pairs(
    x: &[f32],
    cols: usize,
    layout: PairRows,
    split: bool,
    packed: &mut Vec<u32>,
) {
    let PairRows {
        m, pairs, stride, ..
    } = layout;
    let len = layout.len();
    let needed = if split { 2 * len } else { len };
    if packed.len() < needed {
        packed.resize(needed, 0);
    }
    let (hi, lo) = packed[..needed].split_at_mut(len);
    let part = |value: f32, second: bool| if second { remainder(value) } else { value };
    for (second, target) in [(false, hi), (true, lo)] {
        for (row, target) in target.chunks_exact_mut(stride.max(1)).enumerate() {
            if row >= m {
                target.fill(0);
                continue;
            }
            let source = &x[row * cols..(row + 1) * cols];
            let mut chunks = source.chunks_exact(2);
            for (slot, pair) in target.iter_mut().zip(&mut chunks) {
                *slot = pack_pair(part(pair[0], second), part(pair[1], second));
            }
            if let [last] = chunks.remainder() {
                target[pairs - 1] = pack_pair(part(*last, second), 0.0);
            }
            target[pairs..].fill(0);
        }
    }
}

/// One `vdpbf16ps` lane: `acc + odd products + even products`, as the instruction rounds.
#[inline]
fn dot_pair(acc: f32, a: u32, w: u32) -> f32 {
    let acc = flush(acc + widen((a >> 16) as u16) * widen((w >> 16) as u16));
    flush(acc + widen(a as u16) * widen(w as u16))
}

#[inline]
fn flush(value: f32) -> f32 {
    if value.is_subnormal() {
        0.0
    } else {
        value
    }
}

/// An `MR x NR` tile; with second parts `lo` (non-empty), pair `k` of the second part is
/// added right after pair `k` of the first, as the vector path does.
fn portable_tile(a: &[u32], lo: &[u32], rows: usize, pairs: usize, w: &[u32]) -> [[f32; NR]; MR] {
    let mut out = [[0f32; NR]; MR];
    for (r, out_row) in out.iter_mut().enumerate().take(rows) {
        for k in 0..pairs {
            let w_pairs = &w[k * NR..(k + 1) * NR];
            let a_pair = a[r * pairs + k];
            for (acc, &w_pair) in out_row.iter_mut().zip(w_pairs) {
                *acc = dot_pair(*acc, a_pair, w_pair);
            }
            if !lo.is_empty() {
                let lo_pair = lo[r * pairs + k];
                for (acc, &w_pair) in out_row.iter_mut().zip(w_pairs) {
                    *acc = dot_pair(*acc, lo_pair, w_pair);
                }
            }
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{NR, WIDE_MR};
    use std::arch::x86_64::*;

    /// Rows of one register tile (by sixteen columns: twelve accumulators).
    const ROWS: usize = 6;

    /// Pairs of the inner dimension per chunk (12 rows of activations, 9 KiB, and a
    /// panel's weights, 12 KiB).
    const PAIRS_PER_CHUNK: usize = 96;

    /// A `WIDE_MR x NR` tile: `rows` rows of widened activation pairs `a` (`2 * pairs`
    /// f32 per row, odd value first), and of their second parts `lo` when not empty,
    /// against one weight panel `w`; six rows by sixteen columns at a time.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `a` (and a non-empty `lo`) hold `2 * rows * pairs`
    /// values and `w` holds `pairs * NR`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile(
        a: &[f32],
        lo: &[f32],
        rows: usize,
        pairs: usize,
        w: &[u32],
    ) -> [[f32; NR]; WIDE_MR] {
        assert!(a.len() >= 2 * rows * pairs && w.len() >= pairs * NR);
        assert!(lo.is_empty() || lo.len() >= 2 * rows * pairs);
        let mut out = [[0f32; NR]; WIDE_MR];
        let split = !lo.is_empty();
        // The inner dimension in chunks whose activations and weights stay in L1 while
        // every register tile of the tile runs over them; the sums wait in `out` between
        // chunks, so each still adds its products in order.
        for k0 in (0..pairs).step_by(PAIRS_PER_CHUNK) {
            let k1 = (k0 + PAIRS_PER_CHUNK).min(pairs);
            for row0 in (0..rows).step_by(ROWS) {
                let a = a.as_ptr().add(2 * row0 * pairs);
                let lo = if split {
                    lo.as_ptr().add(2 * row0 * pairs)
                } else {
                    a
                };
                let target = &mut out[row0..];
                let operands = Operands {
                    a,
                    lo,
                    pairs,
                    k0,
                    k1,
                };
                for col0 in [0, 16] {
                    let w = w.as_ptr().add(col0);
                    match (rows - row0, split) {
                        (1, false) => rows_tile::<1, false>(&operands, w, target, col0),
                        (2, false) => rows_tile::<2, false>(&operands, w, target, col0),
                        (3, false) => rows_tile::<3, false>(&operands, w, target, col0),
                        (4, false) => rows_tile::<4, false>(&operands, w, target, col0),
                        (5, false) => rows_tile::<5, false>(&operands, w, target, col0),
                        (_, false) => rows_tile::<ROWS, false>(&operands, w, target, col0),
                        (1, true) => rows_tile::<1, true>(&operands, w, target, col0),
                        (2, true) => rows_tile::<2, true>(&operands, w, target, col0),
                        (3, true) => rows_tile::<3, true>(&operands, w, target, col0),
                        (4, true) => rows_tile::<4, true>(&operands, w, target, col0),
                        (5, true) => rows_tile::<5, true>(&operands, w, target, col0),
                        (_, true) => rows_tile::<ROWS, true>(&operands, w, target, col0),
                    }
                }
            }
        }
        out
    }

    /// Activation rows from a register tile's first (`a`, and `lo` when split: `a`
    /// otherwise), `pairs` per row, and the chunk `k0..k1` of pairs to add.
    #[derive(Clone, Copy)]
    struct Operands {
        a: *const f32,
        lo: *const f32,
        pairs: usize,
        k0: usize,
        k1: usize,
    }

    /// `ROWS` rows by the sixteen columns from `col0` of the panel `w` points into, over
    /// one chunk of pairs, added to the sums in `out`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_tile<const ROWS: usize, const SPLIT: bool>(
        operands: &Operands,
        w: *const u32,
        out: &mut [[f32; NR]],
        col0: usize,
    ) {
        let Operands {
            a,
            lo,
            pairs,
            k0,
            k1,
        } = *operands;
        let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
        for (acc_row, out_row) in acc.iter_mut().zip(out.iter()) {
            acc_row[0] = _mm256_loadu_ps(out_row.as_ptr().add(col0));
            acc_row[1] = _mm256_loadu_ps(out_row.as_ptr().add(col0 + 8));
        }
        let stride = 2 * pairs;
        for k in k0..k1 {
            // SAFETY: k < pairs: sixteen u32 from `col0` of pair k lie inside the panel.
            let v = w.add(k * NR);
            accumulate(&mut acc, a.add(2 * k), stride, odd_values(v));
            accumulate(&mut acc, a.add(2 * k + 1), stride, even_values(v));
            if SPLIT {
                accumulate(&mut acc, lo.add(2 * k), stride, odd_values(v));
                accumulate(&mut acc, lo.add(2 * k + 1), stride, even_values(v));
            }
        }
        for (acc_row, out_row) in acc.iter().zip(out.iter_mut()) {
            _mm256_storeu_ps(out_row.as_mut_ptr().add(col0), acc_row[0]);
            _mm256_storeu_ps(out_row.as_mut_ptr().add(col0 + 8), acc_row[1]);
        }
    }

    /// The odd (high) halves of sixteen bf16 pairs from `w`, as f32 (loaded again for
    /// each use: fewer live registers than the accumulators need).
    #[inline(always)]
    unsafe fn odd_values(w: *const u32) -> [__m256; 2] {
        let high = _mm256_set1_epi32(0xffff_0000_u32 as i32);
        [0, 8].map(|c| {
            let v = _mm256_loadu_si256(w.add(c).cast());
            _mm256_castsi256_ps(_mm256_and_si256(v, high))
        })
    }

    /// The even (low) halves of sixteen bf16 pairs from `w`, as f32.
    #[inline(always)]
    unsafe fn even_values(w: *const u32) -> [__m256; 2] {
        [0, 8].map(|c| {
            let v = _mm256_loadu_si256(w.add(c).cast());
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v))
        })
    }

    /// Add one value of a pair (`a` points at row 0's) times `w` to every row's sums.
    #[inline(always)]
    unsafe fn accumulate<const ROWS: usize>(
        acc: &mut [[__m256; 2]; ROWS],
        a: *const f32,
        stride: usize,
        w: [__m256; 2],
    ) {
        for (r, acc_row) in acc.iter_mut().enumerate() {
            let av = _mm256_broadcast_ss(&*a.add(r * stride));
            acc_row[0] = _mm256_fmadd_ps(av, w[0], acc_row[0]);
            acc_row[1] = _mm256_fmadd_ps(av, w[1], acc_row[1]);
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::{NR, WIDE_MR};
    use std::arch::aarch64::*;

    /// Rows of one register tile (by sixteen columns: 24 accumulators of the 32
    /// registers, four for the weights).
    const ROWS: usize = 6;

    /// Pairs of the inner dimension per chunk (as on AVX2: 12 rows of activations, 9 KiB,
    /// and a panel's weights, 12 KiB, stay in L1).
    const PAIRS_PER_CHUNK: usize = 96;

    /// A `WIDE_MR x NR` tile: `rows` rows of widened activation pairs `a` (`2 * pairs`
    /// f32 per row, odd value first), and of their second parts `lo` when not empty,
    /// against one weight panel `w`; six rows by sixteen columns at a time. The same
    /// loop as the AVX2 tile, so every sum adds the same products in the same order.
    ///
    /// # Safety
    /// The CPU must have NEON; `a` (and a non-empty `lo`) hold `2 * rows * pairs` values
    /// and `w` holds `pairs * NR`.
    #[target_feature(enable = "neon")]
    pub unsafe fn tile(
        a: &[f32],
        lo: &[f32],
        rows: usize,
        pairs: usize,
        w: &[u32],
    ) -> [[f32; NR]; WIDE_MR] {
        assert!(rows <= WIDE_MR && a.len() >= 2 * rows * pairs && w.len() >= pairs * NR);
        assert!(lo.is_empty() || lo.len() >= 2 * rows * pairs);
        let mut out = [[0f32; NR]; WIDE_MR];
        let split = !lo.is_empty();
        for k0 in (0..pairs).step_by(PAIRS_PER_CHUNK) {
            let k1 = (k0 + PAIRS_PER_CHUNK).min(pairs);
            for row0 in (0..rows).step_by(ROWS) {
                let a = a.as_ptr().add(2 * row0 * pairs);
                let lo = if split {
                    lo.as_ptr().add(2 * row0 * pairs)
                } else {
                    a
                };
                let target = &mut out[row0..];
                let operands = Operands {
                    a,
                    lo,
                    pairs,
                    k0,
                    k1,
                };
                for col0 in [0, 16] {
                    let w = w.as_ptr().add(col0);
                    match (rows - row0, split) {
                        (1, false) => rows_tile::<1, false>(&operands, w, target, col0),
                        (2, false) => rows_tile::<2, false>(&operands, w, target, col0),
                        (3, false) => rows_tile::<3, false>(&operands, w, target, col0),
                        (4, false) => rows_tile::<4, false>(&operands, w, target, col0),
                        (5, false) => rows_tile::<5, false>(&operands, w, target, col0),
                        (_, false) => rows_tile::<ROWS, false>(&operands, w, target, col0),
                        (1, true) => rows_tile::<1, true>(&operands, w, target, col0),
                        (2, true) => rows_tile::<2, true>(&operands, w, target, col0),
                        (3, true) => rows_tile::<3, true>(&operands, w, target, col0),
                        (4, true) => rows_tile::<4, true>(&operands, w, target, col0),
                        (5, true) => rows_tile::<5, true>(&operands, w, target, col0),
                        (_, true) => rows_tile::<ROWS, true>(&operands, w, target, col0),
                    }
                }
            }
        }
        out
    }

    /// Activation rows from a register tile's first (`a`, and `lo` when split: `a`
    /// otherwise), `pairs` per row, and the chunk `k0..k1` of pairs to add.
    #[derive(Clone, Copy)]
    struct Operands {
        a: *const f32,
        lo: *const f32,
        pairs: usize,
        k0: usize,
        k1: usize,
    }

    /// `ROWS` rows by the sixteen columns from `col0` of the panel `w` points into, over
    /// one chunk of pairs, added to the sums in `out`.
    #[target_feature(enable = "neon")]
    unsafe fn rows_tile<const ROWS: usize, const SPLIT: bool>(
        operands: &Operands,
        w: *const u32,
        out: &mut [[f32; NR]],
        col0: usize,
    ) {
        let Operands {
            a,
            lo,
            pairs,
            k0,
            k1,
        } = *operands;
        let mut acc = [[vdupq_n_f32(0.0); 4]; ROWS];
        for (acc_row, out_row) in acc.iter_mut().zip(out.iter()) {
            for (q, acc) in acc_row.iter_mut().enumerate() {
                *acc = vld1q_f32(out_row.as_ptr().add(col0 + 4 * q));
            }
        }
        let stride = 2 * pairs;
        for k in k0..k1 {
            // SAFETY: k < pairs: sixteen u32 from `col0` of pair k lie inside the panel.
            let v = w.add(k * NR);
            accumulate(&mut acc, a.add(2 * k), stride, odd_values(v));
            accumulate(&mut acc, a.add(2 * k + 1), stride, even_values(v));
            if SPLIT {
                accumulate(&mut acc, lo.add(2 * k), stride, odd_values(v));
                accumulate(&mut acc, lo.add(2 * k + 1), stride, even_values(v));
            }
        }
        for (acc_row, out_row) in acc.iter().zip(out.iter_mut()) {
            for (q, acc) in acc_row.iter().enumerate() {
                vst1q_f32(out_row.as_mut_ptr().add(col0 + 4 * q), *acc);
            }
        }
    }

    /// The odd (high) halves of sixteen bf16 pairs from `w`, as f32.
    #[inline(always)]
    unsafe fn odd_values(w: *const u32) -> [float32x4_t; 4] {
        let high = vdupq_n_u32(0xffff_0000);
        [0, 4, 8, 12].map(|c| vreinterpretq_f32_u32(vandq_u32(vld1q_u32(w.add(c)), high)))
    }

    /// The even (low) halves of sixteen bf16 pairs from `w`, as f32.
    #[inline(always)]
    unsafe fn even_values(w: *const u32) -> [float32x4_t; 4] {
        [0, 4, 8, 12].map(|c| vreinterpretq_f32_u32(vshlq_n_u32::<16>(vld1q_u32(w.add(c)))))
    }

    /// Add one value of a pair (`a` points at row 0's) times `w` to every row's sums,
    /// each with one fused multiply-add (`fmla` by element).
    #[inline(always)]
    unsafe fn accumulate<const ROWS: usize>(
        acc: &mut [[float32x4_t; 4]; ROWS],
        a: *const f32,
        stride: usize,
        w: [float32x4_t; 4],
    ) {
        for (r, acc_row) in acc.iter_mut().enumerate() {
            let av = *a.add(r * stride);
            for (acc, &w) in acc_row.iter_mut().zip(&w) {
                *acc = vfmaq_n_f32(*acc, w, av);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// An `MR x NR` tile: `rows` rows of activation pairs `a` (`pairs` per row), and of
    /// their second parts `lo` when not empty, against one weight panel `w`.
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX512-BF16; `a` (and a non-empty `lo`) hold
    /// `rows * pairs` values and `w` holds `pairs * NR`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn tile(
        a: &[u32],
        lo: &[u32],
        rows: usize,
        pairs: usize,
        w: &[u32],
    ) -> [[f32; NR]; MR] {
        debug_assert!(a.len() >= rows * pairs && w.len() >= pairs * NR);
        debug_assert!(lo.is_empty() || lo.len() >= rows * pairs);
        if lo.is_empty() {
            match rows {
                8 => rows_tile::<8, false>(a, a, pairs, w),
                7 => rows_tile::<7, false>(a, a, pairs, w),
                6 => rows_tile::<6, false>(a, a, pairs, w),
                5 => rows_tile::<5, false>(a, a, pairs, w),
                4 => rows_tile::<4, false>(a, a, pairs, w),
                3 => rows_tile::<3, false>(a, a, pairs, w),
                2 => rows_tile::<2, false>(a, a, pairs, w),
                _ => rows_tile::<1, false>(a, a, pairs, w),
            }
        } else {
            match rows {
                8 => rows_tile::<8, true>(a, lo, pairs, w),
                7 => rows_tile::<7, true>(a, lo, pairs, w),
                6 => rows_tile::<6, true>(a, lo, pairs, w),
                5 => rows_tile::<5, true>(a, lo, pairs, w),
                4 => rows_tile::<4, true>(a, lo, pairs, w),
                3 => rows_tile::<3, true>(a, lo, pairs, w),
                2 => rows_tile::<2, true>(a, lo, pairs, w),
                _ => rows_tile::<1, true>(a, lo, pairs, w),
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn rows_tile<const ROWS: usize, const SPLIT: bool>(
        a: &[u32],
        lo: &[u32],
        pairs: usize,
        w: &[u32],
    ) -> [[f32; NR]; MR] {
        let mut acc = [[_mm512_setzero_ps(); 2]; ROWS];
        let (a, lo, w) = (a.as_ptr(), lo.as_ptr(), w.as_ptr());
        for k in 0..pairs {
            // SAFETY: k < pairs, so both 16-lane halves of pair k lie inside the panel.
            let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(w.add(k * NR).cast()));
            let w1: __m512bh = std::mem::transmute(_mm512_loadu_si512(w.add(k * NR + 16).cast()));
            for (r, acc_row) in acc.iter_mut().enumerate() {
                let pair = *a.add(r * pairs + k) as i32;
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                acc_row[0] = _mm512_dpbf16_ps(acc_row[0], av, w0);
                acc_row[1] = _mm512_dpbf16_ps(acc_row[1], av, w1);
                if SPLIT {
                    let pair = *lo.add(r * pairs + k) as i32;
                    let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                    acc_row[0] = _mm512_dpbf16_ps(acc_row[0], av, w0);
                    acc_row[1] = _mm512_dpbf16_ps(acc_row[1], av, w1);
                }
            }
        }
        let mut out = [[0f32; NR]; MR];
        for (acc_row, out_row) in acc.iter().zip(out.iter_mut()) {
            _mm512_storeu_ps(out_row.as_mut_ptr(), acc_row[0]);
            _mm512_storeu_ps(out_row.as_mut_ptr().add(16), acc_row[1]);
        }
        out
    }
}

//! `y = x W^T` in 8-bit integers with i32 accumulation.
//!
//! Weights are quantised once, at load, symmetrically per output row and block of
//! [`BLOCK`] inner-dimension values (`w ≈ s_w q_w`, `q_w` in [-127, 127], `s_w = max|w| /
//! 127` over the block); activations are quantised the same way per token and block, on
//! the fly. Blocks keep one outlier channel (language models have a few, hundreds of times
//! larger than the rest) from wiping out the resolution of a whole row.
//!
//! VNNI's `vpdpbusd` multiplies unsigned by signed bytes, so activations are stored offset
//! by 128 (`u = q_x + 128`) and the offset is taken out with each block's precomputed
//! weight sum: `Σ q_x q_w = Σ u q_w - 128 Σ q_w`. Per block the exact integer sum is
//! converted to f32 and accumulated as `y = fma(sum, s_w s_x, y)`, blocks in order.
//!
//! Plain AVX2 has no byte dot product that cannot saturate with these operands
//! (`vpmaddubsw` adds two u8 x i8 products into a saturating i16), so its path splits each
//! four-byte group into its even and odd bytes as i16 (a shift pair on the weights per
//! call of the tile, on the signed activations once per call) and multiplies with
//! `vpmaddwd`, which adds two i16 products into an i32 exactly: `Σ q_x q_w` without the
//! offset.
//!
//! On aarch64 the activations are used signed, as on AVX2 (`q_x = u - 128`, no offset to
//! take out): with the dot-product extension, `sdot` adds four i8 x i8 products into an
//! i32 exactly; without it, `smull` multiplies bytes into i16 products, and two pairwise
//! additions (`addp` in i16, then `sadalp` into the i32 sums) add each quad's four. The
//! first addition cannot overflow: quantised values lie in [-127, 127], so two products
//! sum to at most 2 x 127^2 = 32258 < 2^15.
//!
//! Integer sums are exact and the f32 steps are the same operations in the same order on
//! every path, so AVX512-VNNI, AVX-VNNI, AVX2, NEON (with or without the dot product) and
//! the portable path agree bit for bit.

use super::amx::{self, Unit};
use super::tiles::{for_each_tile, panel_count, Store, MR, NR};
use super::Isa;
use crate::cpu::CpuFeatures;
use rayon::prelude::*;

/// Inner-dimension values per 32-bit lane of `vpdpbusd`.
const QUAD: usize = 4;
/// Inner-dimension values sharing one scale.
pub const BLOCK: usize = 32;
/// Quads per block.
pub(super) const BLOCK_QUADS: usize = BLOCK / QUAD;

/// Activation values quantised by one task at least ([`Activations::quantise`]).
const QUANTISE_TASK_VALUES: usize = 8192;

/// A weight matrix `(rows, cols)` = `(out_features, in_features)` quantised to int8 per
/// row and block.
#[derive(Debug, Clone)]
pub struct Int8Matrix {
    rows: usize,
    cols: usize,
    /// Blocks of the inner dimension (`cols` padded with zeros to whole blocks).
    blocks: usize,
    /// Panel `p`, quad `k`, column `c` at `(p * quads + k) * NR + c`: the four bytes
    /// `q_w[p*NR + c][4k .. 4k + 4]` (little-endian). Padding is zero.
    packed: Vec<u32>,
    /// `s_w` of panel `p`, block `b`, column `c` at `(p * blocks + b) * NR + c`.
    scales: Vec<f32>,
    /// `128 Σ q_w` over the same block, same layout.
    offsets: Vec<i32>,
}

impl Int8Matrix {
    /// Quantise a row-major `(rows, cols)` f32 matrix per row and block, and pack it.
    pub fn from_f32(weight: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(
            weight.len(),
            rows * cols,
            "weight holds {} values, expected {rows}x{cols}",
            weight.len()
        );
        let blocks = cols.div_ceil(BLOCK);
        let quads = blocks * BLOCK_QUADS;
        let panels = panel_count(rows);
        let mut packed = vec![0u32; panels * quads * NR];
        let mut scales = vec![0f32; panels * blocks * NR];
        let mut offsets = vec![0i32; panels * blocks * NR];
        let mut quantised = [0i8; BLOCK];
        for row in 0..rows {
            let (panel, c) = (row / NR, row % NR);
            let source = &weight[row * cols..(row + 1) * cols];
            for (b, values) in source.chunks(BLOCK).enumerate() {
                let at = (panel * blocks + b) * NR + c;
                scales[at] = quantise(values, &mut quantised);
                offsets[at] = 128 * quantised.iter().map(|&q| q as i32).sum::<i32>();
                for (j, quad) in quantised.chunks_exact(QUAD).enumerate() {
                    let k = b * BLOCK_QUADS + j;
                    packed[(panel * quads + k) * NR + c] =
                        u32::from_le_bytes([0, 1, 2, 3].map(|i| quad[i] as u8));
                }
            }
        }
        Self {
            rows,
            cols,
            blocks,
            packed,
            scales,
            offsets,
        }
    }

    /// Output features (rows of `W`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (columns of `W`).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Blocks of the inner dimension.
    pub(super) fn blocks(&self) -> usize {
        self.blocks
    }

    /// Weight panel `p`: its quads `(quad, column)` and its scales `(block, column)`, as
    /// the packing stores them.
    pub(super) fn panel(&self, p: usize) -> (&[u32], &[f32]) {
        let (quads, blocks) = (self.blocks * BLOCK_QUADS, self.blocks);
        (
            &self.packed[p * quads * NR..(p + 1) * quads * NR],
            &self.scales[p * blocks * NR..(p + 1) * blocks * NR],
        )
    }

    /// The stored weight dequantised to f32 (`s_w q_w`), row-major `(rows, cols)`.
    pub fn to_f32(&self) -> Vec<f32> {
        let quads = self.blocks * BLOCK_QUADS;
        let mut weight = vec![0f32; self.rows * self.cols];
        for row in 0..self.rows {
            let (panel, c) = (row / NR, row % NR);
            for col in 0..self.cols {
                let quad = self.packed[(panel * quads + col / QUAD) * NR + c];
                let q = quad.to_le_bytes()[col % QUAD] as i8;
                let scale = self.scales[(panel * self.blocks + col / BLOCK) * NR + c];
                weight[row * self.cols + col] = q as f32 * scale;
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
        amx::int8_product(unit, self, x, m, out, Store::Overwrite)
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
        if amx::int8_unit().is_some() {
            Isa::Amx
        } else {
            Self::best_vector_isa()
        }
    }

    /// The widest vector (not tile) path on this machine.
    pub fn best_vector_isa() -> Isa {
        let cpu = CpuFeatures::get();
        if cpu.avx512f && cpu.avx512vnni {
            Isa::Avx512
        } else if cpu.avx2 && cpu.fma && cpu.avxvnni {
            Isa::AvxVnni
        } else if cpu.avx2 && cpu.fma {
            Isa::Avx2
        } else if cpu.neon && cpu.dotprod {
            Isa::Dotprod
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
            Isa::Amx => amx::int8_unit().is_some(),
            Isa::Avx512 => cpu.avx512f && cpu.avx512vnni,
            Isa::AvxVnni => cpu.avx2 && cpu.fma && cpu.avxvnni,
            Isa::Avx2 => cpu.avx2 && cpu.fma,
            Isa::Dotprod => cpu.neon && cpu.dotprod,
            Isa::Neon => cpu.neon,
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
            "{isa:?} int8 products are not available here"
        );
        self.check_input(x, m);
        if isa == Isa::Amx {
            let unit = amx::int8_unit().expect("checked by supports");
            return amx::int8_product(unit, self, x, m, out, store);
        }
        let activations = Activations::quantise(x, m, self.cols, self.blocks);
        let blocks = self.blocks;
        let quads = blocks * BLOCK_QUADS;
        // The AVX2 path reads the activations as signed i16 pairs, two per quad; the NEON
        // paths as signed bytes.
        let signed;
        let a = match isa {
            Isa::Avx2 => {
                signed = activations.signed_pairs();
                &signed
            }
            Isa::Dotprod | Isa::Neon => {
                signed = activations.signed_quads();
                &signed
            }
            _ => &activations.quads,
        };
        let per_quad = a.len() / (m * quads).max(1);
        let tile = |row0: usize, rows: usize, panel: usize| -> [[f32; NR]; MR] {
            let operands = Operands {
                a: &a[row0 * quads * per_quad..(row0 + rows) * quads * per_quad],
                a_scales: &activations.scales[row0 * blocks..(row0 + rows) * blocks],
                w: &self.packed[panel * quads * NR..(panel + 1) * quads * NR],
                w_scales: &self.scales[panel * blocks * NR..(panel + 1) * blocks * NR],
                w_offsets: &self.offsets[panel * blocks * NR..(panel + 1) * blocks * NR],
                blocks,
            };
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `supports` checked AVX-512F and AVX512-VNNI at run time.
                Isa::Avx512 => unsafe { x86::tile_avx512(&operands, rows) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `supports` checked AVX2, FMA and AVX-VNNI at run time.
                Isa::AvxVnni => unsafe { x86::tile_avxvnni(&operands, rows) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `supports` checked AVX2 and FMA at run time.
                Isa::Avx2 => unsafe { x86::tile_avx2(&operands, rows) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: `supports` checked NEON and the dot product at run time.
                Isa::Dotprod => unsafe { neon::tile::<true>(&operands, rows) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: `supports` checked NEON at run time.
                Isa::Neon => unsafe { neon::tile::<false>(&operands, rows) },
                _ => portable_tile(&operands, rows),
            }
        };
        for_each_tile(m, self.rows, out, store, tile);
    }
}

/// One tile's inputs: some rows of quantised activations, one weight panel.
struct Operands<'a> {
    /// Offset activation bytes, four per u32, `blocks * BLOCK_QUADS` per row (on the AVX2
    /// path: [`Activations::signed_pairs`], two u32 per quad; on the NEON paths:
    /// [`Activations::signed_quads`]).
    a: &'a [u32],
    /// `s_x` per row and block.
    a_scales: &'a [f32],
    /// The panel's weight quads, `(quad, column)`.
    w: &'a [u32],
    /// The panel's `s_w`, `(block, column)`.
    w_scales: &'a [f32],
    /// The panel's `128 Σ q_w`, `(block, column)`.
    w_offsets: &'a [i32],
    blocks: usize,
}

/// Activations quantised per row and block.
pub(super) struct Activations {
    /// `q + 128` bytes, four per u32, `(m, blocks * BLOCK_QUADS)`; padding holds 128.
    quads: Vec<u32>,
    /// `s_x`, `(m, blocks)`.
    pub(super) scales: Vec<f32>,
}

impl Activations {
    pub(super) fn quantise(x: &[f32], m: usize, cols: usize, blocks: usize) -> Self {
        let quads_per_row = blocks * BLOCK_QUADS;
        let mut quads = vec![0x8080_8080u32; m * quads_per_row];
        let mut scales = vec![0f32; m * blocks];
        // Each row on its own (the same bits however they are split): in parallel, a few
        // thousand values a task. Done on one thread it was 4% of an int8 generation,
        // with the other core idle.
        let rows_per_task = (QUANTISE_TASK_VALUES / cols.max(1)).max(1);
        quads
            .par_chunks_mut(quads_per_row.max(1))
            .zip(scales.par_chunks_mut(blocks.max(1)))
            .zip(x.par_chunks(cols.max(1)))
            .with_min_len(rows_per_task)
            .for_each(|((quads, scales), source)| {
                let mut bytes = [0i8; BLOCK];
                for ((values, scale), quads) in source
                    .chunks(BLOCK)
                    .zip(scales.iter_mut())
                    .zip(quads.chunks_exact_mut(BLOCK_QUADS))
                {
                    *scale = quantise(values, &mut bytes);
                    for (slot, quad) in quads.iter_mut().zip(bytes.chunks_exact(QUAD)) {
                        *slot = u32::from_le_bytes([0, 1, 2, 3].map(|i| (quad[i] as u8) ^ 0x80));
                    }
                }
            });
        Self { quads, scales }
    }

    /// The activations as signed i16 pairs for `vpmaddwd`: per quad `q0 q1 q2 q3`, the
    /// u32 holding `q0` (low half) and `q2`, then the one holding `q1` and `q3`.
    fn signed_pairs(&self) -> Vec<u32> {
        let signed = |u: u8| (u ^ 0x80) as i8 as i16 as u16 as u32;
        let mut pairs = Vec::with_capacity(2 * self.quads.len());
        for &quad in &self.quads {
            let u = quad.to_le_bytes();
            pairs.push(signed(u[0]) | (signed(u[2]) << 16));
            pairs.push(signed(u[1]) | (signed(u[3]) << 16));
        }
        pairs
    }

    /// The activations as signed bytes (`q`, not `q + 128`) for the NEON paths, four per
    /// u32 as in [`Self::quads`]; padding holds 0.
    pub(super) fn signed_quads(&self) -> Vec<u32> {
        self.quads.iter().map(|&quad| quad ^ 0x8080_8080).collect()
    }
}

/// Quantise `values` (at most [`BLOCK`]) symmetrically into `target` (the rest zero);
/// returns the scale.
fn quantise(values: &[f32], target: &mut [i8; BLOCK]) -> f32 {
    let max = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    target.fill(0);
    if max == 0.0 || !max.is_finite() {
        return 0.0;
    }
    let inverse = 127.0 / max;
    for (q, &v) in target.iter_mut().zip(values) {
        *q = round_even(v * inverse).clamp(-127.0, 127.0) as i8;
    }
    max / 127.0
}

/// Nearest integer, ties to even, for `|v| < 2^22` (adding and removing `1.5 * 2^23`
/// leaves no fraction bits); plain arithmetic, so it vectorises on any x86-64.
#[inline]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

fn portable_tile(operands: &Operands, rows: usize) -> [[f32; NR]; MR] {
    let quads = operands.blocks * BLOCK_QUADS;
    let mut out = [[0f32; NR]; MR];
    for (r, out_row) in out.iter_mut().enumerate().take(rows) {
        for b in 0..operands.blocks {
            let mut sums = [0i32; NR];
            for k in b * BLOCK_QUADS..(b + 1) * BLOCK_QUADS {
                let a_bytes = operands.a[r * quads + k].to_le_bytes();
                for (sum, &w_quad) in sums.iter_mut().zip(&operands.w[k * NR..(k + 1) * NR]) {
                    let w_bytes = w_quad.to_le_bytes();
                    let dot: i32 = (0..QUAD)
                        .map(|j| a_bytes[j] as i32 * w_bytes[j] as i8 as i32)
                        .sum();
                    *sum = sum.wrapping_add(dot);
                }
            }
            let a_scale = operands.a_scales[r * operands.blocks + b];
            let w_scales = &operands.w_scales[b * NR..(b + 1) * NR];
            let w_offsets = &operands.w_offsets[b * NR..(b + 1) * NR];
            for c in 0..NR {
                let exact = sums[c].wrapping_sub(w_offsets[c]) as f32;
                out_row[c] = exact.mul_add(w_scales[c] * a_scale, out_row[c]);
            }
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Operands, BLOCK_QUADS, MR, NR};
    use std::arch::x86_64::*;

    /// An `MR x NR` tile, four rows at a time (8 f32 sums + 8 i32 block sums in
    /// registers).
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX512-VNNI; `operands` holds `rows` rows.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn tile_avx512(operands: &Operands, rows: usize) -> [[f32; NR]; MR] {
        let mut out = [[0f32; NR]; MR];
        let mut row0 = 0;
        while row0 < rows {
            let target = &mut out[row0..];
            match rows - row0 {
                1 => rows_avx512::<1>(operands, row0, target),
                2 => rows_avx512::<2>(operands, row0, target),
                3 => rows_avx512::<3>(operands, row0, target),
                _ => rows_avx512::<4>(operands, row0, target),
            }
            row0 += 4;
        }
        out
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn rows_avx512<const ROWS: usize>(
        operands: &Operands,
        row0: usize,
        out: &mut [[f32; NR]],
    ) {
        let blocks = operands.blocks;
        let quads = blocks * BLOCK_QUADS;
        debug_assert!(operands.a.len() >= (row0 + ROWS) * quads);
        debug_assert!(operands.w.len() >= quads * NR);
        let a = operands.a.as_ptr().add(row0 * quads);
        let a_scales = operands.a_scales.as_ptr().add(row0 * blocks);
        let w = operands.w.as_ptr();
        let mut y = [[_mm512_setzero_ps(); 2]; ROWS];
        for b in 0..blocks {
            let mut sums = [[_mm512_setzero_si512(); 2]; ROWS];
            for k in b * BLOCK_QUADS..(b + 1) * BLOCK_QUADS {
                // SAFETY: k < quads, so both 16-lane halves of quad k lie in the panel.
                let w0 = _mm512_loadu_si512(w.add(k * NR).cast());
                let w1 = _mm512_loadu_si512(w.add(k * NR + 16).cast());
                for (r, sum) in sums.iter_mut().enumerate() {
                    let av = _mm512_set1_epi32(*a.add(r * quads + k) as i32);
                    sum[0] = _mm512_dpbusd_epi32(sum[0], av, w0);
                    sum[1] = _mm512_dpbusd_epi32(sum[1], av, w1);
                }
            }
            let scales = operands.w_scales.as_ptr().add(b * NR);
            let offsets = operands.w_offsets.as_ptr().add(b * NR);
            let w_scale = [_mm512_loadu_ps(scales), _mm512_loadu_ps(scales.add(16))];
            let w_offset = [
                _mm512_loadu_si512(offsets.cast()),
                _mm512_loadu_si512(offsets.add(16).cast()),
            ];
            for (r, (sum, y_row)) in sums.iter().zip(y.iter_mut()).enumerate() {
                let a_scale = _mm512_set1_ps(*a_scales.add(r * blocks + b));
                for h in 0..2 {
                    let exact = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum[h], w_offset[h]));
                    let scale = _mm512_mul_ps(w_scale[h], a_scale);
                    y_row[h] = _mm512_fmadd_ps(exact, scale, y_row[h]);
                }
            }
        }
        for (y_row, out_row) in y.iter().zip(out.iter_mut()) {
            _mm512_storeu_ps(out_row.as_mut_ptr(), y_row[0]);
            _mm512_storeu_ps(out_row.as_mut_ptr().add(16), y_row[1]);
        }
    }

    /// As [`tile_avx512`] with AVX2 only: four rows by sixteen columns at a time, each
    /// weight quad split into its even bytes and its odd bytes as i16 (`q0 q2` and `q1
    /// q3` per 32-bit lane), multiplied by the matching activation pairs with
    /// `vpmaddwd` (exact).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `operands` holds `rows` rows, its activations as
    /// [`super::Activations::signed_pairs`].
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile_avx2(operands: &Operands, rows: usize) -> [[f32; NR]; MR] {
        let quads = operands.blocks * BLOCK_QUADS;
        assert!(operands.a.len() >= 2 * rows * quads && operands.w.len() >= quads * NR);
        assert!(operands.a_scales.len() >= rows * operands.blocks);
        let mut out = [[0f32; NR]; MR];
        for row0 in (0..rows).step_by(4) {
            let target = &mut out[row0..];
            for col0 in [0, 16] {
                match rows - row0 {
                    1 => rows_avx2::<1>(operands, row0, col0, target),
                    2 => rows_avx2::<2>(operands, row0, col0, target),
                    3 => rows_avx2::<3>(operands, row0, col0, target),
                    _ => rows_avx2::<4>(operands, row0, col0, target),
                }
            }
        }
        out
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_avx2<const ROWS: usize>(
        operands: &Operands,
        row0: usize,
        col0: usize,
        out: &mut [[f32; NR]],
    ) {
        let blocks = operands.blocks;
        let quads = blocks * BLOCK_QUADS;
        let a = operands.a.as_ptr().add(2 * row0 * quads);
        let a_scales = operands.a_scales.as_ptr().add(row0 * blocks);
        let w = operands.w.as_ptr().add(col0);
        for b in 0..blocks {
            let mut sums = [[_mm256_setzero_si256(); 2]; ROWS];
            for k in b * BLOCK_QUADS..(b + 1) * BLOCK_QUADS {
                // SAFETY: k < quads: sixteen quads from `col0` of quad k lie in the panel.
                let v = [
                    _mm256_loadu_si256(w.add(k * NR).cast()),
                    _mm256_loadu_si256(w.add(k * NR + 8).cast()),
                ];
                let even = v.map(|v| _mm256_srai_epi16::<8>(_mm256_slli_epi16::<8>(v)));
                let odd = v.map(|v| _mm256_srai_epi16::<8>(v));
                for (r, sum) in sums.iter_mut().enumerate() {
                    let at = a.add(2 * (r * quads + k));
                    let a_even = _mm256_set1_epi32(*at as i32);
                    let a_odd = _mm256_set1_epi32(*at.add(1) as i32);
                    for h in 0..2 {
                        let products = _mm256_add_epi32(
                            _mm256_madd_epi16(even[h], a_even),
                            _mm256_madd_epi16(odd[h], a_odd),
                        );
                        sum[h] = _mm256_add_epi32(sum[h], products);
                    }
                }
            }
            let scales = operands.w_scales.as_ptr().add(b * NR + col0);
            let w_scale = [_mm256_loadu_ps(scales), _mm256_loadu_ps(scales.add(8))];
            // The running sums live in `out` (zero at first): sixteen registers hold
            // the block sums and weights.
            for (r, (sum, out_row)) in sums.iter().zip(out.iter_mut()).enumerate() {
                let a_scale = _mm256_set1_ps(*a_scales.add(r * blocks + b));
                for h in 0..2 {
                    let y = out_row.as_mut_ptr().add(col0 + 8 * h);
                    let exact = _mm256_cvtepi32_ps(sum[h]);
                    let scale = _mm256_mul_ps(w_scale[h], a_scale);
                    _mm256_storeu_ps(y, _mm256_fmadd_ps(exact, scale, _mm256_loadu_ps(y)));
                }
            }
        }
    }

    /// As [`tile_avx512`] with 256-bit AVX-VNNI (machines without AVX-512 VNNI), one
    /// row at a time (4 f32 sums + 4 i32 block sums of the 16 registers).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and AVX-VNNI; `operands` holds `rows` rows.
    #[target_feature(enable = "avx2,fma,avxvnni")]
    pub unsafe fn tile_avxvnni(operands: &Operands, rows: usize) -> [[f32; NR]; MR] {
        let blocks = operands.blocks;
        let quads = blocks * BLOCK_QUADS;
        let w = operands.w.as_ptr();
        let mut out = [[0f32; NR]; MR];
        for (r, out_row) in out.iter_mut().enumerate().take(rows) {
            let a = operands.a.as_ptr().add(r * quads);
            let mut y = [_mm256_setzero_ps(); 4];
            for b in 0..blocks {
                let mut sums = [_mm256_setzero_si256(); 4];
                for k in b * BLOCK_QUADS..(b + 1) * BLOCK_QUADS {
                    let av = _mm256_set1_epi32(*a.add(k) as i32);
                    for (q, sum) in sums.iter_mut().enumerate() {
                        // SAFETY: k < quads: the four 8-lane quarters lie in the panel.
                        let wq = _mm256_loadu_si256(w.add(k * NR + 8 * q).cast());
                        *sum = _mm256_dpbusd_avx_epi32(*sum, av, wq);
                    }
                }
                let a_scale = _mm256_set1_ps(operands.a_scales[r * blocks + b]);
                let scales = operands.w_scales.as_ptr().add(b * NR);
                let offsets = operands.w_offsets.as_ptr().add(b * NR);
                for (q, (sum, y_quarter)) in sums.iter().zip(y.iter_mut()).enumerate() {
                    let offset = _mm256_loadu_si256(offsets.add(8 * q).cast());
                    let exact = _mm256_cvtepi32_ps(_mm256_sub_epi32(*sum, offset));
                    let scale = _mm256_mul_ps(_mm256_loadu_ps(scales.add(8 * q)), a_scale);
                    *y_quarter = _mm256_fmadd_ps(exact, scale, *y_quarter);
                }
            }
            for (q, y_quarter) in y.iter().enumerate() {
                _mm256_storeu_ps(out_row.as_mut_ptr().add(8 * q), *y_quarter);
            }
        }
        out
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::{Operands, BLOCK_QUADS, MR, NR};
    use std::arch::aarch64::*;

    /// An `MR x NR` tile, four rows by sixteen columns at a time (sixteen i32 block sums
    /// in registers; the running f32 sums wait in `out`, zero at first, as on AVX2). With
    /// `DOT`, each quad's four products are added by `sdot`; without, by widening
    /// multiplies and pairwise additions (see the module documentation).
    ///
    /// # Safety
    /// The CPU must have NEON, and the dot-product extension with `DOT`; `operands` holds
    /// `rows` rows, its activations as [`super::Activations::signed_quads`].
    #[target_feature(enable = "neon")]
    pub unsafe fn tile<const DOT: bool>(operands: &Operands, rows: usize) -> [[f32; NR]; MR] {
        let quads = operands.blocks * BLOCK_QUADS;
        assert!(rows <= MR && operands.a.len() >= rows * quads && operands.w.len() >= quads * NR);
        assert!(operands.a_scales.len() >= rows * operands.blocks);
        let mut out = [[0f32; NR]; MR];
        for row0 in (0..rows).step_by(4) {
            let target = &mut out[row0..];
            for col0 in [0, 16] {
                match (rows - row0, DOT) {
                    (1, true) => rows_dot::<1>(operands, row0, col0, target),
                    (2, true) => rows_dot::<2>(operands, row0, col0, target),
                    (3, true) => rows_dot::<3>(operands, row0, col0, target),
                    (_, true) => rows_dot::<4>(operands, row0, col0, target),
                    (1, false) => rows_widening::<1>(operands, row0, col0, target),
                    (2, false) => rows_widening::<2>(operands, row0, col0, target),
                    (3, false) => rows_widening::<3>(operands, row0, col0, target),
                    (_, false) => rows_widening::<4>(operands, row0, col0, target),
                }
            }
        }
        out
    }

    /// `ROWS` rows by the sixteen columns from `col0`, with `sdot`.
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn rows_dot<const ROWS: usize>(
        operands: &Operands,
        row0: usize,
        col0: usize,
        out: &mut [[f32; NR]],
    ) {
        let blocks = operands.blocks;
        let quads = blocks * BLOCK_QUADS;
        let a = operands.a.as_ptr().add(row0 * quads);
        let w = operands.w.as_ptr().add(col0);
        for b in 0..blocks {
            let mut sums = [[vdupq_n_s32(0); 4]; ROWS];
            // Four quads of each row's activations per load, one lane per `sdot`.
            for k in (b * BLOCK_QUADS..(b + 1) * BLOCK_QUADS).step_by(4) {
                let mut av = [vdupq_n_s8(0); ROWS];
                for (r, av) in av.iter_mut().enumerate() {
                    // SAFETY: a block holds BLOCK_QUADS (a multiple of 4) quads per row.
                    *av = vreinterpretq_s8_u32(vld1q_u32(a.add(r * quads + k)));
                }
                macro_rules! quad {
                    ($lane:literal) => {
                        // SAFETY: k + lane < quads: sixteen quads from `col0` lie in the panel.
                        let wq = [0, 4, 8, 12]
                            .map(|c| vreinterpretq_s8_u32(vld1q_u32(w.add((k + $lane) * NR + c))));
                        for (sum, &av) in sums.iter_mut().zip(&av) {
                            for (s, &wq) in sum.iter_mut().zip(&wq) {
                                *s = sdot_lane::<$lane>(*s, wq, av);
                            }
                        }
                    };
                }
                quad!(0);
                quad!(1);
                quad!(2);
                quad!(3);
            }
            accumulate_block(operands, row0, col0, b, &sums, out);
        }
    }

    /// `ROWS` rows by the sixteen columns from `col0`, without the dot product: per quad
    /// and four columns, two `smull` (eight i16 products each), an `addp` (pairs of
    /// products, no overflow) and a `sadalp` into the i32 sums.
    #[target_feature(enable = "neon")]
    unsafe fn rows_widening<const ROWS: usize>(
        operands: &Operands,
        row0: usize,
        col0: usize,
        out: &mut [[f32; NR]],
    ) {
        let blocks = operands.blocks;
        let quads = blocks * BLOCK_QUADS;
        let a = operands.a.as_ptr().add(row0 * quads);
        let w = operands.w.as_ptr().add(col0);
        for b in 0..blocks {
            let mut sums = [[vdupq_n_s32(0); 4]; ROWS];
            for k in b * BLOCK_QUADS..(b + 1) * BLOCK_QUADS {
                // SAFETY: k < quads: sixteen quads from `col0` of quad k lie in the panel.
                let wq = [0, 4, 8, 12].map(|c| vreinterpretq_s8_u32(vld1q_u32(w.add(k * NR + c))));
                for (r, sum) in sums.iter_mut().enumerate() {
                    // The row's quad in every 32-bit lane: its bytes face each column's.
                    let av = vreinterpretq_s8_u32(vdupq_n_u32(*a.add(r * quads + k)));
                    for (s, &wq) in sum.iter_mut().zip(&wq) {
                        let low = vmull_s8(vget_low_s8(wq), vget_low_s8(av));
                        let high = vmull_high_s8(wq, av);
                        *s = vpadalq_s16(*s, vpaddq_s16(low, high));
                    }
                }
            }
            accumulate_block(operands, row0, col0, b, &sums, out);
        }
    }

    /// Add block `b`'s exact sums, scaled, to the running sums in `out`: per column
    /// `y = fma(sum as f32, s_w s_x, y)`, as the portable path does.
    #[inline(always)]
    unsafe fn accumulate_block<const ROWS: usize>(
        operands: &Operands,
        row0: usize,
        col0: usize,
        b: usize,
        sums: &[[int32x4_t; 4]; ROWS],
        out: &mut [[f32; NR]],
    ) {
        let blocks = operands.blocks;
        let scales = operands.w_scales.as_ptr().add(b * NR + col0);
        let a_scales = operands.a_scales.as_ptr().add(row0 * blocks);
        for (r, (sum, out_row)) in sums.iter().zip(out.iter_mut()).enumerate() {
            let a_scale = vdupq_n_f32(*a_scales.add(r * blocks + b));
            for (q, &sum) in sum.iter().enumerate() {
                let y = out_row.as_mut_ptr().add(col0 + 4 * q);
                let exact = vcvtq_f32_s32(sum);
                let scale = vmulq_f32(vld1q_f32(scales.add(4 * q)), a_scale);
                vst1q_f32(y, vfmaq_f32(vld1q_f32(y), exact, scale));
            }
        }
    }

    /// `acc + w . a[LANE]`: per 32-bit lane of `acc`, the four i8 products of that lane's
    /// bytes of `w` and the bytes of quad `LANE` of `a`, added exactly (`sdot`, by
    /// element; inline assembly as its intrinsic is not stable Rust).
    #[inline(always)]
    unsafe fn sdot_lane<const LANE: i32>(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        std::arch::asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{lane}]",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            lane = const LANE,
            options(pure, nomem, nostack, preserves_flags)
        );
        acc
    }
}

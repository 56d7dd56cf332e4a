//! `y = x W^T` in 8-bit integers with i32 accumulation.
//!
//! Weights are quantised once, at load, symmetrically per output row (`w ≈ s_w q_w`,
//! `q_w` in [-127, 127], `s_w = max|w| / 127`); activations are quantised the same way
//! per token on the fly. VNNI's `vpdpbusd` multiplies unsigned by signed bytes, so
//! activations are stored offset by 128 (`u = q_x + 128`) and the offset is taken out
//! afterwards with each row's precomputed weight sum:
//! `Σ q_x q_w = Σ u q_w - 128 Σ q_w`.
//!
//! Integer sums are exact, so AVX512-VNNI, AVX-VNNI and the portable path agree bit for
//! bit; the f32 epilogue (`(acc - 128 Σq_w) as f32 * s_x * s_w`) is the same scalar code
//! on every path.

use super::tiles::{for_each_tile, panel_count, MR, NR};
use super::Isa;
use crate::cpu::CpuFeatures;

/// Inner-dimension values per 32-bit lane of `vpdpbusd`.
const QUAD: usize = 4;

/// A weight matrix `(rows, cols)` = `(out_features, in_features)` quantised to int8 per
/// row.
#[derive(Debug, Clone)]
pub struct Int8Matrix {
    rows: usize,
    cols: usize,
    /// Inner dimension in groups of four: `cols` rounded up to a multiple of 4, over 4.
    quads: usize,
    /// Panel `p`, quad `k`, column `c` at `(p * quads + k) * NR + c`: the four bytes
    /// `q_w[p*NR + c][4k .. 4k + 4]` (little-endian). Padding is zero.
    packed: Vec<u32>,
    /// `s_w` per row, padded with zeros to whole panels.
    scales: Vec<f32>,
    /// `128 Σ_k q_w[row][k]` per row, padded with zeros to whole panels.
    offsets: Vec<i32>,
}

impl Int8Matrix {
    /// Quantise a row-major `(rows, cols)` f32 matrix per row and pack it.
    pub fn from_f32(weight: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(
            weight.len(),
            rows * cols,
            "weight holds {} values, expected {rows}x{cols}",
            weight.len()
        );
        let quads = cols.div_ceil(QUAD);
        let panels = panel_count(rows);
        let mut packed = vec![0u32; panels * quads * NR];
        let mut scales = vec![0f32; panels * NR];
        let mut offsets = vec![0i32; panels * NR];
        let mut quantised = vec![0i8; quads * QUAD];
        for row in 0..rows {
            let (panel, c) = (row / NR, row % NR);
            let scale = quantise_row(&weight[row * cols..(row + 1) * cols], &mut quantised);
            scales[row] = scale;
            offsets[row] = 128 * quantised.iter().map(|&q| q as i32).sum::<i32>();
            for (k, quad) in quantised.chunks_exact(QUAD).enumerate() {
                packed[(panel * quads + k) * NR + c] = u32::from_le_bytes([
                    quad[0] as u8,
                    quad[1] as u8,
                    quad[2] as u8,
                    quad[3] as u8,
                ]);
            }
        }
        Self {
            rows,
            cols,
            quads,
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

    /// The stored weight dequantised to f32 (`s_w q_w`), row-major `(rows, cols)`.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut weight = vec![0f32; self.rows * self.cols];
        for row in 0..self.rows {
            let (panel, c) = (row / NR, row % NR);
            for col in 0..self.cols {
                let quad = self.packed[(panel * self.quads + col / QUAD) * NR + c];
                let q = quad.to_le_bytes()[col % QUAD] as i8;
                weight[row * self.cols + col] = q as f32 * self.scales[row];
            }
        }
        weight
    }

    /// `out = x W^T` for row-major `x` `(m, cols)` and `out` `(m, rows)`, on the best
    /// instruction path this machine has.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32]) {
        self.matmul_on(Self::best_isa(), x, m, out)
    }

    /// The path [`Self::matmul`] takes on this machine.
    pub fn best_isa() -> Isa {
        let cpu = CpuFeatures::get();
        if cpu.avx512f && cpu.avx512vnni {
            Isa::Avx512
        } else if cpu.avx2 && cpu.avxvnni {
            Isa::AvxVnni
        } else {
            Isa::Portable
        }
    }

    /// Whether [`Self::matmul_on`] can run `isa` here.
    pub fn supports(isa: Isa) -> bool {
        let cpu = CpuFeatures::get();
        match isa {
            Isa::Portable => true,
            Isa::Avx512 => cpu.avx512f && cpu.avx512vnni,
            Isa::AvxVnni => cpu.avx2 && cpu.avxvnni,
        }
    }

    /// [`Self::matmul`] on a chosen path (tests compare the paths).
    ///
    /// # Panics
    /// If the shapes disagree, or `isa` is not supported here (see [`Self::supports`]).
    pub fn matmul_on(&self, isa: Isa, x: &[f32], m: usize, out: &mut [f32]) {
        assert!(
            Self::supports(isa),
            "{isa:?} int8 products are not available here"
        );
        assert_eq!(
            x.len(),
            m * self.cols,
            "input holds {} values, expected {m}x{}",
            x.len(),
            self.cols
        );
        let (activations, token_scales) = quantise_activations(x, m, self.cols, self.quads);
        let quads = self.quads;
        let tile = |row0: usize, rows: usize, panel: usize| -> [[f32; NR]; MR] {
            let a = &activations[row0 * quads..(row0 + rows) * quads];
            let w = &self.packed[panel * quads * NR..(panel + 1) * quads * NR];
            let sums = match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `supports` checked AVX-512F and AVX512-VNNI at run time.
                Isa::Avx512 => unsafe { x86::tile_avx512(a, rows, quads, w) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `supports` checked AVX2 and AVX-VNNI at run time.
                Isa::AvxVnni => unsafe { x86::tile_avxvnni(a, rows, quads, w) },
                _ => portable_tile(a, rows, quads, w),
            };
            let columns = panel * NR..(panel + 1) * NR;
            let (scales, offsets) = (&self.scales[columns.clone()], &self.offsets[columns]);
            let mut out = [[0f32; NR]; MR];
            for r in 0..rows {
                let token_scale = token_scales[row0 + r];
                for c in 0..NR {
                    let exact = sums[r][c].wrapping_sub(offsets[c]);
                    out[r][c] = exact as f32 * token_scale * scales[c];
                }
            }
            out
        };
        for_each_tile(m, self.rows, out, tile);
    }
}

/// Quantise `values` symmetrically into `target` (padded with zeros); returns the scale.
fn quantise_row(values: &[f32], target: &mut [i8]) -> f32 {
    let max = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    target.fill(0);
    if max == 0.0 || !max.is_finite() {
        return 0.0;
    }
    let scale = max / 127.0;
    let inverse = 127.0 / max;
    for (q, &v) in target.iter_mut().zip(values) {
        *q = round_even(v * inverse).clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// Nearest integer, ties to even, for `|v| < 2^22` (adding and removing `1.5 * 2^23`
/// leaves no fraction bits); plain arithmetic, so it vectorises on any x86-64.
#[inline]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

/// `x` `(m, cols)` quantised per row into offset bytes `q + 128`, four per u32, `(m,
/// quads)` (padding holds the offset of zero), and the scale of each row.
fn quantise_activations(x: &[f32], m: usize, cols: usize, quads: usize) -> (Vec<u32>, Vec<f32>) {
    let mut packed = vec![0x8080_8080u32; m * quads];
    let mut scales = vec![0f32; m];
    let mut row_bytes = vec![0i8; quads * QUAD];
    for row in 0..m {
        scales[row] = quantise_row(&x[row * cols..(row + 1) * cols], &mut row_bytes);
        let target = &mut packed[row * quads..(row + 1) * quads];
        for (slot, quad) in target.iter_mut().zip(row_bytes.chunks_exact(QUAD)) {
            *slot = u32::from_le_bytes([0, 1, 2, 3].map(|j| (quad[j] as u8) ^ 0x80));
        }
    }
    (packed, scales)
}

/// `Σ_k u[4k+j] q_w[4k+j]` for the tile, as `vpdpbusd` computes it.
fn portable_tile(a: &[u32], rows: usize, quads: usize, w: &[u32]) -> [[i32; NR]; MR] {
    let mut out = [[0i32; NR]; MR];
    for (r, out_row) in out.iter_mut().enumerate().take(rows) {
        for (k, &a_quad) in a[r * quads..(r + 1) * quads].iter().enumerate() {
            let a_bytes = a_quad.to_le_bytes();
            for (acc, &w_quad) in out_row.iter_mut().zip(&w[k * NR..(k + 1) * NR]) {
                let w_bytes = w_quad.to_le_bytes();
                let dot: i32 = (0..QUAD)
                    .map(|j| a_bytes[j] as i32 * w_bytes[j] as i8 as i32)
                    .sum();
                *acc = acc.wrapping_add(dot);
            }
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// An `MR x NR` tile of i32 sums: `rows` rows of offset activation quads `a`
    /// (`quads` per row) against one weight panel `w`.
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX512-VNNI; `a` holds `rows * quads` values and
    /// `w` holds `quads * NR`.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn tile_avx512(a: &[u32], rows: usize, quads: usize, w: &[u32]) -> [[i32; NR]; MR] {
        debug_assert!(a.len() >= rows * quads && w.len() >= quads * NR);
        let mut out = [[0i32; NR]; MR];
        match rows {
            8 => rows_avx512::<8>(a, quads, w, &mut out),
            7 => rows_avx512::<7>(a, quads, w, &mut out),
            6 => rows_avx512::<6>(a, quads, w, &mut out),
            5 => rows_avx512::<5>(a, quads, w, &mut out),
            4 => rows_avx512::<4>(a, quads, w, &mut out),
            3 => rows_avx512::<3>(a, quads, w, &mut out),
            2 => rows_avx512::<2>(a, quads, w, &mut out),
            _ => rows_avx512::<1>(a, quads, w, &mut out),
        }
        out
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn rows_avx512<const ROWS: usize>(
        a: &[u32],
        quads: usize,
        w: &[u32],
        out: &mut [[i32; NR]; MR],
    ) {
        let mut acc = [[_mm512_setzero_si512(); 2]; ROWS];
        let (a, w) = (a.as_ptr(), w.as_ptr());
        for k in 0..quads {
            // SAFETY: k < quads, so both 16-lane halves of quad k lie inside the panel.
            let w0 = _mm512_loadu_si512(w.add(k * NR).cast());
            let w1 = _mm512_loadu_si512(w.add(k * NR + 16).cast());
            for (r, acc_row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_epi32(*a.add(r * quads + k) as i32);
                acc_row[0] = _mm512_dpbusd_epi32(acc_row[0], av, w0);
                acc_row[1] = _mm512_dpbusd_epi32(acc_row[1], av, w1);
            }
        }
        for (acc_row, out_row) in acc.iter().zip(out.iter_mut()) {
            _mm512_storeu_si512(out_row.as_mut_ptr().cast(), acc_row[0]);
            _mm512_storeu_si512(out_row.as_mut_ptr().add(16).cast(), acc_row[1]);
        }
    }

    /// As [`tile_avx512`] with 256-bit AVX-VNNI (machines without AVX-512 VNNI): three
    /// rows at a time, 12 accumulators of the 16 registers.
    ///
    /// # Safety
    /// The CPU must have AVX2 and AVX-VNNI; sizes as for [`tile_avx512`].
    #[target_feature(enable = "avx2,avxvnni")]
    pub unsafe fn tile_avxvnni(a: &[u32], rows: usize, quads: usize, w: &[u32]) -> [[i32; NR]; MR] {
        debug_assert!(a.len() >= rows * quads && w.len() >= quads * NR);
        let mut out = [[0i32; NR]; MR];
        let mut row0 = 0;
        while row0 < rows {
            let a_rows = &a[row0 * quads..];
            let target = &mut out[row0..];
            match rows - row0 {
                1 => rows_avxvnni::<1>(a_rows, quads, w, target),
                2 => rows_avxvnni::<2>(a_rows, quads, w, target),
                _ => rows_avxvnni::<3>(a_rows, quads, w, target),
            }
            row0 += 3;
        }
        out
    }

    #[target_feature(enable = "avx2,avxvnni")]
    unsafe fn rows_avxvnni<const ROWS: usize>(
        a: &[u32],
        quads: usize,
        w: &[u32],
        out: &mut [[i32; NR]],
    ) {
        let mut acc = [[_mm256_setzero_si256(); 4]; ROWS];
        let (a, w) = (a.as_ptr(), w.as_ptr());
        for k in 0..quads {
            let base = w.add(k * NR);
            // SAFETY: k < quads, so the four 8-lane quarters of quad k lie in the panel.
            let wq = [
                _mm256_loadu_si256(base.cast()),
                _mm256_loadu_si256(base.add(8).cast()),
                _mm256_loadu_si256(base.add(16).cast()),
                _mm256_loadu_si256(base.add(24).cast()),
            ];
            for (r, acc_row) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_epi32(*a.add(r * quads + k) as i32);
                for (acc_quarter, &w_quarter) in acc_row.iter_mut().zip(&wq) {
                    *acc_quarter = _mm256_dpbusd_avx_epi32(*acc_quarter, av, w_quarter);
                }
            }
        }
        for (acc_row, out_row) in acc.iter().zip(out.iter_mut()) {
            for (q, acc_quarter) in acc_row.iter().enumerate() {
                _mm256_storeu_si256(out_row.as_mut_ptr().add(8 * q).cast(), *acc_quarter);
            }
        }
    }
}

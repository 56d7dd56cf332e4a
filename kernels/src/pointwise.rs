//! The per-token operations between a decoder layer's matrix products: RMS
//! normalisation, SiLU gating and bias addition, on plain row-major slices written into
//! buffers the caller keeps.
//!
//! Done with tensor operations, each of these allocated a fresh output per layer (whose
//! pages the kernel then zeroed), and SiLU called the library exponential per element;
//! together with the residual additions they were about a third of a reduced-precision
//! forward pass. Here each is one pass over its rows, in parallel over rows (so the
//! result never depends on the thread count), with the exponential of `exp.rs` so that
//! the loops compile to vector instructions.

use crate::attention::exp::{exp2_non_positive, Fused, MulAdd, Separate};
use crate::attention::SimdPath;
use rayon::prelude::*;

/// Rows handed to one parallel task at least (a few hundred microseconds of work).
const MIN_ROWS_PER_TASK: usize = 16;

/// Independent partial sums per row, so that the sum of squares vectorises.
const LANES: usize = 16;

/// `out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight` for every row `r` of `x`
/// (rows of `weight.len()` values).
///
/// # Panics
/// If `x` and `out` differ in length or are not whole rows.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let width = weight.len();
    assert!(
        width > 0 && x.len().is_multiple_of(width) && out.len() == x.len(),
        "rms_norm: {} inputs and {} outputs for rows of {width}",
        x.len(),
        out.len()
    );
    let path = SimdPath::best();
    out.par_chunks_mut(width)
        .zip(x.par_chunks(width))
        .with_min_len(MIN_ROWS_PER_TASK)
        .for_each(|(out, x)| match path {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `best` checked the features at run time.
            SimdPath::Avx512 => unsafe { rms_norm_row_avx512(x, weight, eps, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            SimdPath::Avx2 => unsafe { rms_norm_row_avx2(x, weight, eps, out) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: as above.
            SimdPath::Neon => unsafe { rms_norm_row_neon(x, weight, eps, out) },
            _ => rms_norm_row(x, weight, eps, out),
        });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn rms_norm_row_avx512(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_row(x, weight, eps, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rms_norm_row_avx2(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_row(x, weight, eps, out)
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn rms_norm_row_neon(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_row(x, weight, eps, out)
}

#[inline(always)]
fn rms_norm_row(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let mut sums = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for chunk in &mut chunks {
        for lane in 0..LANES {
            sums[lane] += chunk[lane] * chunk[lane];
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    let sum = sums.iter().sum::<f32>() + tail;
    let inverse = 1.0 / (sum / x.len() as f32 + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = v * inverse * w;
    }
}

/// `out[r][j] = silu(gate_up[r][j]) * gate_up[r][width + j]`: the gated activation of a
/// feed-forward block whose fused gate/up product puts each row's `width` gate values
/// before its `width` up values. `silu(g) = g / (1 + e^-g)`.
///
/// # Panics
/// If the lengths do not describe the same number of rows.
pub fn silu_gate(gate_up: &[f32], width: usize, out: &mut [f32]) {
    assert!(
        width > 0 && gate_up.len().is_multiple_of(2 * width) && out.len() * 2 == gate_up.len(),
        "silu_gate: {} gate/up values and {} outputs for rows of {width}",
        gate_up.len(),
        out.len()
    );
    let path = SimdPath::best();
    out.par_chunks_mut(width)
        .zip(gate_up.par_chunks(2 * width))
        .with_min_len(MIN_ROWS_PER_TASK)
        .for_each(|(out, row)| {
            let (gate, up) = row.split_at(width);
            match path {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `best` checked the features at run time.
                SimdPath::Avx512 => unsafe { silu_row_avx512(gate, up, out) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                SimdPath::Avx2 => unsafe { silu_row_avx2(gate, up, out) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: as above.
                SimdPath::Neon => unsafe { silu_row_neon(gate, up, out) },
                _ => silu_row::<Separate>(gate, up, out),
            }
        });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn silu_row_avx512(gate: &[f32], up: &[f32], out: &mut [f32]) {
    silu_row::<Fused>(gate, up, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_row_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    silu_row::<Fused>(gate, up, out)
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn silu_row_neon(gate: &[f32], up: &[f32], out: &mut [f32]) {
    silu_row::<Fused>(gate, up, out)
}

#[inline(always)]
fn silu_row<M: MulAdd>(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu::<M>(g) * u;
    }
}

/// `g * sigmoid(g)` with `e = e^-|g|` (never overflows): `sigmoid(g) = 1 / (1 + e)` for
/// `g >= 0` and `e / (1 + e)` below; selects, not branches, so that it vectorises.
#[inline(always)]
fn silu<M: MulAdd>(g: f32) -> f32 {
    let magnitude = if g < 0.0 { -g } else { g };
    let e = exp2_non_positive::<M>(-magnitude * std::f32::consts::LOG2_E);
    let numerator = if g < 0.0 { e } else { 1.0 };
    g * numerator / (1.0 + e)
}

/// `x[r] += bias` for every row `r` of `x` (rows of `bias.len()` values).
///
/// # Panics
/// If `x` is not whole rows.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    let width = bias.len();
    assert!(
        width > 0 && x.len().is_multiple_of(width),
        "add_bias: {} values for rows of {width}",
        x.len()
    );
    x.par_chunks_mut(width)
        .with_min_len(MIN_ROWS_PER_TASK)
        .for_each(|row| {
            for (v, &b) in row.iter_mut().zip(bias) {
                *v += b;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
            })
            .collect()
    }

    /// Against the f64 formula, on widths with and without a tail, 1 and 2 threads.
    #[test]
    fn rms_norm_matches_the_formula_for_any_thread_count() {
        for width in [1, 7, 64, 576, 901] {
            let rows = 37;
            let x = values(rows * width, width as u64);
            let weight = values(width, 99);
            let eps = 1e-5;
            let mut out = vec![0f32; x.len()];
            rms_norm(&x, &weight, eps, &mut out);
            for (r, row) in x.chunks(width).enumerate() {
                let mean: f64 =
                    row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / width as f64;
                let inverse = 1.0 / (mean + eps as f64).sqrt();
                for j in 0..width {
                    let want = row[j] as f64 * inverse * weight[j] as f64;
                    let got = out[r * width + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "width {width} row {r} col {j}: {got} vs {want}"
                    );
                }
            }
            let single = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap();
            let mut again = vec![0f32; x.len()];
            single.install(|| rms_norm(&x, &weight, eps, &mut again));
            assert_eq!(out, again, "width {width}: 1 and 2+ threads differ");
        }
    }

    #[test]
    fn silu_gate_matches_the_formula() {
        let width = 1536 + 5;
        let rows = 20;
        let mut gate_up = values(rows * 2 * width, 3);
        // Reach the tails: large positive and negative gates, and exact zero.
        gate_up[0] = 95.0;
        gate_up[1] = -95.0;
        gate_up[2] = 0.0;
        let mut out = vec![0f32; rows * width];
        silu_gate(&gate_up, width, &mut out);
        let mut portable = vec![0f32; rows * width];
        for (r, row) in gate_up.chunks(2 * width).enumerate() {
            silu_row::<Separate>(
                &row[..width],
                &row[width..],
                &mut portable[r * width..(r + 1) * width],
            );
            for j in 0..width {
                let (g, u) = (row[j] as f64, row[width + j] as f64);
                let want = g / (1.0 + (-g).exp()) * u;
                for got in [out[r * width + j], portable[r * width + j]] {
                    let got = got as f64;
                    assert!(
                        (got - want).abs() <= 2e-6 * (1.0 + want.abs()),
                        "row {r} col {j}: silu({g}) * {u} = {got}, want {want}"
                    );
                }
            }
        }
        let single = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let mut again = vec![0f32; out.len()];
        single.install(|| silu_gate(&gate_up, width, &mut again));
        assert_eq!(out, again, "1 and 2+ threads differ");
    }

    #[test]
    fn bias_is_added_to_every_row() {
        let mut x = vec![1.0f32; 3 * 4];
        add_bias(&mut x, &[0.5, -1.0, 2.0, 0.0]);
        assert_eq!(&x[4..8], &[1.5, 0.0, 3.0, 1.0]);
        assert_eq!(&x[8..12], &[1.5, 0.0, 3.0, 1.0]);
    }

    #[test]
    #[should_panic(expected = "rows of 4")]
    fn partial_rows_are_refused() {
        let mut out = vec![0f32; 6];
        rms_norm(&[1.0; 6], &[1.0; 4], 1e-5, &mut out);
    }
}

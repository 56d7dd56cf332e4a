//! The reduced-precision products against f64 references on ragged random shapes, every
//! instruction path against the portable one, and 1 thread against 2.
//!
//! Tolerances are error bounds, not fitted numbers:
//! - bf16 against the f64 product of the bf16-rounded operands: only f32 accumulation
//!   errs, at most `(k + 1) u Σ|a w|` with `u = 2^-24` (`k` rounded additions, each of
//!   relative error `u` on a partial sum bounded by `Σ|a w|`).
//! - bf16 against the f64 product of the original f32 operands: add the rounding of both
//!   operands to bf16 (8 significant bits: relative `2^-8` each, so `2^-7 + 2^-16` per
//!   product).
//! - int8 against `Σ_blocks s_x s_w Σ q_x q_w` in f64: integer sums are exact, so only
//!   each block's conversion to f32, product of scales and fused accumulation err:
//!   within `(4 + blocks) u Σ|terms|`.
//! - int8 against the original operands: rounding to the nearest step errs at most half a
//!   step per operand (steps per row and block of 32): `Σ (|a| s_w / 2 + |w_q| s_a / 2)`.
//!
//! bf16 on AMX tiles adds in another order, with its own bound: `amx.rs` tests it. Its
//! int8 tiles give the portable numbers and are tested here with the other paths.

mod common;

use common::{reference, rounded, with_threads, Random, U};
use nlg_judge_kernels::gemm::int8::BLOCK;
use nlg_judge_kernels::gemm::{bf16, Bf16Matrix, Int8Matrix, Isa};

/// (m, n, k): ragged everything, below and above one tile, odd and non-multiple-of-4
/// inner dimensions, and one real shape (SmolLM2's fused query/key/value projection).
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 33, 7),
    (3, 31, 2),
    (7, 65, 130),
    (9, 32, 64),
    (13, 100, 63),
    (65, 70, 33),
    (130, 96, 5),
    (37, 960, 576),
];

/// The bf16 paths this machine runs that add in the portable order (all but AMX tiles).
fn bf16_vector_paths() -> impl Iterator<Item = Isa> {
    Isa::ALL
        .into_iter()
        .filter(|&isa| isa != Isa::Amx && Bf16Matrix::supports(isa))
}

fn run_bf16(matrix: &Bf16Matrix, isa: Isa, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * matrix.rows()];
    matrix.matmul_on(isa, x, m, &mut out);
    out
}

fn run_int8(matrix: &Int8Matrix, isa: Isa, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * matrix.rows()];
    matrix.matmul_on(isa, x, m, &mut out);
    out
}

#[test]
fn bf16_matches_the_f64_product_of_rounded_and_original_operands() {
    let mut random = Random(0x5eed_1234_abcd_0001);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        let matrix = Bf16Matrix::from_f32(&w, n, k);
        assert_eq!(matrix.to_f32(), rounded(&w), "{m}x{n}x{k}: stored weight");
        let (exact, magnitude) = reference(&rounded(&x), &rounded(&w), m, n, k);
        let (original, original_magnitude) = reference(&x, &w, m, n, k);
        for isa in bf16_vector_paths() {
            let y = run_bf16(&matrix, isa, &x, m);
            for i in 0..m * n {
                let bound = (k + 1) as f64 * U * magnitude[i];
                let error = (y[i] as f64 - exact[i]).abs();
                assert!(error <= bound, "{m}x{n}x{k} [{i}]: {error} > {bound}");
                let bound = bound + (2f64.powi(-7) + 2f64.powi(-16)) * original_magnitude[i];
                let error = (y[i] as f64 - original[i]).abs();
                assert!(
                    error <= bound,
                    "{m}x{n}x{k} [{i}]: {error} > {bound} (f32 operands, {isa:?})"
                );
            }
        }
    }
}

/// Symmetric quantisation per row and block of [`BLOCK`] values, as the kernel does it:
/// the integer values and each value's step size.
fn quantise_blocks(values: &[f32], rows: usize, cols: usize) -> (Vec<f64>, Vec<f64>) {
    let mut integers = vec![0f64; rows * cols];
    let mut steps = vec![0f64; rows * cols];
    for i in 0..rows {
        for start in (0..cols).step_by(BLOCK) {
            let block = i * cols + start..i * cols + (start + BLOCK).min(cols);
            let max = values[block.clone()]
                .iter()
                .fold(0f32, |a, v| a.max(v.abs()));
            if max == 0.0 {
                continue;
            }
            for at in block {
                steps[at] = (max / 127.0) as f64;
                integers[at] = (values[at] * (127.0 / max)).round_ties_even() as f64;
            }
        }
    }
    (integers, steps)
}

#[test]
fn int8_matches_the_f64_product_of_quantised_and_original_operands() {
    let mut random = Random(0x5eed_1234_abcd_0002);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        let matrix = Int8Matrix::from_f32(&w, n, k);
        let (x_q, x_steps) = quantise_blocks(&x, m, k);
        let (w_q, w_steps) = quantise_blocks(&w, n, k);
        for isa in Isa::ALL
            .into_iter()
            .filter(|&isa| Int8Matrix::supports(isa))
        {
            let y = run_int8(&matrix, isa, &x, m);
            for i in 0..m {
                for j in 0..n {
                    let at = i * n + j;
                    let (mut exact, mut exact_magnitude) = (0f64, 0f64);
                    let (mut original, mut quantisation) = (0f64, 0f64);
                    for p in 0..k {
                        let (xi, wj) = (i * k + p, j * k + p);
                        let term = x_q[xi] * x_steps[xi] * w_q[wj] * w_steps[wj];
                        exact += term;
                        exact_magnitude += term.abs();
                        original += x[xi] as f64 * w[wj] as f64;
                        quantisation += (x[xi] as f64).abs() * w_steps[wj] / 2.0
                            + (w_q[wj] * w_steps[wj]).abs() * x_steps[xi] / 2.0;
                    }
                    // Per block: the f32 conversion, the product of the scales and the fused
                    // accumulation each round once; at most 4 u of each block's magnitude,
                    // plus the accumulation over blocks.
                    let blocks = k.div_ceil(BLOCK) as f64;
                    let bound = (4.0 + blocks) * U * exact_magnitude;
                    let error = (y[at] as f64 - exact).abs();
                    assert!(error <= bound, "{m}x{n}x{k} [{i},{j}]: {error} > {bound}");
                    let bound = bound + quantisation * (1.0 + 1e-9);
                    let error = (y[at] as f64 - original).abs();
                    assert!(
                        error <= bound,
                        "{m}x{n}x{k} [{i},{j}]: {error} > {bound} (f32, {isa:?})"
                    );
                }
            }
        }
    }
}

#[test]
fn every_instruction_path_gives_the_portable_numbers() {
    let mut random = Random(0x5eed_1234_abcd_0003);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        let bf16_matrix = Bf16Matrix::from_f32(&w, n, k);
        let portable = run_bf16(&bf16_matrix, Isa::Portable, &x, m);
        for isa in bf16_vector_paths() {
            let y = run_bf16(&bf16_matrix, isa, &x, m);
            assert_eq!(y, portable, "bf16 {isa:?} {m}x{n}x{k}");
        }
        let int8_matrix = Int8Matrix::from_f32(&w, n, k);
        let portable = run_int8(&int8_matrix, Isa::Portable, &x, m);
        for isa in Isa::ALL {
            if Int8Matrix::supports(isa) {
                let y = run_int8(&int8_matrix, isa, &x, m);
                assert_eq!(y, portable, "int8 {isa:?} {m}x{n}x{k}");
            }
        }
    }
}

#[test]
fn one_and_two_threads_give_identical_results() {
    let mut random = Random(0x5eed_1234_abcd_0004);
    // Enough rows and columns for many parallel tasks.
    let (m, n, k) = (200, 300, 96);
    let (x, w) = (random.matrix(m * k), random.matrix(n * k));
    let bf16_matrix = Bf16Matrix::from_f32(&w, n, k);
    let int8_matrix = Int8Matrix::from_f32(&w, n, k);
    let run = |threads| {
        with_threads(threads, || {
            let mut bf16_out = vec![0f32; m * n];
            bf16_matrix.matmul(&x, m, &mut bf16_out);
            let mut int8_out = vec![0f32; m * n];
            int8_matrix.matmul(&x, m, &mut int8_out);
            (bf16_out, int8_out)
        })
    };
    let one = run(1);
    let two = run(2);
    assert!(one.0.iter().all(|v| v.is_finite()) && one.1.iter().all(|v| v.is_finite()));
    assert_eq!(one.0, two.0, "bf16");
    assert_eq!(one.1, two.1, "int8");
    // Every other path too (the default one above is the best).
    for isa in Isa::ALL {
        if Bf16Matrix::supports(isa) {
            let on = |threads| with_threads(threads, || run_bf16(&bf16_matrix, isa, &x, m));
            assert_eq!(on(1), on(2), "bf16 {isa:?}");
        }
        if Int8Matrix::supports(isa) {
            let on = |threads| with_threads(threads, || run_int8(&int8_matrix, isa, &x, m));
            assert_eq!(on(1), on(2), "int8 {isa:?}");
        }
    }
}

/// The paths the products take on this CPU: the best one is supported, each family has
/// one path of its architecture at least, and `NLG_JUDGE_CPU` levels are obeyed.
#[test]
fn the_best_paths_are_the_widest_supported() {
    for (best, supports) in [
        (
            Bf16Matrix::best_isa(),
            Bf16Matrix::supports as fn(Isa) -> bool,
        ),
        (Int8Matrix::best_isa(), Int8Matrix::supports),
    ] {
        assert!(supports(best) && supports(Isa::Portable), "{best:?}");
        let widest = Isa::ALL.into_iter().find(|&isa| supports(isa));
        assert_eq!(widest, Some(best));
    }
    #[cfg(target_arch = "aarch64")]
    {
        let cpu = nlg_judge_kernels::cpu::CpuFeatures::get();
        let level = std::env::var(nlg_judge_kernels::cpu::ENV).unwrap_or_default();
        if level.is_empty() || level == "native" {
            assert!(cpu.neon, "{cpu:?}");
            assert_eq!(Bf16Matrix::best_isa(), Isa::Neon);
            let int8 = if cpu.dotprod { Isa::Dotprod } else { Isa::Neon };
            assert_eq!(Int8Matrix::best_isa(), int8);
        }
        assert!(!Bf16Matrix::supports(Isa::Avx2) && !Int8Matrix::supports(Isa::Avx512));
    }
}

#[test]
fn bf16_rounds_to_nearest_even_and_flushes_subnormals() {
    // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
    assert_eq!(bf16::round_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to even.
    assert_eq!(bf16::round_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
    assert_eq!(bf16::round_to_bf16(-2.5), 0xc020);
    assert_eq!(bf16::round_to_bf16(f32::from_bits(1)), 0);
    assert_eq!(bf16::round_to_bf16(-f32::from_bits(1)), 0x8000);
    assert!(bf16::widen(bf16::round_to_bf16(f32::NAN)).is_nan());
    assert_eq!(
        bf16::round_to_bf16(f32::MAX),
        0x7f80,
        "overflows to infinity"
    );
}

#[test]
fn zero_rows_and_zero_weights_give_zero() {
    let w = vec![0f32; 5 * 6];
    let x = vec![1f32; 2 * 6];
    let int8_matrix = Int8Matrix::from_f32(&w, 5, 6);
    assert_eq!(run_int8(&int8_matrix, Isa::Portable, &x, 2), vec![0.0; 10]);
    let zero_x = vec![0f32; 2 * 6];
    let w = vec![1f32; 5 * 6];
    let int8_matrix = Int8Matrix::from_f32(&w, 5, 6);
    assert_eq!(
        run_int8(&int8_matrix, Int8Matrix::best_isa(), &zero_x, 2),
        vec![0.0; 10]
    );
    let bf16_matrix = Bf16Matrix::from_f32(&w, 5, 6);
    let mut out: Vec<f32> = Vec::new();
    bf16_matrix.matmul(&[], 0, &mut out);
    assert!(out.is_empty());
}

/// `matmul_add` adds exactly the product `matmul` writes to what the output held (a
/// residual connection), for both kernels and on shapes with ragged tiles.
#[test]
fn adding_products_equals_product_plus_the_old_output() {
    let mut random = Random(0x5eed_0add);
    for &(m, n, k) in &[(9, 65, 130), (37, 960, 576)] {
        let x = random.matrix(m * k);
        let w = random.matrix(n * k);
        let residual = random.matrix(m * n);
        let bf16_matrix = Bf16Matrix::from_f32(&w, n, k);
        let int8_matrix = Int8Matrix::from_f32(&w, n, k);
        let products = [
            run_bf16(&bf16_matrix, Bf16Matrix::isa_for_rows(m), &x, m),
            run_int8(&int8_matrix, Int8Matrix::isa_for_rows(m), &x, m),
        ];
        let mut added = [residual.clone(), residual.clone()];
        bf16_matrix.matmul_add(&x, m, &mut added[0]);
        int8_matrix.matmul_add(&x, m, &mut added[1]);
        for (product, added) in products.iter().zip(&added) {
            for (i, ((p, a), r)) in product.iter().zip(added).zip(&residual).enumerate() {
                assert_eq!(*a, r + p, "({m}, {n}, {k}) element {i}");
            }
        }
    }
}

/// Split activations: the product is that of the bf16 weights with the activations to
/// 16 bits of mantissa (error against the f64 product of rounded weights and original
/// activations: f32 accumulation over 2k products, plus 2^-16 of each product for the
/// second part's rounding), far closer than one bf16 part; every path gives the portable
/// numbers bit for bit.
#[test]
fn split_activations_keep_sixteen_bits() {
    let mut random = Random(0x5eed_1234_abcd_0005);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        let split = Bf16Matrix::from_f32(&w, n, k).split_activations(true);
        assert!(split.splits_activations());
        let portable = run_bf16(&split, Isa::Portable, &x, m);
        for isa in bf16_vector_paths() {
            assert_eq!(
                run_bf16(&split, isa, &x, m),
                portable,
                "{m}x{n}x{k}: {isa:?} and portable split products differ"
            );
        }
        let (exact, magnitude) = reference(&x, &rounded(&w), m, n, k);
        let (_, original_magnitude) = reference(&x, &w, m, n, k);
        let single = run_bf16(&Bf16Matrix::from_f32(&w, n, k), Isa::Portable, &x, m);
        let (mut split_error, mut single_error) = (0f64, 0f64);
        for i in 0..m * n {
            let bound =
                (2 * k + 1) as f64 * U * magnitude[i] + 2f64.powi(-16) * original_magnitude[i];
            let error = (portable[i] as f64 - exact[i]).abs();
            assert!(error <= bound, "{m}x{n}x{k} [{i}]: {error} > {bound}");
            split_error += error;
            single_error += (single[i] as f64 - exact[i]).abs();
        }
        if k >= 64 {
            assert!(
                split_error * 50.0 < single_error,
                "{m}x{n}x{k}: split error {split_error} vs one part {single_error}"
            );
        }
    }
}

/// Operands whose products leave f32's normal range (tiny weights against tiny
/// activations, and huge against huge), with zeros, infinities and NaN: every path still
/// gives the portable numbers bit for bit (the AVX2 path sees the magnitudes and runs the
/// portable tiles for such calls).
#[test]
fn extreme_magnitudes_give_the_portable_numbers_on_every_path() {
    let mut random = Random(0x5eed_1234_abcd_0006);
    let (m, n, k) = (9, 40, 70);
    let cases: [(f32, f32); 4] = [(1e-20, 1e-20), (1e-30, 1e-12), (1e19, 1e20), (1.0, 1.0)];
    for (case, &(x_scale, w_scale)) in cases.iter().enumerate() {
        let mut x: Vec<f32> = random.matrix(m * k).iter().map(|v| v * x_scale).collect();
        let w: Vec<f32> = random.matrix(n * k).iter().map(|v| v * w_scale).collect();
        x[3] = 0.0;
        if case == 3 {
            x[5] = f32::INFINITY;
            x[k + 7] = f32::NAN;
        }
        for split in [false, true] {
            let matrix = Bf16Matrix::from_f32(&w, n, k).split_activations(split);
            let portable = run_bf16(&matrix, Isa::Portable, &x, m);
            for isa in bf16_vector_paths() {
                let y = run_bf16(&matrix, isa, &x, m);
                let same = y
                    .iter()
                    .zip(&portable)
                    .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                assert!(same, "case {case}, split {split}, {isa:?}");
            }
        }
    }
}

//! AMX tile products: the model of the instructions on hand-picked values, the tile driver
//! (packing, blocking, tails, threads) through the model against f64 and the vector
//! paths on odd shapes, and, on a CPU with AMX, the real tiles against the model. Where
//! the CPU or the OS has no tiles, those tests print a `skipped:` line naming why.
//!
//! Bounds (derived, not fitted), for bf16 tiles against the f64 product of the
//! bf16-rounded operands, `Σ|p|` the sum of the products' magnitudes and `u = 2^-24`:
//! every product of two bf16 is exact in f32 and reaches the result through at most
//! `d = min(16, pairs) + 1 + T` roundings (its place in a tile's even or odd chain of at
//! most 16 fused steps, the chains' sum, then one addition into `C` per step, `T` steps
//! of 16 pairs; twice the steps with split activations; additions of padding zeros are
//! exact), so the error is at most `γ(d) Σ|p|`, `γ(d) = d u / (1 - d u)`. The vector
//! paths add each product in turn: `γ(k + 1) Σ|p|`. So tiles and vector paths differ by
//! at most the sum of the two. No subnormal sums arise from these operands (|values| >=
//! 2^-24), so the flush to zero adds nothing. int8 tiles: exact integer sums and the
//! vector paths' f32 steps, so equal bit for bit.

mod common;

use common::{reference, rounded, with_threads, Random, U};
use nlg_judge_kernels::gemm::amx::model::{Fault, TileConfig, TileModel};
use nlg_judge_kernels::gemm::amx::{self, Unit, STEP_PAIRS};
use nlg_judge_kernels::gemm::{bf16, Bf16Matrix, Int8Matrix, Isa};
use nlg_judge_kernels::timing::{self, Part};

/// (m, n, k): one row, rows below, at and above one 32-row block and not multiples of
/// 16; columns below, at and above one 16-column tile and one 32-column panel; inner
/// dimensions odd, below one 32-value step, whole steps, and steps with a tail; one real
/// shape (SmolLM2's fused query/key/value projection).
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 33, 7),
    (3, 31, 2),
    (16, 16, 32),
    (17, 65, 130),
    (32, 32, 64),
    (13, 100, 63),
    (33, 47, 97),
    (65, 70, 33),
    (40, 96, 5),
    (37, 960, 576),
];

fn gamma(d: usize) -> f64 {
    let du = d as f64 * U;
    du / (1.0 - du)
}

/// Roundings a product passes through on the tiles (see the module documentation).
fn tile_depth(k: usize, split: bool) -> usize {
    let pairs = k.div_ceil(2);
    let steps = pairs.div_ceil(STEP_PAIRS) * if split { 2 } else { 1 };
    pairs.min(STEP_PAIRS) + 1 + steps
}

fn tiles_bf16(matrix: &Bf16Matrix, unit: Unit, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * matrix.rows()];
    matrix.matmul_tiles(unit, x, m, &mut out);
    out
}

fn tiles_int8(matrix: &Int8Matrix, unit: Unit, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * matrix.rows()];
    matrix.matmul_tiles(unit, x, m, &mut out);
    out
}

fn vector_bf16(matrix: &Bf16Matrix, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * matrix.rows()];
    matrix.matmul_on(Bf16Matrix::best_vector_isa(), x, m, &mut out);
    out
}

/// The bf16 of a value (which must be exact in bf16).
fn bf(value: f32) -> u16 {
    let half = bf16::round_to_bf16(value);
    assert_eq!(bf16::widen(half), value, "{value} is not a bf16");
    half
}

/// A model with one `C` tile (tmm0) of `rows` x `columns` f32, `A` (tmm1) of `rows` x
/// `pairs` pairs and `B` (tmm2) of `pairs` x `columns`.
fn small_model(rows: u8, columns: u16, pairs: u16) -> TileModel {
    let mut shapes = [(0, 0); 8];
    shapes[0] = (rows, 4 * columns);
    shapes[1] = (rows, 4 * pairs);
    shapes[2] = (pairs as u8, 4 * columns);
    let mut model = TileModel::new();
    model
        .ldtilecfg(&TileConfig::palette1(shapes))
        .expect("valid configuration");
    model
}

/// Load tile `t` of `model` from `dwords`, `per_row` dwords a row.
fn load(model: &mut TileModel, t: usize, dwords: &[u32], per_row: usize) {
    let bytes: Vec<u8> = dwords.iter().flat_map(|d| d.to_le_bytes()).collect();
    let config = *model.config().expect("configured");
    assert!(config.rows(t) * per_row <= dwords.len() && config.colsb(t) <= 4 * per_row);
    // SAFETY: the tile's rows, each `colsb` bytes, lie inside `bytes` (asserted).
    unsafe { model.tileloadd(t, bytes.as_ptr(), 4 * per_row) }.expect("load");
}

/// Dword `j` of row `r` of tile `t`.
fn dword(model: &TileModel, t: usize, r: usize, j: usize) -> u32 {
    let row = model.row(t, r);
    u32::from_le_bytes([row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]])
}

fn pair(even: u16, odd: u16) -> u32 {
    even as u32 | (odd as u32) << 16
}

/// One row, one column: `c + Σ_k a_k · b_k` over bf16 pairs, on the model.
fn dot(c: f32, a: &[(f32, f32)], b: &[(f32, f32)]) -> f32 {
    let mut model = small_model(1, 1, a.len() as u16);
    load(&mut model, 0, &[c.to_bits()], 1);
    let a: Vec<u32> = a.iter().map(|&(e, o)| pair(bf(e), bf(o))).collect();
    let b: Vec<u32> = b.iter().map(|&(e, o)| pair(bf(e), bf(o))).collect();
    load(&mut model, 1, &a, a.len());
    load(&mut model, 2, &b, 1);
    model.tdpbf16ps(0, 1, 2).expect("product");
    f32::from_bits(dword(&model, 0, 0, 0))
}

/// `tdpbf16ps` element by element as the model's documentation states it (the model's
/// own code computes whole rows of columns at once, on vector instructions).
fn tdpbf16ps_by_the_letter(
    c: &mut [u32],
    a: &[u32],
    b: &[u32],
    (rows, n, k): (usize, usize, usize),
) {
    let flush = |x: f32| {
        if x.is_subnormal() {
            f32::from_bits(x.to_bits() & 0x8000_0000)
        } else {
            x
        }
    };
    let half = |word: u32, odd: bool| {
        flush(f32::from_bits(if odd {
            word & 0xffff_0000
        } else {
            word << 16
        }))
    };
    for m in 0..rows {
        let mut sums = [0f32; 32];
        for kk in 0..k {
            let (a_even, a_odd) = (half(a[m * k + kk], false), half(a[m * k + kk], true));
            for j in 0..n {
                let word = b[kk * n + j];
                sums[2 * j] = flush(a_even.mul_add(half(word, false), sums[2 * j]));
                sums[2 * j + 1] = flush(a_odd.mul_add(half(word, true), sums[2 * j + 1]));
            }
        }
        for j in 0..n {
            let old = flush(f32::from_bits(c[m * n + j]));
            c[m * n + j] = flush(old + flush(sums[2 * j] + sums[2 * j + 1])).to_bits();
        }
    }
}

#[test]
fn tdpbf16ps_equals_its_element_by_element_definition() {
    // Random shapes (partial rows, columns and inner dwords included) and random bf16
    // with every kind of value: zeros of both signs, subnormals (read as zero), values
    // whose products or sums fall below the normal range (flushed), infinities, NaN;
    // `C` holding subnormals and NaN too.
    let mut state = 0x5eed_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // `tiny`: exponents around 63, whose products (about 2^-128) and sums leave f32's
    // normal range and are flushed.
    let word = |next: &mut dyn FnMut() -> u64, tiny: bool| -> u16 {
        let r = next();
        let sign = ((r >> 20) & 1) as u16;
        let exponent = match r % 64 {
            _ if tiny => 60 + (r >> 8) as u16 % 7,
            0..=3 => 0, // zero or subnormal
            4 => 255,   // infinity or NaN
            5..=9 => 1 + (r >> 8) as u16 % 8,
            _ => 100 + (r >> 8) as u16 % 56,
        };
        let mantissa = if r.is_multiple_of(23) {
            0
        } else {
            (r >> 32) as u16 & 0x7f
        };
        sign << 15 | exponent << 7 | mantissa
    };
    let (mut checked, mut flushed, mut nans) = (0, 0, 0);
    for case in 0..400 {
        let (rows, n, k) = if case % 4 == 0 {
            (16, 16, 16)
        } else {
            (
                1 + next() as usize % 16,
                1 + next() as usize % 16,
                1 + next() as usize % 16,
            )
        };
        let tiny = case % 4 == 1;
        let mut two = || pair(word(&mut next, tiny), word(&mut next, tiny));
        let a: Vec<u32> = (0..rows * k).map(|_| two()).collect();
        let b: Vec<u32> = (0..k * n).map(|_| two()).collect();
        let mut c: Vec<u32> = (0..rows * n)
            .map(|_| match next() % 32 {
                0..=3 => 0x0000_0001 | ((next() & 1) as u32) << 31,
                4 => f32::NAN.to_bits(),
                5..=7 if tiny => 0,
                _ => (next() as f32 / u64::MAX as f32 - 0.5).to_bits(),
            })
            .collect();
        let mut model = small_model(rows as u8, n as u16, k as u16);
        load(&mut model, 0, &c, n);
        load(&mut model, 1, &a, k);
        load(&mut model, 2, &b, n);
        model.tdpbf16ps(0, 1, 2).expect("product");
        tdpbf16ps_by_the_letter(&mut c, &a, &b, (rows, n, k));
        for m in 0..rows {
            for j in 0..n {
                let (got, want) = (dword(&model, 0, m, j), c[m * n + j]);
                let (g, w) = (f32::from_bits(got), f32::from_bits(want));
                if w.is_nan() {
                    // NaN payloads are whatever the arithmetic gives (module documentation).
                    assert!(g.is_nan(), "case {case}, row {m}, column {j}: {g} for NaN");
                    nans += 1;
                } else {
                    assert_eq!(
                        got, want,
                        "case {case}, row {m}, column {j}: {g:e} for {w:e}"
                    );
                }
                flushed += usize::from(w == 0.0);
                checked += 1;
            }
            // Bytes past the columns are zero.
            assert!(model.row(0, m)[4 * n..].iter().all(|&byte| byte == 0));
        }
    }
    // Enough of each kind compared (bit for bit where not NaN).
    assert!(
        checked - nans > 20_000 && flushed > 50 && nans > 100,
        "{checked} compared, {flushed} zero, {nans} NaN"
    );
}

#[test]
fn tdpbf16ps_sums_even_and_odd_chains_before_adding_to_c() {
    let big = 2f32.powi(24);
    // Even products 2^24 and 0, odd products 1 and 1. The SDM's order: even chain 2^24,
    // odd chain 2, then 2^24 + 2 (exact). Adding each product in turn (vdpbf16ps: odd then
    // even per pair; or the Intrinsics Guide's even then odd into C) loses both ones to
    // ties-to-even at 2^24 + 1 and gives 2^24.
    let a = [(1.0, 1.0), (1.0, 1.0)];
    let b = [(big, 1.0), (0.0, 1.0)];
    assert_eq!(dot(0.0, &a, &b), big + 2.0);
    let mut sequential = 0f32;
    for (&(ae, ao), &(be, bo)) in a.iter().zip(&b) {
        sequential = ao.mul_add(bo, sequential);
        sequential = ae.mul_add(be, sequential);
    }
    assert_eq!(sequential, big, "the orders differ on these values");
}

#[test]
fn tdpbf16ps_rounds_to_nearest_even() {
    let tiny = 2f32.powi(-24);
    // 1 + 2^-24 is halfway between 1 and 1 + 2^-23: to even, 1.
    assert_eq!(dot(1.0, &[(1.0, 0.0)], &[(tiny, 0.0)]), 1.0);
    // 1 + 2^-23 + 2^-24 is halfway between 1 + 2^-23 (odd) and 1 + 2^-22: up to even.
    let odd = 1.0 + 2f32.powi(-23);
    assert_eq!(
        dot(odd, &[(0.0, 1.0)], &[(0.0, tiny)]),
        1.0 + 2f32.powi(-22)
    );
    // Within a chain the fused step rounds once: 3 * (1 + 2^-7) = 3 + 3 * 2^-7 exactly.
    let wide = 1.0 + 2f32.powi(-7);
    assert_eq!(dot(0.0, &[(3.0, 0.0)], &[(wide, 0.0)]), 3.0 * wide);
}

#[test]
fn tdpbf16ps_flushes_subnormal_inputs_and_results() {
    let subnormal = f32::from_bits(1 << 16); // bf16 0x0001, 2^-133
    let huge = 2f32.powi(100);
    // DAZ: 2^-133 * 2^100 would be 2^-33; a subnormal input counts as zero.
    let mut model = small_model(1, 1, 1);
    load(&mut model, 0, &[0], 1);
    load(&mut model, 1, &[pair(0x0001, 0)], 1);
    load(&mut model, 2, &[pair(bf(huge), 0)], 1);
    model.tdpbf16ps(0, 1, 2).expect("product");
    assert_eq!(f32::from_bits(dword(&model, 0, 0, 0)), 0.0, "{subnormal:e}");
    // FTZ: 2^-70 * 2^-70 = 2^-140 is subnormal and becomes zero; 2^-70 * 2^-56 = 2^-126
    // is the smallest normal and stays.
    let small = 2f32.powi(-70);
    assert_eq!(dot(0.0, &[(small, 0.0)], &[(small, 0.0)]), 0.0);
    let smallest = f32::MIN_POSITIVE;
    assert_eq!(
        dot(0.0, &[(small, 0.0)], &[(2f32.powi(-56), 0.0)]),
        smallest
    );
    // A subnormal in C counts as zero too.
    assert_eq!(dot(f32::from_bits(5), &[(1.0, 0.0)], &[(1.0, 0.0)]), 1.0);
}

#[test]
fn tdpbf16ps_signed_zeros_follow_the_order() {
    // The chains start at +0, so a C of -0 plus products of zero ends +0 (-0 + +0 = +0
    // rounding to nearest), and -0 products leave a +0 chain at +0.
    let c = dot(-0.0, &[(-0.0, 0.0)], &[(1.0, 1.0)]);
    assert_eq!(c.to_bits(), 0.0f32.to_bits());
    // A negative product flushed to zero keeps its sign in its chain; the sum with the
    // other chain's +0 is +0.
    let small = 2f32.powi(-70);
    let c = dot(0.0, &[(small, 0.0)], &[(-small, 0.0)]);
    assert_eq!(c.to_bits(), 0.0f32.to_bits());
    // Nothing but -0 in C and a negative result: the sign is the result's.
    assert_eq!(dot(-0.0, &[(-1.0, 0.0)], &[(1.0, 0.0)]), -1.0);
}

#[test]
fn tdpbssd_multiplies_signed_bytes_and_wraps() {
    let mut model = small_model(1, 1, 1);
    let a = u32::from_le_bytes([-128i8 as u8, 127, -1i8 as u8, 5]);
    let b = u32::from_le_bytes([-128i8 as u8, -128i8 as u8, 7, 3]);
    // 16384 - 16256 - 7 + 15 = 136, added to i32::MAX with wrap-around.
    load(&mut model, 0, &[i32::MAX as u32], 1);
    load(&mut model, 1, &[a], 1);
    load(&mut model, 2, &[b], 1);
    model.tdpbssd(0, 1, 2).expect("product");
    assert_eq!(dword(&model, 0, 0, 0) as i32, i32::MIN + 135);
    // Two rows by two columns by two quads: each element its own sum.
    let mut model = small_model(2, 2, 2);
    let quad = |v: [i8; 4]| u32::from_le_bytes(v.map(|b| b as u8));
    load(&mut model, 0, &[0; 4], 2);
    load(
        &mut model,
        1,
        &[
            quad([1, 2, 3, 4]),
            quad([5, 6, 7, 8]),
            quad([-1; 4]),
            quad([2; 4]),
        ],
        2,
    );
    load(
        &mut model,
        2,
        &[
            quad([1; 4]),
            quad([0, 1, 0, 1]),
            quad([-2; 4]),
            quad([3, 0, 0, 0]),
        ],
        2,
    );
    model.tdpbssd(0, 1, 2).expect("product");
    let c: Vec<i32> = (0..4)
        .map(|i| dword(&model, 0, i / 2, i % 2) as i32)
        .collect();
    // Row 0: [1,2,3,4]·1 + [5,6,7,8]·(-2) = 10 - 52; [1,2,3,4]·[0,1,0,1] + [5..8]·[3,0,0,0].
    assert_eq!(c, [10 - 52, 6 + 15, -4 - 16, -2 + 6]);
}

#[test]
fn the_model_faults_where_the_hardware_would() {
    let mut model = TileModel::new();
    assert!(
        matches!(model.tilezero(0), Err(Fault::Invalid(_))),
        "unconfigured"
    );
    let mut shapes = [(16u8, 64u16); 8];
    for (t, bad) in [(0, (17, 64)), (1, (16, 68)), (2, (0, 64)), (3, (4, 0))] {
        shapes[t] = bad;
        let faulted = model.ldtilecfg(&TileConfig::palette1(shapes));
        assert!(
            matches!(faulted, Err(Fault::Config(_))),
            "{bad:?}: {faulted:?}"
        );
        shapes[t] = (16, 64);
    }
    let mut bytes = *TileConfig::palette1(shapes).bytes();
    bytes[0] = 2;
    assert!(
        model.ldtilecfg(&TileConfig::from_bytes(bytes)).is_err(),
        "palette 2"
    );
    bytes[0] = 1;
    bytes[40] = 1;
    assert!(
        model.ldtilecfg(&TileConfig::from_bytes(bytes)).is_err(),
        "reserved"
    );
    // Tiles 6 and 7 left unconfigured; A of 60 bytes (15 dwords) against B of 16 rows.
    shapes[1] = (16, 60);
    shapes[6] = (0, 0);
    shapes[7] = (0, 0);
    model
        .ldtilecfg(&TileConfig::palette1(shapes))
        .expect("valid");
    assert!(
        matches!(model.tdpbf16ps(0, 1, 2), Err(Fault::Invalid(_))),
        "A vs B"
    );
    assert!(model.tdpbf16ps(0, 2, 3).is_ok());
    assert!(model.tdpbf16ps(0, 0, 3).is_err(), "one tile twice");
    assert!(model.tdpbssd(0, 2, 6).is_err(), "unconfigured B");
    model.tilerelease();
    assert!(model.config().is_none() && model.tdpbssd(0, 2, 3).is_err());
}

/// The f64 product of the bf16 weights with the activations as the products see them
/// (one bf16 part, or two when `split`), and `Σ|p|` over the products actually formed
/// (each part separately).
fn bf16_reference(
    x: &[f32],
    w: &[f32],
    (m, n, k): (usize, usize, usize),
    split: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (hi, w) = (rounded(x), rounded(w));
    let lo: Vec<f32> = if split {
        let remainders: Vec<f32> = x.iter().zip(&hi).map(|(v, h)| v - h).collect();
        rounded(&remainders)
    } else {
        vec![0.0; x.len()]
    };
    let parts: Vec<f32> = hi.iter().zip(&lo).map(|(h, l)| h + l).collect();
    let (exact, _) = reference(&parts, &w, m, n, k);
    let (_, mut magnitude) = reference(&hi, &w, m, n, k);
    let (_, lo_magnitude) = reference(&lo, &w, m, n, k);
    magnitude
        .iter_mut()
        .zip(lo_magnitude)
        .for_each(|(a, b)| *a += b);
    (exact, magnitude)
}

#[test]
fn bf16_tiles_stay_within_the_bound_of_f64_and_of_the_vector_path() {
    let mut random = Random(0x5eed_a111_0001);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        for split in [false, true] {
            let matrix = Bf16Matrix::from_f32(&w, n, k).split_activations(split);
            let tiles = tiles_bf16(&matrix, Unit::Model, &x, m);
            let vector = vector_bf16(&matrix, &x, m);
            let (exact, magnitude) = bf16_reference(&x, &w, (m, n, k), split);
            let tile_bound = gamma(tile_depth(k, split));
            let vector_bound = gamma(if split { 2 * k + 1 } else { k + 1 });
            for i in 0..m * n {
                let error = (tiles[i] as f64 - exact[i]).abs();
                let bound = tile_bound * magnitude[i];
                assert!(
                    error <= bound,
                    "{m}x{n}x{k} split {split} [{i}]: {error} > {bound}"
                );
                let apart = (tiles[i] as f64 - vector[i] as f64).abs();
                let bound = (tile_bound + vector_bound) * magnitude[i];
                assert!(
                    apart <= bound,
                    "{m}x{n}x{k} split {split} [{i}]: {apart} > {bound}"
                );
            }
        }
    }
}

#[test]
fn int8_tiles_give_the_vector_paths_numbers() {
    let mut random = Random(0x5eed_a111_0002);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        let matrix = Int8Matrix::from_f32(&w, n, k);
        let tiles = tiles_int8(&matrix, Unit::Model, &x, m);
        let mut portable = vec![f32::NAN; m * n];
        matrix.matmul_on(Isa::Portable, &x, m, &mut portable);
        assert_eq!(tiles, portable, "{m}x{n}x{k}");
    }
}

#[test]
fn tile_results_do_not_depend_on_the_number_of_threads() {
    let mut random = Random(0x5eed_a111_0003);
    // Many blocks, a K tail (50 pairs: three whole steps and two pairs), ragged rows.
    let (m, n, k) = (200, 300, 100);
    let (x, w) = (random.matrix(m * k), random.matrix(n * k));
    let bf16_matrix = Bf16Matrix::from_f32(&w, n, k);
    let split = bf16_matrix.clone().split_activations(true);
    let int8_matrix = Int8Matrix::from_f32(&w, n, k);
    let mut units = vec![Unit::Model];
    if amx::status().bf16 && amx::status().int8 {
        units.push(Unit::Hardware);
    }
    for unit in units {
        let run = |threads| {
            with_threads(threads, || {
                (
                    tiles_bf16(&bf16_matrix, unit, &x, m),
                    tiles_bf16(&split, unit, &x, m),
                    tiles_int8(&int8_matrix, unit, &x, m),
                )
            })
        };
        let (one, three) = (run(1), run(3));
        assert!(one
            .0
            .iter()
            .chain(&one.1)
            .chain(&one.2)
            .all(|v| v.is_finite()));
        assert_eq!(one, three, "{unit:?}");
    }
}

/// Whether the real tiles run here; prints the skip line when not.
fn hardware_or_skip(what: &str, available: bool) -> bool {
    if !available {
        let reason = amx::status().reason.clone().unwrap_or_default();
        eprintln!("skipped: no AMX ({what}) on this CPU: {reason}");
    }
    available
}

#[test]
fn hardware_bf16_tiles_equal_the_model() {
    if !hardware_or_skip("amx_bf16", amx::status().bf16) {
        return;
    }
    let mut random = Random(0x5eed_a111_0004);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        for split in [false, true] {
            let matrix = Bf16Matrix::from_f32(&w, n, k).split_activations(split);
            let model = tiles_bf16(&matrix, Unit::Model, &x, m);
            let hardware = tiles_bf16(&matrix, Unit::Hardware, &x, m);
            let differing: Vec<(f32, f32)> = model
                .iter()
                .zip(&hardware)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .map(|(a, b)| (*a, *b))
                .collect();
            assert!(
                differing.is_empty(),
                "{m}x{n}x{k} split {split}: {} of {} values differ from the model (the \
                 hardware does not add in the SDM's order), e.g. model {:?} hardware {:?}",
                differing.len(),
                model.len(),
                differing.first().map(|d| d.0),
                differing.first().map(|d| d.1),
            );
        }
    }
}

/// Whatever order the hardware adds in, each product reaches the result through at most
/// one rounding per addition: `k` products, two chains' sum and one addition into `C`
/// per step (twice the steps when split), so `γ(k + 1 + 2 T)` (the model's order stays
/// within a tighter bound, `tile_depth`). A hardware that fails the test above but passes
/// this one adds in another order than the SDM's; one that fails this is wrong.
#[test]
fn hardware_bf16_tiles_stay_within_the_bound_of_any_order() {
    if !hardware_or_skip("amx_bf16", amx::status().bf16) {
        return;
    }
    let mut random = Random(0x5eed_a111_0007);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        for split in [false, true] {
            let matrix = Bf16Matrix::from_f32(&w, n, k).split_activations(split);
            let hardware = tiles_bf16(&matrix, Unit::Hardware, &x, m);
            let (exact, magnitude) = bf16_reference(&x, &w, (m, n, k), split);
            let steps = k.div_ceil(2).div_ceil(STEP_PAIRS) * if split { 2 } else { 1 };
            let parts = if split { 2 } else { 1 };
            let bound = gamma(parts * k + 1 + 2 * steps);
            for i in 0..m * n {
                let error = (hardware[i] as f64 - exact[i]).abs();
                assert!(
                    error <= bound * magnitude[i],
                    "{m}x{n}x{k} split {split} [{i}]: {error} > {}",
                    bound * magnitude[i]
                );
            }
        }
    }
}

#[test]
fn hardware_int8_tiles_equal_the_vector_paths() {
    if !hardware_or_skip("amx_int8", amx::status().int8) {
        return;
    }
    let mut random = Random(0x5eed_a111_0005);
    for &(m, n, k) in SHAPES {
        let (x, w) = (random.matrix(m * k), random.matrix(n * k));
        let matrix = Int8Matrix::from_f32(&w, n, k);
        let mut portable = vec![f32::NAN; m * n];
        matrix.matmul_on(Isa::Portable, &x, m, &mut portable);
        assert_eq!(
            tiles_int8(&matrix, Unit::Hardware, &x, m),
            portable,
            "{m}x{n}x{k}"
        );
    }
}

/// The default product takes the tiles from [`amx::MIN_ROWS`] rows where they run (or
/// their model, with `NLG_JUDGE_TILES=model`), the vector path below; adding into the
/// output adds exactly the product.
#[test]
fn matmul_takes_the_tiles_from_enough_rows() {
    let below = Bf16Matrix::isa_for_rows(amx::MIN_ROWS - 1);
    assert_ne!(below, Isa::Amx);
    assert_ne!(Int8Matrix::isa_for_rows(1), Isa::Amx);
    let at = Bf16Matrix::isa_for_rows(amx::MIN_ROWS);
    assert_eq!(
        at == Isa::Amx,
        amx::bf16_unit().is_some(),
        "{at:?} {:?}",
        amx::status()
    );
    assert_eq!(
        Int8Matrix::isa_for_rows(amx::MIN_ROWS) == Isa::Amx,
        amx::int8_unit().is_some()
    );
    let Some(unit) = amx::bf16_unit() else {
        hardware_or_skip("amx_bf16", false);
        return;
    };
    // Forced onto the model (measurements), or the hardware where it runs.
    assert_eq!(unit == Unit::Model, amx::model_forced());
    let mut random = Random(0x5eed_a111_0006);
    let (m, n, k) = (amx::MIN_ROWS + 5, 70, 96);
    let (x, w) = (random.matrix(m * k), random.matrix(n * k));
    let matrix = Bf16Matrix::from_f32(&w, n, k);
    let residual = random.matrix(m * n);
    let mut added = residual.clone();
    matrix.matmul_add(&x, m, &mut added);
    let product = tiles_bf16(&matrix, unit, &x, m);
    for ((a, r), p) in added.iter().zip(&residual).zip(&product) {
        assert_eq!(*a, r + p);
    }
}

#[test]
fn the_status_explains_missing_tiles() {
    let status = amx::status();
    assert_eq!(status, amx::status(), "asked once");
    let cpu = nlg_judge_kernels::cpu::CpuFeatures::get();
    if !cpu.amx_tile {
        assert!(!status.bf16 && !status.int8);
        let reason = status.reason.as_deref().unwrap_or("");
        assert!(
            reason.contains("AMX") || reason.contains("tile"),
            "{reason}"
        );
    }
    if status.bf16 {
        assert!(cpu.amx_tile && cpu.amx_bf16);
        amx::peak_rounds(1000);
    }
}

#[test]
fn a_recording_splits_the_tile_products_and_changes_no_bit() {
    let (m, n, k) = (70, 96, 130);
    let mut rng = Random(61);
    let (w, x) = (rng.matrix(n * k), rng.matrix(m * k));
    let bf16 = Bf16Matrix::from_f32(&w, n, k);
    let int8 = Int8Matrix::from_f32(&w, n, k);
    let plain = (
        tiles_bf16(&bf16, Unit::Model, &x, m),
        tiles_int8(&int8, Unit::Model, &x, m),
    );
    timing::start();
    let timed = (
        tiles_bf16(&bf16, Unit::Model, &x, m),
        tiles_int8(&int8, Unit::Model, &x, m),
    );
    let split = timing::finish();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&plain.0),
        bits(&timed.0),
        "timing changed the bf16 product"
    );
    assert_eq!(
        bits(&plain.1),
        bits(&timed.1),
        "timing changed the int8 product"
    );
    assert_eq!((split.product_calls, split.attention_calls), (2, 0));
    for part in [
        Part::ProductTiles,
        Part::ProductConversion,
        Part::ProductOther,
    ] {
        let ticks = split.ticks(part);
        // Positive and not a wrapped-around difference.
        assert!(ticks > 0 && ticks < u64::MAX / 2, "{part:?} {split:?}");
    }
    // The model's products are most of the work.
    assert!(split.share(Part::ProductTiles) > 0.5, "{split:?}");
    assert!(split.product_seconds > 0.0);
}

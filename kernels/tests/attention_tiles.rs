//! Segment attention on AMX tiles (`segment_attention_tiles`) against the f32 vector
//! kernel and against the plain formulation in f64, on the portable model of the tile
//! instructions (any machine) and, where the CPU and OS allow them, on the real tiles
//! (which must equal the model bit for bit; elsewhere a `skipped:` line names why).
//!
//! The bound against the f32 kernel, derived from the tile path's roundings (u = 2^-8,
//! bf16's unit roundoff). Scores are in base 2: `s_j = c q.k_j` with `c = scale log2 e`.
//! The tiles multiply `q~ = bf16(c q)` and `k~_j = bf16(k_j)`, so each product is off by
//! at most `(2u + u^2)` of its magnitude, and with the f32 sums (at most `(d + 2) 2^-24`
//! of the magnitudes for `d` dimensions) each score by at most
//! `D_j = 2.02 u T_j`, `T_j = c sum_d |q_d k_jd|`. Moving every score by at most
//! `D = max_j D_j` moves each softmax weight by a factor within `2^(+-2D)`. The
//! probabilities are then rounded to bf16 (factor `1 +- u` each) and normalised by the
//! sum of the rounded ones (factor `(1 +- u)^-1`), and the values rounded (`1 +- u`). So
//! with `w_j` the exact weights and `M_c = sum_j w_j |v_jc|` for output component `c`,
//! `|o~_c - o_c| <= (2^(2D) (1 + u)^2 / (1 - u) - 1) M_c`. Against the f32 kernel the
//! test adds its own error (`tests/attention.rs`: 2e-5 absolute) and 1e-5 M_c for the
//! f32 sums, the rescaling and the polynomial exponential.
//!
//! That bound is loose where scores are large (it allows for every rounding going the
//! same way), so a second check is tight: against the f64 formulation of the ROUNDED
//! inputs (`q~`, `k~`, `v~`), where only the probabilities' rounding (`2u / (1 - u)` of
//! `M~_c`), the f32 score sums (`2^(2E) - 1`, `E = max_j (d + 2) 2^-24 T~_j`) and the f32
//! output sums remain. A wrong key, a wrong mask or a packing slip moves outputs by far
//! more than either bound.

use nlg_judge_kernels::attention::tile_softmax::{
    update_rows_scalar, TileSoftmax, KEYS, KEY_PAIRS, QUERIES,
};
use nlg_judge_kernels::attention::{
    segment_attention_masked_on, segment_attention_tiles, segment_attention_tiles_on,
    tiles_available, AttentionDims, Masking, RowGroup, Segment, SimdPath,
};
use nlg_judge_kernels::gemm::amx::{self, Unit};
use nlg_judge_kernels::gemm::bf16::{round_to_bf16, widen};
use nlg_judge_kernels::timing::{self, Part};

/// bf16's unit roundoff.
const U: f64 = 1.0 / 256.0;
/// The f32 vector kernel's own tolerance against the f64 formulation.
const VECTOR_TOLERANCE: f64 = 2e-5;

/// `work` in a rayon pool of `threads` threads.
fn with_threads<T: Send>(threads: usize, work: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool")
        .install(work)
}

/// splitmix64, so failures reproduce.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn fill(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale)
            .collect()
    }
}

/// One group: indices into the case's shared segments, row lengths and the own
/// keys/values `(rows, kv_heads, stride, head_dim)`, NaN past each row's length.
struct Group {
    prefix: Vec<usize>,
    lengths: Vec<usize>,
    stride: usize,
    keys: Vec<f32>,
    values: Vec<f32>,
}

struct Case {
    name: &'static str,
    dims: AttentionDims,
    masking: Masking,
    scale: f32,
    /// Prefix segments `(keys, values, len)`, shared by the groups that list them.
    segments: Vec<(Vec<f32>, Vec<f32>, usize)>,
    groups: Vec<Group>,
    queries: Vec<f32>,
    tokens: usize,
}

/// A case of `groups` = (prefix segment indices, row lengths, extra stride) over
/// segments of `segment_lengths`.
fn case(
    name: &'static str,
    (heads, kv_heads, head_dim): (usize, usize, usize),
    masking: Masking,
    segment_lengths: &[usize],
    groups: &[(&[usize], &[usize], usize)],
    seed: u64,
) -> Case {
    let mut rng = Random(seed);
    let dims = AttentionDims {
        heads,
        kv_heads,
        head_dim,
    };
    let segments = segment_lengths
        .iter()
        .map(|&len| {
            let n = kv_heads * len * head_dim;
            (rng.fill(n, 2.0), rng.fill(n, 1.0), len)
        })
        .collect();
    let mut tokens = 0;
    let groups = groups
        .iter()
        .map(|&(prefix, lengths, extra)| {
            let stride = lengths.iter().copied().max().unwrap_or(1) + extra;
            let n = lengths.len() * kv_heads * stride * head_dim;
            let (mut keys, mut values) = (rng.fill(n, 2.0), rng.fill(n, 1.0));
            // Padding positions are never read: NaN there would show in every output.
            for (row, &length) in lengths.iter().enumerate() {
                for kv in 0..kv_heads {
                    let base = (row * kv_heads + kv) * stride;
                    let padding = (base + length) * head_dim..(base + stride) * head_dim;
                    keys[padding.clone()].fill(f32::NAN);
                    values[padding].fill(f32::NAN);
                }
            }
            tokens += lengths.iter().sum::<usize>();
            Group {
                prefix: prefix.to_vec(),
                lengths: lengths.to_vec(),
                stride,
                keys,
                values,
            }
        })
        .collect();
    Case {
        name,
        dims,
        masking,
        scale: 1.0 / (head_dim as f32).sqrt(),
        segments,
        groups,
        queries: rng.fill(tokens * heads * head_dim, 2.0),
        tokens,
    }
}

/// The cases: segments not a multiple of the key tile, one query, grouped-query heads,
/// narrow and odd head widths, rows longer than a tile (causal own keys across tiles),
/// padding, a segment shared by two groups, sliding windows and soft-caps.
fn cases() -> Vec<Case> {
    let none = Masking::default();
    vec![
        case(
            "grouped heads, three segments, ragged rows",
            (4, 2, 64),
            none,
            &[33, 0, 70],
            &[(&[0, 1, 2], &[1, 40, 5], 3)],
            1,
        ),
        case("one query", (1, 1, 64), none, &[31], &[(&[0], &[1], 0)], 2),
        case(
            "16-wide heads, a shared segment",
            (2, 1, 16),
            none,
            &[5, 47],
            &[(&[0], &[3, 64], 6), (&[0, 1], &[2], 0)],
            3,
        ),
        case(
            "80-wide heads (pairs and value blocks padded)",
            (6, 2, 80),
            none,
            &[100],
            &[(&[0], &[33, 2], 7)],
            4,
        ),
        case(
            "8 query heads per key head, 128 wide, no prefix",
            (8, 1, 128),
            none,
            &[],
            &[(&[], &[17, 1, 32], 0)],
            5,
        ),
        case(
            "sliding window and soft-cap",
            (4, 2, 64),
            Masking {
                window: Some(20),
                softcap: Some(30.0),
            },
            &[40, 25],
            &[(&[0, 1], &[50, 3], 1)],
            6,
        ),
    ]
}

/// Run `attend` on the case's kernel inputs.
fn with_inputs<T>(case: &Case, attend: impl FnOnce(&[RowGroup]) -> T) -> T {
    let segments: Vec<Segment> = case
        .segments
        .iter()
        .map(|(keys, values, len)| Segment {
            keys,
            values,
            len: *len,
            tiled_keys: None,
        })
        .collect();
    let prefixes: Vec<Vec<Segment>> = case
        .groups
        .iter()
        .map(|g| g.prefix.iter().map(|&s| segments[s]).collect())
        .collect();
    let mut first_token = 0;
    let groups: Vec<RowGroup> = case
        .groups
        .iter()
        .zip(&prefixes)
        .map(|(g, prefix)| {
            let group = RowGroup {
                prefix,
                lengths: &g.lengths,
                first_token,
                keys: &g.keys,
                values: &g.values,
                stride: g.stride,
            };
            first_token += g.lengths.iter().sum::<usize>();
            group
        })
        .collect();
    attend(&groups)
}

fn tiles(case: &Case, unit: Unit) -> Vec<f32> {
    tiles_on(SimdPath::best(), case, unit)
}

/// The tile kernel with its vector work on `path`.
fn tiles_on(path: SimdPath, case: &Case, unit: Unit) -> Vec<f32> {
    let width = case.dims.heads * case.dims.head_dim;
    let mut out = vec![f32::NAN; case.tokens * width];
    with_inputs(case, |groups| {
        segment_attention_tiles_on(
            path,
            unit,
            case.dims,
            case.scale,
            case.masking,
            groups,
            &case.queries,
            &mut out,
        )
    })
    .expect("the tile kernel takes the case");
    out
}

fn vector(case: &Case) -> Vec<f32> {
    let width = case.dims.heads * case.dims.head_dim;
    let mut out = vec![f32::NAN; case.tokens * width];
    with_inputs(case, |groups| {
        segment_attention_masked_on(
            SimdPath::best(),
            case.dims,
            case.scale,
            case.masking,
            groups,
            &case.queries,
            &mut out,
        )
    })
    .expect("the vector kernel takes the case");
    out
}

fn bf16(x: f32) -> f32 {
    widen(round_to_bf16(x))
}

/// Per output element: the bound against the f32 kernel, and the f64 formulation of
/// the rounded inputs with its (tight) bound; see the module documentation.
struct Expected {
    loose_bound: Vec<f64>,
    rounded: Vec<f64>,
    tight_bound: Vec<f64>,
}

/// Softmax weights (base 2) of `scores`, in f64.
fn weights(scores: &[f64]) -> Vec<f64> {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = scores.iter().map(|s| (s - max).exp2()).collect();
    let total: f64 = exp.iter().sum();
    exp.iter().map(|e| e / total).collect()
}

fn expected(case: &Case) -> Expected {
    let AttentionDims {
        heads,
        kv_heads,
        head_dim: d,
    } = case.dims;
    let width = heads * d;
    let c = case.scale * std::f32::consts::LOG2_E;
    let cap = case
        .masking
        .softcap
        .map(|cap| (cap * std::f32::consts::LOG2_E) as f64);
    let capped = |s: f64| cap.map_or(s, |cap| cap * (s / cap).tanh());
    let n = case.tokens * width;
    let (mut loose_bound, mut rounded, mut tight_bound) =
        (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let mut token = 0;
    for group in &case.groups {
        // The prefix's keys and values per key/value head, in position order.
        let prefix_len: usize = group.prefix.iter().map(|&s| case.segments[s].2).sum();
        for (row, &length) in group.lengths.iter().enumerate() {
            let row_start: usize = group.lengths[..row].iter().sum();
            for position in 0..length {
                for head in 0..heads {
                    let kv = head / (heads / kv_heads);
                    let mut keys: Vec<&[f32]> = Vec::new();
                    let mut values: Vec<&[f32]> = Vec::new();
                    let mut at = 0;
                    for &s in &group.prefix {
                        let (k, v, len) = &case.segments[s];
                        for j in 0..*len {
                            let lowest = case
                                .masking
                                .window
                                .map_or(0, |w| (prefix_len + position + 1).saturating_sub(w));
                            if at + j >= lowest {
                                let r = (kv * len + j) * d..(kv * len + j + 1) * d;
                                keys.push(&k[r.clone()]);
                                values.push(&v[r]);
                            }
                        }
                        at += len;
                    }
                    for j in 0..=position {
                        let lowest = case
                            .masking
                            .window
                            .map_or(0, |w| (position + 1).saturating_sub(w));
                        if j >= lowest {
                            let base = ((row * kv_heads + kv) * group.stride + j) * d;
                            keys.push(&group.keys[base..base + d]);
                            values.push(&group.values[base..base + d]);
                        }
                    }
                    let slot = (token + row_start + position) * width + head * d;
                    let q = &case.queries[slot..slot + d];
                    let q_rounded: Vec<f32> = q.iter().map(|&x| bf16(x * c)).collect();
                    let (mut exact, mut from_rounded) = (Vec::new(), Vec::new());
                    let (mut worst, mut worst_rounded) = (0f64, 0f64);
                    for k in &keys {
                        let (mut s, mut s_r, mut t, mut t_r) = (0f64, 0f64, 0f64, 0f64);
                        for ((&x, &xr), &y) in q.iter().zip(&q_rounded).zip(k.iter()) {
                            let p = x as f64 * c as f64 * y as f64;
                            let p_r = xr as f64 * bf16(y) as f64;
                            s += p;
                            t += p.abs();
                            s_r += p_r;
                            t_r += p_r.abs();
                        }
                        exact.push(capped(s));
                        from_rounded.push(capped(s_r));
                        worst = worst.max(2.02 * U * t);
                        worst_rounded = worst_rounded.max((d + 2) as f64 * (0.5f64).powi(24) * t_r);
                    }
                    let (w, w_r) = (weights(&exact), weights(&from_rounded));
                    let loose = (2.0 * worst).exp2() * (1.0 + U).powi(2) / (1.0 - U) - 1.0 + 1e-5;
                    let sums = (keys.len() as f64 / 16.0 + 64.0) * (0.5f64).powi(23) + 1e-6;
                    let tight = 2.0 * U / (1.0 - U) + (2.0 * worst_rounded).exp2() - 1.0 + sums;
                    for e in 0..d {
                        let (mut m, mut m_r, mut o_r) = (0f64, 0f64, 0f64);
                        for (j, v) in values.iter().enumerate() {
                            m += w[j] * (v[e] as f64).abs();
                            let v_r = bf16(v[e]) as f64;
                            m_r += w_r[j] * v_r.abs();
                            o_r += w_r[j] * v_r;
                        }
                        loose_bound[slot + e] = loose * m + VECTOR_TOLERANCE;
                        rounded[slot + e] = o_r;
                        tight_bound[slot + e] = tight * m_r + 1e-6;
                    }
                }
            }
        }
        token += group.lengths.iter().sum::<usize>();
    }
    Expected {
        loose_bound,
        rounded,
        tight_bound,
    }
}

#[test]
fn the_model_agrees_with_the_f32_kernel_and_the_rounded_formulation() {
    for case in cases() {
        let got = tiles(&case, Unit::Model);
        let reference = vector(&case);
        let want = expected(&case);
        let (mut loose_use, mut tight_use) = (0f64, 0f64);
        for (i, &x) in got.iter().enumerate() {
            assert!(x.is_finite(), "{}: output {i} is {x}", case.name);
            let loose = (x as f64 - reference[i] as f64).abs();
            assert!(
                loose <= want.loose_bound[i],
                "{}: output {i}: tiles {x}, f32 kernel {}, bound {}",
                case.name,
                reference[i],
                want.loose_bound[i]
            );
            let tight = (x as f64 - want.rounded[i]).abs();
            assert!(
                tight <= want.tight_bound[i],
                "{}: output {i}: tiles {x}, rounded formulation {}, f32 kernel {}, bound {}",
                case.name,
                want.rounded[i],
                reference[i],
                want.tight_bound[i]
            );
            loose_use = loose_use.max(loose / want.loose_bound[i]);
            tight_use = tight_use.max(tight / want.tight_bound[i]);
        }
        eprintln!(
            "{}: largest share of the bound used: {loose_use:.3} against the f32 kernel, \
             {tight_use:.3} against the rounded formulation",
            case.name
        );
    }
}

#[test]
fn results_do_not_depend_on_the_number_of_threads() {
    for case in cases() {
        let one = with_threads(1, || tiles(&case, Unit::Model));
        let three = with_threads(3, || tiles(&case, Unit::Model));
        let same = one
            .iter()
            .zip(&three)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{}: 1 and 3 threads differ", case.name);
    }
}

#[test]
fn later_own_keys_do_not_change_earlier_outputs() {
    // One row of 45 tokens (two key tiles): rewriting positions 20.. of its keys and
    // values leaves tokens 0..20 bit for bit (masked keys get probability exactly 0).
    let mut case = case(
        "causal",
        (2, 1, 32),
        Masking::default(),
        &[9],
        &[(&[0], &[45], 0)],
        7,
    );
    let before = tiles(&case, Unit::Model);
    let d = case.dims.head_dim;
    let mut rng = Random(8);
    let group = &mut case.groups[0];
    group.keys[20 * d..].copy_from_slice(&rng.fill(25 * d, 3.0));
    group.values[20 * d..].copy_from_slice(&rng.fill(25 * d, 3.0));
    let after = tiles(&case, Unit::Model);
    let width = case.dims.heads * d;
    let same = |range: std::ops::Range<usize>| {
        before[range.clone()]
            .iter()
            .zip(&after[range])
            .all(|(a, b)| a.to_bits() == b.to_bits())
    };
    assert!(same(0..20 * width), "an earlier token changed");
    assert!(
        !same(20 * width..45 * width),
        "the rewritten tokens did not change"
    );
}

#[test]
fn the_hardware_equals_the_model_or_the_skip_is_named() {
    if !tiles_available() {
        let reason = amx::status().reason.clone().unwrap_or_default();
        eprintln!("skipped: no AMX (amx_bf16) on this CPU: {reason}");
        // And the kernel refuses the hardware rather than running a tile instruction.
        let case = &cases()[1];
        let mut out = vec![0f32; case.tokens * case.dims.heads * case.dims.head_dim];
        let refused = with_inputs(case, |groups| {
            segment_attention_tiles(
                Unit::Hardware,
                case.dims,
                case.scale,
                case.masking,
                groups,
                &case.queries,
                &mut out,
            )
        });
        let message = refused.expect_err("no tiles here").to_string();
        assert!(message.contains(&reason), "{message}");
        return;
    }
    for case in cases() {
        let model = tiles(&case, Unit::Model);
        let hardware = tiles(&case, Unit::Hardware);
        let differ = model
            .iter()
            .zip(&hardware)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(differ, 0, "{}: {differ} outputs differ", case.name);
    }
}

/// Every vector path this CPU has (the tile kernel's packing and softmax run on them).
fn paths() -> Vec<SimdPath> {
    [
        SimdPath::Avx512,
        SimdPath::Avx2,
        SimdPath::Neon,
        SimdPath::Portable,
    ]
    .into_iter()
    .filter(|p| p.available())
    .collect()
}

#[test]
fn every_vector_path_gives_the_same_bits() {
    let paths = paths();
    eprintln!("paths: {paths:?}");
    for case in cases() {
        let portable = tiles_on(SimdPath::Portable, &case, Unit::Model);
        for &path in &paths {
            let got = tiles_on(path, &case, Unit::Model);
            let differ = got
                .iter()
                .zip(&portable)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ, 0,
                "{}: {path:?}: {differ} outputs differ",
                case.name
            );
        }
    }
    // Asked for a path this CPU lacks, the kernel refuses.
    let case = &cases()[1];
    for path in [SimdPath::Avx512, SimdPath::Avx2, SimdPath::Neon] {
        if !path.available() {
            let mut out = vec![0f32; case.tokens * case.dims.heads * case.dims.head_dim];
            let refused = with_inputs(case, |groups| {
                segment_attention_tiles_on(
                    path,
                    Unit::Model,
                    case.dims,
                    case.scale,
                    case.masking,
                    groups,
                    &case.queries,
                    &mut out,
                )
            });
            assert!(refused.is_err(), "{path:?} is not here");
        }
    }
}

/// The scalar update's inputs and state, row layout, for one tile of a chunk.
#[derive(Clone)]
struct RowsState {
    scores: [[f32; KEYS]; QUERIES],
    max: [f32; QUERIES],
    sum: [f32; QUERIES],
    first_visible: [u32; QUERIES],
    visible: [u32; QUERIES],
    acc: Vec<f32>,
    p: [[u32; KEY_PAIRS]; QUERIES],
}

#[test]
fn the_vector_update_equals_the_scalar_one_bit_for_bit() {
    // Chunks of 10 tiles in a row, the state carried from tile to tile: scores whose
    // range grows (the maxima move, outputs are rescaled) or shrinks (they stay), runs
    // of queries that leave others out, windows hiding a tile's first keys, short tiles,
    // queries with no key visible, soft-caps; at several head widths.
    let mut rng = Random(61);
    for case in 0..24u64 {
        let width = [64usize, 128, 96][case as usize % 3];
        let softcap = if case % 4 == 3 { 20.0 } else { 0.0 };
        let mut rows = RowsState {
            scores: [[0.0; KEYS]; QUERIES],
            max: [f32::NEG_INFINITY; QUERIES],
            sum: [0.0; QUERIES],
            first_visible: [0; QUERIES],
            visible: [0; QUERIES],
            acc: vec![0.0; QUERIES * width],
            p: [[0; KEY_PAIRS]; QUERIES],
        };
        let mut lanes: Vec<(SimdPath, TileSoftmax, Vec<f32>)> = paths()
            .into_iter()
            .map(|path| {
                let mut st = TileSoftmax::new();
                st.softcap = softcap;
                (path, st, vec![0.0; QUERIES * width])
            })
            .collect();
        let (mut moved, mut stayed) = (0, 0);
        for tile in 0..10u64 {
            let spread = if case % 2 == 0 {
                2.0 + 3.0 * tile as f32
            } else {
                40.0 / (1 + tile) as f32
            };
            let scores = rng.fill(QUERIES * KEYS, spread);
            let start = (rng.next() % 8) as usize;
            let end = (start + 1 + (rng.next() % 32) as usize).min(QUERIES);
            let len = if rng.next().is_multiple_of(3) {
                1 + (rng.next() % 32) as u32
            } else {
                32
            };
            for q in 0..QUERIES {
                let (first, visible) = if (start..end).contains(&q) {
                    let visible = (1 + rng.next() % 32).min(len as u64) as u32;
                    let first = if rng.next().is_multiple_of(4) {
                        (rng.next() % 34) as u32
                    } else {
                        0
                    };
                    (first.min(len), visible)
                } else {
                    (0, 0)
                };
                rows.first_visible[q] = first;
                rows.visible[q] = visible;
                for j in 0..KEYS {
                    rows.scores[q][j] = scores[q * KEYS + j];
                }
            }
            // Outputs the `P V` products would have added: the rescale must carry them.
            let added = rng.fill(QUERIES * width, 1.0);
            for (q, row) in rows.acc.chunks_exact_mut(width).enumerate() {
                for (d, x) in row.iter_mut().enumerate() {
                    *x += added[d * QUERIES + q];
                }
            }
            let before = rows.max;
            update_rows_scalar(
                &mut rows.scores,
                &mut rows.max,
                &mut rows.sum,
                &rows.first_visible,
                &rows.visible,
                softcap,
                &mut rows.acc,
                &mut rows.p,
                start..end,
            );
            moved += (0..QUERIES)
                .filter(|&q| rows.max[q] != before[q] && before[q].is_finite())
                .count();
            stayed += (start..end).filter(|&q| rows.max[q] == before[q]).count();
            for (path, st, acc) in &mut lanes {
                for (x, a) in acc.iter_mut().zip(&added) {
                    *x += a;
                }
                st.first_visible = rows.first_visible;
                st.visible = rows.visible;
                for j in 0..KEYS {
                    for q in 0..QUERIES {
                        st.scores[j][q] = scores[q * KEYS + j];
                    }
                }
                st.update(*path, acc);
                let same = |a: f32, b: f32| a.to_bits() == b.to_bits();
                for q in 0..QUERIES {
                    let at = format!("case {case}, tile {tile}, query {q}, {path:?}");
                    assert!(
                        same(st.max[q], rows.max[q]),
                        "{at}: max {} {}",
                        st.max[q],
                        rows.max[q]
                    );
                    assert!(
                        same(st.sum[q], rows.sum[q]),
                        "{at}: sum {} {}",
                        st.sum[q],
                        rows.sum[q]
                    );
                    for k in 0..KEY_PAIRS {
                        assert_eq!(st.p[k][q], rows.p[q][k], "{at}: pair {k}");
                    }
                    for d in 0..width {
                        let (v, s) = (acc[d * QUERIES + q], rows.acc[q * width + d]);
                        assert!(same(v, s), "{at}: output {d}: {v} {s}");
                    }
                }
            }
        }
        // The cases exercise both branches of the rescale.
        assert!(
            moved > 0 && stayed > 0,
            "case {case}: moved {moved}, stayed {stayed}"
        );
    }
}

#[test]
fn a_recording_splits_the_calls_into_their_parts_and_changes_no_bit() {
    for case in cases() {
        let plain = tiles(&case, Unit::Model);
        timing::start();
        let timed = tiles(&case, Unit::Model);
        let split = timing::finish();
        let same = plain
            .iter()
            .zip(&timed)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{}: timing changed the outputs", case.name);
        assert_eq!(
            (split.attention_calls, split.product_calls),
            (1, 0),
            "{}",
            case.name
        );
        for part in [
            Part::AttentionTiles,
            Part::AttentionSoftmax,
            Part::AttentionPacking,
            Part::AttentionOther,
        ] {
            assert!(split.ticks(part) > 0, "{}: {part:?} {split:?}", case.name);
        }
        let shares: f64 = [
            Part::AttentionTiles,
            Part::AttentionSoftmax,
            Part::AttentionPacking,
            Part::AttentionOther,
        ]
        .iter()
        .map(|&p| split.share(p))
        .sum();
        assert!((shares - 1.0).abs() < 1e-9 && split.attention_seconds > 0.0);
        assert_eq!(split.ticks(Part::ProductTiles), 0);
    }
    // Not recording: nothing is kept.
    tiles(&cases()[0], Unit::Model);
    assert_eq!(timing::finish(), timing::TileSplit::default());
}

#[test]
fn nan_scores_give_the_scalar_update_too() {
    // Query 3 sees only NaN scores on a short first tile: its maximum stays -inf, so even
    // its masked keys come out NaN (-inf - -inf), as in the scalar update; the others are
    // ordinary. NaN payloads are whatever the arithmetic gives: compared as NaN.
    let width = 64;
    let mut rng = Random(62);
    let scores = rng.fill(QUERIES * KEYS, 4.0);
    let mut rows_scores = [[0f32; KEYS]; QUERIES];
    for q in 0..QUERIES {
        for j in 0..KEYS {
            rows_scores[q][j] = if q == 3 {
                f32::NAN
            } else {
                scores[q * KEYS + j]
            };
        }
    }
    let visible = [9u32; QUERIES];
    let first_visible = [0u32; QUERIES];
    let (mut max, mut sum) = ([f32::NEG_INFINITY; QUERIES], [0f32; QUERIES]);
    let mut acc = rng.fill(QUERIES * width, 1.0);
    let mut p = [[0u32; KEY_PAIRS]; QUERIES];
    let mut st = TileSoftmax::new();
    st.visible = visible;
    let mut lanes_acc = vec![0f32; QUERIES * width];
    for (q, row) in acc.chunks_exact(width).enumerate() {
        for (d, &x) in row.iter().enumerate() {
            lanes_acc[d * QUERIES + q] = x;
        }
    }
    st.scores = std::array::from_fn(|j| std::array::from_fn(|q| rows_scores[q][j]));
    let mut scores = rows_scores;
    update_rows_scalar(
        &mut scores,
        &mut max,
        &mut sum,
        &first_visible,
        &visible,
        0.0,
        &mut acc,
        &mut p,
        0..QUERIES,
    );
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let same_pair = |a: u32, b: u32| {
        let halves = |w: u32| [widen(w as u16), widen((w >> 16) as u16)];
        halves(a).iter().zip(halves(b)).all(|(&x, y)| same(x, y))
    };
    for path in paths() {
        let (mut st, mut lanes_acc) = (st.clone(), lanes_acc.clone());
        st.update(path, &mut lanes_acc);
        for q in 0..QUERIES {
            assert!(
                same(st.max[q], max[q]) && same(st.sum[q], sum[q]),
                "{path:?} {q}"
            );
            for (k, &want) in p[q].iter().enumerate() {
                assert!(same_pair(st.p[k][q], want), "{path:?} query {q} pair {k}");
            }
            for d in 0..width {
                assert!(same(lanes_acc[d * QUERIES + q], acc[q * width + d]));
            }
        }
        // The NaN query's masked tail is NaN, the others' exactly 0.
        assert!(widen(st.p[KEY_PAIRS - 1][3] as u16).is_nan());
        assert_eq!(st.p[KEY_PAIRS - 1][4], 0);
    }
}

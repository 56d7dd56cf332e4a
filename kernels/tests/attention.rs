//! Segment attention against the plain formulation: for each query, softmax(scale q K^T) V
//! over the concatenated prefix keys and the row's own keys up to itself, computed in f64
//! with the keys and values actually concatenated. Random shapes cover prefix lengths
//! 0..1000 in several segments, ragged rows, grouped-query heads 1..8 and head widths
//! 64 and 128 (and 32, 80). Tolerance: 2e-5 absolute on outputs of magnitude ~1 (the
//! kernel accumulates in f32 and uses a polynomial exponential; the reference is f64).

use nlg_judge_kernels::attention::{
    segment_attention, segment_attention_on, split_rotate, tile_keys, tiled_keys_len,
    AttentionDims, RopeTables, RowGroup, Segment, SimdPath,
};

const TOLERANCE: f32 = 2e-5;

/// A small deterministic generator (splitmix64), so failures reproduce.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn fill(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

/// Owned data of one group.
struct GroupData {
    segments: Vec<(Vec<f32>, Vec<f32>, usize)>,
    lengths: Vec<usize>,
    stride: usize,
    keys: Vec<f32>,
    values: Vec<f32>,
}

struct Case {
    dims: AttentionDims,
    scale: f32,
    groups: Vec<GroupData>,
    queries: Vec<f32>,
    tokens: usize,
}

fn random_case(rng: &mut Random, dims: AttentionDims, prefix_len: usize, groups: usize) -> Case {
    let hd = dims.head_dim;
    let mut data = Vec::new();
    let mut tokens = 0;
    for _ in 0..groups {
        // The prefix in up to three segments of random lengths summing to prefix_len.
        let mut cuts = vec![0, prefix_len];
        for _ in 0..rng.below(3) {
            cuts.push(rng.below(prefix_len + 1));
        }
        cuts.sort_unstable();
        let segments = cuts
            .windows(2)
            .map(|w| {
                let len = w[1] - w[0];
                let n = dims.kv_heads * len * hd;
                (rng.fill(n, 2.0), rng.fill(n, 1.0), len)
            })
            .collect();
        let rows = 1 + rng.below(6);
        let lengths: Vec<usize> = (0..rows).map(|_| 1 + rng.below(70)).collect();
        let stride = lengths.iter().copied().max().unwrap() + rng.below(3);
        let n = rows * dims.kv_heads * stride * hd;
        tokens += lengths.iter().sum::<usize>();
        data.push(GroupData {
            segments,
            lengths,
            stride,
            keys: rng.fill(n, 2.0),
            values: rng.fill(n, 1.0),
        });
    }
    Case {
        dims,
        scale: 1.0 / (hd as f32).sqrt(),
        queries: rng.fill(tokens * dims.heads * hd, 2.0),
        groups: data,
        tokens,
    }
}

/// The kernel's output for a case, on `path` (or the best path).
fn run(case: &Case, path: Option<SimdPath>) -> Vec<f32> {
    run_keys(case, path, false)
}

/// [`run`], every prefix segment given with its keys tiled ([`tile_keys`]) when `tiled`.
fn run_keys(case: &Case, path: Option<SimdPath>, tiled: bool) -> Vec<f32> {
    let tiles: Vec<Vec<Option<Vec<f32>>>> = case
        .groups
        .iter()
        .map(|g| {
            g.segments
                .iter()
                .map(|(k, _, len)| tiled.then(|| tile_keys(case.dims, k, *len).unwrap()))
                .collect()
        })
        .collect();
    let segments: Vec<Vec<Segment>> = case
        .groups
        .iter()
        .zip(&tiles)
        .map(|(g, tiles)| {
            g.segments
                .iter()
                .zip(tiles)
                .map(|((k, v, len), tiled)| Segment {
                    keys: k,
                    values: v,
                    len: *len,
                    tiled_keys: tiled.as_deref(),
                })
                .collect()
        })
        .collect();
    let mut first_token = 0;
    let groups: Vec<RowGroup> = case
        .groups
        .iter()
        .zip(&segments)
        .map(|(g, s)| {
            let group = RowGroup {
                prefix: s,
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
    let mut out = vec![f32::NAN; case.tokens * case.dims.heads * case.dims.head_dim];
    match path {
        Some(path) => segment_attention_on(
            path,
            case.dims,
            case.scale,
            &groups,
            &case.queries,
            &mut out,
        ),
        None => segment_attention(case.dims, case.scale, &groups, &case.queries, &mut out),
    }
    .expect("valid inputs");
    out
}

/// The plain formulation, in f64.
fn reference(case: &Case) -> Vec<f32> {
    let d = case.dims;
    let (hd, g) = (d.head_dim, d.group_size());
    let width = d.heads * hd;
    let mut out = vec![0f32; case.tokens * width];
    let mut token = 0;
    for group in &case.groups {
        for (row, &length) in group.lengths.iter().enumerate() {
            for t in 0..length {
                for head in 0..d.heads {
                    let kv = head / g;
                    // Concatenate the keys/values this query sees.
                    let mut keys: Vec<&[f32]> = Vec::new();
                    let mut values: Vec<&[f32]> = Vec::new();
                    for (k, v, len) in &group.segments {
                        for p in 0..*len {
                            let at = (kv * len + p) * hd;
                            keys.push(&k[at..at + hd]);
                            values.push(&v[at..at + hd]);
                        }
                    }
                    for p in 0..=t {
                        let at = ((row * d.kv_heads + kv) * group.stride + p) * hd;
                        keys.push(&group.keys[at..at + hd]);
                        values.push(&group.values[at..at + hd]);
                    }
                    let q = &case.queries[token * width + head * hd..][..hd];
                    let scores: Vec<f64> = keys
                        .iter()
                        .map(|k| {
                            let dot: f64 =
                                q.iter().zip(*k).map(|(a, b)| *a as f64 * *b as f64).sum();
                            dot * case.scale as f64
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    // Key by key (each output still sums its terms in key order):
                    // dimension by dimension, the strided reads made this reference the
                    // slowest part of the tests, minutes under an emulator.
                    let mut x = vec![0f64; hd];
                    for (w, v) in weights.iter().zip(&values) {
                        for (x, &v) in x.iter_mut().zip(v.iter()) {
                            *x += w * v as f64;
                        }
                    }
                    for (i, x) in x.iter().enumerate() {
                        out[token * width + head * hd + i] = (x / total) as f32;
                    }
                }
                token += 1;
            }
        }
    }
    out
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Every path this CPU runs (x86-64's or aarch64's vector paths, and the portable one).
fn paths() -> Vec<SimdPath> {
    let all = [
        SimdPath::Portable,
        SimdPath::Avx2,
        SimdPath::Avx512,
        SimdPath::Neon,
    ];
    let paths: Vec<SimdPath> = all.into_iter().filter(|p| p.available()).collect();
    assert!(paths.contains(&SimdPath::best()), "{paths:?}");
    paths
}

#[test]
fn matches_the_plain_formulation_on_random_shapes() {
    let mut rng = Random(15);
    let shapes = [
        (9, 3, 64),
        (8, 8, 64),
        (8, 1, 128),
        (14, 2, 64),
        (16, 2, 128),
        (4, 4, 32),
        (6, 3, 80),
    ];
    let prefixes = [0, 1, 31, 33, 200, 517, 999];
    for (n, &(heads, kv_heads, head_dim)) in shapes.iter().enumerate() {
        let dims = AttentionDims {
            heads,
            kv_heads,
            head_dim,
        };
        for (m, &prefix) in prefixes.iter().enumerate() {
            // Keep the f64 reference affordable: long prefixes with the smaller shapes.
            if prefix > 300 && (n + m) % 2 == 1 {
                continue;
            }
            let groups = 1 + rng.below(3);
            let case = random_case(&mut rng, dims, prefix, groups);
            let want = reference(&case);
            for path in paths() {
                let got = run(&case, Some(path));
                let diff = max_abs_diff(&got, &want);
                assert!(
                    diff <= TOLERANCE,
                    "{dims:?}, prefix {prefix}, {path:?}: max |diff| {diff}"
                );
            }
        }
    }
}

#[test]
fn segments_given_with_tiled_keys_give_the_bits_of_their_plain_keys() {
    // The tiled keys are what the kernel makes of the plain ones, so no bit may change:
    // on segments many chunks read (transposed once per call otherwise) and few, of every
    // length around the tile's (0, 1, 31, 32, 33, ...), on every path.
    let mut rng = Random(61);
    for &(heads, kv_heads, head_dim) in &[(9, 3, 64), (8, 2, 128), (4, 4, 32), (6, 3, 80)] {
        let dims = AttentionDims {
            heads,
            kv_heads,
            head_dim,
        };
        for prefix in [0, 1, 31, 32, 33, 95, 300] {
            let groups = 1 + rng.below(3);
            let case = random_case(&mut rng, dims, prefix, groups);
            for path in paths() {
                let plain = run_keys(&case, Some(path), false);
                let tiled = run_keys(&case, Some(path), true);
                assert!(
                    plain
                        .iter()
                        .zip(&tiled)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{dims:?}, prefix {prefix}, {path:?}: tiled keys changed the output"
                );
            }
        }
    }
}

#[test]
fn tiled_keys_of_the_wrong_size_are_refused() {
    let dims = AttentionDims {
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
    };
    let len = 40;
    let keys = vec![0.5f32; dims.kv_heads * len * dims.head_dim];
    assert!(tile_keys(dims, &keys[1..], len).is_err());
    let tiled = tile_keys(dims, &keys, len).unwrap();
    assert_eq!(tiled.len(), tiled_keys_len(dims, len));
    let short = &tiled[..tiled.len() - 1];
    let own = vec![0.25f32; dims.kv_heads * dims.head_dim];
    let segment = [Segment {
        keys: &keys,
        values: &keys,
        len,
        tiled_keys: Some(short),
    }];
    let group = RowGroup {
        prefix: &segment,
        lengths: &[1],
        first_token: 0,
        keys: &own,
        values: &own,
        stride: 1,
    };
    let queries = vec![0.1f32; dims.heads * dims.head_dim];
    let mut out = vec![0f32; queries.len()];
    let err = segment_attention(dims, 0.2, &[group], &queries, &mut out).unwrap_err();
    assert!(err.to_string().contains("tiled key floats"), "{err}");
}

#[test]
fn one_and_two_threads_give_identical_results() {
    let mut rng = Random(7);
    let dims = AttentionDims {
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
    };
    let case = random_case(&mut rng, dims, 700, 3);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for path in paths() {
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| run(&case, Some(path)))
        };
        let one = on(1);
        let two = on(2);
        assert_eq!(bits(&one), bits(&two), "{path:?}");
        assert!(one.iter().all(|x| x.is_finite()), "{path:?}");
        if path == SimdPath::best() {
            assert_eq!(bits(&run(&case, None)), bits(&one), "the default path");
        }
    }
}

/// The fused-multiply-add paths (AVX-512 with 4-query score blocks and whole-width value
/// blocks, AVX2 and NEON with 2-query score blocks, and value blocks of 4 queries one
/// lane array at a time from 128-wide heads up, to stay in their registers) sum every score and output in the same
/// order: where a CPU has two of them, they give the same bits.
#[test]
fn blocking_does_not_change_the_bits_of_the_fused_paths() {
    let mut rng = Random(21);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let fused: Vec<SimdPath> = paths()
        .into_iter()
        .filter(|&p| p != SimdPath::Portable)
        .collect();
    for (heads, kv_heads, head_dim) in [(9, 3, 64), (4, 4, 32), (8, 2, 128), (6, 3, 16)] {
        let dims = AttentionDims {
            heads,
            kv_heads,
            head_dim,
        };
        let case = random_case(&mut rng, dims, 77, 2);
        let first = fused.first().map(|&p| bits(&run(&case, Some(p))));
        for &path in fused.iter().skip(1) {
            assert_eq!(
                first.as_ref(),
                Some(&bits(&run(&case, Some(path)))),
                "{dims:?}: {path:?} vs {:?}",
                fused[0]
            );
        }
    }
}

#[test]
fn bad_shapes_are_refused_with_a_reason() {
    let dims = AttentionDims {
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
    };
    let lengths = [3];
    let keys = vec![0f32; 2 * 64 * 2]; // stride 2 < row length 3
    let group = RowGroup {
        prefix: &[],
        lengths: &lengths,
        first_token: 0,
        keys: &keys,
        values: &keys,
        stride: 2,
    };
    let queries = vec![0f32; 3 * 4 * 64];
    let mut out = queries.clone();
    let err = segment_attention(dims, 0.1, &[group], &queries, &mut out).unwrap_err();
    assert!(err.to_string().contains("row lengths"), "{err}");
    let odd = AttentionDims {
        heads: 4,
        kv_heads: 3,
        head_dim: 64,
    };
    assert!(!odd.supported());
}

/// Rotation and regrouping against a direct per-element formula, for full and partial
/// rotation (the first 4 or 6 of 8 dimensions rotated, the rest passed through).
#[test]
fn split_rotate_places_and_rotates_every_head() {
    let mut rng = Random(3);
    for (interleaved, rotary_dim) in [(false, 8), (true, 8), (false, 4), (false, 6), (true, 4)] {
        let dims = AttentionDims {
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
        };
        let (hd, half) = (8, rotary_dim / 2);
        let positions = 20;
        let cos = rng.fill(positions * half, 1.0);
        let sin = rng.fill(positions * half, 1.0);
        let rope = RopeTables {
            cos: &cos,
            sin: &sin,
            rotary_dim,
            interleaved,
        };
        let lengths = [3, 5];
        let (stride, first) = (6, 7);
        let width = (4 + 2 * 2) * hd;
        let projected = rng.fill(8 * width, 1.0);
        let mut q = vec![f32::NAN; 8 * 4 * hd];
        let mut k = vec![f32::NAN; 2 * 2 * stride * hd];
        let mut v = k.clone();
        split_rotate(
            dims, rope, first, &lengths, stride, &projected, &mut q, &mut k, &mut v,
        )
        .unwrap();
        let rotated = |x: &[f32], pos: usize, i: usize| -> f32 {
            if i >= rotary_dim {
                return x[i];
            }
            let (c, s) = (cos[pos * half + i % half], sin[pos * half + i % half]);
            if interleaved {
                let p = i / 2;
                let (c, s) = (cos[pos * half + p], sin[pos * half + p]);
                let (a, b) = (x[2 * p], x[2 * p + 1]);
                if i.is_multiple_of(2) {
                    a * c - b * s
                } else {
                    a * s + b * c
                }
            } else if i < half {
                x[i] * c - x[i + half] * s
            } else {
                x[i] * c + x[i - half] * s
            }
        };
        let mut token = 0;
        for (row, &length) in lengths.iter().enumerate() {
            for t in 0..stride {
                for h in 0..2 {
                    let at = ((row * 2 + h) * stride + t) * hd;
                    for i in 0..hd {
                        let (want_k, want_v) = if t < length {
                            let src = &projected[(token + t) * width..];
                            let kx = &src[4 * hd + h * hd..][..hd];
                            (rotated(kx, first + t, i), src[6 * hd + h * hd + i])
                        } else {
                            (0.0, 0.0)
                        };
                        assert_eq!(k[at + i], want_k);
                        assert_eq!(v[at + i], want_v);
                    }
                }
                if t < length {
                    for h in 0..4 {
                        let src = &projected[(token + t) * width + h * hd..][..hd];
                        for i in 0..hd {
                            assert_eq!(
                                q[(token + t) * 4 * hd + h * hd + i],
                                rotated(src, first + t, i)
                            );
                        }
                    }
                }
            }
            token += length;
        }
    }
}

/// Decoding rows: many groups of one row of a few tokens, each after a first prefix
/// segment they all share (one copy in memory, as the trie's article is) and segments of
/// their own. The kernel bundles such groups, reading the shared segment's tiles once for
/// all their queries; every output must equal the plain formulation, and bit for bit the
/// output of the same group attended alone, in a call of its own (where nothing bundles).
#[test]
fn groups_sharing_their_first_segment_give_the_bits_each_gives_alone() {
    let mut rng = Random(58);
    for (heads, kv_heads, head_dim, groups, shared_len) in
        [(9, 3, 64, 16, 522), (8, 2, 128, 11, 70), (4, 4, 32, 40, 33)]
    {
        let dims = AttentionDims {
            heads,
            kv_heads,
            head_dim,
        };
        let hd = head_dim;
        let n = kv_heads * shared_len * hd;
        let shared = (rng.fill(n, 2.0), rng.fill(n, 1.0), shared_len);
        let max_tokens = (32 / dims.group_size()).clamp(1, 3);
        let mut data = Vec::new();
        let mut tokens = 0;
        for _ in 0..groups {
            let own_len = rng.below(90);
            let m = kv_heads * own_len * hd;
            let length = 1 + rng.below(max_tokens);
            let stride = length + rng.below(2);
            tokens += length;
            data.push(GroupData {
                segments: vec![
                    shared.clone(),
                    (rng.fill(m, 2.0), rng.fill(m, 1.0), own_len),
                ],
                lengths: vec![length],
                stride,
                keys: rng.fill(kv_heads * stride * hd, 2.0),
                values: rng.fill(kv_heads * stride * hd, 1.0),
            });
        }
        let case = Case {
            dims,
            scale: 1.0 / (hd as f32).sqrt(),
            queries: rng.fill(tokens * heads * hd, 2.0),
            groups: data,
            tokens,
        };
        let want = reference(&case);
        let width = heads * hd;
        // The decoder keeps its segments' keys tiled: bundles read those too.
        let shared_tiled = tile_keys(dims, &shared.0, shared.2).unwrap();
        let own_tiled: Vec<Vec<f32>> = case
            .groups
            .iter()
            .map(|g| tile_keys(dims, &g.segments[1].0, g.segments[1].2).unwrap())
            .collect();
        for (path, tiled) in paths().into_iter().flat_map(|p| [(p, false), (p, true)]) {
            // Every group's first segment is the one shared copy.
            let segments: Vec<Vec<Segment>> = case
                .groups
                .iter()
                .zip(&own_tiled)
                .map(|(g, own_tiled)| {
                    let own = &g.segments[1];
                    vec![
                        Segment {
                            keys: &shared.0,
                            values: &shared.1,
                            len: shared.2,
                            tiled_keys: tiled.then_some(&shared_tiled[..]),
                        },
                        Segment {
                            keys: &own.0,
                            values: &own.1,
                            len: own.2,
                            tiled_keys: tiled.then_some(&own_tiled[..]),
                        },
                    ]
                })
                .collect();
            let mut first_token = 0;
            let row_groups: Vec<RowGroup> = case
                .groups
                .iter()
                .zip(&segments)
                .map(|(g, s)| {
                    let group = RowGroup {
                        prefix: s,
                        lengths: &g.lengths,
                        first_token,
                        keys: &g.keys,
                        values: &g.values,
                        stride: g.stride,
                    };
                    first_token += g.lengths[0];
                    group
                })
                .collect();
            let mut together = vec![f32::NAN; tokens * width];
            segment_attention_on(
                path,
                dims,
                case.scale,
                &row_groups,
                &case.queries,
                &mut together,
            )
            .unwrap();
            let diff = max_abs_diff(&together, &want);
            assert!(diff <= TOLERANCE, "{dims:?}, {path:?}: max |diff| {diff}");
            for group in &row_groups {
                let span =
                    group.first_token * width..(group.first_token + group.lengths[0]) * width;
                let alone_group = RowGroup {
                    first_token: 0,
                    ..*group
                };
                let mut alone = vec![f32::NAN; span.len()];
                segment_attention_on(
                    path,
                    dims,
                    case.scale,
                    &[alone_group],
                    &case.queries[span.clone()],
                    &mut alone,
                )
                .unwrap();
                assert!(
                    alone
                        .iter()
                        .zip(&together[span])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{dims:?}, {path:?}: a group bundled with others differs from itself alone"
                );
            }
        }
    }
}

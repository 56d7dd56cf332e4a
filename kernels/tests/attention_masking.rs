//! Segment attention with sliding windows and soft-capped scores against the plain
//! formulation in f64: for each query at position `p`, softmax over the keys at positions
//! `p - window < k <= p` of `c * tanh(scale q.k / c)`, times the values. Prefixes in
//! several segments and rows longer than the window make windows cross segment, tile and
//! prefix/own boundaries. Tolerance 2e-5 absolute, as for the unmasked kernel.

use nlg_judge_kernels::attention::{
    segment_attention_masked, segment_attention_masked_on, AttentionDims, Masking, RowGroup,
    Segment, SimdPath,
};

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
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn fill(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale)
            .collect()
    }
}

#[test]
fn windows_and_soft_caps_match_the_plain_formulation() {
    let mut rng = Random(25);
    for (case, (heads, kv_heads, head_dim)) in [(4, 2, 64), (2, 1, 16), (8, 8, 32), (3, 1, 128)]
        .into_iter()
        .enumerate()
    {
        let dims = AttentionDims {
            heads,
            kv_heads,
            head_dim,
        };
        for masking in [
            Masking {
                window: Some(1 + rng.below(40)),
                softcap: None,
            },
            Masking {
                window: None,
                softcap: Some(0.5 + rng.below(30) as f32 / 10.0),
            },
            Masking {
                window: Some(1 + rng.below(90)),
                softcap: Some(1.0),
            },
        ] {
            check(&mut rng, dims, masking, case);
        }
    }
}

fn check(rng: &mut Random, dims: AttentionDims, masking: Masking, case: usize) {
    let hd = dims.head_dim;
    let prefix_lens: Vec<usize> = (0..rng.below(3)).map(|_| rng.below(70)).collect();
    let segments: Vec<(Vec<f32>, Vec<f32>, usize)> = prefix_lens
        .iter()
        .map(|&len| {
            let n = dims.kv_heads * len * hd;
            (rng.fill(n, 2.0), rng.fill(n, 1.0), len)
        })
        .collect();
    let prefix_len: usize = prefix_lens.iter().sum();
    let lengths: Vec<usize> = (0..1 + rng.below(4)).map(|_| 1 + rng.below(80)).collect();
    let stride = lengths.iter().copied().max().unwrap_or(1);
    let own = lengths.len() * dims.kv_heads * stride * hd;
    let (keys, values) = (rng.fill(own, 2.0), rng.fill(own, 1.0));
    let tokens: usize = lengths.iter().sum();
    let width = dims.heads * hd;
    let queries = rng.fill(tokens * width, 2.0);
    let scale = 1.0 / (hd as f32).sqrt();

    let prefix: Vec<Segment> = segments
        .iter()
        .map(|(k, v, len)| Segment {
            keys: k,
            values: v,
            len: *len,
            tiled_keys: None,
        })
        .collect();
    let group = RowGroup {
        prefix: &prefix,
        lengths: &lengths,
        first_token: 0,
        keys: &keys,
        values: &values,
        stride,
    };
    let mut paths = vec![None, Some(SimdPath::Portable)];
    if SimdPath::best() != SimdPath::Portable {
        paths.push(Some(SimdPath::best()));
    }
    for path in paths {
        let mut out = vec![f32::NAN; tokens * width];
        match path {
            None => segment_attention_masked(dims, scale, masking, &[group], &queries, &mut out),
            Some(path) => segment_attention_masked_on(
                path,
                dims,
                scale,
                masking,
                &[group],
                &queries,
                &mut out,
            ),
        }
        .expect("the kernel takes the case");

        let mut token = 0;
        let mut worst = 0f64;
        for (row, &length) in lengths.iter().enumerate() {
            for t in 0..length {
                for head in 0..dims.heads {
                    let kv = head / dims.group_size();
                    let q = &queries[token * width + head * hd..][..hd];
                    // Every key this query may see, with its absolute position.
                    let mut seen: Vec<(usize, &[f32], &[f32])> = Vec::new();
                    let mut at = 0;
                    for (k, v, len) in &segments {
                        for j in 0..*len {
                            let o = (kv * len + j) * hd;
                            seen.push((at + j, &k[o..o + hd], &v[o..o + hd]));
                        }
                        at += len;
                    }
                    for j in 0..=t {
                        let o = ((row * dims.kv_heads + kv) * stride + j) * hd;
                        seen.push((prefix_len + j, &keys[o..o + hd], &values[o..o + hd]));
                    }
                    let p = prefix_len + t;
                    let scores: Vec<(f64, &[f32])> = seen
                        .into_iter()
                        .filter(|(k, _, _)| masking.window.is_none_or(|w| k + w > p))
                        .map(|(_, key, value)| {
                            let dot: f64 = q.iter().zip(key).map(|(a, b)| f64::from(a * b)).sum();
                            let s = dot * f64::from(scale);
                            let s = match masking.softcap {
                                Some(c) => f64::from(c) * (s / f64::from(c)).tanh(),
                                None => s,
                            };
                            (s, value)
                        })
                        .collect();
                    let max = scores.iter().map(|s| s.0).fold(f64::NEG_INFINITY, f64::max);
                    let total: f64 = scores.iter().map(|s| (s.0 - max).exp()).sum();
                    for d in 0..hd {
                        let want: f64 = scores
                            .iter()
                            .map(|(s, v)| (s - max).exp() / total * f64::from(v[d]))
                            .sum();
                        let got = f64::from(out[token * width + head * hd + d]);
                        worst = worst.max((want - got).abs());
                    }
                }
                token += 1;
            }
        }
        assert!(
            worst < 2e-5,
            "case {case} {dims:?} {masking:?} prefix {prefix_lens:?} rows {lengths:?} {path:?}: {worst}"
        );
    }
}

#[test]
fn bad_masking_is_refused() {
    let dims = AttentionDims {
        heads: 1,
        kv_heads: 1,
        head_dim: 16,
    };
    let (keys, values, queries) = (vec![0.0; 16], vec![0.0; 16], vec![0.0; 16]);
    let group = RowGroup {
        prefix: &[],
        lengths: &[1],
        first_token: 0,
        keys: &keys,
        values: &values,
        stride: 1,
    };
    let mut out = vec![0.0; 16];
    for masking in [
        Masking {
            window: Some(0),
            softcap: None,
        },
        Masking {
            window: None,
            softcap: Some(0.0),
        },
    ] {
        let err = segment_attention_masked(dims, 1.0, masking, &[group], &queries, &mut out);
        assert!(err.is_err(), "{masking:?}");
    }
}

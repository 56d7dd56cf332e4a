//! Segment attention on the shapes of the pairwise tree: SmolLM2-135M heads (9 query,
//! 3 key/value, width 64) and a Llama-style shape (32/8/128); 15 sibling rows of 80
//! tokens after a 600-token prefix in two segments. Reports the best and the portable
//! instruction path; `cargo bench -p nlg-judge-kernels --bench attention`.
//!
//! `segment_attention/decode_step`: one decoding step of a document's rubric feedbacks
//! (issue 58), SmolLM2's heads: 16 rows of one token, each after the article its rows
//! share (522 positions) and a prompt tail and feedback of its own (344), every row its
//! own group as the generation route passes them.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nlg_judge_kernels::attention::{
    segment_attention_on, tile_keys, AttentionDims, RowGroup, Segment, SimdPath,
};

fn filled(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                / (1 << 24) as f32
                - 0.5
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    for (name, dims) in [
        (
            "smollm2",
            AttentionDims {
                heads: 9,
                kv_heads: 3,
                head_dim: 64,
            },
        ),
        (
            "llama",
            AttentionDims {
                heads: 32,
                kv_heads: 8,
                head_dim: 128,
            },
        ),
    ] {
        let (rows, len) = (15, 80);
        let segment_lens = [520, 80];
        let hd = dims.head_dim;
        let segments_data: Vec<(Vec<f32>, Vec<f32>)> = segment_lens
            .iter()
            .map(|&l| {
                (
                    filled(dims.kv_heads * l * hd, 1),
                    filled(dims.kv_heads * l * hd, 2),
                )
            })
            .collect();
        let segments: Vec<Segment> = segments_data
            .iter()
            .zip(segment_lens)
            .map(|((k, v), len)| Segment {
                keys: k,
                values: v,
                len,
                tiled_keys: None,
            })
            .collect();
        let lengths = vec![len; rows];
        let keys = filled(rows * dims.kv_heads * len * hd, 3);
        let values = filled(rows * dims.kv_heads * len * hd, 4);
        let group = RowGroup {
            prefix: &segments,
            lengths: &lengths,
            first_token: 0,
            keys: &keys,
            values: &values,
            stride: len,
        };
        let tokens = rows * len;
        let queries = filled(tokens * dims.heads * hd, 5);
        let mut out = vec![0f32; queries.len()];
        let keys_seen: usize = tokens * 600 + rows * len * (len + 1) / 2;
        let mut g = c.benchmark_group(format!("segment_attention/{name}"));
        // Two products (q k, p v) of head_dim multiply-adds per query head and key.
        g.throughput(Throughput::Elements(
            (keys_seen * dims.heads * hd * 4) as u64,
        ));
        g.sample_size(10);
        for path in [SimdPath::best(), SimdPath::Portable] {
            g.bench_function(format!("{path:?}"), |b| {
                b.iter(|| {
                    segment_attention_on(path, dims, 0.125, &[group], &queries, &mut out).unwrap()
                })
            });
        }
        g.finish();
    }
}

fn decode_step(c: &mut Criterion) {
    let dims = AttentionDims {
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
    };
    let (rows, article, own) = (16, 522, 344);
    let width = dims.kv_heads * dims.head_dim;
    let shared = (filled(article * width, 1), filled(article * width, 2));
    let tails: Vec<(Vec<f32>, Vec<f32>)> = (0..rows as u32)
        .map(|r| {
            (
                filled(own * width, 10 + 2 * r),
                filled(own * width, 11 + 2 * r),
            )
        })
        .collect();
    let prefixes: Vec<[Segment; 2]> = tails
        .iter()
        .map(|(k, v)| {
            [
                Segment {
                    keys: &shared.0,
                    values: &shared.1,
                    len: article,
                    tiled_keys: None,
                },
                Segment {
                    keys: k,
                    values: v,
                    len: own,
                    tiled_keys: None,
                },
            ]
        })
        .collect();
    let (keys, values) = (filled(rows * width, 3), filled(rows * width, 4));
    let one = [1usize];
    let groups: Vec<RowGroup> = prefixes
        .iter()
        .enumerate()
        .map(|(r, prefix)| RowGroup {
            prefix,
            lengths: &one,
            first_token: r,
            keys: &keys[r * width..(r + 1) * width],
            values: &values[r * width..(r + 1) * width],
            stride: 1,
        })
        .collect();
    let queries = filled(rows * dims.heads * dims.head_dim, 5);
    let mut out = vec![0f32; queries.len()];
    let mut g = c.benchmark_group("segment_attention/decode_step");
    g.throughput(Throughput::Bytes(
        // Keys and values read: each row's whole prefix, in f32.
        (rows * (article + own + 1) * width * 2 * 4) as u64,
    ));
    g.sample_size(20);
    for path in [SimdPath::best(), SimdPath::Portable] {
        g.bench_function(format!("{path:?}"), |b| {
            b.iter(|| segment_attention_on(path, dims, 0.125, &groups, &queries, &mut out).unwrap())
        });
    }
    // As the decoder runs it: every segment's keys kept tiled from an earlier step.
    let shared_tiled = tile_keys(dims, &shared.0, article).unwrap();
    let tails_tiled: Vec<Vec<f32>> = tails
        .iter()
        .map(|(k, _)| tile_keys(dims, k, own).unwrap())
        .collect();
    let tiled_prefixes: Vec<[Segment; 2]> = prefixes
        .iter()
        .zip(&tails_tiled)
        .map(|(prefix, tail_tiled)| {
            [
                Segment {
                    tiled_keys: Some(&shared_tiled),
                    ..prefix[0]
                },
                Segment {
                    tiled_keys: Some(tail_tiled),
                    ..prefix[1]
                },
            ]
        })
        .collect();
    let tiled_groups: Vec<RowGroup> = groups
        .iter()
        .zip(&tiled_prefixes)
        .map(|(group, prefix)| RowGroup { prefix, ..*group })
        .collect();
    let path = SimdPath::best();
    g.bench_function(format!("{path:?}_tiled_keys"), |b| {
        b.iter(|| {
            segment_attention_on(path, dims, 0.125, &tiled_groups, &queries, &mut out).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench, decode_step);
criterion_main!(benches);

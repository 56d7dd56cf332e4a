//! Segment attention on the shapes of the pairwise tree: SmolLM2-135M heads (9 query,
//! 3 key/value, width 64) and a Llama-style shape (32/8/128); 15 sibling rows of 80
//! tokens after a 600-token prefix in two segments. Reports the best and the portable
//! instruction path; `cargo bench -p nlg-judge-kernels --bench attention`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nlg_judge_kernels::attention::{
    segment_attention_on, AttentionDims, RowGroup, Segment, SimdPath,
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

criterion_group!(benches, bench);
criterion_main!(benches);

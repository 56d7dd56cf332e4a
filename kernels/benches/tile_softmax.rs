//! The tile attention's online-softmax update alone (issue 61), before and after: the
//! one-query-at-a-time scalar update the kernel ran before (`update_rows_scalar`) and
//! the vector update on each instruction path this CPU has (`TileSoftmax::update`), on
//! the same scores. One pass is what one chunk of 32 queries does against a 600-key
//! prefix (19 key tiles, every key visible) and then its row's own keys (causal): a
//! SmolLM2-135M chunk (64-wide heads, 3 query heads per key/value head: queries of
//! tokens 32-42 of their row) and a Llama-3-8B one (128-wide, 4 per key/value head:
//! tokens 24-31). Each tile's scores are copied into the state first, for every variant
//! (the tiles' store would write them there). `cargo bench -p nlg-judge-kernels --bench
//! tile_softmax`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nlg_judge_kernels::attention::tile_softmax::{
    update_rows_scalar, TileSoftmax, KEYS, KEY_PAIRS, QUERIES,
};
use nlg_judge_kernels::attention::SimdPath;

/// One key tile of a chunk's pass: scores `[query][key]` and what each query sees.
struct Tile {
    scores: [[f32; KEYS]; QUERIES],
    first_visible: [u32; QUERIES],
    visible: [u32; QUERIES],
}

/// The tiles of one chunk of `heads_per_kv` heads (chunk `chunk` of its row) against a
/// prefix of `prefix` keys and the row's own keys up to each query's token.
fn pass(heads_per_kv: usize, chunk: usize, prefix: usize) -> Vec<Tile> {
    let mut seed = 0x9e37_79b9u32;
    let mut score = |tile: usize| {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        // Scores in base 2 of a few units, drifting up along the keys now and then, so
        // that some tiles move some queries' maxima (and rescale their outputs).
        (seed >> 8) as f32 / (1 << 24) as f32 * 6.0 - 3.0 + (tile % 5) as f32 * 0.4
    };
    let tokens: Vec<usize> = (0..QUERIES)
        .map(|i| (chunk * QUERIES + i) / heads_per_kv)
        .collect();
    let mut tiles = Vec::new();
    for t in 0..prefix.div_ceil(KEYS) {
        let len = KEYS.min(prefix - t * KEYS) as u32;
        tiles.push(Tile {
            scores: std::array::from_fn(|_| std::array::from_fn(|_| score(t))),
            first_visible: [0; QUERIES],
            visible: [len; QUERIES],
        });
    }
    let last = tokens[QUERIES - 1];
    for t in 0..=last / KEYS {
        let start = t * KEYS;
        let n = tiles.len();
        tiles.push(Tile {
            scores: std::array::from_fn(|_| std::array::from_fn(|_| score(n))),
            first_visible: [0; QUERIES],
            visible: std::array::from_fn(|i| {
                (tokens[i] + 1).saturating_sub(start).min(KEYS) as u32
            }),
        });
    }
    tiles
}

fn bench(c: &mut Criterion) {
    for (name, head_dim, heads_per_kv, chunk) in [("smollm2", 64, 3, 3), ("llama3-8b", 128, 4, 6)] {
        let tiles = pass(heads_per_kv, chunk, 600);
        let mut g = c.benchmark_group(format!("tile_softmax/{name}"));
        g.throughput(Throughput::Elements((tiles.len() * KEYS * QUERIES) as u64));
        // The outputs start at 1 in every pass (rescaled again and again they would
        // become subnormal, which some CPUs multiply slowly).
        g.bench_function("scalar_rows_before", |b| {
            let mut acc = vec![0f32; QUERIES * head_dim];
            let mut scores = [[0f32; KEYS]; QUERIES];
            let mut p = [[0u32; KEY_PAIRS]; QUERIES];
            b.iter(|| {
                acc.fill(1.0);
                let mut max = [f32::NEG_INFINITY; QUERIES];
                let mut sum = [0f32; QUERIES];
                for tile in &tiles {
                    scores = tile.scores;
                    update_rows_scalar(
                        &mut scores,
                        &mut max,
                        &mut sum,
                        &tile.first_visible,
                        &tile.visible,
                        0.0,
                        &mut acc,
                        &mut p,
                        0..QUERIES,
                    );
                }
                std::hint::black_box((&p, &sum, &acc));
            })
        });
        let transposed: Vec<[[f32; QUERIES]; KEYS]> = tiles
            .iter()
            .map(|t| std::array::from_fn(|j| std::array::from_fn(|q| t.scores[q][j])))
            .collect();
        for path in [
            SimdPath::Avx512,
            SimdPath::Avx2,
            SimdPath::Neon,
            SimdPath::Portable,
        ] {
            if !path.available() {
                continue;
            }
            g.bench_function(BenchmarkId::new("vector_after", format!("{path:?}")), |b| {
                let mut acc = vec![0f32; QUERIES * head_dim];
                let mut st = TileSoftmax::new();
                b.iter(|| {
                    acc.fill(1.0);
                    st.max = [f32::NEG_INFINITY; QUERIES];
                    st.sum = [0.0; QUERIES];
                    for (tile, scores) in tiles.iter().zip(&transposed) {
                        st.scores = *scores;
                        st.first_visible = tile.first_visible;
                        st.visible = tile.visible;
                        st.update(path, &mut acc);
                    }
                    std::hint::black_box((&st.p, &st.sum, &acc));
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

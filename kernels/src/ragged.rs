//! Ragged segment attention, tiled as the GPU kernel will tile it (issue 38): the
//! blueprint of the CUDA kernel, in Rust so that the CPU tests check its arithmetic.
//!
//! A level pass packs many rows into one sequence; each query token attends to a list of
//! key ranges of a key/value arena (its ancestors' segments, then its own row's keys up
//! to itself). The GPU kernel gives a block to a (query token, kv head) pair, walks the
//! token's ranges in tiles of [`TILE`] keys and keeps an online softmax (running maximum,
//! running sum, f32 accumulator) so no score matrix is ever stored. This emulation
//! follows the same loop nest and the same update order; [`CUDA_SOURCE`] is the kernel
//! written beside it, structurally parallel (one function, the same names), compiled
//! only where NVRTC is at hand.

use std::ops::Range;

/// Keys per tile (the GPU kernel's shared-memory tile).
pub const TILE: usize = 64;

/// Shapes of one call: queries `(tokens, heads, head_dim)`, keys and values `(arena
/// positions, kv_heads, head_dim)`, output like the queries.
#[derive(Debug, Clone, Copy)]
pub struct RaggedDims {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// Attention of every query token over its key ranges: `ranges[t]` lists the arena
/// ranges token `t` sees, in order. Online softmax in tiles of [`TILE`] keys, f32 throughout.
pub fn ragged_attention(
    dims: RaggedDims,
    queries: &[f32],
    keys: &[f32],
    values: &[f32],
    ranges: &[Vec<Range<usize>>],
    out: &mut [f32],
) {
    let (h, hkv, d) = (dims.heads, dims.kv_heads, dims.head_dim);
    let group = h / hkv;
    let mut scores = [0f32; TILE];
    for (t, token_ranges) in ranges.iter().enumerate() {
        for head in 0..h {
            let kv = head / group;
            let q = &queries[(t * h + head) * d..(t * h + head + 1) * d];
            let mut max = f32::NEG_INFINITY;
            let mut sum = 0f32;
            let mut acc = vec![0f32; d];
            for range in token_ranges {
                let mut tile_start = range.start;
                while tile_start < range.end {
                    let tile_end = (tile_start + TILE).min(range.end);
                    let n = tile_end - tile_start;
                    // Scores of the tile and their maximum.
                    let mut tile_max = f32::NEG_INFINITY;
                    for (j, score) in scores[..n].iter_mut().enumerate() {
                        let k = &keys[((tile_start + j) * hkv + kv) * d..][..d];
                        let dot: f32 = q.iter().zip(k).map(|(a, b)| a * b).sum();
                        *score = dot * dims.scale;
                        tile_max = tile_max.max(*score);
                    }
                    // Rescale what was accumulated to the new maximum, then add the tile.
                    let new_max = max.max(tile_max);
                    let correction = (max - new_max).exp();
                    sum *= correction;
                    for a in acc.iter_mut() {
                        *a *= correction;
                    }
                    for (j, &score) in scores[..n].iter().enumerate() {
                        let p = (score - new_max).exp();
                        sum += p;
                        let v = &values[((tile_start + j) * hkv + kv) * d..][..d];
                        for (a, &x) in acc.iter_mut().zip(v) {
                            *a += p * x;
                        }
                    }
                    max = new_max;
                    tile_start = tile_end;
                }
            }
            let o = &mut out[(t * h + head) * d..(t * h + head + 1) * d];
            for (o, a) in o.iter_mut().zip(&acc) {
                *o = if sum > 0.0 { a / sum } else { 0.0 };
            }
        }
    }
}

/// The CUDA kernel the emulation stands for: one block per (query token, head), one
/// thread per head dimension, the same tile loop and online-softmax update. Not compiled
/// here (no NVRTC on CI); kept beside the emulation so the two change together.
pub const CUDA_SOURCE: &str = r#"
// ranges: per token, [range_offsets[t], range_offsets[t+1]) index pairs (start, end)
extern "C" __global__ void ragged_attention(
    const float* queries, const float* keys, const float* values,
    const unsigned* range_offsets, const unsigned* ranges,
    int heads, int kv_heads, int head_dim, float scale, float* out)
{
    const int TILE = 64;
    __shared__ float scores[TILE];
    __shared__ float tile_max_s, new_max_s, correction_s;
    int t = blockIdx.x, head = blockIdx.y, i = threadIdx.x;
    int kv = head / (heads / kv_heads);
    const float* q = queries + ((size_t)t * heads + head) * head_dim;
    float max = -INFINITY, sum = 0.f, acc = 0.f;
    for (unsigned r = range_offsets[t]; r < range_offsets[t + 1]; ++r) {
        unsigned start = ranges[2 * r], end = ranges[2 * r + 1];
        for (unsigned tile_start = start; tile_start < end; tile_start += TILE) {
            unsigned n = min((unsigned)TILE, end - tile_start);
            // Scores of the tile (thread i takes key i; head_dim >= TILE in practice).
            if (i < n) {
                const float* k = keys + ((size_t)(tile_start + i) * kv_heads + kv) * head_dim;
                float dot = 0.f;
                for (int j = 0; j < head_dim; ++j) dot += q[j] * k[j];
                scores[i] = dot * scale;
            }
            __syncthreads();
            if (i == 0) {
                float tile_max = -INFINITY;
                for (unsigned j = 0; j < n; ++j) tile_max = fmaxf(tile_max, scores[j]);
                new_max_s = fmaxf(max, tile_max);
                correction_s = expf(max - new_max_s);
            }
            __syncthreads();
            float new_max = new_max_s, correction = correction_s;
            sum *= correction;
            acc *= correction;
            for (unsigned j = 0; j < n; ++j) {
                float p = expf(scores[j] - new_max);
                sum += p;
                acc += p * values[((size_t)(tile_start + j) * kv_heads + kv) * head_dim + i];
            }
            max = new_max;
            __syncthreads();
        }
    }
    out[((size_t)t * heads + head) * head_dim + i] = sum > 0.f ? acc / sum : 0.f;
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention in f64, all scores at once: the reference.
    fn reference(
        dims: RaggedDims,
        queries: &[f32],
        keys: &[f32],
        values: &[f32],
        ranges: &[Vec<Range<usize>>],
    ) -> Vec<f64> {
        let (h, hkv, d) = (dims.heads, dims.kv_heads, dims.head_dim);
        let mut out = vec![0f64; queries.len()];
        for (t, token_ranges) in ranges.iter().enumerate() {
            for head in 0..h {
                let kv = head / (h / hkv);
                let q = &queries[(t * h + head) * d..][..d];
                let positions: Vec<usize> = token_ranges.iter().flat_map(|r| r.clone()).collect();
                let scores: Vec<f64> = positions
                    .iter()
                    .map(|&p| {
                        let k = &keys[(p * hkv + kv) * d..][..d];
                        q.iter()
                            .zip(k)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum::<f64>()
                            * f64::from(dims.scale)
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for (w, &p) in weights.iter().zip(&positions) {
                    let v = &values[(p * hkv + kv) * d..][..d];
                    for (o, &x) in out[(t * h + head) * d..][..d].iter_mut().zip(v) {
                        *o += w / total * f64::from(x);
                    }
                }
            }
        }
        out
    }

    /// Deterministic values in about [-1, 1].
    fn fill(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn tiled_ragged_attention_matches_the_f64_reference() {
        let dims = RaggedDims {
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            scale: 0.25,
        };
        // An arena of 300 positions: two contexts (150 and 70 keys: several tiles, a
        // ragged last one), candidates after them, and the pass's own rows at the end.
        let arena = 300;
        let keys = fill(arena * dims.kv_heads * dims.head_dim, 1);
        let values = fill(arena * dims.kv_heads * dims.head_dim, 2);
        let mut ranges = Vec::new();
        for t in 0..5 {
            // Row 0: context 0..150, candidate 220..230, own keys 260..261+t.
            ranges.push(vec![0..150, 220..230, 260..261 + t]);
        }
        for t in 0..3 {
            // Row 1: context 150..220, its own keys 280..281+t.
            ranges.push(vec![150..220, 280..281 + t]);
        }
        // A token that sees one key only, and one with an empty range in its list.
        ranges.push(std::iter::once(299..300).collect());
        ranges.push(vec![10..10, 40..107]);
        let queries = fill(ranges.len() * dims.heads * dims.head_dim, 3);
        let mut out = vec![0f32; queries.len()];
        ragged_attention(dims, &queries, &keys, &values, &ranges, &mut out);
        let expected = reference(dims, &queries, &keys, &values, &ranges);
        let worst = out
            .iter()
            .zip(&expected)
            .map(|(&a, &b)| (f64::from(a) - b).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-5, "largest difference {worst}");
        assert!(
            expected.iter().any(|x| x.abs() > 0.05),
            "a non-trivial output"
        );
    }

    #[test]
    fn the_cuda_source_follows_the_same_loop() {
        for name in [
            "ragged_attention",
            "TILE = 64",
            "correction",
            "new_max",
            "acc / sum",
        ] {
            assert!(CUDA_SOURCE.contains(name), "{name}");
        }
    }
}

//! Throughput of the bf16 and int8 products against the f32 `gemm` crate (what candle
//! runs on the CPU) at the linear-layer shapes of SmolLM2-135M and Qwen2.5-0.5B.
//!
//! `cargo bench -p nlg-judge-kernels --bench gemm`; criterion reports time per product,
//! and the element throughput it prints is multiply-adds (`m n k`), so GFLOP/s is twice
//! the reported Gelem/s. Each bf16 and int8 benchmark is named after the path the
//! default product takes for its rows (`bf16-amx/512` on AMX tiles, `bf16-avx512/1`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gemm::Parallelism;
use nlg_judge_kernels::gemm::{Bf16Matrix, Int8Matrix};

/// (name, n = out_features, k = in_features).
const LAYERS: &[(&str, usize, usize)] = &[
    ("smollm2-qkv", 960, 576),
    ("smollm2-gate-up", 3072, 576),
    ("smollm2-down", 576, 1536),
    ("qwen2.5-qkv", 1152, 896),
    ("qwen2.5-gate-up", 9728, 896),
    ("qwen2.5-down", 896, 4864),
];

/// Tokens per forward pass: one decode step, a small and a large batch.
const TOKENS: &[usize] = &[1, 128, 512];

fn values(len: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `out = x W^T` with the f32 `gemm` crate, `W` row-major `(n, k)`.
fn f32_gemm(x: &[f32], w: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    let threads = rayon::current_num_threads();
    // SAFETY: the slices hold m*k, n*k and m*n values; strides describe row-major
    // x (m, k), W^T (k, n) read from W (n, k), and out (m, n).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            if threads > 1 {
                Parallelism::Rayon(threads)
            } else {
                Parallelism::None
            },
        )
    }
}

fn products(c: &mut Criterion) {
    for &(layer, n, k) in LAYERS {
        let w = values(n * k, 1);
        let bf16 = Bf16Matrix::from_f32(&w, n, k);
        let int8 = Int8Matrix::from_f32(&w, n, k);
        let mut group = c.benchmark_group(layer);
        group
            .sample_size(10)
            .warm_up_time(std::time::Duration::from_millis(500))
            .measurement_time(std::time::Duration::from_secs(2));
        for &m in TOKENS {
            let x = values(m * k, 2);
            let mut out = vec![0f32; m * n];
            group.throughput(Throughput::Elements((m * n * k) as u64));
            group.bench_function(BenchmarkId::new("f32-gemm", m), |b| {
                b.iter(|| f32_gemm(&x, &w, &mut out, m, n, k))
            });
            let bf16_path = format!("bf16-{}", Bf16Matrix::isa_for_rows(m).name());
            group.bench_function(BenchmarkId::new(bf16_path, m), |b| {
                b.iter(|| bf16.matmul(&x, m, &mut out))
            });
            let int8_path = format!("int8-{}", Int8Matrix::isa_for_rows(m).name());
            group.bench_function(BenchmarkId::new(int8_path, m), |b| {
                b.iter(|| int8.matmul(&x, m, &mut out))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, products);
criterion_main!(benches);

//! Every instruction path of the bf16 and int8 products next to the f32 `gemm` crate, at
//! the linear-layer shapes of SmolLM2-135M, on one thread, the kernels interleaved and
//! the fastest of several rounds kept (robust to a machine shared with other work).
//!
//! `cargo run --release -p nlg-judge-kernels --example gemm_paths [tokens] [rounds]`
//! prints GFLOP/s per kernel and path (fastest round) and the ratio to f32 (of the
//! fastest rounds, and the median of the ratios within a round).

use std::time::Instant;

use nlg_judge_kernels::gemm::{Bf16Matrix, Int8Matrix, Isa};

/// A product writing into the output it is handed.
type Kernel<'a> = Box<dyn FnMut(&mut [f32]) + 'a>;

const LAYERS: &[(&str, usize, usize)] = &[
    ("qkv", 960, 576),
    ("gate-up", 3072, 576),
    ("down", 576, 1536),
];

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

fn f32_gemm(x: &[f32], w: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    // SAFETY: the slices hold m*k, n*k and m*n values; strides describe row-major x,
    // W^T read from row-major W, and out.
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
            gemm::Parallelism::None,
        )
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let m: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool");
    pool.install(|| {
        for &(layer, n, k) in LAYERS {
            let w = values(n * k, 1);
            let x = values(m * k, 2);
            let mut out = vec![0f32; m * n];
            let bf16 = Bf16Matrix::from_f32(&w, n, k);
            let int8 = Int8Matrix::from_f32(&w, n, k);
            let mut kernels: Vec<(String, Kernel)> = vec![(
                "f32 gemm".into(),
                Box::new(|out: &mut [f32]| f32_gemm(&x, &w, out, m, n, k)),
            )];
            for isa in Isa::ALL {
                if Bf16Matrix::supports(isa) {
                    let (bf16, x) = (&bf16, &x);
                    kernels.push((
                        format!("bf16 {}", isa.name()),
                        Box::new(move |out: &mut [f32]| bf16.matmul_on(isa, x, m, out)),
                    ));
                }
                if Int8Matrix::supports(isa) {
                    let (int8, x) = (&int8, &x);
                    kernels.push((
                        format!("int8 {}", isa.name()),
                        Box::new(move |out: &mut [f32]| int8.matmul_on(isa, x, m, out)),
                    ));
                }
            }
            let mut best = vec![f64::INFINITY; kernels.len()];
            let mut ratios = vec![Vec::new(); kernels.len()];
            for _ in 0..rounds {
                let mut times = Vec::with_capacity(kernels.len());
                for (slot, (_, kernel)) in best.iter_mut().zip(kernels.iter_mut()) {
                    let start = Instant::now();
                    kernel(&mut out);
                    let seconds = start.elapsed().as_secs_f64();
                    *slot = slot.min(seconds);
                    times.push(seconds);
                }
                for (ratio, seconds) in ratios.iter_mut().zip(&times) {
                    ratio.push(times[0] / seconds);
                }
            }
            let flops = 2.0 * (m * n * k) as f64;
            for (((name, _), seconds), ratio) in kernels.iter().zip(&best).zip(&mut ratios) {
                ratio.sort_by(f64::total_cmp);
                println!(
                    "{layer:<8} m={m:<5} {name:<14} {:>7.1} GFLOP/s  best x{:.2} of f32, \
                     median of rounds x{:.2}",
                    flops / seconds / 1e9,
                    best[0] / seconds,
                    ratio[ratio.len() / 2]
                );
            }
        }
    });
}

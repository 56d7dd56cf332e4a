//! What the product tests (`gemm.rs`, `amx.rs`) share: a deterministic generator, the f64
//! reference product, bf16 rounding of whole matrices, and rayon pools of a chosen size.

use nlg_judge_kernels::gemm::bf16;

/// The unit roundoff of f32.
pub const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Deterministic uniform values in [-1, 1) with a few larger outliers, like activations.
pub struct Random(pub u64);

impl Random {
    pub fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let unit = (self.0 >> 40) as f32 / (1u64 << 24) as f32;
        let value = 2.0 * unit - 1.0;
        if self.0.is_multiple_of(97) {
            value * 20.0
        } else {
            value
        }
    }

    pub fn matrix(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.next()).collect()
    }
}

/// `x w^T` in f64 for row-major `x` `(m, k)` and `w` `(n, k)`, and `Σ |x w|` per element.
pub fn reference(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0f64; m * n];
    let mut magnitude = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                let product = x[i * k + p] as f64 * w[j * k + p] as f64;
                y[i * n + j] += product;
                magnitude[i * n + j] += product.abs();
            }
        }
    }
    (y, magnitude)
}

/// Every value rounded to bf16 (as the kernels round) and widened back.
pub fn rounded(values: &[f32]) -> Vec<f32> {
    values
        .iter()
        .map(|&v| bf16::widen(bf16::round_to_bf16(v)))
        .collect()
}

/// `work` in a rayon pool of `threads` threads.
pub fn with_threads<T: Send>(threads: usize, work: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool")
        .install(work)
}

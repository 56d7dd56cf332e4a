//! The CPU's multiply-add ceiling: how many floating-point operations per second its
//! widest fused multiply-add can do on every thread at once, measured, not looked up.
//!
//! Benchmarks compare the whole run's arithmetic with this figure ("how far from the
//! machine's limit"), and it settles what no kernel can beat: a CPU whose vector units
//! are half as wide as its registers (a 256-bit FMA issued as two 128-bit halves, as on
//! AMD's first Zen cores) reaches half the rate its flags suggest, and no product or
//! attention kernel on it can do better than this measurement.
//!
//! The measurement runs twelve independent chains `c = a * c + b` (enough to cover the
//! FMA's latency on two pipes) in registers, with no memory traffic, on each thread of
//! the current rayon pool at the same time, and keeps each thread's best round.
//!
//! Where the CPU has AMX tiles (and the OS grants them), [`measure_amx`] measures the
//! tile unit's bf16 ceiling the same way: four independent `tdpbf16ps` per round on tiles
//! loaded once (see `gemm::amx`), on every thread at once; `None` elsewhere.
//!
//! Where the CPU has AVX512-BF16 (Intel since Cooper Lake, AMD Zen 4 and 5),
//! [`measure_bf16_dot`] measures the vector bf16 ceiling: twelve independent chains of
//! `vdpbf16ps` (16 lanes, each adding two bf16 products into an f32), the instruction the
//! bf16 products run on without AMX; bf16 runs compare with this figure, not the f32 one.

use std::time::Instant;

use crate::cpu::CpuFeatures;

/// Independent multiply-add chains per thread.
const CHAINS: usize = 12;
/// Steps of every chain per timed round (about 5-20 ms on a current core).
const STEPS: usize = 1 << 19;
/// Timed rounds per thread, after one untimed warm-up round.
const ROUNDS: usize = 5;
/// `a` and `b` of the chains: they settle at `b / (1 - a)` (about 0.25), far from
/// overflow and from subnormals, whatever the starting values below. Both have full
/// mantissas, so a fused step rounds differently from a product and a sum.
const A: f32 = 0.999_123_4;
const B: f32 = 0.000_219_3;

/// The multiply-add path the measurement ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FmaPath {
    /// 512-bit `vfmadd` (16 f32 lanes).
    Avx512,
    /// 256-bit `vfmadd` (8 lanes).
    Avx2,
    /// 128-bit `fmla` (4 lanes).
    Neon,
    /// Scalar multiply then add (what plain Rust does without FMA enabled).
    Portable,
}

impl FmaPath {
    /// The widest path `features` allow.
    pub fn best_for(features: CpuFeatures) -> FmaPath {
        if cfg!(target_arch = "x86_64") && features.avx512f {
            FmaPath::Avx512
        } else if cfg!(target_arch = "x86_64") && features.avx2 && features.fma {
            FmaPath::Avx2
        } else if cfg!(target_arch = "aarch64") && features.neon {
            FmaPath::Neon
        } else {
            FmaPath::Portable
        }
    }

    /// f32 lanes of one instruction.
    pub fn lanes(self) -> usize {
        match self {
            FmaPath::Avx512 => 16,
            FmaPath::Avx2 => 8,
            FmaPath::Neon => 4,
            FmaPath::Portable => 1,
        }
    }

    /// The path's name in benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            FmaPath::Avx512 => "avx512 fma (512-bit)",
            FmaPath::Avx2 => "avx2 fma (256-bit)",
            FmaPath::Neon => "neon fmla (128-bit)",
            FmaPath::Portable => "scalar multiply-add",
        }
    }
}

/// The measured ceiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FmaPeak {
    pub path: FmaPath,
    /// Threads that ran at once (the rayon pool's).
    pub threads: usize,
    /// The slowest thread's best rate (GFLOP/s, a multiply-add counting two).
    pub gflops_per_thread: f64,
    /// The sum over threads of their best rates.
    pub gflops: f64,
}

/// GFLOP/s of `instructions` multiply-adds of `lanes` lanes each in `seconds`.
pub fn gflops(instructions: usize, lanes: usize, seconds: f64) -> f64 {
    2.0 * (instructions * lanes) as f64 / seconds / 1e9
}

/// Measure the ceiling of the widest path of `features` on every thread of the current
/// rayon pool at once.
pub fn measure(features: CpuFeatures) -> FmaPeak {
    measure_path(FmaPath::best_for(features))
}

/// Measure the ceiling of `path` on every thread of the current rayon pool at once.
///
/// # Panics
/// If `path` is not available on this machine.
pub fn measure_path(path: FmaPath) -> FmaPeak {
    let (threads, gflops_per_thread, gflops) = on_every_thread(|| best_rate(path));
    FmaPeak {
        path,
        threads,
        gflops_per_thread,
        gflops,
    }
}

/// Run `rate` on every thread of the current rayon pool at once: the threads, the
/// slowest thread's rate and the sum of the rates.
fn on_every_thread(rate: impl Fn() -> f64 + Sync) -> (usize, f64, f64) {
    let rates: Vec<f64> = rayon::broadcast(|_| rate());
    (
        rates.len(),
        rates.iter().copied().fold(f64::INFINITY, f64::min),
        rates.iter().sum(),
    )
}

/// The measured AMX bf16 ceiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmxPeak {
    /// Threads that ran at once (the rayon pool's).
    pub threads: usize,
    /// The slowest thread's best rate (GFLOP/s, a multiply-add counting two).
    pub gflops_per_thread: f64,
    /// The sum over threads of their best rates.
    pub gflops: f64,
}

/// Rounds of four `tdpbf16ps` per timed run (64 Mi multiply-adds a round: about 10 ms on
/// a Sapphire Rapids core at its published 1,024 flops per cycle).
const AMX_ROUNDS: usize = 1 << 14;

/// The AMX bf16 ceiling on every thread of the current rayon pool at once, or `None`
/// where the tiles cannot run (no AMX-BF16, or the OS refused the tile state; the switch
/// `NLG_JUDGE_CPU` does not lower it, as it does not lower the FMA peak).
pub fn measure_amx() -> Option<AmxPeak> {
    use crate::gemm::amx;
    if !amx::peak_available() {
        return None;
    }
    let (threads, gflops_per_thread, gflops) = on_every_thread(|| {
        amx::peak_rounds(AMX_ROUNDS / 16);
        let seconds = best_seconds(|| amx::peak_rounds(AMX_ROUNDS));
        (AMX_ROUNDS * amx::PEAK_FLOPS_PER_ROUND) as f64 / seconds / 1e9
    });
    Some(AmxPeak {
        threads,
        gflops_per_thread,
        gflops,
    })
}

/// The measured AVX512-BF16 (`vdpbf16ps`) ceiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bf16DotPeak {
    /// Threads that ran at once (the rayon pool's).
    pub threads: usize,
    /// The slowest thread's best rate (GFLOP/s, a multiply-add counting two).
    pub gflops_per_thread: f64,
    /// The sum over threads of their best rates.
    pub gflops: f64,
}

/// Multiply-adds of one `vdpbf16ps`: 16 lanes, two products each.
pub const BF16_DOT_MULTIPLY_ADDS: usize = 32;

/// The `vdpbf16ps` ceiling on every thread of the current rayon pool at once, or `None`
/// where the CPU lacks AVX512-BF16 (like the other peaks, `NLG_JUDGE_CPU` does not lower
/// it).
pub fn measure_bf16_dot() -> Option<Bf16DotPeak> {
    if !bf16_dot_available() {
        return None;
    }
    let (threads, gflops_per_thread, gflops) = on_every_thread(|| {
        let start = std::hint::black_box([0f32; CHAINS]);
        std::hint::black_box(run_bf16_dot_chains(start, STEPS / 8));
        let best = best_seconds(|| {
            std::hint::black_box(run_bf16_dot_chains(start, STEPS));
        });
        gflops(CHAINS * STEPS, BF16_DOT_MULTIPLY_ADDS, best)
    });
    Some(Bf16DotPeak {
        threads,
        gflops_per_thread,
        gflops,
    })
}

/// Whether this CPU runs `vdpbf16ps` (AVX-512F and AVX512-BF16, on x86_64).
pub fn bf16_dot_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Each chain's value after `steps` `vdpbf16ps` from `start`: every step adds the two
/// products `BF16_DOT_A * 1` (exact, so the result is `start + 2 steps BF16_DOT_A` where
/// that is exact; tests check it). Lane 0 of each chain comes back.
///
/// # Panics
/// If the CPU lacks AVX512-BF16.
pub fn run_bf16_dot_chains(start: [f32; CHAINS], steps: usize) -> [f32; CHAINS] {
    assert!(bf16_dot_available(), "vdpbf16ps is not available here");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the assertion above checked AVX-512F and AVX512-BF16.
    return unsafe { x86::bf16_dot_chains(start, steps) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("checked above")
}

/// The bf16 value each chain's products multiply by one: a power of two, so every sum
/// below 2^24 of its multiples is exact in f32.
pub const BF16_DOT_A: f32 = 1.0 / 4096.0;

/// The shortest of [`ROUNDS`] runs of `run`, in seconds.
fn best_seconds(mut run: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        run();
        best = best.min(start.elapsed().as_secs_f64());
    }
    best
}

/// This thread's best rate over [`ROUNDS`] rounds (GFLOP/s).
fn best_rate(path: FmaPath) -> f64 {
    let start_values = std::hint::black_box(std::array::from_fn(|i| 1.0 + i as f32));
    std::hint::black_box(run_chains(path, start_values, STEPS));
    let best = best_seconds(|| {
        std::hint::black_box(run_chains(path, start_values, STEPS));
    });
    gflops(CHAINS * STEPS, path.lanes(), best)
}

/// Run the chains from `start` for `steps` steps on `path`; every lane of a chain holds
/// the same value, and lane 0 of each comes back (tests check it against `mul_add`).
///
/// # Panics
/// If `path` is not available on this machine.
pub fn run_chains(path: FmaPath, start: [f32; CHAINS], steps: usize) -> [f32; CHAINS] {
    let cpu = CpuFeatures::detected();
    assert!(
        path == FmaPath::Portable || FmaPath::best_for(cpu).lanes() >= path.lanes(),
        "{path:?} multiply-adds are not available here"
    );
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the assertion above checked AVX-512F.
        FmaPath::Avx512 => unsafe { x86::chains512(start, steps) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the assertion above checked AVX2 and FMA.
        FmaPath::Avx2 => unsafe { x86::chains256(start, steps) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the assertion above checked NEON.
        FmaPath::Neon => unsafe { arm::chains128(start, steps) },
        _ => portable_chains(start, steps),
    }
}

/// The chains in plain Rust: a product then a sum, each rounded (not fused).
fn portable_chains(start: [f32; CHAINS], steps: usize) -> [f32; CHAINS] {
    let mut c = start;
    let (a, b) = (std::hint::black_box(A), std::hint::black_box(B));
    for _ in 0..steps {
        for value in c.iter_mut() {
            *value = *value * a + b;
        }
    }
    c
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{A, B, CHAINS};
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn chains256(start: [f32; CHAINS], steps: usize) -> [f32; CHAINS] {
        let (a, b) = (_mm256_set1_ps(A), _mm256_set1_ps(B));
        let mut c = [_mm256_setzero_ps(); CHAINS];
        for (value, &s) in c.iter_mut().zip(&start) {
            *value = _mm256_set1_ps(s);
        }
        for _ in 0..steps {
            for value in c.iter_mut() {
                *value = _mm256_fmadd_ps(a, *value, b);
            }
        }
        let mut out = [0f32; CHAINS];
        for (o, value) in out.iter_mut().zip(c) {
            *o = _mm256_cvtss_f32(value);
        }
        out
    }

    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn chains512(start: [f32; CHAINS], steps: usize) -> [f32; CHAINS] {
        let (a, b) = (_mm512_set1_ps(A), _mm512_set1_ps(B));
        let mut c = [_mm512_setzero_ps(); CHAINS];
        for (value, &s) in c.iter_mut().zip(&start) {
            *value = _mm512_set1_ps(s);
        }
        for _ in 0..steps {
            for value in c.iter_mut() {
                *value = _mm512_fmadd_ps(a, *value, b);
            }
        }
        let mut out = [0f32; CHAINS];
        for (o, value) in out.iter_mut().zip(c) {
            *o = _mm512_cvtss_f32(value);
        }
        out
    }

    /// # Safety
    /// The CPU must have AVX-512F and AVX512-BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn bf16_dot_chains(start: [f32; CHAINS], steps: usize) -> [f32; CHAINS] {
        // bf16 bit patterns: the top halves of the f32 values.
        let a_bits = super::BF16_DOT_A.to_bits() >> 16;
        let one_bits = 1f32.to_bits() >> 16;
        let a: __m512bh = std::mem::transmute(_mm512_set1_epi32(((a_bits << 16) | a_bits) as i32));
        let one: __m512bh =
            std::mem::transmute(_mm512_set1_epi32(((one_bits << 16) | one_bits) as i32));
        let mut c = [_mm512_setzero_ps(); CHAINS];
        for (value, &s) in c.iter_mut().zip(&start) {
            *value = _mm512_set1_ps(s);
        }
        for _ in 0..steps {
            for value in c.iter_mut() {
                *value = _mm512_dpbf16_ps(*value, a, one);
            }
        }
        let mut out = [0f32; CHAINS];
        for (o, value) in out.iter_mut().zip(c) {
            *o = _mm512_cvtss_f32(value);
        }
        out
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::{A, B, CHAINS};
    use std::arch::aarch64::*;

    /// # Safety
    /// The CPU must have NEON.
    #[target_feature(enable = "neon")]
    pub unsafe fn chains128(start: [f32; CHAINS], steps: usize) -> [f32; CHAINS] {
        let (a, b) = (vdupq_n_f32(A), vdupq_n_f32(B));
        let mut c = [vdupq_n_f32(0.0); CHAINS];
        for (value, &s) in c.iter_mut().zip(&start) {
            *value = vdupq_n_f32(s);
        }
        for _ in 0..steps {
            for value in c.iter_mut() {
                // b + value * a, fused
                *value = vfmaq_f32(b, *value, a);
            }
        }
        let mut out = [0f32; CHAINS];
        for (o, value) in out.iter_mut().zip(c) {
            *o = vgetq_lane_f32::<0>(value);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> [f32; CHAINS] {
        std::array::from_fn(|i| 1.0 + i as f32)
    }

    #[test]
    fn the_amx_peak_is_measured_where_tiles_run() {
        let peak = measure_amx();
        assert_eq!(peak.is_some(), crate::gemm::amx::peak_available());
        match peak {
            Some(peak) => {
                assert!(
                    peak.threads >= 1 && peak.gflops_per_thread > 0.0,
                    "{peak:?}"
                );
                assert!(peak.gflops >= peak.gflops_per_thread * peak.threads as f64 * 0.999);
            }
            None => eprintln!(
                "skipped: no AMX peak on this CPU: {}",
                crate::gemm::amx::status().reason.as_deref().unwrap_or("")
            ),
        }
    }

    #[test]
    fn the_bf16_dot_chains_run_every_step_they_count() {
        if !bf16_dot_available() {
            eprintln!("skipped: no AVX512-BF16 on this CPU");
            assert!(measure_bf16_dot().is_none());
            return;
        }
        // Every sum is a multiple of 2^-12 below 2^12: exact, so the result counts the
        // steps that ran (an optimised-away loop would not reach it).
        let steps = 10_000;
        let out = run_bf16_dot_chains(start(), steps);
        for (k, (&got, &from)) in out.iter().zip(&start()).enumerate() {
            assert_eq!(got, from + 2.0 * steps as f32 * BF16_DOT_A, "chain {k}");
        }
        let peak = measure_bf16_dot().unwrap();
        assert!(
            peak.threads >= 1 && peak.gflops_per_thread > 0.0,
            "{peak:?}"
        );
    }

    #[test]
    fn every_available_path_computes_the_chains_it_counts() {
        // Each vector path must really run `steps` fused multiply-adds per chain: its
        // result is exactly f32::mul_add iterated, which an optimised-away or unfused
        // loop would not reproduce after a few steps.
        let steps = 1000;
        let mut fused = start();
        for _ in 0..steps {
            for value in fused.iter_mut() {
                *value = A.mul_add(*value, B);
            }
        }
        let mut unfused = start();
        for _ in 0..steps {
            for value in unfused.iter_mut() {
                *value = *value * A + B;
            }
        }
        assert_ne!(
            fused, unfused,
            "the test cannot tell fused from unfused steps"
        );
        let cpu = CpuFeatures::detected();
        for path in [FmaPath::Avx512, FmaPath::Avx2, FmaPath::Neon] {
            let available = match path {
                FmaPath::Avx512 => cfg!(target_arch = "x86_64") && cpu.avx512f,
                FmaPath::Avx2 => cfg!(target_arch = "x86_64") && cpu.avx2 && cpu.fma,
                _ => cfg!(target_arch = "aarch64") && cpu.neon,
            };
            if available {
                assert_eq!(run_chains(path, start(), steps), fused, "{path:?}");
            }
        }
        assert_eq!(
            run_chains(FmaPath::Portable, start(), steps),
            unfused,
            "portable"
        );
    }

    #[test]
    fn the_chains_settle_far_from_overflow_and_subnormals() {
        let settled = run_chains(FmaPath::Portable, start(), 100_000);
        for value in settled {
            let fixed_point = B as f64 / (1.0 - A as f64);
            assert!(
                (value as f64 - fixed_point).abs() < 1e-3,
                "chain settled at {value}, not {fixed_point}"
            );
        }
    }

    #[test]
    fn rates_count_two_operations_per_lane() {
        assert_eq!(gflops(1_000_000_000, 8, 1.0), 16.0);
        assert_eq!(gflops(500_000_000, 1, 0.5), 2.0);
    }

    #[test]
    fn the_measurement_covers_every_thread_of_the_pool() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a pool of two threads");
        let peak = pool.install(|| measure(CpuFeatures::detected()));
        assert_eq!(peak.threads, 2);
        assert!(peak.gflops_per_thread > 0.0 && peak.gflops_per_thread.is_finite());
        assert!(peak.gflops >= 2.0 * peak.gflops_per_thread * 0.999);
        assert_eq!(peak.path, FmaPath::best_for(CpuFeatures::detected()));
    }
}

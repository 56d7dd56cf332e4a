//! The multiply-add ceiling of every path this machine has, on one thread and on all of
//! the pool's threads at once: the figure benchmarks' achieved GFLOP/s are compared with.
//!
//! `cargo run --release -p nlg-judge-kernels --example fma_peak` prints one line per path,
//! e.g. `avx2 fma (256-bit): 1 thread 39.7 GFLOP/s, 2 threads 79.1 GFLOP/s`, and on x86
//! with AVX2 the rate of the int8 products' core instruction pair (`vpmaddwd` then
//! `vpaddd`: sixteen 16-bit products summed in pairs into eight 32-bit sums), in
//! multiply-adds per second next to f32's FMA, the bound on whether int8 can beat f32
//! on this CPU; last, the AMX tiles' bf16 ceiling, or why it cannot be measured here.

use std::time::Instant;

use nlg_judge_kernels::cpu::CpuFeatures;
use nlg_judge_kernels::peak::{measure_amx, measure_path, FmaPath};

fn main() {
    let cpu = CpuFeatures::detected();
    println!("features: {}", cpu.names().join(", "));
    let widest = FmaPath::best_for(cpu);
    for path in [
        FmaPath::Avx512,
        FmaPath::Avx2,
        FmaPath::Neon,
        FmaPath::Portable,
    ] {
        let available = path == FmaPath::Portable
            || (path == widest)
            || (path == FmaPath::Avx2 && widest == FmaPath::Avx512 && cpu.avx2 && cpu.fma);
        if !available {
            continue;
        }
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool of one thread")
            .install(|| measure_path(path));
        let all = measure_path(path);
        println!(
            "{}: 1 thread {:.1} GFLOP/s, {} threads {:.1} GFLOP/s ({:.1} per thread at worst)",
            path.name(),
            one.gflops,
            all.threads,
            all.gflops,
            all.gflops_per_thread
        );
    }
    print_amx_peak();
    #[cfg(target_arch = "x86_64")]
    if cpu.avx2 {
        let fma = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool of one thread")
            .install(|| measure_path(FmaPath::Avx2));
        let steps = 1 << 19;
        // SAFETY: AVX2 was detected just above.
        let best = best_seconds(|| unsafe { madd_chains(steps) });
        let madds = (MADD_CHAINS * steps * 16) as f64 / best / 1e9;
        // SAFETY: AVX2 and FMA were detected (the 256-bit path ran above).
        let best128 = best_seconds(|| unsafe { fma128_chains(steps) });
        let gflops128 = (MADD_CHAINS * steps * 8) as f64 / best128 / 1e9;
        println!(
            "fma (128-bit), 1 thread: {gflops128:.1} GFLOP/s; the 256-bit FMA does {:.2}x that \
             (2 where the FP units are 256 bits wide, 1 where a 256-bit FMA issues as two \
             128-bit halves)",
            fma.gflops / gflops128
        );
        let fma_madds = fma.gflops / 2.0;
        println!(
            "vpmaddwd + vpaddd (int8 products' core), 1 thread: {madds:.1} G multiply-adds/s, \
             {:.2}x f32 FMA's {fma_madds:.1}",
            madds / fma_madds
        );
    }
}

/// The fastest of five timed runs of `run` after an untimed one (seconds).
#[cfg(target_arch = "x86_64")]
fn best_seconds<T>(mut run: impl FnMut() -> T) -> f64 {
    std::hint::black_box(run());
    (0..5)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(run());
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Independent `vpmaddwd` + `vpaddd` chains, as in the int8 AVX2 tiles.
#[cfg(target_arch = "x86_64")]
const MADD_CHAINS: usize = 12;

/// `steps` rounds of [`MADD_CHAINS`] chains `acc += madd(a, b ^ acc)` (the exclusive or
/// keeps the compiler from hoisting the product out of the loop, as real operands would).
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn madd_chains(steps: usize) -> i32 {
    use std::arch::x86_64::*;
    let seed = std::hint::black_box(3i16);
    let (a, b) = (_mm256_set1_epi16(seed), _mm256_set1_epi16(seed + 1));
    let mut acc = [_mm256_setzero_si256(); MADD_CHAINS];
    for (i, value) in acc.iter_mut().enumerate() {
        *value = _mm256_set1_epi32(i as i32);
    }
    for _ in 0..steps {
        for value in acc.iter_mut() {
            let product = _mm256_madd_epi16(a, _mm256_xor_si256(b, *value));
            *value = _mm256_add_epi32(*value, product);
        }
    }
    acc.iter().map(|v| _mm256_extract_epi32::<0>(*v)).sum()
}

/// `steps` rounds of [`MADD_CHAINS`] independent 128-bit FMA chains.
///
/// # Safety
/// The CPU must have FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma128_chains(steps: usize) -> f32 {
    use std::arch::x86_64::*;
    let seed = std::hint::black_box(0.999_123_4f32);
    let (a, b) = (_mm_set1_ps(seed), _mm_set1_ps(0.000_219_3));
    let mut acc = [_mm_setzero_ps(); MADD_CHAINS];
    for (i, value) in acc.iter_mut().enumerate() {
        *value = _mm_set1_ps(1.0 + i as f32);
    }
    for _ in 0..steps {
        for value in acc.iter_mut() {
            *value = _mm_fmadd_ps(a, *value, b);
        }
    }
    acc.iter().map(|v| _mm_cvtss_f32(*v)).sum()
}

/// The AMX line: tile bf16 GFLOP/s on one thread and on all, or why there are none.
fn print_amx_peak() {
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of one thread")
        .install(measure_amx);
    match (one, measure_amx()) {
        (Some(one), Some(all)) => println!(
            "amx tdpbf16ps: 1 thread {:.1} GFLOP/s, {} threads {:.1} GFLOP/s",
            one.gflops, all.threads, all.gflops
        ),
        _ => println!(
            "amx tdpbf16ps: not measured ({})",
            nlg_judge_kernels::gemm::amx::status()
                .reason
                .as_deref()
                .unwrap_or("no tiles")
        ),
    }
}

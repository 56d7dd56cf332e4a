//! Which instruction path each kernel family takes on this machine (with
//! `NLG_JUDGE_CPU` applied), and the CPU features detected.
//!
//! `cargo run -p nlg-judge-kernels --example cpu_paths` prints two lines, e.g.
//! `features: neon, dotprod, bf16, i8mm` and `paths: attention neon, bf16 neon, int8
//! dotprod` (`.ci/aarch64-kernels` checks them under each emulated CPU).

use nlg_judge_kernels::cpu::{self, CpuFeatures};

fn main() {
    if let Err(e) = cpu::requested_level() {
        eprintln!("{e}");
        std::process::exit(2);
    }
    println!("features: {}", CpuFeatures::detected().names().join(", "));
    println!("paths: {}", cpu::paths_used());
}

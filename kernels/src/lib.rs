//! nlg-judge's own compute kernels.
//!
//! The model code in `nlg-judge`'s `src/arch/` calls these through small, slice-based
//! interfaces (no tensors here): this crate knows nothing of models, tasks or candle.
//! Every kernel has a portable fallback and picks its SIMD path at run time from
//! [`cpu::CpuFeatures`], so one binary runs on any x86-64 (or other) machine.

pub mod attention;
pub mod cpu;
pub mod gemm;
pub mod peak;
pub mod pointwise;
pub mod reuse;
pub mod timing;

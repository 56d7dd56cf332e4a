//! Workloads that measure the engine on real data (`nlg-judge bench`, `benches/`): they
//! use the methods' request builders but are not methods, so they live above `judge`.

pub mod calibration;
pub mod generate;
pub mod pairwise;

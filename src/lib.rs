//! nlg-judge: evaluate generated text with local open language models.
//!
//! Layers, from the bottom up (see `SPEC.md` §3 of the design and `docs/architecture.md`):
//! - [`arch`]: our own model code (llama-family, T5) over candle tensors;
//! - [`runtime`]: devices, model cards, weight sources, tokenisers, chat templates;
//! - [`engine`]: the [`engine::Scorer`] interface, batching and prefix sharing;
//! - [`judge`]: the evaluation methods (pairwise, absolute, G-Eval, GPTScore);
//! - [`rank`]: from pairwise outcomes to scores and ranks, positional bias;
//! - [`stats`]: correlations and tests, pure functions over slices;
//! - [`data`]: the generic JSONL format and readers for the shared data sets;
//! - [`figure`]: figures (PNG, SVG) in a bundled font, shared by every report;
//! - [`dhp`]: discernment of hierarchical perturbation (perturb, score, analyse);
//! - [`report`]: the self-contained HTML report of a run;
//! - [`reproduce`]: the comparative-assessment paper's tables and figures;
//! - [`bench`]: workloads measuring the engine on real data (`nlg-judge bench`);
//! - [`server`]: the metrics service (HTTP, one model worker thread);
//! - [`cli`]: the command-line front end.

pub mod allocations;
pub mod arch;
pub mod bench;
pub mod cli;
pub mod data;
pub mod dhp;
pub mod engine;
pub mod figure;
pub mod judge;
pub mod metrics;
pub mod pararef;
pub mod progress;
pub mod rank;
pub mod report;
pub mod reproduce;
pub mod runtime;
pub mod server;
pub mod shard;
pub mod stats;

/// mimalloc instead of the system allocator: every layer allocates and frees
/// multi-megabyte attention temporaries, which glibc hands back to the kernel and
/// page-faults in again each time (measured: attention over an 800-token prefix ran
/// ~1.6x slower with glibc's allocator). Wrapped in a counter ([`allocations`]).
#[global_allocator]
static GLOBAL: allocations::Counting<mimalloc::MiMalloc> =
    allocations::Counting(mimalloc::MiMalloc);

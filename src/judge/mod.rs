//! Evaluation methods: pairwise comparative assessment, absolute prompt scoring, G-Eval
//! and GPTScore. Methods talk to a [`crate::engine::Scorer`], never to tensors.
//!
//! - [`pairwise`]: comparative assessment (templates, designs, the compare runner);
//! - [`absolute`]: the paper's prompt-scoring baseline ("Provide a score between 1 and 10");
//! - [`geval`]: G-Eval with its criteria files and auto chain-of-thought steps;
//! - [`gptscore`]: the likelihood baseline;
//! - [`scale`]: integer score scales read off the model's answer distribution;
//! - [`scoring`]: the cached, resumable runner of the three absolute methods;
//! - [`score_request`]: a scoring run's options as callers name them, checked;
//! - [`diagnostics`]: whether the judge was judging (bias, ties, label mass, steps).

pub mod absolute;
pub mod attribute;
pub mod diagnostics;
pub mod geval;
pub mod gptscore;
pub mod pairwise;
pub mod scale;
pub mod score_request;
pub mod scoring;

pub use attribute::{Attribute, Nouns, Task};
pub use scale::{ScoreDistribution, ScoreScale};
pub use score_request::ScoreRequest;
pub use scoring::{
    resolve_method, run_scoring, score_contexts, write_scored, ResolvedMethod, ScoreMethod,
    ScoreOptions, ScoreRun, ScoredCandidate,
};

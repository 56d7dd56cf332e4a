//! Pairwise comparative assessment: an LLM is asked which of two candidates is better,
//! the probabilities of its answer labels give `p_ij`, and the comparisons are turned into
//! scores and ranks (see [`crate::rank`]).
//!
//! - [`template`]: the paper's prompts and user templates, and the label request;
//! - [`design`]: which pairs to compare;
//! - [`request`]: a run's options as callers name them, checked;
//! - [`prior`]: absolute scores as experts beside the comparisons;
//! - [`run`]: the cached, resumable runner and its outputs.

pub mod adaptive;
pub mod design;
pub mod fit;
pub mod prior;
pub mod request;
pub mod run;
pub mod template;

pub use adaptive::{AdaptiveSelector, AdaptiveSettings, Ending, StopRule};
pub use design::Design;
pub use prior::PriorScores;
pub use request::CompareRequest;
pub use run::{
    run_compare, show_first_prompt, summarise, write_comparisons, write_scores, CompareOptions,
    CompareResult, Comparison, ContextResult, Debias,
};
pub use template::{first_wins, Fill, PairwiseTemplate};

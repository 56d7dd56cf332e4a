//! The scoring engine: request types, the [`Scorer`] trait, and its implementations.
//!
//! Methods build requests; scorers turn them into model calls (tokenisation, chat
//! templates, batching, prefix sharing) and return log-probabilities or text.

pub mod cache;
pub mod decoder;
pub mod mock;
pub mod request;
pub mod sampling;
pub mod scorer;
pub mod t5_scorer;
pub mod tree_eval;
pub mod trie;

pub use cache::{CacheKey, ResultCache};
pub use decoder::{DecoderScorer, DecoderSettings, Strategy};
pub use mock::MockScorer;
pub use request::*;
pub use scorer::{Conventions, ModelInfo, ModelKind, RenderedPrompt, Scorer};
pub use t5_scorer::T5Scorer;
pub use tree_eval::{BatchBudget, EvalStats};

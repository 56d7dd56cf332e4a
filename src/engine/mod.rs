//! The scoring engine: request types, the [`Scorer`] trait, and its implementations.
//!
//! Methods build requests; scorers turn them into model calls (tokenisation, chat
//! templates, batching, prefix sharing) and return log-probabilities or text.

pub mod mock;
pub mod request;
pub mod sampling;
pub mod scorer;
pub mod t5_scorer;

pub use mock::MockScorer;
pub use request::*;
pub use scorer::{Conventions, ModelInfo, ModelKind, RenderedPrompt, Scorer};
pub use t5_scorer::T5Scorer;

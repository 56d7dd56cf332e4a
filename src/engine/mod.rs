//! The scoring engine: request types, the [`Scorer`] trait, and its implementations.
//!
//! Methods build requests; scorers turn them into model calls (tokenisation, chat
//! templates, batching, prefix sharing) and return log-probabilities or text.

pub mod cache;
pub mod mock;
pub mod request;
pub mod scorer;

pub use cache::{CacheKey, ResultCache};
pub use mock::MockScorer;
pub use request::*;
pub use scorer::{Conventions, ModelInfo, ModelKind, RenderedPrompt, Scorer};

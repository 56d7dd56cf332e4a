//! The scoring engine: request types, the [`Scorer`] trait, and its implementations.
//!
//! Methods build requests; scorers turn them into model calls (tokenisation, chat
//! templates, batching, prefix sharing) and return log-probabilities or text.

pub mod cache;
pub mod cache_fault;
pub mod cache_pages;
pub mod cache_repair;
pub mod cache_writer;
pub mod completion;
pub mod decoder;
pub mod error;
pub mod generation;
pub mod load;
pub mod memory;
pub mod mock;
pub mod remote;
pub mod request;
pub mod runner;
pub mod sampling;
pub mod scorer;
pub mod t5_scorer;
pub mod templating;

pub use cache::{CacheKey, ResultCache};
pub use cache_fault::{cache_fault, CacheFault};
pub use completion::{
    ChatMessage, ChatRole, CompletionRequest, CompletionResult, ScoredToken, TokenLogprob,
    TokenPiece, MAX_TOP_LOGPROBS,
};
pub use decoder::prefix_cache::{PrefixCache, PrefixCacheStats};
pub use decoder::tree_eval::{BatchBudget, EvalStats};
pub use decoder::{DecoderScorer, DecoderSettings, GenerationStats, Strategy};
pub use error::{error_kind, EngineError, ErrorKind};
pub use generation::{Generate, GenerationSink};
pub use load::{load_decoder, load_resolved, load_scorer, load_t5, model_info, LoadOptions};
pub use mock::MockScorer;
pub use request::*;
pub use runner::{
    fill_together, generate_cached, generate_cached_all, plan_label, plan_labels, GeneratedCounts,
    GenerationReader, LabelPlan, PlannedLabel,
};
pub use scorer::{Conventions, ModelInfo, ModelKind, RenderedPrompt, Scorer};
pub use t5_scorer::T5Scorer;

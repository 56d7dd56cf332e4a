//! T5 / FlanT5 encoder-decoder (T5 v1.0 and v1.1 as transformers' `config.json` describes
//! them), written for scoring: right-padded encoder batches with attention masks, a
//! decoder over a caller-owned key/value cache, and an output head that scores a few
//! token ids or the whole vocabulary.
//!
//! Usage: [`T5Config::from_file`], [`WeightFiles::find`], [`T5Model::from_files`]; then
//! [`T5Model::encode`] a batch, [`T5Model::start_decoder`] on its output, and
//! [`T5Model::decode`] token chunks, reading [`T5Model::token_logprobs`] at the
//! positions of interest.

mod cache;
mod config;
mod layers;
mod model;
mod weights;

pub use cache::DecoderCache;
pub use config::{Activation, FeedForwardKind, T5Config};
pub use layers::relative_position_bucket;
pub use model::{pad_batch, EncoderOutput, Side, T5Model};
pub use weights::{WeightFiles, INDEX_FILE, SINGLE_FILE};

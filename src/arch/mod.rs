//! Our own model code over candle tensors: llama-family decoders and T5.
//!
//! Models know nothing of tasks: they take token batches (with padding masks and, for
//! decoders, caller-owned key/value caches) and return hidden states or logits at the
//! positions asked for.

pub mod bert;
pub mod linear;
pub mod llama;

pub use linear::{Linear, Precision, WeightPolicy};
pub mod t5;

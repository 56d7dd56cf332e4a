//! Evaluation methods: pairwise comparative assessment, absolute prompt scoring, G-Eval
//! and GPTScore. Methods talk to a [`crate::engine::Scorer`], never to tensors.

pub mod attribute;
pub mod pairwise;

pub use attribute::{Attribute, Task};

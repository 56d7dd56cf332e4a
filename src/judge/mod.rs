//! Evaluation methods: pairwise comparative assessment, absolute prompt scoring, G-Eval
//! and GPTScore. Methods talk to a [`crate::engine::Scorer`], never to tensors.

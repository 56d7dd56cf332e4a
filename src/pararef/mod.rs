//! Para-Ref (Tang et al., "Not All Metrics Are Guilty: Improving NLG Evaluation with LLM
//! Paraphrasing"): expand each human reference into many references with a local LM's
//! paraphrases, then score candidates against all of them with a reference-based metric.
//!
//! - [`input`]: the JSONL rows metrics read (one reference or a list) and the paraphrase
//!   files written by `nlg-judge paraphrase`;
//! - [`prompts`]: the paper's basic prompt and its ten diverse instructions;
//! - [`clean`]: turning a chat model's answer into a bare paraphrase;
//! - [`generate`]: batched, seeded, cached and resumable paraphrasing with retries.

pub mod clean;
pub mod datasets;
pub mod evaluate;
pub mod experiment;
pub mod generate;
pub mod input;
pub mod metric_table;
pub mod prompts;
pub mod report;

pub use generate::{paraphrase_references, ParaphraseOptions, ParaphraseReport};
pub use input::{read_metric_rows, read_paraphrases, reference_id, MetricRow, ParaphraseRow};
pub use prompts::PromptSet;

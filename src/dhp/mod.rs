//! DHP (Discernment of Hierarchical Perturbation): does a judge model score good text
//! above degraded copies of it? High-quality references are perturbed at three levels
//! (character, word, sentence), originals and copies are scored independently, and
//! one-sided Wilcoxon tests turn the score differences into discernment scores.
//!
//! - [`task`]: the tasks, their metrics and perturbations (the paper's Tables 1 and 2);
//! - [`weights`]: expert weights per perturbation and metric;
//! - [`items`]: the texts to perturb, read from the shared data sets;
//! - [`rules`], [`typo`]: rule-based perturbations (seeded);
//! - [`llm`]: LLM-based perturbations (auto-CoT prompts, seeded sampling, retries);
//! - [`perturb`]: the perturbation run (resumable JSONL);
//! - [`score`]: the judge rates originals and perturbed copies;
//! - [`analyze`]: tests, combined p-values and discernment scores (pure functions);
//! - [`report`]: Markdown tables and the Figure-4-like bar chart.

pub mod analyze;
pub mod items;
pub mod llm;
pub mod perturb;
pub mod report;
pub mod rules;
pub mod score;
pub mod task;
pub mod typo;
pub mod weights;

pub use analyze::{analyze, parse_score_rows, Analysis, PerturbationResult, ScoreRow, ORIGINAL};
pub use task::{Degree, DhpTask, Kind, Level, LlmEdit, Method, Perturbation};
pub use weights::Weights;

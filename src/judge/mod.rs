//! Evaluation methods: pairwise comparative assessment, absolute prompt scoring, G-Eval,
//! GPTScore and rubric grading. Methods talk to a [`crate::engine::Scorer`], never to tensors.
//!
//! - [`pairwise`]: comparative assessment (templates, designs, the compare runner);
//! - [`absolute`]: the paper's prompt-scoring baseline ("Provide a score between 1 and 10");
//! - [`geval`]: G-Eval with its criteria files and auto chain-of-thought steps;
//! - [`gptscore`]: the likelihood baseline;
//! - [`rubric`]: rubric grading in each judge model's own format (Prometheus 2,
//!   Flow-Judge, our plain one): feedback, then the score read after the result marker;
//! - [`scale`]: integer score scales read off the model's answer distribution;
//! - [`scoring`]: the cached, resumable runner of the absolute methods;
//! - [`score_request`]: a scoring run's options as callers name them, checked;
//! - [`diagnostics`]: whether the judge was judging (bias, ties, label mass, steps,
//!   format).

pub mod absolute;
pub mod attribute;
pub mod diagnostics;
pub mod geval;
pub mod gptscore;
pub mod jury;
pub mod pairwise;
pub mod rubric;
pub mod scale;
pub mod score_request;
pub mod scoring;

pub use attribute::{Attribute, Nouns, Task};
pub use scale::{ScoreDistribution, ScoreScale};
pub use score_request::{RubricChoice, RubricRequest, ScoreRequest};
pub use scoring::{
    resolve_method, run_scoring, score_contexts, write_run, write_scored, ResolvedMethod,
    RubricOptions, ScoreMethod, ScoreOptions, ScoreRun, ScoredCandidate,
};

/// Test helper: assert that `parts` occur in `text` in order, each after the one before;
/// returns the byte where the last one ends.
#[cfg(test)]
pub(crate) fn assert_in_order(text: &str, parts: &[&str]) -> usize {
    let mut at = 0;
    for part in parts {
        let found = text[at..]
            .find(part)
            .unwrap_or_else(|| panic!("{part:?} not after byte {at} in {text}"));
        at += found + part.len();
    }
    at
}

/// The contexts whose requests are not all answered, for an error: `` `id` (k of n
/// missing)``, the first few by name.
pub(crate) fn unfinished<'a>(
    contexts: &[crate::data::Context],
    plans: impl Iterator<Item = &'a crate::engine::LabelPlan>,
) -> String {
    const NAMED: usize = 5;
    let open: Vec<String> = contexts
        .iter()
        .zip(plans)
        .filter(|(_, plan)| plan.missing() > 0)
        .map(|(context, plan)| {
            format!(
                "`{}` ({} of {} missing)",
                context.id,
                plan.missing(),
                plan.len()
            )
        })
        .collect();
    match open.len() {
        0 => "every context answered".to_string(),
        n if n <= NAMED => format!("unanswered: {}", open.join(", ")),
        n => format!(
            "unanswered: {}, and {} more",
            open[..NAMED].join(", "),
            n - NAMED
        ),
    }
}

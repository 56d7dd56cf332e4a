//! `bench generate`: rubric grading with feedback on SummEval documents, the workload of
//! the generation route (issue 58): every candidate's feedback written, then its score
//! read after the marker, as `score --method rubric` runs it (no result cache, so all of
//! it is computed). Reports the route's figures (prompt tokens asked and computed, rows
//! per decoding step, prefill, decode and scoring seconds, peak memory) and the
//! feedbacks, to compare a later run with (another row budget, one at a time).

use std::time::Instant;

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::pairwise::peak_rss_bytes;
use crate::data::Context;
use crate::engine::{BatchBudget, DecoderScorer, DecoderSettings, GenerationStats};
use crate::judge::rubric::run::RubricMethod;
use crate::judge::{run_scoring, ResolvedMethod};
use crate::progress::Progress;

/// One run of the workload.
#[derive(Debug, Clone, Serialize)]
pub struct GenerateBench {
    pub candidates: usize,
    /// Rows a decoding step may carry (`max_batch_rows`); 1: one prompt at a time.
    pub rows_at_once: usize,
    pub seconds: f64,
    pub stats: GenerationStatsJson,
    /// Seconds outside the generation route: the scores' trie reads (none when every
    /// score was read from its feedback's state), the readings, the rankings.
    pub seconds_score: f64,
    /// Seconds of the whole run in the layers' matrix products and in the attention
    /// kernel (the forward passes' own split, `arch::llama::time_split`; both 0 where
    /// the passes ran through tensors): what is left is the output head, sampling and
    /// the bookkeeping around the passes.
    pub seconds_products: f64,
    pub seconds_attention: f64,
    pub peak_rss_bytes: Option<u64>,
    pub feedbacks: SavedFeedbacks,
}

/// [`GenerationStats`] as JSON fields.
#[derive(Debug, Clone, Serialize)]
pub struct GenerationStatsJson {
    pub prompt_tokens: usize,
    pub prompt_tokens_computed: usize,
    pub generated_tokens: usize,
    pub decode_steps: usize,
    pub rows_per_step: f64,
    /// Whether decoding rows kept their keys tiled for the attention kernel.
    pub tiled_keys: bool,
    pub follow_ups: usize,
    pub follow_up_tokens: usize,
    pub seconds_prefill: f64,
    pub seconds_decode: f64,
    pub seconds_step: f64,
    pub decode_tokens_per_second: f64,
}

impl From<GenerationStats> for GenerationStatsJson {
    fn from(s: GenerationStats) -> Self {
        Self {
            prompt_tokens: s.prompt_tokens,
            prompt_tokens_computed: s.prompt_tokens_computed,
            generated_tokens: s.generated_tokens,
            decode_steps: s.decode_steps,
            rows_per_step: s.decode_rows as f64 / s.decode_steps.max(1) as f64,
            tiled_keys: s.tiled_keys,
            follow_ups: s.follow_ups,
            follow_up_tokens: s.follow_up_tokens,
            seconds_prefill: s.prefill_seconds,
            seconds_decode: s.decode_seconds,
            seconds_step: s.step_seconds,
            decode_tokens_per_second: s.generated_tokens as f64
                / (s.decode_seconds + s.step_seconds).max(1e-9),
        }
    }
}

/// Every candidate's feedback and score, in input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedFeedbacks {
    pub fingerprint: String,
    pub feedbacks: Vec<String>,
    pub scores: Vec<f64>,
}

/// How two runs' feedbacks and scores compare.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FeedbackAgreement {
    pub feedbacks: usize,
    pub same_text: usize,
    pub max_score_difference: f64,
}

/// Compare `run` with a saved `reference` of the same model and candidates.
pub fn feedback_agreement(
    reference: &SavedFeedbacks,
    run: &SavedFeedbacks,
) -> Result<FeedbackAgreement> {
    anyhow::ensure!(
        reference.fingerprint == run.fingerprint,
        "the saved feedbacks come from other weights"
    );
    anyhow::ensure!(
        reference.feedbacks.len() == run.feedbacks.len(),
        "the saved run has {} feedbacks, this one {} (use the same --docs and --candidates)",
        reference.feedbacks.len(),
        run.feedbacks.len()
    );
    Ok(FeedbackAgreement {
        feedbacks: run.feedbacks.len(),
        same_text: reference
            .feedbacks
            .iter()
            .zip(&run.feedbacks)
            .filter(|(a, b)| a == b)
            .count(),
        max_score_difference: reference
            .scores
            .iter()
            .zip(&run.scores)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max),
    })
}

/// Grade every candidate of `contexts` with `method` (feedback first), `rows_at_once`
/// rows per decoding step, nothing cached.
pub fn bench_generate(
    scorer: &mut DecoderScorer,
    contexts: &[Context],
    method: &RubricMethod,
    rows_at_once: usize,
) -> Result<GenerateBench> {
    let mut settings: DecoderSettings = scorer.settings();
    settings.budget = BatchBudget {
        max_batch_rows: rows_at_once.max(1),
        ..settings.budget
    };
    scorer.set_settings(settings);
    scorer.reset_stats();
    super::pairwise::reset_peak_rss();
    crate::arch::llama::time_split::start();
    let start = Instant::now();
    let resolved = ResolvedMethod::Rubric(method.clone());
    let run = if rows_at_once == 1 {
        // One prompt at a time: each candidate's grading its own call, as a loop over
        // candidates would run it.
        let mut runs = Vec::new();
        for context in contexts {
            for candidate in &context.candidates {
                let alone = Context {
                    candidates: vec![candidate.clone()],
                    ..context.clone()
                };
                runs.push(run_scoring(
                    scorer,
                    std::slice::from_ref(&alone),
                    &resolved,
                    &Progress::none(),
                    None,
                )?);
            }
        }
        runs.into_iter()
            .flat_map(|r| r.candidates)
            .collect::<Vec<_>>()
    } else {
        run_scoring(scorer, contexts, &resolved, &Progress::none(), None)?.candidates
    };
    let seconds = start.elapsed().as_secs_f64();
    let recorded = crate::arch::llama::time_split::finish();
    let stats = scorer.generation_stats();
    let inside = stats.prefill_seconds + stats.decode_seconds + stats.step_seconds;
    let feedbacks = SavedFeedbacks {
        fingerprint: crate::engine::Scorer::info(scorer).fingerprint.clone(),
        feedbacks: run
            .iter()
            .map(|c| c.feedback.clone().context("a candidate without feedback"))
            .collect::<Result<_>>()?,
        scores: run.iter().map(|c| c.score).collect(),
    };
    Ok(GenerateBench {
        candidates: run.len(),
        rows_at_once: rows_at_once.max(1),
        seconds,
        stats: stats.into(),
        seconds_score: (seconds - inside).max(0.0),
        seconds_products: recorded.products.as_secs_f64(),
        seconds_attention: recorded.attention.as_secs_f64(),
        peak_rss_bytes: peak_rss_bytes(),
        feedbacks,
    })
}

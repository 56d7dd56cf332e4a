//! `--precision bf16|int8` on the real SmolLM2: label probabilities close to f32's on
//! SummEval comparisons, the same numbers for 1 and 2 threads, and a result-cache identity
//! of their own.
//!
//! Tolerances: over all 480 comparisons of SummEval documents 0 and 1 (docs/results.md,
//! "Reduced precision") the largest |p - p_f32| was 0.013 for bf16 and 0.063 for int8
//! (scales per block of 32); the bounds below are 0.03 and 0.12, room for other prompts
//! yet far below what a wrong weight layout or scale gives (p off by 0.3-1).

use crate::common;

use anyhow::Result;
use nlg_judge::arch::Precision;
use nlg_judge::bench::pairwise::summeval_contexts;
use nlg_judge::engine::{BatchBudget, DecoderSettings, LabelRequest, Scorer, Strategy};
use nlg_judge::judge::pairwise::first_wins;
use nlg_judge::judge::pairwise::run::{pairwise_labels, plan_context};
use nlg_judge::judge::pairwise::{CompareOptions, Design, PairwiseTemplate};
use nlg_judge::judge::{Attribute, Task};

fn settings() -> DecoderSettings {
    DecoderSettings {
        strategy: Strategy::Tree,
        budget: BatchBudget {
            max_batch_tokens: 2048,
            max_batch_rows: 64,
            ..BatchBudget::default()
        },
    }
}

/// Twelve comparisons (4 candidates, all ordered pairs) of the first SummEval document.
fn requests(scorer: &dyn Scorer) -> Result<Vec<LabelRequest>> {
    let mut context = summeval_contexts(&common::shared_data_dir(), 1)?.remove(0);
    context.candidates.truncate(4);
    let mut options = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence")?,
        PairwiseTemplate::builtin("c1", Task::Summary)?,
    );
    options.design = Design::Full;
    let labels = pairwise_labels(scorer)?;
    Ok(plan_context(scorer, &context, &options, &labels)?
        .labels
        .requests()
        .to_vec())
}

fn p_first(scorer: &mut dyn Scorer, requests: &[LabelRequest]) -> Result<Vec<f64>> {
    scorer
        .label_logprobs(requests)?
        .iter()
        .map(|r| Ok(first_wins(r)?.0))
        .collect()
}

#[test]
fn reduced_precision_probabilities_stay_close_to_f32() -> Result<()> {
    let mut f32_scorer = common::smollm2_scorer_at(settings(), Precision::F32);
    let requests = requests(&f32_scorer)?;
    let reference = p_first(&mut f32_scorer, &requests)?;
    let fingerprint = f32_scorer.info().fingerprint.clone();
    drop(f32_scorer);
    for (precision, tolerance) in [(Precision::Bf16, 0.03), (Precision::Int8, 0.12)] {
        let mut scorer = common::smollm2_scorer_at(settings(), precision);
        assert_ne!(scorer.info().fingerprint, fingerprint, "{precision:?}");
        assert!(scorer.info().fingerprint.starts_with(&fingerprint));
        let pool = |threads| rayon::ThreadPoolBuilder::new().num_threads(threads).build();
        let one = pool(1)?.install(|| p_first(&mut scorer, &requests))?;
        let two = pool(2)?.install(|| p_first(&mut scorer, &requests))?;
        assert_eq!(one, two, "{precision:?}: 1 and 2 threads differ");
        let worst = reference
            .iter()
            .zip(&one)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        eprintln!("{precision:?}: largest |p - p_f32| = {worst:.4}");
        assert!(worst <= tolerance, "{precision:?}: {worst} > {tolerance}");
    }
    Ok(())
}

//! Paraphrasing: retries and failure counts with a scripted model, cache reuse (a run
//! resumed after an interruption computes only what is missing and equals an
//! uninterrupted run), determinism under a seed on the real SmolLM2, and named errors for
//! bad input.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Result;
use nlg_judge::engine::{DecoderSettings, MockScorer, ResultCache};
use nlg_judge::pararef::{paraphrase_references, ParaphraseOptions, PromptSet};

fn options(n: usize) -> ParaphraseOptions {
    ParaphraseOptions {
        n,
        max_retries: 2,
        batch_size: 4,
        ..ParaphraseOptions::default()
    }
}

#[test]
fn preamble_only_answers_are_retried_then_counted_as_failed() -> Result<()> {
    // The voice instruction always gets a bare preamble; the tense instruction gets one
    // on its first call only; the others a preamble and a sentence.
    let tense_calls = Arc::new(AtomicUsize::new(0));
    let counter = tense_calls.clone();
    let mut mock = MockScorer::new().with_generation(move |prompt: &str| {
        Ok(if prompt.contains("Change the voice") {
            "Here is the paraphrased text:".to_string()
        } else if prompt.contains("Change the tense") && counter.fetch_add(1, Ordering::SeqCst) == 0
        {
            "Sure!".to_string()
        } else {
            "Here is the paraphrase: \"A cat sat.\"".to_string()
        })
    });
    let refs = vec!["The cat sat.".to_string()];
    let (rows, report) =
        paraphrase_references(&mut mock, None, &refs, &options(5), &mut |_, _| {})?;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].failed, 1);
    assert_eq!(rows[0].paraphrases, vec!["A cat sat."; 4]);
    assert_eq!(report.failed, 1);
    // Voice: 1 + 2 retries rejected; tense: 1 rejected.
    assert_eq!(report.rejected, 4);
    assert_eq!(report.generated, 5 + 3);
    Ok(())
}

#[test]
fn a_resumed_run_reuses_the_cache_and_equals_a_full_run() -> Result<()> {
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let refs: Vec<String> = [
        "The committee approved the budget after a long debate.",
        "Heavy rain caused flooding in several villages.",
    ]
    .map(String::from)
    .to_vec();
    let opts = options(3);
    let (full, _) = paraphrase_references(&mut scorer, None, &refs, &opts, &mut |_, _| {})?;
    let (again, _) = paraphrase_references(&mut scorer, None, &refs, &opts, &mut |_, _| {})?;
    assert_eq!(full, again, "same seed, different paraphrases");
    assert!(full.iter().all(|r| !r.paraphrases.is_empty()));
    let other_seed = ParaphraseOptions {
        seed: 99,
        ..opts.clone()
    };
    let (other, _) = paraphrase_references(&mut scorer, None, &refs, &other_seed, &mut |_, _| {})?;
    assert_ne!(full, other, "the seed changes nothing");

    let cache = ResultCache::in_memory()?;
    // The "interrupted" run got through the first reference only.
    let (_, first) =
        paraphrase_references(&mut scorer, Some(&cache), &refs[..1], &opts, &mut |_, _| {})?;
    assert_eq!(first.cached, 0);
    let (resumed, report) =
        paraphrase_references(&mut scorer, Some(&cache), &refs, &opts, &mut |_, _| {})?;
    assert_eq!(resumed, full);
    assert!(report.cached >= 3, "{report:?}");
    Ok(())
}

#[test]
fn bad_input_is_named() {
    let mut mock = MockScorer::new();
    let error = paraphrase_references(
        &mut mock,
        None,
        &["fine".to_string(), "  ".to_string()],
        &options(2),
        &mut |_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("reference 1 is empty"), "{error}");
    let error = "creative".parse::<PromptSet>().unwrap_err().to_string();
    assert!(error.contains("unknown prompt set 'creative'"), "{error}");
}

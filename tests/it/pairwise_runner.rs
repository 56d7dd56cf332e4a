//! The compare runner end to end through the library API, with a scripted model.
//!
//! The mock reads the two candidates from the rendered prompt; each candidate text ends
//! in its true quality (`... q=0.7`), and the mock answers
//! `p_A = sigma(4 (q_A - q_B) + bias)` with the labels carrying 80% of the mass.

use anyhow::anyhow;
use nlg_judge::data::Context;
use nlg_judge::engine::{Conventions, MockScorer, ModelInfo, ModelKind, ResultCache};
use nlg_judge::judge::pairwise::{
    run_compare, show_first_prompt, write_comparisons, write_scores, CompareOptions, CompareResult,
    Debias, Design, PairwiseTemplate,
};
use nlg_judge::judge::{Attribute, Task};
use nlg_judge::rank::RankMethod;

use crate::common::contexts::{quality_after, sigmoid};

use crate::common::contexts::scored_contexts as contexts;

/// A mock answering by quality difference with a first-position `bias`, failing once it
/// has answered `fail_after` requests (a kill in the middle of a run).
fn mock(bias: f64, fail_after: Option<usize>) -> MockScorer {
    let mut answered = 0;
    MockScorer::new().with_labels(move |prompt, labels| {
        if Some(answered) == fail_after {
            return Err(anyhow!("simulated crash after {answered} comparisons"));
        }
        answered += 1;
        assert_eq!(labels, [" A", " B"]);
        let p = sigmoid(
            4.0 * (quality_after(prompt, "Summary A: ")? - quality_after(prompt, "Summary B: ")?)
                + bias,
        );
        Ok(vec![(0.8 * p).ln(), (0.8 * (1.0 - p)).ln()])
    })
}

fn three_contexts() -> Vec<Context> {
    contexts(&[
        &[0.3, 0.9, 0.1, 0.5, 0.7],
        &[0.8, 0.2, 0.6, 0.4, 0.0],
        &[0.5, 0.15, 0.95, 0.35, 0.75],
    ])
}

fn options() -> CompareOptions {
    CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence").unwrap(),
        PairwiseTemplate::builtin("c1", Task::Summary).unwrap(),
    )
}

fn outputs(result: &CompareResult) -> (Vec<u8>, Vec<u8>) {
    let mut scores = Vec::new();
    write_scores(result, &[], &mut scores).unwrap();
    let mut comparisons = Vec::new();
    write_comparisons(result, &mut comparisons).unwrap();
    (scores, comparisons)
}

/// Ranks 1..n by descending quality, per context.
fn true_ranks(context: &Context) -> Vec<f64> {
    let q: Vec<f64> = context
        .candidates
        .iter()
        .map(|c| c.scores["coherence"])
        .collect();
    q.iter()
        .map(|&x| 1.0 + q.iter().filter(|&&y| y > x).count() as f64)
        .collect()
}

#[test]
fn full_design_recovers_the_true_ranking_with_every_method() {
    let data = three_contexts();
    for method in [
        RankMethod::WinRatio,
        RankMethod::Soft,
        RankMethod::BradleyTerry,
        RankMethod::Poe,
    ] {
        let mut scorer = mock(0.0, None);
        let calls = scorer.calls();
        let mut opts = options();
        opts.rank = method;
        let result = run_compare(&mut scorer, &data, &opts, None).unwrap();
        assert_eq!(calls.labels(), 3 * 20);
        assert_eq!(
            calls.label_calls(),
            1,
            "one scorer call (one trie) for the run"
        );
        assert_eq!((result.computed, result.cached), (60, 0));
        for (context, got) in data.iter().zip(&result.contexts) {
            assert_eq!(got.ranks, true_ranks(context), "{method:?} {}", context.id);
            assert_eq!(got.comparisons.len(), 20);
            let c = got.comparisons[0];
            assert!((c.label_mass - 0.8).abs() < 1e-12);
        }
        // Unbiased, noiseless: every order agrees and every decision matches the humans.
        assert_eq!(result.consistency.value(), Some(1.0));
        assert_eq!(result.accuracy.unwrap().value(), Some(1.0));
        assert_eq!(result.first_position.value(), Some(0.5));
        assert_eq!(result.score_field.as_deref(), Some("coherence"));
    }
}

#[test]
fn output_lines_follow_input_order_with_fixed_formats() {
    let data = contexts(&[&[0.2, 0.6, 0.4]]);
    let result = run_compare(&mut mock(0.0, None), &data, &options(), None).unwrap();
    let (scores, comparisons) = outputs(&result);
    let scores = String::from_utf8(scores).unwrap();
    // Win ratios by hand: sys1 wins all 4, sys2 2 of 4, sys0 none.
    assert_eq!(
        scores,
        "{\"context_id\":\"doc0\",\"candidate_id\":\"sys0\",\"score\":0.000000,\"rank\":3}\n\
         {\"context_id\":\"doc0\",\"candidate_id\":\"sys1\",\"score\":1.000000,\"rank\":1}\n\
         {\"context_id\":\"doc0\",\"candidate_id\":\"sys2\",\"score\":0.500000,\"rank\":2}\n"
    );
    let comparisons = String::from_utf8(comparisons).unwrap();
    let lines: Vec<&str> = comparisons.lines().collect();
    assert_eq!(lines.len(), 6);
    // (sys0, sys1): p = sigma(4 * (0.2 - 0.6)) = 0.167982...
    assert_eq!(
        lines[0],
        "{\"context_id\":\"doc0\",\"a\":\"sys0\",\"b\":\"sys1\",\"p_a\":0.167982,\"label_mass\":8.00000e-1}"
    );
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(value["p_a"].is_f64() && value["label_mass"].is_f64());
    }
    // The table lists candidates best first, with the context's statistics.
    let table = nlg_judge::cli::compare_table::format_tables(&result, &data);
    let at = |id: &str| table.find(&format!("  {id}  ")).unwrap();
    assert!(
        at("sys1") < at("sys2") && at("sys2") < at("sys0"),
        "{table}"
    );
    assert!(table.contains("context doc0: P(A) 0.500, consistency 1.000, accuracy 1.000"));
    // Each row shows the start of the candidate's text after its id.
    let row = table.lines().find(|l| l.contains("  sys1  ")).unwrap();
    assert!(row.ends_with("summary 1 of doc 0 q=0.6"), "{row}");
    assert!(row.trim_start().starts_with("1  "), "{row}");
    assert!(table.contains("positional bias: the first candidate of a pair won 0.500"));
}

#[test]
fn a_killed_run_resumes_from_the_cache_and_writes_the_same_bytes() {
    let data = three_contexts();
    let mut opts = options();
    opts.design = Design::NoRepeat;
    opts.comparisons = Some(8);
    opts.rank = RankMethod::BradleyTerry;
    opts.debias = Debias::Threshold;
    let reference = run_compare(&mut mock(-0.7, None), &data, &opts, None).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.sqlite");
    let killed_after = 13;
    {
        let cache = ResultCache::open(&path).unwrap();
        let error = run_compare(
            &mut mock(-0.7, Some(killed_after)),
            &data,
            &opts,
            Some(&cache),
        )
        .unwrap_err();
        let chain = format!("{error:#}");
        // One call for the run: the error names the contexts left without answers.
        assert!(
            chain.contains("simulated crash")
                && chain.contains("unanswered: `doc1` (3 of 8 missing), `doc2` (8 of 8 missing)"),
            "{chain}"
        );
        assert_eq!(cache.len().unwrap(), killed_after);
    }
    let cache = ResultCache::open(&path).unwrap();
    let mut scorer = mock(-0.7, None);
    let calls = scorer.calls();
    let resumed = run_compare(&mut scorer, &data, &opts, Some(&cache)).unwrap();
    assert_eq!(calls.labels(), 3 * 8 - killed_after);
    assert_eq!(
        (resumed.computed, resumed.cached),
        (3 * 8 - killed_after, killed_after)
    );
    assert_eq!(outputs(&resumed), outputs(&reference));

    // A third run asks the model nothing.
    let mut scorer = mock(-0.7, None);
    let calls = scorer.calls();
    let again = run_compare(&mut scorer, &data, &opts, Some(&cache)).unwrap();
    assert_eq!(calls.labels(), 0);
    assert_eq!(outputs(&again), outputs(&reference));
}

#[test]
fn the_cache_is_keyed_by_model_and_template() {
    let data = contexts(&[&[0.2, 0.6, 0.4]]);
    let cache = ResultCache::in_memory().unwrap();
    run_compare(&mut mock(0.0, None), &data, &options(), Some(&cache)).unwrap();

    let mut other_model = mock(0.0, None).with_info(ModelInfo {
        name: "other".into(),
        architecture: "mock".into(),
        kind: ModelKind::DecoderOnly,
        fingerprint: "other-weights".into(),
        context_window: 1 << 20,
        conventions: Conventions::default(),
    });
    let calls = other_model.calls();
    run_compare(&mut other_model, &data, &options(), Some(&cache)).unwrap();
    assert_eq!(calls.labels(), 6);

    let mut scorer = mock(0.0, None);
    let calls = scorer.calls();
    let mut c2 = options();
    c2.template = PairwiseTemplate::builtin("c2", Task::Summary).unwrap();
    run_compare(&mut scorer, &data, &c2, Some(&cache)).unwrap();
    assert_eq!(calls.labels(), 6);
    assert_eq!(cache.len().unwrap(), 18);
}

#[test]
fn threshold_debiasing_balances_a_biased_model() {
    let data = three_contexts();
    let mut opts = options();
    let biased = run_compare(&mut mock(1.5, None), &data, &opts, None).unwrap();
    let raw = biased.first_position.value().unwrap();
    assert!(raw > 0.7, "P(A) {raw}");

    opts.debias = Debias::Threshold;
    let debiased = run_compare(&mut mock(1.5, None), &data, &opts, None).unwrap();
    assert!(debiased.tau > 0.5);
    assert_eq!(debiased.first_position_raw, biased.first_position);
    assert_eq!(debiased.first_position.value(), Some(0.5));
    let before = biased.accuracy.unwrap().value().unwrap();
    let after = debiased.accuracy.unwrap().value().unwrap();
    assert!(after > before, "accuracy {before} -> {after}");
    assert!(debiased.consistency.value().unwrap() > biased.consistency.value().unwrap());
}

#[test]
fn duplicate_prompts_are_asked_once() {
    let mut data = contexts(&[&[0.2, 0.6, 0.4]]);
    data[0].candidates[2].text = data[0].candidates[0].text.clone();
    let mut scorer = mock(0.0, None);
    let calls = scorer.calls();
    let result = run_compare(&mut scorer, &data, &options(), None).unwrap();
    // Candidates 0 and 2 read the same, so (0,1) = (2,1), (1,0) = (1,2), (0,2) = (2,0).
    assert_eq!(calls.labels(), 3);
    assert_eq!(result.computed, 3);
    assert_eq!(result.contexts[0].comparisons.len(), 6);
}

#[test]
fn symmetric_and_random_designs_compare_the_requested_number() {
    let data = contexts(&[&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]);
    for (design, r) in [(Design::Symmetric, 10), (Design::Random, 7)] {
        let mut opts = options();
        opts.design = design;
        opts.comparisons = Some(r);
        opts.seed = 5;
        let mut scorer = mock(0.0, None);
        let calls = scorer.calls();
        let result = run_compare(&mut scorer, &data, &opts, None).unwrap();
        assert_eq!(calls.labels(), r);
        assert_eq!(result.contexts[0].comparisons.len(), r);
        if design == Design::Symmetric {
            assert_eq!(result.consistency.total, 5);
        }
    }
    let mut opts = options();
    opts.design = Design::Random;
    opts.comparisons = Some(31);
    let error = format!(
        "{:#}",
        run_compare(&mut mock(0.0, None), &data, &opts, None).unwrap_err()
    );
    assert!(
        error.contains("doc0") && error.contains("at most 30"),
        "{error}"
    );
}

#[test]
fn chat_conventions_reach_the_model() {
    let conventions = Conventions {
        pairwise_suffix: "\n\nAnswer:".into(),
        answer_prefix: " {item}".into(),
        label_a: "A".into(),
        label_b: "B".into(),
        score_suffix: "\n\nScore:".into(),
        chat: true,
        rubric_protocol: None,
    };
    let mut scorer =
        MockScorer::new()
            .with_conventions(conventions)
            .with_labels(|prompt, labels| {
                assert_eq!(labels, ["A", "B"]);
                assert!(prompt.starts_with("<user>Dialogue:\n"), "{prompt}");
                assert!(
                    prompt.ends_with(
                        "Which Response is more good a continuation relative to the dialogue, \
                     Response A or Response B?\n\nAnswer:</user><assistant> Response"
                    ),
                    "{prompt}"
                );
                Ok(vec![(0.6f64).ln(), (0.2f64).ln()])
            });
    let mut opts = CompareOptions::new(
        Task::Dialogue,
        Attribute::named("continuity").unwrap(),
        PairwiseTemplate::builtin("c2", Task::Dialogue).unwrap(),
    );
    opts.score_field = Some("coherence".into());
    let result = run_compare(&mut scorer, &contexts(&[&[0.1, 0.9]]), &opts, None).unwrap();
    assert!((result.contexts[0].comparisons[0].p_a - 0.75).abs() < 1e-12);
    // Always answering A: each candidate wins once; the orders never agree.
    assert_eq!(result.contexts[0].scores, [0.5, 0.5]);
    assert_eq!(result.consistency.value(), Some(0.0));

    let shown = show_first_prompt(&scorer, &contexts(&[&[0.1, 0.9]]), &opts).unwrap();
    assert!(
        shown.contains("<assistant> Response") && shown.contains("\"A\" | \"B\""),
        "{shown}"
    );
}

#[test]
fn a_required_score_field_must_exist() {
    let mut opts = options();
    opts.score_field = Some("fluency".into());
    let error = format!(
        "{:#}",
        run_compare(&mut mock(0.0, None), &three_contexts(), &opts, None).unwrap_err()
    );
    assert!(
        error.contains("`fluency`") && error.contains("the human scores are: coherence"),
        "{error}"
    );

    // Without asking, a missing field just leaves accuracy out.
    let mut opts = options();
    opts.attribute = Attribute::named("fluency").unwrap();
    let result = run_compare(&mut mock(0.0, None), &three_contexts(), &opts, None).unwrap();
    assert!(result.accuracy.is_none());
}

/// Eight candidates per context: enough for the adaptive design to choose.
fn eight_candidate_contexts() -> Vec<Context> {
    contexts(&[
        &[0.3, 0.9, 0.1, 0.5, 0.7, 0.2, 0.65, 0.45],
        &[0.8, 0.2, 0.6, 0.4, 0.0, 0.9, 0.35, 0.55],
    ])
}

fn adaptive_options(budget: usize) -> CompareOptions {
    let mut opts = options();
    opts.design = Design::Adaptive;
    opts.comparisons = Some(budget);
    opts.rank = RankMethod::Poe;
    opts
}

#[test]
fn adaptive_design_spends_its_budget_in_both_orders_and_ranks_well() {
    let data = eight_candidate_contexts();
    // A strong first-position bias: both orders of every pair cancel it.
    let result = run_compare(&mut mock(1.5, None), &data, &adaptive_options(24), None).unwrap();
    for (context, input) in result.contexts.iter().zip(&data) {
        assert_eq!(context.comparisons.len(), 24);
        let asked: std::collections::HashSet<(usize, usize)> = context
            .comparisons
            .iter()
            .map(|c| (c.first, c.second))
            .collect();
        assert_eq!(asked.len(), 24, "a comparison asked twice");
        assert!(asked.iter().all(|&(i, j)| asked.contains(&(j, i))));
        let run = context.adaptive.expect("adaptive summary");
        // The first round (a cycle of 8 pairs = 16) then one round of 8.
        assert_eq!(run.rounds, 2);
        assert_eq!(run.ending, nlg_judge::judge::pairwise::Ending::Budget);
        assert_eq!(context.ranks, true_ranks(input), "{}", context.context_id);
    }
}

#[test]
fn a_killed_adaptive_run_resumes_with_the_same_choices() {
    let data = eight_candidate_contexts();
    let opts = adaptive_options(40);
    let reference = run_compare(&mut mock(0.4, None), &data, &opts, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.sqlite");
    let killed_after = 45;
    {
        let cache = ResultCache::open(&path).unwrap();
        run_compare(
            &mut mock(0.4, Some(killed_after)),
            &data,
            &opts,
            Some(&cache),
        )
        .unwrap_err();
        assert_eq!(cache.len().unwrap(), killed_after);
    }
    let cache = ResultCache::open(&path).unwrap();
    let mut scorer = mock(0.4, None);
    let calls = scorer.calls();
    let resumed = run_compare(&mut scorer, &data, &opts, Some(&cache)).unwrap();
    assert_eq!(calls.labels(), 2 * 40 - killed_after);
    assert_eq!(outputs(&resumed), outputs(&reference));
}

#[test]
fn adaptive_settings_are_checked_before_the_model_is_asked() {
    let data = eight_candidate_contexts();
    let mut opts = adaptive_options(24);
    opts.comparisons = None;
    let error = run_compare(&mut mock(0.0, None), &data, &opts, None).unwrap_err();
    assert!(error.to_string().contains("--stop-when"), "{error}");
    opts.comparisons = Some(23);
    let error = run_compare(&mut mock(0.0, None), &data, &opts, None).unwrap_err();
    assert!(error.to_string().contains("even"), "{error}");
    opts.comparisons = Some(58);
    let error = format!(
        "{:#}",
        run_compare(&mut mock(0.0, None), &data, &opts, None).unwrap_err()
    );
    assert!(
        error.contains("at most 56") && error.contains("doc0"),
        "{error}"
    );
    // A stop rule without a budget: stops once the ranking is stable.
    opts.comparisons = None;
    opts.adaptive.stop = Some(nlg_judge::judge::pairwise::StopRule::Stable(0.99));
    let result = run_compare(&mut mock(0.0, None), &data, &opts, None).unwrap();
    for context in &result.contexts {
        assert!(
            context.comparisons.len() < 56,
            "{}",
            context.comparisons.len()
        );
        assert!(matches!(
            context.adaptive.unwrap().ending,
            nlg_judge::judge::pairwise::Ending::Stable { .. }
        ));
    }
}

/// Counts what the runner reports.
#[derive(Default)]
struct Counted(std::sync::Mutex<(u64, u64, usize)>);

impl nlg_judge::progress::ProgressSink for Counted {
    fn begin(&self, total: u64, _unit: &str) {
        self.0.lock().unwrap().0 += total;
    }
    fn advance(&self, steps: u64) {
        self.0.lock().unwrap().1 += steps;
    }
    fn end(&self) {
        self.0.lock().unwrap().2 += 1;
    }
    fn note(&self, _message: &str) {}
}

#[test]
fn progress_is_reported_through_the_callers_sink() {
    let counted = std::sync::Arc::new(Counted::default());
    let mut opts = options();
    opts.progress = nlg_judge::progress::Progress::to(counted.clone());
    run_compare(&mut mock(0.0, None), &three_contexts(), &opts, None).unwrap();
    // Three contexts of five candidates: 60 comparisons, all reported, one task ended.
    assert_eq!(*counted.0.lock().unwrap(), (60, 60, 1));
}

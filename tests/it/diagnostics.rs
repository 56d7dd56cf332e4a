//! Judge diagnostics end to end: on scripted models whose failures are known (a judge
//! that always prefers the first position, one that puts little probability on the
//! labels, one that writes the same evaluation step over and over), the thresholds
//! warn with their remedies, the default ranking falls back where the design allows it
//! (and not on the papers' route), degenerate G-Eval steps are regenerated or refused
//! and never cached, and the command line writes the diagnostics beside `--output`. One
//! small run on SmolLM2-135M-Instruct checks the report: its answers follow the
//! position.

use crate::common;

use std::process::Command;

use nlg_judge::data::Context;
use nlg_judge::engine::{error_kind, ErrorKind, MockScorer, ResultCache, Scorer};
use nlg_judge::judge::diagnostics::Status;
use nlg_judge::judge::geval::{self, Criteria, StepsOrigin, StepsSource};
use nlg_judge::judge::pairwise::{run_compare, CompareOptions, CompareRequest};
use nlg_judge::judge::{resolve_method, run_scoring, ResolvedMethod, ScoreMethod, ScoreOptions};
use nlg_judge::judge::{Attribute, Task};
use nlg_judge::progress::Progress;
use nlg_judge::rank::RankMethod;

use crate::common::contexts::{quality_after, sigmoid};

/// A judge answering `p_A = sigma(slope (q_A - q_B) + bias)` with `mass` on the labels.
fn judge(slope: f64, bias: f64, mass: f64) -> MockScorer {
    MockScorer::new().with_labels(move |prompt, _| {
        let p = sigmoid(
            slope * (quality_after(prompt, "Summary A: ")? - quality_after(prompt, "Summary B: ")?)
                + bias,
        );
        Ok(vec![(mass * p).ln(), (mass * (1.0 - p)).ln()])
    })
}

fn contexts() -> Vec<Context> {
    common::contexts::scored_contexts(&[
        &[0.3, 0.9, 0.1, 0.5],
        &[0.8, 0.2, 0.6, 0.4],
        &[0.5, 0.15, 0.95, 0.35],
    ])
}

/// The candidates of a context, best score first.
fn order(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order
}

#[test]
fn a_judge_that_always_answers_a_is_flagged_and_ranked_by_poe_by_default() {
    // The quality moves p_A by less than the bias: every comparison goes to A.
    let data = contexts();
    let options = CompareRequest::new("coherence")
        .options(Progress::none())
        .unwrap();
    let mut mock = judge(1.0, 1.5, 0.1);
    let result = run_compare(&mut mock, &data, &options, None).unwrap();
    let d = &result.diagnostics;
    let status = |name: &str| d.get(name).unwrap().status;
    // The bias is total, and said; Product of Experts over both orders (chosen for this
    // judge) cancels it in the ranking, so the check is ok and offers no remedy.
    let bias = d.get("positional_bias").unwrap();
    assert_eq!(bias.value, 1.0);
    assert_eq!(bias.status, Status::Ok);
    assert!(bias.remedy.is_none());
    assert!(
        bias.message
            .ends_with("cancelled in the ranking (Product of Experts over both orders)"),
        "{}",
        bias.message
    );
    assert_eq!(status("order_consistency"), Status::Warn);
    assert_eq!(d.get("order_consistency").unwrap().value, 0.0);
    assert_eq!(status("label_mass"), Status::Warn);
    assert!((d.get("label_mass").unwrap().value - 0.1).abs() < 1e-9);
    // Product of Experts cancels the constant bias: the qualities' order, no ties.
    assert_eq!(result.rank, RankMethod::Poe);
    assert_eq!(status("ties"), Status::Ok);
    assert_eq!(d.warnings, 2);
    for (context, qualities) in result.contexts.iter().zip(&data) {
        let truth: Vec<f64> = qualities
            .candidates
            .iter()
            .map(|c| c.scores["coherence"])
            .collect();
        assert_eq!(
            order(&context.scores),
            order(&truth),
            "{}",
            context.context_id
        );
    }
    let adjusted = d.adjusted.as_deref().unwrap();
    assert!(
        adjusted.contains("Product of Experts instead of the default win ratio")
            && adjusted.contains("--rank win-ratio"),
        "{adjusted}"
    );
    let table = nlg_judge::cli::compare_table::format_tables(&result, &data);
    assert!(
        table.contains("\njudge diagnostics: 2 warnings\n"),
        "{table}"
    );
    assert!(table.contains("  ok positional_bias: the first candidate won 1.000 of 36"));
    // Product of Experts is in effect: the consistency remedy does not offer it again.
    assert!(
        table.contains(
            "    remedy: the answers follow the order more than the texts: use a larger model \
             (--model)"
        ),
        "{table}"
    );
    assert!(table.contains("  ok ties: 0 of 12 candidates"), "{table}");
    assert!(table.contains("  note: the scores are Product of Experts"));
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["rank"], "poe");
    assert_eq!(json["diagnostics"]["checks"][0]["name"], "positional_bias");
    assert_eq!(json["diagnostics"]["checks"][0]["threshold"], 0.7);
}

#[test]
fn a_ranking_asked_for_and_the_papers_route_are_kept() {
    let data = contexts();
    // `--rank win-ratio` asked: every candidate ties, and the diagnostics say so.
    let request = CompareRequest {
        rank: Some(RankMethod::WinRatio),
        ..CompareRequest::new("coherence")
    };
    let options = request.options(Progress::none()).unwrap();
    let result = run_compare(&mut judge(1.0, 1.5, 0.8), &data, &options, None).unwrap();
    assert_eq!(result.rank, RankMethod::WinRatio);
    assert!(result
        .contexts
        .iter()
        .all(|c| c.scores.iter().all(|&s| s == 0.5)));
    let ties = result.diagnostics.get("ties").unwrap();
    assert_eq!((ties.status, ties.value), (Status::Warn, 1.0));
    assert!(
        ties.message.contains("all tie in 3 of 3 contexts"),
        "{}",
        ties.message
    );
    assert!(ties.remedy.as_deref().unwrap().contains("--rank poe"));
    assert_eq!(result.diagnostics.adjusted, None);
    // The library's options (reproduce's route) never change the ranking.
    let papers = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence").unwrap(),
        options.template.clone(),
    );
    let again = run_compare(&mut judge(1.0, 1.5, 0.8), &data, &papers, None).unwrap();
    assert_eq!(again.rank, RankMethod::WinRatio);
    assert_eq!(again.contexts, result.contexts);
    // Debiasing corrects the position: no bias warning, and no fallback.
    let request = CompareRequest {
        debias: nlg_judge::judge::pairwise::Debias::Threshold,
        ..CompareRequest::new("coherence")
    };
    let options = request.options(Progress::none()).unwrap();
    let debiased = run_compare(&mut judge(1.0, 1.5, 0.8), &data, &options, None).unwrap();
    let bias = debiased.diagnostics.get("positional_bias").unwrap();
    assert_eq!(bias.status, Status::Ok);
    assert!(bias.message.ends_with("corrected by --debias threshold"));
}

#[test]
fn a_discerning_judge_passes_every_check() {
    let options = CompareRequest::new("coherence")
        .options(Progress::none())
        .unwrap();
    let result = run_compare(&mut judge(4.0, 0.0, 0.8), &contexts(), &options, None).unwrap();
    let d = &result.diagnostics;
    assert_eq!(d.warnings, 0, "{}", d.text());
    assert_eq!(d.checks.len(), 5);
    let coverage = d.get("uncompared").unwrap();
    assert_eq!((coverage.status, coverage.value), (Status::Ok, 0.0));
    assert_eq!(result.rank, RankMethod::WinRatio);
    assert!(d.text().starts_with("judge diagnostics: 0 warnings\n"));
}

#[test]
fn prompt_scores_with_little_label_mass_and_one_answer_warn() {
    // Every candidate gets the same distribution, 10% of it on the scale.
    let mut mock = MockScorer::new()
        .with_labels(|_, labels| Ok(vec![(0.1 / labels.len() as f64).ln(); labels.len()]));
    let options = ScoreOptions::new(ScoreMethod::Prompt, Task::Summary, "coherence");
    let method = resolve_method(&mut mock, &options, None).unwrap();
    let run = run_scoring(&mut mock, &contexts(), &method, &Progress::none(), None).unwrap();
    let d = &run.diagnostics;
    let mass = d.get("label_mass").unwrap();
    assert_eq!(mass.status, Status::Warn);
    assert!(mass.value < 0.11, "{}", mass.message);
    assert!(
        mass.message.starts_with("the score labels received 0."),
        "{}",
        mass.message
    );
    assert!(mass.remedy.as_deref().unwrap().contains("--show-prompt"));
    assert_eq!(d.get("ties").unwrap().value, 1.0);
    assert!(d.get("steps").is_none());
    assert_eq!(d.warnings, 2);
}

const REPEATED: &str =
    " Read the summary.\n2. Read the summary.\n3. Read the summary.\n4. Rate it.";
const SOUND: &str = " Read the article.\n2. Check the order of the ideas.\n3. Give a score.";

/// A model writing the scripted steps in turn (the last one from then on).
fn writer(answers: &'static [&'static str]) -> MockScorer {
    let mut next = 0;
    MockScorer::new().with_generation(move |_| {
        let text = answers[next.min(answers.len() - 1)];
        next += 1;
        Ok(text.to_string())
    })
}

#[test]
fn degenerate_steps_are_written_again_and_only_sound_ones_are_cached() {
    let criteria = Criteria::builtin(Task::Summary, "coherence").unwrap();
    let cache = ResultCache::in_memory().unwrap();
    let mut mock = writer(&[REPEATED, SOUND]);
    let calls = mock.calls();
    let steps =
        geval::resolve_steps(&mut mock, &criteria, &StepsSource::default(), Some(&cache)).unwrap();
    assert_eq!(calls.generations(), 2);
    assert_eq!(steps.origin, StepsOrigin::Generated);
    assert!(
        steps.text.contains("Check the order of the ideas"),
        "{}",
        steps.text
    );
    // The sound steps are what the cache gives back.
    let mut again = writer(&[REPEATED]);
    let calls = again.calls();
    let cached =
        geval::resolve_steps(&mut again, &criteria, &StepsSource::default(), Some(&cache)).unwrap();
    assert_eq!(
        (calls.generations(), cached.origin),
        (0, StepsOrigin::Cached)
    );
    assert_eq!(cached.text, steps.text);
}

#[test]
fn steps_degenerate_in_every_attempt_are_refused_and_not_cached() {
    let criteria = Criteria::builtin(Task::Summary, "coherence").unwrap();
    let cache = ResultCache::in_memory().unwrap();
    let mut mock = writer(&[REPEATED]);
    let calls = mock.calls();
    let options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    let error = resolve_method(&mut mock, &options, Some(&cache)).unwrap_err();
    let message = format!("{error:#}");
    assert_eq!(
        calls.generations(),
        1 + geval::steps::SAMPLED_ATTEMPTS as usize
    );
    assert!(message.contains("degenerate evaluation steps for Coherence in all 4 attempts"));
    assert!(
        message.contains("repeated 3 times: \"read the summary\""),
        "{message}"
    );
    assert!(message.contains("--steps FILE"), "{message}");
    assert_eq!(error_kind(&error), ErrorKind::BadRequest);
    // Nothing was stored: a later model that writes sound steps is asked again.
    let mut later = writer(&[SOUND]);
    let calls = later.calls();
    let steps =
        geval::resolve_steps(&mut later, &criteria, &StepsSource::default(), Some(&cache)).unwrap();
    assert_eq!(
        (calls.generations(), steps.origin),
        (1, StepsOrigin::Generated)
    );
}

#[test]
fn degenerate_steps_in_the_cache_are_written_again() {
    let criteria = Criteria::builtin(Task::Summary, "coherence").unwrap();
    let cache = ResultCache::in_memory().unwrap();
    let mut mock = writer(&[SOUND]);
    let key = geval::steps::steps_key(&mock, &criteria, geval::steps::DEFAULT_MAX_TOKENS).unwrap();
    let fingerprint = mock.info().fingerprint.clone();
    cache
        .put_text(
            &fingerprint,
            geval::steps::CACHE_KIND,
            &key,
            "1. Rate.\n2. Rate.\n3. Rate.",
        )
        .unwrap();
    let calls = mock.calls();
    let steps =
        geval::resolve_steps(&mut mock, &criteria, &StepsSource::default(), Some(&cache)).unwrap();
    assert_eq!(
        (calls.generations(), steps.origin),
        (1, StepsOrigin::Generated)
    );
    let stored = cache
        .get_text(&fingerprint, geval::steps::CACHE_KIND, &key)
        .unwrap()
        .unwrap();
    assert_eq!(stored, steps.text);
}

#[test]
fn given_steps_are_used_but_a_repeated_sentence_warns() {
    let mut mock = MockScorer::new();
    let mut options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    options.steps = StepsSource::Given(format!("1.{REPEATED}"));
    let method = resolve_method(&mut mock, &options, None).unwrap();
    assert!(matches!(method, ResolvedMethod::Geval { .. }));
    let run = run_scoring(&mut mock, &contexts(), &method, &Progress::none(), None).unwrap();
    let steps = run.diagnostics.get("steps").unwrap();
    assert_eq!((steps.status, steps.value), (Status::Warn, 3.0));
    assert!(steps.remedy.as_deref().unwrap().contains("--steps FILE"));
}

#[test]
fn the_command_line_prints_the_block_and_writes_the_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("scores.jsonl");
    let run = Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args([
            "compare",
            "--model",
            "mock",
            "--no-cache",
            "--input",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/library.jsonl"),
            "--attribute",
            "coherence",
            "--output",
            output.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // The mock answers 0.5 everywhere: every candidate ties, whatever the ranking.
    assert!(
        stdout.contains("  WARNING ties: 5 of 5 candidates"),
        "{stdout}"
    );
    let sidecar = dir.path().join("scores.jsonl.diagnostics.json");
    assert!(stdout.contains(&format!(
        "results: judge diagnostics: {}",
        sidecar.display()
    )));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sidecar).unwrap()).unwrap();
    let ties = written["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ties")
        .unwrap();
    assert_eq!(
        (ties["status"].as_str(), ties["value"].as_f64()),
        (Some("warn"), Some(1.0))
    );
    // The lines CI reads are still there.
    for start in ["positional bias: ", "results: "] {
        assert!(stdout.lines().any(|l| l.starts_with(start)), "{stdout}");
    }
}

#[test]
fn smollm2_prefers_the_first_position_and_is_told_so() {
    let Some(dir) = nlg_judge::data::find_shared_data_dir() else {
        eprintln!("shared data not found; skipping");
        return;
    };
    let records: Vec<_> = nlg_judge::data::summeval::read(&dir)
        .unwrap()
        .into_iter()
        .take(4)
        .collect();
    let data = nlg_judge::data::group_contexts(records).unwrap();
    common::card_file("smollm2-135m-instruct");
    let mut load = nlg_judge::engine::LoadOptions::from_env().unwrap();
    load.device = "cpu".to_string();
    let mut scorer = nlg_judge::engine::load_scorer("smollm2-135m-instruct", &load).unwrap();
    let options = CompareRequest::new("coherence")
        .options(Progress::none())
        .unwrap();
    let result = run_compare(scorer.as_mut(), &data, &options, None).unwrap();
    let comparisons = &result.contexts[0].comparisons;
    assert_eq!(comparisons.len(), 12);
    let first = comparisons.iter().filter(|c| c.p_a > 0.5).count();
    eprintln!("{}", result.diagnostics.text());
    let bias = result.diagnostics.get("positional_bias").unwrap();
    assert_eq!(bias.value, first as f64 / 12.0);
    // Ranked by Product of Experts (chosen for this judge): the bias is said and cancelled.
    assert_eq!(result.rank, RankMethod::Poe);
    assert_eq!(bias.status, Status::Ok, "{}", bias.message);
    assert!(
        bias.message.contains("cancelled in the ranking"),
        "{}",
        bias.message
    );
    let consistency = result.diagnostics.get("order_consistency").unwrap();
    assert_eq!(consistency.status, Status::Warn, "{}", consistency.message);
    // With the win ratio asked for, the same answers warn and name both remedies.
    let mut asked = CompareRequest::new("coherence");
    asked.rank = Some(RankMethod::WinRatio);
    let options = asked.options(Progress::none()).unwrap();
    let comparisons = result
        .contexts
        .iter()
        .map(|c| c.comparisons.clone())
        .collect();
    let again = nlg_judge::judge::pairwise::summarise(&data, comparisons, &options).unwrap();
    let bias = again.diagnostics.get("positional_bias").unwrap();
    assert_eq!(bias.status, Status::Warn, "{}", bias.message);
    let remedy = bias.remedy.as_deref().unwrap();
    assert!(
        remedy.contains("--debias threshold") && remedy.contains("--rank poe"),
        "{remedy}"
    );
}

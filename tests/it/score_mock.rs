//! Absolute scoring (prompt scoring, G-Eval, GPTScore) through the library API with a
//! scripted model.
//!
//! The mock tokenises one byte per token. Its label answers come from a small
//! autoregressive byte model scored by teacher forcing (a label's log-prob is the sum of
//! its bytes' log-probs given the prompt and the label's earlier bytes), so multi-token
//! scores ("10" after a space is three tokens) are exercised as the engine scores them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Result};
use nlg_judge::data::{Candidate, Context};
use nlg_judge::engine::{Label, MockScorer, ResultCache};
use nlg_judge::judge::geval::{self, Criteria, GevalInput, StepsOrigin, StepsSource};
use nlg_judge::judge::{
    absolute, resolve_method, run_scoring, score_contexts, write_scored, ResolvedMethod,
    ScoreMethod, ScoreOptions, ScoreScale, Task,
};

/// P(next byte | text so far) of the scripted model: after the prompt a space (0.9);
/// after the space a digit (1: 0.2, 2..9: 0.1 each, 0: never); after " 1" a "0" (0.3).
fn byte_probability(before: &str, next: u8) -> f64 {
    if before.ends_with(" 1") {
        return if next == b'0' { 0.3 } else { 0.0 };
    }
    if before.ends_with(' ') {
        return match next {
            b'1' => 0.2,
            b'2'..=b'9' => 0.1,
            _ => 0.0,
        };
    }
    if next == b' ' {
        0.9
    } else {
        0.0
    }
}

/// Teacher forcing over the label's bytes.
fn teacher_forced(prompt: &str, label: &str) -> f64 {
    let mut text = prompt.to_string();
    let mut logprob = 0.0;
    for &byte in label.as_bytes() {
        logprob += byte_probability(&text, byte).ln();
        text.push(byte as char);
    }
    logprob
}

fn byte_model_mock() -> MockScorer {
    MockScorer::new().with_labels(|prompt, labels| {
        Ok(labels.iter().map(|l| teacher_forced(prompt, l)).collect())
    })
}

fn candidate(id: &str, text: &str, reference: Option<&str>, coherence: f64) -> Candidate {
    Candidate {
        id: id.to_string(),
        text: text.to_string(),
        reference: reference.map(str::to_string),
        scores: BTreeMap::from([("coherence".to_string(), coherence)]),
        system_id: Some(format!("sys-{id}")),
        metadata: Default::default(),
        source: None,
    }
}

fn two_contexts() -> Vec<Context> {
    vec![
        Context {
            id: "d1".into(),
            text: "First article.".into(),
            candidates: vec![
                candidate("a", "good summary q=5", Some("gold one"), 4.0),
                candidate("b", "poor summary q=1", Some("gold one"), 2.0),
            ],
        },
        Context {
            id: "d2".into(),
            text: "Second article.".into(),
            candidates: vec![candidate("c", "fair summary q=3", Some("gold two"), 3.0)],
        },
    ]
}

#[test]
fn prompt_scoring_uses_exclusive_probabilities_of_multi_token_scores() {
    let mut mock = byte_model_mock();
    let request = absolute::request(
        &mock,
        Task::Summary,
        "coherence",
        "Article.",
        "A summary.",
        absolute::DEFAULT_SCALE,
    )
    .unwrap();
    // The plain prompt ends with "coherence": every score follows a space, and 10 is
    // three tokens (space, "1", "0") extending the score 1's two.
    assert_eq!(
        request.labels[0],
        Label::Tokens(vec![b' ' as u32, b'1' as u32])
    );
    assert_eq!(
        request.labels[9],
        Label::Tokens(vec![b' ' as u32, b'1' as u32, b'0' as u32])
    );

    let contexts = vec![Context {
        id: "d".into(),
        text: "Article.".into(),
        candidates: vec![candidate("x", "A summary.", None, 1.0)],
    }];
    let options = ScoreOptions::new(ScoreMethod::Prompt, Task::Summary, "coherence");
    let scored = score_contexts(&mut mock, &contexts, &options, None).unwrap();
    let d = scored[0].distribution.as_ref().unwrap();
    // P(" 1") = 0.18 counts P(" 10") = 0.054; the score 1 alone is 0.126.
    let raw = [0.126, 0.09, 0.09, 0.09, 0.09, 0.09, 0.09, 0.09, 0.09, 0.054];
    for (got, want) in d.raw.iter().zip(raw) {
        assert!((got - want).abs() < 1e-12, "{:?}", d.raw);
    }
    assert!((d.mass - 0.9).abs() < 1e-12);
    let sum: f64 = d.normalised.iter().sum();
    assert!((sum - 1.0).abs() < 1e-12);
    assert!((d.normalised[0] - 0.14).abs() < 1e-12);
    // 1 * 0.14 + (2 + ... + 9) * 0.1 + 10 * 0.06
    assert!(
        (scored[0].score - 5.14).abs() < 1e-12,
        "{}",
        scored[0].score
    );
    assert_eq!(d.argmax, 1);
}

/// G-Eval's answer for an output carrying `q=<quality>`: the scale's five labels with
/// probabilities 0.8 * w (so that 20% of the mass lies outside the scale).
fn geval_logprobs(prompt: &str, labels: &[String]) -> Result<Vec<f64>> {
    let at = prompt
        .rfind("q=")
        .ok_or_else(|| anyhow!("no quality in the prompt"))?;
    let quality: usize = prompt[at + 2..at + 3].parse()?;
    let weights: Vec<f64> = (1..=5)
        .map(|s: usize| if s == quality { 0.6 } else { 0.1 })
        .collect();
    labels
        .iter()
        .map(|label| {
            let score: usize = label.trim().parse()?;
            Ok((0.8 * weights[score - 1]).ln())
        })
        .collect()
}

const GENERATED: &str =
    " Read the article.\n2. Check the order of the ideas.\n3. Give a score.\nSummary: ignored";

/// A G-Eval mock whose generated steps and prompts are recorded.
fn geval_mock(prompts: Arc<Mutex<Vec<String>>>) -> MockScorer {
    MockScorer::new()
        .with_generation(|prompt| {
            assert!(prompt.ends_with("Evaluation Steps:\n1."), "{prompt}");
            Ok(GENERATED.to_string())
        })
        .with_labels(move |prompt, labels| {
            prompts.lock().unwrap().push(prompt.to_string());
            geval_logprobs(prompt, labels)
        })
}

#[test]
fn geval_scores_are_expectations_with_raw_and_normalised_probabilities() {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let mut mock = geval_mock(prompts.clone());
    let calls = mock.calls();
    let options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    let scored = score_contexts(&mut mock, &two_contexts(), &options, None).unwrap();
    assert_eq!(scored.len(), 3);
    assert_eq!(
        calls.label_calls(),
        1,
        "both contexts' candidates in one scorer call"
    );
    for (entry, quality) in scored.iter().zip([5.0, 1.0, 3.0]) {
        let d = entry.distribution.as_ref().unwrap();
        assert_eq!(d.scores, vec![1, 2, 3, 4, 5]);
        assert!((d.mass - 0.8).abs() < 1e-12);
        let expected_raw: Vec<f64> = (1..=5)
            .map(|s| if s as f64 == quality { 0.48 } else { 0.08 })
            .collect();
        for (got, want) in d.raw.iter().zip(&expected_raw) {
            assert!((got - want).abs() < 1e-12);
        }
        // normalised = raw / 0.8: 0.6 on the quality, 0.1 elsewhere.
        let expectation = 0.6 * quality + 0.1 * (15.0 - quality);
        assert!((entry.score - expectation).abs() < 1e-12, "{}", entry.score);
        assert_eq!(d.argmax as f64, quality);
    }
    assert_eq!(scored[1].human["coherence"], 2.0);
    assert_eq!(scored[1].system_id.as_deref(), Some("sys-b"));
    let prompts = prompts.lock().unwrap();
    assert!(prompts[0].contains(
        "Evaluation Steps:\n\n1. Read the article.\n2. Check the order of the ideas.\n3. Give a score.\n\n"
    ));
    assert!(
        !prompts[0].contains("ignored"),
        "the stop string ends the steps"
    );
}

#[test]
fn geval_steps_are_generated_once_and_reused_with_the_results() {
    let cache = ResultCache::in_memory().unwrap();
    let options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    let contexts = two_contexts();

    let mut first = geval_mock(Arc::default());
    let calls = first.calls();
    let method = resolve_method(&mut first, &options, Some(&cache)).unwrap();
    let ResolvedMethod::Geval { steps, .. } = &method else {
        panic!("G-Eval expected")
    };
    assert_eq!(steps.origin, StepsOrigin::Generated);
    let run = run_scoring(
        &mut first,
        &contexts,
        &method,
        &Default::default(),
        Some(&cache),
    )
    .unwrap();
    assert_eq!((calls.generations(), calls.labels()), (1, 3));
    assert_eq!((run.computed, run.cached), (3, 0));

    // A second run (a new model object, same weights): no generation, no scoring.
    let mut second = geval_mock(Arc::default());
    let calls = second.calls();
    let method = resolve_method(&mut second, &options, Some(&cache)).unwrap();
    let ResolvedMethod::Geval { steps: again, .. } = &method else {
        panic!("G-Eval expected")
    };
    assert_eq!(again.origin, StepsOrigin::Cached);
    assert_eq!(again.text, steps.text);
    let rerun = run_scoring(
        &mut second,
        &contexts,
        &method,
        &Default::default(),
        Some(&cache),
    )
    .unwrap();
    assert_eq!((calls.generations(), calls.labels()), (0, 0));
    assert_eq!((rerun.computed, rerun.cached), (0, 3));
    assert_eq!(rerun.candidates, run.candidates);

    // Other criteria need their own steps.
    let mut third = geval_mock(Arc::default());
    let calls = third.calls();
    let fluency = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "fluency");
    resolve_method(&mut third, &fluency, Some(&cache)).unwrap();
    assert_eq!(calls.generations(), 1);
}

#[test]
fn user_steps_bypass_generation() {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let mut mock = geval_mock(prompts.clone());
    let calls = mock.calls();
    let mut options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    options.steps = StepsSource::Given("1. Mine.\n2. Only mine.\n".into());
    score_contexts(&mut mock, &two_contexts(), &options, None).unwrap();
    assert_eq!(calls.generations(), 0);
    assert!(prompts.lock().unwrap()[0].contains("Evaluation Steps:\n\n1. Mine.\n2. Only mine.\n\n"));
}

#[test]
fn the_geval_prompt_has_the_exact_sections_in_order() {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let mut mock = geval_mock(prompts.clone());
    let criteria = Criteria::new(
        "Accuracy",
        ScoreScale::new(1, 5).unwrap(),
        Some(Task::Summary),
        "You will rate one summary.",
        "Accuracy (1-5): is it right?",
    )
    .unwrap();
    let mut options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "unused");
    options.criteria = Some(criteria);
    options.steps = StepsSource::Given("1. Compare.".into());
    options.reference = true;
    score_contexts(&mut mock, &two_contexts()[1..], &options, None).unwrap();
    assert_eq!(
        prompts.lock().unwrap()[0],
        "You will rate one summary.\n\n\
         Evaluation Criteria:\n\nAccuracy (1-5): is it right?\n\n\
         Evaluation Steps:\n\n1. Compare.\n\n\
         Source Text:\n\nSecond article.\n\n\
         Reference Summary:\n\ngold two\n\n\
         Summary:\n\nfair summary q=3\n\n\
         Evaluation Form (scores ONLY):\n- Accuracy:"
    );
}

#[test]
fn the_reference_mode_names_a_candidate_without_reference() {
    let mut mock = geval_mock(Arc::default());
    let mut contexts = two_contexts();
    contexts[0].candidates[1].reference = None;
    let mut options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    options.reference = true;
    let error = format!(
        "{:#}",
        score_contexts(&mut mock, &contexts, &options, None).unwrap_err()
    );
    assert!(
        error.contains("`b`") && error.contains("reference") && error.contains("`d1`"),
        "{error}"
    );
}

#[test]
fn a_killed_run_resumes_and_writes_the_same_output() {
    let contexts = two_contexts();
    let options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    let mut whole = geval_mock(Arc::default());
    let expected = score_contexts(&mut whole, &contexts, &options, None).unwrap();

    let cache = ResultCache::in_memory().unwrap();
    let mut answered = 0;
    let mut crashing = MockScorer::new()
        .with_generation(|_| Ok(GENERATED.to_string()))
        .with_labels(move |prompt, labels| {
            if answered == 2 {
                return Err(anyhow!("simulated crash"));
            }
            answered += 1;
            geval_logprobs(prompt, labels)
        });
    let error = score_contexts(&mut crashing, &contexts, &options, Some(&cache)).unwrap_err();
    assert!(format!("{error:#}").contains("simulated crash"));

    let mut resumed = geval_mock(Arc::default());
    let calls = resumed.calls();
    let method = resolve_method(&mut resumed, &options, Some(&cache)).unwrap();
    let run = run_scoring(
        &mut resumed,
        &contexts,
        &method,
        &Default::default(),
        Some(&cache),
    )
    .unwrap();
    assert_eq!((run.computed, run.cached), (1, 2));
    assert_eq!((calls.generations(), calls.labels()), (0, 1));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    write_scored(&expected, &mut a).unwrap();
    write_scored(&run.candidates, &mut b).unwrap();
    assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
}

#[test]
fn output_lines_carry_ids_probabilities_and_human_scores() {
    let mut mock = geval_mock(Arc::default());
    let options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    let scored = score_contexts(&mut mock, &two_contexts(), &options, None).unwrap();
    let mut out = Vec::new();
    write_scored(&scored, &mut out).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let first = &lines[0];
    assert_eq!(first["context_id"], "d1");
    assert_eq!(first["candidate_id"], "a");
    assert_eq!(first["system_id"], "sys-a");
    assert_eq!(first["scores"]["coherence"], 4.0);
    assert_eq!(first["argmax"], 5);
    assert_eq!(first["score"].as_f64().unwrap(), scored[0].score);
    let keys: Vec<&String> = first["probabilities"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["1", "2", "3", "4", "5"]);
    assert!((first["raw_probabilities"]["5"].as_f64().unwrap() - 0.48).abs() < 1e-12);

    // The HTML report of the same run: scores as written, distributions, human scores.
    let contexts = two_contexts();
    let page = nlg_judge::report::Report::from_scores(
        "t",
        Vec::new(),
        "coherence",
        "G-Eval score",
        &scored,
        &contexts,
        Some("coherence"),
    )
    .unwrap();
    let data = serde_json::to_value(&page).unwrap();
    let run = &data["runs"][0];
    assert_eq!(run["kind"], "absolute");
    assert_eq!(run["scale"], serde_json::json!([1, 2, 3, 4, 5]));
    assert_eq!(run["contexts"].as_array().unwrap().len(), 2);
    assert_eq!(
        run["contexts"][0]["scores"][0].as_f64(),
        first["score"].as_f64()
    );
    assert_eq!(run["contexts"][0]["human"][1].as_f64(), Some(2.0));
    assert_eq!(
        run["contexts"][0]["distributions"][0]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert!(page.to_html().unwrap().contains("id=\"report-data\""));
    // A result list that does not match the input is an error, not a wrong page.
    assert!(nlg_judge::report::Report::from_scores(
        "t",
        Vec::new(),
        "c",
        "s",
        &scored[1..],
        &contexts,
        None
    )
    .is_err());
}

#[test]
fn geval_evaluate_matches_the_runner() {
    let mut mock = geval_mock(Arc::default());
    let criteria = Criteria::builtin(Task::Summary, "coherence").unwrap();
    let steps = geval::resolve_steps(&mut mock, &criteria, &StepsSource::default(), None).unwrap();
    let contexts = two_contexts();
    let c = &contexts[0].candidates[0];
    let direct = geval::evaluate(
        &mut mock,
        &criteria,
        &steps.text,
        &GevalInput {
            source: Some(&contexts[0].text),
            reference: None,
            output: &c.text,
        },
    )
    .unwrap();
    let options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");
    let scored = score_contexts(&mut mock, &contexts, &options, None).unwrap();
    assert_eq!(scored[0].distribution.as_ref(), Some(&direct));
}

#[test]
fn gptscore_is_the_mean_token_logprob_and_is_cached() {
    let make = || {
        MockScorer::new().with_continuation(|_, text| {
            let per_token = if text.contains("good") { -1.0 } else { -3.0 };
            Ok(vec![per_token; text.len()])
        })
    };
    let cache = ResultCache::in_memory().unwrap();
    let options = ScoreOptions::new(ScoreMethod::Gptscore, Task::Summary, "coherence");
    let mut first = make();
    let scored = score_contexts(&mut first, &two_contexts(), &options, Some(&cache)).unwrap();
    let scores: Vec<f64> = scored.iter().map(|s| s.score).collect();
    assert_eq!(scores, [-1.0, -3.0, -3.0]);
    assert!(scored.iter().all(|s| s.distribution.is_none()));
    let mut second = make();
    let calls = second.calls();
    let again = score_contexts(&mut second, &two_contexts(), &options, Some(&cache)).unwrap();
    assert_eq!(calls.continuations(), 0);
    assert_eq!(again, scored);
}

#[test]
fn unknown_attributes_and_criteria_are_named() {
    let mut mock = MockScorer::new();
    // GPTScore needs the adjective of an attribute of one's own; prompt scoring names the
    // attribute in its prompt and takes any.
    let options = ScoreOptions::new(ScoreMethod::Gptscore, Task::Summary, "funniness");
    let error = resolve_method(&mut mock, &options, None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("`funniness`"), "{error}");
    let options = ScoreOptions::new(ScoreMethod::Prompt, Task::Summary, "funniness");
    match resolve_method(&mut mock, &options, None).unwrap() {
        ResolvedMethod::Prompt { attribute, .. } => assert_eq!(attribute.name, "funniness"),
        other => panic!("{other:?}"),
    }
    let options = ScoreOptions::new(ScoreMethod::Geval, Task::Dialogue, "relevance");
    let error = resolve_method(&mut mock, &options, None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`relevance`") && error.contains("naturalness"),
        "{error}"
    );
}

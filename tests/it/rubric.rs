//! Rubric grading (`score --method rubric`): the prompts against the fixtures written from
//! the judges' published templates (`tests/fixtures/rubric/`), byte for byte; the scoring
//! run with a scripted judge (every way a feedback can break the format still gives a
//! score and a format count; caching; no feedback; the card's protocol by default); and a
//! run on SmolLM2 in the plain format.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::common;
use nlg_judge::data::{Candidate, Context};
use nlg_judge::engine::{Conventions, DecoderSettings, MockScorer, ResultCache};
use nlg_judge::judge::geval::Sections;
use nlg_judge::judge::rubric::protocol::{render, RubricInput};
use nlg_judge::judge::rubric::run::ProtocolSource;
use nlg_judge::judge::rubric::{FormatOutcome, Rubric, RubricProtocol};
use nlg_judge::judge::{
    resolve_method, run_scoring, write_scored, ResolvedMethod, RubricRequest, ScoreMethod,
    ScoreOptions, ScoreRequest, ScoreRun, ScoreScale,
};
use nlg_judge::progress::Progress;
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rubric")
}

pub(crate) fn fixture(name: &str) -> String {
    let path = fixture_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The example of `inputs.json` as a rubric and the inputs it grades.
pub(crate) fn example() -> (Rubric, Value) {
    let inputs: Value = serde_json::from_str(&fixture("inputs.json")).unwrap();
    let text = |key: &str| inputs[key].as_str().unwrap().to_string();
    let rubric = Rubric {
        name: text("name"),
        criterion: text("criterion"),
        scale: ScoreScale::new(1, 5).unwrap(),
        descriptions: inputs["descriptions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_string())
            .collect(),
        instruction: Some(text("instruction")),
        task: None,
        aliases: Vec::new(),
        sections: Sections {
            source: text("source_heading"),
            reference: text("reference_heading"),
            output: text("output_heading"),
        },
    };
    (rubric, inputs)
}

#[test]
fn prometheus_prompts_are_the_published_template_byte_for_byte() {
    let (rubric, inputs) = example();
    let input = RubricInput {
        context: inputs["context"].as_str(),
        reference: inputs["reference"].as_str(),
        output: inputs["response"].as_str().unwrap(),
    };
    let with_reference = render(&RubricProtocol::prometheus(), &rubric, &input).unwrap();
    assert_eq!(with_reference.user, fixture("prometheus_absolute.txt"));
    assert_eq!(
        with_reference.system.as_deref(),
        Some(fixture("prometheus_system.txt").as_str())
    );
    let without = RubricInput {
        reference: None,
        ..input
    };
    let rendered = render(&RubricProtocol::prometheus(), &rubric, &without).unwrap();
    assert_eq!(
        rendered.user,
        fixture("prometheus_absolute_no_reference.txt")
    );
}

#[test]
fn flow_judge_prompts_are_the_published_template_byte_for_byte() {
    let (mut rubric, inputs) = example();
    let input = RubricInput {
        context: inputs["context"].as_str(),
        reference: inputs["reference"].as_str(),
        output: inputs["response"].as_str().unwrap(),
    };
    let rendered = render(&RubricProtocol::flow_judge(), &rubric, &input).unwrap();
    assert_eq!(rendered.system, None);
    assert_eq!(rendered.user, fixture("flow_judge_inputs.txt"));
    // Nothing but the output: the published template without inputs.
    rubric.instruction = None;
    let bare = RubricInput {
        context: None,
        reference: None,
        output: input.output,
    };
    let rendered = render(&RubricProtocol::flow_judge(), &rubric, &bare).unwrap();
    assert_eq!(rendered.user, fixture("flow_judge_no_inputs.txt"));
}

// ---- Scoring through the library with a scripted model --------------------------------

/// What the scripted judge writes for a candidate whose text names the case, and the
/// score its label distribution peaks at (so a test sees which answer the score was read
/// after).
const CASES: [(&str, &str, i64); 5] = [
    ("kept", "Clear and complete. [RESULT] 4", 4),
    ("twice", "Fine. [RESULT] 3\nOn reflection, [RESULT] 5", 5),
    ("garbage", "Fine. [RESULT] excellent!", 2),
    ("none", "Good enough overall.\n", 5),
    (
        "cut",
        "This feedback goes on and on about the summary and never reaches a verdict before the bound",
        1,
    ),
];

/// The answer (after the prompt) each case's score is read after.
fn answer_of(case: &str) -> &'static str {
    match case {
        "kept" => "Clear and complete. [RESULT] ",
        // Read at the last marker: the verdict the judge ended with.
        "twice" => "Fine. [RESULT] 3\nOn reflection, [RESULT] ",
        "garbage" => "Fine. [RESULT] ",
        "none" => "Good enough overall. [RESULT] ",
        // Cut at the mock's bound of 60 bytes, then the marker appended.
        "cut" => "This feedback goes on and on about the summary and never rea [RESULT] ",
        _ => unreachable!(),
    }
}

fn case_of(prompt: &str) -> &'static str {
    CASES
        .iter()
        .map(|(case, _, _)| *case)
        .find(|case| prompt.contains(&format!("case={case}")))
        .expect("a case in the prompt")
}

/// A mock Prometheus judge: the card's protocol, scripted feedback and labels. The labels
/// fail unless the prompt ends with the answer its case must be read after.
fn scripted_judge(prompts: Arc<Mutex<Vec<String>>>) -> MockScorer {
    MockScorer::new()
        .with_conventions(Conventions {
            rubric_protocol: Some("prometheus".into()),
            ..Conventions::default()
        })
        .with_generation(|prompt| {
            assert!(prompt.ends_with("###Feedback: "), "{prompt}");
            let case = case_of(prompt);
            Ok(CASES.iter().find(|c| c.0 == case).unwrap().1.to_string())
        })
        .with_labels(move |prompt, labels| {
            prompts.lock().unwrap().push(prompt.to_string());
            let case = case_of(prompt);
            // Read after the marker's last visible character, the score written with
            // the marker's space (` 3`), as Prometheus writes `[RESULT] 3`.
            anyhow::ensure!(
                prompt.ends_with(&format!("###Feedback: {}", answer_of(case).trim_end())),
                "case {case}: the score is read after {:?}",
                &prompt[prompt.len().saturating_sub(80)..]
            );
            let peak = CASES.iter().find(|c| c.0 == case).unwrap().2;
            labels
                .iter()
                .map(|label| {
                    let score: i64 = label
                        .strip_prefix(' ')
                        .ok_or_else(|| anyhow::anyhow!("{label:?} without the marker's space"))?
                        .parse()?;
                    let p: f64 = if score == peak { 0.5 } else { 0.1 };
                    Ok(p.ln())
                })
                .collect()
        })
}

fn cased_contexts() -> Vec<Context> {
    let candidate = |case: &str| Candidate {
        id: case.to_string(),
        text: format!("A summary, case={case}."),
        reference: Some("The gold summary.".into()),
        scores: BTreeMap::from([("coherence".to_string(), 3.0)]),
        system_id: None,
        metadata: Default::default(),
        source: None,
    };
    vec![
        Context {
            id: "d1".into(),
            text: "An article.".into(),
            candidates: CASES[..3].iter().map(|c| candidate(c.0)).collect(),
        },
        Context {
            id: "d2".into(),
            text: "Another article.".into(),
            candidates: CASES[3..].iter().map(|c| candidate(c.0)).collect(),
        },
    ]
}

/// Grade the cased contexts with `method`, without a cache.
fn grade(judge: &mut MockScorer, method: &ResolvedMethod) -> ScoreRun {
    run_scoring(judge, &cased_contexts(), method, &Progress::none(), None).unwrap()
}

fn rubric_options(feedback: bool) -> ScoreOptions {
    let mut request = ScoreRequest::new(ScoreMethod::Rubric, None);
    let mut rubric = RubricRequest::new("coherence");
    rubric.feedback = feedback;
    rubric.max_feedback_tokens = 60;
    request.rubric = Some(rubric);
    request.options(Progress::none()).unwrap()
}

#[test]
fn every_feedback_gives_a_score_and_a_format_count() {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let mut judge = scripted_judge(prompts.clone());
    let calls = judge.calls();
    let options = rubric_options(true);
    let method = resolve_method(&mut judge, &options, None).unwrap();
    let ResolvedMethod::Rubric(rubric) = &method else {
        panic!("rubric grading expected")
    };
    // The model card's protocol, without --protocol.
    assert_eq!(rubric.protocol, RubricProtocol::prometheus());
    assert_eq!(rubric.protocol_source, ProtocolSource::Card);
    let run = grade(&mut judge, &method);
    assert_eq!(calls.generations(), 5, "one generation per candidate");
    assert_eq!(calls.label_calls(), 1, "every score in one scorer call");
    for (entry, (case, _, peak)) in run.candidates.iter().zip(CASES) {
        let d = entry.distribution.as_ref().unwrap();
        assert_eq!(d.argmax, peak, "{case}");
        // 0.5 on the peak and 0.1 on each other score: normalised 5/9 and 1/9.
        let sum: f64 = d.normalised.iter().sum();
        assert!((sum - 1.0).abs() < 1e-12);
        let expected = (5.0 * peak as f64 + (15 - peak) as f64) / 9.0;
        assert!(
            (entry.score - expected).abs() < 1e-12,
            "{case}: {}",
            entry.score
        );
        assert!((d.mass - 0.9).abs() < 1e-12);
    }
    let formats: Vec<FormatOutcome> = run.candidates.iter().map(|c| c.format.unwrap()).collect();
    assert_eq!(
        formats,
        [
            FormatOutcome::Kept,
            FormatOutcome::Repeated,
            FormatOutcome::NoScore,
            FormatOutcome::Missing,
            FormatOutcome::Cut
        ]
    );
    let feedback: Vec<&str> = run
        .candidates
        .iter()
        .map(|c| c.feedback.as_deref().unwrap())
        .collect();
    assert_eq!(feedback[0], "Clear and complete.");
    assert_eq!(feedback[3], "Good enough overall.");
    let check = run.diagnostics.get("format").expect("a format check");
    assert!((check.value - 0.2).abs() < 1e-12, "{}", check.value);
    assert!(check.is_warning());
    assert!(
        check.message.contains(
            "the marker without a score 1, repeated 1, never written 1, cut at the token limit 1"
        ),
        "{}",
        check.message
    );
    assert!(check
        .remedy
        .as_deref()
        .unwrap()
        .contains("--max-feedback-tokens"));
    // The system message does not reach a model without a chat template; the rubric does.
    let prompts = prompts.lock().unwrap();
    assert!(prompts[0].contains("###Score Rubrics:\n[Does the summary hold together"));
    assert!(!prompts[0].contains("###Reference Answer"));

    let mut out = Vec::new();
    write_scored(&run.candidates, &mut out).unwrap();
    let rows: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows[0]["feedback"], "Clear and complete.");
    assert_eq!(rows[4]["format"], "cut");
    // Read at the last marker: the verdict the judge ended with, not the one it revised.
    assert_eq!(rows[1]["argmax"], 5);
    assert_eq!(rows[1]["feedback"], "Fine. [RESULT] 3\nOn reflection,");
}

#[test]
fn feedbacks_and_scores_are_cached_and_a_rerun_asks_nothing() {
    let cache = ResultCache::in_memory().unwrap();
    let options = rubric_options(true);
    let contexts = cased_contexts();
    let mut first = scripted_judge(Arc::default());
    let method = resolve_method(&mut first, &options, Some(&cache)).unwrap();
    let run = run_scoring(
        &mut first,
        &contexts,
        &method,
        &Progress::none(),
        Some(&cache),
    )
    .unwrap();
    assert_eq!((run.computed, run.cached), (5, 0));
    let mut second = scripted_judge(Arc::default());
    let calls = second.calls();
    let again = run_scoring(
        &mut second,
        &contexts,
        &method,
        &Progress::none(),
        Some(&cache),
    )
    .unwrap();
    assert_eq!((calls.generations(), calls.labels()), (0, 0));
    assert_eq!((again.computed, again.cached), (0, 5));
    assert_eq!(again.candidates, run.candidates);
}

#[test]
fn without_feedback_the_score_follows_the_prompt_and_the_marker() {
    let mut judge = MockScorer::new()
        .with_conventions(Conventions {
            rubric_protocol: Some("flow-judge".into()),
            ..Conventions::default()
        })
        .with_generation(|_| anyhow::bail!("no generation without feedback"))
        .with_labels(|prompt, labels| {
            anyhow::ensure!(
                prompt.ends_with("rubric.<score>"),
                "{:?}",
                &prompt[prompt.len() - 40..]
            );
            // Right after the marker: "1", not " 1".
            anyhow::ensure!(labels.iter().all(|l| !l.starts_with(' ')), "{labels:?}");
            Ok(vec![(0.2f64).ln(); labels.len()])
        });
    let calls = judge.calls();
    let mut options = rubric_options(false);
    options.reference = true;
    let method = resolve_method(&mut judge, &options, None).unwrap();
    let run = grade(&mut judge, &method);
    assert_eq!(calls.generations(), 0);
    assert!(run
        .candidates
        .iter()
        .all(|c| c.feedback.is_none() && c.format.is_none()));
    assert!((run.candidates[0].score - 3.0).abs() < 1e-12);
    assert!(run.diagnostics.get("format").is_none());
    // Plain when the card names no protocol; --protocol over the card's.
    let mut plain = MockScorer::new();
    let method = resolve_method(&mut plain, &options, None).unwrap();
    let ResolvedMethod::Rubric(rubric) = &method else {
        panic!()
    };
    assert_eq!(
        (rubric.protocol.clone(), rubric.protocol_source),
        (RubricProtocol::plain(), ProtocolSource::Default)
    );
    options.rubric.as_mut().unwrap().protocol = Some(RubricProtocol::prometheus());
    let method = resolve_method(&mut judge, &options, None).unwrap();
    let ResolvedMethod::Rubric(rubric) = &method else {
        panic!()
    };
    assert_eq!(
        (rubric.protocol.clone(), rubric.protocol_source),
        (RubricProtocol::prometheus(), ProtocolSource::Requested)
    );
}

#[test]
fn a_reference_is_required_with_reference_and_shown_as_score_5() {
    let mut options = rubric_options(false);
    options.reference = true;
    let mut judge = MockScorer::new()
        .with_conventions(Conventions {
            rubric_protocol: Some("prometheus".into()),
            ..Conventions::default()
        })
        .with_labels(|prompt, labels| {
            anyhow::ensure!(
                prompt.contains("###Reference Answer (Score 5):\nThe gold summary.\n\n"),
                "{prompt}"
            );
            Ok(vec![(0.2f64).ln(); labels.len()])
        });
    let method = resolve_method(&mut judge, &options, None).unwrap();
    grade(&mut judge, &method);
    let mut contexts = cased_contexts();
    contexts[1].candidates[0].reference = None;
    let error = format!(
        "{:#}",
        run_scoring(&mut judge, &contexts, &method, &Progress::none(), None).unwrap_err()
    );
    assert!(error.contains("`none` has no `reference`"), "{error}");
}

// ---- SmolLM2 with the plain format ----------------------------------------------------

#[test]
fn smollm2_writes_a_feedback_and_its_score_distribution_sums_to_one() {
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let mut request = ScoreRequest::new(ScoreMethod::Rubric, None);
    let mut rubric = RubricRequest::new("fluency");
    rubric.max_feedback_tokens = 40;
    request.rubric = Some(rubric);
    let options = request.options(Progress::none()).unwrap();
    let method = resolve_method(&mut scorer, &options, None).unwrap();
    let ResolvedMethod::Rubric(resolved) = &method else {
        panic!()
    };
    assert_eq!(resolved.protocol, RubricProtocol::plain());
    let candidates = [
        "The library opened after a long fundraising.",
        "library open saturday the the",
    ]
    .iter()
    .enumerate()
    .map(|(k, text)| (format!("c{k}"), text.to_string()))
    .collect::<Vec<_>>();
    let contexts = vec![common::contexts::context_of(
        "d",
        "The town library opened on Saturday after three years of fundraising.",
        &candidates,
    )];
    let run = run_scoring(&mut scorer, &contexts, &method, &Progress::none(), None).unwrap();
    for entry in &run.candidates {
        let d = entry.distribution.as_ref().unwrap();
        assert_eq!(d.scores, [1, 2, 3, 4, 5]);
        let sum: f64 = d.normalised.iter().sum();
        assert!((sum - 1.0).abs() < 1e-9, "{:?}", d.normalised);
        assert!(d.mass > 0.0 && d.mass <= 1.0 + 1e-9, "{}", d.mass);
        assert!(entry.score >= 1.0 && entry.score <= 5.0);
        let feedback = entry.feedback.as_deref().unwrap();
        assert!(!feedback.trim().is_empty(), "{:?}", entry.format);
        assert!(entry.format.is_some());
    }
    assert!(run.diagnostics.get("format").is_some());
}

/// Issue 60: `--reference` with rows that have no `reference` is the input's fault: every
/// route that shows references (rubric grading, G-Eval, relative grading) refuses it
/// with exit code 2, naming the candidate and its line, before the model is looked for;
/// relative grading also refuses a context whose candidates give different references.
#[test]
fn rows_without_a_reference_are_refused_before_the_model_loads() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let row = |context: &str, id: &str, reference: Option<&str>| {
        let mut row = serde_json::json!({
            "context_id": context,
            "context": "An article.",
            "candidate_id": id,
            "candidate": format!("Summary {id}."),
        });
        if let Some(reference) = reference {
            row["reference"] = reference.into();
        }
        format!("{row}\n")
    };
    let write = |b: Option<&str>| {
        let text = [
            row("c1", "a", Some("Gold one.")),
            row("c1", "b", b),
            row("c2", "x", Some("Gold two.")),
            row("c2", "y", Some("Gold three.")),
        ]
        .concat();
        std::fs::write(&input, text).unwrap();
    };
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args(args)
            .arg("--input")
            .arg(&input)
            .args(["--model", "no-such-model", "--no-cache", "--reference"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("no-such-model"), "{args:?}: {stderr}");
        stderr
    };
    write(None);
    for args in [
        &["score", "--method", "rubric", "--rubric", "coherence"][..],
        &["score", "--method", "geval", "--attribute", "coherence"],
        &["compare", "--rubric", "coherence"],
    ] {
        let stderr = run(args);
        assert!(
            stderr.contains("--reference shows each candidate's `reference`, but candidate `b` of context `c1` (")
                && stderr.contains("in.jsonl:2) has none (1 of 4 candidates have none)"),
            "{args:?}: {stderr}"
        );
    }
    write(Some("Gold one."));
    let stderr = run(&["compare", "--rubric", "coherence"]);
    assert!(
        stderr.contains("--reference: candidates `x` (")
            && stderr.contains("in.jsonl:3) and `y` (")
            && stderr.contains("of context `c2` give different references"),
        "{stderr}"
    );
}

/// Issue 60: `score --method rubric` without `--rubric` is asked for the rubric (the
/// attribute defaults to the rubric's name), not for `--attribute` first; a method that
/// needs an attribute still says so. Both before the model is looked for.
#[test]
fn a_rubric_run_without_a_rubric_is_asked_for_the_rubric() {
    let input = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/library.jsonl");
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args([
                "score",
                "--input",
                input,
                "--model",
                "no-such-model",
                "--no-cache",
            ])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("no-such-model"), "{args:?}: {stderr}");
        stderr
    };
    let stderr = run(&["--method", "rubric"]);
    assert!(
        stderr.contains("--method rubric needs a rubric: --rubric NAME or --rubric FILE"),
        "{stderr}"
    );
    assert!(!stderr.contains("--attribute"), "{stderr}");
    let stderr = run(&["--method", "geval"]);
    assert!(
        stderr.contains("--attribute is needed (or --criteria-text)"),
        "{stderr}"
    );
}

/// Issue 60: the output rows record how they were graded (the rubric, the protocol and
/// where it came from, the feedback bound), and the report's run panel says it too, not
/// only `method rubric`. The scripted `mock` model writes empty feedbacks.
#[test]
fn rubric_rows_and_reports_record_the_rubric_protocol_and_feedback_bound() {
    let dir = tempfile::tempdir().unwrap();
    let input = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/library.jsonl");
    for (extra, bound) in [
        (&["--max-feedback-tokens", "24"][..], Value::from(24)),
        (&["--no-feedback"][..], Value::Null),
    ] {
        let out = dir.path().join("out.jsonl");
        let report = dir.path().join("report.md");
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args(["score", "--method", "rubric", "--rubric", "coherence"])
            .args(["--model", "mock", "--no-cache", "--input", input])
            .args(extra)
            .arg("--output")
            .arg(&out)
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let text = std::fs::read_to_string(&out).unwrap();
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 5);
        for row in &rows {
            let rubric = &row["rubric"];
            assert_eq!(rubric["name"], "Coherence", "{row}");
            assert_eq!(rubric["protocol"], "plain");
            assert_eq!(rubric["protocol_source"], "default");
            assert_eq!(rubric["scale"], serde_json::json!([1, 5]));
            assert_eq!(rubric["max_feedback_tokens"], bound);
            assert!(rubric["criterion"].as_str().unwrap().len() > 10);
        }
        let markdown = std::fs::read_to_string(&report).unwrap();
        let feedback = if bound.is_null() {
            "feedback: none: the score read right after \\`Score:\\`".to_string()
        } else {
            "feedback: at most 24 tokens per candidate, then the score read after \\`Score:\\`"
                .to_string()
        };
        for fact in [
            "rubric: Coherence (1-5): ",
            "protocol: plain (the default for models without one)",
            &feedback,
        ] {
            assert!(markdown.contains(fact), "{fact:?} in:\n{markdown}");
        }
    }
}

/// The README's protocol file (`rubrics/protocols/README.md`), as a user would save it.
fn readme_protocol() -> String {
    let readme = include_str!("../../rubrics/protocols/README.md");
    let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + readme[start..].find("\n```").expect("its end");
    readme[start..end].to_string()
}

/// Issue 59: a protocol file written by a user (the README's example: a judge we do not
/// ship) grades end to end with a real model through `--protocol FILE`, its prompt as the
/// file's template renders it; malformed files exit 2 naming the field.
#[test]
fn the_readmes_protocol_file_grades_end_to_end_and_bad_files_name_their_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("my-judge.toml");
    std::fs::write(&file, readme_protocol()).unwrap();
    // The prompt is the file's template.
    let protocol = RubricProtocol::from_file(&file).unwrap();
    let rubric = Rubric::builtin("coherence", nlg_judge::judge::Task::Summary).unwrap();
    let input = RubricInput {
        context: Some("ART"),
        reference: None,
        output: "OUT",
    };
    let rendered = render(&protocol, &rubric, &input).unwrap();
    assert_eq!(
        rendered.system.as_deref(),
        Some("You are a careful grader.")
    );
    assert!(
        rendered.user.starts_with(
            "Grade the summary below on Coherence.\n\nSource Text:\nART\n\nSummary:\nOUT\n\n1: "
        ),
        "{}",
        rendered.user
    );
    assert!(rendered
        .user
        .ends_with("\nExplain, then end with \"Verdict: N\"."));
    assert!(protocol.cache_name().starts_with("my-judge@"));

    let input = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/library.jsonl");
    let out = dir.path().join("out.jsonl");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(["score", "--method", "rubric", "--rubric", "coherence"])
        .args([
            "--model",
            "smollm2-135m-instruct",
            "--max-feedback-tokens",
            "12",
        ])
        .args(["--no-cache", "--input", input, "--protocol"])
        .arg(&file)
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rows: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 5);
    for row in &rows {
        assert_eq!(row["rubric"]["protocol"], "my-judge", "{row}");
        assert_eq!(row["rubric"]["protocol_source"], "requested");
        assert!(row["format"].is_string(), "{row}");
        let normalised: f64 = row["probabilities"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_f64().unwrap())
            .sum();
        assert!((normalised - 1.0).abs() < 1e-9, "{row}");
    }

    // Malformed files: exit 2, the field named, before any model loads.
    for (edit, says) in [
        (
            ("marker = \"Verdict:\"", "marker = \"\""),
            "absolute.marker",
        ),
        (
            ("joiner = \"\\n\"", "joiner = \"\\n\"\ncolour = 1"),
            "colour",
        ),
        (("{{ response }}", "{{ respones }}"), "respones"),
        (("{% endif %}", ""), "absolute.user"),
        (
            (
                "choices = { a = \"A\", b = \"B\" }",
                "choices = { a = \"A\", b = \"A\" }",
            ),
            "relative.choices",
        ),
    ] {
        let text = readme_protocol().replacen(edit.0, edit.1, 1);
        assert_ne!(text, readme_protocol(), "{edit:?}");
        std::fs::write(&file, text).unwrap();
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args(["score", "--method", "rubric", "--rubric", "coherence"])
            .args(["--model", "no-such-model", "--no-cache", "--input", input])
            .arg("--protocol")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{says:?} in {stderr}");
        assert!(stderr.contains("my-judge.toml"), "{stderr}");
    }
}

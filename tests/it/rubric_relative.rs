//! Relative rubric grading (`compare --rubric`): Prometheus 2's pairwise prompts against
//! the fixtures written from the published templates, byte for byte; a compare run with a
//! scripted judge (feedback per ordered pair, P(A) read after the feedback and the marker,
//! the format counted, a rerun from the cache); the command line's refusals; and SmolLM2
//! reading A or B right after the plain format's marker.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common;
use crate::rubric::{example, fixture};
use nlg_judge::data::{Candidate, Context};
use nlg_judge::engine::{Conventions, FinishReason, MockScorer, ResultCache};
use nlg_judge::judge::attribute::{Attribute, Task};
use nlg_judge::judge::pairwise::run::{run_compare, write_comparisons, CompareOptions};
use nlg_judge::judge::pairwise::{Design, PairwiseTemplate};
use nlg_judge::judge::rubric::relative::{
    read_choice, render_relative, PairInput, RelativeGrading,
};
use nlg_judge::judge::rubric::run::ProtocolSource;
use nlg_judge::judge::rubric::{FormatOutcome, Rubric, RubricProtocol};
use nlg_judge::rank::RankMethod;
use serde_json::Value;

#[test]
fn prometheus_relative_prompts_are_the_published_template_byte_for_byte() {
    let (rubric, inputs) = example();
    let text = |key: &str| inputs[key].as_str().unwrap().to_string();
    let (context, reference, a, b) = (
        text("context"),
        text("reference"),
        text("response"),
        text("response_b"),
    );
    let with = PairInput {
        context: Some(&context),
        reference: Some(&reference),
        a: &a,
        b: &b,
    };
    let rendered = render_relative(&RubricProtocol::prometheus(), &rubric, &with).unwrap();
    assert_eq!(rendered.user, fixture("prometheus_relative.txt"));
    assert_eq!(
        rendered.system.as_deref(),
        Some(fixture("prometheus_relative_system.txt").as_str())
    );
    let without = PairInput {
        reference: None,
        ..with
    };
    let rendered = render_relative(&RubricProtocol::prometheus(), &rubric, &without).unwrap();
    assert_eq!(
        rendered.user,
        fixture("prometheus_relative_no_reference.txt")
    );
}

/// Each candidate's quality, written in its text; the scripted judge prefers the higher.
fn quality(text: &str, after: &str) -> u32 {
    let at = text
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} in {text}"))
        + after.len();
    let rest = &text[at..];
    let at = rest.find("quality=").unwrap() + "quality=".len();
    rest[at..at + 1].parse().unwrap()
}

/// A Prometheus judge whose feedback names the better response; for the pair (q1, q2) it
/// writes no marker (a `missing` format), for every other pair the marker and its choice.
/// P(A) = 0.8 when A is better, else 0.2, and only after the feedback and the marker.
fn scripted_judge(generations: Arc<AtomicUsize>) -> MockScorer {
    MockScorer::new()
        .with_conventions(Conventions {
            rubric_protocol: Some("prometheus".into()),
            ..Conventions::default()
        })
        .with_generation(move |prompt| {
            generations.fetch_add(1, Ordering::SeqCst);
            assert!(prompt.ends_with("###Feedback: "), "{prompt}");
            let (a, b) = (
                quality(prompt, "###Response A:"),
                quality(prompt, "###Response B:"),
            );
            let better = if a > b { "A" } else { "B" };
            Ok(if (a, b) == (1, 2) {
                format!("Response {better} holds together better.")
            } else {
                format!("Response {better} holds together better. [RESULT] {better}")
            })
        })
        .with_labels(|prompt, labels| {
            assert_eq!(
                labels,
                [" A", " B"],
                "the choices are read as ` A` and ` B` after `[RESULT]`"
            );
            let (a, b) = (
                quality(prompt, "###Response A:"),
                quality(prompt, "###Response B:"),
            );
            let better = if a > b { "A" } else { "B" };
            let expected = format!("Response {better} holds together better. [RESULT]");
            anyhow::ensure!(
                prompt.ends_with(&expected),
                "the choice is read after the feedback and the marker: {:?}",
                &prompt[prompt.len().saturating_sub(80)..]
            );
            let p_a = if a > b { 0.8f64 } else { 0.2 };
            Ok(vec![p_a.ln(), (1.0 - p_a).ln()])
        })
}

fn contexts() -> Vec<Context> {
    let candidate = |q: u32| Candidate {
        id: format!("q{q}"),
        text: format!("A summary, quality={q}."),
        reference: None,
        scores: [("coherence".to_string(), q as f64)].into(),
        system_id: None,
        metadata: Default::default(),
        source: None,
    };
    vec![Context {
        id: "d1".into(),
        text: "An article.".into(),
        candidates: [2, 4, 1, 3].into_iter().map(candidate).collect(),
    }]
}

fn relative_options(judge: &MockScorer, feedback: Option<usize>) -> CompareOptions {
    let task = Task::Summary;
    let mut options = CompareOptions::new(
        task,
        Attribute::named("coherence").unwrap(),
        PairwiseTemplate::builtin("c1", task).unwrap(),
    );
    options.design = Design::Full;
    options.rank = RankMethod::WinRatio;
    let rubric = Rubric::builtin("coherence", task).unwrap();
    let relative = RelativeGrading::new(judge, rubric, None, feedback, false).unwrap();
    assert_eq!(relative.protocol, RubricProtocol::prometheus());
    assert_eq!(relative.protocol_source, ProtocolSource::Card);
    options.relative = Some(Box::new(relative));
    options
}

#[test]
fn relative_grading_reads_each_choice_after_its_feedback_and_counts_the_format() {
    let generations = Arc::new(AtomicUsize::new(0));
    let mut judge = scripted_judge(generations.clone());
    let options = relative_options(&judge, Some(64));
    let dir = tempfile::tempdir().unwrap();
    let cache = ResultCache::open(&dir.path().join("cache.sqlite")).unwrap();
    let result = run_compare(&mut judge, &contexts(), &options, Some(&cache)).unwrap();
    assert_eq!(
        generations.load(Ordering::SeqCst),
        12,
        "one feedback per ordered pair"
    );
    let context = &result.contexts[0];
    // The ranking follows the judge's choices: quality 4, 3, 2, 1.
    let order: Vec<&str> = {
        let mut k: Vec<usize> = (0..4).collect();
        k.sort_by(|&x, &y| context.ranks[x].total_cmp(&context.ranks[y]));
        k.iter()
            .map(|&i| context.candidate_ids[i].as_str())
            .collect()
    };
    assert_eq!(order, ["q4", "q3", "q2", "q1"]);
    let qualities = [2, 4, 1, 3];
    for c in &context.comparisons {
        let better = qualities[c.first] > qualities[c.second];
        assert!(
            (c.p_a - if better { 0.8 } else { 0.2 }).abs() < 1e-9,
            "{c:?}"
        );
    }
    // One of twelve feedbacks (q1 shown first against q2) wrote no marker.
    let format = result
        .diagnostics
        .checks
        .iter()
        .find(|c| c.name == "format")
        .expect("a format check");
    assert!((format.value - 11.0 / 12.0).abs() < 1e-12, "{format:?}");
    assert!(
        format.message.contains("never written 1"),
        "{}",
        format.message
    );
    let missing = &result.feedbacks[&("d1".to_string(), "q1".to_string(), "q2".to_string())];
    assert_eq!(missing.format, FormatOutcome::Missing);
    assert_eq!(missing.feedback, "Response B holds together better.");
    // The comparisons file carries each feedback and its format.
    let mut out = Vec::new();
    write_comparisons(&result, &mut out).unwrap();
    let lines: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 12);
    let line = lines
        .iter()
        .find(|l| l["a"] == "q1" && l["b"] == "q2")
        .unwrap();
    assert_eq!(line["format"], "missing");
    assert!(lines.iter().filter(|l| l["format"] == "kept").count() == 11);
    // Issue 60: every row records how it was graded, as `score --method rubric`'s do.
    let mut scores = Vec::new();
    nlg_judge::judge::pairwise::run::write_scores(&result, &contexts(), &mut scores).unwrap();
    let rows: Vec<Value> = String::from_utf8(scores)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for row in rows.iter().chain(&lines) {
        let rubric = &row["rubric"];
        assert_eq!(rubric["name"], "Coherence", "{row}");
        assert_eq!(rubric["protocol"], "prometheus");
        assert_eq!(rubric["protocol_source"], "card");
        assert_eq!(rubric["max_feedback_tokens"], 64);
    }
    // Issue 60: the reports show every feedback too, not only --comparisons-out.
    let report = nlg_judge::report::Report::from_compare(
        "relative",
        Vec::new(),
        &result,
        &contexts(),
        "win ratio",
    )
    .unwrap();
    let pairs = report.runs[0].contexts[0]
        .pair_feedback
        .as_ref()
        .expect("the feedback of each comparison");
    assert_eq!(pairs.len(), 12);
    let shown = pairs
        .iter()
        .find(|p| (p.first, p.second) == (2, 0))
        .expect("q1 shown first against q2");
    assert_eq!(shown.feedback, "Response B holds together better.");
    assert_eq!(shown.format, FormatOutcome::Missing);
    let markdown = report.to_markdown();
    assert!(
        markdown.contains("Feedback on each comparison (A shown first):")
            && markdown.contains(
                "- A q1 vs B q2, P(A better) 0.200, format missing: Response B holds together \
                 better."
            ),
        "{markdown}"
    );
    let html = report.to_html().unwrap();
    assert!(
        html.contains("\"pair_feedback\"") && html.contains("Response B holds together better."),
        "the page's data carry the feedbacks"
    );
    assert!(html.contains("The judge's feedback on each comparison"));

    // A rerun reads feedbacks and choices from the cache.
    let again = run_compare(&mut judge, &contexts(), &options, Some(&cache)).unwrap();
    assert_eq!(
        generations.load(Ordering::SeqCst),
        12,
        "no feedback written again"
    );
    assert_eq!((again.computed, again.cached), (0, 12));
    assert_eq!(again.contexts[0].scores, context.scores);
}

#[test]
fn without_feedback_the_choice_follows_the_prompt_and_the_marker() {
    let generations = Arc::new(AtomicUsize::new(0));
    let mut judge = MockScorer::new()
        .with_conventions(Conventions {
            rubric_protocol: Some("prometheus".into()),
            ..Conventions::default()
        })
        .with_generation({
            let generations = generations.clone();
            move |_| {
                generations.fetch_add(1, Ordering::SeqCst);
                Ok(String::new())
            }
        })
        .with_labels(|prompt, _| {
            anyhow::ensure!(prompt.ends_with("###Feedback: [RESULT]"), "{prompt}");
            Ok(vec![0.6f64.ln(), 0.4f64.ln()])
        });
    let options = relative_options(&judge, None);
    let result = run_compare(&mut judge, &contexts(), &options, None).unwrap();
    assert_eq!(generations.load(Ordering::SeqCst), 0);
    assert!(result.feedbacks.is_empty());
    assert!(result.contexts[0]
        .comparisons
        .iter()
        .all(|c| (c.p_a - 0.6).abs() < 1e-9));
    assert!(result.diagnostics.checks.iter().all(|c| c.name != "format"));
}

#[test]
fn the_choice_reading_holds_every_way_a_feedback_breaks_its_format() {
    let prometheus = RubricProtocol::prometheus();
    let form = prometheus.relative().unwrap();
    let read = |text: &str, finish| read_choice(form, None, text, finish).answer;
    assert_eq!(
        read("Good. [RESULT] A", FinishReason::Stop),
        "Good. [RESULT] "
    );
    assert_eq!(
        read("Good. [RESULT] A then [RESULT] B", FinishReason::Stop),
        "Good. [RESULT] A then [RESULT] "
    );
    assert_eq!(
        read("Cut in the mid", FinishReason::MaxTokens),
        "Cut in the mid [RESULT] "
    );
}

fn nlg_judge(args: &[&str], cache: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(args)
        .env("NLG_JUDGE_CACHE", cache)
        .output()
        .unwrap()
}

#[test]
fn the_command_line_refuses_what_relative_grading_cannot_take() {
    let dir = tempfile::tempdir().unwrap();
    let input = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/library.jsonl");
    let base = ["compare", "--model", "mock", "--input", input, "--no-cache"];
    for (extra, says) in [
        (
            vec!["--rubric", "coherence", "--adjective", "clearer"],
            "--adjective does not apply with --rubric",
        ),
        (
            vec![
                "--rubric",
                "coherence",
                "--design",
                "adaptive",
                "--comparisons",
                "8",
            ],
            "cannot use --design adaptive",
        ),
        (
            vec!["--rubric", "coherence", "--protocol", "flow-judge"],
            "no relative grading",
        ),
        (vec!["--rubric", "no-such-rubric"], "--rubric"),
        (
            vec!["--attribute", "coherence", "--protocol", "plain"],
            "--rubric",
        ),
        (
            vec![
                "--rubric",
                "coherence",
                "--no-feedback",
                "--max-feedback-tokens",
                "9",
            ],
            "--max-feedback-tokens does not apply with --no-feedback",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(extra.iter().copied());
        let run = nlg_judge(&args, dir.path());
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    }
}

#[test]
fn smollm2_reads_a_or_b_after_the_plain_marker() {
    common::card_file("smollm2-135m-instruct");
    let dir = tempfile::tempdir().unwrap();
    let input = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/library.jsonl");
    let comparisons = dir.path().join("comparisons.jsonl");
    let output = dir.path().join("scores.jsonl");
    let run = nlg_judge(
        &[
            "compare",
            "--rubric",
            "coherence",
            "--no-feedback",
            "--show-prompt",
            "--input",
            input,
            "--output",
            output.to_str().unwrap(),
            "--comparisons-out",
            comparisons.to_str().unwrap(),
        ],
        &dir.path().join("cache"),
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("relative rubric grading: rubric Coherence")
            && stderr.contains("plain format"),
        "{stderr}"
    );
    assert!(stderr.contains("\nBetter:\n--- labels: "), "{stderr}");
    let lines: Vec<Value> = std::fs::read_to_string(&comparisons)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 20);
    for line in &lines {
        let p_a = line["p_a"].as_f64().unwrap();
        let mass = line["label_mass"].as_f64().unwrap();
        assert!(
            p_a > 0.0 && p_a < 1.0 && mass > 0.0 && mass <= 1.0,
            "{line}"
        );
        assert!(line.get("feedback").is_none());
    }
    let scored = std::fs::read_to_string(&output).unwrap();
    assert_eq!(scored.lines().count(), 5);
}

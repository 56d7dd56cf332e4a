//! The service's rubric grading (`POST /v1/score` with `"method": "rubric"`) and its
//! compare route's handling of candidates too long for the model, with scripted judges:
//! answers equal the library's (`score --method rubric`'s route, `compare`'s set-aside
//! rule), the feedback and format come back as `score --output` writes them, remedies
//! name request fields, and bad rubric input is refused (400) naming the field.

use std::sync::{Arc, Mutex};

use nlg_judge::data::{Candidate, Context};
use nlg_judge::engine::{Conventions, MockScorer, ModelInfo, Scorer};
use nlg_judge::judge::pairwise::fit::compare_what_fits;
use nlg_judge::judge::pairwise::CompareRequest;
use nlg_judge::judge::rubric::{Rubric, RubricProtocol};
use nlg_judge::judge::{
    resolve_method, run_scoring, RubricChoice, RubricRequest, ScoreMethod, ScoreRequest, ScoreRun,
};
use nlg_judge::progress::Progress;
use nlg_judge::server::ServerConfig;
use serde_json::{json, Value};

use crate::common;
use crate::common::service::Service;

/// What the scripted judge writes for an output naming its case, and the score its label
/// distribution peaks at.
fn feedback_of(prompt: &str) -> &'static str {
    if prompt.contains("case=kept") {
        "Clear and complete. [RESULT] 4"
    } else {
        "This feedback goes on and on about the summary and never reaches a verdict at all"
    }
}

/// A Prometheus judge by its card: scripted feedback, labels peaking at 4 after a kept
/// feedback and at 2 elsewhere; every label prompt is recorded.
fn prometheus_judge(prompts: Arc<Mutex<Vec<String>>>) -> MockScorer {
    MockScorer::new()
        .with_conventions(Conventions {
            rubric_protocol: Some("prometheus".into()),
            ..Conventions::default()
        })
        .with_generation(|prompt| Ok(feedback_of(prompt).to_string()))
        .with_labels(move |prompt, labels| {
            prompts.lock().unwrap().push(prompt.to_string());
            let peak = if prompt.contains("case=kept") { 4 } else { 2 };
            labels
                .iter()
                .map(|label| {
                    let score: i64 = label.trim().parse()?;
                    Ok(if score == peak { 0.6f64 } else { 0.05 }.ln())
                })
                .collect()
        })
}

/// The library's rubric run (the command line's route) over one output.
fn library_run(
    judge: &mut MockScorer,
    rubric: RubricChoice,
    protocol: Option<RubricProtocol>,
    feedback: Option<usize>,
    (context, output, reference): (&str, &str, Option<&str>),
) -> ScoreRun {
    let mut request = ScoreRequest::new(ScoreMethod::Rubric, None);
    let mut chosen = RubricRequest::new("unused");
    chosen.rubric = rubric;
    chosen.protocol = protocol;
    chosen.feedback = feedback.is_some();
    if let Some(tokens) = feedback {
        chosen.max_feedback_tokens = tokens;
    }
    request.rubric = Some(chosen);
    request.reference = reference.is_some();
    let options = request.options(Progress::none()).unwrap();
    let method = resolve_method(judge, &options, None).unwrap();
    let contexts = [Context {
        id: "d".into(),
        text: context.into(),
        candidates: vec![Candidate {
            id: "c".into(),
            text: output.into(),
            reference: reference.map(str::to_string),
            scores: Default::default(),
            system_id: None,
            metadata: Default::default(),
            source: None,
        }],
    }];
    run_scoring(judge, &contexts, &method, &Progress::none(), None).unwrap()
}

fn probabilities(body: &Value, key: &str) -> Vec<f64> {
    body[key]
        .as_object()
        .unwrap()
        .values()
        .map(|p| p.as_f64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rubric_grading_answers_as_the_command_line_route() {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let judge = prometheus_judge(prompts.clone());
    let calls = judge.calls();
    let server = Service::start(Box::new(judge), ServerConfig::default()).await;
    let output = "A summary, case=kept.";
    let answer = server
        .post(
            "/v1/score",
            &json!({"method": "rubric", "rubric": "coherence", "output": output,
                    "context": "An article.", "reference": "The gold summary."}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let body = answer.json();
    assert_eq!(calls.generations(), 1, "one feedback written");

    let mut local = prometheus_judge(Arc::default());
    let run = library_run(
        &mut local,
        RubricChoice::Named("coherence".into()),
        None,
        Some(512),
        ("An article.", output, Some("The gold summary.")),
    );
    let expected = &run.candidates[0];
    let distribution = expected.distribution.as_ref().unwrap();
    assert_eq!(body["score"].as_f64().unwrap(), expected.score);
    assert_eq!(body["argmax"], 4);
    assert_eq!(
        probabilities(&body, "probabilities"),
        distribution.normalised
    );
    assert_eq!(probabilities(&body, "raw_probabilities"), distribution.raw);
    assert_eq!(body["label_mass"].as_f64().unwrap(), distribution.mass);
    assert_eq!(body["scale"], json!([1, 5]));
    // As `score --output` writes them.
    assert_eq!(body["feedback"], "Clear and complete.");
    assert_eq!(body["format"], "kept");
    assert_eq!(
        body["rubric"],
        json!({"name": "Coherence", "protocol": "prometheus", "protocol_source": "card",
               "feedback": true})
    );
    let checks = body["diagnostics"]["checks"].as_array().unwrap();
    let format = checks.iter().find(|c| c["name"] == "format").unwrap();
    assert_eq!(
        (format["value"].as_f64(), &format["status"]),
        (Some(1.0), &json!("ok"))
    );
    // The score was read after the feedback and the marker, with the reference shown.
    let prompts = prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 1);
    assert!(
        prompts[0].contains("###Reference Answer (Score 5):\nThe gold summary.\n\n")
            && prompts[0].ends_with("###Feedback: Clear and complete. [RESULT]"),
        "{}",
        prompts[0]
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_feedback_is_counted_and_its_remedy_names_request_fields() {
    let server = Service::start(
        Box::new(prometheus_judge(Arc::default())),
        ServerConfig::default(),
    )
    .await;
    let answer = server
        .post(
            "/v1/score",
            &json!({"method": "rubric", "rubric": "fluency", "output": "A summary, case=cut.",
                    "max_feedback_tokens": 30}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let body = answer.json();
    assert_eq!(body["format"], "cut");
    assert_eq!(body["argmax"], 2);
    // Cut at the mock's 30 bytes, trimmed.
    assert_eq!(body["feedback"], "This feedback goes on and on a");
    let format = body["diagnostics"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "format")
        .unwrap()
        .clone();
    assert_eq!(format["status"], "warn");
    assert_eq!(format["value"].as_f64(), Some(0.0));
    let remedy = format["remedy"].as_str().unwrap();
    assert!(
        remedy.contains("\"max_feedback_tokens\"")
            && remedy.contains("\"feedback\": false")
            && !remedy.contains("--max-feedback-tokens")
            && !remedy.contains("--no-feedback"),
        "{remedy}"
    );
    assert_eq!(body["diagnostics"]["warnings"], 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_rubric_without_feedback_reads_the_score_after_the_prompt() {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let judge = prometheus_judge(prompts.clone());
    let calls = judge.calls();
    let server = Service::start(Box::new(judge), ServerConfig::default()).await;
    let rubric = json!({"name": "Politeness", "criterion": "Is the reply polite?",
                        "scale": [1, 3], "descriptions": ["rude", "neutral", "warm"]});
    let output = "Thanks a lot, case=kept!";
    let answer = server
        .post(
            "/v1/score",
            &json!({"method": "rubric", "rubric": rubric, "output": output,
                    "task": "dialogue", "protocol": "plain", "feedback": false}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let body = answer.json();
    assert_eq!(calls.generations(), 0, "no feedback, no generation");
    assert!(body.get("feedback").is_none() && body.get("format").is_none());
    assert_eq!(body["scale"], json!([1, 3]));
    assert_eq!(body["rubric"]["protocol_source"], "requested");
    assert_eq!(body["rubric"]["feedback"], false);
    assert!(body["diagnostics"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "format"));

    let given =
        Rubric::from_inline(rubric, Some(nlg_judge::judge::Task::Dialogue), "rubric").unwrap();
    let mut local = prometheus_judge(Arc::default());
    let run = library_run(
        &mut local,
        RubricChoice::Given(Box::new(given)),
        Some(RubricProtocol::plain()),
        None,
        ("", output, None),
    );
    assert_eq!(body["score"].as_f64().unwrap(), run.candidates[0].score);
    let prompts = prompts.lock().unwrap().clone();
    assert!(
        prompts[0].contains("Response:\nThanks a lot, case=kept!")
            && prompts[0].contains("Criterion (Politeness): Is the reply polite?")
            && prompts[0].ends_with("from 1 to 3.Score:"),
        "{}",
        prompts[0]
    );
    server.shutdown().await;
}

/// Issue 59: the service takes a judge's protocol given whole as an object (a protocol
/// file's fields): the prompt is its template, the score read after its marker, and the
/// answer names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_protocol_object_grades_as_its_template_says() {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let judge = prometheus_judge(prompts.clone());
    let server = Service::start(Box::new(judge), ServerConfig::default()).await;
    let protocol = json!({
        "name": "terse",
        "absolute": {
            "user": "Rate {{ response }} for {{ criterion_name | lower }} from {{ scale_low }} to {{ scale_high }}.",
            "marker": "Rating:",
            "separator": " ",
        }
    });
    let answer = server
        .post(
            "/v1/score",
            &json!({"method": "rubric", "rubric": "coherence", "output": "A summary, case=kept.",
                    "protocol": protocol, "feedback": false}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let body = answer.json();
    assert_eq!(body["rubric"]["protocol"], "terse");
    assert_eq!(body["rubric"]["protocol_source"], "requested");
    let prompts = prompts.lock().unwrap().clone();
    assert_eq!(
        prompts[0],
        "Rate A summary, case=kept. for coherence from 1 to 5.Rating:"
    );
    assert_eq!(body["argmax"], 4);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rubric_requests_are_400_naming_the_field() {
    let judge = prometheus_judge(Arc::default());
    let calls = judge.calls();
    let server = Service::start(Box::new(judge), ServerConfig::default()).await;
    let five = ["a", "b", "c", "d", "e"];
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({"method": "rubric", "output": "x"}),
            vec!["field `rubric` is needed"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "/etc/rubric.toml"}),
            vec!["field `rubric`", "names a file"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "wit"}),
            vec!["field `rubric`: no built-in rubric `wit`", "story/surprise"],
        ),
        (
            json!({"method": "rubric", "output": "x",
                   "rubric": {"criterion": "c", "descriptions": ["a", "b", "c", "d"]}}),
            vec!["field `rubric`: field `descriptions`: 4 description(s)"],
        ),
        (
            json!({"method": "rubric", "output": "x",
                   "rubric": {"criterion": "c", "descriptions": five, "colour": 1}}),
            vec!["invalid field `rubric.colour`"],
        ),
        (
            json!({"method": "rubric", "output": "x",
                   "rubric": {"criterion": "c", "descriptions": [1, 2, 3, 4, 5]}}),
            vec!["invalid field `rubric.descriptions[0]`"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "coherence",
                   "protocol": "gpt"}),
            vec!["invalid field `protocol`", "prometheus"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "coherence",
                   "attribute": "coherence"}),
            vec!["field `attribute` does not apply to rubric grading"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "coherence",
                   "feedback": false, "max_feedback_tokens": 10}),
            vec!["field `max_feedback_tokens` does not apply"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "coherence",
                   "max_feedback_tokens": 100000}),
            vec!["field `max_feedback_tokens`: 100000 is not between 1 and 2048"],
        ),
        (
            // The served model's card says prometheus, which grades on 1-5 only.
            json!({"method": "rubric", "output": "x",
                   "rubric": {"criterion": "c", "scale": [1, 3], "descriptions": ["a", "b", "c"]}}),
            vec!["field `rubric`", "1-5 only", "\"protocol\": \"plain\""],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "coherence", "reference": " "}),
            vec!["field `reference` is empty"],
        ),
        (
            json!({"method": "geval", "output": "x", "rubric": "coherence"}),
            vec!["field `method`", "/v1/geval"],
        ),
        (
            json!({"output": "x", "attribute": "fluency", "rubric": "coherence"}),
            vec!["field `rubric` applies to `\"method\": \"rubric\"` only"],
        ),
        (json!({"output": "x"}), vec!["field `attribute` is needed"]),
        (
            // A request never names a file on the server.
            json!({"method": "rubric", "output": "x", "rubric": "coherence",
                   "protocol": "/etc/protocol.toml"}),
            vec!["invalid field `protocol`", "unknown protocol"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "coherence",
                   "protocol": {"name": "mine", "absolute": {"user": "{{ respones }}", "marker": "S:"}}}),
            vec!["invalid field `protocol`", "absolute.user", "respones"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "coherence",
                   "max_reasoning_tokens": 100}),
            vec!["field `max_reasoning_tokens`", "has no reasoning"],
        ),
        (
            json!({"method": "rubric", "output": "x", "rubric": "coherence",
                   "protocol": "plain", "thinking": false}),
            vec!["field `thinking`", "has no reasoning"],
        ),
    ];
    for (body, needles) in cases {
        let answer = server.post("/v1/score", &body).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.text);
        let error = answer.json()["error"].as_str().unwrap().to_string();
        for needle in needles {
            assert!(error.contains(needle), "{body}: {needle:?} not in {error}");
        }
    }
    assert_eq!(
        calls.generations() + calls.labels(),
        0,
        "nothing reached the model"
    );
    server.shutdown().await;
}

/// A mock with a window of 1000 tokens whose P(A) follows the digit at the start of each
/// summary (the larger digit wins).
fn small_window_judge() -> MockScorer {
    let mock = MockScorer::new().with_labels(|prompt, _| {
        let digit = |tag: &str| {
            let at = prompt.find(tag).unwrap() + tag.len();
            prompt[at..at + 1].parse::<f64>().unwrap()
        };
        let p = common::contexts::sigmoid(digit("Summary A: ") - digit("Summary B: "));
        Ok(vec![p.ln(), (1.0 - p).ln()])
    });
    let info = ModelInfo {
        context_window: 1000,
        ..mock.info().clone()
    };
    mock.with_info(info)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_sets_too_long_candidates_aside_as_the_command_line() {
    let server = Service::start(Box::new(small_window_judge()), ServerConfig::default()).await;
    let huge = format!("5 {}", "word ".repeat(400));
    let texts = ["2 mid", huge.as_str(), "9 top", "0 low"];
    let answer = server
        .post(
            "/v1/compare",
            &json!({"context": "Doc.", "attribute": "coherence",
                    "candidates": [texts[0], {"id": "huge", "text": texts[1]}, texts[2], texts[3]]}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let body = answer.json();
    let ids: Vec<&str> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["0", "2", "3"]);
    assert_eq!(body["comparisons"], 6);
    let aside = body["set_aside"].as_array().unwrap();
    assert_eq!(aside.len(), 1);
    assert_eq!(aside[0]["id"], "huge");
    assert_eq!(aside[0]["limit"], 1000);
    assert!(aside[0]["tokens"].as_u64().unwrap() > 1000, "{}", aside[0]);
    assert!(aside[0]["reason"]
        .as_str()
        .unwrap()
        .contains("more than the model's window of 1000"));
    let check = body["diagnostics"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "too_long")
        .unwrap()
        .clone();
    assert_eq!(check["status"], "warn");
    assert!(
        check["message"]
            .as_str()
            .unwrap()
            .starts_with("1 candidate not ranked"),
        "{check}"
    );
    assert!(
        check["remedy"]
            .as_str()
            .unwrap()
            .contains("(serve one with --model)"),
        "{check}"
    );

    // The library's rule on the same candidates: the same ranking of the rest.
    let context = common::contexts::context_of(
        "request",
        "Doc.",
        &[
            ("0".into(), texts[0].into()),
            ("huge".into(), texts[1].into()),
            ("2".into(), texts[2].into()),
            ("3".into(), texts[3].into()),
        ],
    );
    let options = CompareRequest::new("coherence")
        .options(Progress::none())
        .unwrap();
    let mut local = small_window_judge();
    let fitted = compare_what_fits(&mut local, vec![context], &options, None).unwrap();
    let served: Vec<f64> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["score"].as_f64().unwrap())
        .collect();
    assert_eq!(served, fitted.result.contexts[0].scores);
    let ranks: Vec<f64> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["rank"].as_f64().unwrap())
        .collect();
    assert_eq!(ranks, [2.0, 1.0, 3.0]);

    // Nothing left to rank: 422 naming the candidates, as the command line's exit code 2.
    let answer = server
        .post(
            "/v1/compare",
            &json!({"context": "Doc.", "attribute": "coherence",
                    "candidates": [{"id": "long", "text": texts[1]}, "1 short"]}),
        )
        .await;
    assert_eq!(answer.status, 422, "{}", answer.text);
    let error = answer.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("no context has two candidates whose comparison fits the model")
            && error.contains("`long` of context `request`"),
        "{error}"
    );
    // All fit: nothing set aside.
    let answer = server
        .post(
            "/v1/compare",
            &json!({"context": "Doc.", "attribute": "coherence", "candidates": ["1 a", "2 b"]}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json()["set_aside"], json!([]));
    server.shutdown().await;
}

/// A Prometheus judge comparing two responses: it prefers the one whose text names the
/// higher `quality=N`, writes that in its feedback with `[RESULT] A` or `B`, and puts
/// 0.8 on that label.
fn relative_judge() -> MockScorer {
    fn quality(prompt: &str, after: &str) -> u32 {
        let start = prompt.find(after).expect("the response's heading") + after.len();
        let rest = &prompt[start..];
        let at = rest.find("quality=").expect("a quality") + "quality=".len();
        rest[at..at + 1].parse().unwrap()
    }
    let better = |prompt: &str| {
        if quality(prompt, "###Response A:") > quality(prompt, "###Response B:") {
            "A"
        } else {
            "B"
        }
    };
    MockScorer::new()
        .with_conventions(Conventions {
            rubric_protocol: Some("prometheus".into()),
            ..Conventions::default()
        })
        .with_generation(move |prompt| {
            let choice = better(prompt);
            Ok(format!(
                "Response {choice} holds together. [RESULT] {choice}"
            ))
        })
        .with_labels(move |prompt, labels| {
            assert_eq!(labels, [" A", " B"]);
            let p_a = if better(prompt) == "A" { 0.8f64 } else { 0.2 };
            Ok(vec![p_a.ln(), (1.0 - p_a).ln()])
        })
}

/// Issue 60: `/v1/compare` grades relatively on a rubric through the route `compare
/// --rubric` runs (its scores, ranks and feedbacks are the library's), answers ranks as
/// the output files write them (`1`, not `1.0`), and a body that is not an object is
/// told so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_grades_relatively_on_a_rubric_as_the_command_line_route() {
    let server = Service::start(Box::new(relative_judge()), ServerConfig::default()).await;
    let texts = [
        ("s2", "quality=2"),
        ("s3", "quality=3"),
        ("s1", "quality=1"),
    ];
    let candidates: Vec<Value> = texts
        .iter()
        .map(|(id, text)| json!({"id": id, "text": format!("A summary, {text}.")}))
        .collect();
    let answer = server
        .post(
            "/v1/compare",
            &json!({"context": "An article.", "candidates": candidates, "rubric": "coherence",
                    "max_feedback_tokens": 64}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let body = answer.json();

    // The library's route, as `compare --rubric coherence --max-feedback-tokens 64` runs it.
    let mut local = relative_judge();
    let rubric = Rubric::builtin("coherence", nlg_judge::judge::Task::Summary).unwrap();
    let mut options = CompareRequest::new("")
        .with_rubric(&rubric, |o| format!("--{o}"))
        .unwrap()
        .options(Progress::none())
        .unwrap();
    options.relative = Some(Box::new(
        nlg_judge::judge::rubric::relative::RelativeGrading::new(
            &local,
            rubric,
            None,
            Some(64),
            false,
        )
        .unwrap(),
    ));
    let context = Context {
        id: "request".into(),
        text: "An article.".into(),
        candidates: texts
            .iter()
            .map(|(id, text)| Candidate {
                id: id.to_string(),
                text: format!("A summary, {text}."),
                reference: None,
                scores: Default::default(),
                system_id: None,
                metadata: Default::default(),
                source: None,
            })
            .collect(),
    };
    let fitted = compare_what_fits(&mut local, vec![context], &options, None).unwrap();
    let expected = &fitted.result.contexts[0];
    let answered = body["candidates"].as_array().unwrap();
    assert_eq!(answered.len(), 3);
    for (k, candidate) in answered.iter().enumerate() {
        assert_eq!(candidate["id"], expected.candidate_ids[k]);
        assert_eq!(candidate["score"].as_f64().unwrap(), expected.scores[k]);
        // A whole rank is an integer, as `compare --output` writes it.
        assert!(candidate["rank"].is_i64(), "{candidate}");
        assert_eq!(candidate["rank"].as_f64().unwrap(), expected.ranks[k]);
    }
    assert!(answer.text.contains("\"rank\":1,") || answer.text.contains("\"rank\":1}"));
    assert_eq!(answered[1]["rank"], 1, "quality 3 is best");
    assert_eq!(
        body["rubric"],
        json!({"name": "Coherence", "protocol": "prometheus", "protocol_source": "card",
               "feedback": true})
    );
    let feedbacks = body["feedbacks"].as_array().unwrap();
    assert_eq!(feedbacks.len(), 6, "one per ordered pair");
    for feedback in feedbacks {
        let key = (
            "request".to_string(),
            feedback["a"].as_str().unwrap().to_string(),
            feedback["b"].as_str().unwrap().to_string(),
        );
        let reading = &fitted.result.feedbacks[&key];
        assert_eq!(feedback["feedback"], reading.feedback.as_str());
        assert_eq!(feedback["format"], "kept");
    }
    let format = body["diagnostics"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "format")
        .expect("the format check");
    assert_eq!(format["value"], 1.0);

    // A body that is an array is told it must be an object.
    let answer = server
        .post(
            "/v1/compare",
            &json!(["An article.", ["a", "b"], "coherence"]),
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.text);
    assert!(
        answer
            .text
            .contains("invalid body: the body must be a JSON object, not an array"),
        "{}",
        answer.text
    );
    // Relative grading's fields without a rubric are refused, naming the field.
    let answer = server
        .post(
            "/v1/compare",
            &json!({"context": "c", "candidates": ["a", "b"], "attribute": "coherence",
                    "protocol": "plain"}),
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.text);
    assert!(answer
        .text
        .contains("field `protocol` applies to relative rubric grading"));
    server.shutdown().await;
}

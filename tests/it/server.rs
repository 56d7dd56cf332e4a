//! The metrics service on loopback with a scripted model: request checks (400, 401, 413,
//! 422), concurrent G-Eval requests served in one round and equal to the library's
//! results, `/healthz` while the model is busy, and graceful shutdown.
//!
//! Requests go over plain TCP (HTTP/1.1, `Connection: close`). The mock can be held at a
//! gate inside its label script, which makes "while the model is busy" deterministic.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Result;
use nlg_judge::engine::{MockScorer, ResultCache};
use nlg_judge::judge::geval::{self, Criteria, GevalInput, StepsSource};
use nlg_judge::judge::{absolute, ScoreDistribution, ScoreScale, Task};
use nlg_judge::server::{serve, ServerConfig, WorkerStats};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::common;
use crate::common::gate::Gate;

/// Label log-probs as a function of the prompt text only: score labels get weights
/// that depend on the prompt's length, 70% of the mass in all.
fn label_logprobs(prompt: &str, labels: &[String]) -> Vec<f64> {
    let weights: Vec<f64> = (0..labels.len())
        .map(|k| 1.0 + ((prompt.len() + 3 * k) % 5) as f64)
        .collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| (0.7 * w / total).ln()).collect()
}

const STEPS: &str = " Read the source.\n2. Read the output.\n3. Rate it.";

fn mock(gate: Arc<Gate>) -> MockScorer {
    MockScorer::new()
        .with_generation(|_| Ok(STEPS.to_string()))
        .with_labels(move |prompt, labels| {
            gate.pass();
            Ok(label_logprobs(prompt, labels))
        })
}

struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<nlg_judge::server::DrainReport>>,
    stats: Arc<WorkerStats>,
}

impl Running {
    async fn start(scorer: MockScorer, config: ServerConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let stats = Arc::new(WorkerStats::default());
        let task = tokio::spawn(serve(
            listener,
            Box::new(scorer),
            ResultCache::in_memory().unwrap(),
            config,
            stats.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            stop: Some(stop),
            task,
            stats,
        }
    }

    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

/// One HTTP/1.1 request; the status and the JSON body (`Null` when empty).
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
    };
    (status, body)
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    http(addr, "POST", path, &[], body.to_string().as_bytes()).await
}

fn error_of(body: &Value) -> String {
    body["error"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_invalid_bodies_are_400_naming_the_problem() {
    let server = Running::start(mock(Gate::open()), ServerConfig::default()).await;
    let (status, body) = http(
        server.addr,
        "POST",
        "/v1/geval",
        &[],
        b"{\"output\": \"x\",\n  \"criteria\": }",
    )
    .await;
    assert_eq!(status, 400);
    let error = error_of(&body);
    assert!(
        error.contains("malformed JSON") && error.contains("line 2 column"),
        "{error}"
    );

    let (status, body) = post(server.addr, "/v1/geval", &json!({"criteria": "coherence"})).await;
    assert_eq!(status, 400);
    assert!(error_of(&body).contains("`output`"), "{body}");

    let (status, body) = post(
        server.addr,
        "/v1/geval",
        &json!({"output": "x", "criteria": "coherence", "scale": "five"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(error_of(&body).contains("`scale`"), "{body}");

    // A string that is no built-in name is the criterion itself (free text), and the
    // answer says how it was read.
    let (status, body) = post(
        server.addr,
        "/v1/geval",
        &json!({"output": "x", "criteria": "charm"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["criteria_name"], "Score");
    assert_eq!(body["scale_source"], "default");

    // Prompt scoring names the attribute in its prompt: any name is scored, and an
    // adjective, which the prompt would not use, is refused naming the field.
    let (status, body) = post(
        server.addr,
        "/v1/score",
        &json!({"output": "x", "attribute": "funniness"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        server.addr,
        "/v1/score",
        &json!({"output": "x", "attribute": "funniness", "adjective": "funny"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error_of(&body).contains("field `adjective` does not apply to prompt scoring"),
        "{body}"
    );

    let (status, _) = http(server.addr, "GET", "/v1/nothing", &[], b"").await;
    assert_eq!(status, 404);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_413() {
    let mut config = ServerConfig::default();
    config.limits.max_body_bytes = 4096;
    let server = Running::start(mock(Gate::open()), config).await;
    let big = json!({"output": "x".repeat(5000), "criteria": "coherence"});
    let (status, body) = post(server.addr, "/v1/geval", &big).await;
    assert_eq!(status, 413);
    let error = error_of(&body);
    assert!(
        error.contains("larger")
            && error.contains("4096 bytes")
            && error.contains("--max-body-bytes"),
        "{body}"
    );
    let small = json!({"output": "x".repeat(100), "criteria": "coherence", "steps": "1. Rate."});
    let (status, _) = post(server.addr, "/v1/geval", &small).await;
    assert_eq!(status, 200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_bodies_name_the_missing_field_and_wrong_methods_name_the_right_one() {
    let server = Running::start(mock(Gate::open()), ServerConfig::default()).await;
    for path in ["/v1/geval", "/v1/score", "/v1/compare"] {
        let (status, body) = http(server.addr, "POST", path, &[], b"{}").await;
        assert_eq!(status, 400, "{path}");
        let error = error_of(&body);
        assert!(
            error.contains("incomplete body: missing field") && !error.contains("malformed"),
            "{path}: {error}"
        );
        let (status, body) = http(server.addr, "GET", path, &[], b"").await;
        assert_eq!(status, 405, "{path}");
        assert!(error_of(&body).contains("use POST"), "{path}: {body}");
        let answer = crate::common::service::request(server.addr, "GET", path, &[], b"").await;
        assert_eq!(answer.header("allow"), Some("POST"), "{path}");
    }
    // The OpenAI routes answer in their shape.
    let (status, body) = http(server.addr, "GET", "/v1/chat/completions", &[], b"").await;
    assert_eq!(status, 405);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("POST"),
        "{body}"
    );
    // `candidate`, as in the input files, is the text to rate.
    let (status, body) = post(
        server.addr,
        "/v1/geval",
        &json!({"candidate": "x", "criteria": "coherence", "steps": "1. Rate."}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        server.addr,
        "/v1/score",
        &json!({"candidate": "x", "attribute": "fluency", "context": "c"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_is_required_on_every_v1_route() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "t0ken-abc\n").unwrap();
    let config = ServerConfig {
        tokens: Some(nlg_judge::server::Tokens::from_file(&path).unwrap()),
        ..ServerConfig::default()
    };
    let server = Running::start(mock(Gate::open()), config).await;
    let body = json!({"output": "x", "criteria": "coherence", "steps": "1. Rate."}).to_string();
    let (status, answer) = http(server.addr, "POST", "/v1/geval", &[], body.as_bytes()).await;
    assert_eq!(status, 401);
    assert!(error_of(&answer).contains("missing"), "{answer}");
    for wrong in ["Bearer t0ken-abd", "Bearer t0ken-ab", "Basic t0ken-abc"] {
        let (status, _) = http(
            server.addr,
            "POST",
            "/v1/geval",
            &[("Authorization", wrong)],
            body.as_bytes(),
        )
        .await;
        assert_eq!(status, 401, "{wrong}");
    }
    let (status, _) = http(server.addr, "GET", "/v1/models", &[], b"").await;
    assert_eq!(status, 401);
    let auth = [("Authorization", "Bearer t0ken-abc")];
    let (status, answer) = http(server.addr, "POST", "/v1/geval", &auth, body.as_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    let (status, models) = http(server.addr, "GET", "/v1/models", &auth, b"").await;
    assert_eq!(status, 200);
    assert_eq!(models["models"][0]["name"], "mock");
    assert!(models["criteria"].as_array().unwrap().len() >= 9);
    let (status, health) = http(server.addr, "GET", "/healthz", &[], b"").await;
    assert_eq!((status, health["status"].as_str()), (200, Some("ready")));
    server.shutdown().await;
}

/// The library's answer for G-Eval request `k` of the concurrent test.
fn library_geval(k: usize) -> (ScoreDistribution, String) {
    let mut scorer = mock(Gate::open());
    let criteria = Criteria::builtin(Task::Summary, "coherence").unwrap();
    let source = if k % 2 == 0 {
        StepsSource::Given(format!("1. Custom step {k}."))
    } else {
        StepsSource::default()
    };
    let steps = geval::resolve_steps(&mut scorer, &criteria, &source, None).unwrap();
    let output = format!("Output number {k}{}", "!".repeat(k));
    let reference = format!("Expected {k}");
    let input = GevalInput {
        source: Some("The source text."),
        reference: (k % 3 == 0).then_some(reference.as_str()),
        output: &output,
    };
    let distribution = geval::evaluate(&mut scorer, &criteria, &steps.text, &input).unwrap();
    (distribution, steps.text)
}

fn geval_body(k: usize) -> Value {
    let mut body = json!({
        "output": format!("Output number {k}{}", "!".repeat(k)),
        "context": "The source text.",
        "criteria": "coherence",
        "scale": [1, 5],
    });
    if k % 2 == 0 {
        body["steps"] = json!(format!("1. Custom step {k}."));
    }
    if k % 3 == 0 {
        body["expected_output"] = json!(format!("Expected {k}"));
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_geval_requests_are_served_together_and_match_the_library() {
    let gate = Gate::closed();
    let scorer = mock(gate.clone());
    let calls = scorer.calls();
    let server = Running::start(scorer, ServerConfig::default()).await;
    let addr = server.addr;

    // The first request holds the model at the gate...
    let first = tokio::spawn(async move { post(addr, "/v1/geval", &geval_body(0)).await });
    let waiting = gate.clone();
    tokio::task::spawn_blocking(move || waiting.wait_for(1))
        .await
        .unwrap();
    // ...while 31 more queue up and /healthz still answers.
    let rest: Vec<_> = (1..32)
        .map(|k| tokio::spawn(async move { (k, post(addr, "/v1/geval", &geval_body(k)).await) }))
        .collect();
    common::wait::until_async(
        "31 requests queued behind the gate (/healthz queued 31)",
        || async {
            let (status, health) = http(addr, "GET", "/healthz", &[], b"").await;
            assert_eq!(status, 200);
            health["queued"] == 31
        },
    )
    .await;
    gate.release();

    let mut answers = vec![(0, first.await.unwrap())];
    for handle in rest {
        answers.push(handle.await.unwrap());
    }
    for (k, (status, body)) in answers {
        assert_eq!(status, 200, "request {k}: {body}");
        let (expected, steps) = library_geval(k);
        assert_eq!(
            body["score"].as_f64().unwrap(),
            expected.expectation,
            "request {k}"
        );
        assert_eq!(body["argmax"].as_i64().unwrap(), expected.argmax);
        assert_eq!(body["steps"].as_str().unwrap(), steps);
        for (s, (p, raw)) in expected
            .scores
            .iter()
            .zip(expected.normalised.iter().zip(&expected.raw))
        {
            let key = s.to_string();
            assert_eq!(body["probabilities"][&key].as_f64().unwrap(), *p);
            assert_eq!(body["raw_probabilities"][&key].as_f64().unwrap(), *raw);
        }
        let total: f64 = expected.normalised.iter().sum();
        assert!((total - 1.0).abs() < 1e-12);
    }
    // Two rounds: the held request alone, then the 31 queued ones in one scorer call;
    // the model's own steps were written once.
    let get = WorkerStats::get;
    assert_eq!(get(&server.stats.jobs), 32);
    assert_eq!(get(&server.stats.rounds), 2);
    assert_eq!(get(&server.stats.label_calls), 2);
    assert_eq!(calls.generations(), 1);
    assert_eq!(calls.labels(), 32);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_scoring_matches_the_library() {
    let server = Running::start(mock(Gate::open()), ServerConfig::default()).await;
    let (status, body) = post(
        server.addr,
        "/v1/score",
        &json!({"output": "A reply.", "context": "A: hello", "attribute": "engagingness", "task": "dialogue"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let mut scorer = mock(Gate::open());
    let request = absolute::request(
        &scorer,
        Task::Dialogue,
        "engagingness",
        "A: hello",
        "A reply.",
        absolute::DEFAULT_SCALE,
    )
    .unwrap();
    let result = nlg_judge::engine::Scorer::label_logprobs(&mut scorer, &[request]).unwrap();
    let expected = ScoreDistribution::from_result(absolute::DEFAULT_SCALE, &result[0]).unwrap();
    assert_eq!(body["score"].as_f64().unwrap(), expected.expectation);
    assert_eq!(body["probabilities"].as_object().unwrap().len(), 10);
    assert!(body.get("steps").is_none());
    let (status, body) = post(
        server.addr,
        "/v1/score",
        &json!({"output": "A reply.", "attribute": "fluency", "scale": [0, 3]}),
    )
    .await;
    assert_eq!(status, 200);
    let keys: Vec<&String> = body["probabilities"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["0", "1", "2", "3"]);
    let _ = ScoreScale::new(0, 3).unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_ranks_candidates_and_limits_their_number() {
    // p(A) from the digits in the two candidates: the larger digit wins.
    let scorer = MockScorer::new().with_labels(|prompt, labels| {
        let digit = |tag: &str| {
            let at = prompt.find(tag).unwrap() + tag.len();
            prompt[at..at + 1].parse::<f64>().unwrap()
        };
        let p = 1.0 / (1.0 + (-(digit("Summary A: ") - digit("Summary B: "))).exp());
        assert_eq!(labels.len(), 2);
        Ok(vec![p.ln(), (1.0 - p).ln()])
    });
    let mut config = ServerConfig::default();
    config.limits.max_candidates = 4;
    let server = Running::start(scorer, config).await;
    let (status, body) = post(
        server.addr,
        "/v1/compare",
        &json!({"context": "Doc.", "attribute": "coherence",
                "candidates": ["2 mid", {"id": "best", "text": "9 top"}, "0 low"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["comparisons"], 6);
    let ranks: Vec<(String, f64)> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["rank"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ranks,
        [
            ("0".to_string(), 2.0),
            ("best".to_string(), 1.0),
            ("2".to_string(), 3.0)
        ]
    );
    let (status, body) = post(
        server.addr,
        "/v1/compare",
        &json!({"context": "Doc.", "attribute": "coherence",
                "candidates": ["1", "2", "3", "4", "5"]}),
    )
    .await;
    assert_eq!(status, 422);
    assert!(error_of(&body).contains("at most 4"), "{body}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_the_request_in_flight() {
    let gate = Gate::closed();
    let server = Running::start(mock(gate.clone()), ServerConfig::default()).await;
    let addr = server.addr;
    let body = json!({"output": "x", "criteria": "fluency", "steps": "1. Rate."});
    let in_flight = tokio::spawn(async move { post(addr, "/v1/geval", &body).await });
    let waiting = gate.clone();
    tokio::task::spawn_blocking(move || waiting.wait_for(1))
        .await
        .unwrap();
    let Running {
        stop, task, stats, ..
    } = server;
    stop.unwrap().send(()).unwrap();
    // The listener closes while the request waits for the model.
    common::wait::until_async("the listener to close after the stop signal", || async {
        TcpStream::connect(addr).await.is_err()
    })
    .await;
    assert!(!task.is_finished());
    gate.release();
    let (status, answer) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["probabilities"].as_object().unwrap().len(), 3);
    task.await.unwrap().unwrap();
    assert_eq!(WorkerStats::get(&stats.jobs), 1);
}

/// The G-Eval metrics-service example: criteria as one free-text string and a separate
/// task prompt. The answer carries the example's fields (`score`, `raw_probabilities`),
/// ours, and the scale used with where it came from; it equals the library's answer
/// for the same criteria.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geval_with_free_text_criteria_like_the_service_example() {
    let server = Running::start(mock(Gate::open()), ServerConfig::default()).await;
    let criteria_text =
        "Coherence (1-5): evaluate the logical flow and connection between sentences.";
    let task_prompt = "You will evaluate the quality of a generated text.";
    let (status, body) = post(
        server.addr,
        "/v1/geval",
        &json!({
            "task_prompt": task_prompt,
            "criteria": criteria_text,
            "context": "Original context here",
            "output": "Generated text to evaluate",
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["scale"], json!([1, 5]));
    assert_eq!(body["scale_source"], "criteria_text");
    assert_eq!(body["criteria_name"], "Coherence");

    let mut scorer = mock(Gate::open());
    let (criteria, _) =
        geval::criteria_from_text(criteria_text, Some(task_prompt), None, None).unwrap();
    let steps =
        geval::resolve_steps(&mut scorer, &criteria, &StepsSource::default(), None).unwrap();
    let input = GevalInput {
        source: Some("Original context here"),
        reference: None,
        output: "Generated text to evaluate",
    };
    let expected = geval::evaluate(&mut scorer, &criteria, &steps.text, &input).unwrap();
    assert_eq!(body["score"].as_f64().unwrap(), expected.expectation);
    for (s, raw) in expected.scores.iter().zip(&expected.raw) {
        assert_eq!(
            body["raw_probabilities"][s.to_string()].as_f64().unwrap(),
            *raw
        );
    }

    // No range in the text: the request's scale, else 1-5, and the answer says which.
    let (status, body) = post(
        server.addr,
        "/v1/geval",
        &json!({"criteria": "Politeness: is it polite?", "output": "Thanks!", "scale": [0, 3]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["scale"].clone(), body["scale_source"].clone()),
        (json!([0, 3]), json!("requested"))
    );
    let (status, body) = post(
        server.addr,
        "/v1/geval",
        &json!({"criteria": "Politeness: is it polite?", "output": "Thanks!"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["scale"].clone(), body["scale_source"].clone()),
        (json!([1, 5]), json!("default"))
    );
    // A range that is no scale: 400 naming the field and the range.
    let (status, body) = post(
        server.addr,
        "/v1/geval",
        &json!({"criteria": "Coherence (5-1): flow", "output": "Thanks!"}),
    )
    .await;
    assert_eq!(status, 400);
    let error = error_of(&body);
    assert!(
        error.contains("`criteria`") && error.contains("(5-1)"),
        "{error}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_model_cannot_take_is_422_and_a_model_failure_500() {
    let scorer = MockScorer::new().with_labels(|prompt, _labels| {
        if prompt.contains("TOO LONG") {
            Err(nlg_judge::engine::EngineError::BadRequest(
                "prompt and label need 9000 tokens, more than the model's context window".into(),
            )
            .into())
        } else {
            Err(anyhow::anyhow!("the device was lost"))
        }
    });
    let server = Running::start(scorer, ServerConfig::default()).await;
    let (status, body) = post(
        server.addr,
        "/v1/score",
        &json!({"output": "TOO LONG", "context": "A: hello", "attribute": "engagingness", "task": "dialogue"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(error_of(&body).contains("context window"), "{body}");
    let (status, body) = post(
        server.addr,
        "/v1/score",
        &json!({"output": "fine", "context": "A: hello", "attribute": "engagingness", "task": "dialogue"}),
    )
    .await;
    assert_eq!(status, 500, "{body}");
    assert!(error_of(&body).contains("the device was lost"), "{body}");
    server.shutdown().await;
}

/// `/v1/compare` ranks as `compare` does, by the one rule of the library: a judge whose
/// answers all go to the first position ties every candidate under the win ratio, so
/// both switch to Product of Experts and say so; the answer names the method, accepts
/// `debias` as the command line does, and its remedies name request fields, not flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_ranks_as_the_command_line_and_its_remedies_name_request_fields() {
    // p(A) = sigmoid(0.1 (digit A - digit B) + 2): A always wins, the digit decides by how
    // much.
    let biased = || {
        MockScorer::new().with_labels(|prompt, _| {
            let digit = |tag: &str| {
                let at = prompt.find(tag).unwrap() + tag.len();
                prompt[at..at + 1].parse::<f64>().unwrap()
            };
            let logit = 0.1 * (digit("Summary A: ") - digit("Summary B: ")) + 2.0;
            let p = 1.0 / (1.0 + (-logit).exp());
            Ok(vec![p.ln(), (1.0 - p).ln()])
        })
    };
    let texts = ["2 mid", "9 top", "0 low"];
    let server = Running::start(biased(), ServerConfig::default()).await;
    let (status, body) = post(
        server.addr,
        "/v1/compare",
        &json!({"context": "Doc.", "attribute": "coherence", "candidates": texts}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rank"], "poe", "{body}");
    let served: Vec<f64> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["score"].as_f64().unwrap())
        .collect();

    // The command line's route: its request's defaults, on the same candidates.
    let context = common::contexts::context_of(
        "request",
        "Doc.",
        &texts
            .iter()
            .enumerate()
            .map(|(k, text)| (k.to_string(), text.to_string()))
            .collect::<Vec<_>>(),
    );
    let options = nlg_judge::judge::pairwise::CompareRequest::new("coherence")
        .options(nlg_judge::progress::Progress::none())
        .unwrap();
    let mut judge = biased();
    let local =
        nlg_judge::judge::pairwise::run_compare(&mut judge, &[context], &options, None).unwrap();
    assert_eq!(local.rank, nlg_judge::rank::RankMethod::Poe);
    for (served, local) in served.iter().zip(&local.contexts[0].scores) {
        assert!((served - local).abs() < 1e-12, "{served} vs {local}");
    }
    let ranks: Vec<f64> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["rank"].as_f64().unwrap())
        .collect();
    assert_eq!(ranks, [2.0, 1.0, 3.0]);
    let adjusted = body["diagnostics"]["adjusted"].as_str().unwrap();
    assert!(adjusted.contains("\"rank\": \"win-ratio\""), "{adjusted}");

    // `debias` is a field as on the command line; no remedy names a flag.
    let (status, body) = post(
        server.addr,
        "/v1/compare",
        &json!({"context": "Doc.", "attribute": "coherence", "candidates": texts,
                "debias": "threshold", "rank": "win-ratio"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rank"], "win-ratio");
    for check in body["diagnostics"]["checks"].as_array().unwrap() {
        let remedy = check["remedy"].as_str().unwrap_or_default();
        assert!(
            !remedy.contains("--rank") && !remedy.contains("--debias"),
            "{remedy}"
        );
        assert!(
            !remedy.contains("\"debias\""),
            "threshold in effect: {remedy}"
        );
    }
    server.shutdown().await;
}

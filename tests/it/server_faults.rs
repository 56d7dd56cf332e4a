//! The service under faults: a full queue (503 with `Retry-After`, on the metrics and
//! OpenAI routes alike), a panic in the model code (500 for that request, the others and
//! later ones served), too many connections, bodies and heads that stop arriving, and
//! SIGTERM on the real binary with an idle, a half-open and a busy client (the busy one
//! is answered, the others closed, exit 0 without waiting for the drain timeout), and
//! with requests arriving at the signal (a head begun, or a new connection not sending
//! yet: served when the head completes within the drain's grace, closed when it does
//! not) and an idle keep-alive client (closed at once).
//!
//! No test bounds how fast anything is: waits end on an event, and the one bound (the
//! process's exit) only turns a hang into a failure.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream as StdStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nlg_judge::engine::MockScorer;
use nlg_judge::server::ServerConfig;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common;
use crate::common::gate::Gate;
use crate::common::service::{request, Service};

/// A mock held at `gate` that panics on prompts containing `BOOM`.
fn gated_mock(gate: Arc<Gate>) -> MockScorer {
    MockScorer::new().with_labels(move |prompt, labels| {
        gate.pass();
        if prompt.contains("BOOM") {
            panic!("scripted failure");
        }
        Ok(vec![(0.2f64).ln(); labels.len()])
    })
}

fn score_body(output: &str) -> Vec<u8> {
    json!({"output": output, "attribute": "fluency", "context": "c"})
        .to_string()
        .into_bytes()
}

/// Poll `/healthz` until `ready` holds on it (the `event` named if it never does).
async fn wait_health(service: &Service, event: &str, ready: impl Fn(&Value) -> bool) -> Value {
    common::wait::for_value_async(event, || async {
        let health = service.get("/healthz").await.json();
        ready(&health).then_some(health)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_503_with_retry_after_on_every_route() {
    let gate = Arc::new(Gate::default());
    let mut config = ServerConfig::default();
    config.limits.max_queue = 2;
    let service = Service::start(Box::new(gated_mock(gate.clone())), config).await;
    let addr = service.addr;
    let send = |k: usize| {
        tokio::spawn(async move {
            request(
                addr,
                "POST",
                "/v1/score",
                &[],
                &score_body(&format!("out {k}")),
            )
            .await
        })
    };
    // One request in the model, two waiting: the queue is full.
    let first = send(0);
    let waiting = gate.clone();
    tokio::task::spawn_blocking(move || waiting.wait_for(1))
        .await
        .unwrap();
    let queued = [send(1), send(2)];
    let health = wait_health(&service, "two requests queued (/healthz queued 2)", |h| {
        h["queued"] == 2
    })
    .await;
    assert_eq!(health["max_queue"], 2);

    let refused = service
        .post("/v1/score", &json!({"output": "x", "attribute": "fluency"}))
        .await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(refused.json()["error"]
        .as_str()
        .unwrap()
        .contains("capacity"));
    let refused = service
        .post(
            "/v1/completions",
            &json!({"model": "mock", "prompt": "hi", "max_tokens": 1}),
        )
        .await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.json()["error"]["code"], "service_unavailable");
    // Nothing is lost: the queued requests are answered once the model moves.
    gate.release();
    assert_eq!(first.await.unwrap().status, 200);
    for handle in queued {
        let answer = handle.await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text);
    }
    let health = service.get("/healthz").await.json();
    assert_eq!(health["refused"], 2);
    assert_eq!(health["status"], "ready");
    service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_model_fails_only_its_request_and_the_worker_goes_on() {
    let gate = Arc::new(Gate::default());
    let service = Service::start(Box::new(gated_mock(gate.clone())), ServerConfig::default()).await;
    let addr = service.addr;
    let send = |output: &'static str| {
        tokio::spawn(
            async move { request(addr, "POST", "/v1/score", &[], &score_body(output)).await },
        )
    };
    // The first request holds the model; three more (one that panics) make one round.
    let first = send("first");
    let waiting = gate.clone();
    tokio::task::spawn_blocking(move || waiting.wait_for(1))
        .await
        .unwrap();
    let round = [send("calm one"), send("BOOM"), send("calm two")];
    wait_health(&service, "three requests queued (/healthz queued 3)", |h| {
        h["queued"] == 3
    })
    .await;
    gate.release();
    assert_eq!(first.await.unwrap().status, 200);
    let answers: Vec<_> = futures_join(round).await;
    assert_eq!(answers[0].status, 200, "{}", answers[0].text);
    assert_eq!(answers[2].status, 200, "{}", answers[2].text);
    assert_eq!(answers[1].status, 500, "{}", answers[1].text);
    let error = answers[1].json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("panicked") && error.contains("scripted failure"),
        "{error}"
    );
    // The worker goes on, alone as in a round.
    let alone = service
        .post(
            "/v1/score",
            &json!({"output": "BOOM", "attribute": "fluency"}),
        )
        .await;
    assert_eq!(alone.status, 500, "{}", alone.text);
    let after = service
        .post(
            "/v1/score",
            &json!({"output": "later", "attribute": "fluency"}),
        )
        .await;
    assert_eq!(after.status, 200, "{}", after.text);
    let health = service.get("/healthz").await.json();
    assert!(health["panics"].as_u64().unwrap() >= 2, "{health}");
    service.shutdown().await;
}

async fn futures_join<T: Send + 'static>(
    handles: impl IntoIterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_bound_get_503_and_are_closed() {
    let mut config = ServerConfig::default();
    config.limits.max_connections = 2;
    let service = Service::start(Box::new(MockScorer::new()), config).await;
    let held = [
        TcpStream::connect(service.addr).await.unwrap(),
        TcpStream::connect(service.addr).await.unwrap(),
    ];
    let answer = service.get("/healthz").await;
    assert_eq!(answer.status, 503, "{}", answer.text);
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert!(
        answer.text.contains("too many connections"),
        "{}",
        answer.text
    );
    drop(held);
    // Once they are gone, requests are served again.
    common::wait::until_async(
        "/healthz to answer 200 once the held connections closed",
        || async { service.get("/healthz").await.status == 200 },
    )
    .await;
    service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_arriving_is_408_and_a_head_that_stops_is_closed() {
    let mut config = ServerConfig::default();
    config.limits.body_timeout = Duration::from_millis(200);
    config.limits.header_timeout = Duration::from_millis(200);
    let service = Service::start(Box::new(MockScorer::new()), config).await;

    let mut stream = TcpStream::connect(service.addr).await.unwrap();
    stream
        .write_all(b"POST /v1/score HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"output\":")
        .await
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive"), "{answer}");

    let mut stream = TcpStream::connect(service.addr).await.unwrap();
    stream
        .write_all(b"POST /v1/score HTTP/1.1\r\nHost: t\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    // Closed by the service (no answer, or a reset): the read ends.
    let _ = stream.read_to_end(&mut answer).await;
    assert!(!String::from_utf8_lossy(&answer).contains("200 OK"));
    service.shutdown().await;
}

/// The binary serving the mock model; its address, read from its first line.
struct Binary {
    child: Child,
    addr: SocketAddr,
    stderr: BufReader<std::process::ChildStderr>,
}

impl Binary {
    fn start(model: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args([
                "serve",
                "--model",
                model,
                "--addr",
                "127.0.0.1:0",
                "--no-cache",
            ])
            .args(extra)
            .env("NLG_JUDGE_CACHE", dir.path())
            // The drain's steps, for tests that wait for one.
            .env("RUST_LOG", "nlg_judge::server::listen=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let addr = loop {
            line.clear();
            assert!(
                stderr.read_line(&mut line).unwrap() > 0,
                "serve ended early"
            );
            if let Some(rest) = line.split("http://").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
        };
        Self {
            child,
            addr,
            stderr,
        }
    }

    /// Read stderr up to a line containing `needle`; that line.
    fn wait_for_line(&mut self, needle: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stderr.read_line(&mut line).unwrap() > 0,
                "serve ended before a line with {needle:?}"
            );
            if line.contains(needle) {
                return line;
            }
        }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Wait for the exit (a hang is a failure after a generous bound); the exit status
    /// and the rest of stderr.
    fn wait(mut self) -> (std::process::ExitStatus, String) {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(120) {
                let _ = self.child.kill();
                panic!("serve did not exit after the signal");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).unwrap();
        (status, rest)
    }
}

fn health(addr: SocketAddr) -> Value {
    let mut stream = StdStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap()
}

#[test]
fn sigterm_finishes_the_busy_request_closes_half_open_ones_and_exits_0() {
    // Timeouts far beyond the test: only the drain can close the idle and half-open
    // clients, and the drain must not wait for them beyond the grace (2 s by default).
    let server = Binary::start(
        "mock:delay-ms=1500",
        &[
            "--header-timeout",
            "600",
            "--body-timeout",
            "600",
            "--drain-timeout",
            "300",
        ],
    );
    let addr = server.addr;
    let idle = StdStream::connect(addr).unwrap();
    let mut half_head = StdStream::connect(addr).unwrap();
    half_head
        .write_all(b"POST /v1/score HTTP/1.1\r\nHost: t\r\nContent-Le")
        .unwrap();
    let mut half_body = StdStream::connect(addr).unwrap();
    half_body
        .write_all(b"POST /v1/score HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"out")
        .unwrap();
    let busy = std::thread::spawn(move || {
        let body = score_body("in flight");
        let mut stream = StdStream::connect(addr).unwrap();
        write!(
            stream,
            "POST /v1/score HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        stream.write_all(&body).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    });
    // The busy request is in the model (taken by the worker) before the signal.
    common::wait::until(
        "the busy request to reach the model (/healthz jobs 1)",
        || health(addr)["jobs"] == 1,
    );
    server.signal("TERM");

    let answer = busy.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    let mut text = String::new();
    half_body.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 1"),
        "{text}"
    );
    for mut closed in [idle, half_head] {
        let mut rest = Vec::new();
        let _ = closed.read_to_end(&mut rest); // ends: closed (or reset) by the service
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
    let (status, stderr) = server.wait();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("0 cut at the drain timeout"), "{stderr}");
    // The half-open head and the new silent connection had the grace, and were closed
    // at its end.
    assert!(
        stderr.contains(
            "2 awaited for a request arriving, 1 of them new and silent: 0 completed and served, 2 closed unfinished"
        ),
        "{stderr}"
    );
}

/// A connection with part of a request head sent (maybe none), accepted by the service (a
/// request on a later connection was answered, and connections are accepted in order).
fn connected_with(addr: SocketAddr, part: &[u8]) -> StdStream {
    let mut stream = StdStream::connect(addr).unwrap();
    stream.write_all(part).unwrap();
    assert_eq!(health(addr)["status"], "ready");
    stream
}

#[test]
fn sigterm_serves_requests_arriving_and_closes_idle_keep_alive_connections() {
    // Timeouts and grace far beyond the test: only the rest of the head ends the grace.
    let mut server = Binary::start(
        "mock",
        &[
            "--header-timeout",
            "600",
            "--drain-timeout",
            "300",
            "--drain-grace",
            "300",
        ],
    );
    let addr = server.addr;
    let body = score_body("arriving at the signal");
    // A keep-alive client that has been answered and sends nothing more: idle.
    let mut idle = StdStream::connect(addr).unwrap();
    write!(
        idle,
        "POST /v1/score HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    idle.write_all(&body).unwrap();
    let mut reader = BufReader::new(idle.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let length = loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.to_ascii_lowercase();
        if let Some(value) = line.strip_prefix("content-length:") {
            break value.trim().parse::<usize>().unwrap();
        }
    };
    let mut rest = String::new();
    while rest != "\r\n" {
        rest.clear();
        reader.read_line(&mut rest).unwrap();
    }
    let mut answered = vec![0u8; length];
    reader.read_exact(&mut answered).unwrap();

    // A new connection whose client has not sent yet, and one with part of a head.
    let mut silent = connected_with(addr, b"");
    let mut arriving = connected_with(addr, b"POST /v1/score HTTP/1.1\r\nHost: t\r\nContent-Ty");
    server.signal("TERM");
    for _ in 0..2 {
        server.wait_for_line("awaiting a request arriving");
    }
    // The rest, after the drain has begun.
    for (stream, head) in [
        (
            &mut silent,
            "POST /v1/score HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n",
        ),
        (&mut arriving, "pe: application/json\r\n"),
    ] {
        write!(stream, "{head}Content-Length: {}\r\n\r\n", body.len()).unwrap();
        stream.write_all(&body).unwrap();
    }
    for mut stream in [silent, arriving] {
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        let (_, json) = answer.split_once("\r\n\r\n").unwrap();
        let json: Value = serde_json::from_str(json).unwrap();
        assert!(json["score"].is_number(), "{json}");
    }

    let mut after = Vec::new();
    let _ = reader.read_to_end(&mut after); // the idle one: closed, nothing sent
    assert!(after.is_empty(), "{}", String::from_utf8_lossy(&after));
    let (status, stderr) = server.wait();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains(
            "2 awaited for a request arriving, 1 of them new and silent: 2 completed and served, 0 closed unfinished"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("0 cut at the drain timeout"), "{stderr}");
}

#[test]
fn sigterm_closes_a_head_that_does_not_complete_within_the_grace() {
    // The header and drain timeouts are far beyond the test: only the grace closes it.
    let server = Binary::start(
        "mock",
        &[
            "--header-timeout",
            "600",
            "--drain-timeout",
            "300",
            "--drain-grace",
            "0.5",
        ],
    );
    let mut stalled = connected_with(server.addr, b"POST /v1/score HTTP/1.1\r\nHost: t\r\n");
    server.signal("TERM");
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest); // ends: closed (or reset) by the service
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    let (status, stderr) = server.wait();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains(
            "1 awaited for a request arriving, 0 of them new and silent: 0 completed and served, 1 closed unfinished"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("no complete request head within the grace"),
        "{stderr}"
    );
    assert!(stderr.contains("0 cut at the drain timeout"), "{stderr}");
}

#[test]
fn sigint_on_an_idle_service_exits_0() {
    let server = Binary::start("mock", &[]);
    assert_eq!(health(server.addr)["status"], "ready");
    server.signal("INT");
    let (status, stderr) = server.wait();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("stopped"), "{stderr}");
}

#[test]
fn a_panic_in_the_binary_is_a_500_and_serving_goes_on() {
    let server = Binary::start("mock:panic-on=BOOM", &[]);
    let post = |output: &str| {
        let body = score_body(output);
        let mut stream = StdStream::connect(server.addr).unwrap();
        write!(
            stream,
            "POST /v1/score HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        stream.write_all(&body).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    };
    let boom = post("BOOM");
    assert!(boom.starts_with("HTTP/1.1 500"), "{boom}");
    assert!(post("calm").starts_with("HTTP/1.1 200"));
    server.signal("TERM");
    let (status, stderr) = server.wait();
    assert!(status.success(), "{status}: {stderr}");
}

//! The service on a network: no open service on an address other than loopback unless
//! asked (and then a warning at start and in `/healthz`); TLS with a certificate made
//! here (a CA and a server certificate from rcgen) through a client that verifies it
//! (ureq over rustls), on the metrics and OpenAI routes alike, plain HTTP on the TLS port
//! refused without disturbing the others; one token per user, a token removed and
//! reloaded while its request is in progress (that request completes, the next is 401),
//! on SIGHUP in the binary too; and the per-token bound under one token's flood while
//! another token is served.
//!
//! No test bounds how fast anything is: waits end on an event, and the one bound (the
//! binary's exit) only turns a hang into a failure.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream as StdStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nlg_judge::engine::MockScorer;
use nlg_judge::server::{tls, ServerConfig, Tokens};
use serde_json::{json, Value};

use crate::common;
use crate::common::gate::Gate;
use crate::common::service::{request, Answer, Service};

fn held_mock(hold: Arc<Gate>) -> MockScorer {
    MockScorer::new().with_labels(move |_, labels| {
        hold.pass();
        Ok(vec![(0.1f64).ln(); labels.len()])
    })
}

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-9876543210";

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn score_body(output: &str) -> Vec<u8> {
    json!({"output": output, "attribute": "fluency", "context": "c"})
        .to_string()
        .into_bytes()
}

async fn score_as(service: &Service, token: &str, output: &str) -> Answer {
    let auth = bearer(token);
    service
        .request(
            "POST",
            "/v1/score",
            &[("Authorization", &auth)],
            &score_body(output),
        )
        .await
}

async fn health_as(service: &Service, token: &str) -> Value {
    let auth = bearer(token);
    service
        .request("GET", "/healthz", &[("Authorization", &auth)], b"")
        .await
        .json()
}

fn write_tokens(path: &Path, lines: &[(&str, &str)]) {
    let text: String = lines
        .iter()
        .map(|(name, token)| format!("{name}:{token}\n"))
        .collect();
    std::fs::write(path, format!("# test tokens\n{text}")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_progress_survives_the_removal_of_its_token_and_the_next_is_401() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    write_tokens(&path, &[("alice", ALICE), ("bob", BOB)]);
    let tokens = Tokens::from_file(&path).unwrap();
    let hold = Arc::new(Gate::default());
    let config = ServerConfig {
        tokens: Some(tokens.clone()),
        ..ServerConfig::default()
    };
    let service = Arc::new(Service::start(Box::new(held_mock(hold.clone())), config).await);

    let in_progress = {
        let service = service.clone();
        tokio::spawn(async move { score_as(&service, BOB, "held").await })
    };
    // Bob's request is in the model.
    let waiting = hold.clone();
    tokio::task::spawn_blocking(move || waiting.wait_for(1))
        .await
        .unwrap();

    write_tokens(&path, &[("alice", ALICE)]);
    assert_eq!(tokens.reload().unwrap().names(), ["alice"]);
    let refused = score_as(&service, BOB, "after").await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    assert!(
        refused.text.contains("wrong bearer token"),
        "{}",
        refused.text
    );

    hold.release();
    let answered = in_progress.await.unwrap();
    assert_eq!(answered.status, 200, "{}", answered.text);
    assert_eq!(score_as(&service, ALICE, "alice").await.status, 200);

    // A file that does not read keeps the tokens in force, and /healthz says so.
    std::fs::write(&path, "alice:one-token-here\nalice:another-one\n").unwrap();
    assert!(tokens.reload().is_err());
    assert_eq!(score_as(&service, ALICE, "still").await.status, 200);
    let health = health_as(&service, ALICE).await;
    assert_eq!(health["auth"]["tokens"], 1);
    assert_eq!(health["auth"]["reloads"], 1);
    assert!(health["auth"]["last_reload_error"]
        .as_str()
        .unwrap()
        .contains("line 2"));
    // Counters by name, for a caller with a token; never a token.
    assert_eq!(health["per_token"]["bob"]["requests"], 1);
    assert_eq!(health["per_token"]["alice"]["requests"], 2);
    assert!(!health.to_string().contains(ALICE) && !health.to_string().contains(BOB));
    let anonymous = service.get("/healthz").await.json();
    assert!(anonymous.get("per_token").is_none(), "{anonymous}");
    assert_eq!(anonymous["auth"]["tokens"], 1);
    assert_eq!(anonymous["auth"]["reload_failed"], true);
    assert!(
        anonymous["auth"].get("last_reload_error").is_none(),
        "{anonymous}"
    );

    Arc::try_unwrap(service).ok().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tokens_flood_gets_503_for_it_while_another_token_is_served() {
    let hold = Arc::new(Gate::default());
    let mut config = ServerConfig {
        tokens: Some(Tokens::fixed(
            nlg_judge::server::TokenSet::from_pairs(&[("alice", ALICE), ("bob", BOB)]).unwrap(),
        )),
        ..ServerConfig::default()
    };
    config.limits.max_queued_per_token = 2;
    config.limits.max_queue = 16;
    let service = Arc::new(Service::start(Box::new(held_mock(hold.clone())), config).await);

    // Alice floods while the model is held: two of hers take her share, the rest are
    // refused at once (they do not wait for the model).
    let flood: Vec<_> = (0..6)
        .map(|i| {
            let service = service.clone();
            tokio::spawn(async move { score_as(&service, ALICE, &format!("flood {i}")).await })
        })
        .collect();
    let alice = common::wait::for_value_async(
        "alice's six requests counted, four of them refused (/healthz per_token)",
        || async {
            let health = health_as(&service, BOB).await;
            let alice = health["per_token"]["alice"].clone();
            (alice["requests"] == 6 && alice["refused"] == 4).then_some(alice)
        },
    )
    .await;
    assert_eq!(alice["queued"], 2);
    common::wait::until_async("four of alice's requests to be answered", || async {
        flood.iter().filter(|request| request.is_finished()).count() >= 4
    })
    .await;
    let (refused, accepted): (Vec<_>, Vec<_>) =
        flood.into_iter().partition(|request| request.is_finished());
    for request in refused {
        let answer = request.await.unwrap();
        assert_eq!(answer.status, 503, "{}", answer.text);
        assert_eq!(answer.header("retry-after"), Some("1"));
        assert!(
            answer.text.contains("`alice`") && answer.text.contains("--max-queued-per-token"),
            "{}",
            answer.text
        );
    }
    // Bob is not held back by Alice's flood: his request is taken.
    let bob = {
        let service = service.clone();
        tokio::spawn(async move { score_as(&service, BOB, "bob").await })
    };
    let health =
        common::wait::for_value_async("bob's request queued (/healthz per_token)", || async {
            let health = health_as(&service, BOB).await;
            (health["per_token"]["bob"]["queued"] == 1).then_some(health)
        })
        .await;
    assert_eq!(health["per_token"]["bob"]["refused"], 0);
    hold.release();
    let bob = bob.await.unwrap();
    assert_eq!(bob.status, 200, "{}", bob.text);
    for request in accepted {
        let answer = request.await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text);
    }
    let health = health_as(&service, ALICE).await;
    assert_eq!(health["per_token"]["alice"]["queued"], 0);
    assert_eq!(health["max_queued_per_token"], 2);
    Arc::try_unwrap(service).ok().unwrap().shutdown().await;
}

/// A CA, and a server certificate it signed for 127.0.0.1 and localhost: the CA's PEM,
/// and the server's certificate and key files.
struct Pki {
    ca_pem: String,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "nlg-judge test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server_params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let server = server_params.signed_by(&server_key, &issuer).unwrap();
    let cert = dir.path().join("server.pem");
    let key = dir.path().join("server.key");
    std::fs::write(&cert, server.pem()).unwrap();
    std::fs::write(&key, server_key.serialize_pem()).unwrap();
    Pki {
        ca_pem: ca.pem(),
        cert,
        key,
        _dir: dir,
    }
}

/// A client that trusts `ca_pem` alone.
fn client(ca_pem: &str) -> ureq::Agent {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    ureq::AgentBuilder::new()
        .tls_config(Arc::new(config))
        .build()
}

/// Status and JSON body of a request through `agent` (error statuses included), or why
/// no answer came.
fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    let mut request = agent.request(method, url);
    if let Some(token) = token {
        request = request.set("Authorization", &bearer(token));
    }
    let answer = match body {
        Some(body) => request.send_json(body),
        None => request.call(),
    };
    let response = match answer {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(ureq::Error::Transport(transport)) => return Err(transport.to_string()),
    };
    let status = response.status();
    Ok((status, response.into_json().unwrap_or(Value::Null)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_every_route_to_a_verifying_client_and_refuses_plain_http() {
    let pki = pki();
    let mut config = ServerConfig {
        tokens: Some(Tokens::fixed(
            nlg_judge::server::TokenSet::single("alice", ALICE).unwrap(),
        )),
        tls: Some(tls::server_config(&pki.cert, &pki.key).unwrap()),
        ..ServerConfig::default()
    };
    config.limits.header_timeout = Duration::from_secs(2);
    let scorer = MockScorer::new().with_labels(|_, labels| Ok(vec![(0.1f64).ln(); labels.len()]));
    let service = Service::start(Box::new(scorer), config).await;
    let base = format!("https://127.0.0.1:{}", service.addr.port());

    // A client that stalls in the handshake holds only its own connection.
    let _silent = tokio::net::TcpStream::connect(service.addr).await.unwrap();

    // Plain HTTP on the TLS port: a clear refusal, and the connection closed.
    let plain = request(service.addr, "GET", "/healthz", &[], b"").await;
    assert_eq!(plain.status, 400);
    assert!(plain.text.contains("https://"), "{}", plain.text);
    // Bytes that are neither HTTP nor a TLS hello: closed without an answer.
    {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut junk = tokio::net::TcpStream::connect(service.addr).await.unwrap();
        junk.write_all(&[0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0x00, 0x00])
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ = junk.read_to_end(&mut answer).await;
        assert!(!String::from_utf8_lossy(&answer).contains("HTTP/1.1"));
    }

    let ca_pem = pki.ca_pem.clone();
    let other_ca = self::pki().ca_pem;
    let results = tokio::task::spawn_blocking(move || {
        let agent = client(&ca_pem);
        let health = call(&agent, "GET", &format!("{base}/healthz"), None, None).unwrap();
        let score = call(
            &agent,
            "POST",
            &format!("{base}/v1/score"),
            Some(ALICE),
            Some(json!({"output": "x", "attribute": "fluency", "context": "c"})),
        )
        .unwrap();
        let models = call(
            &agent,
            "GET",
            &format!("{base}/v1/models"),
            Some(ALICE),
            None,
        )
        .unwrap();
        let anonymous = call(&agent, "GET", &format!("{base}/v1/models"), None, None).unwrap();
        // Another CA's client does not trust the service's certificate.
        let stranger = client(&other_ca);
        let untrusted = call(&stranger, "GET", &format!("{base}/healthz"), None, None);
        (health, score, models, anonymous, untrusted.err())
    })
    .await
    .unwrap();
    let (health, score, models, anonymous, untrusted) = results;
    assert_eq!(health.0, 200);
    assert_eq!(health.1["tls"], true);
    assert_eq!(score.0, 200, "{}", score.1);
    assert!(score.1["score"].is_number(), "{}", score.1);
    assert_eq!(models.0, 200);
    assert_eq!(models.1["object"], "list");
    assert_eq!(anonymous.0, 401);
    assert_eq!(anonymous.1["error"]["type"], "authentication_error");
    let untrusted = untrusted.expect("a client of another CA must not connect");
    assert!(
        untrusted.to_lowercase().contains("certificate"),
        "{untrusted}"
    );
    service.shutdown().await;
}

#[test]
fn tls_files_that_do_not_fit_are_named_in_the_error() {
    let pki = pki();
    let other = pki_with_other_key(&pki);
    let error = format!("{:#}", tls::server_config(&pki.cert, &other).unwrap_err());
    assert!(
        error.contains("does not fit") && error.contains(&other.display().to_string()),
        "{error}"
    );
    let error = format!("{:#}", tls::server_config(&pki.key, &pki.key).unwrap_err());
    assert!(
        error.contains("BEGIN CERTIFICATE") && error.contains("server.key"),
        "{error}"
    );
    let error = format!(
        "{:#}",
        tls::server_config(&pki.cert, &pki.cert).unwrap_err()
    );
    assert!(error.contains("no private key"), "{error}");
}

fn pki_with_other_key(pki: &Pki) -> std::path::PathBuf {
    let path = pki.cert.with_file_name("other.key");
    std::fs::write(&path, rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
    path
}

/// The binary serving the mock model, its stderr read line by line.
struct Binary {
    child: Child,
    stderr: BufReader<std::process::ChildStderr>,
    /// The first line (the address, or the refusal).
    first: Vec<String>,
}

impl Binary {
    fn start(args: &[&str]) -> Self {
        let cache = tempfile::tempdir().unwrap();
        // A port of the system's choosing unless the test names an address: the default
        // port would collide with other tests, other runs of the suite, anything else.
        let addr: &[&str] = if args.contains(&"--addr") {
            &[]
        } else {
            &["--addr", "127.0.0.1:0"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args(["serve", "--model", "mock", "--no-cache"])
            .args(addr)
            .args(args)
            .env("NLG_JUDGE_CACHE", cache.path())
            .env("RUST_LOG", "nlg_judge::server::http=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        Self {
            child,
            stderr,
            first: Vec::new(),
        }
    }

    /// Read stderr up to the line containing `needle` (kept in `first`).
    fn line_with(&mut self, needle: &str) -> String {
        loop {
            let mut line = String::new();
            assert!(
                self.stderr.read_line(&mut line).unwrap() > 0,
                "serve ended before a line with {needle:?}; before: {:?}",
                self.first
            );
            self.first.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// The loopback address of the service on the port of its start line.
    fn addr(&mut self) -> SocketAddr {
        let line = self.line_with("serving ");
        let port = line
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|port| port.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("no port in {line}"));
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Wait for the exit (a hang is a failure after a generous bound): the status and the
    /// rest of stderr.
    fn wait(mut self) -> (std::process::ExitStatus, String) {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(120) {
                let _ = self.child.kill();
                panic!("serve did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = self.first.concat();
        self.stderr.read_to_string(&mut rest).unwrap();
        (status, rest)
    }
}

/// A plain HTTP/1.1 request from a blocking client: status and body.
fn blocking(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = StdStream::connect(addr).unwrap();
    let auth = token.map_or(String::new(), |t| {
        format!("Authorization: {}\r\n", bearer(t))
    });
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{auth}\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

#[test]
fn an_address_other_than_loopback_needs_a_token_or_the_flag_that_accepts_the_risk() {
    let (status, stderr) = Binary::start(&["--addr", "0.0.0.0:0"]).wait();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--token-file") && stderr.contains("--allow-no-token"),
        "{stderr}"
    );
    assert!(!stderr.contains("serving "), "{stderr}");

    let mut open = Binary::start(&["--addr", "0.0.0.0:0", "--allow-no-token"]);
    let warning = open.line_with("warning: ");
    assert!(warning.contains("no bearer token"), "{warning}");
    let addr = open.addr();
    let (status, body) = blocking(addr, "/healthz", None);
    assert_eq!(status, 200);
    let health: Value = serde_json::from_str(&body).unwrap();
    let warnings = health["warnings"].to_string();
    assert!(
        warnings.contains("no bearer token") && warnings.contains("--allow-no-token"),
        "{health}"
    );
    open.signal("TERM");
    assert!(open.wait().0.success());

    // With a token, plain HTTP off loopback is served with a warning about the clear text.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    write_tokens(&path, &[("alice", ALICE)]);
    let mut clear = Binary::start(&[
        "--addr",
        "0.0.0.0:0",
        "--token-file",
        path.to_str().unwrap(),
    ]);
    let warning = clear.line_with("warning: ");
    assert!(
        warning.contains("in clear") && warning.contains("--tls-cert"),
        "{warning}"
    );
    let addr = clear.addr();
    assert_eq!(blocking(addr, "/v1/models", Some(ALICE)).0, 200);
    clear.signal("TERM");
    assert!(clear.wait().0.success());
}

#[test]
fn sighup_reloads_the_token_file_and_the_log_names_each_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    write_tokens(&path, &[("alice", ALICE), ("bob", BOB)]);
    let mut server = Binary::start(&["--token-file", path.to_str().unwrap()]);
    let addr = server.addr();
    assert_eq!(blocking(addr, "/v1/models", Some(BOB)).0, 200);
    // The path and the name, quoted; no colour codes in a log that is not a terminal.
    let logged = server.line_with("\"/v1/models\"");
    assert!(
        logged.contains("\"bob\"") && !logged.contains(BOB) && !logged.contains('\u{1b}'),
        "{logged}"
    );

    write_tokens(&path, &[("alice", ALICE)]);
    server.signal("HUP");
    let reloaded = server.line_with("SIGHUP");
    assert!(
        reloaded.contains("reloaded") && reloaded.contains("1 tokens"),
        "{reloaded}"
    );
    assert_eq!(blocking(addr, "/v1/models", Some(BOB)).0, 401);
    assert_eq!(blocking(addr, "/v1/models", Some(ALICE)).0, 200);

    // A bad file keeps the tokens in force.
    std::fs::write(&path, "alice:\n").unwrap();
    server.signal("HUP");
    let failed = server.line_with("SIGHUP");
    assert!(
        failed.contains("error")
            && failed.contains("line 1")
            && failed.contains("previous tokens stay"),
        "{failed}"
    );
    assert_eq!(blocking(addr, "/v1/models", Some(ALICE)).0, 200);
    server.signal("TERM");
    let (status, rest) = server.wait();
    assert!(status.success(), "{rest}");
    assert!(!rest.contains(ALICE) && !rest.contains(BOB), "{rest}");
}

/// SIGHUP reloads the TLS certificate: the next connection gets the new one (a client
/// trusting only the new CA gets in, one trusting only the old is refused), and files
/// that do not load leave the certificate in use as it was, said in the log.
#[test]
fn sighup_reloads_the_tls_certificate_and_a_bad_one_keeps_the_old() {
    let (old, new) = (pki(), pki());
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::copy(&old.cert, &cert).unwrap();
    std::fs::copy(&old.key, &key).unwrap();
    let mut server = Binary::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let addr = server.addr();
    let url = format!("https://127.0.0.1:{}/healthz", addr.port());
    let status = |ca: &str| call(&client(ca), "GET", &url, None, None).map(|(s, _)| s);
    assert_eq!(status(&old.ca_pem), Ok(200));
    assert!(status(&new.ca_pem).is_err(), "the new CA is not yet served");

    std::fs::copy(&new.cert, &cert).unwrap();
    std::fs::copy(&new.key, &key).unwrap();
    server.signal("HUP");
    let reloaded = server.line_with("SIGHUP");
    assert!(
        reloaded.contains("TLS certificate") && reloaded.contains("reloaded"),
        "{reloaded}"
    );
    assert_eq!(status(&new.ca_pem), Ok(200));
    assert!(
        status(&old.ca_pem).is_err(),
        "the old certificate is no longer served"
    );

    // A key that does not fit the certificate: the new certificate stays in use.
    std::fs::copy(&old.key, &key).unwrap();
    server.signal("HUP");
    let failed = server.line_with("SIGHUP");
    assert!(
        failed.contains("error")
            && failed.contains("does not fit")
            && failed.contains("previous one stays"),
        "{failed}"
    );
    assert_eq!(status(&new.ca_pem), Ok(200));
    server.signal("TERM");
    let (status, rest) = server.wait();
    assert!(status.success(), "{rest}");
}

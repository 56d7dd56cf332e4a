//! The HTTP side of a served model: one client for an OpenAI-compatible engine, with the
//! bearer token, certificate checks (a custom CA accepted), a timeout per request, and
//! retries with backoff where the engine is busy or unreachable.
//!
//! Nothing here logs or returns a request's body: an error names the route, the status
//! and the engine's own message, never the texts sent (they may be confidential), and
//! never the token.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use serde_json::Value;

/// How to reach the engine.
#[derive(Clone)]
pub struct EndpointOptions {
    /// The OpenAI-compatible base, e.g. `http://gpu-node:8000/v1`.
    pub base: String,
    /// Bearer token sent with every request (never shown).
    pub token: Option<String>,
    /// Extra certificate authorities (PEM) trusted for https, beside the public roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// Longest wait for one answer.
    pub timeout: Duration,
    /// Retries of one request after a busy answer (429, 502, 503, 504), a refused or
    /// broken connection, or a timeout.
    pub retries: u32,
    /// The first retry's wait; each further one doubles it (with jitter), up to 30 s,
    /// unless the engine's `Retry-After` asks for longer.
    pub backoff: Duration,
}

impl std::fmt::Debug for EndpointOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointOptions")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("ca_file", &self.ca_file)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// What the engine answered when it refused a request (not retried, or out of retries).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// An HTTP status other than success.
    #[error("{url} answered {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    /// No answer within the timeout.
    #[error("{url} gave no answer within {seconds} s (raise --backend-timeout if the engine is just slow)")]
    TimedOut { url: String, seconds: u64 },
    /// No connection, or a broken one.
    #[error("cannot reach {url}: {message}")]
    Unreachable { url: String, message: String },
    /// An answer that is not JSON.
    #[error("{url} answered with a body that is not JSON: {message}")]
    Malformed { url: String, message: String },
}

impl CallError {
    /// The HTTP status, for answers that had one.
    pub fn status(&self) -> Option<u16> {
        match self {
            CallError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Counters of the requests made, shared by every thread of a run.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    /// Scoring and generation requests that failed for good (probes the scorer can do
    /// without, such as `/tokenize`, not counted).
    pub failures: AtomicU64,
}

/// One engine's client.
pub struct Endpoint {
    agent: ureq::Agent,
    /// The base without a trailing slash (`…/v1`).
    base: String,
    /// The server's root (the base without its `/v1`): vLLM's `/tokenize` lives there.
    root: String,
    token: Option<String>,
    timeout: Duration,
    retries: u32,
    backoff: Duration,
    pub counters: Arc<Counters>,
}

impl Endpoint {
    pub fn new(options: &EndpointOptions) -> Result<Self> {
        let base = options.base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!(
                "--backend {}: give an http:// or https:// address of an OpenAI-compatible \
                 API, e.g. http://gpu-node:8000/v1",
                options.base
            );
        }
        let root = base
            .strip_suffix("/v1")
            .map(str::to_string)
            .unwrap_or_else(|| base.clone());
        let tls = tls_config(options.ca_file.as_deref())?;
        let agent = ureq::AgentBuilder::new()
            .timeout(options.timeout)
            .tls_config(tls)
            .user_agent(concat!("nlg-judge/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self {
            agent,
            base,
            root,
            token: options.token.clone(),
            timeout: options.timeout,
            retries: options.retries,
            backoff: options.backoff,
            counters: Arc::new(Counters::default()),
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET {base}{route}`.
    pub fn get(&self, route: &str) -> std::result::Result<Value, CallError> {
        self.call(&format!("{}{route}", self.base), None)
    }

    /// `POST {base}{route}` with a JSON body.
    pub fn post(&self, route: &str, body: &Value) -> std::result::Result<Value, CallError> {
        self.call(&format!("{}{route}", self.base), Some(body))
    }

    /// `POST {root}{route}`: routes beside the API rather than under it (`/tokenize`).
    pub fn post_at_root(&self, route: &str, body: &Value) -> std::result::Result<Value, CallError> {
        self.call(&format!("{}{route}", self.root), Some(body))
    }

    fn call(&self, url: &str, body: Option<&Value>) -> std::result::Result<Value, CallError> {
        let mut attempt = 0u32;
        loop {
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            let (error, retry_after) = match self.once(url, body) {
                Ok(value) => return Ok(value),
                Err(failed) => failed,
            };
            if !retryable(&error) || attempt >= self.retries {
                return Err(error);
            }
            let wait = backoff_wait(self.backoff, attempt, retry_after);
            attempt += 1;
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(wait);
        }
    }

    /// One request; on failure the error and the engine's `Retry-After`, if any.
    fn once(
        &self,
        url: &str,
        body: Option<&Value>,
    ) -> std::result::Result<Value, (CallError, Option<Duration>)> {
        let mut request = match body {
            Some(_) => self.agent.post(url),
            None => self.agent.get(url),
        };
        if let Some(token) = &self.token {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        let started = Instant::now();
        let answer = match body {
            Some(body) => request.send_json(body),
            None => request.call(),
        };
        match answer {
            Ok(response) => {
                let text = response
                    .into_string()
                    .map_err(|e| (self.broken(url, started, &e.to_string()), None))?;
                serde_json::from_str(&text).map_err(|e| {
                    let error = CallError::Malformed {
                        url: url.to_string(),
                        message: e.to_string(),
                    };
                    (error, None)
                })
            }
            Err(ureq::Error::Status(status, response)) => {
                let retry_after = response
                    .header("Retry-After")
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let text = response.into_string().unwrap_or_default();
                let error = CallError::Status {
                    url: url.to_string(),
                    status,
                    message: engine_message(&text),
                };
                Err((error, retry_after))
            }
            Err(ureq::Error::Transport(transport)) => {
                Err((self.broken(url, started, &transport.to_string()), None))
            }
        }
    }

    fn broken(&self, url: &str, started: Instant, message: &str) -> CallError {
        if started.elapsed() >= self.timeout || message.contains("timed out") {
            CallError::TimedOut {
                url: url.to_string(),
                seconds: self.timeout.as_secs().max(1),
            }
        } else {
            CallError::Unreachable {
                url: url.to_string(),
                message: message.to_string(),
            }
        }
    }
}

/// Whether a failed request may succeed when sent again.
fn retryable(error: &CallError) -> bool {
    match error {
        CallError::Status { status, .. } => matches!(status, 429 | 502 | 503 | 504),
        CallError::TimedOut { .. } | CallError::Unreachable { .. } => true,
        CallError::Malformed { .. } => false,
    }
}

/// The wait before retry `attempt` (0-based): `base` doubled per attempt up to 30 s, with
/// up to a quarter more at random so that many clients do not come back together; at
/// least what the engine's `Retry-After` asks.
fn backoff_wait(base: Duration, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let doubled = base.saturating_mul(1u32 << attempt.min(16));
    let capped = doubled.min(Duration::from_secs(30));
    let jitter = capped.mul_f64(rand::random::<f64>() * 0.25);
    (capped + jitter).max(retry_after.unwrap_or_default())
}

/// The engine's error message out of its body: OpenAI's `{"error": {"message"}}`, our
/// service's `{"error": "..."}`, FastAPI's `{"detail": ...}`, else the text itself
/// (shortened).
fn engine_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let found = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("detail"))
            .or_else(|| v.get("message"))
            .map(|m| match m {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
    });
    let mut text = found.unwrap_or_else(|| body.trim().to_string());
    // Validation errors (pydantic's) quote the request's input: the texts stay out.
    if let Some(at) = ["'input':", "\"input\":"]
        .iter()
        .filter_map(|key| text.find(key))
        .min()
    {
        text.truncate(at);
        text.push_str("(the engine's copy of the input left out)");
    }
    let mut short: String = text.chars().take(400).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    if short.is_empty() {
        "(no message)".to_string()
    } else {
        short
    }
}

/// TLS settings: the public roots, plus the authorities of `ca_file` (PEM).
fn tls_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path)
            .with_context(|| format!("--backend-ca {}: cannot read the file", path.display()))?;
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| {
                anyhow!(
                    "--backend-ca {}: not a PEM certificate: {e}",
                    path.display()
                )
            })?;
            roots.add(cert).map_err(|e| {
                anyhow!(
                    "--backend-ca {}: an unusable certificate: {e}",
                    path.display()
                )
            })?;
            added += 1;
        }
        if added == 0 {
            bail!(
                "--backend-ca {}: no PEM certificate found (expected -----BEGIN CERTIFICATE-----)",
                path.display()
            );
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS settings")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_message_is_found_in_each_shape() {
        assert_eq!(
            engine_message(r#"{"error":{"message":"bad model"}}"#),
            "bad model"
        );
        assert_eq!(engine_message(r#"{"error":"too long"}"#), "too long");
        assert_eq!(engine_message(r#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(engine_message("plain text\n"), "plain text");
        assert_eq!(engine_message(""), "(no message)");
        assert!(engine_message(&"x".repeat(1000)).ends_with('…'));
        // llama-cpp-python's answer to a prompt of token ids quotes the ids.
        let quoted = engine_message(
            r#"{"error":{"message":"1 validation error: {'type': 'string_type', 'loc': ('body', 'prompt', 'str'), 'msg': 'Input should be a valid string', 'input': [1, 9690, 198]}"}}"#,
        );
        assert!(
            quoted.contains("'prompt'") && quoted.contains("valid string"),
            "{quoted}"
        );
        assert!(!quoted.contains("9690"), "{quoted}");
    }

    #[test]
    fn waits_double_are_capped_and_honour_retry_after() {
        let base = Duration::from_millis(100);
        let first = backoff_wait(base, 0, None);
        assert!(first >= base && first <= base.mul_f64(1.25), "{first:?}");
        let third = backoff_wait(base, 2, None);
        assert!(
            third >= base * 4 && third <= (base * 4).mul_f64(1.25),
            "{third:?}"
        );
        assert!(backoff_wait(base, 30, None) <= Duration::from_secs(30).mul_f64(1.25));
        assert_eq!(
            backoff_wait(base, 0, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
    }

    #[test]
    fn busy_answers_and_lost_connections_are_retried_refusals_are_not() {
        let status = |status| CallError::Status {
            url: String::new(),
            status,
            message: String::new(),
        };
        for code in [429, 502, 503, 504] {
            assert!(retryable(&status(code)), "{code}");
        }
        for code in [400, 401, 404, 422, 500] {
            assert!(!retryable(&status(code)), "{code}");
        }
        assert!(retryable(&CallError::TimedOut {
            url: String::new(),
            seconds: 1
        }));
    }

    #[test]
    fn the_token_is_never_in_the_debug_form() {
        let options = EndpointOptions {
            base: "http://x/v1".into(),
            token: Some("secret-token-123".into()),
            ca_file: None,
            timeout: Duration::from_secs(1),
            retries: 0,
            backoff: Duration::from_millis(1),
        };
        assert!(!format!("{options:?}").contains("secret-token-123"));
    }
}

//! Models served by another program: vLLM, SGLang, TGI, llama.cpp's server or our own
//! `serve`, reached over their OpenAI-compatible API, for judges too big for this
//! process (a 70B model across GPUs). [`connect`] checks that the engine serves the
//! model, loads the model's tokenizer and chat template here, and returns a
//! [`RemoteScorer`]: one more implementation of the [`Scorer`](crate::engine::Scorer)
//! interface, so every method, the result cache and the statistics work unchanged.
//!
//! - [`http`]: the client (token, TLS with a custom CA, timeouts, retries);
//! - [`replies`]: reading the engines' answers;
//! - [`scorer`]: label probabilities (top-K, then echo), generation, continuations;
//! - `complete`: completions with token log-probabilities (`serve --backend`).
//!
//! The result cache keeps remote answers apart from local ones and from other served
//! weights: the model's fingerprint is a hash of the served name, what the engine says
//! of the weights (`root`, `fingerprint`, `revision`, ... in `GET /v1/models`) and the
//! local tokenizer's identity.

mod complete;
pub mod http;
pub mod replies;
pub mod scorer;

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use sha2::{Digest, Sha256};

pub use http::{CallError, Endpoint, EndpointOptions};
pub use scorer::{LabelCounts, RemoteScorer, RemoteSettings, Routes};

use crate::engine::load::model_info;
use crate::progress::Progress;
use crate::runtime::{load_tokenizer, resolve_tokenizer, ModelKind, ResolveOptions};

/// Environment variable holding the engine's bearer token, when no file is given.
pub const TOKEN_VARIABLE: &str = "NLG_JUDGE_BACKEND_TOKEN";

/// Default bound on requests in flight: enough to fill an engine's continuous batching.
pub const DEFAULT_CONCURRENCY: usize = 32;

/// Default number of alternatives asked for at the next position (vLLM's default
/// `--max-logprobs` is 20).
pub const DEFAULT_TOP_K: usize = 20;

/// Default timeout of one request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Default retries of one request.
pub const DEFAULT_RETRIES: u32 = 5;

/// Everything [`connect`] needs.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    pub endpoint: EndpointOptions,
    /// The name the engine serves the model under.
    pub model: String,
    /// The model's tokenizer and chat template: a card name, a `.gguf` file, or a
    /// checkpoint directory (weights not needed). `None`: the card named like `model`.
    pub tokenizer: Option<String>,
    pub settings: RemoteSettings,
    pub resolve: ResolveOptions,
    pub progress: Progress,
}

/// The user's choices for a served model, as the command line (`--backend` and its
/// flags) and the Python package (`Judge(backend=...)`) give them; defaults as the
/// command line's.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackendConfig {
    /// The OpenAI-compatible base address (`--backend`).
    pub url: String,
    /// The served model's tokenizer (`--tokenizer`); `None`: the card named like the model.
    pub tokenizer: Option<String>,
    /// File whose first line is the bearer token (`--backend-token-file`); `None`:
    /// [`TOKEN_VARIABLE`].
    pub token_file: Option<std::path::PathBuf>,
    /// Extra certificate authorities, PEM (`--backend-ca`).
    pub ca_file: Option<std::path::PathBuf>,
    /// Longest wait for one answer, seconds (`--backend-timeout`).
    pub timeout_seconds: u64,
    /// Retries of one request (`--backend-retries`).
    pub retries: u32,
    /// Requests in flight (`--concurrency`).
    pub concurrency: usize,
    /// Alternatives asked for at the next position (`--backend-top-k`).
    pub top_k: usize,
    /// Take bounded labels from an engine without echo (`--accept-top-k-only`).
    pub accept_top_k_only: bool,
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            tokenizer: None,
            token_file: None,
            ca_file: None,
            timeout_seconds: DEFAULT_TIMEOUT.as_secs(),
            retries: DEFAULT_RETRIES,
            concurrency: DEFAULT_CONCURRENCY,
            top_k: DEFAULT_TOP_K,
            accept_top_k_only: false,
        }
    }
}

impl BackendConfig {
    /// The options of [`connect`] for the model served as `model`: the token read, the
    /// bounds checked (errors name the command line's flags).
    pub fn options(&self, model: &str, progress: Progress) -> Result<RemoteOptions> {
        if self.concurrency == 0 || self.top_k == 0 {
            bail!("--concurrency and --backend-top-k must be at least 1");
        }
        Ok(RemoteOptions {
            endpoint: EndpointOptions {
                base: self.url.clone(),
                token: read_token(self.token_file.as_deref())?,
                ca_file: self.ca_file.clone(),
                timeout: Duration::from_secs(self.timeout_seconds.max(1)),
                retries: self.retries,
                backoff: Duration::from_millis(500),
            },
            model: model.to_string(),
            tokenizer: self.tokenizer.clone(),
            settings: RemoteSettings {
                concurrency: self.concurrency,
                top_k: self.top_k,
                accept_top_k_only: self.accept_top_k_only,
            },
            resolve: ResolveOptions::from_env()?,
            progress,
        })
    }
}

/// The bearer token: the first line of `file` (permissions are the user's business), else
/// [`TOKEN_VARIABLE`].
pub fn read_token(file: Option<&std::path::Path>) -> Result<Option<String>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--backend-token-file {}: cannot read it", path.display()))?;
        let token = text.lines().next().unwrap_or_default().trim().to_string();
        if token.is_empty() {
            bail!(
                "--backend-token-file {}: the first line is empty",
                path.display()
            );
        }
        return Ok(Some(token));
    }
    Ok(std::env::var(TOKEN_VARIABLE)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

/// Reach the engine, check that it serves `options.model`, and load the tokenizer.
pub fn connect(options: RemoteOptions) -> Result<RemoteScorer> {
    let endpoint = Endpoint::new(&options.endpoint)?;
    let base = endpoint.base().to_string();
    if base.starts_with("http://") && options.endpoint.token.is_some() && !is_loopback(&base) {
        options.progress.note(&format!(
            "warning: {base} is plain http: the bearer token and every text travel in clear; \
             use https (with --backend-ca for a private authority)"
        ));
    }
    let listed = endpoint
        .get("/models")
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot list the models of the engine at {base}"))?;
    let served = replies::served_models(&listed);
    let Some(model) = served.iter().find(|m| m.id == options.model) else {
        let names: Vec<&str> = served.iter().map(|m| m.id.as_str()).collect();
        bail!(
            "the engine at {base} does not serve a model named '{}' (--model); it serves: {}",
            options.model,
            if names.is_empty() {
                "none that it lists".to_string()
            } else {
                names.join(", ")
            }
        );
    };
    let spec = options
        .tokenizer
        .clone()
        .unwrap_or_else(|| options.model.clone());
    let resolved = resolve_tokenizer(&spec, &options.resolve).with_context(|| {
        format!(
            "the served model's tokenizer: give --tokenizer (a card name, a .gguf file, or the \
             model's directory with tokenizer.json and config.json; weights not needed){}",
            if options.tokenizer.is_none() {
                format!(" — no card is named like --model '{}'", options.model)
            } else {
                String::new()
            }
        )
    })?;
    if resolved.kind() != ModelKind::DecoderOnly {
        bail!(
            "--tokenizer {spec} is an encoder-decoder model ({}): served models are scored as \
             decoder-only models through /v1/completions",
            resolved.architecture.as_str()
        );
    }
    let tokenizer = load_tokenizer(&resolved)?;
    let mut info = model_info(&resolved);
    info.name = options.model.clone();
    info.architecture = format!("{} (served)", resolved.architecture.as_str());
    if let Some(window) = model.context_window {
        info.context_window = window;
    }
    let mut hash = Sha256::new();
    for part in [
        "remote",
        &options.model,
        &model.identity,
        &resolved.name,
        &resolved.fingerprint,
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    info.fingerprint = format!("remote-{}", hex::encode(hash.finalize()));
    let scorer = RemoteScorer::new(
        endpoint,
        options.model,
        tokenizer,
        resolved.chat_template.clone(),
        info,
        options.settings,
        options.progress,
    );
    scorer.check_tokens()?;
    Ok(scorer)
}

/// Whether the base URL's host is this machine.
fn is_loopback(base: &str) -> bool {
    let rest = base.split("://").nth(1).unwrap_or_default();
    let host = rest.split('/').next().unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    matches!(host, "localhost" | "127.0.0.1" | "[::1]") || host.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_told_apart() {
        assert!(is_loopback("http://127.0.0.1:8000/v1"));
        assert!(is_loopback("http://localhost/v1"));
        assert!(is_loopback("http://[::1]:9/v1"));
        assert!(!is_loopback("http://gpu-node:8000/v1"));
        assert!(!is_loopback("http://10.0.0.5:8000/v1"));
    }

    #[test]
    fn the_token_file_gives_its_first_line() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("token");
        std::fs::write(&path, "abc123 \nsecond line\n")?;
        assert_eq!(read_token(Some(&path))?, Some("abc123".to_string()));
        std::fs::write(&path, "\n")?;
        let error = read_token(Some(&path)).unwrap_err().to_string();
        assert!(error.contains("first line is empty"), "{error}");
        Ok(())
    }
}

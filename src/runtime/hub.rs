//! Files from the Hugging Face hub, through hf-hub's blocking client and its cache.
//!
//! The hub cache (`$HF_HOME/hub`) is shared with other Hugging Face tools: a file already
//! there at the pinned revision is reused without a request. `HF_HUB_OFFLINE=1` restricts
//! us to that cache. `HF_ENDPOINT` points at a mirror, `HF_TOKEN` authorises gated repos.
//! Everything is passed explicitly in [`HubSettings`] so tests can aim at a stand-in server.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Cache, Repo, RepoType};

use super::progress;

/// How to reach the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// Base URL (`https://huggingface.co` when `None`).
    pub endpoint: Option<String>,
    /// hf-hub's cache directory (`$HF_HOME/hub`, else `~/.cache/huggingface/hub`).
    pub cache_dir: PathBuf,
    /// Bearer token for gated repositories (`None`: hf-hub's saved token, if any).
    pub token: Option<String>,
    /// Never make a request: only files already in the hub cache are found.
    pub offline: bool,
}

impl HubSettings {
    /// Settings from `HF_HOME`, `HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE`.
    pub fn from_env() -> Self {
        let cache_dir = Cache::from_env().path().clone();
        let endpoint = std::env::var("HF_ENDPOINT").ok().filter(|s| !s.is_empty());
        let token = std::env::var("HF_TOKEN").ok().filter(|s| !s.is_empty());
        let offline = std::env::var("HF_HUB_OFFLINE")
            .map(|value| is_true(&value))
            .unwrap_or(false);
        Self {
            endpoint,
            cache_dir,
            token,
            offline,
        }
    }

    /// Settings for a given endpoint and cache directory (tests, mirrors).
    pub fn new(endpoint: Option<String>, cache_dir: PathBuf) -> Self {
        Self {
            endpoint,
            cache_dir,
            token: None,
            offline: false,
        }
    }

    fn repo(&self, repo_id: &str, revision: &str) -> Repo {
        Repo::with_revision(repo_id.to_string(), RepoType::Model, revision.to_string())
    }

    /// The file at `path` in `repo_id` at `revision`, if already in the hub cache.
    pub fn cached_file(&self, repo_id: &str, revision: &str, path: &str) -> Option<PathBuf> {
        Cache::new(self.cache_dir.clone())
            .repo(self.repo(repo_id, revision))
            .get(path)
    }

    /// The file at `path` in `repo_id` at `revision`: from the hub cache, else downloaded
    /// into it (unless offline). With `refresh`, the hub cache is bypassed and the file
    /// downloaded again (unless offline). Returns its path in the hub cache.
    pub fn file(
        &self,
        repo_id: &str,
        revision: &str,
        path: &str,
        refresh: bool,
        show_progress: bool,
    ) -> Result<PathBuf> {
        if !refresh || self.offline {
            if let Some(found) = self.cached_file(repo_id, revision, path) {
                return Ok(found);
            }
        }
        if self.offline {
            bail!(
                "{path} of {repo_id}@{revision} is not in the hub cache {} and HF_HUB_OFFLINE is set",
                self.cache_dir.display()
            );
        }
        let mut builder = ApiBuilder::from_cache(Cache::new(self.cache_dir.clone()))
            .with_progress(false)
            .with_user_agent("nlg-judge", env!("CARGO_PKG_VERSION"));
        if let Some(endpoint) = &self.endpoint {
            builder = builder.with_endpoint(endpoint.trim_end_matches('/').to_string());
        }
        if let Some(token) = &self.token {
            builder = builder.with_token(Some(token.clone()));
        }
        let api = builder.build().context("cannot set up the hub client")?;
        let repo = api.repo(self.repo(repo_id, revision));
        let url = repo.url(path);
        let bar = BarProgress {
            enabled: show_progress,
            message: format!("downloading {path}"),
            bar: progress::Bar::hidden(),
        };
        repo.download_with_progress(path, bar).map_err(|error| {
            anyhow::anyhow!("cannot download {url}: {}", plain_cause(&error, &url))
        })
    }
}

/// The causes of `error` in one line, each said once: the hub client's errors repeat
/// their source's text (and the URL) at every level, so a refused connection read
/// `URL: request error: URL: Connection Failed: ...: URL: Connection Failed: ...`. The
/// URL is said by the caller; a level whose text an earlier one already holds is left
/// out.
pub(crate) fn plain_cause(error: &dyn std::error::Error, url: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&dyn std::error::Error> = Some(error);
    while let Some(level) = next {
        let text = level
            .to_string()
            .replace(&format!("{url}: "), "")
            .replace(url, "");
        let text = text.trim().trim_end_matches(':').trim().to_string();
        let said = parts.join(": ");
        if !text.is_empty() && !said.contains(&text) {
            parts.push(text);
        }
        next = level.source();
    }
    parts.join(": ")
}

fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// hf-hub's download progress, shown on one of our bars (made once the size is known).
struct BarProgress {
    enabled: bool,
    message: String,
    bar: progress::Bar,
}

impl hf_hub::api::Progress for BarProgress {
    fn init(&mut self, size: usize, _filename: &str) {
        self.bar.finish_and_clear();
        self.bar = progress::bytes_bar(self.enabled, size as u64, self.message.clone());
    }

    fn update(&mut self, size: usize) {
        self.bar.inc(size as u64);
    }

    fn finish(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_without_cache_names_repo_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = HubSettings::new(None, dir.path().to_path_buf());
        settings.offline = true;
        let error = settings
            .file("google/flan-t5-small", "main", "config.json", true, false)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("config.json of google/flan-t5-small@main"),
            "{error}"
        );
        assert!(error.contains("HF_HUB_OFFLINE"), "{error}");
    }

    #[test]
    fn truthy_values() {
        assert!(is_true("1") && is_true("TRUE") && is_true(" yes "));
        assert!(!is_true("0") && !is_true("") && !is_true("false"));
    }
}

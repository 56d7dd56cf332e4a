//! The result cache: label log-probabilities kept in SQLite, so that a repeated or
//! resumed run never asks the model the same question twice.
//!
//! A result is keyed by everything that determines it: the model's fingerprint (sha256
//! of its weights), the method/template identity, a sha256 of the prompt's token ids
//! (encoder or decoder-only input, then the decoder prefix) and the label token ids.
//! Stored are the label log-probabilities (as raw little-endian f64, so they come back
//! bit for bit), the label mass and the prompt length. Each [`ResultCache::put`] is its
//! own small transaction in a write-ahead-logged database: a killed run loses only what
//! was in flight, and several processes may share the file.
//!
//! Methods whose results are not label log-probabilities (G-Eval's generated evaluation
//! steps, GPTScore's continuation likelihoods) keep text in a second table, keyed by the
//! model's fingerprint, a kind (`geval-steps`, `gptscore`) and a key the method derives
//! from everything that determines the value ([`ResultCache::get_text`]).
//!
//! A damaged file, a full disk or a read-only cache is reported as a
//! [`super::cache_fault::CacheFault`] naming the file and the way out;
//! [`super::cache_repair`] checks a cache and repairs a damaged one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};

use super::cache_fault::name;
use super::request::{LabelResult, LabelScore, TokenPrompt};

/// File name of the cache inside a cache directory.
pub const FILE_NAME: &str = "results.sqlite";

/// Environment variable naming nlg-judge's cache directory.
pub const CACHE_DIR_ENV: &str = "NLG_JUDGE_CACHE";

/// What identifies one label result.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The model's fingerprint ([`super::ModelInfo::fingerprint`]).
    pub model: String,
    /// The method and template identity (e.g. `pairwise/c1`, `pairwise/file:<sha256>`).
    pub template: String,
    /// sha256 (hex) of the prompt's token ids, see [`prompt_hash`].
    pub prompt: String,
    /// The labels' token ids, in request order.
    pub labels: Vec<Vec<u32>>,
}

impl CacheKey {
    pub fn new(model: &str, template: &str, prompt: &TokenPrompt, labels: Vec<Vec<u32>>) -> Self {
        Self {
            model: model.to_string(),
            template: template.to_string(),
            prompt: prompt_hash(prompt),
            labels,
        }
    }

    /// The labels as text: ids joined by `,`, labels by `;`.
    fn labels_text(&self) -> String {
        self.labels
            .iter()
            .map(|ids| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// sha256 (hex) of a token prompt: the input's length and ids, then the decoder
/// prefix's, all little-endian (lengths as u64, ids as u32), so no two prompts collide
/// by concatenation.
pub fn prompt_hash(prompt: &TokenPrompt) -> String {
    let mut hasher = Sha256::new();
    for part in [&prompt.input, &prompt.decoder_prefix] {
        hasher.update((part.len() as u64).to_le_bytes());
        for id in part {
            hasher.update(id.to_le_bytes());
        }
    }
    hex::encode(hasher.finalize())
}

/// An open result cache.
pub struct ResultCache {
    connection: Connection,
    location: String,
    /// The file, for a second connection ([`super::cache_writer`]); `None` in memory.
    path: Option<PathBuf>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS label_results (
    model        TEXT    NOT NULL,
    template     TEXT    NOT NULL,
    prompt       TEXT    NOT NULL,
    labels       TEXT    NOT NULL,
    logprobs     BLOB    NOT NULL,
    label_mass   REAL    NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    PRIMARY KEY (model, template, prompt, labels)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS text_results (
    model        TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    value        TEXT    NOT NULL,
    PRIMARY KEY (model, kind, key)
) WITHOUT ROWID;
";

impl ResultCache {
    /// The default location: `$NLG_JUDGE_CACHE/results.sqlite`, else
    /// `<user cache dir>/nlg-judge/results.sqlite`.
    pub fn default_path() -> Result<PathBuf> {
        if let Some(dir) = std::env::var_os(CACHE_DIR_ENV) {
            return Ok(PathBuf::from(dir).join(FILE_NAME));
        }
        let base = dirs::cache_dir()
            .context("no user cache directory on this system; pass --cache PATH")?;
        Ok(base.join("nlg-judge").join(FILE_NAME))
    }

    /// Open (creating it and its directory if needed) the cache at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
        }
        let location = path.display().to_string();
        let connection = Connection::open(path)
            .map_err(|e| name(e, &location))
            .with_context(|| format!("cannot open result cache {location}"))?;
        let mut cache = Self::setup(connection, location.clone())
            .with_context(|| format!("cannot use result cache {location}"))?;
        cache.path = Some(path.to_path_buf());
        Ok(cache)
    }

    /// A cache that lives only as long as this value (tests, `--no-cache` dry runs).
    pub fn in_memory() -> Result<Self> {
        Self::setup(Connection::open_in_memory()?, ":memory:".to_string())
    }

    fn setup(connection: Connection, location: String) -> Result<Self> {
        let named = |e| name(e, &location);
        connection.busy_timeout(Duration::from_secs(30))?;
        let mode: String = connection
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(named)?;
        if location != ":memory:" && !mode.eq_ignore_ascii_case("wal") {
            bail!("SQLite refused write-ahead logging (journal mode {mode})");
        }
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(named)?;
        connection.execute_batch(SCHEMA).map_err(named)?;
        Ok(Self {
            connection,
            location,
            path: None,
        })
    }

    /// Where the cache lives (a path, or `:memory:`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The cache's file (`None` for a cache in memory).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Another connection to this cache's file, set up as [`Self::open`] sets up its own
    /// (for a writer on another thread).
    pub(super) fn reopen(&self) -> Result<Connection> {
        let path = self
            .path
            .as_deref()
            .context("a result cache in memory has no second connection")?;
        let connection = Connection::open(path)
            .map_err(|e| name(e, &self.location))
            .with_context(|| format!("cannot open result cache {}", self.location))?;
        connection.busy_timeout(Duration::from_secs(30))?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| name(e, &self.location))?;
        Ok(connection)
    }

    /// The stored result for `key`, if any.
    pub fn get(&self, key: &CacheKey) -> Result<Option<LabelResult>> {
        let named = |e| name(e, &self.location);
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT logprobs, prompt_tokens FROM label_results
             WHERE model = ?1 AND template = ?2 AND prompt = ?3 AND labels = ?4",
            )
            .map_err(named)?;
        let row: Option<(Vec<u8>, i64)> = statement
            .query_row(
                params![key.model, key.template, key.prompt, key.labels_text()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(named)
            .with_context(|| format!("cannot read result cache {}", self.location))?;
        let Some((blob, prompt_tokens)) = row else {
            return Ok(None);
        };
        if blob.len() != 8 * key.labels.len() {
            bail!(
                "result cache {}: entry has {} bytes of log-probs for {} labels",
                self.location,
                blob.len(),
                key.labels.len()
            );
        }
        let labels = blob
            .chunks_exact(8)
            .zip(&key.labels)
            .map(|(bytes, tokens)| {
                let mut raw = [0u8; 8];
                raw.copy_from_slice(bytes);
                LabelScore {
                    tokens: tokens.clone(),
                    logprob: f64::from_le_bytes(raw),
                }
            })
            .collect();
        Ok(Some(LabelResult {
            labels,
            prompt_tokens: usize::try_from(prompt_tokens).unwrap_or(0),
        }))
    }

    /// Store (or replace) the result for `key`: one transaction.
    pub fn put(&self, key: &CacheKey, result: &LabelResult) -> Result<()> {
        insert_label(&self.connection, &self.location, key, result)
    }

    /// Store (or replace) every `(key, result)` in one transaction: all or none of them.
    pub fn put_all(&self, entries: &[(CacheKey, LabelResult)]) -> Result<()> {
        write_all(&self.connection, &self.location, entries)
    }

    /// The text stored under `(model, kind, key)`, if any.
    pub fn get_text(&self, model: &str, kind: &str, key: &str) -> Result<Option<String>> {
        let named = |e| name(e, &self.location);
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT value FROM text_results WHERE model = ?1 AND kind = ?2 AND key = ?3",
            )
            .map_err(named)?;
        statement
            .query_row(params![model, kind, key], |row| row.get(0))
            .optional()
            .map_err(named)
            .with_context(|| format!("cannot read result cache {}", self.location))
    }

    /// Store (or replace) the text under `(model, kind, key)`: one transaction.
    pub fn put_text(&self, model: &str, kind: &str, key: &str, value: &str) -> Result<()> {
        let named = |e| name(e, &self.location);
        let mut statement = self
            .connection
            .prepare_cached(
                "INSERT OR REPLACE INTO text_results (model, kind, key, value)
             VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(named)?;
        statement
            .execute(params![model, kind, key, value])
            .map_err(named)
            .with_context(|| format!("cannot write result cache {}", self.location))?;
        Ok(())
    }

    /// Number of stored label results.
    pub fn len(&self) -> Result<usize> {
        let count: i64 =
            self.connection
                .query_row("SELECT COUNT(*) FROM label_results", [], |row| row.get(0))?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// `INSERT OR REPLACE` one label result through `connection` (its own transaction
/// unless one is open).
pub(super) fn insert_label(
    connection: &Connection,
    location: &str,
    key: &CacheKey,
    result: &LabelResult,
) -> Result<()> {
    if result.labels.len() != key.labels.len() {
        bail!(
            "result has {} labels but its key {}",
            result.labels.len(),
            key.labels.len()
        );
    }
    let blob: Vec<u8> = result
        .labels
        .iter()
        .flat_map(|label| label.logprob.to_le_bytes())
        .collect();
    let named = |e| name(e, location);
    let mut statement = connection
        .prepare_cached(
            "INSERT OR REPLACE INTO label_results
             (model, template, prompt, labels, logprobs, label_mass, prompt_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(named)?;
    statement
        .execute(params![
            key.model,
            key.template,
            key.prompt,
            key.labels_text(),
            blob,
            result.label_mass(),
            i64::try_from(result.prompt_tokens).unwrap_or(i64::MAX),
        ])
        .map_err(named)
        .with_context(|| format!("cannot write result cache {location}"))?;
    Ok(())
}

/// [`insert_label`] for every entry, in one transaction.
pub(super) fn write_all(
    connection: &Connection,
    location: &str,
    entries: &[(CacheKey, LabelResult)],
) -> Result<()> {
    let named = |e| name(e, location);
    let transaction = connection.unchecked_transaction().map_err(named)?;
    for (key, result) in entries {
        insert_label(&transaction, location, key, result)?;
    }
    transaction
        .commit()
        .map_err(named)
        .with_context(|| format!("cannot write result cache {location}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(model: &str, input: &[u32]) -> CacheKey {
        let prompt = TokenPrompt {
            input: input.to_vec(),
            decoder_prefix: vec![7],
        };
        CacheKey::new(
            model,
            "pairwise/c1",
            &prompt,
            vec![vec![32, 65], vec![32, 66]],
        )
    }

    fn result(a: f64, b: f64) -> LabelResult {
        LabelResult {
            labels: vec![
                LabelScore {
                    tokens: vec![32, 65],
                    logprob: a,
                },
                LabelScore {
                    tokens: vec![32, 66],
                    logprob: b,
                },
            ],
            prompt_tokens: 12,
        }
    }

    #[test]
    fn results_come_back_bit_for_bit_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("results.sqlite");
        let stored = result((1.0f64 / 3.0).ln(), -(2.0f64.sqrt()));
        {
            let cache = ResultCache::open(&path).unwrap();
            assert!(cache.get(&key("m", &[1, 2, 3])).unwrap().is_none());
            cache.put(&key("m", &[1, 2, 3]), &stored).unwrap();
        }
        let cache = ResultCache::open(&path).unwrap();
        assert_eq!(cache.get(&key("m", &[1, 2, 3])).unwrap(), Some(stored));
        assert_eq!(cache.len().unwrap(), 1);
    }

    #[test]
    fn every_key_part_separates_entries() {
        let cache = ResultCache::in_memory().unwrap();
        cache
            .put(&key("m", &[1, 2, 3]), &result(-1.0, -2.0))
            .unwrap();
        assert!(cache.get(&key("other", &[1, 2, 3])).unwrap().is_none());
        assert!(cache.get(&key("m", &[1, 2, 4])).unwrap().is_none());
        let mut other_template = key("m", &[1, 2, 3]);
        other_template.template = "pairwise/c2".into();
        assert!(cache.get(&other_template).unwrap().is_none());
        let mut other_labels = key("m", &[1, 2, 3]);
        other_labels.labels = vec![vec![32, 65, 66], vec![]];
        assert!(cache.get(&other_labels).unwrap().is_none());
    }

    #[test]
    fn prompt_hash_separates_input_from_decoder_prefix() {
        let a = TokenPrompt {
            input: vec![1, 2],
            decoder_prefix: vec![3],
        };
        let b = TokenPrompt {
            input: vec![1],
            decoder_prefix: vec![2, 3],
        };
        assert_ne!(prompt_hash(&a), prompt_hash(&b));
        assert_eq!(prompt_hash(&a), prompt_hash(&a.clone()));
    }

    #[test]
    fn mismatched_label_counts_are_errors() {
        let cache = ResultCache::in_memory().unwrap();
        let mut short = result(-1.0, -2.0);
        short.labels.pop();
        assert!(cache.put(&key("m", &[1]), &short).is_err());
    }

    #[test]
    fn text_entries_are_kept_apart_by_model_kind_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.sqlite");
        {
            let cache = ResultCache::open(&path).unwrap();
            assert_eq!(cache.get_text("m", "steps", "k").unwrap(), None);
            cache.put_text("m", "steps", "k", "1. Read.").unwrap();
            cache.put_text("m", "steps", "k", "1. Read it.").unwrap();
        }
        let cache = ResultCache::open(&path).unwrap();
        assert_eq!(
            cache.get_text("m", "steps", "k").unwrap().as_deref(),
            Some("1. Read it.")
        );
        assert_eq!(cache.get_text("other", "steps", "k").unwrap(), None);
        assert_eq!(cache.get_text("m", "gptscore", "k").unwrap(), None);
        assert_eq!(cache.get_text("m", "steps", "k2").unwrap(), None);
        assert!(
            cache.is_empty().unwrap(),
            "text entries are not label results"
        );
    }

    #[test]
    fn an_unusable_path_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"x").unwrap();
        let path = blocker.join("results.sqlite");
        let error = format!("{:#}", ResultCache::open(&path).err().unwrap());
        assert!(error.contains(&blocker.display().to_string()), "{error}");
    }
}

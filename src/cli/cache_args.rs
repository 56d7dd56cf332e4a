//! The result-cache arguments every caching subcommand shares.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::engine::ResultCache;

/// Where computed results are kept, so that reruns and interrupted runs reuse them.
#[derive(Debug, Clone, Args)]
pub struct CacheArgs {
    /// Result cache (SQLite). Default: $NLG_JUDGE_CACHE/results.sqlite, else the user
    /// cache directory's nlg-judge/results.sqlite.
    #[arg(long)]
    pub cache: Option<PathBuf>,

    /// Do not read or write the result cache: everything the model answers is computed
    /// anew.
    #[arg(long, conflicts_with = "cache")]
    pub no_cache: bool,
}

impl CacheArgs {
    /// The cache to use, or `None` with `--no-cache`.
    pub fn open(&self) -> Result<Option<ResultCache>> {
        if self.no_cache {
            return Ok(None);
        }
        let path = match &self.cache {
            Some(path) => path.clone(),
            None => ResultCache::default_path()?,
        };
        Ok(Some(ResultCache::open(&path)?))
    }

    /// The cache's file, where one is used: the outputs of a run must never overwrite it.
    pub fn file(&self) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        match &self.cache {
            Some(path) => Some(path.clone()),
            None => ResultCache::default_path().ok(),
        }
    }

    /// The cache to use, an in-memory one with `--no-cache`.
    pub fn open_or_memory(&self) -> Result<ResultCache> {
        match self.open()? {
            Some(cache) => Ok(cache),
            None => ResultCache::in_memory(),
        }
    }
}

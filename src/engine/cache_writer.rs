//! Label results written to the result cache off the scorer's thread, each burst in one
//! transaction. A forward pass hands its results over together; one commit per result,
//! on the thread that drives the model, was host work a GPU waited on.
//!
//! The cache's promise holds: everything handed over is on disk when
//! [`CacheWriter::finish`] returns, and when the writer is dropped on an error or a
//! panic; a killed process loses only results still queued (the milliseconds after a
//! pass), as it loses the pass in flight. A cache in memory has no second connection, and
//! a call of a few results is not worth a thread: both are written on the caller's
//! thread, one transaction a result.

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

use anyhow::{anyhow, Context as _, Result};
use rusqlite::Connection;

use super::cache::{insert_label, write_all, CacheKey, ResultCache};
use super::request::LabelResult;

/// The most results one transaction takes (a pass's burst is usually one).
const MAX_BURST: usize = 4096;

/// Calls expected to give fewer results than this are written on the caller's thread,
/// one transaction each (a service's request, a resumed run's last few): a thread and
/// a second connection cost more than they save there.
const THREAD_FROM: usize = 32;

/// A writer of one run's label results into a [`ResultCache`].
pub struct CacheWriter<'a> {
    cache: &'a ResultCache,
    queue: Option<Sender<(CacheKey, LabelResult)>>,
    worker: Option<JoinHandle<Result<Written>>>,
}

/// What a writer stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub results: usize,
    pub transactions: usize,
}

impl<'a> CacheWriter<'a> {
    /// A writer for a call expected to give `expected` results: with its own connection
    /// and thread from [`THREAD_FROM`] results on a cache file, else writing through the
    /// cache's connection.
    pub fn new(cache: &'a ResultCache, expected: usize) -> Result<Self> {
        if cache.path().is_none() || expected < THREAD_FROM {
            return Ok(Self {
                cache,
                queue: None,
                worker: None,
            });
        }
        let connection = cache.reopen()?;
        let location = cache.location().to_string();
        let (queue, received) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("nlg-judge cache writer".into())
            .spawn(move || write_bursts(&connection, &location, &received))
            .context("cannot start the result cache's writer thread")?;
        Ok(Self {
            cache,
            queue: Some(queue),
            worker: Some(worker),
        })
    }

    /// Hand `result` over for `key`. An error is the writer's own (a full disk, a cache
    /// made read-only): the results handed over before it that could be written were.
    pub fn put(&mut self, key: &CacheKey, result: &LabelResult) -> Result<()> {
        let Some(queue) = &self.queue else {
            return self.cache.put(key, result);
        };
        if queue.send((key.clone(), result.clone())).is_ok() {
            return Ok(());
        }
        // The thread has stopped, on an error: that error is the answer.
        Err(self
            .stop()
            .err()
            .unwrap_or_else(|| anyhow!("the result cache's writer stopped early")))
    }

    /// Wait until everything handed over is stored; what was stored, or the first error.
    pub fn finish(mut self) -> Result<Written> {
        self.stop()
    }

    fn stop(&mut self) -> Result<Written> {
        self.queue = None;
        match self.worker.take() {
            None => Ok(Written::default()),
            Some(worker) => worker
                .join()
                .map_err(|_| anyhow!("the result cache's writer thread panicked"))?,
        }
    }
}

impl Drop for CacheWriter<'_> {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            tracing::warn!(error = %format!("{error:#}"), "result cache writer");
        }
    }
}

/// Store what arrives: whatever is queued when a transaction starts goes into it.
fn write_bursts(
    connection: &Connection,
    location: &str,
    received: &Receiver<(CacheKey, LabelResult)>,
) -> Result<Written> {
    let mut written = Written::default();
    while let Ok(first) = received.recv() {
        let mut burst = vec![first];
        burst.extend(received.try_iter().take(MAX_BURST - 1));
        if write_all(connection, location, &burst).is_err() {
            // A full disk refuses the burst whole: keep as much of it as fits, one at a
            // time, and stop with the first refusal's error.
            for (key, result) in &burst {
                insert_label(connection, location, key, result)?;
                written.results += 1;
                written.transactions += 1;
            }
            continue;
        }
        written.results += burst.len();
        written.transactions += 1;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::request::{LabelScore, TokenPrompt};

    fn entry(k: u32) -> (CacheKey, LabelResult) {
        let prompt = TokenPrompt {
            input: vec![1, k],
            decoder_prefix: vec![],
        };
        let key = CacheKey::new("m", "t", &prompt, vec![vec![5], vec![6]]);
        let result = LabelResult {
            labels: vec![
                LabelScore {
                    tokens: vec![5],
                    logprob: -(f64::from(k) + 1.0).ln(),
                },
                LabelScore {
                    tokens: vec![6],
                    logprob: -1.0 / (f64::from(k) + 3.0),
                },
            ],
            prompt_tokens: 2,
        };
        (key, result)
    }

    #[test]
    fn everything_handed_over_is_stored_bit_for_bit_in_bursts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.sqlite");
        let cache = ResultCache::open(&path).unwrap();
        let entries: Vec<_> = (0..500).map(entry).collect();
        let mut writer = CacheWriter::new(&cache, 500).unwrap();
        for (key, result) in &entries {
            writer.put(key, result).unwrap();
        }
        let written = writer.finish().unwrap();
        assert_eq!(written.results, 500);
        assert!((1..=500).contains(&written.transactions));
        let reopened = ResultCache::open(&path).unwrap();
        for (key, result) in &entries {
            assert_eq!(reopened.get(key).unwrap().as_ref(), Some(result));
        }
    }

    #[test]
    fn a_dropped_writer_stores_what_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.sqlite");
        let cache = ResultCache::open(&path).unwrap();
        let (key, result) = entry(7);
        {
            let mut writer = CacheWriter::new(&cache, 500).unwrap();
            writer.put(&key, &result).unwrap();
        }
        assert_eq!(cache.get(&key).unwrap(), Some(result));
    }

    #[test]
    fn a_few_results_are_written_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResultCache::open(&dir.path().join("results.sqlite")).unwrap();
        let (key, result) = entry(4);
        let mut writer = CacheWriter::new(&cache, THREAD_FROM - 1).unwrap();
        writer.put(&key, &result).unwrap();
        assert_eq!(
            cache.get(&key).unwrap(),
            Some(result),
            "stored before finish"
        );
        assert_eq!(writer.finish().unwrap(), Written::default());
    }

    #[test]
    fn a_cache_in_memory_is_written_at_once() {
        let cache = ResultCache::in_memory().unwrap();
        let (key, result) = entry(3);
        let mut writer = CacheWriter::new(&cache, 500).unwrap();
        writer.put(&key, &result).unwrap();
        assert_eq!(cache.get(&key).unwrap(), Some(result));
        assert_eq!(writer.finish().unwrap(), Written::default());
    }

    #[test]
    fn a_write_error_reaches_the_caller() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.sqlite");
        let cache = ResultCache::open(&path).unwrap();
        let mut writer = CacheWriter::new(&cache, 500).unwrap();
        // A result whose labels do not match its key fails in the writer's transaction.
        let (key, mut bad) = entry(1);
        bad.labels.pop();
        writer.put(&key, &bad).unwrap();
        let error = loop {
            // The writer stops on the bad entry; a later put or finish reports it.
            match writer.put(&entry(2).0, &entry(2).1) {
                Ok(()) => std::thread::yield_now(),
                Err(error) => break error,
            }
        };
        assert!(
            format!("{error:#}").contains("labels but its key"),
            "{error:#}"
        );
    }
}

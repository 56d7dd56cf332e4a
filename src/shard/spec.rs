//! Which shard a process is, and which contexts are its own.
//!
//! A context belongs to shard `fnv1a64(context_id) mod N`: the 64-bit FNV-1a hash of the
//! id's UTF-8 bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3, as published
//! by Fowler, Noll and Vo). It depends on nothing but the id and N, so the split is the
//! same whatever the input order, the machine or the other shards.
//!
//! Without `--shard`, the index comes from the scheduler: Slurm job arrays
//! (`SLURM_ARRAY_TASK_ID`, the count from `SLURM_ARRAY_TASK_COUNT`, else
//! `SLURM_ARRAY_TASK_MAX - SLURM_ARRAY_TASK_MIN + 1`, the index taken relative to
//! `SLURM_ARRAY_TASK_MIN`) or Kubernetes Indexed Jobs (`JOB_COMPLETION_INDEX`, the count
//! from `--shards N`, since the pod does not see the job's completion count).

use anyhow::{bail, ensure, Context as _, Result};
use serde::{Deserialize, Serialize};

/// Shard `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSpec {
    pub index: usize,
    pub count: usize,
}

impl ShardSpec {
    /// Checked constructor: `index < count`, `count >= 1`.
    pub fn new(index: usize, count: usize) -> Result<Self> {
        ensure!(count >= 1, "a run has at least one shard (got N = {count})");
        ensure!(
            index < count,
            "shard index {index} is out of range for {count} shards (0..{})",
            count - 1
        );
        Ok(Self { index, count })
    }

    /// Parse `I/N` (0-based index).
    pub fn parse(text: &str) -> Result<Self> {
        let (index, count) = text
            .split_once('/')
            .with_context(|| format!("--shard {text:?}: expected I/N, e.g. 0/8"))?;
        let index: usize = index
            .trim()
            .parse()
            .with_context(|| format!("--shard {text:?}: the index I is not a number"))?;
        let count: usize = count
            .trim()
            .parse()
            .with_context(|| format!("--shard {text:?}: the count N is not a number"))?;
        Self::new(index, count).with_context(|| format!("--shard {text:?}"))
    }

    /// Whether the context `context_id` is this shard's work.
    pub fn owns(&self, context_id: &str) -> bool {
        shard_of(context_id, self.count) == self.index
    }
}

impl std::fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The shard (of `count`) that owns `context_id`.
pub fn shard_of(context_id: &str, count: usize) -> usize {
    (fnv1a64(context_id.as_bytes()) % count.max(1) as u64) as usize
}

/// The shard taken and the reason, for the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardChoice {
    pub spec: ShardSpec,
    pub reason: String,
}

fn env_number(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<usize>> {
    match lookup(name) {
        None => Ok(None),
        Some(text) if text.trim().is_empty() => Ok(None),
        Some(text) => {
            text.trim().parse().map(Some).with_context(|| {
                format!("the environment variable {name}={text:?} is not a number")
            })
        }
    }
}

/// The shard of this process: `--shard` if given, else the scheduler's variables (read
/// through `lookup`, `std::env::var` in the binary), else none (the whole input).
/// `shards` is `--shards N`, needed with Kubernetes and allowed as a check with Slurm.
pub fn resolve_shard(
    shard: Option<&str>,
    shards: Option<usize>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<ShardChoice>> {
    if let Some(text) = shard {
        ensure!(
            shards.is_none(),
            "--shards goes with a scheduler's index; with --shard I/N the count is N"
        );
        let spec = ShardSpec::parse(text)?;
        return Ok(Some(ShardChoice {
            spec,
            reason: format!("--shard {text}"),
        }));
    }
    if let Some(task) = env_number(lookup, "SLURM_ARRAY_TASK_ID")? {
        let min = env_number(lookup, "SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        let max = env_number(lookup, "SLURM_ARRAY_TASK_MAX")?;
        let (count, source) = match (env_number(lookup, "SLURM_ARRAY_TASK_COUNT")?, max) {
            (Some(count), _) => (count, "SLURM_ARRAY_TASK_COUNT".to_string()),
            (None, Some(max)) => {
                ensure!(
                    max >= min,
                    "SLURM_ARRAY_TASK_MAX={max} is below SLURM_ARRAY_TASK_MIN={min}"
                );
                (
                    max - min + 1,
                    "SLURM_ARRAY_TASK_MAX - SLURM_ARRAY_TASK_MIN + 1".to_string(),
                )
            }
            (None, None) => match shards {
                Some(n) => (n, "--shards".to_string()),
                None => bail!(
                    "SLURM_ARRAY_TASK_ID={task} is set but neither SLURM_ARRAY_TASK_COUNT nor \
                     SLURM_ARRAY_TASK_MAX is: give the count with --shards N"
                ),
            },
        };
        if let Some(n) = shards {
            ensure!(
                n == count,
                "--shards {n} disagrees with the Slurm array's {count} tasks ({source})"
            );
        }
        ensure!(
            task >= min,
            "SLURM_ARRAY_TASK_ID={task} is below SLURM_ARRAY_TASK_MIN={min}"
        );
        let spec = ShardSpec::new(task - min, count).with_context(|| {
            format!("Slurm array task {task} (min {min}) with {count} tasks ({source})")
        })?;
        return Ok(Some(ShardChoice {
            spec,
            reason: format!(
                "Slurm job array: SLURM_ARRAY_TASK_ID={task} minus SLURM_ARRAY_TASK_MIN={min}, \
                 {count} shards from {source}"
            ),
        }));
    }
    if let Some(index) = env_number(lookup, "JOB_COMPLETION_INDEX")? {
        let Some(count) = shards else {
            bail!(
                "JOB_COMPLETION_INDEX={index} is set (a Kubernetes Indexed Job): give the \
                 job's completion count with --shards N"
            );
        };
        let spec = ShardSpec::new(index, count)
            .with_context(|| format!("JOB_COMPLETION_INDEX={index} with --shards {count}"))?;
        return Ok(Some(ShardChoice {
            spec,
            reason: format!(
                "Kubernetes Indexed Job: JOB_COMPLETION_INDEX={index}, {count} shards from --shards"
            ),
        }));
    }
    ensure!(
        shards.is_none(),
        "--shards {} was given but no shard index: use --shard I/N, or run under a Slurm \
         array (SLURM_ARRAY_TASK_ID) or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX)",
        shards.unwrap_or(0)
    );
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        // From the FNV reference test suite (64-bit FNV-1a).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn shards_partition_the_ids_and_spread_them() {
        let ids: Vec<String> = (0..300).map(|i| format!("doc-{i}")).collect();
        let mut sizes = [0usize; 3];
        for id in &ids {
            let owners: Vec<usize> = (0..3)
                .filter(|&i| ShardSpec::new(i, 3).unwrap().owns(id))
                .collect();
            assert_eq!(owners.len(), 1, "{id} owned by {owners:?}");
            sizes[owners[0]] += 1;
        }
        assert!(sizes.iter().all(|&s| s > 60), "{sizes:?}");
    }

    #[test]
    fn parse_checks_the_range() {
        assert_eq!(
            ShardSpec::parse("2/8").unwrap(),
            ShardSpec { index: 2, count: 8 }
        );
        assert!(ShardSpec::parse("8/8").is_err());
        assert!(ShardSpec::parse("0/0").is_err());
        assert!(ShardSpec::parse("3").is_err());
        assert!(ShardSpec::parse("a/2").is_err());
    }

    #[test]
    fn the_flag_wins_over_the_environment() {
        let lookup = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
        ]);
        let choice = resolve_shard(Some("1/3"), None, &lookup).unwrap().unwrap();
        assert_eq!(choice.spec, ShardSpec { index: 1, count: 3 });
        assert!(choice.reason.contains("--shard"));
    }

    #[test]
    fn slurm_count_or_max_minus_min() {
        let lookup = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
        ]);
        let choice = resolve_shard(None, None, &lookup).unwrap().unwrap();
        assert_eq!(choice.spec, ShardSpec { index: 5, count: 8 });
        let lookup = env(&[
            ("SLURM_ARRAY_TASK_ID", "12"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_MAX", "13"),
        ]);
        let choice = resolve_shard(None, None, &lookup).unwrap().unwrap();
        assert_eq!(choice.spec, ShardSpec { index: 2, count: 4 });
        assert!(choice.reason.contains("SLURM_ARRAY_TASK_MAX"));
        let lookup = env(&[("SLURM_ARRAY_TASK_ID", "2")]);
        assert!(resolve_shard(None, None, &lookup).is_err());
        let lookup = env(&[
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert!(resolve_shard(None, Some(5), &lookup).is_err());
    }

    #[test]
    fn kubernetes_needs_the_count() {
        let lookup = env(&[("JOB_COMPLETION_INDEX", "1")]);
        assert!(resolve_shard(None, None, &lookup).is_err());
        let choice = resolve_shard(None, Some(3), &lookup).unwrap().unwrap();
        assert_eq!(choice.spec, ShardSpec { index: 1, count: 3 });
        assert!(choice.reason.contains("Kubernetes"));
        assert!(resolve_shard(None, Some(1), &lookup).is_err());
    }

    #[test]
    fn nothing_set_is_the_whole_input() {
        let lookup = env(&[]);
        assert_eq!(resolve_shard(None, None, &lookup).unwrap(), None);
        assert!(resolve_shard(None, Some(3), &lookup).is_err());
    }
}

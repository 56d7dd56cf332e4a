//! The sharding arguments every batch subcommand shares (`--shard I/N`, `--shards N`),
//! the log line saying which shard was taken and why, and the sidecar beside the output.

use std::path::Path;

use anyhow::{ensure, Context as _, Result};
use clap::Args;

use crate::data::Context;
use crate::shard::{resolve_shard, sidecar_path, Fingerprint, ShardSidecar, ShardSpec};

/// Which part of the input this process does.
#[derive(Debug, Clone, Args)]
pub struct ShardArgs {
    /// Do only shard I of N (0-based): the contexts whose id hashes to I (64-bit FNV-1a
    /// mod N). Without it, the index comes from a Slurm job array (SLURM_ARRAY_TASK_ID)
    /// or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX, with --shards N). Put the
    /// outputs together with `nlg-judge merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,

    /// Number of shards when the index comes from the scheduler (required with
    /// JOB_COMPLETION_INDEX; a check with Slurm).
    #[arg(long, value_name = "N")]
    pub shards: Option<usize>,
}

impl ShardArgs {
    /// The shard of this process, if any, announced on standard error.
    pub fn resolve(&self) -> Result<Option<ShardSpec>> {
        let lookup = |name: &str| std::env::var(name).ok();
        let choice = resolve_shard(self.shard.as_deref(), self.shards, &lookup)?;
        if let Some(choice) = &choice {
            eprintln!("shard {} taken ({})", choice.spec, choice.reason);
        }
        Ok(choice.map(|c| c.spec))
    }
}

/// Keep the contexts of `spec` (all without a shard), saying how many.
pub fn take_shard(contexts: Vec<Context>, spec: Option<ShardSpec>) -> Vec<Context> {
    let Some(spec) = spec else {
        return contexts;
    };
    let total = contexts.len();
    let mine: Vec<Context> = contexts.into_iter().filter(|c| spec.owns(&c.id)).collect();
    eprintln!(
        "shard {spec}: {} of the input's {total} contexts",
        mine.len()
    );
    mine
}

/// A sharded run needs its output in a file (the sidecar goes beside it).
pub fn check_output(spec: Option<ShardSpec>, output: Option<&Path>) -> Result<()> {
    if let Some(spec) = spec {
        ensure!(
            output.is_some(),
            "shard {spec}: a sharded run writes to a file (--output), with its fingerprint \
             beside it, for `nlg-judge merge`"
        );
    }
    Ok(())
}

/// Write `OUT.shard.json` beside `output`.
pub fn write_sidecar(
    output: &Path,
    spec: ShardSpec,
    fingerprint: Fingerprint,
    contexts: &[Context],
) -> Result<()> {
    let sidecar = ShardSidecar {
        fingerprint,
        shard: spec,
        contexts: contexts.iter().map(|c| c.id.clone()).collect(),
    };
    let path = sidecar_path(output);
    super::compare::write_file(
        &path,
        |out| Ok(out.write_all(sidecar.to_json().as_bytes())?),
    )
    .with_context(|| format!("cannot write the shard sidecar {}", path.display()))
}

//! `nlg-judge merge`: put the outputs of a sharded run back together, checking that the
//! shards belong to one run and cover the input exactly once.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;

use super::compare::{diagnostics_path, write_file};
use super::outputs::PlannedPaths;
use crate::data::read_single_contexts;
use crate::judge::diagnostics::combine_shards;
use crate::shard::fingerprint::file_sha256;
use crate::shard::{merge_outputs, ShardOutput, ShardSidecar};

/// Arguments of `nlg-judge merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' output files (each with its OUT.shard.json sidecar).
    #[arg(required = true, value_name = "OUT")]
    pub outputs: Vec<PathBuf>,

    /// The input all shards read (its contexts set the order and the coverage).
    #[arg(long)]
    pub input: PathBuf,

    /// The merged file: the same bytes a single run over the input writes.
    #[arg(long)]
    pub output: PathBuf,
}

pub fn run(args: MergeArgs) -> Result<()> {
    // Every failure but writing the merged file is in what the user gave (exit code 2).
    let merged = merge(&args).map_err(super::input_error)?;
    let diagnostics = combined_diagnostics(&args.outputs).map_err(super::input_error)?;
    write_file(&args.output, |out| Ok(out.write_all(&merged.bytes)?))?;
    println!(
        "merged {} shards ({} contexts) into {}",
        merged.shards,
        merged.contexts,
        args.output.display()
    );
    match diagnostics {
        Ok(combined) => {
            let path = diagnostics_path(&args.output);
            let mut text = serde_json::to_string_pretty(&combined)?;
            text.push('\n');
            write_file(&path, |out| Ok(out.write_all(text.as_bytes())?))?;
            println!(
                "judge diagnostics of the whole run ({} warning(s), each shard's kept): {}",
                combined["warnings"],
                path.display()
            );
        }
        Err(why) => println!("no judge diagnostics combined: {why}"),
    }
    Ok(())
}

/// The shards' diagnostics files combined (`judge::diagnostics::combine_shards`), or why
/// there are none to combine (a shard without its file). A file that is there but does
/// not read is an error.
fn combined_diagnostics(
    outputs: &[PathBuf],
) -> Result<std::result::Result<serde_json::Value, String>> {
    let mut shards = Vec::with_capacity(outputs.len());
    for output in outputs {
        let path = diagnostics_path(output);
        if !path.exists() {
            return Ok(Err(format!("{} has none beside it", output.display())));
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        shards.push((output.display().to_string(), value));
    }
    Ok(Ok(combine_shards(&shards)?))
}

/// The merged bytes, and how many shards and contexts they hold.
struct Merged {
    bytes: Vec<u8>,
    shards: usize,
    contexts: usize,
}

fn merge(args: &MergeArgs) -> Result<Merged> {
    PlannedPaths::new()
        .input("--input", &args.input)
        .inputs("--outputs", args.outputs.iter().map(PathBuf::as_path))
        .output("--output", Some(&args.output))
        .output(
            "--output's diagnostics",
            Some(&diagnostics_path(&args.output)),
        )
        .check()?;
    let contexts = read_single_contexts(&args.input)?;
    let ids: Vec<String> = contexts.into_iter().map(|c| c.id).collect();
    let input_sha256 = file_sha256(&args.input)?;
    let mut shards = Vec::new();
    for path in &args.outputs {
        let sidecar = ShardSidecar::read_for(path)?;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        shards.push(ShardOutput {
            name: path.display().to_string(),
            sidecar,
            text,
        });
    }
    Ok(Merged {
        bytes: merge_outputs(&shards, &ids, &input_sha256)?,
        shards: shards.len(),
        contexts: ids.len(),
    })
}

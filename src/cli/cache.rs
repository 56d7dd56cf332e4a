//! `nlg-judge cache check|repair`: look at the result cache, and recover from a damaged
//! one (see [`crate::engine::cache_repair`]).

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use crate::engine::cache_repair::{check, repair};
use crate::engine::ResultCache;

/// Arguments of `nlg-judge cache`.
#[derive(Debug, Args)]
pub struct CacheCommandArgs {
    #[command(subcommand)]
    pub action: CacheAction,
}

#[derive(Debug, Subcommand)]
pub enum CacheAction {
    /// Check the result cache's integrity and count its entries (exit 1 when damaged).
    Check(CachePath),
    /// Repair a damaged result cache: move it aside (kept, renamed `.damaged-<time>`),
    /// start a fresh one in its place and copy into it every entry that can still be
    /// read. A sound cache is left as it is.
    Repair(CachePath),
}

#[derive(Debug, Args)]
pub struct CachePath {
    /// Result cache (SQLite). Default: $NLG_JUDGE_CACHE/results.sqlite, else the user
    /// cache directory's nlg-judge/results.sqlite.
    #[arg(long)]
    pub cache: Option<PathBuf>,
}

impl CachePath {
    fn path(&self) -> Result<PathBuf> {
        match &self.cache {
            Some(path) => Ok(path.clone()),
            None => ResultCache::default_path(),
        }
    }
}

fn counted(n: Option<usize>) -> String {
    n.map_or("?".to_string(), |n| n.to_string())
}

/// `path` if a cache file is there; a missing file or a folder is the user's to fix
/// (exit 2), and nothing is created.
fn existing_cache(path: std::path::PathBuf) -> Result<std::path::PathBuf> {
    if path.is_dir() {
        return Err(super::input_error(anyhow::anyhow!(
            "{} is a folder, not a result cache file",
            path.display()
        )));
    }
    if !path.exists() {
        return Err(super::input_error(anyhow::anyhow!(
            "no result cache at {}: nothing to check (give the file with --cache)",
            path.display()
        )));
    }
    Ok(path)
}

pub fn run(args: CacheCommandArgs) -> Result<()> {
    match args.action {
        CacheAction::Check(at) => {
            let path = existing_cache(at.path()?)?;
            let report = check(&path)?;
            println!(
                "{}: {} label results, {} text results",
                path.display(),
                counted(report.label_results),
                counted(report.text_results)
            );
            if report.is_sound() {
                println!("sound");
                return Ok(());
            }
            for problem in &report.problems {
                println!("problem: {problem}");
            }
            bail!(
                "the result cache {} is damaged; `nlg-judge cache repair --cache {}` moves it aside and keeps what can be read",
                path.display(),
                path.display()
            )
        }
        CacheAction::Repair(at) => {
            let path = existing_cache(at.path()?)?;
            let report = repair(&path)?;
            match &report.moved_to {
                None => println!(
                    "{} is sound ({} label results, {} text results): nothing to do",
                    path.display(),
                    report.label_results,
                    report.text_results
                ),
                Some(aside) => {
                    println!(
                        "moved the damaged cache to {}; the fresh cache {} holds the {} label results and {} text results that could be read",
                        aside.display(),
                        path.display(),
                        report.label_results,
                        report.text_results
                    );
                    if report.unreadable_pages == 0 && report.lost_estimate == 0 {
                        println!(
                            "every page of the damaged cache ({}) could be read",
                            report.pages
                        );
                    } else {
                        println!(
                            "lost: {} of its {} pages could not be read; about {} entries were on them or could not be decoded",
                            report.unreadable_pages, report.pages, report.lost_estimate
                        );
                    }
                    for note in &report.notes {
                        println!("note: {note}");
                    }
                    println!("runs compute what was lost again; delete the damaged copy when you no longer need it");
                }
            }
            Ok(())
        }
    }
}

//! Checking a result cache and repairing a damaged one (`nlg-judge cache check|repair`).
//!
//! [`check`] runs SQLite's integrity check and counts the entries. [`repair`] moves a
//! damaged file (with its write-ahead log) aside under a `.damaged-<seconds>` name, never
//! deleting it, creates a fresh cache in its place, and copies into it every entry that
//! can still be read from the damaged one: first what SQLite itself reads of each table
//! (in key order, until the first page it cannot read), then every entry of the pages
//! read one by one ([`super::cache_pages`]), so a damaged page loses only its own
//! entries. The report counts the pages that could not be read and estimates the
//! entries lost with them; what was lost is computed again by the next run.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use rusqlite::{Connection, OpenFlags};

use super::cache::ResultCache;
use super::cache_pages::scan;

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// SQLite's integrity-check messages; empty when the file is sound.
    pub problems: Vec<String>,
    /// Label results and text results, when they could be counted.
    pub label_results: Option<usize>,
    pub text_results: Option<usize>,
}

impl CheckReport {
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What [`repair`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// `None`: the cache was sound and left as it was.
    pub moved_to: Option<PathBuf>,
    /// Entries in the fresh cache (label results, text results).
    pub label_results: usize,
    pub text_results: usize,
    /// Pages of the damaged file, and those of them that could not be read.
    pub pages: usize,
    pub unreadable_pages: usize,
    /// Entries lost: those on readable pages that did not decode, plus, for each
    /// unreadable page, the average number of entries of the pages that were read (an
    /// estimate: what a page held cannot be read from it).
    pub lost_estimate: usize,
    /// What went wrong reading the damaged file as a whole (it could not be opened, a
    /// table could not be read to its end by SQLite), for the record.
    pub notes: Vec<String>,
}

fn open_existing(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

fn count(connection: &Connection, table: &str) -> Option<usize> {
    connection
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
            row.get::<_, i64>(0)
        })
        .ok()
        .and_then(|n| usize::try_from(n).ok())
}

/// Check the cache at `path` (which must exist).
pub fn check(path: &Path) -> Result<CheckReport> {
    if !path.is_file() {
        bail!("there is no result cache at {}", path.display());
    }
    let connection = match open_existing(path) {
        Ok(connection) => connection,
        Err(error) => {
            return Ok(CheckReport {
                problems: vec![format!("cannot open it: {error}")],
                label_results: None,
                text_results: None,
            })
        }
    };
    let problems = match integrity(&connection) {
        Ok(messages) => messages.into_iter().filter(|m| m != "ok").collect(),
        Err(error) => vec![error.to_string()],
    };
    Ok(CheckReport {
        problems,
        label_results: count(&connection, "label_results"),
        text_results: count(&connection, "text_results"),
    })
}

fn integrity(connection: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut statement = connection.prepare("PRAGMA integrity_check(100)")?;
    let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
    rows.collect()
}

/// Repair the cache at `path`: nothing when it is sound, else move it aside and salvage
/// what can be read into a fresh one.
pub fn repair(path: &Path) -> Result<RepairReport> {
    let report = check(path)?;
    if report.is_sound() {
        return Ok(RepairReport {
            moved_to: None,
            label_results: report.label_results.unwrap_or(0),
            text_results: report.text_results.unwrap_or(0),
            pages: 0,
            unreadable_pages: 0,
            lost_estimate: 0,
            notes: Vec::new(),
        });
    }
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = with_suffix(path, &format!(".damaged-{seconds}"));
    for suffix in ["-wal", "-shm"] {
        let from = with_suffix(path, suffix);
        if from.exists() {
            let to = with_suffix(&aside, suffix);
            std::fs::rename(&from, &to)
                .with_context(|| format!("cannot move {} to {}", from.display(), to.display()))?;
        }
    }
    std::fs::rename(path, &aside)
        .with_context(|| format!("cannot move {} to {}", path.display(), aside.display()))?;
    // The fresh cache, with its schema.
    drop(ResultCache::open(path)?);
    let mut repaired = salvage(&aside, path)?;
    repaired.moved_to = Some(aside);
    Ok(repaired)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

const TABLES: [(&str, &str, usize); 2] = [
    (
        "label_results",
        "model, template, prompt, labels, logprobs, label_mass, prompt_tokens",
        7,
    ),
    ("text_results", "model, kind, key, value", 4),
];

/// Copy every readable entry of `damaged` into the cache at `fresh`.
fn salvage(damaged: &Path, fresh: &Path) -> Result<RepairReport> {
    let mut notes = Vec::new();
    let mut target = Connection::open(fresh)
        .with_context(|| format!("cannot open the fresh cache {}", fresh.display()))?;
    let transaction = target.transaction()?;
    // What SQLite reads (through the write-ahead log, so the newest copy of an entry).
    match Connection::open_with_flags(damaged, OpenFlags::SQLITE_OPEN_READ_ONLY) {
        Ok(source) => {
            for (table, columns, width) in TABLES {
                let mut copied = 0;
                if let Err(error) =
                    copy_table(&source, &transaction, table, columns, width, &mut copied)
                {
                    notes.push(format!(
                        "{table}: SQLite read {copied} entries in key order, then: {error}"
                    ));
                }
            }
        }
        Err(error) => notes.push(format!("SQLite cannot open it: {error}")),
    }
    // Then every page on its own; entries SQLite read already are kept as it read them.
    let file = std::fs::read(damaged)
        .with_context(|| format!("cannot read the damaged cache {}", damaged.display()))?;
    let wal_path = with_suffix(damaged, "-wal");
    let wal = match std::fs::read(&wal_path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => {
            notes.push(format!("cannot read {}: {error}", wal_path.display()));
            Vec::new()
        }
    };
    let pages = scan(&file, &wal);
    for ((table, columns, width), rows) in TABLES.iter().zip([&pages.label_rows, &pages.text_rows])
    {
        let placeholders = vec!["?"; *width].join(", ");
        let mut write = transaction.prepare(&format!(
            "INSERT OR IGNORE INTO {table} ({columns}) VALUES ({placeholders})"
        ))?;
        for row in rows {
            write
                .execute(rusqlite::params_from_iter(row))
                .with_context(|| format!("cannot write the fresh cache {}", fresh.display()))?;
        }
    }
    let label_results = count(&transaction, "label_results").unwrap_or(0);
    let text_results = count(&transaction, "text_results").unwrap_or(0);
    transaction
        .commit()
        .with_context(|| format!("cannot write the fresh cache {}", fresh.display()))?;
    let read = pages.label_rows.len() + pages.text_rows.len();
    let per_page = if pages.entry_pages == 0 {
        0.0
    } else {
        read as f64 / pages.entry_pages as f64
    };
    let lost_estimate =
        pages.undecodable + (per_page * pages.unreadable_pages as f64).round() as usize;
    Ok(RepairReport {
        moved_to: None,
        label_results,
        text_results,
        pages: pages.pages,
        unreadable_pages: pages.unreadable_pages,
        lost_estimate,
        notes,
    })
}

fn copy_table(
    source: &Connection,
    target: &rusqlite::Transaction<'_>,
    table: &str,
    columns: &str,
    width: usize,
    copied: &mut usize,
) -> rusqlite::Result<()> {
    let mut read = source.prepare(&format!("SELECT {columns} FROM {table}"))?;
    let placeholders = vec!["?"; width].join(", ");
    let mut write = target.prepare(&format!(
        "INSERT OR REPLACE INTO {table} ({columns}) VALUES ({placeholders})"
    ))?;
    let mut rows = read.query([])?;
    while let Some(row) = rows.next()? {
        let values = (0..width)
            .map(|i| row.get::<_, rusqlite::types::Value>(i))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        write.execute(rusqlite::params_from_iter(values))?;
        *copied += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cache_fault::{cache_fault, CacheFault};

    #[test]
    fn a_sound_cache_is_left_alone_and_garbage_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.sqlite");
        ResultCache::open(&path)
            .unwrap()
            .put_text("m", "k", "key", "value")
            .unwrap();
        let report = check(&path).unwrap();
        assert!(report.is_sound(), "{report:?}");
        assert_eq!(report.text_results, Some(1));
        assert_eq!(repair(&path).unwrap().moved_to, None);

        std::fs::write(&path, b"this is not a database at all, just text").unwrap();
        let _ = std::fs::remove_file(with_suffix(&path, "-wal"));
        let _ = std::fs::remove_file(with_suffix(&path, "-shm"));
        let error = ResultCache::open(&path).err().unwrap();
        assert!(
            matches!(cache_fault(&error), Some(CacheFault::Corrupt(_))),
            "{error:#}"
        );
        assert!(!check(&path).unwrap().is_sound());
        let repaired = repair(&path).unwrap();
        let aside = repaired.moved_to.unwrap();
        assert!(aside.is_file());
        assert!(check(&path).unwrap().is_sound());
        assert!(ResultCache::open(&path).is_ok());
    }
}

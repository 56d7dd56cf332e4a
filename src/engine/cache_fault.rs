//! What can go wrong with the result cache's file, named for the user with the way out.
//!
//! SQLite's low-level answers ("database disk image is malformed", "database or disk is
//! full", "attempt to write a readonly database") become a [`CacheFault`] that says which
//! file, what it means for the run (results stored before the fault are kept: each one
//! is its own transaction) and what to do. Find it in an error chain with
//! [`cache_fault`].

use rusqlite::ErrorCode;

/// A fault of the result cache's file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheFault {
    #[error(
        "the result cache {0} is damaged (not a database, or its pages are corrupt). \
         Run `nlg-judge cache check --cache {0}` to see what is wrong and \
         `nlg-judge cache repair --cache {0}` to move it aside and keep every result that \
         can still be read, or pass another --cache (or --no-cache)"
    )]
    Corrupt(String),
    #[error(
        "the disk holding the result cache {0} is full (or refused a write): the results \
         stored before are kept; free space and run again (the run resumes from the cache)"
    )]
    DiskFull(String),
    #[error(
        "the result cache {0} cannot be written (read-only file, folder or file system): \
         the results stored before are kept; make it writable, or pass another --cache \
         (or --no-cache)"
    )]
    ReadOnly(String),
}

impl CacheFault {
    /// The fault `error` shows for the cache at `location`, if it is one of these.
    pub fn of(error: &rusqlite::Error, location: &str) -> Option<Self> {
        let code = error.sqlite_error_code()?;
        let location = location.to_string();
        match code {
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => Some(Self::Corrupt(location)),
            ErrorCode::DiskFull => Some(Self::DiskFull(location)),
            ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied => {
                Some(Self::ReadOnly(location))
            }
            // A write the file system refused (no room, a file-size limit).
            ErrorCode::SystemIoFailure if refused_write(error) => Some(Self::DiskFull(location)),
            _ => None,
        }
    }
}

/// Whether SQLite's I/O error is a write, truncation or sync the file system refused.
fn refused_write(error: &rusqlite::Error) -> bool {
    use rusqlite::ffi;
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => matches!(
            failure.extended_code,
            ffi::SQLITE_IOERR_WRITE
                | ffi::SQLITE_IOERR_TRUNCATE
                | ffi::SQLITE_IOERR_FSYNC
                | ffi::SQLITE_IOERR_SHMSIZE
        ),
        _ => false,
    }
}

/// The cache fault in `error`'s chain, if any.
pub fn cache_fault(error: &anyhow::Error) -> Option<&CacheFault> {
    // A context, not a cause: anyhow's downcast looks through every context layer.
    error.downcast_ref::<CacheFault>()
}

/// `error` with its fault named (as context above SQLite's own message).
pub(crate) fn name(error: rusqlite::Error, location: &str) -> anyhow::Error {
    match CacheFault::of(&error, location) {
        Some(fault) => anyhow::Error::new(error).context(fault),
        None => anyhow::Error::new(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn sqlite_codes_map_to_named_faults() {
        let at = "/c/results.sqlite";
        assert_eq!(
            CacheFault::of(&sqlite(rusqlite::ffi::SQLITE_CORRUPT), at),
            Some(CacheFault::Corrupt(at.into()))
        );
        assert_eq!(
            CacheFault::of(&sqlite(rusqlite::ffi::SQLITE_NOTADB), at),
            Some(CacheFault::Corrupt(at.into()))
        );
        assert_eq!(
            CacheFault::of(&sqlite(rusqlite::ffi::SQLITE_FULL), at),
            Some(CacheFault::DiskFull(at.into()))
        );
        assert_eq!(
            CacheFault::of(&sqlite(rusqlite::ffi::SQLITE_READONLY), at),
            Some(CacheFault::ReadOnly(at.into()))
        );
        assert_eq!(
            CacheFault::of(&sqlite(rusqlite::ffi::SQLITE_BUSY), at),
            None
        );
        let error = name(sqlite(rusqlite::ffi::SQLITE_CORRUPT), at);
        assert!(format!("{error:#}").contains("nlg-judge cache repair --cache /c/results.sqlite"));
        assert!(matches!(cache_fault(&error), Some(CacheFault::Corrupt(_))));
    }
}

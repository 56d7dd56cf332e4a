//! The one directory downloaded model files land in, and the sha256 bookkeeping that keeps
//! them honest.
//!
//! Layout under the root (`$NLG_JUDGE_CACHE`, else `<user cache dir>/nlg-judge`):
//! - `models/<card>/<file>`: the files of each card;
//! - `models/<card>/.sha256.json`: hashes seen at first download, for card files whose
//!   card pins no hash (trust on first use: later corruption is still detected);
//! - `hashes/<key>.json`: for any file we hashed (cached or local), its size, modification
//!   time and sha256, so that a multi-gigabyte file is hashed again only when it changed;
//! - `tmp/`: partial downloads, renamed into place once complete and verified.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::progress;

/// Environment variable overriding the cache root.
pub const CACHE_ENV: &str = "NLG_JUDGE_CACHE";

const MANIFEST: &str = ".sha256.json";
const BUFFER: usize = 1 << 20;

/// The file cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCache {
    root: PathBuf,
}

/// What we know about a file's content at a given size and modification time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct HashRecord {
    path: PathBuf,
    size: u64,
    modified_secs: u64,
    modified_nanos: u32,
    sha256: String,
}

impl ModelCache {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `$NLG_JUDGE_CACHE`, else `<user cache dir>/nlg-judge`.
    pub fn from_env() -> Result<Self> {
        if let Some(root) = std::env::var_os(CACHE_ENV) {
            return Ok(Self::new(root));
        }
        let base = dirs::cache_dir()
            .with_context(|| format!("no user cache directory on this system: set {CACHE_ENV}"))?;
        Ok(Self::new(base.join("nlg-judge")))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory of a card's files.
    pub fn card_dir(&self, card: &str) -> PathBuf {
        self.root.join("models").join(card)
    }

    /// Where card file `file` of card `card` lives in the cache.
    pub fn file_path(&self, card: &str, file: &str) -> PathBuf {
        self.card_dir(card).join(file)
    }

    /// Directory for partial files (same file system as the cache, so renames are atomic).
    pub fn temp_dir(&self) -> Result<PathBuf> {
        let dir = self.root.join("tmp");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
        Ok(dir)
    }

    /// A new temporary file in the cache, deleted unless installed.
    pub fn temp_file(&self) -> Result<tempfile::NamedTempFile> {
        let dir = self.temp_dir()?;
        tempfile::NamedTempFile::new_in(&dir)
            .with_context(|| format!("cannot create a temporary file in {}", dir.display()))
    }

    /// The sha256 of `path`: the recorded one when the file's size and modification time
    /// are unchanged, else computed (with a progress bar) and recorded.
    pub fn sha256(&self, path: &Path, show_progress: bool) -> Result<String> {
        if let Some(hash) = self.recorded_sha256(path) {
            return Ok(hash);
        }
        self.rehash(path, show_progress)
    }

    /// Hash `path` from scratch and record the result.
    pub fn rehash(&self, path: &Path, show_progress: bool) -> Result<String> {
        let hash = hash_file(path, show_progress)?;
        self.remember_sha256(path, &hash)?;
        Ok(hash)
    }

    /// The recorded sha256 of `path`, if the record still matches the file.
    pub fn recorded_sha256(&self, path: &Path) -> Option<String> {
        let record_path = self.record_path(path).ok()?;
        let text = std::fs::read_to_string(record_path).ok()?;
        let record: HashRecord = serde_json::from_str(&text).ok()?;
        let current = stamp(path).ok()?;
        (record.path == current.0
            && record.size == current.1
            && record.modified_secs == current.2
            && record.modified_nanos == current.3)
            .then_some(record.sha256)
    }

    /// Record that `path`, as it is now, has sha256 `hash`.
    pub fn remember_sha256(&self, path: &Path, hash: &str) -> Result<()> {
        let (canonical, size, modified_secs, modified_nanos) = stamp(path)?;
        let record = HashRecord {
            path: canonical,
            size,
            modified_secs,
            modified_nanos,
            sha256: hash.to_string(),
        };
        let record_path = self.record_path(path)?;
        let text = serde_json::to_string_pretty(&record).context("cannot encode hash record")?;
        write_atomically(&record_path, text.as_bytes())
    }

    fn record_path(&self, path: &Path) -> Result<PathBuf> {
        let canonical = path
            .canonicalize()
            .with_context(|| format!("cannot find {}", path.display()))?;
        let key = hex::encode(Sha256::digest(canonical.to_string_lossy().as_bytes()));
        Ok(self.root.join("hashes").join(format!("{key}.json")))
    }

    /// The sha256 recorded when card file `file` was first downloaded, if any.
    pub fn first_seen_sha256(&self, card: &str, file: &str) -> Result<Option<String>> {
        Ok(self.read_manifest(card)?.remove(file))
    }

    /// Record the sha256 of a card file whose card pins none.
    pub fn set_first_seen_sha256(&self, card: &str, file: &str, hash: &str) -> Result<()> {
        let mut manifest = self.read_manifest(card)?;
        manifest.insert(file.to_string(), hash.to_string());
        let path = self.card_dir(card).join(MANIFEST);
        let text = serde_json::to_string_pretty(&manifest).context("cannot encode manifest")?;
        write_atomically(&path, text.as_bytes())
    }

    fn read_manifest(&self, card: &str) -> Result<BTreeMap<String, String>> {
        let path = self.card_dir(card).join(MANIFEST);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .with_context(|| format!("corrupt hash manifest {}", path.display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Move a completed temporary file to `dest` (atomically) and record its hash.
    pub fn install(&self, temp: tempfile::TempPath, dest: &Path, hash: &str) -> Result<()> {
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create directory {}", parent.display()))?;
        }
        // Temporary files are created owner-only; a cached model file is readable by all,
        // like any downloaded file.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o644))
                .with_context(|| format!("cannot set permissions of {}", temp.display()))?;
        }
        temp.persist(dest)
            .with_context(|| format!("cannot move a finished download to {}", dest.display()))?;
        self.remember_sha256(dest, hash)
    }
}

/// Canonical path, size and modification time of a file.
fn stamp(path: &Path) -> Result<(PathBuf, u64, u64, u32)> {
    let canonical = path
        .canonicalize()
        .with_context(|| format!("cannot find {}", path.display()))?;
    let metadata = std::fs::metadata(&canonical)
        .with_context(|| format!("cannot read metadata of {}", path.display()))?;
    let modified = metadata
        .modified()
        .with_context(|| format!("no modification time for {}", path.display()))?
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Ok((
        canonical,
        metadata.len(),
        modified.as_secs(),
        modified.subsec_nanos(),
    ))
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("{} has no parent directory", path.display()))?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    temp.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    temp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// sha256 (hex) of a whole file.
pub fn hash_file(path: &Path, show_progress: bool) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bar = progress::bytes_bar(
        show_progress && size > BUFFER as u64,
        size,
        format!("hashing {name}"),
    );
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; BUFFER];
    loop {
        let read = file
            .read(&mut buffer)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        bar.inc(read as u64);
    }
    bar.finish_and_clear();
    Ok(hex::encode(hasher.finalize()))
}

/// A writer that hashes and counts what passes through it and moves a progress bar.
pub struct HashingWriter<W: Write> {
    inner: W,
    hasher: Sha256,
    written: u64,
    bar: indicatif::ProgressBar,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W, bar: indicatif::ProgressBar) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
            bar,
        }
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// The sha256 (hex) of everything written, and the inner writer.
    pub fn finish(mut self) -> Result<(String, W)> {
        self.inner.flush().context("cannot flush written data")?;
        self.bar.finish_and_clear();
        Ok((hex::encode(self.hasher.finalize()), self.inner))
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        self.written += written as u64;
        self.bar.inc(written as u64);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Fail unless `actual` equals `expected`, naming the file and both hashes.
pub fn check_sha256(path: &Path, expected: &str, actual: &str) -> Result<()> {
    if !expected.eq_ignore_ascii_case(actual) {
        bail!(
            "sha256 mismatch for {}: expected {expected}, found {actual}",
            path.display()
        );
    }
    Ok(())
}

/// sha256 of several hashes in order: the fingerprint of a multi-file checkpoint.
pub fn combine_hashes<'a>(hashes: impl IntoIterator<Item = &'a str>) -> String {
    let mut hasher = Sha256::new();
    for hash in hashes {
        hasher.update(hash.as_bytes());
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    // sha256("abc") from FIPS 180-2, appendix B.1.
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn hashes_a_file_and_records_it() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModelCache::new(dir.path().join("cache"));
        let path = dir.path().join("f.bin");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(cache.recorded_sha256(&path), None);
        assert_eq!(cache.sha256(&path, false).unwrap(), ABC);
        assert_eq!(cache.recorded_sha256(&path).as_deref(), Some(ABC));
    }

    #[test]
    fn record_goes_stale_when_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModelCache::new(dir.path().join("cache"));
        let path = dir.path().join("f.bin");
        std::fs::write(&path, b"abc").unwrap();
        cache.sha256(&path, false).unwrap();
        std::fs::write(&path, b"abd").unwrap();
        assert_eq!(cache.recorded_sha256(&path), None);
        assert_ne!(cache.sha256(&path, false).unwrap(), ABC);
    }

    #[test]
    fn hashing_writer_matches_file_hash() {
        let mut writer = HashingWriter::new(Vec::new(), indicatif::ProgressBar::hidden());
        writer.write_all(b"ab").unwrap();
        writer.write_all(b"c").unwrap();
        assert_eq!(writer.written(), 3);
        let (hash, bytes) = writer.finish().unwrap();
        assert_eq!(hash, ABC);
        assert_eq!(bytes, b"abc");
    }

    #[test]
    fn manifest_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModelCache::new(dir.path());
        assert_eq!(cache.first_seen_sha256("m", "a.json").unwrap(), None);
        cache.set_first_seen_sha256("m", "a.json", ABC).unwrap();
        cache.set_first_seen_sha256("m", "b.json", "00").unwrap();
        assert_eq!(
            cache.first_seen_sha256("m", "a.json").unwrap().as_deref(),
            Some(ABC)
        );
    }

    #[test]
    fn mismatch_names_file_and_hashes() {
        let error = check_sha256(Path::new("/x/w.gguf"), ABC, "00").unwrap_err();
        let text = error.to_string();
        assert!(text.contains("/x/w.gguf") && text.contains(ABC) && text.contains("00"));
    }

    #[test]
    fn combined_hash_depends_on_order() {
        assert_ne!(combine_hashes(["a", "b"]), combine_hashes(["b", "a"]));
        // sha256("abc") again: the hashes are concatenated as text.
        assert_eq!(combine_hashes(["a", "bc"]), ABC);
    }
}

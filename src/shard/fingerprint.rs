//! What must agree between shards: each shard's output carries a sidecar file
//! (`OUT.shard.json`) with the run's fingerprint (model weights' sha256, method, template,
//! design, seed, input file's sha256, ...), its shard `I/N` and the contexts it did.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::spec::ShardSpec;

/// Everything that determines an output besides the contexts: field name to value.
/// Shards merge only when their fingerprints are equal.
pub type Fingerprint = BTreeMap<String, String>;

/// The sidecar written beside a sharded output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSidecar {
    pub fingerprint: Fingerprint,
    pub shard: ShardSpec,
    /// The contexts this shard owned, in input order (each has lines in the output).
    pub contexts: Vec<String>,
}

/// `OUT.shard.json` beside `output`.
pub fn sidecar_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".shard.json");
    PathBuf::from(name)
}

/// sha256 (hex) of a file's bytes.
pub fn file_sha256(path: &Path) -> Result<String> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let read = file
            .read(&mut buffer)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex::encode(hasher.finalize()))
}

impl ShardSidecar {
    /// The sidecar as pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a sidecar serialises");
        text.push('\n');
        text
    }

    /// Read the sidecar of `output`.
    pub fn read_for(output: &Path) -> Result<Self> {
        let path = sidecar_path(output);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read {}, the shard sidecar of {} (was it written by a sharded run?)",
                path.display(),
                output.display()
            )
        })?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a shard sidecar", path.display()))
    }
}

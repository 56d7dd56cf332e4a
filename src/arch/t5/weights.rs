//! Where a checkpoint's weights are and how they are read: one `model.safetensors` or
//! shards listed by `model.safetensors.index.json` (as flan-t5-xl/xxl ship), through one
//! code path; tensors stored as f32, f16 or bf16 are converted to the compute type when
//! loaded. (The weights' fingerprint is runtime's: files are hashed in one place.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use serde::Deserialize;

pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// The safetensors files holding a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightFiles {
    /// The index, for sharded checkpoints.
    pub index: Option<PathBuf>,
    /// The files with tensors, in name order.
    pub files: Vec<PathBuf>,
}

#[derive(Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

impl WeightFiles {
    /// Find the weights in a model directory: the shard index if there is one, otherwise
    /// `model.safetensors`.
    pub fn find(dir: &Path) -> Result<Self> {
        let index = dir.join(INDEX_FILE);
        if index.is_file() {
            return Self::from_index(&index);
        }
        let single = dir.join(SINGLE_FILE);
        if single.is_file() {
            return Ok(Self {
                index: None,
                files: vec![single],
            });
        }
        let mut hint = String::new();
        if dir.join("pytorch_model.bin").exists() {
            hint = " (pytorch_model.bin is not read: convert it to safetensors)".to_string();
        }
        bail!(
            "no weights in {}: expected {SINGLE_FILE} or {INDEX_FILE}{hint}",
            dir.display()
        )
    }

    /// The shards named by a `model.safetensors.index.json`, which must all exist.
    pub fn from_index(index: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(index)
            .with_context(|| format!("cannot read shard index {}", index.display()))?;
        let parsed: ShardIndex = serde_json::from_str(&text)
            .with_context(|| format!("invalid shard index {}", index.display()))?;
        let dir = index.parent().unwrap_or_else(|| Path::new("."));
        let names: BTreeSet<&String> = parsed.weight_map.values().collect();
        if names.is_empty() {
            bail!("shard index {} lists no tensors", index.display());
        }
        let mut files = Vec::with_capacity(names.len());
        for name in names {
            let file = dir.join(name);
            if !file.is_file() {
                bail!(
                    "shard {} named in {} does not exist",
                    file.display(),
                    index.display()
                );
            }
            files.push(file);
        }
        Ok(Self {
            index: Some(index.to_path_buf()),
            files,
        })
    }

    /// A variable builder over all the files, converting tensors to `dtype` on load.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> Result<VarBuilder<'static>> {
        // SAFETY: the files are memory-mapped read-only; they must not be modified while
        // the model is loaded (tensors are copied out when converted or moved to the
        // device, and the mapping is dropped with the builder).
        let builder = unsafe { VarBuilder::from_mmaped_safetensors(&self.files, dtype, device) };
        builder.with_context(|| {
            let names: Vec<String> = self.files.iter().map(|f| f.display().to_string()).collect();
            format!("cannot read safetensors {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_weights_is_an_error_naming_the_expected_files() {
        let dir = tempfile::tempdir().unwrap();
        let err = WeightFiles::find(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(SINGLE_FILE) && err.contains(INDEX_FILE),
            "{err}"
        );
        std::fs::write(dir.path().join("pytorch_model.bin"), b"x").unwrap();
        let err = WeightFiles::find(dir.path()).unwrap_err().to_string();
        assert!(err.contains("pytorch_model.bin"), "{err}");
    }

    #[test]
    fn an_index_naming_a_missing_shard_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.safetensors"), b"").unwrap();
        std::fs::write(
            dir.path().join(INDEX_FILE),
            r#"{"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}"#,
        )
        .unwrap();
        let err = WeightFiles::find(dir.path()).unwrap_err().to_string();
        assert!(err.contains("b.safetensors"), "{err}");
    }

    #[test]
    fn shards_are_listed_once_each_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.safetensors", "a.safetensors"] {
            std::fs::write(dir.path().join(name), name.as_bytes()).unwrap();
        }
        std::fs::write(
            dir.path().join(INDEX_FILE),
            r#"{"weight_map": {"x": "b.safetensors", "y": "a.safetensors", "z": "b.safetensors"}}"#,
        )
        .unwrap();
        let files = WeightFiles::find(dir.path()).unwrap();
        let names: Vec<_> = files
            .files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().to_string())
            .collect();
        assert_eq!(names, ["a.safetensors", "b.safetensors"]);
    }
}

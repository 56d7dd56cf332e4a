//! Reading what a checkpoint says about itself: `config.json` (architecture, context
//! length), `model.safetensors.index.json` (which shards hold the weights),
//! `tokenizer_config.json` (special tokens), and GGUF metadata (architecture, context
//! length, chat template) with a check that the tensor data is all there.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::quantized::gguf_file;

use super::card::{check_file_name, Architecture};

/// The shard file names of a safetensors index, sorted (the hub names them
/// `model-00001-of-0000N.safetensors`, so name order is shard order).
pub fn safetensors_shards(index: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(index)
        .with_context(|| format!("cannot read {}", index.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", index.display()))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .with_context(|| format!("{} has no 'weight_map' object", index.display()))?;
    let mut shards = BTreeSet::new();
    for (tensor, file) in map {
        let file = file.as_str().with_context(|| {
            format!(
                "{}: 'weight_map.{tensor}' is not a file name",
                index.display()
            )
        })?;
        check_file_name(file)
            .with_context(|| format!("{}: 'weight_map.{tensor}'", index.display()))?;
        shards.insert(file.to_string());
    }
    if shards.is_empty() {
        bail!("{}: 'weight_map' is empty", index.display());
    }
    Ok(shards.into_iter().collect())
}

/// What `config.json` tells us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSummary {
    pub architecture: Architecture,
    /// `max_position_embeddings` (llama, qwen2) or `n_positions` (t5), when present.
    pub context_window: Option<usize>,
}

/// Read the architecture (`model_type`) and context length of a `config.json`.
pub fn read_config(path: &Path) -> Result<ConfigSummary> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    let model_type = json
        .get("model_type")
        .and_then(|v| v.as_str())
        .with_context(|| format!("{} has no 'model_type' string", path.display()))?;
    let architecture: Architecture = model_type
        .parse()
        .with_context(|| format!("{}: field 'model_type'", path.display()))?;
    let context_window = ["max_position_embeddings", "n_positions"]
        .iter()
        .find_map(|key| json.get(*key).and_then(|v| v.as_u64()))
        .map(|n| n as usize);
    Ok(ConfigSummary {
        architecture,
        context_window,
    })
}

/// Special tokens and flags from a `tokenizer_config.json` (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenizerConfig {
    pub bos: Option<String>,
    pub eos: Option<String>,
    /// `"bos_token": null` / `"eos_token": null`: the checkpoint has no such token (no
    /// family default stands in, as with transformers).
    pub no_bos: bool,
    pub no_eos: bool,
    pub pad: Option<String>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub chat_template: Option<String>,
}

/// Read a `tokenizer_config.json`; tokens may be strings or `{"content": ...}` objects.
pub fn read_tokenizer_config(path: &Path) -> Result<TokenizerConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    let token = |key: &str| match json.get(key) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Object(o)) => {
            o.get("content").and_then(|c| c.as_str()).map(String::from)
        }
        _ => None,
    };
    Ok(TokenizerConfig {
        bos: token("bos_token"),
        eos: token("eos_token"),
        pad: token("pad_token"),
        no_bos: json
            .get("bos_token")
            .is_some_and(serde_json::Value::is_null),
        no_eos: json
            .get("eos_token")
            .is_some_and(serde_json::Value::is_null),
        add_bos: json.get("add_bos_token").and_then(|v| v.as_bool()),
        add_eos: json.get("add_eos_token").and_then(|v| v.as_bool()),
        chat_template: json
            .get("chat_template")
            .and_then(|v| v.as_str())
            .map(String::from),
    })
}

/// A GGUF file's header, read and checked.
pub struct GgufHeader {
    pub content: gguf_file::Content,
}

impl std::fmt::Debug for GgufHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufHeader")
            .field("metadata_keys", &self.content.metadata.len())
            .field("tensors", &self.content.tensor_infos.len())
            .finish()
    }
}

impl GgufHeader {
    /// Read the header of `path` and check that every tensor's data lies inside the file
    /// (a truncated download fails here, naming the file, not later inside the model).
    pub fn read(path: &Path) -> Result<Self> {
        let mut file = std::fs::File::open(path)
            .with_context(|| format!("cannot open GGUF file {}", path.display()))?;
        let file_size = file
            .metadata()
            .with_context(|| format!("cannot read metadata of {}", path.display()))?
            .len();
        // candle's reader panics on some headers that lie (a zero `general.alignment`
        // divides by zero): such a file is as unreadable as a truncated one.
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gguf_file::Content::read(&mut file)
        }));
        let content = match read {
            Ok(Ok(content)) => content,
            Ok(Err(error)) => bail!(
                "{} is not a readable GGUF file (truncated or corrupt?): {error}",
                path.display()
            ),
            Err(_) => bail!(
                "{} is not a readable GGUF file: its header is inconsistent (corrupt?)",
                path.display()
            ),
        };
        for (name, info) in &content.tensor_infos {
            let elements = info.shape.elem_count() as u64;
            let block = (info.ggml_dtype.block_size() as u64).max(1);
            let end = (elements / block)
                .checked_mul(info.ggml_dtype.type_size() as u64)
                .and_then(|bytes| bytes.checked_add(info.offset))
                .and_then(|end| end.checked_add(content.tensor_data_offset));
            match end {
                Some(end) if end <= file_size => {}
                Some(end) => bail!(
                    "{} is truncated: tensor '{name}' ends at byte {end} but the file has {file_size} bytes",
                    path.display()
                ),
                None => bail!(
                    "{} is corrupt: tensor '{name}' lies beyond any file size (offset {}, shape {:?})",
                    path.display(),
                    info.offset,
                    info.shape.dims()
                ),
            }
        }
        Ok(Self { content })
    }

    pub fn metadata(&self) -> &HashMap<String, gguf_file::Value> {
        &self.content.metadata
    }

    /// A string metadata value; a value of another type is an error naming the key.
    pub fn string(&self, key: &str) -> Result<Option<&str>> {
        match self.content.metadata.get(key) {
            None => Ok(None),
            Some(value) => value
                .to_string()
                .map(|s| Some(s.as_str()))
                .map_err(|e| anyhow::anyhow!("GGUF metadata '{key}' is not a string: {e}")),
        }
    }

    /// An unsigned integer metadata value (any integer width).
    pub fn unsigned(&self, key: &str) -> Result<Option<u64>> {
        use gguf_file::Value;
        let value = match self.content.metadata.get(key) {
            None => return Ok(None),
            Some(value) => value,
        };
        let number = match value {
            Value::U8(v) => Some(*v as u64),
            Value::U16(v) => Some(*v as u64),
            Value::U32(v) => Some(*v as u64),
            Value::U64(v) => Some(*v),
            Value::I8(v) => u64::try_from(*v).ok(),
            Value::I16(v) => u64::try_from(*v).ok(),
            Value::I32(v) => u64::try_from(*v).ok(),
            Value::I64(v) => u64::try_from(*v).ok(),
            _ => None,
        };
        number
            .map(Some)
            .with_context(|| format!("GGUF metadata '{key}' is not a non-negative integer"))
    }

    /// A boolean metadata value.
    pub fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.content.metadata.get(key) {
            None => Ok(None),
            Some(value) => value
                .to_bool()
                .map(Some)
                .map_err(|e| anyhow::anyhow!("GGUF metadata '{key}' is not a boolean: {e}")),
        }
    }

    /// `general.architecture`, parsed.
    pub fn architecture(&self) -> Result<Architecture> {
        let name = self
            .string("general.architecture")?
            .context("GGUF metadata has no 'general.architecture'")?;
        name.parse().context("GGUF metadata 'general.architecture'")
    }

    /// `<architecture>.context_length`.
    pub fn context_length(&self) -> Result<Option<usize>> {
        let arch = self
            .string("general.architecture")?
            .context("GGUF metadata has no 'general.architecture'")?;
        Ok(self
            .unsigned(&format!("{arch}.context_length"))?
            .map(|n| n as usize))
    }

    /// `tokenizer.chat_template`.
    pub fn chat_template(&self) -> Result<Option<&str>> {
        self.string("tokenizer.chat_template")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_unique_and_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("model.safetensors.index.json");
        std::fs::write(
            &index,
            r#"{"metadata": {}, "weight_map": {"a": "model-00002-of-00002.safetensors",
               "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        assert_eq!(
            safetensors_shards(&index).unwrap(),
            vec![
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ]
        );
    }

    #[test]
    fn shard_escaping_the_directory_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("i.json");
        std::fs::write(&index, r#"{"weight_map": {"a": "../evil.safetensors"}}"#).unwrap();
        let error = format!("{:#}", safetensors_shards(&index).unwrap_err());
        assert!(error.contains("weight_map.a"), "{error}");
    }

    #[test]
    fn config_with_unknown_model_type_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.json");
        std::fs::write(&config, r#"{"model_type": "gpt_neox"}"#).unwrap();
        let error = format!("{:#}", read_config(&config).unwrap_err());
        assert!(
            error.contains("gpt_neox") && error.contains("model_type"),
            "{error}"
        );
        std::fs::write(&config, r#"{"model_type": "t5", "n_positions": 512}"#).unwrap();
        let summary = read_config(&config).unwrap();
        assert_eq!(summary.architecture, Architecture::T5);
        assert_eq!(summary.context_window, Some(512));
    }

    #[test]
    fn tokenizer_config_tokens_as_strings_or_objects() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer_config.json");
        std::fs::write(
            &path,
            r#"{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
               "add_bos_token": true}"#,
        )
        .unwrap();
        let config = read_tokenizer_config(&path).unwrap();
        assert_eq!(config.bos.as_deref(), Some("<s>"));
        assert_eq!(config.eos.as_deref(), Some("</s>"));
        assert_eq!(config.pad, None);
        assert_eq!(config.add_bos, Some(true));
        assert!(!config.no_bos && !config.no_eos);
        std::fs::write(&path, r#"{"bos_token": null, "add_bos_token": true}"#).unwrap();
        let config = read_tokenizer_config(&path).unwrap();
        assert_eq!(config.bos, None);
        assert!(config.no_bos && !config.no_eos);
    }
}

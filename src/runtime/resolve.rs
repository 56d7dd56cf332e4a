//! From a `--model` argument to verified files and everything needed to prompt the model.
//!
//! The argument is a model card name (files fetched and verified as the card says), a
//! `.gguf` file, or a directory with `config.json`, safetensors weights (one file, or
//! shards with `model.safetensors.index.json`) and `tokenizer.json`. Checkpoints without a
//! card get their architecture from the weights' own metadata and their chat template and
//! label conventions from what their chat template looks like.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::cache::combine_hashes;
use super::card::{Architecture, CardCatalog, FileRole, ModelCard, TokenizerSpec, WeightFormat};
use super::chat::ChatTemplate;
use super::checkpoint::{
    read_config, read_tokenizer_config, safetensors_shards, GgufHeader, TokenizerConfig,
};
use super::conventions::{Conventions, ModelKind};
use super::fetch::{fetch_card, FetchOptions, FetchedFile};
use super::gguf_tokenizer::tokenizer_from_gguf;
use super::tokenizer::TextTokenizer;

/// Context window assumed when neither card nor weights state one.
const FALLBACK_CONTEXT_WINDOW: usize = 2048;

/// Everything resolution needs: where files come from, and the known cards.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    pub fetch: FetchOptions,
    pub catalog: CardCatalog,
}

impl ResolveOptions {
    /// Cache, hub settings and user cards from the environment; downloads allowed.
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            fetch: FetchOptions::from_env()?,
            catalog: CardCatalog::from_env()?,
        })
    }
}

/// Where the tokenizer comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSource {
    /// A `tokenizer.json`, with its special tokens named.
    Json { path: PathBuf, spec: TokenizerSpec },
    /// Rebuilt from the metadata of this GGUF file.
    Gguf(PathBuf),
}

/// A model ready to load: verified files plus how to prompt it.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    /// Card name, or the file or directory name.
    pub name: String,
    /// The card, when resolved from one.
    pub card: Option<ModelCard>,
    pub architecture: Architecture,
    /// `Gguf` or `Safetensors`.
    pub format: WeightFormat,
    /// The GGUF file, or the safetensors files in shard order.
    pub weights: Vec<PathBuf>,
    /// `config.json` (safetensors checkpoints).
    pub config: Option<PathBuf>,
    pub tokenizer: TokenizerSource,
    /// sha256 of the weights; several files: sha256 of their hex hashes in order.
    pub fingerprint: String,
    pub chat_template: ChatTemplate,
    pub conventions: Conventions,
    pub context_window: usize,
    /// The card's files as fetched (empty for path models).
    pub files: Vec<FetchedFile>,
    /// What the user should know before trusting results: a card whose revision or
    /// hashes are not pinned, a checkpoint whose own chat template departs from ours.
    /// Told by the loader (`engine::load`) through its progress sink.
    pub notes: Vec<String>,
}

impl ResolvedModel {
    pub fn kind(&self) -> ModelKind {
        self.architecture.kind()
    }
}

/// Resolve a `--model` argument: a card name, a `.gguf` file, or a checkpoint directory.
/// A bare name that is a card is taken as the card even if a same-named path exists.
/// `--model` names no model: no card of that name, no such file or folder, or a card
/// with no weights. The user's to fix (the command line exits 2; the service answers
/// 4xx), unlike files that exist but cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UnknownModel(pub String);

pub fn resolve_model(spec: &str, options: &ResolveOptions) -> Result<ResolvedModel> {
    let looks_like_path = spec.contains(['/', '\\']) || spec.ends_with(".gguf");
    if !looks_like_path {
        if let Some(card) = options.catalog.get(spec) {
            return resolve_card(card, &options.fetch)
                .with_context(|| format!("cannot resolve model card '{spec}'"));
        }
    }
    let path = Path::new(spec);
    if path.is_file() {
        return resolve_gguf(path, &options.fetch);
    }
    if path.is_dir() {
        return resolve_dir(path, &options.fetch, Weights::Required);
    }
    if looks_like_path {
        return Err(UnknownModel(format!("model path {spec} does not exist")).into());
    }
    Err(UnknownModel(format!(
        "unknown model '{spec}': no model card of that name (known: {}) and no such file or directory",
        options.catalog.names().join(", ")
    ))
    .into())
}

/// Fetch and verify a card's files and describe the model.
pub fn resolve_card(card: &ModelCard, options: &FetchOptions) -> Result<ResolvedModel> {
    if card.format == WeightFormat::TokenizerOnly {
        return Err(UnknownModel(format!(
            "card '{}' ships only a tokenizer, not a model",
            card.name
        ))
        .into());
    }
    let files = fetch_card(card, options)?;
    let with_role = |role: FileRole| files.iter().filter(move |f| f.role == role);
    let weights: Vec<&FetchedFile> = with_role(FileRole::Weights).collect();
    if weights.is_empty() {
        bail!("card '{}' has no weight files", card.name);
    }
    let config = with_role(FileRole::Config).next().map(|f| f.path.clone());
    let tokenizer = match with_role(FileRole::Tokenizer).next() {
        Some(file) => TokenizerSource::Json {
            path: file.path.clone(),
            spec: card.tokenizer.clone().unwrap_or_else(|| {
                default_tokenizer_spec(card.architecture, None, FrontToken::Unknown, None)
            }),
        },
        None if card.format == WeightFormat::Gguf => TokenizerSource::Gguf(weights[0].path.clone()),
        None => bail!("card '{}' has no tokenizer file", card.name),
    };
    let chat_template = ChatTemplate::from_spec(&card.chat);
    let mut notes = Vec::new();
    if let Some(why) = card.unpinned() {
        notes.push(format!(
            "model card '{}' is not fully pinned: {why}",
            card.name
        ));
    }
    if card.format == WeightFormat::Gguf {
        let header = GgufHeader::read(&weights[0].path)?;
        let own = header
            .chat_template()
            .with_context(|| format!("in {}", weights[0].path.display()))?;
        notes.extend(template_notes(&chat_template, own, "its GGUF metadata"));
        let declared = header
            .architecture()
            .with_context(|| format!("in {}", weights[0].path.display()))?;
        if declared != card.architecture {
            bail!(
                "card '{}' says architecture {} but {} declares {declared}",
                card.name,
                card.architecture,
                weights[0].path.display()
            );
        }
    }
    if let Some(config) = &config {
        let declared = read_config(config)?.architecture;
        if declared != card.architecture {
            bail!(
                "card '{}' says architecture {} but {} declares {declared}",
                card.name,
                card.architecture,
                config.display()
            );
        }
    }
    Ok(ResolvedModel {
        name: card.name.clone(),
        card: Some(card.clone()),
        architecture: card.architecture,
        format: card.format,
        weights: weights.iter().map(|f| f.path.clone()).collect(),
        config,
        tokenizer,
        fingerprint: fingerprint(weights.iter().map(|f| f.sha256.as_str()).collect()),
        chat_template,
        conventions: card.prompt_conventions(),
        context_window: card.context_window,
        files,
        notes,
    })
}

/// A bare GGUF file: architecture, context length and chat template from its metadata.
fn resolve_gguf(path: &Path, options: &FetchOptions) -> Result<ResolvedModel> {
    let header = GgufHeader::read(path)?;
    let architecture = header
        .architecture()
        .with_context(|| format!("in {}", path.display()))?;
    let own_template = header
        .chat_template()
        .with_context(|| format!("in {}", path.display()))?
        .map(str::to_string);
    let chat_template = own_template
        .as_deref()
        .map(ChatTemplate::detect)
        .unwrap_or(ChatTemplate::None);
    let context_window = header
        .context_length()
        .with_context(|| format!("in {}", path.display()))?
        .unwrap_or(FALLBACK_CONTEXT_WINDOW);
    let hash = options.cache.sha256(path, options.progress)?;
    Ok(ResolvedModel {
        name: file_name(path),
        card: None,
        architecture,
        format: WeightFormat::Gguf,
        weights: vec![path.to_path_buf()],
        config: None,
        tokenizer: TokenizerSource::Gguf(path.to_path_buf()),
        fingerprint: hash,
        conventions: conventions_for(&chat_template),
        notes: template_notes(&chat_template, own_template.as_deref(), "its GGUF metadata"),
        chat_template,
        context_window,
        files: Vec::new(),
    })
}

/// A checkpoint directory: config.json + safetensors + tokenizer.json (or one GGUF file).
/// Whether a checkpoint directory must hold its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weights {
    Required,
    /// The tokenizer, template and configuration are wanted, not the weights (a model
    /// served by another program).
    Optional,
}

/// Resolve what a model served elsewhere is tokenised with: a card name (its files are
/// fetched), a `.gguf` file, or a checkpoint directory whose weights may be absent
/// (`config.json`, `tokenizer.json`, and `tokenizer_config.json` or `chat_template.jinja`
/// for the chat template, as downloaded without the weights).
pub fn resolve_tokenizer(spec: &str, options: &ResolveOptions) -> Result<ResolvedModel> {
    let path = Path::new(spec);
    if path.is_dir() {
        return resolve_dir(path, &options.fetch, Weights::Optional);
    }
    if path.is_file() && !spec.ends_with(".gguf") {
        bail!(
            "{spec}: give the directory that holds tokenizer.json (with config.json, and \
             tokenizer_config.json or chat_template.jinja for the chat template), a .gguf \
             file or a model card, not a single file"
        );
    }
    resolve_model(spec, options)
}

fn resolve_dir(dir: &Path, options: &FetchOptions, need: Weights) -> Result<ResolvedModel> {
    let config = dir.join("config.json");
    if !config.is_file() {
        if let Some(gguf) = single_gguf(dir)? {
            return resolve_gguf(&gguf, options);
        }
        bail!(
            "{} has no config.json (a checkpoint directory needs config.json, safetensors \
             weights and tokenizer.json, or a single .gguf file)",
            dir.display()
        );
    }
    let summary = read_config(&config)?;
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    let weights = if single.is_file() {
        vec![single]
    } else if index.is_file() {
        let mut shards = Vec::new();
        for shard in safetensors_shards(&index)? {
            let path = dir.join(&shard);
            if !path.is_file() {
                bail!(
                    "{} names shard {shard}, which is missing from {}",
                    index.display(),
                    dir.display()
                );
            }
            shards.push(path);
        }
        shards
    } else if need == Weights::Optional {
        Vec::new()
    } else {
        bail!(
            "{} has neither model.safetensors nor model.safetensors.index.json",
            dir.display()
        );
    };
    let tokenizer_json = dir.join("tokenizer.json");
    if !tokenizer_json.is_file() {
        bail!("{} has no tokenizer.json", dir.display());
    }
    let tokenizer_config_path = dir.join("tokenizer_config.json");
    let tokenizer_config = if tokenizer_config_path.is_file() {
        Some(read_tokenizer_config(&tokenizer_config_path)?)
    } else {
        None
    };
    // Checkpoints saved by transformers 4.43 and later keep the template in its own file,
    // chat_template.jinja, beside (or instead of) tokenizer_config.json's field.
    let (shipped_template, template_file) = shipped_chat_template(dir, tokenizer_config.as_ref())?;
    let chat_template = shipped_template
        .as_deref()
        .map(ChatTemplate::detect)
        .unwrap_or(ChatTemplate::None);
    // The post-processor decides unless tokenizer_config.json says (see the function).
    let tokenizer_fields = read_json(&tokenizer_json)?;
    let front = match &tokenizer_config {
        Some(config) if config.add_bos.is_some() => FrontToken::Unknown,
        _ => front_of(&tokenizer_fields["post_processor"]),
    };
    let known = |token: &str| in_vocabulary(&tokenizer_fields, token);
    let spec = default_tokenizer_spec(
        summary.architecture,
        tokenizer_config.as_ref(),
        front,
        Some(&known),
    );
    let mut hashes = Vec::new();
    for path in &weights {
        hashes.push(options.cache.sha256(path, options.progress)?);
    }
    let context_window = match summary.architecture {
        Architecture::T5 => summary.context_window.unwrap_or(512),
        _ => summary.context_window.unwrap_or(FALLBACK_CONTEXT_WINDOW),
    };
    Ok(ResolvedModel {
        name: file_name(dir),
        card: None,
        architecture: summary.architecture,
        format: WeightFormat::Safetensors,
        weights,
        config: Some(config),
        tokenizer: TokenizerSource::Json {
            path: tokenizer_json,
            spec,
        },
        fingerprint: fingerprint(hashes.iter().map(String::as_str).collect()),
        conventions: conventions_for(&chat_template),
        notes: template_notes(&chat_template, shipped_template.as_deref(), template_file),
        chat_template,
        context_window,
        files: Vec::new(),
    })
}

/// A note when a checkpoint's own chat template (found in `place`) visibly departs from
/// the one we render its prompts with ([`ChatTemplate::differences`]).
/// The chat template a checkpoint directory ships, and the file it came from:
/// `tokenizer_config.json`'s `chat_template` field, else a `chat_template.jinja` file.
fn shipped_chat_template(
    dir: &Path,
    tokenizer_config: Option<&TokenizerConfig>,
) -> Result<(Option<String>, &'static str)> {
    if let Some(template) = tokenizer_config.and_then(|c| c.chat_template.clone()) {
        return Ok((Some(template), "tokenizer_config.json"));
    }
    let jinja = dir.join("chat_template.jinja");
    if !jinja.is_file() {
        return Ok((None, "tokenizer_config.json"));
    }
    let template = std::fs::read_to_string(&jinja)
        .with_context(|| format!("cannot read {}", jinja.display()))?;
    Ok((Some(template), "chat_template.jinja"))
}

fn template_notes(ours: &ChatTemplate, own: Option<&str>, place: &str) -> Vec<String> {
    let Some(own) = own else {
        return Vec::new();
    };
    let found = ours.differences(own);
    if found.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "the checkpoint's own chat template ({place}) differs from the '{}' template \
         nlg-judge renders prompts with: {}",
        ours.family(),
        found.join("; ")
    )]
}

/// The only `.gguf` file in `dir`, if there is exactly one.
fn single_gguf(dir: &Path) -> Result<Option<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "gguf") {
            found.push(path);
        }
    }
    Ok((found.len() == 1).then(|| found.remove(0)))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn fingerprint(hashes: Vec<&str>) -> String {
    match hashes.as_slice() {
        [single] => single.to_string(),
        several => combine_hashes(several.iter().copied()),
    }
}

/// Special tokens for a `tokenizer.json` without a card: T5's fixed ones; for decoder-only
/// models those of `tokenizer_config.json` (`null` there: none), else the family's usual
/// ones (Llama: `<s>`, `</s>`; Gemma: `<bos>`, `<eos>`; Qwen: `<|endoftext|>`), kept only
/// where `known` (the vocabulary, when there is one to ask) has them. Whether a token is
/// added in front is what transformers (5.x) does: `add_bos_token` where
/// tokenizer_config.json says, else what `tokenizer.json`'s post-processor puts in front
/// (`front`; checked with transformers 5.24 for no config, a generic class and
/// `LlamaTokenizer` alike), else, for a post-processor this reading does not know, the
/// family's habit (Llama and Gemma add one, Qwen none); and never a token the checkpoint
/// does not have (transformers 5.24, given a bare directory whose vocabulary lacks `<s>`,
/// or `"bos_token": null` with `"add_bos_token": true`, adds nothing).
fn default_tokenizer_spec(
    architecture: Architecture,
    config: Option<&super::checkpoint::TokenizerConfig>,
    front: FrontToken,
    known: Option<&dyn Fn(&str) -> bool>,
) -> TokenizerSpec {
    match architecture {
        Architecture::T5 => TextTokenizer::t5_spec(),
        // BERT's tokenizer.json adds [CLS] and [SEP] itself.
        Architecture::Bert => TokenizerSpec::default(),
        decoder => {
            let (family_bos, family_eos) = match decoder {
                Architecture::Qwen2 | Architecture::Qwen3 => {
                    (None, Some("<|endoftext|>".to_string()))
                }
                Architecture::Gemma2 | Architecture::Gemma3 => {
                    (Some("<bos>".to_string()), Some("<eos>".to_string()))
                }
                _ => (Some("<s>".to_string()), Some("</s>".to_string())),
            };
            let family_adds = family_bos.is_some();
            let guess = |token: Option<String>| {
                token.filter(|token| known.is_none_or(|known| known(token.as_str())))
            };
            let said = config.and_then(|c| c.add_bos);
            let (bos, eos, pad) = match config {
                Some(config) => (
                    if config.no_bos {
                        None
                    } else {
                        config.bos.clone().or_else(|| guess(family_bos))
                    },
                    if config.no_eos {
                        None
                    } else {
                        config.eos.clone().or_else(|| guess(family_eos))
                    },
                    config.pad.clone(),
                ),
                None => (guess(family_bos), guess(family_eos), None),
            };
            let (add_bos, bos) = match (said, front) {
                (Some(add), _) => (add, bos),
                (None, FrontToken::Special(token)) => (true, Some(token)),
                (None, FrontToken::Nothing) => (false, bos),
                (None, FrontToken::Unknown) => (family_adds, bos),
            };
            TokenizerSpec {
                add_bos: add_bos && bos.is_some(),
                bos,
                eos,
                pad,
                append_eos: config.and_then(|c| c.add_eos).unwrap_or(false),
            }
        }
    }
}

/// What a `tokenizer.json`'s post-processor puts in front of a single sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FrontToken {
    /// This special token (a `TemplateProcessing` that opens with one).
    Special(String),
    /// Nothing (no post-processor, or one that adds nothing in front).
    Nothing,
    /// A post-processor this reading does not know: the family's habit decides.
    Unknown,
}

/// A `tokenizer.json`, parsed.
fn read_json(tokenizer_json: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(tokenizer_json)
        .with_context(|| format!("cannot read {}", tokenizer_json.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", tokenizer_json.display()))
}

/// Whether a parsed `tokenizer.json` has `token`: among its added tokens or in its model's
/// vocabulary (a map for BPE, WordPiece and WordLevel, a list of pieces for Unigram); true
/// for a vocabulary this reading does not know, so that loading decides.
fn in_vocabulary(tokenizer: &serde_json::Value, token: &str) -> bool {
    let added = tokenizer["added_tokens"]
        .as_array()
        .is_some_and(|tokens| tokens.iter().any(|t| t["content"] == token));
    added
        || match &tokenizer["model"]["vocab"] {
            serde_json::Value::Object(vocab) => vocab.contains_key(token),
            serde_json::Value::Array(pieces) => pieces.iter().any(|p| p[0] == token),
            _ => true,
        }
}

fn front_of(processor: &serde_json::Value) -> FrontToken {
    if processor.is_null() {
        return FrontToken::Nothing;
    }
    match processor["type"].as_str() {
        Some("TemplateProcessing") => match processor["single"].get(0) {
            Some(first) => match first["SpecialToken"]["id"].as_str() {
                Some(token) => FrontToken::Special(token.to_string()),
                None => FrontToken::Nothing,
            },
            None => FrontToken::Nothing,
        },
        Some("ByteLevel") => FrontToken::Nothing,
        Some("Sequence") => {
            let steps = processor["processors"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            steps
                .iter()
                .map(front_of)
                .find(|front| *front != FrontToken::Nothing)
                .unwrap_or(FrontToken::Nothing)
        }
        _ => FrontToken::Unknown,
    }
}

/// Conventions for a checkpoint without a card, from its chat template: ChatML, Llama 3,
/// Gemma and Phi-3/4 models are asked like the SmolLM2/Qwen2 cards (the assistant turn
/// opens on its own line), `[INST]` models (Llama-2, Mistral) like the Llama-2 cards,
/// others like FlanT5 (plain text, labels " A"/" B" after the item noun).
pub fn conventions_for(template: &ChatTemplate) -> Conventions {
    match template {
        ChatTemplate::ChatMl { .. }
        | ChatTemplate::Llama3 { .. }
        | ChatTemplate::Gemma { .. }
        | ChatTemplate::Phi3 { .. }
        | ChatTemplate::Phi4 { .. } => Conventions {
            chat: true,
            ..Conventions::default()
        },
        ChatTemplate::Llama2 { .. } | ChatTemplate::Mistral { .. } => Conventions {
            pairwise_suffix: "\n\nAnswer:".to_string(),
            answer_prefix: " {item}".to_string(),
            label_a: "A".to_string(),
            label_b: "B".to_string(),
            score_suffix: "\n\nScore:".to_string(),
            chat: true,
            rubric_protocol: None,
        },
        ChatTemplate::None => Conventions::default(),
    }
}

/// The model's tokenizer, with its special tokens.
pub fn load_tokenizer(model: &ResolvedModel) -> Result<TextTokenizer> {
    match &model.tokenizer {
        TokenizerSource::Json { path, spec } => {
            if model.architecture == Architecture::T5 && spec == &TextTokenizer::t5_spec() {
                TextTokenizer::t5_from_json_file(path)
            } else {
                TextTokenizer::from_json_file_with_spec(path, spec)
            }
        }
        TokenizerSource::Gguf(path) => tokenizer_from_gguf(path),
    }
}

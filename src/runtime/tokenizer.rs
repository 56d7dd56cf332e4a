//! The text tokeniser every model uses: a `tokenizers::Tokenizer` plus the special ids and
//! the rules (beginning-of-sequence, end-of-sequence) the checkpoint expects.
//!
//! Built from a checkpoint's `tokenizer.json` or rebuilt from GGUF metadata (see
//! `gguf_tokenizer`). Padding and truncation are always off: batching is the engine's job.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::card::TokenizerSpec;

/// Special ids and encoding rules of a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    /// Prepend `bos` to every prompt (Llama-2: yes; SmolLM2, Qwen2: no).
    pub add_bos: bool,
    /// Append `eos` to every prompt (T5 encoder inputs: yes).
    pub append_eos: bool,
}

impl SpecialTokens {
    /// The token an encoder-decoder's decoder starts from: T5 starts from `pad`.
    pub fn decoder_start(&self) -> Option<u32> {
        self.pad
    }
}

/// A tokeniser with its special tokens.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    special: SpecialTokens,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("special", &self.special)
            .finish()
    }
}

impl TextTokenizer {
    /// Wrap a tokeniser; padding and truncation are switched off.
    pub fn new(mut inner: tokenizers::Tokenizer, special: SpecialTokens) -> Result<Self> {
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| anyhow!("cannot switch off truncation: {e}"))?;
        Ok(Self { inner, special })
    }

    /// Load a `tokenizer.json`; padding and truncation are switched off.
    pub fn from_json_file(path: &Path, special: SpecialTokens) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("cannot read tokenizer {}", path.display()))?;
        Self::new(inner, special)
    }

    /// Load a `tokenizer.json` whose special tokens are named as strings (a model card's
    /// `[tokenizer]` table); a named token missing from the vocabulary is an error.
    pub fn from_json_file_with_spec(path: &Path, spec: &TokenizerSpec) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("cannot read tokenizer {}", path.display()))?;
        let lookup = |field: &str, token: &Option<String>| -> Result<Option<u32>> {
            match token {
                None => Ok(None),
                Some(token) => inner.token_to_id(token).map(Some).with_context(|| {
                    format!(
                        "{} token '{token}' is not in the vocabulary of {}",
                        field,
                        path.display()
                    )
                }),
            }
        };
        let special = SpecialTokens {
            bos: lookup("bos", &spec.bos)?,
            eos: lookup("eos", &spec.eos)?,
            pad: lookup("pad", &spec.pad)?,
            add_bos: spec.add_bos,
            append_eos: spec.append_eos,
        };
        Self::new(inner, special)
    }

    /// The special tokens of T5 checkpoints: `</s>` ends every encoder input, `<pad>`
    /// pads and starts the decoder.
    pub fn t5_spec() -> TokenizerSpec {
        TokenizerSpec {
            bos: None,
            eos: Some("</s>".to_string()),
            pad: Some("<pad>".to_string()),
            add_bos: false,
            append_eos: true,
        }
    }

    /// Load a T5 `tokenizer.json` (no model card needed): eos `</s>` = 1 appended to every
    /// prompt, pad `<pad>` = 0, decoder start = pad, no bos.
    pub fn t5_from_json_file(path: &Path) -> Result<Self> {
        let tokenizer = Self::from_json_file_with_spec(path, &Self::t5_spec())?;
        let special = tokenizer.special();
        if special.eos != Some(1) || special.pad != Some(0) {
            bail!(
                "{} is not a T5 tokenizer: expected </s> = 1 and <pad> = 0, found {:?} and {:?}",
                path.display(),
                special.eos,
                special.pad
            );
        }
        Ok(tokenizer)
    }

    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// The underlying `tokenizers` object.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Token ids of `text` with no bos/eos added; special tags written in the text
    /// (`<|im_start|>`) are recognised as their tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow!("cannot tokenise text: {e}"))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Token ids of a whole prompt: `encode` plus bos/eos as the checkpoint expects.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if self.special.add_bos {
            ids.push(
                self.special
                    .bos
                    .ok_or_else(|| anyhow!("tokeniser must add bos but has no bos token"))?,
            );
        }
        ids.extend(self.encode(text)?);
        if self.special.append_eos {
            ids.push(
                self.special
                    .eos
                    .ok_or_else(|| anyhow!("tokeniser must append eos but has no eos token"))?,
            );
        }
        Ok(ids)
    }

    /// Text of `ids`; special tokens dropped when `skip_special`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| anyhow!("cannot decode token ids: {e}"))
    }

    /// The id of a token written as in the vocabulary (`"<|im_start|>"`, `"ĠA"`).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Fail unless `id` is inside the vocabulary.
    pub fn check_id(&self, id: u32) -> Result<()> {
        if (id as usize) >= self.vocab_size() {
            bail!(
                "token id {id} is outside the vocabulary ({} tokens)",
                self.vocab_size()
            );
        }
        Ok(())
    }
}

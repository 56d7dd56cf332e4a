//! Rebuilding a `tokenizers::Tokenizer` from GGUF metadata, for checkpoints that ship no
//! `tokenizer.json`.
//!
//! A GGUF stores the vocabulary (`tokenizer.ggml.tokens`), BPE merges, token types and
//! special ids, and names the pre-tokenizer (`tokenizer.ggml.pre`) the merges were learned
//! with. We support byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the
//! pre-tokenizers of our models:
//! - `smollm`: every digit on its own, then GPT-2's byte-level split (SmolLM2);
//! - `qwen2`: NFC normalisation, Qwen2's split pattern, then byte-level mapping (Qwen2).
//!
//! Tokens typed control (3) become special added tokens (`<|im_start|>`), user-defined
//! (4) plain added tokens; both are matched whole in the text.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file::Value;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use super::checkpoint::GgufHeader;
use super::tokenizer::{SpecialTokens, TextTokenizer};

/// Qwen2's pre-tokenizer split pattern (from its tokenizer.json): contractions, letter
/// runs with one leading non-letter, single digits, punctuation runs, newlines, spaces.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Pre-tokenizers we can rebuild, by their `tokenizer.ggml.pre` name.
pub const SUPPORTED_PRE_TOKENIZERS: [&str; 2] = ["smollm", "qwen2"];

/// GGUF token types (llama.cpp's numbering).
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Read `path`'s metadata and rebuild its tokenizer.
pub fn tokenizer_from_gguf(path: &Path) -> Result<TextTokenizer> {
    let header = GgufHeader::read(path)?;
    tokenizer_from_header(&header).with_context(|| {
        format!(
            "cannot rebuild the tokenizer from the metadata of {}",
            path.display()
        )
    })
}

/// Rebuild the tokenizer described by a GGUF header.
pub fn tokenizer_from_header(header: &GgufHeader) -> Result<TextTokenizer> {
    let model = header
        .string("tokenizer.ggml.model")?
        .context("no 'tokenizer.ggml.model' in the metadata")?;
    if model != "gpt2" {
        bail!("'tokenizer.ggml.model' is '{model}': only byte-level BPE ('gpt2') is supported");
    }
    let pre = header
        .string("tokenizer.ggml.pre")?
        .context("no 'tokenizer.ggml.pre' in the metadata")?;
    let tokens = string_array(header, "tokenizer.ggml.tokens")?
        .context("no 'tokenizer.ggml.tokens' in the metadata")?;
    let merges = string_array(header, "tokenizer.ggml.merges")?
        .context("no 'tokenizer.ggml.merges' in the metadata")?;
    let token_types = int_array(header, "tokenizer.ggml.token_type")?.unwrap_or_default();
    if !token_types.is_empty() && token_types.len() != tokens.len() {
        bail!(
            "'tokenizer.ggml.token_type' has {} entries for {} tokens",
            token_types.len(),
            tokens.len()
        );
    }

    let alphabet = byte_level_alphabet();
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (respell(token, &alphabet), id as u32))
        .collect();
    let merges = merges
        .iter()
        .enumerate()
        .map(|(index, merge)| {
            merge
                .split_once(' ')
                .map(|(left, right)| (left.to_string(), right.to_string()))
                .with_context(|| {
                    format!("'tokenizer.ggml.merges[{index}]' ('{merge}') is not two tokens")
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| anyhow!("cannot build the BPE model: {e}"))?;

    let mut tokenizer = Tokenizer::new(bpe);
    match pre {
        "smollm" => {
            let steps: Vec<PreTokenizerWrapper> = vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ];
            tokenizer.with_pre_tokenizer(Some(Sequence::new(steps)));
        }
        "qwen2" => {
            tokenizer
                .with_normalizer(Some(NFC))
                .map_err(|e| anyhow!("cannot set the normaliser: {e}"))?;
            let split = Split::new(
                SplitPattern::Regex(QWEN2_SPLIT.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| anyhow!("cannot compile Qwen2's split pattern: {e}"))?;
            let steps: Vec<PreTokenizerWrapper> =
                vec![split.into(), ByteLevel::new(false, false, false).into()];
            tokenizer.with_pre_tokenizer(Some(Sequence::new(steps)));
        }
        other => bail!(
            "'tokenizer.ggml.pre' is '{other}': unsupported pre-tokenizer (supported: {})",
            SUPPORTED_PRE_TOKENIZERS.join(", ")
        ),
    }
    tokenizer.with_decoder(Some(ByteLevel::default()));

    let typed = |wanted: i64| {
        tokens
            .iter()
            .zip(&token_types)
            .filter(move |(_, kind)| **kind == wanted)
            .map(|(token, _)| token)
    };
    // A control token outside the byte-level alphabet cannot occur in text the model
    // read; llama.cpp sometimes mislabels such tokens, so they are not added.
    let control: Vec<AddedToken> = typed(TOKEN_TYPE_CONTROL)
        .filter(|token| token.chars().all(|c| alphabet.contains(&c)))
        .map(|token| AddedToken::from(token.as_str(), true).normalized(false))
        .collect();
    tokenizer
        .add_special_tokens(control)
        .map_err(|e| anyhow!("cannot add control tokens: {e}"))?;
    let user_defined: Vec<AddedToken> = typed(TOKEN_TYPE_USER_DEFINED)
        .map(|token| AddedToken::from(token.as_str(), false).normalized(false))
        .collect();
    tokenizer
        .add_tokens(user_defined)
        .map_err(|e| anyhow!("cannot add user-defined tokens: {e}"))?;

    let id = |key: &str| -> Result<Option<u32>> {
        match header.unsigned(key)? {
            None => Ok(None),
            Some(id) if (id as usize) < tokens.len() => Ok(Some(id as u32)),
            Some(id) => bail!("'{key}' is {id}, outside the {} tokens", tokens.len()),
        }
    };
    let special = SpecialTokens {
        bos: id("tokenizer.ggml.bos_token_id")?,
        eos: id("tokenizer.ggml.eos_token_id")?,
        pad: id("tokenizer.ggml.padding_token_id")?,
        add_bos: header
            .boolean("tokenizer.ggml.add_bos_token")?
            .unwrap_or(false),
        append_eos: header
            .boolean("tokenizer.ggml.add_eos_token")?
            .unwrap_or(false),
    };
    TextTokenizer::new(tokenizer, special)
}

fn string_array<'a>(header: &'a GgufHeader, key: &str) -> Result<Option<Vec<&'a String>>> {
    let Some(value) = header.metadata().get(key) else {
        return Ok(None);
    };
    let items = value
        .to_vec()
        .map_err(|e| anyhow!("'{key}' is not an array: {e}"))?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            item.to_string()
                .map_err(|e| anyhow!("'{key}[{index}]' is not a string: {e}"))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn int_array(header: &GgufHeader, key: &str) -> Result<Option<Vec<i64>>> {
    let Some(value) = header.metadata().get(key) else {
        return Ok(None);
    };
    let items = value
        .to_vec()
        .map_err(|e| anyhow!("'{key}' is not an array: {e}"))?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| match item {
            Value::I32(v) => Ok(*v as i64),
            Value::U32(v) => Ok(*v as i64),
            Value::I8(v) => Ok(*v as i64),
            Value::U8(v) => Ok(*v as i64),
            Value::I16(v) => Ok(*v as i64),
            Value::U16(v) => Ok(*v as i64),
            Value::I64(v) => Ok(*v),
            _ => bail!("'{key}[{index}]' is not an integer"),
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The 256 characters GPT-2's byte-level mapping writes bytes as: printable Latin-1
/// bytes stand for themselves, the other 68 bytes are moved to U+0100 onwards.
fn byte_level_alphabet() -> HashSet<char> {
    byte_to_char().into_iter().collect()
}

fn byte_to_char() -> Vec<char> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut shifted = 0;
    (0u32..256)
        .map(|byte| {
            if printable(byte) {
                char::from_u32(byte).unwrap_or('?')
            } else {
                shifted += 1;
                char::from_u32(255 + shifted).unwrap_or('?')
            }
        })
        .collect()
}

/// A vocabulary entry written outside the byte-level alphabet (a raw space, say) is
/// spelled from its UTF-8 bytes, as byte-level BPE would see it.
fn respell(token: &str, alphabet: &HashSet<char>) -> String {
    if token.chars().all(|c| alphabet.contains(&c)) {
        return token.to_string();
    }
    let table = byte_to_char();
    token.bytes().map(|b| table[b as usize]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn byte_level_alphabet_matches_gpt2() {
        let table = byte_to_char();
        assert_eq!(table.len(), 256);
        assert_eq!(byte_level_alphabet().len(), 256);
        // Space is 'Ġ' (U+0120), newline 'Ċ' (U+010A), byte 0 is U+0100: GPT-2's mapping.
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
        assert_eq!(table[0], '\u{100}');
        assert_eq!(table[b'A' as usize], 'A');
    }

    /// A GGUF holding only tokenizer metadata: tokens a, b, ab, Ġ, control <|x|>.
    fn tiny_gguf(dir: &Path, model: &str, pre: &str) -> std::path::PathBuf {
        use candle_core::quantized::gguf_file::write;
        let strings = |items: &[&str]| {
            Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
        };
        let metadata = [
            ("general.architecture", Value::String("llama".into())),
            ("tokenizer.ggml.model", Value::String(model.into())),
            ("tokenizer.ggml.pre", Value::String(pre.into())),
            (
                "tokenizer.ggml.tokens",
                strings(&["a", "b", "ab", "Ġ", "<|x|>"]),
            ),
            ("tokenizer.ggml.merges", strings(&["a b"])),
            (
                "tokenizer.ggml.token_type",
                Value::Array([1, 1, 1, 1, 3].into_iter().map(Value::I32).collect()),
            ),
            ("tokenizer.ggml.bos_token_id", Value::U32(4)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        ];
        let refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
        let path = dir.join("tiny.gguf");
        let mut file = std::fs::File::create(&path).unwrap();
        write(&mut file, &refs, &[]).unwrap();
        path
    }

    #[test]
    fn tiny_vocabulary_with_control_token() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = tokenizer_from_gguf(&tiny_gguf(dir.path(), "gpt2", "smollm")).unwrap();
        assert_eq!(tokenizer.encode("ab<|x|>a b").unwrap(), vec![2, 4, 0, 3, 1]);
        assert_eq!(tokenizer.encode_prompt("ab").unwrap(), vec![4, 2]);
        assert_eq!(tokenizer.special().eos, None);
        assert_eq!(tokenizer.decode(&[2, 4, 0, 3, 1], true).unwrap(), "aba b");
    }

    #[test]
    fn unknown_pre_tokenizer_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = tiny_gguf(dir.path(), "gpt2", "tekken");
        let error = format!("{:#}", tokenizer_from_gguf(&path).unwrap_err());
        assert!(
            error.contains("tekken") && error.contains("smollm, qwen2"),
            "{error}"
        );
        assert!(error.contains("tiny.gguf"), "{error}");
    }

    #[test]
    fn sentencepiece_gguf_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = tiny_gguf(dir.path(), "llama", "default");
        let error = format!("{:#}", tokenizer_from_gguf(&path).unwrap_err());
        assert!(
            error.contains("'tokenizer.ggml.model' is 'llama'"),
            "{error}"
        );
    }

    #[test]
    fn respelling() {
        let alphabet = byte_level_alphabet();
        assert_eq!(respell("ĠA", &alphabet), "ĠA");
        assert_eq!(respell(" A", &alphabet), "ĠA");
    }
}

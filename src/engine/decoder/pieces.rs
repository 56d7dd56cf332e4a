//! The bytes each token stands for, for reporting tokens one by one (completion
//! log-probs). Decoding a single token as text loses the bytes of a partial UTF-8
//! character, and a SentencePiece decoder strips a lone token's leading space; the
//! vocabulary entry itself keeps both:
//!
//! - byte-level BPE (GPT-2 style: SmolLM2, Qwen2, Llama 3) spells every byte as one
//!   printable character (`Ġ` for a space); the spelling is undone character by
//!   character;
//! - SentencePiece vocabularies write a space as `▁` and raw bytes as `<0xNN>`.
//!
//! Added tokens (`<|im_end|>`) are their own text in both.

use std::collections::HashMap;

use tokenizers::DecoderWrapper;

use crate::engine::completion::TokenPiece;
use crate::runtime::TextTokenizer;

/// Token id -> bytes, remembered per id.
pub struct TokenPieces<'t> {
    tokenizer: &'t TextTokenizer,
    /// Character -> byte of the byte-level alphabet, when the tokeniser is byte-level.
    byte_level: Option<HashMap<char, u8>>,
    known: HashMap<u32, Vec<u8>>,
}

impl<'t> TokenPieces<'t> {
    pub fn new(tokenizer: &'t TextTokenizer) -> Self {
        let byte_level = matches!(
            tokenizer.inner().get_decoder(),
            Some(DecoderWrapper::ByteLevel(_))
        )
        .then(byte_level_chars);
        Self {
            tokenizer,
            byte_level,
            known: HashMap::new(),
        }
    }

    /// The token `id` with its bytes.
    pub fn piece(&mut self, id: u32) -> TokenPiece {
        let bytes = match self.known.get(&id) {
            Some(bytes) => bytes.clone(),
            None => {
                let bytes = self.bytes_of(id);
                self.known.insert(id, bytes.clone());
                bytes
            }
        };
        TokenPiece { id, bytes }
    }

    fn bytes_of(&self, id: u32) -> Vec<u8> {
        let Some(spelled) = self.tokenizer.inner().id_to_token(id) else {
            return Vec::new();
        };
        if let Some(alphabet) = &self.byte_level {
            let mut bytes = Vec::with_capacity(spelled.len());
            for c in spelled.chars() {
                match alphabet.get(&c) {
                    Some(&byte) => bytes.push(byte),
                    None => {
                        let mut buffer = [0u8; 4];
                        bytes.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                    }
                }
            }
            return bytes;
        }
        if let Some(hex) = spelled
            .strip_prefix("<0x")
            .and_then(|rest| rest.strip_suffix('>'))
        {
            if let Ok(byte) = u8::from_str_radix(hex, 16) {
                return vec![byte];
            }
        }
        spelled.replace('\u{2581}', " ").into_bytes()
    }
}

/// GPT-2's byte-level alphabet, character -> byte: printable Latin-1 bytes stand for
/// themselves, the other bytes for characters from U+0100 on, in byte order.
fn byte_level_chars() -> HashMap<char, u8> {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
    let mut map = HashMap::with_capacity(256);
    let mut shifted = 0u32;
    for byte in 0..=255u8 {
        let c = if printable(byte) {
            char::from(byte)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).expect("a valid character")
        };
        map.insert(c, byte);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_level_alphabet_spells_space_and_newline_as_gpt2_does() {
        let map = byte_level_chars();
        assert_eq!(map.len(), 256);
        assert_eq!(map[&'\u{120}'], b' ');
        assert_eq!(map[&'\u{10a}'], b'\n');
        assert_eq!(map[&'A'], b'A');
        assert_eq!(map[&'\u{100}'], 0);
    }
}

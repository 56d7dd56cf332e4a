//! Tokenizers of the real checkpoints: rebuilt from GGUF metadata (SmolLM2, Qwen2) and
//! loaded from a T5 tokenizer.json, checked against Hugging Face transformers' ids
//! (tests/fixtures/tokenizer/reference.json, made by make_reference.py beside it).

use crate::common;

use nlg_judge::runtime::gguf_tokenizer::tokenizer_from_gguf;
use nlg_judge::runtime::{ChatTemplate, TextTokenizer};
use serde_json::Value;

const SMOLLM2: &str = "smollm2-135m-instruct";
const QWEN: &str = "qwen2.5-coder-0.5b-instruct";

fn reference() -> Value {
    let text = include_str!("../fixtures/tokenizer/reference.json");
    serde_json::from_str(text).expect("valid reference.json")
}

fn gguf_tokenizer(card: &str) -> TextTokenizer {
    tokenizer_from_gguf(&common::card_file(card)).expect("tokenizer from GGUF metadata")
}

/// Every reference string must encode to exactly transformers' ids (no tolerance: ids are
/// exact), and decode back to the same text.
fn check_against_reference(card: &str, key: &str) {
    let tokenizer = gguf_tokenizer(card);
    let reference = reference();
    let cases = reference["models"][key]["cases"]
        .as_array()
        .expect("cases array");
    assert!(cases.len() >= 30);
    let mut mismatches = Vec::new();
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let expected: Vec<u32> = case["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|id| id.as_u64().expect("id") as u32)
            .collect();
        let ids = tokenizer.encode(text).expect("encode");
        if ids != expected {
            mismatches.push(format!("{text:?}: ours {ids:?}, transformers {expected:?}"));
        }
        assert_eq!(
            tokenizer.decode(&ids, false).expect("decode"),
            case["decoded"].as_str().expect("decoded"),
            "decode of {text:?}"
        );
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn smollm2_matches_transformers() {
    check_against_reference(SMOLLM2, "smollm2");
}

#[test]
fn qwen2_matches_transformers() {
    check_against_reference(QWEN, "qwen2");
}

#[test]
fn smollm2_known_ids_and_special_tokens() {
    let tokenizer = gguf_tokenizer(SMOLLM2);
    assert_eq!(tokenizer.encode(" A").unwrap(), vec![330]);
    assert_eq!(tokenizer.encode(" B").unwrap(), vec![389]);
    assert_eq!(tokenizer.encode("<|im_start|>").unwrap(), vec![1]);
    assert_eq!(tokenizer.token_id("<|im_end|>"), Some(2));
    let special = tokenizer.special();
    assert_eq!(special.bos, Some(1));
    assert_eq!(special.eos, Some(2));
    assert!(!special.add_bos);
    assert!(!special.append_eos);
    assert_eq!(tokenizer.vocab_size(), 49152);
    // Digits are split one by one (the `smollm` pre-tokenizer).
    let ids = tokenizer.encode("2024").unwrap();
    assert_eq!(ids.len(), 4);
    // Special tokens are dropped when asked.
    let ids = tokenizer.encode("<|im_start|>user").unwrap();
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "user");
}

#[test]
fn qwen2_special_tokens() {
    let tokenizer = gguf_tokenizer(QWEN);
    let special = tokenizer.special();
    assert_eq!(special.eos, tokenizer.token_id("<|im_end|>"));
    assert_eq!(special.pad, tokenizer.token_id("<|endoftext|>"));
    assert!(!special.add_bos);
    assert_eq!(tokenizer.encode("<|im_start|>").unwrap().len(), 1);
    // Qwen2 splits digits one by one too.
    assert_eq!(tokenizer.encode("12345").unwrap().len(), 5);
    // NFC: a decomposed "é" encodes like the precomposed one.
    assert_eq!(
        tokenizer.encode("cafe\u{301}").unwrap(),
        tokenizer.encode("caf\u{e9}").unwrap()
    );
}

#[test]
fn round_trips() {
    let texts = [
        "plain ASCII, with punctuation!",
        "digits 0123456789 and 3.14",
        "accents: àéîõü ÀÉÎÕÜ ç ñ ß",
        "CJK: 漢字かなカナ한글",
        "emoji: 👩‍👩‍👧‍👦 🧪 ✔️",
        "<|im_start|>system\nX<|im_end|>\n<|im_start|>assistant\n",
        "  spaces\t\ttabs\n\n\nnewlines  ",
    ];
    for card in [SMOLLM2, QWEN] {
        let tokenizer = gguf_tokenizer(card);
        for text in texts {
            let ids = tokenizer.encode(text).unwrap();
            assert_eq!(
                tokenizer.decode(&ids, false).unwrap(),
                text,
                "{card}: {text:?}"
            );
        }
    }
}

/// Our ChatML rendering equals the GGUF's own Jinja template as transformers renders it.
#[test]
fn chat_templates_match_the_gguf_templates() {
    let reference = reference();
    let catalog = nlg_judge::runtime::CardCatalog::builtin().unwrap();
    for (card, key) in [(SMOLLM2, "smollm2"), (QWEN, "qwen2")] {
        let from_card = ChatTemplate::from_spec(&catalog.get(card).unwrap().chat);
        let header =
            nlg_judge::runtime::checkpoint::GgufHeader::read(&common::card_file(card)).unwrap();
        let from_gguf = ChatTemplate::detect(header.chat_template().unwrap().unwrap());
        assert_eq!(
            from_card, from_gguf,
            "{card}: card and GGUF template disagree"
        );
        for chat in reference["models"][key]["chats"].as_array().unwrap() {
            let system = chat["system"].as_str();
            let user = chat["user"].as_str().unwrap();
            assert_eq!(
                from_card.render(system, user, ""),
                chat["rendered"].as_str().unwrap(),
                "{card}"
            );
        }
    }
}

#[test]
fn t5_tokenizer_json_loads_without_padding_or_truncation() {
    let path = common::card_file("t5-tokenizer");
    let tokenizer = TextTokenizer::t5_from_json_file(&path).unwrap();
    let special = tokenizer.special();
    assert_eq!(special.eos, Some(1));
    assert_eq!(special.pad, Some(0));
    assert_eq!(special.decoder_start(), Some(0));
    assert!(special.append_eos && !special.add_bos);
    // The file itself asks for fixed padding and truncation at 256 tokens; both are off.
    let short = tokenizer.encode_prompt("Summary A").unwrap();
    assert!(short.len() < 10, "{short:?}");
    assert_eq!(short.last(), Some(&1));
    let long_text = "word ".repeat(400);
    let long = tokenizer.encode_prompt(&long_text).unwrap();
    assert!(long.len() > 400, "{}", long.len());
    assert_eq!(long.last(), Some(&1));
    // encode() adds nothing: the tokenizer.json's own post-processor is not applied.
    assert_ne!(tokenizer.encode("Summary").unwrap().last(), Some(&1));
    let ids = tokenizer.encode(" A").unwrap();
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "A");
}

#[test]
fn non_t5_tokenizer_json_is_refused_as_t5() {
    // A tokenizer.json whose </s> is not id 1 is not a T5 tokenizer.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    let json = r#"{"version":"1.0","truncation":null,"padding":null,
      "added_tokens":[{"id":0,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
                      {"id":1,"content":"<pad>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
      "normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,
      "model":{"type":"WordLevel","vocab":{"</s>":0,"<pad>":1,"a":2},"unk_token":"a"}}"#;
    std::fs::write(&path, json).unwrap();
    let error = TextTokenizer::t5_from_json_file(&path)
        .unwrap_err()
        .to_string();
    assert!(error.contains("not a T5 tokenizer"), "{error}");
    assert!(error.contains("tokenizer.json"), "{error}");
}

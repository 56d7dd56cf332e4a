//! `--model` resolution: card names, bare GGUF files, checkpoint directories, and the
//! errors for what cannot be resolved.

use crate::common;

use std::path::Path;

use nlg_judge::engine::ModelKind;
use nlg_judge::runtime::{
    load_tokenizer, resolve_model, Architecture, ChatTemplate, TokenizerSource, WeightFormat,
};

const SMOLLM2_SHA: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// The error of resolving `spec` (with a throw-away cache: these are temporary paths).
fn error_of(spec: &str) -> String {
    let cache = tempfile::tempdir().unwrap();
    format!(
        "{:#}",
        resolve_model(spec, &common::resolve_options_in(cache.path())).unwrap_err()
    )
}

/// Resolve a temporary path with a throw-away cache.
fn resolve_path(spec: &str) -> nlg_judge::runtime::ResolvedModel {
    let cache = tempfile::tempdir().unwrap();
    resolve_model(spec, &common::resolve_options_in(cache.path())).unwrap()
}

#[test]
fn default_card_resolves() {
    let model = resolve_model("smollm2-135m-instruct", &common::resolve_options()).unwrap();
    assert_eq!(model.architecture, Architecture::Llama);
    assert_eq!(model.format, WeightFormat::Gguf);
    assert_eq!(model.fingerprint, SMOLLM2_SHA);
    assert_eq!(model.context_window, 8192);
    assert!(matches!(model.tokenizer, TokenizerSource::Gguf(_)));
    assert!(model.conventions.chat);
    let info = nlg_judge::engine::model_info(&model);
    assert_eq!(info.architecture, "llama");
    assert_eq!(info.kind, ModelKind::DecoderOnly);
    let tokenizer = load_tokenizer(&model).unwrap();
    assert_eq!(tokenizer.encode(" A").unwrap(), vec![330]);
}

#[test]
fn bare_gguf_reads_its_metadata() {
    let path = common::card_file("qwen2.5-coder-0.5b-instruct");
    let model = resolve_model(path.to_str().unwrap(), &common::resolve_options()).unwrap();
    assert!(model.card.is_none());
    assert_eq!(model.architecture, Architecture::Qwen2);
    assert_eq!(model.context_window, 32768);
    assert_eq!(
        model.fingerprint,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    );
    assert_eq!(
        model.chat_template,
        ChatTemplate::ChatMl {
            default_system: Some(
                "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.".into()
            )
        }
    );
    assert!(model.conventions.chat);
    assert_eq!(model.name, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
}

#[test]
fn directory_with_one_gguf_resolves_to_it() {
    let source = common::card_file("smollm2-135m-instruct");
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("model.gguf");
    std::os::unix::fs::symlink(&source, &link).unwrap();
    let model = resolve_path(dir.path().to_str().unwrap());
    assert_eq!(model.fingerprint, SMOLLM2_SHA);
}

#[test]
fn unknown_name_lists_the_cards() {
    let error = error_of("no-such-model");
    assert!(error.contains("no-such-model"), "{error}");
    assert!(error.contains("smollm2-135m-instruct"), "{error}");
}

#[test]
fn missing_path_is_named() {
    let error = error_of("/nonexistent/model.gguf");
    assert!(error.contains("/nonexistent/model.gguf"), "{error}");
}

#[test]
fn tokenizer_only_card_is_not_a_model() {
    let error = error_of("t5-tokenizer");
    assert!(error.contains("only a tokenizer"), "{error}");
}

/// Copy the first `bytes` of the SmolLM2 GGUF.
fn truncated_gguf(dir: &Path, bytes: usize) -> String {
    let source = std::fs::read(common::card_file("smollm2-135m-instruct")).unwrap();
    let path = dir.join("cut.gguf");
    std::fs::write(&path, &source[..bytes]).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn truncated_gguf_header_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = truncated_gguf(dir.path(), 4096);
    let error = error_of(&path);
    assert!(error.contains("cut.gguf"), "{error}");
    assert!(error.contains("not a readable GGUF file"), "{error}");
}

#[test]
fn truncated_gguf_data_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // Header and metadata intact, tensor data cut short.
    let path = truncated_gguf(dir.path(), 50_000_000);
    let error = error_of(&path);
    assert!(error.contains("cut.gguf is truncated"), "{error}");
}

#[test]
fn gguf_of_unknown_architecture_is_refused() {
    use candle_core::quantized::gguf_file::{write, Value};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.gguf");
    let mut file = std::fs::File::create(&path).unwrap();
    let arch = Value::String("gptneox".into());
    write(&mut file, &[("general.architecture", &arch)], &[]).unwrap();
    drop(file);
    let error = error_of(path.to_str().unwrap());
    assert!(error.contains("gptneox"), "{error}");
    assert!(error.contains("general.architecture"), "{error}");
}

/// A checkpoint directory of T5 shape: `config.json`, weights, the t5-tokenizer card's
/// tokenizer.json.
fn t5_dir(dir: &Path, config: &str) {
    std::fs::write(dir.join("config.json"), config).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"weights stand-in").unwrap();
    std::fs::copy(
        common::card_file("t5-tokenizer"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
}

#[test]
fn t5_directory_resolves_without_a_card() {
    let dir = tempfile::tempdir().unwrap();
    t5_dir(dir.path(), r#"{"model_type": "t5", "n_positions": 512}"#);
    let model = resolve_path(dir.path().to_str().unwrap());
    assert_eq!(model.architecture, Architecture::T5);
    assert_eq!(model.kind(), ModelKind::EncoderDecoder);
    assert_eq!(model.format, WeightFormat::Safetensors);
    assert_eq!(model.chat_template, ChatTemplate::None);
    assert!(!model.conventions.chat);
    assert_eq!(model.conventions.label_a, " A");
    assert_eq!(model.context_window, 512);
    // sha256 of b"weights stand-in", computed with Python's hashlib.
    assert_eq!(
        model.fingerprint,
        "a0f64d9dfee5fec1e463b907d7ea1f72f63a918ef93e2a63ce32f256683bc633"
    );
    let tokenizer = load_tokenizer(&model).unwrap();
    assert_eq!(tokenizer.special().eos, Some(1));
    assert_eq!(tokenizer.encode_prompt("x").unwrap().last(), Some(&1));
}

#[test]
fn directory_errors_are_specific() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().to_str().unwrap().to_string();
    let error = error_of(&spec);
    assert!(error.contains("no config.json"), "{error}");

    // (bert directories resolve since the BERTScore encoder; an unknown type is refused.)
    t5_dir(dir.path(), r#"{"model_type": "gpt_neox"}"#);
    let error = error_of(&spec);
    assert!(
        error.contains("gpt_neox") && error.contains("model_type"),
        "{error}"
    );

    t5_dir(dir.path(), r#"{"model_type": "t5"}"#);
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let error = error_of(&spec);
    assert!(error.contains("no tokenizer.json"), "{error}");

    t5_dir(dir.path(), r#"{"model_type": "t5"}"#);
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let error = error_of(&spec);
    assert!(error.contains("model.safetensors.index.json"), "{error}");

    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("model-00001-of-00002.safetensors"), b"1").unwrap();
    let error = error_of(&spec);
    assert!(
        error.contains("model-00002-of-00002.safetensors"),
        "{error}"
    );

    // With both shards: the fingerprint combines the shard hashes in order.
    std::fs::write(dir.path().join("model-00002-of-00002.safetensors"), b"2").unwrap();
    let model = resolve_path(&spec);
    assert_eq!(model.weights.len(), 2);
    assert!(model.weights[0].ends_with("model-00001-of-00002.safetensors"));
    let expected = nlg_judge::runtime::cache::combine_hashes([
        nlg_judge::runtime::cache::hash_file(&model.weights[0], false)
            .unwrap()
            .as_str(),
        nlg_judge::runtime::cache::hash_file(&model.weights[1], false)
            .unwrap()
            .as_str(),
    ]);
    assert_eq!(model.fingerprint, expected);
}

/// transformers 4.43 and later save a checkpoint's chat template as `chat_template.jinja`
/// rather than in `tokenizer_config.json`; a directory saved that way is still chatted with.
#[test]
fn chat_template_jinja_file_is_read() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archs/qwen3");
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture.join(file), dir.path().join(file)).unwrap();
    }
    let spec = dir.path().to_str().unwrap().to_string();
    assert_eq!(resolve_path(&spec).chat_template, ChatTemplate::None);
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + \
         message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}\
         {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    )
    .unwrap();
    let model = resolve_path(&spec);
    assert!(
        matches!(model.chat_template, ChatTemplate::ChatMl { .. }),
        "{:?}",
        model.chat_template
    );
    assert!(model.conventions.chat);
}

/// Whether a BOS token goes in front: `tokenizer.json`'s post-processor, whatever the
/// family or tokenizer class, as transformers 5.24 decides it (`AutoTokenizer` on the same
/// first four folders encoded "A B" as [6, 7], [6, 7], [3, 6, 7] and [6, 7]); an explicit
/// `add_bos_token: true` is honoured (transformers 4's Llama tokenizers honour it; 5.24's
/// generic backend ignores it, encoding [6, 7]).
#[test]
fn bos_follows_the_post_processor() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archs/llama3");
    let tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("tokenizer.json")).unwrap())
            .unwrap();
    let with_bos_template = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<bos>": {"id": "<bos>", "ids": [3], "tokens": ["<bos>"]}}
    });
    let generic = r#"{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}"#;
    let llama_class =
        r#"{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}"#;
    let said = r#"{"bos_token": "<s>", "add_bos_token": true}"#;
    let cases: [(Option<&str>, bool, Vec<u32>); 5] = [
        (None, false, vec![6, 7]),
        (Some(generic), false, vec![6, 7]),
        (Some(generic), true, vec![3, 6, 7]),
        (Some(llama_class), false, vec![6, 7]),
        (Some(said), false, vec![1, 6, 7]),
    ];
    for (config, template, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        for file in ["config.json", "model.safetensors"] {
            std::fs::copy(fixture.join(file), dir.path().join(file)).unwrap();
        }
        let mut json = tokenizer.clone();
        if template {
            json["post_processor"] = with_bos_template.clone();
        }
        std::fs::write(dir.path().join("tokenizer.json"), json.to_string()).unwrap();
        if let Some(config) = config {
            std::fs::write(dir.path().join("tokenizer_config.json"), config).unwrap();
        }
        let model = resolve_path(dir.path().to_str().unwrap());
        let ids = load_tokenizer(&model)
            .unwrap()
            .encode_prompt("A B")
            .unwrap();
        assert_eq!(ids, expected, "config {config:?}, BOS template {template}");
    }
}

//! Seeded property tests of everything that reads untrusted bytes: the JSONL reader, every
//! route of the service (in-process, through the same router as `serve`), the pairwise
//! template parser and renderer, chat-template detection, and the GGUF and safetensors
//! header readers. The property is always the same: no panic, and every rejection is an
//! error that says what was wrong (a JSON `error` with a 4xx status on the service).
//!
//! Case counts are bounded and the seed fixed, so a run is repeatable;
//! `NLG_JUDGE_FUZZ_CASES` raises the count (scripts/reliability/run.sh does), and
//! `NLG_JUDGE_FUZZ_SEED` changes the seed. Inputs that once failed are kept as plain
//! regression tests at the end.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use nlg_judge::data::{contexts_from_rows, read_records};
use nlg_judge::engine::{MockScorer, ResultCache};
use nlg_judge::judge::pairwise::{Fill, PairwiseTemplate};
use nlg_judge::runtime::checkpoint::GgufHeader;
use nlg_judge::runtime::ChatTemplate;
use nlg_judge::server::{app, ServerConfig, WorkerStats};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use serde_json::{json, Value};
use tower::ServiceExt as _;

/// Cases per property: `NLG_JUDGE_FUZZ_CASES`, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("NLG_JUDGE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runner(default_cases: u32) -> TestRunner {
    let seed = std::env::var("NLG_JUDGE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x6e6c_676a);
    TestRunner::new(Config {
        cases: cases(default_cases),
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 512,
        ..Config::default()
    })
}

/// Report how many cases ran (the figures script reads these lines).
fn ran(name: &str, runner: &TestRunner) {
    eprintln!("fuzz {name}: {} cases", runner.config().cases);
}

/// JSON values with the field names the readers know, nested a little.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
        Just(json!(1e308)),
        Just(json!(-0.0)),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        let key = prop_oneof![
            Just("context_id".to_string()),
            Just("candidate_id".to_string()),
            Just("context".to_string()),
            Just("candidate".to_string()),
            Just("text".to_string()),
            Just("system_id".to_string()),
            Just("reference".to_string()),
            Just("references".to_string()),
            Just("scores".to_string()),
            Just("output".to_string()),
            Just("criteria".to_string()),
            Just("attribute".to_string()),
            Just("scale".to_string()),
            Just("steps".to_string()),
            Just("candidates".to_string()),
            Just("template".to_string()),
            Just("rank".to_string()),
            Just("task".to_string()),
            Just("model".to_string()),
            Just("prompt".to_string()),
            Just("messages".to_string()),
            Just("role".to_string()),
            Just("content".to_string()),
            Just("max_tokens".to_string()),
            Just("logprobs".to_string()),
            Just("top_logprobs".to_string()),
            Just("echo".to_string()),
            Just("n".to_string()),
            Just("stop".to_string()),
            Just("stream".to_string()),
            Just("temperature".to_string()),
            Just("tokens".to_string()),
            "[a-z_]{1,8}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Bytes that are JSON-like, near-valid or arbitrary.
fn body_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..256),
        1 => (json_value(), any::<prop::sample::Index>()).prop_map(|(v, cut)| {
            let text = v.to_string().into_bytes();
            let at = cut.index(text.len() + 1);
            text[..at].to_vec()
        }),
    ]
}

#[test]
fn jsonl_rows_never_panic_and_errors_name_the_row() {
    let mut runner = runner(512);
    runner
        .run(&prop::collection::vec(body_bytes(), 1..4), |rows| {
            let rows: Vec<(String, String)> = rows
                .iter()
                .enumerate()
                .map(|(k, bytes)| {
                    (
                        format!("row {}", k + 1),
                        String::from_utf8_lossy(bytes).into_owned(),
                    )
                })
                .collect();
            for min in [1, 2] {
                if let Err(error) = contexts_from_rows(&rows, min) {
                    let text = format!("{error:#}");
                    prop_assert!(!text.is_empty());
                }
            }
            Ok(())
        })
        .unwrap();
    ran("jsonl rows", &runner);
}

#[test]
fn jsonl_files_of_arbitrary_bytes_are_read_or_rejected_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.jsonl");
    let mut runner = runner(256);
    let lines = prop::collection::vec(body_bytes(), 0..5);
    runner
        .run(&lines, |lines| {
            let mut bytes = Vec::new();
            for line in &lines {
                bytes.extend_from_slice(line);
                bytes.push(b'\n');
            }
            std::fs::write(&path, &bytes).unwrap();
            if let Err(error) = read_records(&path) {
                let text = format!("{error:#}");
                prop_assert!(text.contains("input.jsonl"), "{}", text);
            }
            Ok(())
        })
        .unwrap();
    ran("jsonl files", &runner);
}

/// Every route, with its method.
const ROUTES: [(&str, &str); 11] = [
    ("POST", "/v1/geval"),
    ("POST", "/v1/score"),
    ("POST", "/v1/compare"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/mock"),
    ("GET", "/tokenizer_info"),
    ("GET", "/healthz"),
];

/// Well-formed bodies to start from (mutated by the strategy).
fn seed_body(path: &str) -> Value {
    match path {
        "/v1/geval" => json!({"output": "o", "criteria": "coherence", "steps": "1. Rate."}),
        "/v1/score" => json!({"output": "o", "attribute": "fluency"}),
        "/v1/compare" => {
            json!({"context": "c", "candidates": ["a", "b"], "attribute": "coherence"})
        }
        "/v1/completions" => {
            json!({"model": "mock", "prompt": "p", "max_tokens": 2, "logprobs": 1})
        }
        "/v1/chat/completions" => {
            json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        }
        "/tokenize" => json!({"model": "mock", "prompt": "p"}),
        "/detokenize" => json!({"model": "mock", "tokens": [1, 2]}),
        _ => Value::Null,
    }
}

/// A request body: a well-formed body with one field replaced, or any body.
fn route_body(path: &'static str) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => (json_value(), any::<prop::sample::Index>()).prop_map(move |(value, pick)| {
            let mut body = seed_body(path);
            if let Value::Object(fields) = &mut body {
                let keys: Vec<String> = fields.keys().cloned().collect();
                if !keys.is_empty() {
                    fields.insert(keys[pick.index(keys.len())].clone(), value);
                }
            }
            body.to_string().into_bytes()
        }),
        2 => body_bytes(),
    ]
}

/// The routes, their runtime, and the drain switch (kept: while it lives the routes are
/// not draining).
fn fuzz_app() -> (
    axum::Router,
    tokio::runtime::Runtime,
    nlg_judge::server::listen::DrainSwitch,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut config = ServerConfig::default();
    config.limits.max_body_bytes = 4096;
    let scorer = MockScorer::new().with_generation(|_| Ok(" 1. Read.\n2. Rate.".to_string()));
    let app = {
        let _entered = runtime.enter();
        app(
            Box::new(scorer),
            ResultCache::in_memory().unwrap(),
            config,
            Arc::new(WorkerStats::default()),
        )
        .unwrap()
    };
    (app.router, runtime, app.switch)
}

#[test]
fn every_route_answers_arbitrary_bodies_with_a_named_4xx_or_success() {
    // Found by this test: with the switch dropped, every body read answered "stopping".
    let (router, runtime, _switch) = fuzz_app();
    let mut runner = runner(256);
    let strategy = (0..ROUTES.len()).prop_flat_map(|k| (Just(k), route_body(ROUTES[k].1)));
    runner
        .run(&strategy, |(k, body)| {
            let (method, path) = ROUTES[k];
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(Body::from(body.clone()))
                .unwrap();
            let (status, text) = runtime.block_on(async {
                let response = router.clone().oneshot(request).await.unwrap();
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .unwrap();
                (status, String::from_utf8_lossy(&bytes).into_owned())
            });
            prop_assert!(
                !status.is_server_error(),
                "{} {} -> {}: {} (body {:?})",
                method,
                path,
                status,
                text,
                String::from_utf8_lossy(&body)
            );
            if status != StatusCode::OK {
                let answer: Value = serde_json::from_str(&text).map_err(|e| {
                    TestCaseError::fail(format!("{status}: not JSON ({e}): {text}"))
                })?;
                let message = answer["error"]
                    .as_str()
                    .or_else(|| answer["error"]["message"].as_str())
                    .unwrap_or_default();
                prop_assert!(!message.is_empty(), "{} {}: {}", method, path, text);
            }
            Ok(())
        })
        .unwrap();
    ran("routes", &runner);
}

#[test]
fn pairwise_templates_parse_or_name_the_problem_and_render_without_panic() {
    let mut runner = runner(1024);
    let piece = prop_oneof![
        "[^{}]{0,6}",
        Just("{".to_string()),
        Just("}".to_string()),
        Just("{{".to_string()),
        Just("}}".to_string()),
        Just("{a}".to_string()),
        Just("{b}".to_string()),
        Just("{context}".to_string()),
        Just("{question}".to_string()),
        Just("{context_noun}".to_string()),
        "\\{[a-z_]{0,8}\\}",
    ];
    let template = prop::collection::vec(piece, 0..12).prop_map(|p| p.concat());
    let fill = prop::collection::vec(".{0,8}", 7);
    runner
        .run(&(template, fill), |(text, fill)| {
            match PairwiseTemplate::parse("fuzz", &text) {
                Ok(template) => {
                    let rendered = template.render(&Fill {
                        context: &fill[0],
                        a: &fill[1],
                        b: &fill[2],
                        adjective: &fill[3],
                        item: &fill[4],
                        question: &fill[5],
                        context_label: &fill[6],
                    });
                    // Substituted text is never scanned again.
                    if text == "{a}" {
                        prop_assert_eq!(&rendered, &fill[1]);
                    }
                }
                Err(error) => {
                    let text = format!("{error:#}");
                    prop_assert!(!text.is_empty());
                }
            }
            let chat = ChatTemplate::detect(&text);
            let _ = chat.render(Some(&fill[0]), &fill[1], &fill[2]);
            Ok(())
        })
        .unwrap();
    ran("templates", &runner);
}

/// A GGUF header: magic, version, counts and key/value entries with lengths that may lie.
fn gguf_bytes() -> impl Strategy<Value = Vec<u8>> {
    let length = prop_oneof![0u64..40, Just(u64::MAX), Just(1 << 40), any::<u64>()];
    let entry = (
        length.clone(),
        "[a-z.]{0,12}",
        0u32..14,
        prop::collection::vec(any::<u8>(), 0..24),
    );
    let tensor = (
        "[a-z.]{0,8}",
        0u32..6,
        prop::collection::vec(prop_oneof![0u64..64, any::<u64>()], 0..5),
        0u32..32,
        prop_oneof![0u64..256, any::<u64>()],
    );
    (
        prop_oneof![Just(*b"GGUF"), any::<[u8; 4]>()],
        0u32..5,
        prop_oneof![0u64..3, any::<u64>()],
        prop_oneof![0u64..4, any::<u64>()],
        prop::collection::vec(entry, 0..4),
        prop::collection::vec(tensor, 0..3),
        prop::option::of(0u32..3),
        any::<prop::sample::Index>(),
    )
        .prop_map(
            |(magic, version, tensors, kvs, entries, infos, alignment, cut)| {
                let mut out = magic.to_vec();
                out.extend(version.to_le_bytes());
                out.extend(tensors.to_le_bytes());
                out.extend((kvs + u64::from(alignment.is_some())).to_le_bytes());
                if let Some(alignment) = alignment {
                    let key = b"general.alignment";
                    out.extend((key.len() as u64).to_le_bytes());
                    out.extend(key);
                    out.extend(4u32.to_le_bytes()); // u32
                    out.extend(alignment.to_le_bytes());
                }
                for (len, key, kind, payload) in entries {
                    let key = key.as_bytes();
                    out.extend(if len < 40 { key.len() as u64 } else { len }.to_le_bytes());
                    out.extend(key);
                    out.extend(kind.to_le_bytes());
                    out.extend(payload);
                }
                for (name, dims, shape, dtype, offset) in infos {
                    out.extend((name.len() as u64).to_le_bytes());
                    out.extend(name.as_bytes());
                    out.extend(dims.to_le_bytes());
                    for d in shape {
                        out.extend(d.to_le_bytes());
                    }
                    out.extend(dtype.to_le_bytes());
                    out.extend(offset.to_le_bytes());
                }
                out.extend([0u8; 64]);
                // Sometimes cut short.
                let at = cut.index(out.len() * 2 + 1);
                if at < out.len() {
                    out.truncate(at);
                }
                out
            },
        )
}

fn check_gguf(path: &Path, bytes: &[u8]) -> Result<(), TestCaseError> {
    std::fs::write(path, bytes).unwrap();
    if let Err(error) = GgufHeader::read(path) {
        let text = format!("{error:#}");
        prop_assert!(text.contains(&path.display().to_string()), "{}", text);
    }
    Ok(())
}

#[test]
fn gguf_headers_that_lie_are_rejected_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    let mut runner = runner(1024);
    runner
        .run(&gguf_bytes(), |bytes| check_gguf(&path, &bytes))
        .unwrap();
    ran("gguf headers", &runner);
}

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_llama_tiny/llama")
}

/// The tiny fixture's safetensors file with its header replaced, cut or flipped.
fn safetensors_bytes() -> impl Strategy<Value = Vec<u8>> {
    let original = std::fs::read(tiny_llama().join("model.f16.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(original[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&original[8..8 + header_len]).unwrap();
    let data = original[8 + header_len..].to_vec();
    let names: Vec<String> = header
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    let field = prop_oneof![
        Just("dtype".to_string()),
        Just("shape".to_string()),
        Just("data_offsets".to_string())
    ];
    let replacement = prop_oneof![
        json_value(),
        prop::collection::vec(prop_oneof![0u64..70000, any::<u64>()], 0..4).prop_map(|v| json!(v)),
        prop_oneof![
            Just("F16"),
            Just("BF16"),
            Just("F32"),
            Just("I64"),
            Just("U8"),
            Just("F8_E4M3"),
            Just("BOOL"),
            Just("Q4")
        ]
        .prop_map(|s| json!(s)),
    ];
    let edit = (any::<prop::sample::Index>(), field, replacement);
    (
        prop::collection::vec(edit, 0..3),
        prop_oneof![
            Just(None),
            (0u64..100_000).prop_map(Some),
            any::<u64>().prop_map(Some)
        ],
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(move |(edits, declared, cut, truncate)| {
            let mut header = header.clone();
            for (pick, field, value) in edits {
                let name = &names[pick.index(names.len())];
                header[name][&field] = value;
            }
            let text = header.to_string().into_bytes();
            let mut out = declared.unwrap_or(text.len() as u64).to_le_bytes().to_vec();
            out.extend(&text);
            out.extend(&data);
            if truncate {
                out.truncate(cut.index(out.len() + 1));
            }
            out
        })
}

#[test]
fn safetensors_headers_that_lie_are_rejected_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let weights = dir.path().join("model.safetensors");
    let config = tiny_llama().join("config.json");
    let mut runner = runner(128);
    runner
        .run(&safetensors_bytes(), |bytes| {
            std::fs::write(&weights, &bytes).unwrap();
            let loaded = nlg_judge::arch::llama::from_safetensors(
                &config,
                std::slice::from_ref(&weights),
                &candle_core::Device::Cpu,
            );
            if let Err(error) = loaded {
                let text = format!("{error:#}");
                prop_assert!(!text.is_empty());
            }
            Ok(())
        })
        .unwrap();
    ran("safetensors headers", &runner);
}

// Regression inputs: headers that once made a reader panic.

/// A GGUF header whose `general.alignment` is 0: candle's reader divides by it.
#[test]
fn a_gguf_header_with_zero_alignment_is_an_error_not_a_panic() {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(1u64.to_le_bytes()); // tensors
    bytes.extend(1u64.to_le_bytes()); // metadata entries
    let key = b"general.alignment";
    bytes.extend((key.len() as u64).to_le_bytes());
    bytes.extend(key);
    bytes.extend(4u32.to_le_bytes()); // u32
    bytes.extend(0u32.to_le_bytes());
    bytes.extend(1u64.to_le_bytes()); // tensor name
    bytes.push(b't');
    bytes.extend(1u32.to_le_bytes()); // dimensions
    bytes.extend(4u64.to_le_bytes());
    bytes.extend(0u32.to_le_bytes()); // f32
    bytes.extend(0u64.to_le_bytes()); // offset
    bytes.extend([0u8; 64]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zero.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let error = format!("{:#}", GgufHeader::read(&path).unwrap_err());
    assert!(
        error.contains("zero.gguf") && error.contains("not a readable GGUF"),
        "{error}"
    );
}

/// A tensor whose offset plus size overflows 64 bits.
#[test]
fn a_gguf_tensor_beyond_any_file_size_is_an_error_not_an_overflow() {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.push(b't');
    bytes.extend(1u32.to_le_bytes());
    bytes.extend(4u64.to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    bytes.extend((u64::MAX - 8).to_le_bytes());
    bytes.extend([0u8; 64]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("far.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let error = format!("{:#}", GgufHeader::read(&path).unwrap_err());
    assert!(error.contains("far.gguf"), "{error}");
}

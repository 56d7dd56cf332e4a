//! Every decoder family (llama 3 rope, mistral, qwen3, phi3, gemma2, gemma3_text, and
//! phi4_mini: phi3 with partial rotary embeddings and tied embeddings) on tiny
//! random-weight checkpoints made by transformers (tests/fixtures/archs/make_fixtures.py:
//! sliding windows shorter than the long prompt, Gemma 2's soft-caps low enough to bind),
//! loaded as a user loads them: a checkpoint directory through `resolve_model` and
//! `load_decoder`. Directories with nothing beyond config.json, safetensors and
//! tokenizer.json tokenise as transformers does (make_bare_reference.py).
//!
//! Tolerances: label log-probs within 1e-4 of transformers (both sides f32 from the same
//! weights; measured differences are ~1e-6); the prefix trie within 1e-5 of the naive
//! evaluation; the GGUF of the same weights within 1e-4 of the safetensors directory;
//! the tensor path (candle's ops: GPUs) within 1e-5 of the kernel path; bf16 and int8
//! products within 0.03 and 0.12 of f32's normalised label probabilities (the SmolLM2
//! bounds of precision.rs) and the same numbers for 1 and 2 threads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use candle_core::Device;
use nlg_judge::arch::llama;
use nlg_judge::arch::{Precision, WeightPolicy};
use nlg_judge::engine::{
    load_decoder, BatchBudget, DecoderScorer, DecoderSettings, Label, LabelRequest, LabelResult,
    LoadOptions, Prompt, Scorer, Strategy, TokenPrompt,
};
use nlg_judge::runtime::resolve_model;
use serde::Deserialize;

use crate::common;

const KINDS: [&str; 7] = [
    "llama3",
    "mistral",
    "qwen3",
    "phi3",
    "gemma2",
    "gemma3_text",
    "phi4_mini",
];

#[derive(Deserialize)]
struct Reference {
    probe_ids: Vec<u32>,
    models: HashMap<String, ModelReference>,
}

#[derive(Deserialize)]
struct ModelReference {
    cases: Vec<Case>,
}

/// One prompt: its ids, the log-softmax of its last position over the vocabulary, and at
/// every position the log-probs of the probe ids.
#[derive(Deserialize)]
struct Case {
    ids: Vec<u32>,
    last: Vec<f64>,
    probes: Vec<Vec<f64>>,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archs")
}

fn reference() -> Result<Reference> {
    Ok(serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("reference.json"),
    )?)?)
}

fn settings(strategy: Strategy) -> DecoderSettings {
    DecoderSettings {
        strategy,
        budget: BatchBudget {
            max_batch_tokens: 96,
            max_batch_rows: 8,
            ..BatchBudget::default()
        },
    }
}

fn scorer(kind: &str, strategy: Strategy, precision: Precision) -> Result<DecoderScorer> {
    scorer_on("cpu", kind, strategy, precision)
}

fn scorer_on(
    device: &str,
    kind: &str,
    strategy: Strategy,
    precision: Precision,
) -> Result<DecoderScorer> {
    let cache = tempfile::tempdir()?;
    let options = LoadOptions {
        resolve: common::resolve_options_in(cache.path()),
        device: device.to_string(),
        weights: WeightPolicy::F32,
        precision,
        decoder: settings(strategy),
        memory: Default::default(),
        progress: Default::default(),
    };
    let dir = fixtures().join(kind);
    let resolved = resolve_model(dir.to_str().expect("a UTF-8 path"), &options.resolve)?;
    load_decoder(&resolved, &options)
}

/// Label requests over one case: every prefix from the third token on, asked for the
/// probe ids (single-token labels) and, for the whole prompt, every vocabulary id; plus
/// a two-token label (teacher forcing). Prefixes of one prompt share the trie.
fn requests(case: &Case, probes: &[u32]) -> Vec<(LabelRequest, Vec<f64>)> {
    let prompt = |n: usize| {
        Prompt::Tokens(TokenPrompt {
            input: case.ids[..n].to_vec(),
            decoder_prefix: Vec::new(),
        })
    };
    let mut out = Vec::new();
    for n in 3..=case.ids.len() {
        let labels = probes.iter().map(|&id| Label::Tokens(vec![id])).collect();
        out.push((
            LabelRequest {
                prompt: prompt(n),
                labels,
            },
            case.probes[n - 1].clone(),
        ));
    }
    let n = case.ids.len();
    let labels = (0..case.last.len() as u32)
        .map(|id| Label::Tokens(vec![id]))
        .collect();
    out.push((
        LabelRequest {
            prompt: prompt(n),
            labels,
        },
        case.last.clone(),
    ));
    // log P(ids[2], ids[3] | ids[..2]): the probes do not hold these ids in general, so
    // this one is checked against the naive evaluation only (NaN: no reference).
    out.push((
        LabelRequest {
            prompt: prompt(2),
            labels: vec![Label::Tokens(case.ids[2..4].to_vec())],
        },
        vec![f64::NAN],
    ));
    out
}

fn logprobs(results: &[LabelResult]) -> Vec<Vec<f64>> {
    results
        .iter()
        .map(|r| r.labels.iter().map(|l| l.logprob).collect())
        .collect()
}

fn all_requests(kind: &str, reference: &Reference) -> Vec<(LabelRequest, Vec<f64>)> {
    reference.models[kind]
        .cases
        .iter()
        .flat_map(|case| requests(case, &reference.probe_ids))
        .collect()
}

#[test]
fn every_family_matches_transformers_and_the_trie_matches_naive() -> Result<()> {
    every_family_on("cpu")
}

/// The same check through candle's CUDA ops (the tensor path: sliding windows, soft-caps,
/// partial rotary, QK norms on the GPU). Built only with `--features cuda` and run by
/// `scripts/gpu/run.sh` on a machine with a GPU: with this feature and no GPU it fails.
#[cfg(feature = "cuda")]
#[test]
fn every_family_on_the_gpu_matches_transformers() -> Result<()> {
    every_family_on("cuda")
}

fn every_family_on(device: &str) -> Result<()> {
    let reference = reference()?;
    for kind in KINDS {
        let cases = all_requests(kind, &reference);
        let (requests, expected): (Vec<_>, Vec<_>) = cases.into_iter().unzip();
        let mut tree = scorer_on(device, kind, Strategy::Tree, Precision::F32)?;
        let mut naive = scorer_on(device, kind, Strategy::Naive, Precision::F32)?;
        let tree_lp = logprobs(&tree.label_logprobs(&requests)?);
        let naive_lp = logprobs(&naive.label_logprobs(&requests)?);
        let (mut worst_ref, mut worst_tree) = (0f64, 0f64);
        for ((ours, naive), want) in tree_lp.iter().zip(&naive_lp).zip(&expected) {
            assert_eq!(ours.len(), naive.len());
            for (a, b) in ours.iter().zip(naive) {
                worst_tree = worst_tree.max((a - b).abs());
            }
            if want[0].is_nan() {
                continue;
            }
            assert_eq!(ours.len(), want.len(), "{kind}");
            for (a, b) in ours.iter().zip(want) {
                worst_ref = worst_ref.max((a - b).abs());
            }
        }
        eprintln!(
            "{kind} on {device}: largest |log p - transformers| = {worst_ref:.2e}, |tree - naive| = {worst_tree:.2e}"
        );
        assert!(worst_ref < 1e-4, "{kind}: {worst_ref} from transformers");
        assert!(
            worst_tree < 1e-5,
            "{kind}: tree and naive differ by {worst_tree}"
        );
        // The result-cache identity names the architecture and its configuration.
        let fingerprint = &tree.info().fingerprint;
        let name = tree.model().config().variant.name();
        assert!(
            fingerprint.contains(&format!("+{name}-")),
            "{kind}: fingerprint {fingerprint}"
        );
    }
    Ok(())
}

#[test]
fn gguf_of_the_same_weights_gives_the_same_logits() -> Result<()> {
    let reference = reference()?;
    for kind in KINDS {
        let dir = fixtures().join(kind);
        let cache = tempfile::tempdir()?;
        let resolved = resolve_model(
            dir.to_str().expect("a UTF-8 path"),
            &common::resolve_options_in(cache.path()),
        )?;
        let config = resolved.config.as_ref().expect("a config.json");
        let from_dir = llama::from_safetensors(config, &resolved.weights, &Device::Cpu)?;
        let from_gguf = llama::from_gguf(&dir.join("model.gguf"), WeightPolicy::F32, &Device::Cpu)?;
        // `rope.dimension_count` carries the rotated width (12 of 16 for phi4_mini).
        assert_eq!(
            from_gguf.config().rotary_dim,
            from_dir.config().rotary_dim,
            "{kind}"
        );
        // llama.cpp converts Mistral as `llama`; the others keep their names.
        if kind != "mistral" {
            assert_eq!(
                from_gguf.config().variant,
                from_dir.config().variant,
                "{kind}"
            );
        }
        let mut worst = 0f32;
        for case in &reference.models[kind].cases {
            let positions: Vec<(usize, usize)> = (0..case.ids.len()).map(|t| (0, t)).collect();
            let logits = |model: &llama::LlamaModel| -> Result<Vec<Vec<f32>>> {
                let out = model.forward(&[&case.ids], None, false)?;
                Ok(model.full_logits(&out.positions(&positions)?)?.to_vec2()?)
            };
            let (a, b) = (logits(&from_dir)?, logits(&from_gguf)?);
            for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
                worst = worst.max((x - y).abs());
            }
            // The tensor path (GPUs; windows and soft-caps in `masked_softmax`) agrees
            // with the kernel's.
            let tensors = logits(&from_dir.clone().with_candle_attention())?;
            for (x, y) in a.iter().flatten().zip(tensors.iter().flatten()) {
                assert!(
                    (x - y).abs() < 1e-5,
                    "{kind}: tensor path {y} vs kernel {x}"
                );
            }
        }
        eprintln!("{kind}: largest |logit(gguf) - logit(safetensors)| = {worst:.2e}");
        assert!(worst < 1e-4, "{kind}: GGUF logits differ by {worst}");
    }
    Ok(())
}

#[test]
fn reduced_precision_stays_close_to_f32_and_thread_independent() -> Result<()> {
    let reference = reference()?;
    let normalised = |lp: &[f64]| -> Vec<f64> {
        let max = lp.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = lp.iter().map(|l| (l - max).exp()).sum();
        lp.iter().map(|l| (l - max).exp() / total).collect()
    };
    for kind in KINDS {
        let requests: Vec<LabelRequest> = all_requests(kind, &reference)
            .into_iter()
            .map(|(r, _)| r)
            .filter(|r| r.labels.len() == reference.probe_ids.len())
            .collect();
        let f32_lp =
            logprobs(&scorer(kind, Strategy::Tree, Precision::F32)?.label_logprobs(&requests)?);
        for (precision, tolerance) in [(Precision::Bf16, 0.03), (Precision::Int8, 0.12)] {
            let mut reduced = scorer(kind, Strategy::Tree, precision)?;
            let pool = |threads| rayon::ThreadPoolBuilder::new().num_threads(threads).build();
            let one = pool(1)?.install(|| reduced.label_logprobs(&requests))?;
            let two = pool(2)?.install(|| reduced.label_logprobs(&requests))?;
            assert_eq!(
                logprobs(&one),
                logprobs(&two),
                "{kind} {precision:?}: threads differ"
            );
            let mut worst = 0f64;
            for (a, b) in logprobs(&one).iter().zip(&f32_lp) {
                for (p, q) in normalised(a).iter().zip(normalised(b)) {
                    worst = worst.max((p - q).abs());
                }
            }
            eprintln!("{kind} {precision:?}: largest |p - p_f32| = {worst:.4}");
            assert!(
                worst <= tolerance,
                "{kind} {precision:?}: {worst} > {tolerance}"
            );
        }
    }
    Ok(())
}

/// A copy of fixture `kind` in a temporary directory, with `edit` applied to the parsed
/// `file` (JSON).
fn edited_copy(
    kind: &str,
    file: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for entry in std::fs::read_dir(fixtures().join(kind))? {
        let path = entry?.path();
        std::fs::copy(
            &path,
            dir.path().join(path.file_name().expect("a file name")),
        )?;
    }
    let path = dir.path().join(file);
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    edit(&mut json);
    std::fs::write(&path, serde_json::to_string(&json)?)?;
    Ok(dir)
}

/// The error chain of loading `dir` as a user does.
fn load_error(dir: &Path) -> String {
    let cache = tempfile::tempdir().expect("a temporary directory");
    let options = LoadOptions {
        resolve: common::resolve_options_in(cache.path()),
        device: "cpu".to_string(),
        weights: WeightPolicy::F32,
        precision: Precision::F32,
        decoder: settings(Strategy::Tree),
        memory: Default::default(),
        progress: Default::default(),
    };
    let loaded = resolve_model(dir.to_str().expect("a UTF-8 path"), &options.resolve)
        .and_then(|resolved| load_decoder(&resolved, &options));
    match loaded {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(error) => format!("{error:#}"),
    }
}

#[test]
fn bad_checkpoints_fail_at_load_naming_the_field() -> Result<()> {
    let expect = |dir: tempfile::TempDir, needles: &[&str]| {
        let error = load_error(dir.path());
        for needle in needles {
            assert!(error.contains(needle), "'{needle}' not in: {error}");
        }
    };
    expect(
        edited_copy("gemma2", "config.json", |c| {
            c["model_type"] = "gpt_neox".into()
        })?,
        &["model_type", "'gpt_neox'", "gemma3_text", "phi3"],
    );
    expect(
        edited_copy("llama3", "config.json", |c| {
            c["rope_parameters"]["rope_type"] = "mrope".into()
        })?,
        &["rope_scaling", "'mrope'", "llama3", "longrope"],
    );
    // 16 * 0.7 = 11.2: an odd number of rotated dimensions.
    expect(
        edited_copy("phi4_mini", "config.json", |c| {
            c["rope_parameters"]["partial_rotary_factor"] = 0.7.into()
        })?,
        &["partial_rotary_factor", "0.7", "11", "even"],
    );
    // Three layers declared, two stored: the first missing tensor is named.
    expect(
        edited_copy("qwen3", "config.json", |c| {
            c["num_hidden_layers"] = 3.into();
            c.as_object_mut().map(|c| c.remove("layer_types"));
        })?,
        &["model.layers.2.", "qwen3"],
    );
    // A tokenizer with a token past the model's vocabulary.
    expect(
        edited_copy("mistral", "tokenizer.json", |t| {
            t["model"]["vocab"]["extra"] = 256.into()
        })?,
        &["257 tokens", "vocab_size", "256"],
    );
    // config.json's beginning-of-sequence token is not the one the tokenizer adds (`<s>`,
    // token 1, put in front by tokenizer.json's post-processor, as transformers reads it).
    let disagreeing = edited_copy("llama3", "config.json", |c| c["bos_token_id"] = 5.into())?;
    let tokenizer_path = disagreeing.path().join("tokenizer.json");
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tokenizer_path)?)?;
    tokenizer["post_processor"] = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}
    });
    std::fs::write(&tokenizer_path, tokenizer.to_string())?;
    expect(disagreeing, &["bos_token_id", "5", "token 1"]);
    Ok(())
}

#[derive(Deserialize)]
struct BareCase {
    name: String,
    rename: HashMap<String, String>,
    tokenizer_config: Option<serde_json::Value>,
    text: String,
    ids: Vec<u32>,
    bos_token_id: Option<u32>,
}

#[derive(Deserialize)]
struct BareReference {
    cases: Vec<BareCase>,
}

/// The mistral fixture's config.json and weights, its tokenizer.json with `case.rename`
/// applied, and a tokenizer_config.json when the case has one: the directories
/// make_bare_reference.py gave transformers.
fn bare_directory(case: &BareCase) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixtures().join("mistral").join(file), dir.path().join(file))?;
    }
    let mut tokenizer: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("mistral/tokenizer.json"),
    )?)?;
    for (old, new) in &case.rename {
        let vocab = tokenizer["model"]["vocab"]
            .as_object_mut()
            .expect("a vocabulary map");
        let id = vocab.remove(old).expect("the renamed token");
        vocab.insert(new.clone(), id);
        for token in tokenizer["added_tokens"]
            .as_array_mut()
            .expect("added tokens")
        {
            if token["content"] == old.as_str() {
                token["content"] = new.as_str().into();
            }
        }
    }
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer.to_string())?;
    if let Some(config) = &case.tokenizer_config {
        std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string())?;
    }
    Ok(dir)
}

#[test]
fn a_bare_checkpoint_directory_tokenises_as_transformers_does() -> Result<()> {
    let bare: BareReference = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("bare_reference.json"),
    )?)?;
    let reference = reference()?;
    let expected = &reference.models["mistral"].cases[0];
    for case in &bare.cases {
        let dir = bare_directory(case)?;
        let cache = tempfile::tempdir()?;
        let options = LoadOptions {
            resolve: common::resolve_options_in(cache.path()),
            device: "cpu".to_string(),
            weights: WeightPolicy::F32,
            precision: Precision::F32,
            decoder: settings(Strategy::Tree),
            memory: Default::default(),
            progress: Default::default(),
        };
        let resolved = resolve_model(dir.path().to_str().expect("a UTF-8 path"), &options.resolve)?;
        let tokenizer = nlg_judge::runtime::load_tokenizer(&resolved)?;
        assert_eq!(
            tokenizer.encode_prompt(&case.text)?,
            case.ids,
            "{}",
            case.name
        );
        assert_eq!(tokenizer.special().bos, case.bos_token_id, "{}", case.name);
        // The prompt as text, through the scorer: the reference's log-probs of its ids.
        assert_eq!(case.ids, expected.ids, "{}", case.name);
        let mut scorer = load_decoder(&resolved, &options)?;
        let request = LabelRequest {
            prompt: Prompt::plain(nlg_judge::engine::TextPrompt::user(case.text.clone())),
            labels: (0..expected.last.len() as u32)
                .map(|id| Label::Tokens(vec![id]))
                .collect(),
        };
        let ours = logprobs(&scorer.label_logprobs(&[request])?);
        let worst = ours[0]
            .iter()
            .zip(&expected.last)
            .map(|(a, b)| (a - b).abs())
            .fold(0f64, f64::max);
        assert!(worst < 1e-4, "{}: {worst} from transformers", case.name);
    }
    Ok(())
}

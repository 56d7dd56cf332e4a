//! The hub source against a stand-in hub: a loopback HTTP server that answers
//! `/{repo}/resolve/{revision}/{file}` the way the Hugging Face hub does for hf-hub 0.4
//! (`ETag`, `X-Repo-Commit`, ranged `206` answers with `Content-Range`).
//!
//! A tiny T5-style checkpoint (config.json, model.safetensors, tokenizer.json, made here)
//! is downloaded, lands in our cache verified, is found again offline with the server
//! gone, and a corrupted cached copy is caught.

use std::collections::HashMap;

use crate::common;

use crate::common::hub::*;
use nlg_judge::runtime::fetch::Origin;
use nlg_judge::runtime::{load_tokenizer, resolve_card, Architecture, HubSettings};

#[test]
fn download_then_offline_then_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let files = checkpoint_files(dir.path());
    let card = card(&files);
    let hub = StandInHub::start(files.clone());
    let cache = dir.path().join("cache");
    let hub_cache = dir.path().join("hf").join("hub");

    // 1. Download: files land in our cache, verified, with the weights' hash as fingerprint.
    let online = options(&cache, &hub_cache, Some(hub.endpoint.clone()));
    let model = resolve_card(&card, &online).unwrap();
    assert!(hub.requests() >= 6, "two requests per file expected");
    assert_eq!(model.architecture, Architecture::T5);
    assert_eq!(model.fingerprint, sha256(&files["model.safetensors"]));
    for file in &model.files {
        assert_eq!(
            file.origin,
            Origin::Hub {
                repo: REPO.into(),
                revision: COMMIT.into()
            }
        );
        assert!(file.path.starts_with(&cache), "{}", file.path.display());
        assert_eq!(std::fs::read(&file.path).unwrap(), files[&file.name]);
        assert_eq!(file.sha256, sha256(&files[&file.name]));
    }
    let tokenizer = load_tokenizer(&model).unwrap();
    assert_eq!(tokenizer.encode_prompt("Summary A").unwrap(), vec![3, 4, 1]);

    // 2. Server gone, offline: our cache answers.
    hub.shut_down();
    let mut offline = options(&cache, &hub_cache, None);
    offline.hub.offline = true;
    let again = resolve_card(&card, &offline).unwrap();
    assert!(again.files.iter().all(|f| f.origin == Origin::Cache));
    assert_eq!(again.fingerprint, model.fingerprint);

    // 3. Offline with an empty cache of ours: the hub cache answers.
    let fresh = dir.path().join("cache2");
    let mut from_hub_cache = options(&fresh, &hub_cache, None);
    from_hub_cache.hub.offline = true;
    let third = resolve_card(&card, &from_hub_cache).unwrap();
    assert!(third
        .files
        .iter()
        .all(|f| matches!(f.origin, Origin::Hub { .. })));
    assert!(third.files.iter().all(|f| f.path.starts_with(&fresh)));

    // 4. Offline, empty caches: a clear error.
    let mut nothing = options(&dir.path().join("cache3"), &dir.path().join("hf3"), None);
    nothing.hub.offline = true;
    let error = format!("{:#}", resolve_card(&card, &nothing).unwrap_err());
    assert!(error.contains("HF_HUB_OFFLINE"), "{error}");

    // 5. Corrupt the cached weights (pinned hash) and the cached config (recorded hash).
    let weights = cache.join("models/tiny-t5/model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&weights, &bytes).unwrap();
    let error = format!("{:#}", resolve_card(&card, &offline).unwrap_err());
    assert!(error.contains("model.safetensors"), "{error}");
    assert!(
        error.contains(&sha256(&files["model.safetensors"])),
        "{error}"
    );
    assert!(error.contains(&sha256(&bytes)), "{error}");
    assert!(error.contains("--force"), "{error}");

    std::fs::write(&weights, &files["model.safetensors"]).unwrap();
    let config = cache.join("models/tiny-t5/config.json");
    std::fs::write(&config, br#"{"model_type": "t5", "d_model": 9}"#).unwrap();
    let error = format!("{:#}", resolve_card(&card, &offline).unwrap_err());
    assert!(error.contains("config.json"), "{error}");
    assert!(error.contains(&sha256(&files["config.json"])), "{error}");

    // 6. `--force` with the hub back repairs the cache (our copy may share its bytes with
    //    the hub cache's, which the corruption above damaged too: it is downloaded again).
    let hub = StandInHub::start(files.clone());
    let mut repair = options(&cache, &hub_cache, Some(hub.endpoint.clone()));
    repair.force = true;
    let repaired = resolve_card(&card, &repair).unwrap();
    assert_eq!(std::fs::read(&config).unwrap(), files["config.json"]);
    assert_eq!(repaired.fingerprint, model.fingerprint);
    let requests = hub.requests();
    assert!(requests >= 6, "{requests}");
    hub.shut_down();
}

#[test]
fn stale_hub_cache_copy_is_downloaded_again() {
    let dir = tempfile::tempdir().unwrap();
    let files = checkpoint_files(dir.path());
    let card = card(&files);
    let hub = StandInHub::start(files.clone());
    let hub_cache = dir.path().join("hf");
    let online = options(
        &dir.path().join("cache"),
        &hub_cache,
        Some(hub.endpoint.clone()),
    );
    let first = resolve_card(&card, &online).unwrap();
    // Damage the hub cache's weights in place (our copy is a hard link to them or a copy).
    let weights = first.weights[0].clone();
    let hub_copy = HubSettings::new(None, hub_cache.clone())
        .cached_file(REPO, COMMIT, "model.safetensors")
        .unwrap();
    std::fs::write(&hub_copy, b"damaged").unwrap();
    std::fs::remove_file(&weights).unwrap();
    let before = hub.requests();
    let second = resolve_card(&card, &online).unwrap();
    assert_eq!(
        std::fs::read(&second.weights[0]).unwrap(),
        files["model.safetensors"]
    );
    assert!(
        hub.requests() > before,
        "the weights were not downloaded again"
    );
    hub.shut_down();
}

#[test]
fn wrong_file_from_the_hub_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let files = checkpoint_files(dir.path());
    let card = card(&files);
    let mut served = files.clone();
    served.insert(
        "model.safetensors".into(),
        b"not the pinned weights".to_vec(),
    );
    let hub = StandInHub::start(served);
    let cache = dir.path().join("cache");
    let online = options(&cache, &dir.path().join("hf"), Some(hub.endpoint.clone()));
    let error = format!("{:#}", resolve_card(&card, &online).unwrap_err());
    assert!(
        error.contains("sha256 mismatch for model.safetensors"),
        "{error}"
    );
    assert!(!cache.join("models/tiny-t5/model.safetensors").exists());
    hub.shut_down();
}

#[test]
fn missing_file_on_the_hub_names_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = checkpoint_files(dir.path());
    let card = card(&files);
    files.remove("tokenizer.json");
    let hub = StandInHub::start(files);
    let online = options(
        &dir.path().join("cache"),
        &dir.path().join("hf"),
        Some(hub.endpoint.clone()),
    );
    let error = format!("{:#}", resolve_card(&card, &online).unwrap_err());
    assert!(
        error.contains(&format!("{REPO}/resolve/{COMMIT}/tokenizer.json")),
        "{error}"
    );
    hub.shut_down();
}

/// The whole T5 path through the hub: the random-weight FlanT5-architecture fixture with
/// the real T5 tokenizer, served by the stand-in hub under a card, downloaded, loaded as
/// a scorer, and scoring labels exactly as the same files loaded from a directory.
#[test]
fn a_t5_checkpoint_from_the_hub_scores_like_the_local_directory() {
    use nlg_judge::engine::{LabelRequest, Prompt, TextPrompt};
    let local = common::t5::fixture_model_dir();
    let files: HashMap<String, Vec<u8>> = ["config.json", "model.safetensors", "tokenizer.json"]
        .iter()
        .map(|name| {
            (
                name.to_string(),
                std::fs::read(local.path().join(name)).unwrap(),
            )
        })
        .collect();
    let card = card(&files);
    let hub = StandInHub::start(files.clone());
    let dir = tempfile::tempdir().unwrap();
    let fetch = options(
        &dir.path().join("cache"),
        &dir.path().join("hf"),
        Some(hub.endpoint.clone()),
    );
    let resolved = resolve_card(&card, &fetch).unwrap();
    hub.shut_down();
    let load = nlg_judge::engine::LoadOptions {
        resolve: nlg_judge::runtime::ResolveOptions {
            fetch,
            catalog: nlg_judge::runtime::CardCatalog::builtin().unwrap(),
        },
        device: "cpu".into(),
        weights: nlg_judge::arch::WeightPolicy::F32,
        precision: nlg_judge::arch::Precision::F32,
        decoder: Default::default(),
        memory: Default::default(),
        progress: Default::default(),
    };
    let mut from_hub = nlg_judge::engine::load_resolved(&resolved, &load).unwrap();
    let mut from_dir =
        nlg_judge::engine::load_scorer(local.path().to_str().unwrap(), &load).unwrap();
    let request = LabelRequest {
        prompt: Prompt::plain(
            TextPrompt::user("Passage: a short text.\n\nWhich Summary is better?")
                .with_answer_prefix("Summary"),
        ),
        labels: vec![" A".into(), " B".into()],
    };
    let a = from_hub
        .label_logprobs(std::slice::from_ref(&request))
        .unwrap();
    let b = from_dir
        .label_logprobs(std::slice::from_ref(&request))
        .unwrap();
    assert_eq!(from_hub.info().architecture, "t5");
    for (x, y) in a[0].labels.iter().zip(&b[0].labels) {
        assert_eq!(x.tokens, y.tokens);
        assert!(
            (x.logprob - y.logprob).abs() < 1e-9,
            "{} vs {}",
            x.logprob,
            y.logprob
        );
    }
}

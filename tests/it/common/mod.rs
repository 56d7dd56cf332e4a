//! Helpers shared by the integration tests that need real model files.
//!
//! Files come from the nlg-judge cache (`$NLG_JUDGE_CACHE`, else the user cache dir). CI
//! fills it with `nlg-judge models fetch <card>` before the tests; a missing file is
//! fetched here through the card's sources (which needs the network once).

#![allow(dead_code)]

pub mod contexts;
pub mod engine;
pub mod gate;
pub mod hub;
pub mod service;
pub mod t5;
pub mod wait;

use std::path::PathBuf;

use nlg_judge::runtime::{fetch_card, CardCatalog, FetchOptions, ResolveOptions};

/// Fetch options from the environment, without progress bars.
pub fn fetch_options() -> FetchOptions {
    let mut options = FetchOptions::from_env().expect("fetch options from the environment");
    options.progress = false;
    options
}

/// Resolve options from the environment with the built-in cards only.
pub fn resolve_options() -> ResolveOptions {
    ResolveOptions {
        fetch: fetch_options(),
        catalog: CardCatalog::builtin().expect("built-in cards"),
    }
}

/// Resolve options whose cache (and so whose hash records) is `dir`, with the built-in
/// cards: for resolving temporary paths without leaving records in the real cache.
pub fn resolve_options_in(dir: &std::path::Path) -> ResolveOptions {
    let mut options = resolve_options();
    options.fetch.cache = nlg_judge::runtime::ModelCache::new(dir);
    options.fetch.download = false;
    options
}

/// The path of the first file of a built-in card, fetched and verified.
pub fn card_file(card: &str) -> PathBuf {
    let catalog = CardCatalog::builtin().expect("built-in cards");
    let card = catalog.get(card).expect("a built-in card");
    let files = fetch_card(card, &fetch_options()).unwrap_or_else(|error| {
        panic!(
            "cannot get the files of {}: {error:#}\n(run `nlg-judge models fetch {}`)",
            card.name, card.name
        )
    });
    files[0].path.clone()
}

/// Path of a fetched GGUF model of a built-in card.
pub fn gguf_path(card: &str) -> PathBuf {
    card_file(card)
}

/// SmolLM2-135M-Instruct dequantised to f32, loaded once per test binary.
pub fn smollm2() -> &'static nlg_judge::arch::llama::LlamaModel {
    static MODEL: std::sync::OnceLock<nlg_judge::arch::llama::LlamaModel> =
        std::sync::OnceLock::new();
    MODEL.get_or_init(|| {
        nlg_judge::arch::llama::from_gguf(
            &gguf_path("smollm2-135m-instruct"),
            nlg_judge::arch::WeightPolicy::F32,
            &candle_core::Device::Cpu,
        )
        .expect("SmolLM2 loads")
    })
}

/// A decoder scorer for SmolLM2 (f32 weights on the CPU) with the given engine settings.
pub fn smollm2_scorer(
    settings: nlg_judge::engine::DecoderSettings,
) -> nlg_judge::engine::DecoderScorer {
    smollm2_scorer_at(settings, nlg_judge::arch::Precision::F32)
}

/// [`smollm2_scorer`] with the decoder blocks' products at `precision`.
pub fn smollm2_scorer_at(
    settings: nlg_judge::engine::DecoderSettings,
    precision: nlg_judge::arch::Precision,
) -> nlg_judge::engine::DecoderScorer {
    let options = nlg_judge::engine::LoadOptions {
        resolve: resolve_options(),
        device: "cpu".to_string(),
        weights: nlg_judge::arch::WeightPolicy::F32,
        precision,
        decoder: settings,
        memory: Default::default(),
        progress: Default::default(),
    };
    let resolved = nlg_judge::runtime::resolve_model("smollm2-135m-instruct", &options.resolve)
        .expect("SmolLM2 resolves");
    nlg_judge::engine::load_decoder(&resolved, &options).expect("SmolLM2 loads")
}

/// The shared human-judgement data directory (`NLG_JUDGE_DATA`, else `../shared/data`
/// beside the repository); panics with a clear message when it is missing.
pub fn shared_data_dir() -> PathBuf {
    nlg_judge::data::find_shared_data_dir()
        .filter(|dir| dir.join("summeval").is_dir())
        .expect("the shared data directory (../shared/data or NLG_JUDGE_DATA) is missing")
}

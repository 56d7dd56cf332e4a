//! Pairwise-style T5 workload: 16 prompts of 150-400 tokens, decoder prefix "Summary",
//! two single-token labels, on a random-weight model with flan-t5-base's shapes (d_model
//! 768, d_ff 2048, 12 heads, 12+12 layers, vocabulary 32128) built in memory; the
//! default depth is 4+4 layers to keep the run short (`T5_BENCH_LAYERS` sets it).
//!
//! Compares scoring the prompts one at a time with length-bucketed padded batches (the
//! scorer's defaults: 4096 padded tokens, at most 10% padding) and with the same budget
//! but no padding cap. Throughput is in comparisons (prompts) per second.
//!
//!     cargo bench --bench t5                      # 4+4 layers, about 3 minutes on 2 cores
//!     T5_BENCH_LAYERS=12 cargo bench --bench t5   # flan-t5-base's full depth, ~9 minutes

use std::collections::HashMap;
use std::time::Duration;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nlg_judge::arch::t5::{T5Config, T5Model};
use nlg_judge::engine::t5_scorer::{DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_PADDING};
use nlg_judge::engine::{
    Conventions, Label, LabelRequest, ModelInfo, ModelKind, Prompt, Scorer, T5Scorer, TokenPrompt,
};
use nlg_judge::runtime::{SpecialTokens, TextTokenizer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PROMPTS: usize = 16;

fn layers() -> usize {
    std::env::var("T5_BENCH_LAYERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

fn flan_t5_base_config(layers: usize) -> T5Config {
    let json = format!(
        r#"{{"model_type": "t5", "vocab_size": 32128, "d_model": 768, "d_kv": 64,
            "d_ff": 2048, "num_layers": {layers}, "num_decoder_layers": {layers},
            "num_heads": 12, "feed_forward_proj": "gated-gelu",
            "tie_word_embeddings": false, "n_positions": 512}}"#
    );
    T5Config::from_json(&json).expect("bench config is valid")
}

/// Random weights under the checkpoint's tensor names, scaled as transformers'
/// initialiser scales them so that activations stay in a realistic range.
fn random_weights(config: &T5Config, device: &Device) -> HashMap<String, Tensor> {
    let (d, f, inner, v) = (
        config.d_model,
        config.d_ff,
        config.inner_dim(),
        config.vocab_size,
    );
    let mut tensors = HashMap::new();
    let mut put = |name: String, shape: (usize, usize), std: f64| {
        let t = Tensor::randn(0f32, std as f32, shape, device).expect("random tensor");
        tensors.insert(name, t);
    };
    let ones = |n: usize| Tensor::ones(n, DType::F32, device).expect("ones");
    put("shared.weight".into(), (v, d), 1.0);
    put("lm_head.weight".into(), (v, d), (d as f64).powf(-0.5));
    let mut norms = Vec::new();
    for (stack, count, cross) in [
        ("encoder", config.num_encoder_layers, false),
        ("decoder", config.num_decoder_layers, true),
    ] {
        for i in 0..count {
            let block = format!("{stack}.block.{i}.layer");
            let mut attention = |prefix: String| {
                put(
                    format!("{prefix}.q.weight"),
                    (inner, d),
                    ((d * config.d_kv) as f64).powf(-0.5),
                );
                put(
                    format!("{prefix}.k.weight"),
                    (inner, d),
                    (d as f64).powf(-0.5),
                );
                put(
                    format!("{prefix}.v.weight"),
                    (inner, d),
                    (d as f64).powf(-0.5),
                );
                put(
                    format!("{prefix}.o.weight"),
                    (d, inner),
                    (inner as f64).powf(-0.5),
                );
            };
            attention(format!("{block}.0.SelfAttention"));
            norms.push(format!("{block}.0.layer_norm.weight"));
            let ff = if cross {
                attention(format!("{block}.1.EncDecAttention"));
                norms.push(format!("{block}.1.layer_norm.weight"));
                2
            } else {
                1
            };
            put(
                format!("{block}.{ff}.DenseReluDense.wi_0.weight"),
                (f, d),
                (d as f64).powf(-0.5),
            );
            put(
                format!("{block}.{ff}.DenseReluDense.wi_1.weight"),
                (f, d),
                (d as f64).powf(-0.5),
            );
            put(
                format!("{block}.{ff}.DenseReluDense.wo.weight"),
                (d, f),
                (f as f64).powf(-0.5),
            );
            norms.push(format!("{block}.{ff}.layer_norm.weight"));
        }
        put(
            format!("{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
            (config.relative_attention_num_buckets, config.num_heads),
            (d as f64).powf(-0.5),
        );
        norms.push(format!("{stack}.final_layer_norm.weight"));
    }
    for name in norms {
        tensors.insert(name, ones(d));
    }
    tensors
}

/// A tokenizer with only the special tokens: the bench sends token prompts.
fn placeholder_tokenizer() -> TextTokenizer {
    let vocab: HashMap<String, u32> = [("<pad>", 0), ("</s>", 1), ("<unk>", 2)]
        .into_iter()
        .map(|(t, i)| (t.to_string(), i))
        .collect();
    let model = tokenizers::models::wordlevel::WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("<unk>".to_string())
        .build()
        .expect("word-level model");
    let special = SpecialTokens {
        eos: Some(1),
        pad: Some(0),
        append_eos: true,
        ..SpecialTokens::default()
    };
    TextTokenizer::new(tokenizers::Tokenizer::new(model), special).expect("tokenizer")
}

/// 16 prompts of 150-400 tokens (eos last), prefix "Summary", labels " A" / " B".
fn pairwise_requests() -> Vec<LabelRequest> {
    let mut rng = StdRng::seed_from_u64(2024);
    (0..PROMPTS)
        .map(|i| {
            let len = 150 + (i * 97) % 251;
            let mut input: Vec<u32> = (0..len - 1).map(|_| rng.gen_range(3..32000)).collect();
            input.push(1);
            LabelRequest {
                prompt: Prompt::Tokens(TokenPrompt {
                    input,
                    decoder_prefix: vec![20698],
                }),
                labels: vec![Label::Tokens(vec![71]), Label::Tokens(vec![272])],
            }
        })
        .collect()
}

fn bench_pairwise(c: &mut Criterion) {
    let device = Device::Cpu;
    let layers = layers();
    let config = flan_t5_base_config(layers);
    let vb = VarBuilder::from_tensors(random_weights(&config, &device), DType::F32, &device);
    let model = T5Model::load(&vb, &config).expect("bench model loads");
    let info = ModelInfo {
        name: format!("random-flan-t5-base-{layers}-layers"),
        architecture: "t5".to_string(),
        kind: ModelKind::EncoderDecoder,
        fingerprint: "random".to_string(),
        context_window: 512,
        conventions: Conventions::default(),
    };
    let requests = pairwise_requests();
    let scorer = |budget: usize, padding: f64| {
        T5Scorer::new(model.clone(), placeholder_tokenizer(), info.clone())
            .expect("scorer")
            .with_max_batch_tokens(budget)
            .with_max_padding(padding)
    };

    let mut group = c.benchmark_group(format!("t5_pairwise_{layers}_layers"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(PROMPTS as u64));
    for (name, budget, padding) in [
        ("one_at_a_time", 1, 0.0),
        (
            "length_bucketed",
            DEFAULT_MAX_BATCH_TOKENS,
            DEFAULT_MAX_PADDING,
        ),
        ("bucketed_no_padding_cap", DEFAULT_MAX_BATCH_TOKENS, 1.0),
    ] {
        let mut scorer = scorer(budget, padding);
        scorer.label_logprobs(&requests).expect("warm-up run");
        let usage = scorer.usage().clone();
        eprintln!(
            "{name}: {} encoder batches, {} tokens, {} with padding",
            usage.encoder_batches, usage.encoder_tokens, usage.padded_encoder_tokens
        );
        group.bench_function(name, |b| {
            b.iter(|| scorer.label_logprobs(&requests).expect("scoring"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_pairwise);
criterion_main!(benches);

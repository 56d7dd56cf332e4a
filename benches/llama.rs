//! Criterion benches of our llama-family code on the real SmolLM2-135M (f32 weights):
//! prefill of one sequence versus a padded batch of sequences, and the label-only head
//! versus the full vocabulary head at the scored positions. Compare the throughputs
//! within one run (the machine is shared and noisy): `cargo bench --bench llama`.

use std::path::PathBuf;

use candle_core::Device;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nlg_judge::arch::llama::{self, LlamaModel};
use nlg_judge::arch::WeightPolicy;
use nlg_judge::runtime::{fetch_card, CardCatalog, FetchOptions};

fn smollm2() -> LlamaModel {
    let catalog = CardCatalog::builtin().expect("built-in cards");
    let card = catalog
        .get("smollm2-135m-instruct")
        .expect("the default card");
    let mut options = FetchOptions::from_env().expect("fetch options");
    options.progress = false;
    let path: PathBuf = fetch_card(card, &options).expect("SmolLM2 is fetched")[0]
        .path
        .clone();
    eprintln!("CPU: {}", nlg_judge::runtime::cpu_features());
    llama::from_gguf(&path, WeightPolicy::F32, &Device::Cpu).expect("SmolLM2 loads")
}

fn tokens(len: usize, seed: usize) -> Vec<u32> {
    (0..len)
        .map(|t| ((t * 131 + seed * 977 + 7) % 49000) as u32)
        .collect()
}

fn prefill(c: &mut Criterion) {
    let model = smollm2();
    let one = tokens(256, 0);
    let batch: Vec<Vec<u32>> = (0..8).map(|i| tokens(128 + 16 * i, i)).collect();
    let batch_tokens: usize = batch.iter().map(Vec::len).sum();
    let mut group = c.benchmark_group("prefill");
    group.sample_size(10);
    group.throughput(Throughput::Elements(one.len() as u64));
    group.bench_function("one sequence of 256 tokens", |b| {
        b.iter(|| model.forward(&[&one], None, false).expect("forward"))
    });
    group.throughput(Throughput::Elements(batch_tokens as u64));
    group.bench_function("padded batch of 8 sequences (128-240 tokens)", |b| {
        let rows: Vec<&[u32]> = batch.iter().map(Vec::as_slice).collect();
        b.iter(|| model.forward(&rows, None, false).expect("forward"))
    });
    group.finish();
}

fn heads(c: &mut Criterion) {
    let model = smollm2();
    let rows: Vec<Vec<u32>> = (0..16).map(|i| tokens(24, i)).collect();
    let refs: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
    let out = model.forward(&refs, None, false).expect("forward");
    let last: Vec<(usize, usize)> = (0..rows.len()).map(|r| (r, 23)).collect();
    let hidden = out.positions(&last).expect("positions");
    let labels = [330u32, 389];
    let mut group = c.benchmark_group("head at 16 positions");
    group.throughput(Throughput::Elements(rows.len() as u64));
    group.bench_function("label-only (2 ids)", |b| {
        b.iter(|| model.token_logits(&hidden, &labels).expect("label logits"))
    });
    group.bench_function("label-only + log-sum-exp", |b| {
        b.iter(|| {
            (
                model.token_logits(&hidden, &labels).expect("label logits"),
                model.log_normaliser(&hidden).expect("normaliser"),
            )
        })
    });
    group.bench_function("full vocabulary", |b| {
        b.iter(|| model.full_logits(&hidden).expect("full logits"))
    });
    group.finish();
}

criterion_group!(benches, prefill, heads);
criterion_main!(benches);

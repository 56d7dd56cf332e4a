//! Criterion bench of the pairwise hot path on the real SmolLM2-135M: the 12 ordered
//! comparisons of the first 4 summaries of a SummEval document, evaluated prompt by
//! prompt (naive) and as one prefix trie (tree). `nlg-judge bench pairwise` runs the full
//! 240-comparison documents; this is the short configuration for `cargo bench`.

use candle_core::Device;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nlg_judge::arch::WeightPolicy;
use nlg_judge::bench::pairwise::summeval_contexts;
use nlg_judge::engine::{load_decoder, LoadOptions};
use nlg_judge::engine::{DecoderSettings, Label, Scorer, Strategy};
use nlg_judge::judge::pairwise::run::plan_context;
use nlg_judge::judge::pairwise::{CompareOptions, PairwiseTemplate};
use nlg_judge::judge::{Attribute, Task};
use nlg_judge::runtime::resolve_model;

fn pairwise(c: &mut Criterion) {
    let _ = Device::Cpu;
    let mut options = LoadOptions::from_env().expect("load options");
    options.device = "cpu".into();
    options.weights = WeightPolicy::F32;
    options.resolve.fetch.progress = false;
    let resolved = resolve_model("smollm2-135m-instruct", &options.resolve).expect("SmolLM2");
    let mut scorer = load_decoder(&resolved, &options).expect("SmolLM2 loads");
    let data = nlg_judge::data::find_shared_data_dir().expect("../shared/data or NLG_JUDGE_DATA");
    let mut context = summeval_contexts(&data, 1).expect("SummEval").remove(0);
    context.candidates.truncate(4);
    let compare = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence").expect("attribute"),
        PairwiseTemplate::builtin("c1", Task::Summary).expect("template"),
    );
    let labels = vec![
        scorer
            .encode_label(&Label::Text(" A".into()))
            .expect("label"),
        scorer
            .encode_label(&Label::Text(" B".into()))
            .expect("label"),
    ];
    let requests = plan_context(&scorer, &context, &compare, &labels)
        .expect("plan")
        .labels
        .requests()
        .to_vec();
    eprintln!("CPU: {}", nlg_judge::runtime::cpu_features());
    let mut group = c.benchmark_group("12 SummEval comparisons");
    group.sample_size(10);
    group.throughput(Throughput::Elements(requests.len() as u64));
    for strategy in [Strategy::Naive, Strategy::Tree] {
        scorer.set_settings(DecoderSettings {
            strategy,
            ..DecoderSettings::default()
        });
        group.bench_function(format!("{strategy:?}"), |b| {
            b.iter(|| scorer.label_logprobs(&requests).expect("scores"))
        });
    }
    group.finish();
}

criterion_group!(benches, pairwise);
criterion_main!(benches);

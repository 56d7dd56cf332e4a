//! Criterion bench of a run's host side, the work around the model that a GPU does not
//! hide: planning a SummEval document's 240 comparisons (chat template, SmolLM2's
//! tokenizer, cache keys) on one thread and on every thread, and storing their 240
//! results in a result cache on disk, one transaction each and all in one (what a pass's
//! burst costs when the cache writer stores it together).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use nlg_judge::arch::WeightPolicy;
use nlg_judge::bench::pairwise::summeval_contexts;
use nlg_judge::engine::{load_decoder, LabelResult, LabelScore, LoadOptions, ResultCache};
use nlg_judge::judge::pairwise::run::{pairwise_labels, plan_context};
use nlg_judge::judge::pairwise::{CompareOptions, PairwiseTemplate};
use nlg_judge::judge::{Attribute, Task};
use nlg_judge::runtime::resolve_model;

fn host(c: &mut Criterion) {
    let mut options = LoadOptions::from_env().expect("load options");
    options.device = "cpu".into();
    options.weights = WeightPolicy::Quantized;
    options.resolve.fetch.progress = false;
    let resolved = resolve_model("smollm2-135m-instruct", &options.resolve).expect("SmolLM2");
    let scorer = load_decoder(&resolved, &options).expect("SmolLM2 loads");
    let data = nlg_judge::data::find_shared_data_dir().expect("../shared/data or NLG_JUDGE_DATA");
    let context = summeval_contexts(&data, 1).expect("SummEval").remove(0);
    let compare = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence").expect("attribute"),
        PairwiseTemplate::builtin("c1", Task::Summary).expect("template"),
    );
    let labels = pairwise_labels(&scorer).expect("labels");
    let plan = plan_context(&scorer, &context, &compare, &labels).expect("plan");
    let comparisons = plan.labels.len() as u64;
    eprintln!(
        "{comparisons} comparisons on {} rayon threads",
        rayon::current_num_threads()
    );

    let mut planning = c.benchmark_group("plan a SummEval document");
    planning.sample_size(10);
    planning.throughput(Throughput::Elements(comparisons));
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a one-thread pool");
    planning.bench_function("tokenise and key, one thread", |b| {
        b.iter(|| {
            one_thread.install(|| plan_context(&scorer, &context, &compare, &labels).expect("plan"))
        })
    });
    planning.bench_function("tokenise and key, every thread", |b| {
        b.iter(|| plan_context(&scorer, &context, &compare, &labels).expect("plan"))
    });
    planning.finish();

    let entries: Vec<_> = plan
        .labels
        .keys()
        .iter()
        .enumerate()
        .map(|(k, key)| {
            let result = LabelResult {
                labels: key
                    .labels
                    .iter()
                    .map(|tokens| LabelScore {
                        tokens: tokens.clone(),
                        logprob: -(k as f64 + 1.0).ln(),
                    })
                    .collect(),
                prompt_tokens: 500,
            };
            (key.clone(), result)
        })
        .collect();
    let fresh_cache = || {
        let dir = tempfile::tempdir().expect("temporary directory");
        let cache = ResultCache::open(&dir.path().join("results.sqlite")).expect("cache");
        (dir, cache)
    };
    let mut storing = c.benchmark_group("store a document's results");
    storing.sample_size(20);
    storing.throughput(Throughput::Elements(comparisons));
    storing.bench_function("one transaction each", |b| {
        b.iter_batched(
            fresh_cache,
            |(dir, cache)| {
                for (key, result) in &entries {
                    cache.put(key, result).expect("put");
                }
                (dir, cache)
            },
            BatchSize::PerIteration,
        )
    });
    storing.bench_function("one transaction", |b| {
        b.iter_batched(
            fresh_cache,
            |(dir, cache)| {
                cache.put_all(&entries).expect("put_all");
                (dir, cache)
            },
            BatchSize::PerIteration,
        )
    });
    storing.finish();
}

criterion_group!(benches, host);
criterion_main!(benches);

//! The level plan (issue 38) on the CPU backend: the same probabilities as the
//! depth-first tree path on every tiny architecture fixture, and the pass and operation
//! counts that keep a later change from bringing the per-node launches back.

use std::path::Path;

use anyhow::Result;
use candle_core::{DType, Device};
use nlg_judge::arch::llama::{self, LlamaModel};
use nlg_judge::engine::decoder::tree_eval::{BatchBudget, EvalStats, Plan, TreeEvaluator};
use nlg_judge::engine::decoder::trie::{QueryAt, TokenTrie};

const FAMILIES: [&str; 7] = [
    "llama3",
    "qwen3",
    "mistral",
    "phi3",
    "phi4_mini",
    "gemma2",
    "gemma3_text",
];

fn model(kind: &str) -> Result<LlamaModel> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/archs")
        .join(kind);
    // One file, or the shards an index names (phi3's fixture is sharded).
    let mut weights: Vec<_> = std::fs::read_dir(&dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    weights.retain(|p| p.extension().is_some_and(|e| e == "safetensors"));
    weights.sort();
    llama::from_safetensors(&dir.join("config.json"), &weights, &Device::Cpu)
}

/// A prompt's tokens and its queries.
type Sequence = (Vec<u32>, Vec<QueryAt>);

/// Pairwise's trie shape over a 256-token vocabulary: each context followed by a first
/// candidate, then a second one, the query at the end asking for `targets[query]`.
fn pairwise(contexts: usize, candidates: usize) -> (Vec<Sequence>, Vec<u32>) {
    let mut sequences = Vec::new();
    let mut targets = Vec::new();
    for c in 0..contexts as u32 {
        let context: Vec<u32> = (0..9 + c).map(|t| (7 * t + 31 * c + 3) % 256).collect();
        for a in 0..candidates as u32 {
            for b in 0..candidates as u32 {
                if a == b {
                    continue;
                }
                let mut tokens = context.clone();
                tokens.extend((0..3 + a).map(|t| (11 * t + 50 * a + 17) % 256));
                tokens.extend((0..2 + b).map(|t| (13 * t + 40 * b + 101) % 256));
                let query = sequences.len();
                // Also a query inside the first candidate: a node's inner position.
                let inner = context.len() + 1;
                let last = tokens.len() - 1;
                sequences.push((
                    tokens,
                    vec![
                        QueryAt {
                            position: last,
                            query: 2 * query,
                        },
                        QueryAt {
                            position: inner,
                            query: 2 * query + 1,
                        },
                    ],
                ));
                targets.extend([(query as u32 * 37) % 256, (query as u32 * 53 + 1) % 256]);
            }
        }
    }
    (sequences, targets)
}

fn run(
    model: &LlamaModel,
    trie: &TokenTrie,
    targets: &[u32],
    budget: BatchBudget,
    plan: Plan,
) -> Result<(Vec<f64>, EvalStats)> {
    let evaluator = TreeEvaluator::new(model, budget)?.with_plan(plan);
    let mut answers = vec![f64::NAN; targets.len()];
    let stats = evaluator.evaluate(trie, targets, None, &mut |q, logprob| {
        answers[q] = logprob;
        Ok(())
    })?;
    Ok((answers, stats))
}

#[test]
fn the_level_plan_gives_the_tree_paths_probabilities_on_every_family() -> Result<()> {
    let (sequences, targets) = pairwise(2, 3);
    let trie = TokenTrie::build(&sequences)?;
    let wide = BatchBudget {
        max_batch_tokens: 256,
        max_batch_rows: 64,
        ..BatchBudget::default()
    };
    // Small enough to split the contexts into pieces and each level into several passes.
    let narrow = BatchBudget {
        max_batch_tokens: 5,
        max_batch_rows: 3,
        ..BatchBudget::default()
    };
    // And no arena to spare: every subtree entered, first candidates one at a time.
    let tight = BatchBudget {
        max_arena_bytes: 0,
        ..narrow
    };
    for kind in FAMILIES {
        let model = model(kind)?;
        let (reference, _) = run(&model, &trie, &targets, wide, Plan::DepthFirst)?;
        // The fused operations (the default on the CPU and CUDA), and plain candle
        // operations (Metal's path, and the reference the fused ones replace).
        let plain = self::model(kind)?.with_candle_attention();
        for (ops, model) in [("fused", &model), ("plain", &plain)] {
            for budget in [wide, narrow, tight] {
                let (levels, stats) = run(model, &trie, &targets, budget, Plan::Levels)?;
                for (q, (a, b)) in reference.iter().zip(&levels).enumerate() {
                    let (pa, pb) = (a.exp(), b.exp());
                    assert!(
                        (pa - pb).abs() <= 1e-6 && a.is_finite(),
                        "{kind}, {ops}, budget {budget:?}, query {q}: p {pa} by the tree path, {pb} by levels"
                    );
                }
                assert_eq!(stats.tokens, trie.total_tokens(), "{kind}");
            }
        }
    }
    Ok(())
}

#[test]
fn pairwise_levels_take_three_passes_and_a_fixed_number_of_operations() -> Result<()> {
    let (sequences, targets) = pairwise(3, 4);
    let trie = TokenTrie::build(&sequences)?;
    let budget = BatchBudget {
        max_batch_tokens: 2048,
        max_batch_rows: 64,
        ..BatchBudget::default()
    };
    let model = model("llama3")?;
    let (_, levels) = run(&model, &trie, &targets, budget, Plan::Levels)?;
    // Contexts, first candidates, leaves.
    assert_eq!(levels.forward_calls, 3);
    // The fused operations per layer and pass (see `forward_level_fused`): norm, QKV
    // product, rope with the arena write, ragged attention, output product, residual,
    // norm, gate/up product, gated activation, down product, residual: 11 whatever the
    // number of rows (the bound is 12).
    assert_eq!(levels.ops_per_layer_pass_max, 11);
    // Per pass: ids, positions and the index data, plus the head's index and ids where
    // a pass answers queries; the head's two downloads in the two passes with queries
    // (inner candidate positions, leaves).
    assert_eq!((levels.uploads, levels.downloads), (13, 4));
    // The same counts with more contexts: nothing grows with the rows.
    let (more, more_targets) = pairwise(5, 4);
    let more = TokenTrie::build(&more)?;
    let (_, wider) = run(&model, &more, &more_targets, budget, Plan::Levels)?;
    assert_eq!(wider.forward_calls, 3);
    assert_eq!(wider.ops_per_layer_pass_max, levels.ops_per_layer_pass_max);
    assert_eq!(wider.uploads, levels.uploads);

    // Plain candle operations (Metal's path): fused QKV product and norm 2, heads and
    // rope 6, arena writes 4, gather 4, scores 4, mask, softmax, values and layout 4,
    // output 1, MLP 5, residuals 2 (the arena writes take 2 fewer where every token of
    // the pass is written): 30, also whatever the number of rows.
    let plain = self::model("llama3")?.with_candle_attention();
    let (_, levels) = run(&plain, &trie, &targets, budget, Plan::Levels)?;
    assert_eq!(levels.ops_per_layer_pass_max, 30);
    // Per pass: ids, positions, gather index, mask, write index and destinations (the
    // context pass reads nothing, the leaf pass writes nothing), plus the head's.
    assert_eq!((levels.uploads, levels.downloads), (17, 4));
    let (_, wider) = run(&plain, &more, &more_targets, budget, Plan::Levels)?;
    assert_eq!(wider.ops_per_layer_pass_max, levels.ops_per_layer_pass_max);
    assert_eq!(wider.uploads, levels.uploads);
    Ok(())
}

#[test]
fn bf16_and_f16_activations_stay_near_f32_by_the_level_plan() -> Result<()> {
    // The GPU's `--precision bf16` (issue 38, item 3): weights, norms and activations
    // stored in bf16 or f16, accumulation in f32, the output head in f32. On the CPU
    // the same tensors run through candle's CPU operations and our fused ones.
    let (sequences, targets) = pairwise(2, 3);
    let trie = TokenTrie::build(&sequences)?;
    let budget = BatchBudget {
        max_batch_tokens: 256,
        max_batch_rows: 64,
        ..BatchBudget::default()
    };
    for kind in FAMILIES {
        let (reference, _) = run(&model(kind)?, &trie, &targets, budget, Plan::DepthFirst)?;
        for dtype in [DType::BF16, DType::F16] {
            let low = model(kind)?.with_activations(dtype)?;
            assert_eq!(low.activation_dtype(), dtype);
            let (levels, _) = run(&low, &trie, &targets, budget, Plan::Levels)?;
            let worst = reference
                .iter()
                .zip(&levels)
                .map(|(a, b)| (a.exp() - b.exp()).abs())
                .fold(0.0, f64::max);
            eprintln!("{kind} {dtype:?}: largest |p - p_f32| {worst:.2e}");
            // The bound; and above zero: the blocks did run in the narrow type.
            assert!(
                worst <= 0.02 && worst > 0.0 && levels.iter().all(|l| l.is_finite()),
                "{kind}, {dtype:?}: largest |p - p_f32| {worst}"
            );
        }
        // Depth-first passes and generation stay f32: a clear refusal, not wrong numbers.
        let low = model(kind)?.with_activations(DType::BF16)?;
        let error = run(&low, &trie, &targets, budget, Plan::DepthFirst).unwrap_err();
        assert!(
            format!("{error:#}").contains("only the level plan runs"),
            "{kind}: {error:#}"
        );
    }
    Ok(())
}

#[test]
fn an_arena_bound_runs_the_contexts_in_waves_with_the_same_probabilities() -> Result<()> {
    // Four contexts (9-12 tokens), each with three first candidates (3-5 tokens): the
    // unbounded plan keeps every context and first candidate at once; a bound of one
    // context's subtree runs them a context at a time, and the arena stays within it.
    let (sequences, targets) = pairwise(4, 3);
    let trie = TokenTrie::build(&sequences)?;
    let wide = BatchBudget {
        max_batch_tokens: 256,
        max_batch_rows: 64,
        ..BatchBudget::default()
    };
    for kind in ["llama3", "gemma2"] {
        let model = model(kind)?;
        let per_position = model.level_arena_bytes_per_position();
        let (whole, whole_stats) = run(&model, &trie, &targets, wide, Plan::Levels)?;
        assert_eq!(whole_stats.forward_calls, 3);
        // Every context (9 + 10 + 11 + 12 tokens) and first candidate (3 + 4 + 5 per
        // context) kept, plus scratch for the leaves nobody reads (18 tokens a context).
        let (kept, scratch) = (42 + 4 * 12, 4 * 18);
        assert_eq!(
            whole_stats.peak_cache_bytes,
            (kept + scratch) * per_position
        );
        // The largest context's subtree: 12 + 3 + 4 + 5 positions; no two fit together.
        let bound = 12 + 12;
        let waves = BatchBudget {
            max_arena_bytes: bound * per_position,
            ..wide
        };
        let (answers, stats) = run(&model, &trie, &targets, waves, Plan::Levels)?;
        assert_eq!(
            stats.forward_calls,
            3 * 4,
            "{kind}: three levels per context"
        );
        assert!(
            stats.peak_cache_bytes < whole_stats.peak_cache_bytes
                && stats.peak_cache_bytes <= (bound + 18) * per_position,
            "{kind}: {} bytes kept, bound {}",
            stats.peak_cache_bytes,
            bound * per_position
        );
        for (q, (a, b)) in whole.iter().zip(&answers).enumerate() {
            assert!(
                (a.exp() - b.exp()).abs() <= 1e-6,
                "{kind}, query {q}: p {} in one wave, {} in waves",
                a.exp(),
                b.exp()
            );
        }
    }
    Ok(())
}

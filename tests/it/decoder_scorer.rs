//! The llama-family scorer on the real SmolLM2: the prefix trie against prompt-by-prompt
//! evaluation on a real SummEval document (several batch sizes and thread counts), batch
//! invariance, exact prefix finding on token ids, multi-token labels, generation, and
//! clear errors on bad requests.

use crate::common;

use anyhow::Result;
use nlg_judge::bench::pairwise::summeval_contexts;
use nlg_judge::engine::decoder::trie::{QueryAt, TokenTrie};
use nlg_judge::engine::Generate;
use nlg_judge::engine::{
    BatchBudget, ContinuationRequest, DecoderSettings, GenerationRequest, Label, LabelRequest,
    Prompt, Sampling, Scorer, Strategy, TextPrompt,
};
use nlg_judge::judge::pairwise::run::plan_context;
use nlg_judge::judge::pairwise::{CompareOptions, Design, PairwiseTemplate};
use nlg_judge::judge::{Attribute, Task};

fn settings(strategy: Strategy, rows: usize) -> DecoderSettings {
    DecoderSettings {
        strategy,
        budget: BatchBudget {
            max_batch_tokens: 2048,
            max_batch_rows: rows,
            ..BatchBudget::default()
        },
    }
}

/// Twelve comparisons (4 candidates, all ordered pairs) of the first SummEval document.
fn summeval_requests(scorer: &dyn Scorer) -> Result<Vec<LabelRequest>> {
    let mut context = summeval_contexts(&common::shared_data_dir(), 1)?.remove(0);
    context.candidates.truncate(4);
    let mut options = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence")?,
        PairwiseTemplate::builtin("c1", Task::Summary)?,
    );
    options.design = Design::Full;
    let labels = vec![
        scorer.encode_label(&Label::Text(" A".into()))?,
        scorer.encode_label(&Label::Text(" B".into()))?,
    ];
    Ok(plan_context(scorer, &context, &options, &labels)?
        .labels
        .requests()
        .to_vec())
}

fn logprobs(results: &[nlg_judge::engine::LabelResult]) -> Vec<f64> {
    results
        .iter()
        .flat_map(|r| r.labels.iter().map(|l| l.logprob))
        .collect()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn the_trie_equals_prompt_by_prompt_evaluation_on_a_real_document() -> Result<()> {
    let mut scorer = common::smollm2_scorer(settings(Strategy::Naive, 64));
    let requests = summeval_requests(&scorer)?;
    let naive = logprobs(&scorer.label_logprobs(&requests)?);
    let naive_tokens = scorer.stats().tokens;
    let naive_keys = scorer.stats().attended_keys;
    // One prompt alone: token t attends to t + 1 positions (single-token labels add none).
    for request in &requests[..2] {
        scorer.reset_stats();
        scorer.label_logprobs(std::slice::from_ref(request))?;
        let (tokens, keys) = (scorer.stats().tokens as u64, scorer.stats().attended_keys);
        assert!(tokens > 0, "the prompt was not computed again");
        assert_eq!(
            keys,
            tokens * (tokens + 1) / 2,
            "a prompt of {tokens} tokens"
        );
    }
    let mut tree_keys = None;
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        for rows in [1, 3, 64] {
            scorer.set_settings(settings(Strategy::Tree, rows));
            scorer.reset_stats();
            let tree = pool.install(|| scorer.label_logprobs(&requests))?;
            let d = max_diff(&naive, &logprobs(&tree));
            eprintln!("{threads} thread(s), {rows} row(s) per batch: largest difference {d:e}");
            assert!(
                d < 1e-4,
                "tree and naive differ by {d} ({threads} threads, {rows} rows)"
            );
            let tree_tokens = scorer.stats().tokens;
            assert!(
                tree_tokens * 3 < naive_tokens,
                "the trie computed {tree_tokens} tokens, naive {naive_tokens}"
            );
            // Batching changes how the trie's nodes are grouped, not what they attend to.
            let keys = scorer.stats().attended_keys;
            assert_eq!(*tree_keys.get_or_insert(keys), keys, "{rows} rows");
            assert!(
                keys * 2 < naive_keys,
                "tree {keys}, naive {naive_keys} keys"
            );
        }
    }
    Ok(())
}

#[test]
fn a_batch_of_prompts_gives_the_same_label_logprobs_as_one_at_a_time() -> Result<()> {
    let mut scorer = common::smollm2_scorer(settings(Strategy::Tree, 64));
    let requests: Vec<LabelRequest> = (0..8)
        .map(|i| LabelRequest {
            prompt: Prompt::plain(TextPrompt::user(format!(
                "Question {i}: which is larger, {} or {}?{} Answer:",
                i * 17,
                i * 29 + 3,
                " Think.".repeat(i)
            ))),
            labels: vec![" A".into(), " B".into(), " 12".into()],
        })
        .collect();
    let together = logprobs(&scorer.label_logprobs(&requests)?);
    let mut alone = Vec::new();
    for request in &requests {
        alone.extend(logprobs(
            &scorer.label_logprobs(std::slice::from_ref(request))?,
        ));
    }
    let d = max_diff(&together, &alone);
    assert!(d < 1e-4, "batched and single log-probs differ by {d}");
    Ok(())
}

/// Where two texts share characters but their tokens part earlier, the trie shares
/// exactly the common token prefix, computed on ids.
#[test]
fn the_trie_shares_exactly_the_common_token_prefix() -> Result<()> {
    let scorer = common::smollm2_scorer(DecoderSettings::default());
    let texts = [
        "The cat sat on the mat",
        "The cats sat on the mat",
        "The cat satisfied",
    ];
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| scorer.tokenizer().encode(t))
        .collect::<Result<_>>()?;
    let common_len = |a: &[u32], b: &[u32]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    // " cat" and " cats" are different tokens: the text prefix "The cat" is not shared.
    assert!(common_len(&ids[0], &ids[1]) < scorer.tokenizer().encode("The cat")?.len());
    let sequences: Vec<(Vec<u32>, Vec<QueryAt>)> = ids
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (
                s.clone(),
                vec![QueryAt {
                    position: s.len() - 1,
                    query: i,
                }],
            )
        })
        .collect();
    let trie = TokenTrie::build(&sequences)?;
    let root = trie.node(trie.root());
    assert_eq!(root.children.len(), 1);
    let shared = trie.node(root.children[0]);
    let expected = common_len(&ids[0], &ids[1]).min(common_len(&ids[0], &ids[2]));
    assert_eq!(shared.tokens, ids[0][..expected].to_vec());
    let unique: usize = ids.iter().map(Vec::len).sum::<usize>()
        - expected * 2
        - (common_len(&ids[0], &ids[2]) - expected);
    assert_eq!(trie.total_tokens(), unique);
    Ok(())
}

/// A two-token label's log-prob is the sum of its teacher-forced tokens, which equals
/// scoring the second token as a continuation of prompt + first token.
#[test]
fn multi_token_labels_are_teacher_forced() -> Result<()> {
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let prompt = Prompt::plain(TextPrompt::user("Rate the summary from 1 to 10. Score:"));
    let ten = scorer.encode_label(&Label::Text(" 10".into()))?;
    assert!(
        ten.len() >= 2,
        "' 10' should be several tokens for SmolLM2: {ten:?}"
    );
    let result = scorer.label_logprobs(&[LabelRequest {
        prompt: prompt.clone(),
        labels: vec![Label::Tokens(ten.clone())],
    }])?;
    let continuation = scorer.continuation_logprobs(&[ContinuationRequest {
        prompt,
        continuation: " 10".to_string(),
    }])?;
    assert_eq!(continuation[0].tokens, ten);
    let d = (result[0].labels[0].logprob - continuation[0].total_logprob()).abs();
    assert!(d < 1e-6, "label and continuation log-probs differ by {d}");
    Ok(())
}

#[test]
fn generation_is_deterministic_and_seeded() -> Result<()> {
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let request = |sampling| GenerationRequest {
        prompt: Prompt::chat(TextPrompt::user("List three colours.")),
        max_tokens: 24,
        sampling,
        stop: vec![],
    };
    let greedy = scorer.generate(&request(Sampling::Greedy))?;
    assert_eq!(greedy.tokens.len(), greedy.tokens.len().min(24));
    assert!(!greedy.text.trim().is_empty());
    assert_eq!(scorer.generate(&request(Sampling::Greedy))?, greedy);
    let sampled = |seed| {
        request(Sampling::TopP {
            temperature: 1.0,
            top_p: 0.9,
            seed,
        })
    };
    let a = scorer.generate(&sampled(1))?;
    assert_eq!(scorer.generate(&sampled(1))?, a);
    let others: Vec<_> = (2..6)
        .map(|seed| scorer.generate(&sampled(seed)))
        .collect::<Result<_>>()?;
    assert!(
        others.iter().any(|o| o.tokens != a.tokens),
        "different seeds never differ"
    );
    Ok(())
}

#[test]
fn stop_strings_end_generation() -> Result<()> {
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let greedy = scorer.generate(&GenerationRequest {
        prompt: Prompt::chat(TextPrompt::user("Count from 1 to 20, separated by commas.")),
        max_tokens: 40,
        sampling: Sampling::Greedy,
        stop: vec![],
    })?;
    let Some(cut) = greedy.text.find('5') else {
        panic!("the greedy count has no 5: {:?}", greedy.text);
    };
    let stopped = scorer.generate(&GenerationRequest {
        prompt: Prompt::chat(TextPrompt::user("Count from 1 to 20, separated by commas.")),
        max_tokens: 40,
        sampling: Sampling::Greedy,
        stop: vec!["5".to_string()],
    })?;
    assert_eq!(stopped.text, greedy.text[..cut]);
    assert_eq!(stopped.finish, nlg_judge::engine::FinishReason::Stop);
    Ok(())
}

#[test]
fn bad_requests_are_clear_errors() -> Result<()> {
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let empty_label = LabelRequest {
        prompt: Prompt::plain(TextPrompt::user("Hello")),
        labels: vec!["".into()],
    };
    let err = format!("{:#}", scorer.label_logprobs(&[empty_label]).unwrap_err());
    assert!(err.contains("empty label"), "{err}");

    let window = scorer.info().context_window;
    let long = LabelRequest {
        prompt: Prompt::plain(TextPrompt::user("word ".repeat(window + 10))),
        labels: vec![" A".into()],
    };
    let ok = LabelRequest {
        prompt: Prompt::plain(TextPrompt::user("Hello")),
        labels: vec![" A".into()],
    };
    let err = format!("{:#}", scorer.label_logprobs(&[ok, long]).unwrap_err());
    assert!(
        err.contains("request 1") && err.contains("context window"),
        "{err}"
    );

    let chat_less = LabelRequest {
        prompt: Prompt::Tokens(nlg_judge::engine::TokenPrompt {
            input: vec![1, 2, 3],
            decoder_prefix: vec![4],
        }),
        labels: vec![" A".into()],
    };
    assert!(scorer.label_logprobs(&[chat_less]).is_err());
    Ok(())
}

/// A resumed call (some requests already done) computes the pending ones bitwise as the
/// uninterrupted call did, and reports only those.
#[test]
fn resumed_calls_give_bitwise_the_uninterrupted_results() -> Result<()> {
    let mut scorer = common::smollm2_scorer(settings(Strategy::Tree, 3));
    let requests = summeval_requests(&scorer)?;
    let full = scorer.label_logprobs(&requests)?;
    let done: Vec<bool> = (0..requests.len()).map(|i| i % 3 != 1).collect();
    let mut seen = Vec::new();
    scorer.label_logprobs_resume(&requests, &done, &mut |index, result| {
        seen.push(index);
        assert_eq!(result, full[index], "request {index}");
        Ok(())
    })?;
    seen.sort_unstable();
    let pending: Vec<usize> = (0..requests.len()).filter(|&i| !done[i]).collect();
    assert_eq!(seen, pending);
    Ok(())
}

/// A run's documents through the runner's `fill_together` (what `compare` calls):
/// depth-first, one call per document, so each document's answers are the bits it gets
/// alone (a shard of the run gives the whole run's bytes); with the level plan, one call
/// and one trie for the run, passes cut across documents, within the stated tolerance
/// of each document alone (batches move the last bits).
#[test]
fn documents_of_a_run_answer_as_each_alone() -> Result<()> {
    use nlg_judge::engine::decoder::tree_eval::Plan;
    use nlg_judge::engine::{fill_together, LabelPlan};
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let mut contexts = summeval_contexts(&common::shared_data_dir(), 3)?;
    // Two summaries of each document's first 60 words: the shape, at a tenth of the cost.
    for context in &mut contexts {
        context.candidates.truncate(2);
        context.text = context
            .text
            .split_whitespace()
            .take(60)
            .collect::<Vec<_>>()
            .join(" ");
    }
    let options = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence")?,
        PairwiseTemplate::builtin("c1", Task::Summary)?,
    );
    let labels = nlg_judge::judge::pairwise::run::pairwise_labels(&scorer)?;
    let plans: Vec<LabelPlan> = contexts
        .iter()
        .map(|context| Ok(plan_context(&scorer, context, &options, &labels)?.labels))
        .collect::<Result<_>>()?;
    let run = |scorer: &mut nlg_judge::engine::DecoderScorer| -> Result<(Vec<f64>, usize)> {
        let mut plans = plans.clone();
        scorer.reset_stats();
        fill_together(&mut plans, scorer, None, &mut |_| Ok(()))?;
        let answers = plans
            .into_iter()
            .map(|plan| plan.into_results())
            .collect::<Result<Vec<_>>>()?
            .concat();
        Ok((logprobs(&answers), scorer.stats().forward_calls))
    };
    let mut alone = Vec::new();
    let mut alone_passes = 0;
    for plan in &plans {
        let results = scorer.label_logprobs(plan.requests())?;
        alone.extend(logprobs(&results));
        alone_passes += scorer.stats().forward_calls;
        scorer.reset_stats();
    }
    assert!(!scorer.batches_across_contexts());
    let (depth_first, _) = run(&mut scorer)?;
    assert_eq!(
        depth_first, alone,
        "depth-first: each document as alone, to the bit"
    );

    scorer.set_plan(Plan::Levels);
    assert!(scorer.batches_across_contexts());
    let mut level_alone = Vec::new();
    let mut level_alone_passes = 0;
    for plan in &plans {
        scorer.reset_stats();
        level_alone.extend(logprobs(&scorer.label_logprobs(plan.requests())?));
        level_alone_passes += scorer.stats().forward_calls;
    }
    let (levels, level_passes) = run(&mut scorer)?;
    let d = max_diff(&levels, &level_alone);
    eprintln!(
        "3 documents, level plan: {level_passes} passes for the run, {level_alone_passes} \
         document by document ({alone_passes} depth-first); largest difference {d:e}"
    );
    assert!(
        d < 1e-4,
        "one trie for the run and one per document differ by {d}"
    );
    assert!(
        level_passes < level_alone_passes,
        "{level_passes} passes for the run, {level_alone_passes} document by document"
    );
    Ok(())
}

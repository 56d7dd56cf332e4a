//! Completions on the real SmolLM2 (the engine side of the OpenAI-compatible endpoint):
//! prompt log-probs equal the scorer's own continuation log-probs, alternatives are the
//! distribution's most likely tokens, results do not depend on what else is in the call
//! or in the prefix cache, the cache is reused and stays within its bound, generation
//! equals the scorer's own, and token accounting is honest.

use crate::common;

use anyhow::Result;
use nlg_judge::engine::Generate;
use nlg_judge::engine::{
    ChatMessage, ChatRole, CompletionRequest, CompletionResult, ContinuationRequest, DecoderScorer,
    DecoderSettings, FinishReason, GenerationRequest, PrefixCache, Prompt, Sampling, Scorer,
    TextPrompt, TokenPrompt,
};

/// How far two computations of the same log-prob may differ: the project's bound for
/// batch invariance (the trie against prompt by prompt, a batch against one prompt).
/// Forward passes of other shapes (another batch, a cached prefix read as a separate
/// segment) round differently in the last bits of f32; seen here: up to ~2e-5.
const TOLERANCE: f64 = 1e-4;

const CONTEXT: &str = "Question: The sun is a star that sits at the centre of our solar system. Which planet is closest to it?\nAnswer:";
const ANSWERS: [&str; 4] = [" Mercury", " Venus", " Earth", " Mars, the red planet"];

fn scorer() -> DecoderScorer {
    common::smollm2_scorer(DecoderSettings::default())
}

fn tokens(ids: Vec<u32>) -> Prompt {
    Prompt::Tokens(TokenPrompt {
        input: ids,
        decoder_prefix: vec![],
    })
}

/// Context + answer as token ids (the context's ids, then the answer's), as
/// lm-evaluation-harness sends them; and the context's length.
fn context_and_answer(scorer: &DecoderScorer, answer: &str) -> Result<(Vec<u32>, usize)> {
    let mut ids = scorer.tokenizer().encode(CONTEXT)?;
    let context = ids.len();
    ids.extend(scorer.tokenizer().encode(answer)?);
    Ok((ids, context))
}

fn prompt_logprobs(result: &CompletionResult) -> Vec<f64> {
    result
        .prompt
        .iter()
        .skip(1)
        .map(|t| t.logprob.expect("a scored prompt token"))
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
fn echoed_prompt_logprobs_equal_the_scorers_continuation_logprobs() -> Result<()> {
    let mut scorer = scorer();
    let mut cache = PrefixCache::new(0);
    for answer in ANSWERS {
        let (ids, context) = context_and_answer(&scorer, answer)?;
        let result = scorer.complete(
            &[CompletionRequest::score_prompt(tokens(ids.clone()), 5)],
            &mut cache,
        )?;
        let echoed = prompt_logprobs(&result[0]);
        let continuation = scorer.continuation_logprobs(&[ContinuationRequest {
            prompt: Prompt::plain(TextPrompt::user(CONTEXT)),
            continuation: answer.to_string(),
        }])?;
        assert_eq!(continuation[0].tokens, ids[context..].to_vec());
        let d = max_diff(&echoed[context - 1..], &continuation[0].token_logprobs);
        eprintln!("{answer:?}: largest difference {d:e}");
        assert!(
            d < TOLERANCE,
            "{answer:?}: echo and continuation differ by {d}"
        );
        // Every position's alternatives: the most likely tokens, in order, the chosen
        // token among them when it is the most likely.
        for position in &result[0].prompt[1..] {
            assert_eq!(position.top.len(), 5);
            let logprob = position.logprob.unwrap();
            assert!(position
                .top
                .windows(2)
                .all(|w| w[0].logprob >= w[1].logprob));
            assert!(position.top[0].logprob >= logprob);
            let mass: f64 = position.top.iter().map(|t| t.logprob.exp()).sum();
            assert!(mass <= 1.0 + 1e-9);
            if position.top[0].token.id == position.token.id {
                assert_eq!(position.top[0].logprob, logprob);
            }
        }
        assert_eq!(result[0].prompt[0].logprob, None);
        assert!(result[0].generated.is_empty());
    }
    Ok(())
}

/// The requests of the invariance tests: prompt scoring with alternatives, and greedy
/// generation with log-probs, over prompts that share prefixes and prompts that do not.
fn mixed_requests(scorer: &DecoderScorer) -> Result<Vec<CompletionRequest>> {
    let mut requests = Vec::new();
    for answer in ANSWERS {
        let (ids, _) = context_and_answer(scorer, answer)?;
        requests.push(CompletionRequest::score_prompt(tokens(ids), 3));
    }
    let (ids, context) = context_and_answer(scorer, ANSWERS[0])?;
    // A prompt that is a prefix of another one in the call, which also generates.
    let mut prefix = CompletionRequest::score_prompt(tokens(ids[..context].to_vec()), 2);
    prefix.max_tokens = 3;
    prefix.logprobs = true;
    requests.push(prefix);
    let mut chat = CompletionRequest::generate(
        scorer.chat_prompt(&[ChatMessage::new(ChatRole::User, "Name a colour.")])?,
        6,
    );
    chat.logprobs = true;
    chat.top_logprobs = 4;
    requests.push(chat);
    requests.push(CompletionRequest::score_prompt(
        Prompt::plain(TextPrompt::user(
            "An unrelated prompt about rivers and lakes.",
        )),
        0,
    ));
    Ok(requests)
}

/// Every log-prob of a result (prompt, alternatives, generated), and its generated ids.
fn numbers(result: &CompletionResult) -> (Vec<f64>, Vec<u32>) {
    let mut values = Vec::new();
    for t in result.prompt.iter().chain(&result.generated) {
        values.extend(t.logprob);
        values.extend(t.top.iter().map(|a| a.logprob));
    }
    let ids = result.generated.iter().map(|t| t.token.id).collect();
    (values, ids)
}

#[test]
fn results_do_not_depend_on_the_rest_of_the_call_or_on_the_cache() -> Result<()> {
    let mut scorer = scorer();
    let requests = mixed_requests(&scorer)?;
    let alone: Vec<CompletionResult> = requests
        .iter()
        .map(|r| {
            scorer
                .complete(std::slice::from_ref(r), &mut PrefixCache::new(0))
                .map(|mut v| v.remove(0))
        })
        .collect::<Result<_>>()?;
    let together = scorer.complete(&requests, &mut PrefixCache::new(0))?;
    let mut reversed_requests = requests.clone();
    reversed_requests.reverse();
    let mut reversed = scorer.complete(&reversed_requests, &mut PrefixCache::new(0))?;
    reversed.reverse();
    // Warm: every prompt's start is in the cache (the first call fills it).
    let mut cache = PrefixCache::new(256 << 20);
    let cold = scorer.complete(&requests, &mut cache)?;
    let warm = scorer.complete(&requests, &mut cache)?;
    let mut largest = 0.0f64;
    for (k, expected) in alone.iter().enumerate() {
        let (values, ids) = numbers(expected);
        for (name, other) in [
            ("together", &together[k]),
            ("reversed", &reversed[k]),
            ("cold cache", &cold[k]),
            ("warm cache", &warm[k]),
        ] {
            let (other_values, other_ids) = numbers(other);
            assert_eq!(
                ids, other_ids,
                "request {k} {name}: generated tokens differ"
            );
            assert_eq!(expected.text, other.text, "request {k} {name}");
            let d = max_diff(&values, &other_values);
            largest = largest.max(d);
            assert!(d < TOLERANCE, "request {k} {name}: log-probs differ by {d}");
        }
    }
    eprintln!("largest difference from the request alone: {largest:e}");
    assert!(warm
        .iter()
        .all(|r| r.cached_prompt_tokens == r.prompt.len()));
    Ok(())
}

#[test]
fn the_prefix_cache_skips_cached_tokens_and_keeps_within_its_bound() -> Result<()> {
    let mut scorer = scorer();
    let mut cache = PrefixCache::new(256 << 20);
    let (first, context) = context_and_answer(&scorer, ANSWERS[0])?;
    let (second, _) = context_and_answer(&scorer, ANSWERS[3])?;
    scorer.reset_stats();
    let a = scorer.complete(
        &[CompletionRequest::score_prompt(tokens(first.clone()), 1)],
        &mut cache,
    )?;
    assert_eq!(a[0].cached_prompt_tokens, 0);
    assert_eq!(scorer.stats().tokens, first.len());
    scorer.reset_stats();
    let b = scorer.complete(
        &[CompletionRequest::score_prompt(tokens(second.clone()), 1)],
        &mut cache,
    )?;
    // Only the new answer's tokens were computed; the context came from the cache.
    let shared = first
        .iter()
        .zip(&second)
        .take_while(|(x, y)| x == y)
        .count();
    assert!(shared >= context);
    assert_eq!(b[0].cached_prompt_tokens, shared);
    assert_eq!(scorer.stats().tokens, second.len() - shared);
    let cold = scorer.complete(
        &[CompletionRequest::score_prompt(tokens(second), 1)],
        &mut PrefixCache::new(0),
    )?;
    let d = max_diff(&prompt_logprobs(&b[0]), &prompt_logprobs(&cold[0]));
    assert!(d < TOLERANCE, "cached and cold differ by {d}");

    // A bound of about two prompts' worth: many different prompts never take more.
    let per_token = cache.stats().bytes / cache.stats().tokens;
    let bound = per_token * 2 * first.len();
    let mut small = PrefixCache::new(bound);
    for k in 0..6 {
        let prompt = Prompt::plain(TextPrompt::user(format!("{k}. {CONTEXT}")));
        scorer.complete(&[CompletionRequest::score_prompt(prompt, 0)], &mut small)?;
        let stats = small.stats();
        assert!(stats.bytes <= bound, "{stats:?} over {bound}");
    }
    let stats = small.stats();
    assert!(stats.evictions > 0 && stats.entries > 0, "{stats:?}");
    Ok(())
}

#[test]
fn generation_equals_the_scorers_own_and_tokens_are_counted_honestly() -> Result<()> {
    let mut scorer = scorer();
    let prompt = scorer.chat_prompt(&[ChatMessage::new(ChatRole::User, "List three colours.")])?;
    let own = scorer.generate(&GenerationRequest {
        prompt: prompt.clone(),
        max_tokens: 12,
        sampling: Sampling::Greedy,
        stop: vec![],
    })?;
    let mut request = CompletionRequest::generate(prompt.clone(), 12);
    request.logprobs = true;
    // Two identical requests: the second computes none of its prompt.
    let results = scorer.complete(&[request.clone(), request], &mut PrefixCache::new(0))?;
    for result in &results {
        let ids: Vec<u32> = result.generated.iter().map(|t| t.token.id).collect();
        assert_eq!(ids, own.tokens);
        assert_eq!(result.text, own.text);
        assert_eq!(result.finish, FinishReason::MaxTokens);
    }
    assert_eq!(results[0].cached_prompt_tokens, 0);
    assert_eq!(results[1].cached_prompt_tokens, results[1].prompt.len());

    // Seeded sampling repeats; a stop string cuts the text.
    let sampled = |seed| {
        let mut r = CompletionRequest::generate(prompt.clone(), 8);
        r.sampling = Sampling::TopP {
            temperature: 1.0,
            top_p: 0.9,
            seed,
        };
        r
    };
    let once = scorer.complete(&[sampled(7), sampled(7)], &mut PrefixCache::new(0))?;
    assert_eq!(once[0].text, once[1].text);
    let mut stopped = CompletionRequest::generate(prompt, 12);
    let cut = own.text.chars().nth(3).unwrap().to_string();
    stopped.stop = vec![cut.clone()];
    let result = scorer.complete(&[stopped], &mut PrefixCache::new(0))?;
    assert_eq!(result[0].finish, FinishReason::Stop);
    assert!(!result[0].text.contains(&cut));
    assert!(own.text.starts_with(&result[0].text));
    Ok(())
}

#[test]
fn requests_the_model_cannot_take_are_bad_requests() -> Result<()> {
    let mut scorer = scorer();
    let mut cache = PrefixCache::new(0);
    let window = scorer.info().context_window;
    let kind = |error: anyhow::Error| nlg_judge::engine::error_kind(&error);
    let mut long = CompletionRequest::generate(Prompt::plain(TextPrompt::user("Hello")), window);
    long.logprobs = true;
    let error = scorer.complete(&[long], &mut cache).unwrap_err();
    assert!(format!("{error:#}").contains("context window"), "{error:#}");
    assert_eq!(kind(error), nlg_judge::engine::ErrorKind::BadRequest);
    let mut many = CompletionRequest::score_prompt(Prompt::plain(TextPrompt::user("Hi")), 21);
    many.max_tokens = 1;
    assert_eq!(
        kind(scorer.complete(&[many], &mut cache).unwrap_err()),
        nlg_judge::engine::ErrorKind::BadRequest
    );
    let outside = CompletionRequest::score_prompt(tokens(vec![1, u32::MAX]), 0);
    assert!(scorer.complete(&[outside], &mut cache).is_err());
    Ok(())
}

/// A prompt that is a prefix of another in the same call (the remote backend's echo of
/// labels " Mars" and " Mars, the red planet" after one context): it ends inside the
/// other's trie node, and both answer as they do alone.
#[test]
fn a_prompt_that_is_a_prefix_of_another_answers_as_alone() -> Result<()> {
    let mut scorer = scorer();
    let (long, _) = context_and_answer(&scorer, ANSWERS[3])?;
    let (short, _) = context_and_answer(&scorer, " Mars")?;
    assert!(long.starts_with(&short) && long.len() > short.len());
    let ask = |ids: &Vec<u32>| CompletionRequest {
        max_tokens: 1,
        ..CompletionRequest::score_prompt(tokens(ids.clone()), 3)
    };
    let together = scorer.complete(&[ask(&short), ask(&long)], &mut PrefixCache::new(0))?;
    for (ids, got) in [&short, &long].into_iter().zip(&together) {
        let alone = scorer.complete(&[ask(ids)], &mut PrefixCache::new(0))?;
        let d = max_diff(&prompt_logprobs(got), &prompt_logprobs(&alone[0]));
        assert!(d < TOLERANCE, "prompt of {} tokens: {d}", ids.len());
        assert_eq!(
            numbers(got).1,
            numbers(&alone[0]).1,
            "the same token generated"
        );
    }
    Ok(())
}

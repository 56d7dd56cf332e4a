//! The OpenAI-compatible routes on loopback: lm-evaluation-harness's echo requests give
//! the scorer's own continuation log-probs, chat log-probs are the model's, concurrent
//! requests are served in one round with the same answers as alone (batch invariance on
//! this route) and reuse each other's prefixes, the prefix cache keeps within its bound,
//! errors come in OpenAI's shape with our status codes, and streaming, the model list
//! and the tokenizer routes answer as clients expect.

use std::sync::Arc;

use anyhow::Result;
use nlg_judge::engine::Generate;
use nlg_judge::engine::{
    ChatMessage, ChatRole, CompletionRequest, ContinuationRequest, DecoderScorer, DecoderSettings,
    GenerationRequest, GenerationSink, Label, LabelRequest, LabelResult, MockScorer, ModelInfo,
    PrefixCache, Prompt, RenderedPrompt, Sampling, Scorer, TextPrompt, TokenPrompt,
};
use nlg_judge::runtime::TextTokenizer;
use nlg_judge::server::{ServerConfig, WorkerStats};
use serde_json::{json, Value};

use crate::common;
use crate::common::gate::Gate;
use crate::common::service::{Answer, Service};

const MODEL: &str = "smollm2-135m-instruct";
const CONTEXT: &str = "Question: Which planet is closest to the sun?\nAnswer:";
const ANSWERS: [&str; 4] = [" Mercury", " Venus", " Earth", " Mars, the red planet"];
/// The project's bound for batch invariance (see `completions.rs`).
const TOLERANCE: f64 = 1e-4;

fn smollm2() -> DecoderScorer {
    common::smollm2_scorer(DecoderSettings::default())
}

fn config(prefix_cache_bytes: usize) -> ServerConfig {
    let mut config = ServerConfig::default();
    config.worker.prefix_cache_bytes = prefix_cache_bytes;
    config
}

/// Context and answer token ids, and the context's length, as lm-evaluation-harness
/// sends them.
fn lm_eval_prompt(tokenizer: &TextTokenizer, answer: &str) -> (Vec<u32>, usize) {
    let mut ids = tokenizer.encode(CONTEXT).unwrap();
    let context = ids.len();
    ids.extend(tokenizer.encode(answer).unwrap());
    (ids, context)
}

/// lm-evaluation-harness's loglikelihood payload (`LocalCompletionsAPI._create_payload`).
fn lm_eval_body(ids: &[u32]) -> Value {
    json!({"model": MODEL, "prompt": ids, "temperature": 0, "max_tokens": 1,
           "logprobs": 1, "seed": 1234, "echo": true})
}

fn chat_body(text: &str) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": text}],
           "logprobs": true, "top_logprobs": 5, "max_tokens": 6, "temperature": 0})
}

fn sampled_body() -> Value {
    json!({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.8,
           "top_p": 0.9, "seed": 7, "n": 2, "logprobs": 2})
}

/// Every log-prob of an answer (chosen tokens and alternatives, in order), and its texts.
fn numbers(answer: &Value) -> (Vec<f64>, Vec<String>) {
    let mut values = Vec::new();
    let mut texts = Vec::new();
    for choice in answer["choices"].as_array().unwrap() {
        let logprobs = &choice["logprobs"];
        if let Some(content) = logprobs["content"].as_array() {
            texts.push(choice["message"]["content"].as_str().unwrap().to_string());
            for token in content {
                values.push(token["logprob"].as_f64().unwrap());
                for top in token["top_logprobs"].as_array().unwrap() {
                    values.push(top["logprob"].as_f64().unwrap());
                }
            }
        } else {
            texts.push(choice["text"].as_str().unwrap().to_string());
            for lp in logprobs["token_logprobs"].as_array().unwrap() {
                values.extend(lp.as_f64());
            }
            for top in logprobs["top_logprobs"].as_array().unwrap() {
                for lp in top.as_object().into_iter().flat_map(|o| o.values()) {
                    values.push(lp.as_f64().unwrap());
                }
            }
        }
    }
    (values, texts)
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn cached(answer: &Answer) -> usize {
    let body = answer.json();
    let field = body["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap() as usize;
    let header: usize = answer
        .header("nlg-judge-cached-prompt-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(field, header);
    field
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lm_eval_echo_requests_give_the_scorers_continuation_logprobs() -> Result<()> {
    let mut scorer = smollm2();
    let service = Service::start(Box::new(smollm2()), config(64 << 20)).await;
    for answer in ANSWERS {
        let (ids, context) = lm_eval_prompt(scorer.tokenizer(), answer);
        let reply = service.post("/v1/completions", &lm_eval_body(&ids)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let body = reply.json();
        assert_eq!(body["object"], "text_completion");
        assert_eq!(body["model"], MODEL);
        let choice = &body["choices"][0];
        let logprobs = &choice["logprobs"];
        // The prompt's tokens and the one generated token, as lm-eval slices them.
        let tokens = logprobs["token_logprobs"].as_array().unwrap();
        assert_eq!(tokens.len(), ids.len() + 1);
        assert!(tokens[0].is_null() && logprobs["top_logprobs"][0].is_null());
        let echoed: Vec<f64> = tokens[context..ids.len()]
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let expected = scorer.continuation_logprobs(&[ContinuationRequest {
            prompt: Prompt::plain(TextPrompt::user(CONTEXT)),
            continuation: answer.to_string(),
        }])?;
        let d = max_diff(&echoed, &expected[0].token_logprobs);
        assert!(d < TOLERANCE, "{answer:?}: differs by {d}");
        // lm-eval's greedy check compares each token's log-prob with its top-1.
        for (lp, top) in tokens[1..]
            .iter()
            .zip(logprobs["top_logprobs"].as_array().unwrap()[1..].iter())
        {
            let top = top.as_object().unwrap();
            assert_eq!(top.len(), 1);
            assert!(top.values().next().unwrap().as_f64().unwrap() >= lp.as_f64().unwrap());
        }
        // The echoed text is the prompt's, then the generated token's; offsets follow.
        let text = choice["text"].as_str().unwrap();
        assert!(text.starts_with(&format!("{CONTEXT}{answer}")), "{text}");
        let joined: String = logprobs["tokens"].as_array().unwrap()[..ids.len()]
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(joined, format!("{CONTEXT}{answer}"));
        let usage = &body["usage"];
        assert_eq!(usage["prompt_tokens"], ids.len());
        assert_eq!(usage["completion_tokens"], 1);
        assert_eq!(usage["total_tokens"], ids.len() + 1);
        // After the first answer, the context comes from the prefix cache.
        if answer != ANSWERS[0] {
            assert!(cached(&reply) >= context, "{}", reply.text);
        }
    }
    // max_tokens 0 with echo: the prompt alone.
    let (ids, _) = lm_eval_prompt(scorer.tokenizer(), ANSWERS[0]);
    let mut body = lm_eval_body(&ids);
    body["max_tokens"] = json!(0);
    let reply = service.post("/v1/completions", &body).await.json();
    assert_eq!(
        reply["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .len(),
        ids.len()
    );
    assert_eq!(reply["usage"]["completion_tokens"], 0);
    service.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_logprobs_are_the_models_own() -> Result<()> {
    let mut scorer = smollm2();
    let service = Service::start(Box::new(smollm2()), config(64 << 20)).await;
    let question = "Rate the summary 'The cat sat.' from 1 to 5.";
    let reply = service
        .post("/v1/chat/completions", &chat_body(question))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    assert_eq!(body["object"], "chat.completion");
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let prompt = scorer.chat_prompt(&[ChatMessage::new(ChatRole::User, question)])?;
    let own = scorer.generate(&GenerationRequest {
        prompt: prompt.clone(),
        max_tokens: 6,
        sampling: Sampling::Greedy,
        stop: vec![],
    })?;
    assert_eq!(choice["message"]["content"], own.text.as_str());
    let content = choice["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), own.tokens.len());
    let joined: String = content
        .iter()
        .map(|t| t["token"].as_str().unwrap())
        .collect();
    assert_eq!(joined, own.text);
    // Each generated token's log-prob is the label log-prob of that token after the
    // prompt and the tokens before it; greedy: the first alternative is the token.
    let expected = scorer.label_logprobs(&[LabelRequest {
        prompt: prompt.clone(),
        labels: (1..=own.tokens.len())
            .map(|k| Label::Tokens(own.tokens[..k].to_vec()))
            .collect(),
    }])?;
    let mut before = 0.0;
    for (k, token) in content.iter().enumerate() {
        let label = expected[0].labels[k].logprob;
        let lp = token["logprob"].as_f64().unwrap();
        assert!((lp - (label - before)).abs() < TOLERANCE, "token {k}");
        before = label;
        let top = token["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 5);
        assert_eq!(top[0]["token"], token["token"]);
        assert_eq!(top[0]["logprob"], token["logprob"]);
        assert_eq!(top[0]["bytes"], token["bytes"]);
        assert!(top
            .windows(2)
            .all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
    }
    assert_eq!(
        body["usage"]["prompt_tokens"],
        scorer.encode_prompt(&prompt)?.input.len()
    );
    // Generated tokens are counted with the end-of-sequence token that ended them.
    let ended = usize::from(choice["finish_reason"] == "stop");
    assert_eq!(body["usage"]["completion_tokens"], own.tokens.len() + ended);

    // Without logprobs: null; a system message and earlier turns go through the template.
    let reply = service
        .post(
            "/v1/chat/completions",
            &json!({"model": MODEL, "max_tokens": 3, "temperature": 0, "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Name a fruit."}]}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.json()["choices"][0]["logprobs"].is_null());
    service.shutdown().await;
    Ok(())
}

/// SmolLM2 whose completion calls wait at a gate, so that requests pile up in the queue.
struct Gated {
    inner: DecoderScorer,
    gate: Arc<Gate>,
}

impl Scorer for Gated {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt> {
        self.inner.render(prompt)
    }
    fn encode_prompt(&self, prompt: &Prompt) -> Result<TokenPrompt> {
        self.inner.encode_prompt(prompt)
    }
    fn encode_label(&self, label: &Label) -> Result<Vec<u32>> {
        self.inner.encode_label(label)
    }
    fn label_logprobs_each(
        &mut self,
        requests: &[LabelRequest],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        self.inner.label_logprobs_each(requests, on_result)
    }
    fn continuation_logprobs(
        &mut self,
        requests: &[ContinuationRequest],
    ) -> Result<Vec<nlg_judge::engine::ContinuationResult>> {
        self.inner.continuation_logprobs(requests)
    }
    fn text_tokenizer(&self) -> Option<&TextTokenizer> {
        self.inner.text_tokenizer()
    }
    fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Prompt> {
        self.inner.chat_prompt(messages)
    }
    fn generate_each(
        &mut self,
        requests: &[CompletionRequest],
        cache: &mut PrefixCache,
        sink: &mut dyn GenerationSink,
    ) -> Result<()> {
        self.gate.pass();
        self.inner.generate_each(requests, cache, sink)
    }
}

/// Batch invariance on the OpenAI route: requests served together in one round answer as
/// each does alone on a fresh service without a prefix cache, and again from a warm cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_a_round_and_answer_as_alone() -> Result<()> {
    let tokenizer = smollm2().tokenizer().clone();
    let gate = Arc::new(Gate::default());
    let gated = Gated {
        inner: smollm2(),
        gate: gate.clone(),
    };
    let busy = Service::start(Box::new(gated), config(64 << 20)).await;
    let alone = Service::start(Box::new(smollm2()), config(0)).await;

    let mut bodies: Vec<(&str, Value)> = Vec::new();
    for answer in ANSWERS {
        let (ids, _) = lm_eval_prompt(&tokenizer, answer);
        bodies.push(("/v1/completions", lm_eval_body(&ids)));
    }
    bodies.push(("/v1/chat/completions", chat_body("Name a colour.")));
    bodies.push(("/v1/chat/completions", chat_body("Name a fruit.")));
    bodies.push(("/v1/completions", sampled_body()));
    let mut text = sampled_body();
    text["prompt"] = json!([CONTEXT, "Another prompt entirely."]);
    text["n"] = json!(1);
    text["echo"] = json!(true);
    bodies.push(("/v1/completions", text));

    // One request holds the worker at the gate while the others queue.
    let addr = busy.addr;
    let first = tokio::spawn(async move {
        common::service::request(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            chat_body("Say hello.").to_string().as_bytes(),
        )
        .await
    });
    let waiting = gate.clone();
    tokio::task::spawn_blocking(move || waiting.wait_for(1)).await?;
    let handles: Vec<_> = bodies
        .iter()
        .cloned()
        .map(|(path, body)| {
            tokio::spawn(async move {
                common::service::request(addr, "POST", path, &[], body.to_string().as_bytes()).await
            })
        })
        .collect();
    let bodies_len = bodies.len();
    let queued = busy.stats.clone();
    common::wait::until_async("every request of the round to be queued", || {
        let queued = queued.clone();
        async move { WorkerStats::get(&queued.queued) >= bodies_len }
    })
    .await;
    gate.release();
    assert_eq!(first.await?.status, 200);
    let mut together = Vec::new();
    for handle in handles {
        together.push(handle.await?);
    }
    assert_eq!(WorkerStats::get(&busy.stats.rounds), 2);
    assert_eq!(WorkerStats::get(&busy.stats.jobs), bodies.len() + 1);

    let mut largest = 0.0f64;
    for (k, ((path, body), shared)) in bodies.iter().zip(&together).enumerate() {
        assert_eq!(shared.status, 200, "request {k}: {}", shared.text);
        let single = alone.post(path, body).await;
        assert_eq!(cached(&single), 0);
        let warm = busy.post(path, body).await;
        let (expected, expected_texts) = numbers(&single.json());
        for (name, other) in [("together", shared), ("warm cache", &warm)] {
            let (values, texts) = numbers(&other.json());
            assert_eq!(texts, expected_texts, "request {k} {name}");
            let d = max_diff(&values, &expected);
            largest = largest.max(d);
            assert!(d < TOLERANCE, "request {k} {name}: differs by {d}");
        }
        // Warm: every prompt was computed before.
        assert_eq!(
            cached(&warm),
            warm.json()["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
            "request {k}"
        );
    }
    eprintln!("largest difference from the request alone: {largest:e}");
    // In the round, the shared context is computed once: by whichever of the requests
    // that begin with it the worker took first (arrival order decides which), and every
    // other one reuses it. The four answers and the text prompts (whose first prompt is
    // the context alone) share it; a request that computed it reports fewer cached
    // tokens than the context has, one that reused it at least as many.
    let context = tokenizer.encode(CONTEXT)?.len();
    let sharing: Vec<usize> = (0..ANSWERS.len()).chain([bodies.len() - 1]).collect();
    let computed: Vec<usize> = sharing
        .iter()
        .copied()
        .filter(|&k| cached(&together[k]) < context)
        .collect();
    assert_eq!(
        computed.len(),
        1,
        "requests {computed:?} computed the shared context of {context} tokens (cached: {:?})",
        sharing
            .iter()
            .map(|&k| cached(&together[k]))
            .collect::<Vec<_>>()
    );
    // Seeded sampling: the two choices differ from each other, and repeat.
    let sampled = together[6].json();
    let again = busy.post("/v1/completions", &sampled_body()).await.json();
    for k in 0..2 {
        assert_eq!(
            sampled["choices"][k]["text"], again["choices"][k]["text"],
            "choice {k}"
        );
    }
    busy.shutdown().await;
    alone.shutdown().await;
    Ok(())
}

/// A prompt stays cached while the bound allows, and is forgotten when later prompts
/// need the room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefix_cache_keeps_recent_prompts_within_its_bound() -> Result<()> {
    let prompt = |k: usize| {
        json!({"model": MODEL, "prompt": format!("{k} {CONTEXT}"), "max_tokens": 0,
               "echo": true, "logprobs": 0})
    };
    // About 48 KiB per token for SmolLM2 at f32: room for one prompt of ~20 tokens only.
    let small = Service::start(Box::new(smollm2()), config(1536 << 10)).await;
    let large = Service::start(Box::new(smollm2()), config(64 << 20)).await;
    for service in [&small, &large] {
        let first = service.post("/v1/completions", &prompt(0)).await;
        assert_eq!(cached(&first), 0, "{}", first.text);
        let tokens = first.json()["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
        assert_eq!(
            cached(&service.post("/v1/completions", &prompt(0)).await),
            tokens
        );
        for k in 1..4 {
            service.post("/v1/completions", &prompt(k)).await;
        }
        let again = cached(&service.post("/v1/completions", &prompt(0)).await);
        if std::ptr::eq(service, &small) {
            assert!(again < tokens, "still cached: {again} of {tokens}");
        } else {
            assert_eq!(again, tokens);
        }
    }
    small.shutdown().await;
    large.shutdown().await;
    Ok(())
}

/// The `top_logprobs` entry of a completion's `position` as (id, log-prob) pairs
/// (tokens named `token_id:N`).
fn alternatives_by_id(answer: &Value, position: usize) -> Vec<(u32, f64)> {
    let top = answer["choices"][0]["logprobs"]["top_logprobs"][position]
        .as_object()
        .unwrap();
    let mut pairs: Vec<(u32, f64)> = top
        .iter()
        .map(|(key, value)| {
            let id = key.strip_prefix("token_id:").unwrap().parse().unwrap();
            (id, value.as_f64().unwrap())
        })
        .collect();
    pairs.sort_by_key(|pair| pair.0);
    pairs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_generation_takes_only_allowed_tokens_and_reports_the_whole_distribution(
) -> Result<()> {
    let scorer = smollm2();
    let ids = scorer.tokenizer().encode(CONTEXT)?;
    let service = Service::start(Box::new(smollm2()), config(64 << 20)).await;
    let ask = |extra: Value| {
        let mut body = json!({"model": MODEL, "prompt": ids, "max_tokens": 1, "logprobs": 5,
                              "temperature": 0, "return_tokens_as_token_ids": true});
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let free = service.post("/v1/completions", &ask(json!({}))).await;
    assert_eq!(free.status, 200, "{}", free.text);
    let free_top = alternatives_by_id(&free.json(), 0);
    assert_eq!(free_top.len(), 5);
    // A token outside the free top-5: the first of " banana".
    let banana = scorer.tokenizer().encode(" banana")?[0];
    assert!(free_top.iter().all(|(id, _)| *id != banana), "{free_top:?}");
    let restricted = service
        .post(
            "/v1/completions",
            &ask(json!({"allowed_token_ids": [banana]})),
        )
        .await;
    assert_eq!(restricted.status, 200, "{}", restricted.text);
    let answer = restricted.json();
    let logprobs = &answer["choices"][0]["logprobs"];
    assert_eq!(logprobs["tokens"][0], format!("token_id:{banana}"));
    let lp = logprobs["token_logprobs"][0].as_f64().unwrap();
    // The model's own log-prob of " banana" after the prompt, as an echo gives it.
    let mut with_banana = ids.clone();
    with_banana.push(banana);
    let echo = service
        .post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": with_banana, "max_tokens": 0, "logprobs": 1,
                    "echo": true}),
        )
        .await
        .json();
    let echoed = echo["choices"][0]["logprobs"]["token_logprobs"][ids.len()]
        .as_f64()
        .unwrap();
    assert!((lp - echoed).abs() < TOLERANCE, "{lp} vs echo {echoed}");
    // The alternatives are the free top-5, the whole distribution's, as in vLLM's
    // default (which also adds the generated token; OpenAI's shape lists the top-5).
    let expected = free_top.clone();
    let got = alternatives_by_id(&answer, 0);
    assert_eq!(got.len(), expected.len());
    for ((id, value), (want_id, want)) in got.iter().zip(&expected) {
        assert_eq!(id, want_id);
        assert!(
            (value - want).abs() < TOLERANCE,
            "token {id}: {value} vs {want}"
        );
    }
    // Several tokens from a set of two, sampled: every one of them is in the set.
    let venus = scorer.tokenizer().encode(" Venus")?[0];
    let sampled = service
        .post(
            "/v1/completions",
            &ask(
                json!({"allowed_token_ids": [banana, venus], "max_tokens": 6,
                        "temperature": 1.0, "seed": 3}),
            ),
        )
        .await;
    assert_eq!(sampled.status, 200, "{}", sampled.text);
    let tokens = sampled.json()["choices"][0]["logprobs"]["tokens"].clone();
    assert_eq!(tokens.as_array().unwrap().len(), 6);
    for token in tokens.as_array().unwrap() {
        let id: u32 = token.as_str().unwrap()["token_id:".len()..].parse()?;
        assert!(id == banana || id == venus, "generated {id}");
    }
    // An id past the vocabulary is the request's fault, named.
    let vocabulary = scorer.tokenizer().vocab_size();
    let foreign = service
        .post(
            "/v1/completions",
            &ask(json!({"allowed_token_ids": [vocabulary + 5]})),
        )
        .await;
    assert_eq!(foreign.status, 422, "{}", foreign.text);
    assert!(
        foreign
            .text
            .contains(&format!("allowed token id {}", vocabulary + 5)),
        "{}",
        foreign.text
    );
    service.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_come_in_openai_shape_with_our_status_codes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cret\n").unwrap();
    let mut config = ServerConfig {
        tokens: Some(nlg_judge::server::Tokens::from_file(&path).unwrap()),
        ..ServerConfig::default()
    };
    config.limits.max_body_bytes = 4096;
    let service = Service::start(Box::new(MockScorer::new()), config).await;
    let auth = [("Authorization", "Bearer s3cret")];
    let post = |body: String| {
        let service = &service;
        async move {
            service
                .request("POST", "/v1/completions", &auth, body.as_bytes())
                .await
        }
    };
    let check = |answer: &Answer, status: u16, param: Option<&str>, code: Option<&str>| {
        assert_eq!(answer.status, status, "{}", answer.text);
        let error = &answer.json()["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{error}"
        );
        assert!(error["type"].is_string(), "{error}");
        assert_eq!(error["param"].as_str(), param, "{error}");
        assert_eq!(error["code"].as_str(), code, "{error}");
    };
    let unauthorised = service
        .request("POST", "/v1/chat/completions", &[], b"{}")
        .await;
    check(&unauthorised, 401, None, Some("invalid_api_key"));
    assert_eq!(unauthorised.json()["error"]["type"], "authentication_error");
    assert_eq!(unauthorised.header("www-authenticate"), Some("Bearer"));
    check(
        &post("{\"model\": \"mock\",\n \"prompt\": }".into()).await,
        400,
        None,
        None,
    );
    check(
        &post(json!({"model": "mock", "prompt": "x", "temperature": "hot"}).to_string()).await,
        400,
        Some("temperature"),
        None,
    );
    check(
        &post(json!({"model": "gpt-4o", "prompt": "x"}).to_string()).await,
        404,
        Some("model"),
        Some("model_not_found"),
    );
    check(
        &post(json!({"model": "mock", "prompt": "x".repeat(5000)}).to_string()).await,
        413,
        None,
        Some("request_too_large"),
    );
    // The mock gives no log-probs: a request it cannot take is 422.
    let no_logprobs =
        post(json!({"model": "mock", "prompt": "x", "logprobs": 1}).to_string()).await;
    check(&no_logprobs, 422, None, None);
    assert!(
        no_logprobs.text.contains("log-probabilities"),
        "{}",
        no_logprobs.text
    );
    // So is a restricted generation, where the scorer cannot restrict.
    let restricted = post(
        json!({"model": "mock", "prompt": "x", "max_tokens": 1, "allowed_token_ids": [1]})
            .to_string(),
    )
    .await;
    check(&restricted, 422, None, None);
    assert!(
        restricted.text.contains("allowed tokens"),
        "{}",
        restricted.text
    );
    // Generation alone works on any scorer.
    let plain = post(json!({"model": "mock", "prompt": "x", "max_tokens": 3}).to_string()).await;
    assert_eq!(plain.status, 200, "{}", plain.text);
    assert_eq!(plain.json()["choices"][0]["text"], "");

    // The model list satisfies OpenAI clients and this API's own users.
    let models = service
        .request("GET", "/v1/models", &auth, b"")
        .await
        .json();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "mock");
    assert_eq!(models["data"][0]["object"], "model");
    assert_eq!(models["models"][0]["name"], "mock");
    assert!(models["criteria"].as_array().unwrap().len() >= 9);
    let one = service.request("GET", "/v1/models/mock", &auth, b"").await;
    assert_eq!(one.json()["id"], "mock");
    check(
        &service.request("GET", "/v1/models/other", &auth, b"").await,
        404,
        Some("model"),
        Some("model_not_found"),
    );
    service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_prompts_streams_and_tokenizer_routes() -> Result<()> {
    let scorer = smollm2();
    let service = Service::start(Box::new(smollm2()), config(64 << 20)).await;
    let window = scorer.info().context_window;
    let too_long: Vec<u32> = vec![100; window + 1];
    let reply = service
        .post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": too_long, "max_tokens": 0}),
        )
        .await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(reply.json()["error"]["code"], "context_length_exceeded");

    // Streaming: the same answer as server-sent events.
    let mut body = chat_body("Name a colour.");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let reply = service.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let events: Vec<&str> = reply
        .text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap())
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    body["stream"] = json!(false);
    body.as_object_mut().unwrap().remove("stream_options");
    let whole = service.post("/v1/chat/completions", &body).await.json();
    assert_eq!(streamed, whole["choices"][0]["message"]["content"]);
    let usage = &chunks.last().unwrap()["usage"];
    for field in ["prompt_tokens", "completion_tokens"] {
        assert_eq!(usage[field], whole["usage"][field]);
    }

    // vLLM's tokenizer routes, as lm-evaluation-harness calls them.
    let info = service.get("/tokenizer_info").await.json();
    assert_eq!(info["eos_token"], "<|im_end|>");
    let tokenized = service
        .post(
            "/tokenize",
            &json!({"prompt": CONTEXT, "add_special_tokens": false}),
        )
        .await
        .json();
    let ids = scorer.tokenizer().encode(CONTEXT)?;
    assert_eq!(tokenized["tokens"], json!(ids));
    assert_eq!(tokenized["count"], ids.len());
    let text = service
        .post("/detokenize", &json!({"tokens": ids}))
        .await
        .json();
    assert_eq!(text["prompt"], CONTEXT);
    let bad = service
        .post("/detokenize", &json!({"tokens": [u32::MAX]}))
        .await;
    assert_eq!(bad.status, 400);
    service.shutdown().await;
    Ok(())
}

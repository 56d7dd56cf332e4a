//! The remote backend (`--backend URL`): a model served by an engine, scored through the
//! same `Scorer` interface as a model loaded here.
//!
//! Against a stand-in engine whose answers the test scripts: labels read from the top-K
//! and, for the rest, by echo, exactly; busy answers retried and counted; an engine
//! without log-probabilities, one without echo, a different tokenizer and a slow engine
//! each refused by name; an engine that dies mid-run loses nothing and a rerun asks only
//! for the rest. Against our own service on loopback (a real HTTP engine): the tiny
//! llama fixture served equals the same model in process, through the library and
//! through the command line; SmolLM2's rubric feedbacks, absolute and relative, equal
//! the local run's.

use crate::common;
use crate::common::engine::{models, ok, FakeEngine, Reply, Script};

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use nlg_judge::arch::{Precision, WeightPolicy};
use nlg_judge::engine::remote::{
    self, EndpointOptions, RemoteOptions, RemoteScorer, RemoteSettings,
};
use nlg_judge::engine::{
    load_scorer, plan_label, Label, LabelPlan, LabelRequest, LoadOptions, Prompt, ResultCache,
    Scorer, TextPrompt,
};
use serde_json::{json, Value};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archs/llama3")
}

fn options(base: &str, model: &str, tokenizer: &std::path::Path) -> RemoteOptions {
    RemoteOptions {
        endpoint: EndpointOptions {
            base: base.to_string(),
            token: None,
            ca_file: None,
            timeout: Duration::from_secs(30),
            retries: 3,
            backoff: Duration::from_millis(1),
        },
        model: model.to_string(),
        tokenizer: Some(tokenizer.display().to_string()),
        settings: RemoteSettings {
            concurrency: 4,
            top_k: 20,
            accept_top_k_only: false,
        },
        resolve: common::resolve_options(),
        progress: Default::default(),
    }
}

/// The stand-in model: `log P(t | prompt)`, a fixed function of the prompt and `t`.
fn lp(prompt: &[u32], t: u32) -> f64 {
    let sum: u64 = prompt.iter().map(|&i| u64::from(i)).sum();
    -1.0 - ((sum + 3 * u64::from(t)) % 11) as f64 / 4.0
}

fn ids(body: &Value) -> Vec<u32> {
    body["prompt"]
        .as_array()
        .expect("prompts go as token ids")
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// A completions answer as vLLM gives it (tokens by id): top-K over ids 0..20 at the
/// next position, or with `echo` every prompt token's log-prob (the first `null`).
fn completion(body: &Value, echo_allowed: bool, logprobs_allowed: bool) -> Reply {
    completion_of(lp, body, echo_allowed, logprobs_allowed)
}

/// [`completion`] of the stand-in model `lp`.
fn completion_of(
    lp: fn(&[u32], u32) -> f64,
    body: &Value,
    echo_allowed: bool,
    logprobs_allowed: bool,
) -> Reply {
    if let Some(prompts) = body["prompt"].as_array().filter(|p| p[0].is_array()) {
        // A list of prompts: one choice each, by index, listed last first.
        let mut choices = Vec::new();
        for (index, prompt) in prompts.iter().enumerate().rev() {
            let mut one = body.clone();
            one["prompt"] = prompt.clone();
            let (_, _, text) = completion_of(lp, &one, echo_allowed, logprobs_allowed);
            let mut choice = serde_json::from_str::<Value>(&text).unwrap()["choices"][0].clone();
            choice["index"] = json!(index);
            choices.push(choice);
        }
        return ok(json!({ "choices": choices }));
    }
    let prompt = ids(body);
    if !logprobs_allowed {
        return ok(
            json!({"choices": [{"text": "x", "logprobs": null, "finish_reason": "length"}]}),
        );
    }
    let name = |t: u32| format!("token_id:{t}");
    if body["echo"] == json!(true) {
        if !echo_allowed {
            return ok(json!({"choices": [{"text": "x", "logprobs": {
                "tokens": [name(0)], "token_logprobs": [lp(&prompt, 0)], "top_logprobs": [null]
            }}]}));
        }
        let mut tokens: Vec<String> = prompt.iter().map(|&t| name(t)).collect();
        let mut values: Vec<Value> = vec![Value::Null];
        for i in 1..prompt.len() {
            values.push(json!(lp(&prompt[..i], prompt[i])));
        }
        tokens.push(name(0));
        values.push(json!(lp(&prompt, 0)));
        return ok(json!({"choices": [{"text": "x", "logprobs": {
            "tokens": tokens, "token_logprobs": values
        }}]}));
    }
    let top: serde_json::Map<String, Value> = (0..20u32)
        .map(|t| (name(t), json!(lp(&prompt, t))))
        .collect();
    ok(json!({"choices": [{"text": "x", "logprobs": {
        "tokens": [name(0)], "token_logprobs": [lp(&prompt, 0)], "top_logprobs": [top]
    }}]}))
}

/// An engine serving `fake` with both routes, `/tokenize` absent.
fn full_engine() -> Arc<Script> {
    Arc::new(|path: &str, body: &Value| match path {
        "/v1/models" => models("fake"),
        "/v1/completions" => completion(body, true, true),
        _ => (404, Vec::new(), r#"{"detail":"Not Found"}"#.to_string()),
    })
}

/// Requests with one-token labels inside the top-K (5, 6), one outside (200) and a
/// two-token label (7, 8).
fn requests() -> Vec<LabelRequest> {
    (0..6)
        .map(|k| LabelRequest {
            prompt: Prompt::Tokens(nlg_judge::engine::TokenPrompt {
                input: vec![1, 40 + k, 41, 42 + 2 * k],
                decoder_prefix: Vec::new(),
            }),
            labels: vec![
                Label::Tokens(vec![5]),
                Label::Tokens(vec![6]),
                Label::Tokens(vec![200]),
                Label::Tokens(vec![7, 8]),
            ],
        })
        .collect()
}

fn expected(request: &LabelRequest) -> Vec<f64> {
    let Prompt::Tokens(tokens) = &request.prompt else {
        unreachable!()
    };
    let p = &tokens.input;
    let with = |extra: &[u32]| [p.as_slice(), extra].concat();
    vec![
        lp(p, 5),
        lp(p, 6),
        lp(p, 200),
        lp(p, 7) + lp(&with(&[7]), 8),
    ]
}

fn logprobs(scorer: &mut RemoteScorer, requests: &[LabelRequest]) -> Result<Vec<Vec<f64>>> {
    Ok(scorer
        .label_logprobs(requests)?
        .iter()
        .map(|r| r.labels.iter().map(|l| l.logprob).collect())
        .collect())
}

#[test]
fn labels_come_from_the_top_k_and_by_echo_exactly() -> Result<()> {
    let engine = FakeEngine::start(full_engine());
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    let requests = requests();
    let got = logprobs(&mut scorer, &requests)?;
    for (request, got) in requests.iter().zip(&got) {
        assert_eq!(got, &expected(request), "exact, as the engine gave them");
    }
    let routes = scorer.routes().expect("found on the first request");
    assert!(routes.top_k && routes.echo && routes.ids, "{routes:?}");
    let counts = scorer.label_counts();
    // Two labels per prompt from the top-K; the one outside it and the two-token one by echo.
    assert_eq!(counts.top_k.load(Ordering::Relaxed), 12);
    assert_eq!(counts.echo.load(Ordering::Relaxed), 12);
    assert!(scorer.info().fingerprint.starts_with("remote-"));
    assert_eq!(scorer.info().name, "fake");
    // No tokenize route here: each engine's shape tried once (vLLM's, llama.cpp's and
    // TGI's bodies on /tokenize, llama-cpp-python's /extras/tokenize), then said, not failed.
    assert_eq!(engine.count("/tokenize"), 3);
    assert_eq!(engine.count("/extras/tokenize"), 1);
    Ok(())
}

#[test]
fn busy_answers_are_retried_and_counted() -> Result<()> {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let engine = FakeEngine::start(Arc::new(move |path: &str, body: &Value| match path {
        "/v1/models" => models("fake"),
        "/v1/completions" => match seen.fetch_add(1, Ordering::SeqCst) {
            0 => (
                429,
                vec![("Retry-After".into(), "0".into())],
                r#"{"error":{"message":"slow down"}}"#.into(),
            ),
            1 => (503, Vec::new(), r#"{"error":"queue full"}"#.into()),
            _ => completion(body, true, true),
        },
        _ => (404, Vec::new(), String::new()),
    }));
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    let requests = requests();
    let got = logprobs(&mut scorer, &requests[..2])?;
    assert_eq!(got[0], expected(&requests[0]));
    assert!(
        scorer.summary().contains("2 retried, 0 failed"),
        "{}",
        scorer.summary()
    );
    Ok(())
}

#[test]
fn an_engine_without_log_probabilities_is_refused_by_name() -> Result<()> {
    let engine = FakeEngine::start(Arc::new(|path: &str, body: &Value| match path {
        "/v1/models" => models("fake"),
        "/v1/completions" => completion(body, true, false),
        _ => (404, Vec::new(), String::new()),
    }));
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    let error = format!("{:#}", scorer.label_logprobs(&requests()).unwrap_err());
    assert!(error.contains("gives no log-probabilities"), "{error}");
    assert!(error.contains("top-K") && error.contains("echo"), "{error}");
    Ok(())
}

#[test]
fn top_k_alone_needs_the_flag_and_every_output_says_so() -> Result<()> {
    let script: Arc<Script> = Arc::new(|path: &str, body: &Value| match path {
        "/v1/models" => models("fake"),
        "/v1/completions" => completion(body, false, true),
        _ => (404, Vec::new(), String::new()),
    });
    let engine = FakeEngine::start(script);
    let one_token: Vec<LabelRequest> = requests()
        .into_iter()
        .map(|mut r| {
            r.labels.truncate(3);
            r
        })
        .collect();
    let mut refused = remote::connect(options(&engine.base, "fake", &fixture()))?;
    let error = format!("{:#}", refused.label_logprobs(&one_token).unwrap_err());
    assert!(error.contains("--accept-top-k-only"), "{error}");

    let mut accepting = options(&engine.base, "fake", &fixture());
    accepting.settings.accept_top_k_only = true;
    let mut scorer = remote::connect(accepting)?;
    let got = logprobs(&mut scorer, &one_token)?;
    let Prompt::Tokens(first) = &one_token[0].prompt else {
        unreachable!()
    };
    let bound = (0..20)
        .map(|t| lp(&first.input, t))
        .fold(f64::INFINITY, f64::min);
    assert_eq!(got[0][..2], expected(&one_token[0])[..2]);
    assert_eq!(
        got[0][2], bound,
        "outside the top-K: the K-th log-prob, an upper bound"
    );
    assert!(
        scorer.info().name.ends_with("[top-k only]"),
        "{}",
        scorer.info().name
    );
    assert_eq!(scorer.label_counts().bounded.load(Ordering::Relaxed), 6);
    Ok(())
}

#[test]
fn a_different_tokenizer_and_an_unknown_model_are_named() {
    let engine = FakeEngine::start(Arc::new(|path: &str, _: &Value| match path {
        "/v1/models" => models("fake"),
        "/tokenize" => ok(json!({"tokens": [1, 2, 3]})),
        _ => (404, Vec::new(), String::new()),
    }));
    let error = format!(
        "{:#}",
        remote::connect(options(&engine.base, "fake", &fixture()))
            .err()
            .expect("refused")
    );
    assert!(error.contains("token mismatch"), "{error}");
    assert!(error.contains("--tokenizer"), "{error}");
    let error = format!(
        "{:#}",
        remote::connect(options(&engine.base, "other", &fixture()))
            .err()
            .expect("refused")
    );
    assert!(
        error.contains("does not serve a model named 'other'"),
        "{error}"
    );
    assert!(
        error.contains("fake"),
        "the served names are listed: {error}"
    );
}

#[test]
fn a_slow_engine_times_out_naming_the_flag() -> Result<()> {
    let engine = FakeEngine::start(Arc::new(|path: &str, body: &Value| match path {
        "/v1/models" => models("fake"),
        "/v1/completions" => {
            std::thread::sleep(Duration::from_millis(2500));
            completion(body, true, true)
        }
        _ => (404, Vec::new(), String::new()),
    }));
    let mut slow = options(&engine.base, "fake", &fixture());
    slow.endpoint.timeout = Duration::from_secs(1);
    slow.endpoint.retries = 0;
    let mut scorer = remote::connect(slow)?;
    let error = format!("{:#}", scorer.label_logprobs(&requests()[..1]).unwrap_err());
    assert!(error.contains("--backend-timeout"), "{error}");
    Ok(())
}

#[test]
fn a_dead_engine_loses_nothing_and_a_rerun_asks_only_for_the_rest() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cache = ResultCache::open(&dir.path().join("cache.sqlite"))?;
    let plan = |scorer: &dyn Scorer| -> Result<LabelPlan> {
        let mut plan = LabelPlan::new();
        for request in requests() {
            plan.push(plan_label(scorer, "test", request, None)?);
        }
        Ok(plan)
    };
    // The engine answers the detection's two requests without echo (top-K and
    // restricted-generation probes) and three prompts', then fails.
    let answered = Arc::new(AtomicUsize::new(0));
    let count = answered.clone();
    let dying = FakeEngine::start(Arc::new(move |path: &str, body: &Value| match path {
        "/v1/models" => models("fake"),
        "/v1/completions" if body["echo"] != json!(true) => {
            if count.fetch_add(1, Ordering::SeqCst) >= 5 {
                return (500, Vec::new(), r#"{"error":"engine died"}"#.into());
            }
            completion(body, true, true)
        }
        "/v1/completions" => completion(body, true, true),
        _ => (404, Vec::new(), String::new()),
    }));
    let mut one_at_a_time = options(&dying.base, "fake", &fixture());
    one_at_a_time.settings.concurrency = 1;
    let mut scorer = remote::connect(one_at_a_time.clone())?;
    let mut first = plan(&scorer)?;
    let error = first
        .fill(&mut scorer, Some(&cache), &mut |_| Ok(()))
        .unwrap_err();
    assert!(format!("{error:#}").contains("engine died"), "{error:#}");
    drop(scorer);
    dying.kill();

    // Another engine (same model); the rerun takes three results from the cache.
    let engine = FakeEngine::start(full_engine());
    one_at_a_time.endpoint.base = engine.base.clone();
    let mut scorer = remote::connect(one_at_a_time)?;
    let mut second = plan(&scorer)?;
    assert_eq!(
        second.lookup(Some(&cache))?,
        3,
        "what the dead engine answered is kept"
    );
    second.fill(&mut scorer, Some(&cache), &mut |_| Ok(()))?;
    // Three prompts left, two requests each (top-K, and one echo of a list of the two
    // labels it lacks), after the detection's three (top-K, echo and restricted
    // generation probes; this engine ignores the restriction).
    assert_eq!(engine.count("/v1/completions"), 3 + 3 * 2);
    for (request, result) in requests().iter().zip(second.into_results()?) {
        let got: Vec<f64> = result.labels.iter().map(|l| l.logprob).collect();
        assert_eq!(got, expected(request));
    }
    Ok(())
}

fn fixture_scorer() -> Result<Box<dyn Scorer>> {
    let options = LoadOptions {
        resolve: common::resolve_options(),
        device: "cpu".to_string(),
        weights: WeightPolicy::F32,
        precision: Precision::F32,
        decoder: Default::default(),
        memory: Default::default(),
        progress: Default::default(),
    };
    load_scorer(fixture().to_str().expect("UTF-8"), &options)
}

/// Text prompts with one-token and longer labels, as methods ask them.
fn text_requests() -> Vec<LabelRequest> {
    let texts = [
        "The library opened a new reading room for children.",
        "Compare the two summaries. Which is more coherent?",
        "Score the response from 1 to 10.",
    ];
    texts
        .iter()
        .map(|text| LabelRequest {
            prompt: Prompt::plain(TextPrompt::user(*text).with_answer_prefix(" Answer:")),
            labels: vec![
                Label::Text(" A".into()),
                Label::Text(" B".into()),
                Label::Text(" 10".into()),
                Label::Text(" more coherent".into()),
            ],
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_served_by_our_service_equals_the_same_model_in_process() -> Result<()> {
    let service = common::service::Service::start(fixture_scorer()?, Default::default()).await;
    let base = format!("http://{}/v1", service.addr);
    let (remote_lp, local_lp, routes) = tokio::task::spawn_blocking(move || -> Result<_> {
        let requests = text_requests();
        let mut local = fixture_scorer()?;
        let local_lp: Vec<Vec<f64>> = local
            .label_logprobs(&requests)?
            .iter()
            .map(|r| r.labels.iter().map(|l| l.logprob).collect())
            .collect();
        let mut remote = remote::connect(options(&base, "llama3", &fixture()))?;
        let remote_lp = logprobs(&mut remote, &requests)?;
        let restricted = remote.label_counts().restricted.load(Ordering::Relaxed);
        Ok((remote_lp, local_lp, (remote.routes(), restricted)))
    })
    .await??;
    let (routes, restricted) = routes;
    service.shutdown().await;
    let routes = routes.expect("found");
    // Our service takes `allowed_token_ids` as vLLM does: labels outside the top-K by
    // restricted generation.
    assert!(
        routes.top_k && routes.echo && routes.ids && routes.restricted && restricted > 0,
        "{routes:?}, {restricted} labels restricted"
    );
    let mut largest = 0f64;
    for (r, l) in remote_lp.iter().flatten().zip(local_lp.iter().flatten()) {
        largest = largest.max((r - l).abs());
    }
    eprintln!("served vs in process: largest |Δ log P| = {largest:e}");
    // Both sides compute in f32; the service batches its requests differently from an
    // in-process call, so sums round differently: the trie-vs-naive tolerance.
    assert!(
        largest < 1e-4,
        "served and in-process log-probs differ by {largest}"
    );
    Ok(())
}

/// `nlg-judge serve` of `model` on a free loopback port: the process, the
/// reader of its stderr (kept open while it runs) and its URL.
fn serve_model(
    model: &std::ffi::OsStr,
    dir: &std::path::Path,
) -> Result<(
    std::process::Child,
    std::io::BufReader<std::process::ChildStderr>,
    String,
)> {
    let mut serve = Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args(["serve", "--addr", "127.0.0.1:0", "--model"])
        .arg(model)
        .env("NLG_JUDGE_CACHE", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    // The service says where it listens on stderr.
    let mut said = std::io::BufReader::new(serve.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("serving") {
        line.clear();
        if std::io::BufRead::read_line(&mut said, &mut line)? == 0 {
            panic!("the service ended before listening");
        }
    }
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    Ok((serve, said, url))
}

/// Candidates short enough for quick feedbacks.
const SHORT_TEXTS: [&str; 5] = [
    "A cat sat.",
    "The mat was red.",
    "Rain fell all day.",
    "Birds sang.",
    "Ok.",
];

/// Rubric grading of `texts` (one context's candidates, a terse rubric: a quick run) by
/// the command line's `command` (its flags, without the rubric, input and outputs) with
/// SmolLM2, locally and through `--backend` (our own service in front of the same model,
/// three requests at a time): the rows the run writes (`--output`, or `rows` where given:
/// `--comparisons-out`), local then served.
fn local_and_served(
    command: &[&str],
    rows: Option<&str>,
    texts: &[&str],
) -> Result<(Vec<Value>, Vec<Value>)> {
    let bin = env!("CARGO_BIN_EXE_nlg-judge");
    let dir = tempfile::tempdir()?;
    common::card_file("smollm2-135m-instruct");
    let (mut serve, said, url) = serve_model("smollm2-135m-instruct".as_ref(), dir.path())?;
    let rubric = dir.path().join("terse.toml");
    std::fs::write(
        &rubric,
        "name = \"Coherence\"\ncriterion = \"Is it clear?\"\ndescriptions = [\"no\", \
         \"barely\", \"partly\", \"mostly\", \"yes\"]\n",
    )?;
    let input = dir.path().join("short.jsonl");
    let lines: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            serde_json::json!({"context_id": "c", "context": "", "candidate_id": format!("s{i}"),
                "candidate": text})
            .to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n")?;
    let run = |extra: &[&str], name: &str| -> Result<Vec<Value>> {
        let out = dir.path().join(format!("{name}.jsonl"));
        let written = dir.path().join(format!("{name}-rows.jsonl"));
        let mut cli = Command::new(bin);
        cli.args(command)
            .arg("--rubric")
            .arg(&rubric)
            .arg("--input")
            .arg(&input)
            .arg("--output")
            .arg(&out)
            .arg("--cache")
            .arg(dir.path().join(format!("{name}.sqlite")))
            .args(extra)
            .env("NLG_JUDGE_CACHE", dir.path());
        if let Some(flag) = rows {
            cli.arg(flag).arg(&written);
        }
        let output = cli.output()?;
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(
            std::fs::read_to_string(if rows.is_some() { &written } else { &out })?
                .lines()
                .map(serde_json::from_str)
                .collect::<Result<Vec<Value>, _>>()?,
        )
    };
    let local = run(&["--model", "smollm2-135m-instruct"], "local");
    let backend = format!("{url}/v1");
    let served = run(
        &[
            "--backend",
            &backend,
            "--model",
            "smollm2-135m-instruct",
            "--concurrency",
            "3",
        ],
        "served",
    );
    let _ = serve.kill();
    let _ = serve.wait();
    drop(said);
    Ok((local?, served?))
}

/// Rubric grading with feedback through `--backend` (our own service in front of
/// SmolLM2): the feedbacks go to the engine concurrently and come back as the
/// local run writes them; the scores read after them agree.
#[test]
fn rubric_feedback_with_backend_equals_the_local_run() -> Result<()> {
    let command = ["score", "--method", "rubric", "--max-feedback-tokens", "12"];
    let (local, served) = local_and_served(&command, None, &SHORT_TEXTS)?;
    assert_eq!(local.len(), 5);
    assert_eq!(local.len(), served.len());
    for (a, b) in local.iter().zip(&served) {
        assert_eq!(a["candidate"], b["candidate"]);
        assert_eq!(a["feedback"], b["feedback"], "{}", a["candidate"]);
        assert_eq!(a["format"], b["format"], "{}", a["candidate"]);
        let (x, y) = (a["score"].as_f64().unwrap(), b["score"].as_f64().unwrap());
        assert!((x - y).abs() < 1e-4, "{}: {x} vs {y}", a["candidate"]);
    }
    Ok(())
}

/// Relative rubric grading with feedback through `--backend` (issue 58: "a `--backend`
/// run against our own `serve` giving the same feedbacks"): every ordered pair's
/// feedback is the local run's, token for token, and so is its format; P(A), read after
/// the feedback and the marker, agrees within 1e-4. The local run reads it from the
/// feedback's own keys and values, in a batch; the service from its own forward pass over
/// the prompt and the feedback, sent as token ids: the same f32 arithmetic summed in
/// other orders (2e-6 apart when measured, the rows' sixth decimal), where a different
/// prompt, answer or label token would move P(A) by far more than 1e-4.
#[test]
fn relative_rubric_feedback_with_backend_equals_the_local_run() -> Result<()> {
    let command = [
        "compare",
        "--rank",
        "win-ratio",
        "--max-feedback-tokens",
        "12",
    ];
    let (local, served) = local_and_served(&command, Some("--comparisons-out"), &SHORT_TEXTS[..4])?;
    assert_eq!(local.len(), 12, "every ordered pair of four");
    assert_eq!(local.len(), served.len());
    let mut largest: f64 = 0.0;
    for (a, b) in local.iter().zip(&served) {
        let pair = format!("{} vs {}", a["a"], a["b"]);
        assert_eq!((&a["a"], &a["b"]), (&b["a"], &b["b"]));
        assert!(a["feedback"].is_string(), "{pair}: {a}");
        assert_eq!(a["feedback"], b["feedback"], "{pair}");
        assert_eq!(a["format"], b["format"], "{pair}");
        let (x, y) = (a["p_a"].as_f64().unwrap(), b["p_a"].as_f64().unwrap());
        largest = largest.max((x - y).abs());
        assert!((x - y).abs() < 1e-4, "{pair}: P(A) {x} vs {y}");
    }
    eprintln!("relative grading, served vs local: largest |delta P(A)| = {largest:e}");
    Ok(())
}

#[test]
fn compare_with_backend_on_the_command_line_equals_the_local_run() -> Result<()> {
    let bin = env!("CARGO_BIN_EXE_nlg-judge");
    let dir = tempfile::tempdir()?;
    let (mut serve, said, url) = serve_model(fixture().as_os_str(), dir.path())?;
    let input = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/library.jsonl");
    let run = |extra: &[&str], name: &str| -> Result<(Vec<f64>, String)> {
        let pairs = dir.path().join(format!("{name}_pairs.jsonl"));
        let output = Command::new(bin)
            .args([
                "compare",
                "--attribute",
                "coherence",
                "--rank",
                "win-ratio",
                "--input",
            ])
            .arg(&input)
            .arg("--output")
            .arg(dir.path().join(format!("{name}.jsonl")))
            .arg("--comparisons-out")
            .arg(&pairs)
            .arg("--cache")
            .arg(dir.path().join(format!("{name}.sqlite")))
            .args(extra)
            .env("NLG_JUDGE_CACHE", dir.path())
            .output()?;
        let log = String::from_utf8_lossy(&output.stderr).to_string();
        assert!(output.status.success(), "{name}: {log}");
        let p = std::fs::read_to_string(&pairs)?
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).map(|v| v["p_a"].as_f64().unwrap()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((p, log))
    };
    let fixture_arg = fixture().display().to_string();
    let (local, _) = run(&["--model", &fixture_arg], "local")?;
    let backend = format!("{url}/v1");
    let (served, log) = run(
        &[
            "--backend",
            &backend,
            "--model",
            "llama3",
            "--tokenizer",
            &fixture_arg,
        ],
        "served",
    )?;
    let _ = serve.kill();
    let _ = serve.wait();
    drop(said);
    assert_eq!(local.len(), served.len());
    assert_eq!(local.len(), 20);
    let largest = local
        .iter()
        .zip(&served)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(largest < 1e-5, "p_a differs by {largest}");
    assert!(log.contains("requests, 0 retried, 0 failed"), "{log}");
    // A flag that only a local model takes is refused by name (exit 2).
    let refused = Command::new(bin)
        .args(["compare", "--attribute", "coherence", "--input"])
        .arg(&input)
        .args([
            "--backend",
            &backend,
            "--model",
            "llama3",
            "--precision",
            "bf16",
        ])
        .output()?;
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr)
        .contains("--precision applies to a model loaded here"));
    Ok(())
}

/// The log-probabilities of a completions answer: tokens, values, and each position's
/// alternatives' values, most likely first.
fn completion_logprobs(answer: &Value) -> (Vec<String>, Vec<Option<f64>>, Vec<Vec<f64>>) {
    let logprobs = &answer["choices"][0]["logprobs"];
    let tokens = logprobs["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("no tokens in {answer}"))
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let values = logprobs["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::as_f64)
        .collect();
    let tops = logprobs["top_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let mut found: Vec<f64> = entry
                .as_object()
                .map(|m| m.values().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            found.sort_by(|a, b| b.total_cmp(a));
            found
        })
        .collect();
    (tokens, values, tops)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_service_in_front_of_an_engine_answers_with_the_engines_log_probs() -> Result<()> {
    let engine = common::service::Service::start(fixture_scorer()?, Default::default()).await;
    let base = format!("http://{}/v1", engine.addr);
    let remote = tokio::task::spawn_blocking(move || -> Result<RemoteScorer> {
        remote::connect(options(&base, "llama3", &fixture()))
    })
    .await??;
    let front = common::service::Service::start(Box::new(remote), Default::default()).await;
    let bodies = [
        // lm-evaluation-harness's log-likelihood request: the prompt scored, nothing made.
        json!({"model": "llama3", "prompt": "The library opened a new reading room.",
               "max_tokens": 0, "echo": true, "logprobs": 3, "temperature": 0}),
        // Generated tokens with their alternatives (deepeval's G-Eval reads these).
        json!({"model": "llama3", "prompt": "Score the response from 1 to 10.",
               "max_tokens": 4, "logprobs": 2, "temperature": 0}),
        // Both at once.
        json!({"model": "llama3", "prompt": "Which summary is more coherent?",
               "max_tokens": 2, "echo": true, "logprobs": 1, "temperature": 0}),
        // A generation restricted to two tokens, passed on to the engine.
        json!({"model": "llama3", "prompt": "Which summary is more coherent?",
               "max_tokens": 3, "logprobs": 2, "temperature": 0,
               "allowed_token_ids": [40, 41]}),
    ];
    for body in &bodies {
        let direct = engine.post("/v1/completions", body).await;
        let through = front.post("/v1/completions", body).await;
        assert_eq!(direct.status, 200, "{}", direct.text);
        assert_eq!(through.status, 200, "{}", through.text);
        let (direct, through) = (direct.json(), through.json());
        assert_eq!(
            direct["choices"][0]["text"], through["choices"][0]["text"],
            "{body}"
        );
        let (tokens_d, values_d, tops_d) = completion_logprobs(&direct);
        let (tokens_t, values_t, tops_t) = completion_logprobs(&through);
        assert_eq!(tokens_d, tokens_t, "{body}");
        assert!(!tokens_d.is_empty());
        let close = |a: f64, b: f64| (a - b).abs() < 1e-4;
        for (d, t) in values_d.iter().zip(&values_t) {
            match (d, t) {
                (Some(d), Some(t)) => assert!(close(*d, *t), "{d} vs {t} in {body}"),
                _ => assert_eq!(d.is_some(), t.is_some(), "{body}"),
            }
        }
        assert_eq!(tops_d.len(), tops_t.len());
        for (d, t) in tops_d.iter().zip(&tops_t) {
            assert_eq!(d.len(), t.len(), "{body}");
            assert!(
                d.iter().zip(t).all(|(d, t)| close(*d, *t)),
                "{d:?} vs {t:?}"
            );
        }
    }
    front.shutdown().await;
    engine.shutdown().await;

    // An engine that ignores `allowed_token_ids` (it generates token 0): an error naming
    // the field, not an unrestricted generation.
    let engine = FakeEngine::start(full_engine());
    let base = engine.base.clone();
    let remote = tokio::task::spawn_blocking(move || -> Result<RemoteScorer> {
        remote::connect(options(&base, "fake", &fixture()))
    })
    .await??;
    let front = common::service::Service::start(Box::new(remote), Default::default()).await;
    let ignored = front
        .post(
            "/v1/completions",
            &json!({"model": "fake", "prompt": [5, 6], "max_tokens": 1, "temperature": 0,
                    "allowed_token_ids": [7]}),
        )
        .await;
    assert_ne!(ignored.status, 200, "{}", ignored.text);
    assert!(
        ignored.text.contains("outside `allowed_token_ids`"),
        "{}",
        ignored.text
    );
    front.shutdown().await;
    Ok(())
}

/// The fixture tokenizer's `<s>`.
const BOS: u32 = 1;

/// An engine in the manner of llama-cpp-python's server: prompts as text only (a prompt
/// of ids is a 500 validation error quoting the input), tokens named by text,
/// `/extras/tokenize`, and an echo that leaves out every BOS-id token. `shifted`: an echo
/// whose values belong to the next position (a misaligned engine).
fn text_only_engine(shifted: bool) -> Arc<Script> {
    let tokenizer = Arc::new(
        nlg_judge::runtime::TextTokenizer::from_json_file(
            &fixture().join("tokenizer.json"),
            Default::default(),
        )
        .expect("the fixture's tokenizer"),
    );
    Arc::new(move |path: &str, body: &Value| {
        let text = |id: u32| tokenizer.decode(&[id], false).unwrap();
        match path {
            "/v1/models" => models("fake"),
            "/extras/tokenize" => {
                let ids = tokenizer.encode(body["input"].as_str().unwrap()).unwrap();
                ok(json!({ "tokens": ids }))
            }
            "/v1/completions" => {
                let Some(prompt) = body["prompt"].as_str() else {
                    return (
                        500,
                        Vec::new(),
                        json!({"error": {"message": format!(
                            "1 validation error: {{'type': 'string_type', 'loc': ('body', \
                             'prompt', 'str'), 'msg': 'Input should be a valid string', \
                             'input': {}}}", body["prompt"])}})
                        .to_string(),
                    );
                };
                let ids = tokenizer.encode(prompt).unwrap();
                if body["echo"] == json!(true) {
                    let mut tokens = Vec::new();
                    let mut values = Vec::new();
                    for i in 0..=ids.len() {
                        let (id, value) = match i {
                            i if i == ids.len() => (9, lp(&ids, 9)),
                            0 => (ids[0], f64::NAN),
                            i if shifted => (ids[i], lp(&ids[..(i + 1).min(ids.len())], ids[i])),
                            i => (ids[i], lp(&ids[..i], ids[i])),
                        };
                        if id == BOS && i < ids.len() {
                            continue; // left out wherever it is, as llama-cpp-python does
                        }
                        tokens.push(text(id));
                        values.push(if value.is_nan() {
                            Value::Null
                        } else {
                            json!(value)
                        });
                    }
                    return ok(json!({"choices": [{"text": prompt, "logprobs": {
                        "tokens": tokens, "token_logprobs": values
                    }}]}));
                }
                let top: serde_json::Map<String, Value> =
                    (0..20u32).map(|t| (text(t), json!(lp(&ids, t)))).collect();
                ok(json!({"choices": [{"text": text(0), "logprobs": {
                    "tokens": [text(0)], "token_logprobs": [lp(&ids, 0)], "top_logprobs": [top]
                }}]}))
            }
            _ => (404, Vec::new(), r#"{"detail":"Not Found"}"#.to_string()),
        }
    })
}

#[test]
fn an_engine_that_takes_text_prompts_only_is_read_by_text_exactly() -> Result<()> {
    let engine = FakeEngine::start(text_only_engine(false));
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    assert_eq!(
        engine.count("/extras/tokenize"),
        1,
        "the tokenizers were compared"
    );
    let requests = text_requests();
    let got = logprobs(&mut scorer, &requests)?;
    let (mut by_top_k, mut by_echo) = (0, 0);
    for (request, got) in requests.iter().zip(&got) {
        let prompt = scorer.encode_prompt(&request.prompt)?.input;
        for (label, got) in request.labels.iter().zip(got) {
            let tokens = scorer.encode_label(label)?;
            let mut context = prompt.clone();
            let mut want = 0.0;
            for &t in &tokens {
                want += lp(&context, t);
                context.push(t);
            }
            assert_eq!(*got, want, "label {label:?}: exact, as the engine gave it");
            match tokens.len() == 1 && tokens[0] < 20 {
                true => by_top_k += 1,
                false => by_echo += 1,
            }
        }
    }
    let counts = scorer.label_counts();
    assert!(by_echo > 0, "some labels need the echo");
    assert!(counts.echo.load(Ordering::Relaxed) >= by_echo);
    assert_eq!(
        counts.top_k.load(Ordering::Relaxed) + counts.echo.load(Ordering::Relaxed),
        by_top_k + by_echo
    );
    let summary = scorer.summary();
    assert!(
        summary.contains("0 failed"),
        "refused probes are not failures: {summary}"
    );
    // One call's part of the counts (the Python package closes each call with it).
    let before = scorer.usage().context("a served model counts its work")?;
    logprobs(&mut scorer, &requests)?;
    let call = scorer.usage().context("counts")?.since(&before);
    assert_eq!(call.top_k + call.echo, by_top_k + by_echo, "{call:?}");
    assert!(
        call.requests > 0 && call.requests <= before.requests,
        "{call:?} after {before:?}"
    );
    let line = scorer
        .usage_line(&call)
        .context("a line for a call with requests")?;
    assert!(
        line.contains(&format!(
            ": {} requests, 0 retried, 0 failed;",
            call.requests
        )) && line.contains(&format!("by top-20 {}, by echo {}", call.top_k, call.echo)),
        "{line}"
    );
    assert_eq!(
        scorer.usage_line(&Default::default()),
        None,
        "no requests, no line"
    );
    Ok(())
}

#[test]
fn an_echo_that_disagrees_with_the_top_k_is_not_trusted() -> Result<()> {
    let engine = FakeEngine::start(text_only_engine(true));
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    let error = format!("{:#}", logprobs(&mut scorer, &text_requests()).unwrap_err());
    assert!(
        error.contains("the echo's positions are not the tokens sent"),
        "{error}"
    );
    Ok(())
}

#[test]
fn an_engine_that_takes_one_prompt_a_request_gets_its_echoes_one_by_one() -> Result<()> {
    let engine = FakeEngine::start(Arc::new(|path: &str, body: &Value| match path {
        "/v1/models" => models("fake"),
        "/v1/completions" if body["prompt"][0].is_array() => (
            400,
            Vec::new(),
            r#"{"error":{"message":"prompt: one prompt per request"}}"#.into(),
        ),
        "/v1/completions" => completion(body, true, true),
        _ => (404, Vec::new(), String::new()),
    }));
    let mut one_at_a_time = options(&engine.base, "fake", &fixture());
    one_at_a_time.settings.concurrency = 1;
    let mut scorer = remote::connect(one_at_a_time)?;
    let requests = requests();
    let got = logprobs(&mut scorer, &requests)?;
    for (request, got) in requests.iter().zip(&got) {
        assert_eq!(got, &expected(request));
    }
    // Detection's three probes; the first prompt's list refused once, then every prompt:
    // top-K and one echo for each of its two labels outside it.
    assert_eq!(engine.count("/v1/completions"), 3 + 1 + 6 * 3);
    assert!(
        scorer.summary().contains("0 failed"),
        "{}",
        scorer.summary()
    );
    Ok(())
}

/// A stand-in model whose ids from 100 up lie below every id under 20, so that the
/// top-20 (ids 0..20) really are the most likely and a label outside them scores lower.
fn lp_ranked(prompt: &[u32], t: u32) -> f64 {
    match t {
        0..100 => lp(prompt, t),
        _ => lp(prompt, t) - 10.0,
    }
}

/// How a stand-in engine answers a generation restricted by `allowed_token_ids`.
#[derive(Clone, Copy, PartialEq)]
enum Restriction {
    /// vLLM's default (`--logprobs-mode raw_logprobs`): the allowed token's log-prob and
    /// the top-K of the model's own distribution, the token added where not among them.
    Raw,
    /// `processed_logprobs`: of the restricted distribution (0 for the one allowed token,
    /// the others at -9999, vLLM's JSON for -inf).
    Processed,
    /// Raw on the first request that restricts (the probe), processed after it: an
    /// engine whose replicas are set up differently.
    RawThenProcessed,
}

/// An engine that takes vLLM's `allowed_token_ids`: the one allowed token is generated
/// and its log-prob reported as `restriction` says.
fn restricting_engine(restriction: Restriction) -> Arc<Script> {
    let restricted_calls = Arc::new(AtomicUsize::new(0));
    Arc::new(move |path: &str, body: &Value| match path {
        "/v1/models" => models("fake"),
        "/v1/completions" => match body["allowed_token_ids"].as_array() {
            Some(allowed) => {
                let call = restricted_calls.fetch_add(1, Ordering::SeqCst);
                let raw = match restriction {
                    Restriction::Raw => true,
                    Restriction::Processed => false,
                    Restriction::RawThenProcessed => call == 0,
                };
                let id = allowed[0].as_u64().unwrap() as u32;
                let prompt = ids(body);
                let k = body["logprobs"].as_u64().unwrap() as u32;
                let name = |t: u32| format!("token_id:{t}");
                let (value, mut top) = match raw {
                    true => (
                        lp_ranked(&prompt, id),
                        (0..k)
                            .map(|t| (name(t), json!(lp_ranked(&prompt, t))))
                            .collect::<serde_json::Map<String, Value>>(),
                    ),
                    false => (
                        0.0,
                        (0..k)
                            .filter(|&t| t != id)
                            .take(k as usize - 1)
                            .map(|t| (name(t), json!(-9999.0)))
                            .collect(),
                    ),
                };
                top.insert(name(id), json!(value));
                ok(json!({"choices": [{"text": "x", "logprobs": {
                    "tokens": [name(id)], "token_logprobs": [value], "top_logprobs": [top]
                }}]}))
            }
            None => completion_of(lp_ranked, body, true, true),
        },
        _ => (404, Vec::new(), r#"{"detail":"Not Found"}"#.to_string()),
    })
}

#[test]
fn a_label_outside_the_top_k_comes_from_a_restricted_generation_where_it_is_trusted() -> Result<()>
{
    let requests = requests();
    let expected = |request: &LabelRequest| -> Vec<f64> {
        let Prompt::Tokens(tokens) = &request.prompt else {
            unreachable!()
        };
        let p = &tokens.input;
        let with = |extra: &[u32]| [p.as_slice(), extra].concat();
        vec![
            lp_ranked(p, 5),
            lp_ranked(p, 6),
            lp_ranked(p, 200),
            lp_ranked(p, 7) + lp_ranked(&with(&[7]), 8),
        ]
    };
    // vLLM's default: label 200 from one restricted token; the two-token label's first
    // token from the top-K, its second from a restricted token after the first.
    let engine = FakeEngine::start(restricting_engine(Restriction::Raw));
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    let got = logprobs(&mut scorer, &requests)?;
    for (request, got) in requests.iter().zip(&got) {
        assert_eq!(got, &expected(request), "exact, as the engine gave them");
    }
    assert!(scorer.routes().is_some_and(|r| r.restricted));
    let counts = scorer.label_counts();
    let count = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
    assert_eq!(
        (
            count(&counts.top_k),
            count(&counts.restricted),
            count(&counts.echo)
        ),
        (12, 12, 0)
    );
    let summary = scorer.summary();
    assert!(
        summary.contains("labels by top-20 12, by allowed_token_ids 12, by echo 0"),
        "{summary}"
    );
    // Per prompt: the top-K, label 200's token, the two-token label's second token.
    assert_eq!(engine.count("/v1/completions"), 3 + 6 * 3);

    // Log-probs of the restricted distribution (`--logprobs-mode processed_logprobs`):
    // the probe's 0 disagrees with the top-K, so the route is not trusted and the label
    // goes by echo, exactly.
    let engine = FakeEngine::start(restricting_engine(Restriction::Processed));
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    let got = logprobs(&mut scorer, &requests)?;
    for (request, got) in requests.iter().zip(&got) {
        assert_eq!(got, &expected(request));
    }
    assert!(scorer.routes().is_some_and(|r| !r.restricted));
    let counts = scorer.label_counts();
    assert_eq!((count(&counts.restricted), count(&counts.echo)), (0, 12));

    // The probe passes, then every restricted answer is of the restricted distribution:
    // each is caught by the alternatives of its own reply, and its label goes by echo.
    let engine = FakeEngine::start(restricting_engine(Restriction::RawThenProcessed));
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    let got = logprobs(&mut scorer, &requests)?;
    for (request, got) in requests.iter().zip(&got) {
        assert_eq!(got, &expected(request));
    }
    assert!(scorer.routes().is_some_and(|r| r.restricted));
    let counts = scorer.label_counts();
    assert_eq!(
        (
            count(&counts.top_k),
            count(&counts.restricted),
            count(&counts.echo)
        ),
        (12, 0, 12)
    );

    // An engine that ignores the field (generates its own token): not trusted either.
    let engine = FakeEngine::start(full_engine());
    let mut scorer = remote::connect(options(&engine.base, "fake", &fixture()))?;
    logprobs(&mut scorer, &requests)?;
    assert!(scorer.routes().is_some_and(|r| !r.restricted));
    assert!(!scorer.summary().contains("allowed_token_ids"));
    Ok(())
}

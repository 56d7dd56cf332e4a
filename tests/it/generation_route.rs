//! The one generation route (issue 58) on the real SmolLM2 and SummEval summaries:
//!
//! - rubric feedbacks generated together (one call, admitted in waves when the row or the
//!   key/value budget is small) are the feedbacks each generates alone, token for token;
//!   the rows admitted hold what the memory plan's arithmetic counts (`held_positions`),
//!   never more than the budget, with their keys kept tiled (a third copy) only where
//!   the budget holds that;
//! - the score read as a follow-up from a feedback's own keys and values equals the same
//!   label request read on its own through the prefix trie, within 1e-5;
//! - `score --method rubric` killed midway (some feedbacks stored) and started again
//!   gives the output of an uninterrupted run (the same feedbacks and formats, every
//!   number within 1e-5), generating only the rest.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Result;
use nlg_judge::data::{group_contexts, summeval, Context};
use nlg_judge::engine::memory::{held_positions, KvShape, RowExtent};
use nlg_judge::engine::{
    BatchBudget, CompletionResult, DecoderSettings, Generate, GenerationRequest, GenerationSink,
    LabelRequest, LabelResult, PrefixCache, Scorer,
};
use nlg_judge::judge::rubric::protocol::Start;
use nlg_judge::judge::rubric::reading::read;
use nlg_judge::judge::rubric::run::RubricMethod;
use nlg_judge::judge::rubric::Rubric;
use nlg_judge::judge::Task;

use crate::common;

/// Agreement of a score read from a generation's own state with the same read on its own
/// (f32 arithmetic in other passes: the last bits of a few sums differ).
const FOLLOW_UP_TOLERANCE: f64 = 1e-5;

fn document(candidates: usize) -> Context {
    let records = summeval::read(&common::shared_data_dir()).expect("SummEval");
    let mut contexts = group_contexts(records).expect("contexts");
    let mut context = contexts.remove(0);
    context.candidates.truncate(candidates);
    context
}

fn method(scorer: &dyn Scorer) -> RubricMethod {
    let rubric = Rubric::builtin("coherence", Task::Summary).expect("built-in rubric");
    RubricMethod::new(scorer, rubric, None, Some(24), false).expect("method")
}

fn feedback_requests(scorer: &dyn Scorer, context: &Context) -> Vec<GenerationRequest> {
    let method = method(scorer);
    context
        .candidates
        .iter()
        .map(|c| {
            method
                .feedback_request(scorer, context, c, Start::Feedback(""), 24)
                .unwrap()
        })
        .collect()
}

#[test]
fn feedbacks_generated_together_are_the_feedbacks_generated_alone() -> Result<()> {
    let context = document(5);
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let requests = feedback_requests(&scorer, &context);
    let alone: Vec<_> = requests
        .iter()
        .map(|r| scorer.generate(r))
        .collect::<Result<_>>()?;
    let together = scorer.generate_batch(&requests)?;
    // Two rows at a time: the rest wait and are admitted as rows finish, their prompts
    // starting from the article the first wave left in the prefix cache.
    let mut narrow = common::smollm2_scorer(DecoderSettings {
        budget: BatchBudget {
            max_batch_rows: 2,
            ..BatchBudget::default()
        },
        ..DecoderSettings::default()
    });
    let in_waves = narrow.generate_batch(&requests)?;
    // Key/value budgets counted as the memory plan counts a workload (`held_positions`,
    // the arithmetic of `generation_kv_bytes`): rows in prompt order, each at its prompt
    // past the start it shares with the row before it and at its whole token bound.
    let config = scorer.model().config();
    let position_bytes = KvShape::new(
        config.num_layers as u64,
        config.num_kv_heads as u64,
        config.head_dim as u64,
        4,
    )
    .position_bytes() as usize;
    let mut prompts: Vec<(Vec<u32>, usize)> = requests
        .iter()
        .map(|r| Ok((scorer.encode_prompt(&r.prompt)?.input, r.max_tokens)))
        .collect::<Result<_>>()?;
    prompts.sort();
    let extents: Vec<RowExtent> = prompts
        .iter()
        .enumerate()
        .map(|(k, (ids, max_tokens))| RowExtent {
            prompt: ids.len() as u64,
            shared_with_previous: k.checked_sub(1).map_or(0, |p| {
                ids.iter()
                    .zip(&prompts[p].0)
                    .take_while(|(a, b)| a == b)
                    .count() as u64
            }),
            max_tokens: *max_tokens as u64,
        })
        .collect();
    let bytes =
        |rows: usize| position_bytes * held_positions(extents[..rows].iter().copied()) as usize;
    // The article is shared: five rows hold far less than five prompts.
    assert!(bytes(5) < 5 * bytes(1) / 2, "{} of {}", bytes(5), bytes(1));
    // The budget of all five: admitted together, holding exactly what the plan counts.
    let mut exact = common::smollm2_scorer(DecoderSettings {
        budget: BatchBudget {
            max_arena_bytes: bytes(5),
            ..BatchBudget::default()
        },
        ..DecoderSettings::default()
    });
    let all_at_once = exact.generate_batch(&requests)?;
    assert_eq!(exact.generation_stats().peak_kv_bytes, bytes(5));
    // That budget holds no third copy of the keys: none are tiled, every row still runs.
    assert!(!exact.generation_stats().tiled_keys);
    // The default budget holds it: decoding rows keep their keys tiled for the attention
    // kernel, and the rows count at three copies (keys, values, tiled keys).
    let mut roomy = common::smollm2_scorer(DecoderSettings::default());
    let tiled = roomy.generate_batch(&requests)?;
    assert!(roomy.generation_stats().tiled_keys);
    assert_eq!(roomy.generation_stats().peak_kv_bytes, bytes(5) / 2 * 3);
    // Between two rows and three: rows wait for memory, not for slots, and the rows and
    // the prefix cache never hold more than the budget.
    let budget = (bytes(2) + bytes(3)) / 2;
    let mut bounded = common::smollm2_scorer(DecoderSettings {
        budget: BatchBudget {
            max_arena_bytes: budget,
            ..BatchBudget::default()
        },
        ..DecoderSettings::default()
    });
    let within_memory = bounded.generate_batch(&requests)?;
    let stats = bounded.generation_stats();
    assert!(
        stats.decode_rows <= 2 * stats.decode_steps && stats.decode_rows > stats.decode_steps,
        "{} rows in {} steps: the budget holds two rows at once",
        stats.decode_rows,
        stats.decode_steps
    );
    assert!(
        stats.peak_kv_bytes <= budget && stats.peak_kv_bytes >= bytes(2),
        "{} counted, budget {budget}",
        stats.peak_kv_bytes
    );
    for (index, one) in alone.iter().enumerate() {
        assert!(!one.tokens.is_empty(), "feedback {index} is empty");
        assert_eq!(one, &together[index], "feedback {index}, all rows at once");
        assert_eq!(
            one, &in_waves[index],
            "feedback {index}, two rows at a time"
        );
        assert_eq!(
            one, &within_memory[index],
            "feedback {index}, a memory bound"
        );
        assert_eq!(
            one, &all_at_once[index],
            "feedback {index}, the budget of all rows"
        );
        assert_eq!(one, &tiled[index], "feedback {index}, keys kept tiled");
    }
    Ok(())
}

/// Asks each feedback's score as a follow-up and keeps both.
struct Scores<'a> {
    context: &'a Context,
    method: RubricMethod,
    asked: Vec<Option<LabelRequest>>,
    read: Vec<Option<LabelResult>>,
}

impl GenerationSink for Scores<'_> {
    fn generated(
        &mut self,
        index: usize,
        result: CompletionResult,
        scorer: &dyn Scorer,
    ) -> Result<Option<LabelRequest>> {
        let reading = read(
            self.method.protocol.absolute()?,
            None,
            self.method.rubric.scale,
            &result.text,
            result.finish,
        );
        let request = self.method.score_request(
            scorer,
            self.context,
            &self.context.candidates[index],
            Some(&reading.answer),
        )?;
        self.asked[index] = Some(request.clone());
        Ok(Some(request))
    }

    fn labelled(&mut self, index: usize, result: LabelResult) -> Result<()> {
        self.read[index] = Some(result);
        Ok(())
    }
}

#[test]
fn a_score_read_from_the_feedbacks_own_state_equals_a_separate_read() -> Result<()> {
    let context = document(4);
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let requests: Vec<_> = feedback_requests(&scorer, &context)
        .iter()
        .map(nlg_judge::engine::generation::completion_of)
        .collect();
    let mut sink = Scores {
        context: &context,
        method: method(&scorer),
        asked: vec![None; requests.len()],
        read: vec![None; requests.len()],
    };
    scorer.generate_each(&requests, &mut PrefixCache::new(0), &mut sink)?;
    for (index, (asked, read)) in sink.asked.into_iter().zip(sink.read).enumerate() {
        let asked = asked.expect("every feedback asked its score");
        let read = read.expect("every score was read");
        let separate = scorer
            .label_logprobs(std::slice::from_ref(&asked))?
            .remove(0);
        assert_eq!(read.prompt_tokens, separate.prompt_tokens, "score {index}");
        assert_eq!(read.labels.len(), 5, "score {index}: the scale 1-5");
        for (label, (a, b)) in read.labels.iter().zip(&separate.labels).enumerate() {
            assert_eq!(a.tokens, b.tokens, "score {index}, label {label}");
            assert!(
                (a.logprob - b.logprob).abs() <= FOLLOW_UP_TOLERANCE,
                "score {index}, label {label}: {} from the feedback's state, {} alone",
                a.logprob,
                b.logprob
            );
        }
    }
    Ok(())
}

fn nlg_judge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
}

fn score_args(input: &Path, cache: &Path, out: &Path) -> Vec<String> {
    [
        "score",
        "--method",
        "rubric",
        "--rubric",
        "coherence",
        "--max-feedback-tokens",
        "40",
        "--model",
        "smollm2-135m-instruct",
        "--input",
        &input.display().to_string(),
        "--cache",
        &cache.display().to_string(),
        "--output",
        &out.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn stored_feedbacks(cache: &Path) -> usize {
    let Ok(db) =
        rusqlite::Connection::open_with_flags(cache, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    db.query_row(
        "SELECT COUNT(*) FROM text_results WHERE kind LIKE 'generation/rubric-feedback'",
        [],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n as usize)
    .unwrap_or(0)
}

#[test]
fn a_rubric_run_killed_midway_resumes_to_the_same_output() -> Result<()> {
    const CANDIDATES: usize = 8;
    let dir = tempfile::tempdir()?;
    let records = summeval::read(&common::shared_data_dir())?;
    let records: Vec<_> = nlg_judge::data::limit_contexts(records, Some(1))
        .into_iter()
        .take(CANDIDATES)
        .collect();
    let input = dir.path().join("doc.jsonl");
    let mut file = std::fs::File::create(&input)?;
    nlg_judge::data::write_records(&mut file, &records)?;
    drop(file);

    let (cache_a, out_a) = (dir.path().join("a.sqlite"), dir.path().join("a.jsonl"));
    let whole = nlg_judge()
        .args(score_args(&input, &cache_a, &out_a))
        .stderr(Stdio::null())
        .status()?;
    assert!(whole.success());
    assert_eq!(stored_feedbacks(&cache_a), CANDIDATES);

    // Killed once a feedback is stored (each is stored as it ends), then started again.
    let (cache_b, out_b) = (dir.path().join("b.sqlite"), dir.path().join("b.jsonl"));
    let mut child = nlg_judge()
        .args(score_args(&input, &cache_b, &out_b))
        .stderr(Stdio::null())
        .spawn()?;
    common::wait::until("a feedback stored by the run to interrupt", || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before it could be interrupted");
        }
        stored_feedbacks(&cache_b) >= 1
    });
    child.kill()?;
    child.wait()?;
    let stored = stored_feedbacks(&cache_b);
    assert!(stored < CANDIDATES, "the run finished before it was killed");
    assert!(!out_b.exists(), "a killed run leaves no final output");

    let resumed = nlg_judge()
        .args(score_args(&input, &cache_b, &out_b))
        .output()?;
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(stored_feedbacks(&cache_b), CANDIDATES);
    let rows = |path: &Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    let (whole, resumed) = (rows(&out_a), rows(&out_b));
    assert_eq!(whole.len(), CANDIDATES);
    assert_eq!(whole.len(), resumed.len());
    for (a, b) in whole.iter().zip(&resumed) {
        same_within(a, b, "row");
    }
    Ok(())
}

/// `a` and `b` equal but for numbers, which may differ by [`FOLLOW_UP_TOLERANCE`] (a
/// score read from a feedback's own state in one run is read on its own in the other
/// when the kill fell between the feedback and its score).
fn same_within(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= FOLLOW_UP_TOLERANCE, "{at}: {x} vs {y}");
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{at}"
            );
            for (key, value) in x {
                same_within(value, &y[key], &format!("{at}.{key}"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                same_within(u, v, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// `bench generate`'s figures describe the run they measured: a document's candidates
/// share its article (fewer prompt tokens computed than asked), the batched run steps
/// several rows at once and one candidate at a time at most one, both write the same
/// feedbacks and scores, and the seconds split between the layers' products and the
/// attention kernel lies within the run's seconds.
#[test]
fn bench_generate_reports_the_run_it_measured() -> Result<()> {
    let context = document(3);
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let method = method(&scorer);
    let together = nlg_judge::bench::generate::bench_generate(
        &mut scorer,
        std::slice::from_ref(&context),
        &method,
        64,
    )?;
    let alone = nlg_judge::bench::generate::bench_generate(
        &mut scorer,
        std::slice::from_ref(&context),
        &method,
        1,
    )?;
    for run in [&together, &alone] {
        assert_eq!(run.candidates, 3);
        assert_eq!(run.feedbacks.feedbacks.len(), 3);
        assert!(run.seconds_products > 0.0 && run.seconds_attention > 0.0);
        assert!(run.seconds_products + run.seconds_attention <= run.seconds);
        assert!(run.stats.generated_tokens > 0 && run.stats.follow_ups == 3);
    }
    assert!(
        together.stats.prompt_tokens_computed < together.stats.prompt_tokens,
        "the article is computed once: {:?}",
        together.stats
    );
    assert!(together.stats.rows_per_step > 1.0, "{:?}", together.stats);
    // One at a time: a step carries one row, or none (a pass that only reads a finished
    // row's score).
    assert!(alone.stats.rows_per_step <= 1.0, "{:?}", alone.stats);
    assert_eq!(together.feedbacks.feedbacks, alone.feedbacks.feedbacks);
    for (a, b) in together
        .feedbacks
        .scores
        .iter()
        .zip(&alone.feedbacks.scores)
    {
        assert!((a - b).abs() <= FOLLOW_UP_TOLERANCE, "{a} vs {b}");
    }
    Ok(())
}

//! Absolute scores as experts beside the comparisons (`compare --prior-scores`) through
//! the binary: the scripted `mock` judge (every comparison a coin toss, so only the
//! absolute scores can order the candidates), the score file's problems named by file
//! and line before any model loads (exit 2), and SmolLM2 on the library example, where a
//! tiny weight gives the comparisons' Product of Experts and a huge one the absolute
//! scores on a line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn nlg_judge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
}

/// One context `d` with candidates `a`..`d`.
fn input(dir: &Path) -> PathBuf {
    let path = dir.join("in.jsonl");
    let lines: String = ["a", "b", "c", "d"]
        .iter()
        .map(|id| {
            format!(
                "{{\"context_id\":\"d\",\"context\":\"An article.\",\"candidate_id\":\"{id}\",\
                 \"candidate\":\"Summary {id}.\"}}\n"
            )
        })
        .collect();
    std::fs::write(&path, lines).unwrap();
    path
}

/// A score file with `rows` (`context`, `candidate`, score as written).
fn scores(dir: &Path, rows: &[(&str, &str, &str)]) -> PathBuf {
    let path = dir.join("prior.jsonl");
    let lines: String = rows
        .iter()
        .map(|(context, candidate, score)| {
            format!(
                "{{\"context_id\":\"{context}\",\"candidate_id\":\"{candidate}\",\
                 \"score\":{score}}}\n"
            )
        })
        .collect();
    std::fs::write(&path, lines).unwrap();
    path
}

fn compare(model: &str, input: &Path, extra: &[&str]) -> Output {
    nlg_judge()
        .args([
            "compare",
            "--model",
            model,
            "--attribute",
            "coherence",
            "--no-cache",
        ])
        .arg("--input")
        .arg(input)
        .args(extra)
        .output()
        .unwrap()
}

/// Candidate id -> (score, rank) of a compare output file.
fn ranking(path: &Path) -> HashMap<String, (f64, f64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            (
                v["candidate_id"].as_str().unwrap().to_string(),
                (v["score"].as_f64().unwrap(), v["rank"].as_f64().unwrap()),
            )
        })
        .collect()
}

fn ranks(path: &Path) -> Vec<f64> {
    let ranking = ranking(path);
    ["a", "b", "c", "d"]
        .iter()
        .map(|id| ranking[*id].1)
        .collect()
}

#[test]
fn absolute_scores_order_what_coin_toss_comparisons_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let prior = scores(
        dir.path(),
        &[
            ("d", "c", "9"),
            ("d", "a", "2.5"),
            ("d", "b", "7"),
            ("d", "d", "4"),
        ],
    );
    let out = dir.path().join("out.jsonl");
    let out_arg = out.to_str().unwrap();
    // Comparisons alone: every p is 0.5, so everything ties.
    let plain = compare(
        "mock",
        &input,
        &[
            "--design",
            "random",
            "--comparisons",
            "6",
            "--output",
            out_arg,
        ],
    );
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert_eq!(ranks(&out), [2.5, 2.5, 2.5, 2.5]);
    // With the absolute scores: the ties are broken (the comparisons, all coin tosses,
    // leave the fitted slope near 0, so the scores are tiny but distinct). In the full
    // design every pair meets alike, so the order is exactly the absolute scores'.
    for design in [
        &["--design", "full"][..],
        &["--design", "random", "--comparisons", "6"],
        &["--design", "symmetric", "--comparisons", "4"],
        &["--design", "adaptive", "--comparisons", "6"],
    ] {
        let mut args = design.to_vec();
        args.extend([
            "--prior-scores",
            prior.to_str().unwrap(),
            "--output",
            out_arg,
        ]);
        let run = compare("mock", &input, &args);
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{design:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let ranks = ranks(&out);
        if design == ["--design", "full"] {
            assert_eq!(ranks, [4.0, 2.0, 1.0, 3.0]);
        }
        assert!(ranks.iter().any(|&r| r != 2.5), "{design:?}: {ranks:?}");
        assert!(
            stdout.contains("absolute scores as experts: one slope for all 1 context(s)"),
            "{design:?}: {stdout}"
        );
    }
}

/// `compare` with a model that does not exist: the error must come before it is looked
/// for, with exit code 2.
fn refused(input: &Path, extra: &[&str]) -> String {
    let run = compare("no-such-model", input, extra);
    let stderr = String::from_utf8(run.stderr).unwrap();
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("no-such-model"), "{stderr}");
    stderr
}

#[test]
fn score_file_problems_are_named_by_file_and_line_before_a_model_loads() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let all = [
        ("d", "a", "1"),
        ("d", "b", "2"),
        ("d", "c", "3"),
        ("d", "d", "4"),
    ];
    let with = |rows: &[(&str, &str, &str)], extra: &[&str]| {
        let prior = scores(dir.path(), rows);
        let mut args = vec!["--prior-scores", prior.to_str().unwrap()];
        args.extend(extra);
        refused(&input, &args)
    };
    let twice = [&all[..], &[("d", "b", "5")]].concat();
    let error = with(&twice, &[]);
    assert!(
        error.contains("prior.jsonl:5: `b` of context `d` is scored twice (first on line 2)"),
        "{error}"
    );
    let error = with(&all[..3], &[]);
    assert!(
        error.contains("no score for `d` of context `d` (") && error.contains("in.jsonl:4"),
        "{error}"
    );
    let unknown = [&all[..], &[("other", "a", "1")]].concat();
    let error = with(&unknown, &[]);
    assert!(
        error.contains("prior.jsonl:5: `a` of context `other` is not a candidate of the input"),
        "{error}"
    );
    let error = with(&[("d", "a", "1"), ("d", "b", "\"high\"")], &[]);
    assert!(
        error.contains("prior.jsonl:2: `score` of `b` is \"high\", not a number"),
        "{error}"
    );
    let error = with(&all, &["--rank", "win-ratio"]);
    assert!(
        error.contains("--rank win-ratio cannot take them"),
        "{error}"
    );
    let error = with(&all, &["--prior-weight", "0"]);
    assert!(error.contains("must be a positive number"), "{error}");
    let error = with(&all, &["--model", "mock"]);
    assert!(error.contains("--prior-scores takes one judge"), "{error}");
    // One slope for the run's contexts: a shard alone would fit another.
    let error = with(
        &all,
        &[
            "--shard",
            "1/2",
            "--output",
            dir.path().join("s.jsonl").to_str().unwrap(),
        ],
    );
    assert!(
        error.contains("--prior-scores fits one slope from all of a run's contexts"),
        "{error}"
    );
    let error = refused(&input, &["--prior-weight", "2"]);
    assert!(
        error.contains("--prior-weight weighs the absolute scores of --prior-scores"),
        "{error}"
    );
    let error = refused(&input, &["--prior-scores", "/no/such/prior.jsonl"]);
    assert!(error.contains("/no/such/prior.jsonl"), "{error}");
    // The score file is an input: an output over it is refused.
    let prior = scores(dir.path(), &all);
    let error = refused(
        &input,
        &[
            "--prior-scores",
            prior.to_str().unwrap(),
            "--output",
            prior.to_str().unwrap(),
        ],
    );
    assert!(
        error.contains("is the file given to --prior-scores"),
        "{error}"
    );
}

/// Ranks of `scores` (1 = highest; ties share the average).
fn ranks_of(scores: &[f64]) -> Vec<f64> {
    nlg_judge::rank::ranks_from_scores(scores)
}

#[test]
fn smollm2_light_absolute_experts_give_poe_and_heavy_ones_the_absolute_scores() {
    let dir = tempfile::tempdir().unwrap();
    let input = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/data/library.jsonl"
    ));
    let cache = dir.path().join("results.sqlite");
    let prior = dir.path().join("prompt.jsonl");
    let run = nlg_judge()
        .args([
            "score",
            "--method",
            "prompt",
            "--attribute",
            "coherence",
            "--input",
        ])
        .arg(&input)
        .arg("--cache")
        .arg(&cache)
        .arg("--output")
        .arg(&prior)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let absolute: HashMap<String, f64> = std::fs::read_to_string(&prior)
        .unwrap()
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            let id = v["candidate_id"].as_str().unwrap().to_string();
            (id, v["score"].as_f64().unwrap())
        })
        .collect();
    let ids: Vec<String> = {
        let mut ids: Vec<String> = absolute.keys().cloned().collect();
        ids.sort();
        ids
    };
    let out = dir.path().join("out.jsonl");
    let run_compare = |extra: &[&str]| -> Vec<f64> {
        let run = nlg_judge()
            .args([
                "compare",
                "--attribute",
                "coherence",
                "--design",
                "full",
                "--input",
            ])
            .arg(&input)
            .arg("--cache")
            .arg(&cache)
            .arg("--output")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let ranking = ranking(&out);
        ids.iter().map(|id| ranking[id].0).collect()
    };
    let poe = run_compare(&["--rank", "poe"]);
    let light = run_compare(&[
        "--prior-scores",
        prior.to_str().unwrap(),
        "--prior-weight",
        "1e-6",
    ]);
    for (a, b) in light.iter().zip(&poe) {
        assert!((a - b).abs() < 1e-4, "{light:?} vs PoE {poe:?}");
    }
    // Heavy absolute experts: the scores are the absolute scores on a line (its slope
    // fitted to the comparisons, so of either sign).
    let heavy = run_compare(&[
        "--prior-scores",
        prior.to_str().unwrap(),
        "--prior-weight",
        "1e6",
    ]);
    let absolute_scores: Vec<f64> = ids.iter().map(|id| absolute[id]).collect();
    let mean = absolute_scores.iter().sum::<f64>() / absolute_scores.len() as f64;
    let centred: Vec<f64> = absolute_scores.iter().map(|x| x - mean).collect();
    let slope = heavy.iter().zip(&centred).map(|(s, x)| s * x).sum::<f64>()
        / centred.iter().map(|x| x * x).sum::<f64>();
    for (s, x) in heavy.iter().zip(&centred) {
        assert!(
            (s - slope * x).abs() < 1e-4,
            "{heavy:?} vs {absolute_scores:?}"
        );
    }
    assert!(slope.abs() > 1e-3, "{heavy:?}");
    let ranks_heavy = ranks_of(&heavy);
    let ranks_absolute = ranks_of(&absolute_scores);
    if slope > 0.0 {
        assert_eq!(ranks_heavy, ranks_absolute);
    }
    // The default weight lies between: its scores differ from both.
    let middle = run_compare(&["--prior-scores", prior.to_str().unwrap()]);
    assert!(middle.iter().zip(&poe).any(|(a, b)| (a - b).abs() > 1e-3));
    assert!(middle.iter().zip(&heavy).any(|(a, b)| (a - b).abs() > 1e-3));
}

/// Issue 60: three contexts, one nearly tied pair each, compared in both orders with a
/// strong first-position bias (P(A) 0.80 and 0.755), slightly against the absolute
/// scores. A slope fitted per context came out negative in every context and turned
/// every ranking upside down, the best-scored candidate (never compared) last. The run
/// fits one slope over the contexts; its sign is not supported by three pairs, so it is
/// held at 0, the diagnostics warn with the pairs behind it, and nothing is reversed.
#[test]
fn one_tied_pair_per_context_does_not_turn_the_absolute_scores_upside_down() {
    use nlg_judge::judge::pairwise::run::{summarise, Comparison};
    use nlg_judge::judge::pairwise::{CompareOptions, Design, PairwiseTemplate, PriorScores};
    use nlg_judge::judge::{Attribute, Task};

    let qualities: &[f64] = &[0.1, 0.2, 0.3];
    let contexts = crate::common::contexts::scored_contexts(&[qualities; 3]);
    let absolute = [2.0, 3.0, 9.0];
    let rows = contexts.iter().flat_map(|c| {
        absolute
            .iter()
            .enumerate()
            .map(|(k, &score)| (c.id.clone(), format!("sys{k}"), score))
    });
    let prior = PriorScores::new("scores.jsonl", rows, 1.0).unwrap();
    let mut options = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence").unwrap(),
        PairwiseTemplate::builtin("c1", Task::Summary).unwrap(),
    )
    .with_prior(Some(prior));
    options.design = Design::Symmetric;
    options.comparisons = Some(2);
    let tied = || {
        vec![
            Comparison {
                first: 0,
                second: 1,
                p_a: 0.80,
                label_mass: 0.9,
                p_b: None,
                p_tie: None,
            },
            Comparison {
                first: 1,
                second: 0,
                p_a: 0.755,
                label_mass: 0.9,
                p_b: None,
                p_tie: None,
            },
        ]
    };
    let result = summarise(&contexts, vec![tied(), tied(), tied()], &options).unwrap();
    let fit = result.prior.expect("a slope with absolute scores");
    assert!(fit.fitted < 0.0 && fit.held && fit.slope == 0.0, "{fit:?}");
    assert_eq!((fit.pairs, fit.comparisons, fit.contexts), (3, 6, 3));
    let reversed = ranks_of(&absolute.map(|x| -x));
    for context in &result.contexts {
        assert_eq!(context.prior_slope, Some(0.0));
        assert_ne!(context.ranks, reversed, "{}", context.context_id);
        assert!(context.ranks[2] < 3.0, "the best-scored candidate last");
    }
    let check = result.diagnostics.get("prior_slope").unwrap();
    assert!(check.is_warning(), "{check:?}");
    for words in [
        "fitted from 3 compared pairs (6 comparisons) whose absolute scores differ, in 3 contexts",
        "held at 0",
    ] {
        assert!(check.message.contains(words), "{}", check.message);
    }
    let remedy = check.remedy.as_deref().unwrap_or("");
    assert!(remedy.contains("--comparisons N"), "{remedy}");
    let table = nlg_judge::cli::compare_table::format_tables(&result, &contexts);
    assert!(
        table.contains("one slope for all 3 context(s)") && table.contains("held at 0"),
        "{table}"
    );
    assert!(table.contains("WARNING prior_slope"), "{table}");
}

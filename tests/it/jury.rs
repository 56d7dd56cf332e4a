//! Juries: the Product of Experts over several judges' comparisons equals an independent
//! numpy least-squares computation (tests/fixtures/jury/make_reference.py) within 1e-9,
//! with and without the per-judge bias correction; a jury of one judge gives exactly that
//! judge's scores; Cohen's kappa, weights learned from agreement, and the standardised
//! mean of absolute scores, each against values worked out by hand.

use nlg_judge::judge::jury::{cohen_kappa, combine_comparisons, combine_scores, JuryWeights};
use nlg_judge::judge::pairwise::{summarise, CompareRequest, CompareResult, Comparison, Design};
use nlg_judge::judge::scoring::{ResolvedMethod, ScoreRun, ScoredCandidate};
use nlg_judge::judge::{Attribute, Task};
use nlg_judge::progress::Progress;
use nlg_judge::rank::RankMethod;
use serde_json::Value;

use crate::common;

fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jury/reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `contexts` contexts of `n` candidates without human scores.
fn contexts(count: usize, n: usize) -> Vec<nlg_judge::data::Context> {
    (0..count)
        .map(|c| {
            let candidates: Vec<(String, String)> = (0..n)
                .map(|k| (format!("s{k}"), format!("Summary {k}.")))
                .collect();
            common::contexts::context_of(&format!("d{c}"), "An article.", &candidates)
        })
        .collect()
}

/// One judge's result over `contexts` from its probabilities (`p[context][pair]`),
/// ranked by Product of Experts.
fn judge_result(
    data: &[nlg_judge::data::Context],
    pairs: &[(usize, usize)],
    p: &[Vec<f64>],
    design: Design,
) -> CompareResult {
    let mut request = CompareRequest::new("coherence");
    request.rank = Some(RankMethod::Poe);
    request.design = design;
    if design != Design::Full {
        request.comparisons = Some(pairs.len());
    }
    let options = request.options(Progress::none()).unwrap();
    let comparisons = p
        .iter()
        .map(|ps| {
            pairs
                .iter()
                .zip(ps)
                .map(|(&(first, second), &p_a)| Comparison {
                    first,
                    second,
                    p_a,
                    label_mass: 1.0,
                    p_b: None,
                    p_tie: None,
                })
                .collect()
        })
        .collect();
    summarise(data, comparisons, &options).unwrap()
}

#[test]
fn the_jury_poe_equals_numpy_and_one_judge_is_itself() {
    let fixture = reference();
    let n = fixture["candidates"].as_u64().unwrap() as usize;
    let weights: Vec<f64> = fixture["weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_f64().unwrap())
        .collect();
    let names: Vec<String> = (0..weights.len()).map(|k| format!("judge{k}")).collect();
    for case in fixture["cases"].as_array().unwrap() {
        let pairs: Vec<(usize, usize)> = case["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p[0].as_u64().unwrap() as usize,
                    p[1].as_u64().unwrap() as usize,
                )
            })
            .collect();
        let design = if case["design"] == "full" {
            Design::Full
        } else {
            Design::NoRepeat
        };
        let p: Vec<Vec<Vec<f64>>> = serde_json::from_value(case["p"].clone()).unwrap();
        let data = contexts(p[0].len(), n);
        let results: Vec<CompareResult> = p
            .iter()
            .map(|judge| judge_result(&data, &pairs, judge, design))
            .collect();
        let refs: Vec<&CompareResult> = results.iter().collect();
        let correct = case["correct_bias"].as_bool().unwrap();
        let jury =
            combine_comparisons(&names, &refs, &JuryWeights::Given(weights.clone()), correct)
                .unwrap();
        let expected: Vec<Vec<f64>> = serde_json::from_value(case["scores"].clone()).unwrap();
        for (context, want) in jury.contexts.iter().zip(&expected) {
            for (got, want) in context.scores.iter().zip(want) {
                assert!(
                    (got - want).abs() < 1e-9,
                    "{}: {got} vs numpy {want}",
                    case["design"]
                );
            }
        }
        assert_eq!(jury.judges[2].weight, 2.0);
        assert_eq!(
            jury.contexts[0].judge_scores[1],
            results[1].contexts[0].scores
        );

        // A jury of one judge gives that judge's Product of Experts scores exactly.
        for (name, result) in names.iter().zip(&results) {
            let alone = combine_comparisons(
                std::slice::from_ref(name),
                &[result],
                &JuryWeights::Equal,
                false,
            )
            .unwrap();
            for (jury, judge) in alone.contexts.iter().zip(&result.contexts) {
                assert_eq!(jury.scores, judge.scores, "{name}");
                assert_eq!(jury.ranks, judge.ranks, "{name}");
            }
        }
    }
}

#[test]
fn kappa_agreement_weights_and_standardised_scores() {
    // 4 decisions: agree 3 times; p(x) = 1/2, p(y) = 1/4, chance 1/2: kappa (3/4 - 1/2)
    // / (1/2) = 1/2.
    let pairs = [(true, true), (true, false), (false, false), (false, false)];
    assert!((cohen_kappa(&pairs).unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(cohen_kappa(&[(true, true), (true, true)]), None);
    assert_eq!(cohen_kappa(&[]), None);

    // Judges a and b rank alike, c the other way: learned weights give c nothing.
    let run = |scores: &[f64]| ScoreRun {
        method: ResolvedMethod::Gptscore {
            task: Task::Summary,
            attribute: Attribute::named("coherence").unwrap(),
        },
        candidates: scores
            .iter()
            .enumerate()
            .map(|(k, &score)| ScoredCandidate {
                context_id: "d".into(),
                candidate_id: format!("s{k}"),
                system_id: None,
                score,
                distribution: None,
                human: Default::default(),
                feedback: None,
                format: None,
                reasoning: None,
                reasoning_cut: false,
            })
            .collect(),
        computed: 0,
        cached: 0,
        diagnostics: Default::default(),
    };
    let (a, b, c) = (
        run(&[1.0, 2.0, 3.0]),
        run(&[10.0, 30.0, 20.0]),
        run(&[3.0, 2.0, 1.0]),
    );
    let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let jury = combine_scores(&names, &[&a, &b, &c], &JuryWeights::FromAgreement).unwrap();
    // Spearman: a~b 0.5, a~c -1, b~c -0.5; means: a -0.25, b 0, c -0.75: all clipped to
    // 0, so the weights fall back to equal.
    let agree = |a: usize, b: usize| jury.agreement.spearman[a][b].unwrap();
    assert!((agree(0, 1) - 0.5).abs() < 1e-12 && (agree(0, 2) + 1.0).abs() < 1e-12);
    assert!(
        jury.judges.iter().all(|j| j.weight == 1.0),
        "{:?}",
        jury.judges
    );
    // Issue 60: said so, in the result, the terminal, the sidecar and the report.
    let note = jury
        .weights_note
        .as_deref()
        .expect("a note on the fallback");
    assert!(
        note.contains("no judge agrees with the others") && note.contains("every judge weighs 1"),
        "{note}"
    );
    let table = nlg_judge::cli::jury::format_jury(&jury, &[], &[]);
    assert!(table.contains(&format!("note: {note}")), "{table}");
    let sidecar = nlg_judge::cli::jury::jury_diagnostics(&jury, &[]).unwrap();
    assert_eq!(sidecar["weights_note"], note);
    assert_eq!(serde_json::to_value(&jury).unwrap()["weights_note"], note);
    let report = nlg_judge::report::Report::from_jury(
        "t",
        Vec::new(),
        &jury,
        &contexts(1, 3)
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.id = "d".into();
                c
            })
            .collect::<Vec<_>>(),
        "jury score",
        None,
        [&a, &b, &c]
            .iter()
            .map(|r| {
                let view =
                    nlg_judge::report::score_run("x", "s", &r.candidates, &[], None).unwrap();
                (view, Default::default())
            })
            .collect(),
    )
    .unwrap();
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("Agreement weights: no judge agrees")),
        "{:?}",
        report.notes
    );
    assert!(report
        .to_markdown()
        .contains("Agreement weights: no judge agrees"));
    // Judges that agree get their learned weights, without a note.
    let agreeing = combine_scores(&names, &[&a, &b, &a], &JuryWeights::FromAgreement).unwrap();
    assert!(agreeing.weights_note.is_none());
    assert!(agreeing.judges.iter().all(|j| j.weight > 0.0));
    // Agreement weights need three judges: with two, each one's agreement with the
    // other is one number, so the weights would always be equal.
    let error = JuryWeights::FromAgreement
        .check(2, "--jury-weights agreement")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("--jury-weights agreement needs 3 judges or more (this jury has 2)"),
        "{error}"
    );
    let error = combine_scores(&names[..2], &[&a, &b], &JuryWeights::FromAgreement)
        .unwrap_err()
        .to_string();
    assert!(error.contains("needs 3 judges or more"), "{error}");
    assert!(JuryWeights::FromAgreement.check(3, "x").is_ok());
    assert!(JuryWeights::Given(vec![1.0]).check(2, "x").is_err());
    let error = JuryWeights::Given(vec![1.0, -1.0])
        .check(2, "x")
        .unwrap_err()
        .to_string();
    assert!(error.starts_with("judge 2: weight -1"), "{error}");
    // Two judges in agreement and equal weights: the standardised mean. a's z-scores
    // are (-1.2247, 0, 1.2247), b's (-1.2247, 1.2247, 0).
    let pair = combine_scores(&names[..2], &[&a, &b], &JuryWeights::Equal).unwrap();
    let z = 1.5f64.sqrt();
    let want = [-z, z / 2.0, z / 2.0];
    for (got, want) in pair.contexts[0].scores.iter().zip(want) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
    assert_eq!(pair.contexts[0].ranks, [3.0, 1.5, 1.5]);
    // Judges of different candidates are refused, naming them.
    let other = run(&[1.0, 2.0]);
    let error = combine_scores(&names[..2], &[&a, &other], &JuryWeights::Equal)
        .unwrap_err()
        .to_string();
    assert!(error.contains("`a` and `b` differ"), "{error}");
}

/// The command line: `--model smollm2 --model mock` is a jury whose combined Product of
/// Experts scores are half SmolLM2's own (the mock answers 0.5 everywhere, and a full
/// design's least squares over both judges' comparisons halves the scores); every line
/// carries both judges' scores, the diagnostics file each judge's checks and the
/// agreement; a jury file's weights, a model named twice and options a jury cannot take
/// are checked first.
#[test]
fn a_jury_through_the_command_line() {
    common::card_file("smollm2-135m-instruct");
    let dir = tempfile::tempdir().unwrap();
    let input = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/library.jsonl");
    let output = dir.path().join("jury.jsonl");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args([
            "compare",
            "--attribute",
            "coherence",
            "--rank",
            "poe",
            "--input",
            input,
        ])
        .args(["--model", "smollm2-135m-instruct", "--model", "mock"])
        .args(["--correlate", "--output"])
        .arg(&output)
        .env("NLG_JUDGE_CACHE", dir.path().join("cache"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("jury of 2: smollm2-135m-instruct (weight 1), mock (weight 1)"),
        "{stdout}"
    );
    // Each ranking's agreement with the human scores, and why one context gives no
    // interval.
    let agreement = stdout
        .split("agreement with the human scores `coherence`")
        .nth(1)
        .unwrap_or_else(|| panic!("{stdout}"));
    for row in ["\n  jury ", "\n  smollm2-135m-instruct ", "\n  mock "] {
        assert!(agreement.contains(row), "{row:?} in {agreement}");
    }
    assert!(agreement.contains("(no interval: one group"), "{agreement}");
    let lines: Vec<Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    for line in &lines {
        let judges = &line["judges"];
        let (a, b) = (
            judges["smollm2-135m-instruct"].as_f64().unwrap(),
            judges["mock"].as_f64().unwrap(),
        );
        assert_eq!(b, 0.0);
        let score = line["score"].as_f64().unwrap();
        assert!((score - a / 2.0).abs() < 1e-9, "{score} vs {a} / 2");
        assert!(line["scores"]["coherence"].is_number());
    }
    let mut sidecar = output.as_os_str().to_owned();
    sidecar.push(".diagnostics.json");
    let diagnostics: Value =
        serde_json::from_str(&std::fs::read_to_string(sidecar).unwrap()).unwrap();
    assert!(diagnostics["judges"]["mock"]["checks"].is_array());
    // The mock's scores are all equal: its Spearman with anyone is undefined.
    assert!(diagnostics["agreement"]["spearman"][0][1].is_null());
    assert!(diagnostics.get("weights_note").is_none());

    // Checked before any judge loads: weights in the file with weights from agreement,
    // and what a jury cannot take.
    let jury = dir.path().join("jury.toml");
    std::fs::write(
        &jury,
        "[[judge]]\nmodel = \"mock\"\nweight = 2.0\n\n[[judge]]\nmodel = \"mock:delay-ms=0\"\n",
    )
    .unwrap();
    let twice = dir.path().join("twice.toml");
    std::fs::write(
        &twice,
        "[[judge]]\nmodel = \"no-such-model\"\n\n[[judge]]\nmodel = \"other\"\n\n\
         [[judge]]\nmodel = \"no-such-model\"\n",
    )
    .unwrap();
    for (extra, says) in [
        (
            vec![
                "--jury",
                jury.to_str().unwrap(),
                "--jury-weights",
                "agreement",
            ],
            "the jury file gives weights".to_string(),
        ),
        (
            vec![
                "--model",
                "mock",
                "--model",
                "mock:delay-ms=0",
                "--comparisons-out",
                "c.jsonl",
            ],
            "--comparisons-out takes one judge".to_string(),
        ),
        // Issue 60: a model named twice is refused, not made a judge of double weight.
        (
            vec!["--model", "no-such-model", "--model", "no-such-model"],
            "--model no-such-model is given twice (the 2nd --model): a jury of one model twice \
             is that model alone with its weight doubled"
                .to_string(),
        ),
        (
            vec!["--jury", twice.to_str().unwrap()],
            format!(
                "jury file {}: judges 1 and 3 are the same model `no-such-model`",
                twice.display()
            ),
        ),
        // Issue 60: agreement weights for two judges would always be equal.
        (
            vec![
                "--model",
                "no-such-model",
                "--model",
                "other-model",
                "--jury-weights",
                "agreement",
            ],
            "--jury-weights agreement needs 3 judges or more (this jury has 2)".to_string(),
        ),
    ] {
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args([
                "compare",
                "--attribute",
                "coherence",
                "--input",
                input,
                "--no-cache",
            ])
            .args(&extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&says), "{stderr}");
        // Refused before any judge loads.
        assert!(!stderr.contains("judge 1 of"), "{stderr}");
    }
    // A command without juries says so.
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
        .args([
            "labels", "--model", "mock", "--model", "mock", "--label", "A",
        ])
        .args(["--prompt-file", input])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("only compare and score take several judges"),
        "{stderr}"
    );
}

//! `reproduce` end to end through the library entry point, with a scripted model on a
//! three-document SummEval-shaped slice: the tables' rows and columns, the numbers the
//! mock's construction implies, the files (PNG decodes, SVG parses, CSV headers), the
//! subset curves against the full set and against the runner, and a rerun that
//! computes nothing.
//!
//! The mock reads each candidate's true quality from its text (`... q=0.35`) and answers
//! `p_A = sigma(8 (q_A - q_B) + bias)`, with bias 5.5 under prompt c1 (its prompts start
//! with the article) and 0 under c2 (they start with "Passage:"). Under c1 the first
//! position wins everything but the comparison of the worst (first) with the best, so
//! the plain win ratio only separates the extremes; the balanced threshold removes the
//! bias exactly.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Result};
use nlg_judge::data::{Candidate, Context};
use nlg_judge::engine::{MockScorer, ResultCache, Scorer};
use nlg_judge::figure::PALETTE;
use nlg_judge::judge::pairwise::{run_compare, CompareOptions, Debias, Design, PairwiseTemplate};
use nlg_judge::judge::ScoreMethod;
use nlg_judge::judge::{Attribute, Task};
use nlg_judge::rank::RankMethod;

use crate::common::contexts::{quality_after, sigmoid};
use nlg_judge::reproduce::report::{
    markdown, CORRELATIONS_COLUMNS, DECISIONS_COLUMNS, SUBSET_COLUMNS,
};
use nlg_judge::reproduce::{
    reproduce, write_outputs, AbsoluteSource, AttributeTask, BootstrapSettings, Experiment,
    LoadedExperiment, MethodRow, PromptScores, ReproduceOptions, Reproduction, RowSource,
    SourceRows,
};
use nlg_judge::stats::{summary_level, Item, SkipRule};

const QUALITIES: [[f64; 6]; 3] = [
    [0.35, 0.05, 0.8, 0.5, 0.2, 0.65],
    [0.5, 0.8, 0.05, 0.65, 0.35, 0.2],
    [0.2, 0.65, 0.35, 0.05, 0.8, 0.5],
];

fn pairwise_answer(prompt: &str, labels: &[String]) -> Result<Vec<f64>> {
    assert_eq!(labels, [" A", " B"]);
    let bias = if prompt.starts_with("Passage:") {
        0.0
    } else {
        5.5
    };
    let delta = quality_after(prompt, "Summary A: ")? - quality_after(prompt, "Summary B: ")?;
    let p = sigmoid(8.0 * delta + bias);
    Ok(vec![(0.9 * p).ln(), (0.9 * (1.0 - p)).ln()])
}

fn mock() -> MockScorer {
    MockScorer::new().with_labels(pairwise_answer)
}

/// Human scores: coherence = 5q; consistency = 5q rounded (ties); fluency reversed;
/// relevance constant in the first document (skipped by the authors' rule).
fn contexts() -> Vec<Context> {
    QUALITIES
        .iter()
        .enumerate()
        .map(|(d, qs)| Context {
            id: format!("doc{d}"),
            text: format!("Article number {d} about something."),
            candidates: qs
                .iter()
                .enumerate()
                .map(|(k, &q)| Candidate {
                    id: format!("M{k}"),
                    text: format!("summary {k} of doc {d} q={q}"),
                    reference: None,
                    scores: BTreeMap::from([
                        ("coherence".to_string(), 5.0 * q),
                        ("consistency".to_string(), (5.0 * q).round()),
                        ("fluency".to_string(), 5.0 * (1.0 - q)),
                        (
                            "relevance".to_string(),
                            if d == 0 { 3.0 } else { 1.0 + 4.0 * q },
                        ),
                    ]),
                    system_id: Some(format!("M{k}")),
                    metadata: Default::default(),
                    source: None,
                })
                .collect(),
        })
        .collect()
}

fn loaded() -> LoadedExperiment {
    LoadedExperiment {
        experiment: Experiment::Summeval,
        contexts: contexts(),
        reference_included: false,
    }
}

fn options(grid: Vec<usize>, seeds: u64) -> ReproduceOptions {
    let mut options = ReproduceOptions::new(grid, seeds);
    options.bootstrap = Some(BootstrapSettings {
        resamples: 200,
        confidence: 0.95,
        seed: 1,
    });
    options.command = "nlg-judge reproduce summeval --model mock".to_string();
    options
}

fn row<'a>(
    report: &'a Reproduction,
    method: &str,
    debiased: bool,
) -> &'a nlg_judge::reproduce::RowResult {
    report
        .rows
        .iter()
        .find(|r| r.method == method && r.debiased == debiased)
        .unwrap_or_else(|| panic!("no row {method} {debiased}"))
}

fn spearman(report: &Reproduction, method: &str, debiased: bool, column: usize) -> f64 {
    row(report, method, debiased).cells[column]
        .as_ref()
        .unwrap()
        .mean
        .spearman
        .unwrap()
}

fn header(path: &Path) -> Vec<String> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    reader.headers().unwrap().iter().map(String::from).collect()
}

fn csv_rows(path: &Path) -> Vec<BTreeMap<String, String>> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let names: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    reader
        .records()
        .map(|record| {
            names
                .iter()
                .cloned()
                .zip(record.unwrap().iter().map(String::from))
                .collect()
        })
        .collect()
}

#[test]
fn tables_figures_and_a_rerun_that_computes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ResultCache::open(&dir.path().join("results.sqlite")).unwrap();
    let data = loaded();
    let grid: Vec<usize> = (1..=15).map(|k| 2 * k).collect();
    let mut scorer = mock();
    let calls = scorer.calls();
    let report = reproduce(
        &mut scorer,
        &data,
        &options(grid.clone(), 3),
        Some(&cache),
        &mut [],
    )
    .unwrap();

    // 4 attributes x 2 prompts x 3 documents x 30 ordered pairs.
    assert_eq!((report.computed, report.cached), (720, 0));
    assert_eq!(calls.labels(), 720);

    // The paper's columns and rows.
    let labels: Vec<&str> = report.columns.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["COH", "CON", "FLU", "REL"]);
    let names: Vec<(&str, bool, bool)> = report
        .rows
        .iter()
        .map(|r| (r.method.as_str(), r.debiased, r.in_paper))
        .collect();
    assert_eq!(
        names,
        [
            ("win ratio", false, true),
            ("win ratio", true, true),
            ("soft win ratio", false, false),
            ("soft win ratio", true, false),
            ("Bradley-Terry", false, false),
            ("Bradley-Terry", true, false),
        ]
    );
    for row in &report.rows {
        for cell in &row.cells {
            let prompts: Vec<&str> = cell
                .as_ref()
                .unwrap()
                .per_prompt
                .iter()
                .map(|p| p.prompt.as_str())
                .collect();
            assert_eq!(prompts, ["c1", "c2"]);
        }
    }

    // Debiasing restores the exact ranking: Spearman 1 for coherence, -1 for the
    // reversed fluency. Plain, prompt c1 only separates the extremes: 5/10 wins for the
    // four middle candidates, 6/10 for the best, 4/10 for the worst. Spearman of
    // win counts (4, 5, 5, 5, 5, 6) by true order: 0.8451542547285165 (scipy 1.17.1,
    // scipy.stats.spearmanr([4,5,5,5,5,6], [1,2,3,4,5,6])); c2 is unbiased (1.0).
    let coh = spearman(&report, "win ratio", true, 0);
    assert!((coh - 1.0).abs() < 1e-12, "{coh}");
    let flu = spearman(&report, "win ratio", true, 2);
    assert!((flu + 1.0).abs() < 1e-12, "{flu}");
    let plain = row(&report, "win ratio", false).cells[0].as_ref().unwrap();
    let c1 = plain.per_prompt[0].correlations.spearman.unwrap();
    assert!((c1 - 0.8451542547285165).abs() < 1e-12, "{c1}");
    let c2 = plain.per_prompt[1].correlations.spearman.unwrap();
    assert!((c2 - 1.0).abs() < 1e-12, "{c2}");
    assert!((plain.mean.spearman.unwrap() - (c1 + c2) / 2.0).abs() < 1e-15);
    // The authors' skip rule: relevance is constant in the first document.
    let rel = row(&report, "win ratio", true).cells[3].as_ref().unwrap();
    assert_eq!(
        (
            rel.per_prompt[0].contexts_kept,
            rel.per_prompt[0].contexts_skipped
        ),
        (2, 1)
    );
    // Bootstrap intervals bracket the estimate.
    let interval = plain.spearman_interval.unwrap();
    assert!(interval.lower <= plain.mean.spearman.unwrap());
    assert!(plain.mean.spearman.unwrap() <= interval.upper);

    // Positional bias and accuracy: c1 favours A (each candidate wins 5 of its 10
    // comparisons as A except the worst against the best: 87/90); c2 is balanced;
    // debiasing balances c1 and makes every decision right.
    let coherence: Vec<_> = report
        .decisions
        .iter()
        .filter(|d| d.column == "COH")
        .collect();
    assert_eq!(coherence.len(), 2);
    assert_eq!(
        (
            coherence[0].plain.first_position.hits,
            coherence[0].plain.first_position.total
        ),
        (87, 90)
    );
    assert_eq!(coherence[1].plain.first_position.value(), Some(0.5));
    assert_eq!(coherence[0].debiased.first_position.value(), Some(0.5));
    assert_eq!(coherence[0].debiased.accuracy.value(), Some(1.0));
    assert_eq!(coherence[0].debiased.consistency.value(), Some(1.0));
    assert!(
        coherence[0].debiased.tau > 0.9,
        "{}",
        coherence[0].debiased.tau
    );

    // Subset curves: random with R = 30 is the full set (every seed), so it equals the
    // table's per-prompt values; no-repeat stops at N(N-1)/2 = 15.
    let full_random: Vec<_> = report
        .curves
        .iter()
        .filter(|p| p.column == "COH" && p.design == "random" && p.r == 30 && !p.debiased)
        .collect();
    assert_eq!(full_random.len(), 3);
    for point in full_random {
        let expected = match point.prompt.as_str() {
            "c1" => 100.0 * c1,
            "c2" => 100.0 * c2,
            _ => 100.0 * (c1 + c2) / 2.0,
        };
        assert!((point.mean - expected).abs() < 1e-9, "{point:?}");
        assert!(point.sd.abs() < 1e-9 && point.seeds == 3, "{point:?}");
    }
    let no_repeat_max = report
        .curves
        .iter()
        .filter(|p| p.design == "no-repeat")
        .map(|p| p.r)
        .max();
    assert_eq!(no_repeat_max, Some(14));
    for design in ["random", "no-repeat", "symmetric", "adaptive"] {
        for debiased in [false, true] {
            for prompt in ["c1", "c2", "mean"] {
                for column in ["COH", "CON", "FLU", "REL"] {
                    assert!(report.curves.iter().any(|p| p.design == design
                        && p.debiased == debiased
                        && p.prompt == prompt
                        && p.column == column));
                }
            }
        }
    }

    // Files.
    let out = dir.path().join("out");
    let written = write_outputs(&report, &out).unwrap();
    // correlations, decisions, subset CSV/PNG/SVG, agreement PNG/SVG, budget CSV, report.
    assert_eq!(written.len(), 9);
    let text = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        text.contains("| Method | Debias | COH | CON | FLU | REL | Avg. |"),
        "{text}"
    );
    assert!(
        text.contains("| comparative, win ratio | ✓ | 100.0 |"),
        "{text}"
    );
    assert!(text
        .contains("absolute scores when those rows run): 720 computed, 0 from the result cache"));
    assert!(text.contains("Model: `mock`, fingerprint `mock`"));
    assert!(text.contains("![subset curves](subset.png)"));
    assert!(text.contains("![agreement with the full design](subset-vs-full.png)"));
    assert!(text.contains("## A quarter of the comparisons"));
    // Seven design and ranking rows per attribute.
    assert_eq!(report.budget.len(), 4 * 7);
    assert!(report
        .budget
        .iter()
        .all(|row| row.vs_full.1 <= row.vs_full.0 && row.vs_full.0 <= row.vs_full.2));
    assert_eq!(text, markdown(&report));

    // The HTML report: the same tables, the two figures inline as SVG, nothing loaded.
    let html = nlg_judge::reproduce::report::page(&report)
        .unwrap()
        .to_html()
        .unwrap();
    assert_eq!(
        html.matches("<figure class=\"svg\"><svg").count(),
        2,
        "two figures"
    );
    assert!(html.contains("<th>Method</th>"), "the correlation table");
    assert!(html.contains("symmetric, debiased"));
    assert!(
        !html.contains("subset.png\""),
        "no image loaded from a file"
    );

    let png_bytes = std::fs::read(out.join("subset.png")).unwrap();
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
    let decoder = png::Decoder::new(std::io::Cursor::new(&png_bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    // Two rows of panels and a legend of two rows (plain above debiased).
    assert_eq!(
        (frame.width, frame.height),
        (920, 44 + 2 * 330 + 2 * 22 + 28)
    );
    assert_eq!(frame.color_type, png::ColorType::Rgb);
    // The random design's colour is drawn, and dark text.
    let rgb: Vec<&[u8]> = pixels[..frame.buffer_size()].chunks(3).collect();
    let [r, g, b] = [PALETTE[0].0, PALETTE[0].1, PALETTE[0].2];
    assert!(rgb.iter().any(|p| *p == [r, g, b]), "no random-design line");
    assert!(rgb.iter().filter(|p| p.iter().all(|&v| v < 64)).count() > 1000);

    let svg = std::fs::read_to_string(out.join("subset.svg")).unwrap();
    let document = roxmltree::Document::parse(&svg).unwrap();
    assert_eq!(document.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = document
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for expected in [
        "COH",
        "REL",
        "symmetric, debiased",
        "R (comparisons per context)",
    ] {
        assert!(texts.contains(&expected), "{expected} not in {texts:?}");
    }

    assert_eq!(header(&out.join("correlations.csv")), CORRELATIONS_COLUMNS);
    assert_eq!(header(&out.join("decisions.csv")), DECISIONS_COLUMNS);
    assert_eq!(header(&out.join("subset.csv")), SUBSET_COLUMNS);
    let correlations = csv_rows(&out.join("correlations.csv"));
    // 6 rows x 4 attributes x (c1, c2, mean).
    assert_eq!(correlations.len(), 72);
    let line = correlations
        .iter()
        .find(|r| {
            r["method"] == "win ratio"
                && r["debiased"] == "false"
                && r["attribute"] == "COH"
                && r["prompt"] == "c1"
        })
        .unwrap();
    assert_eq!(line["spearman"], format!("{c1:.6}"));
    assert_eq!(csv_rows(&out.join("decisions.csv")).len(), 4 * 2 * 2);
    assert_eq!(csv_rows(&out.join("subset.csv")).len(), report.curves.len());

    // A rerun with the same cache asks the model nothing and finds the same numbers.
    let mut again = mock();
    let again_calls = again.calls();
    let rerun = reproduce(&mut again, &data, &options(grid, 3), Some(&cache), &mut []).unwrap();
    assert_eq!((rerun.computed, rerun.cached), (0, 720));
    assert_eq!(again_calls.labels(), 0);
    assert_eq!(rerun.rows, report.rows);
    assert_eq!(rerun.decisions, report.decisions);
    assert_eq!(rerun.curves, report.curves);
}

/// Win-ratio summary-level Spearman of a runner result against coherence.
fn runner_spearman(result: &nlg_judge::judge::pairwise::CompareResult, data: &[Context]) -> f64 {
    let items: Vec<Item> = result
        .contexts
        .iter()
        .zip(data)
        .flat_map(|(got, context)| {
            got.scores
                .iter()
                .zip(&context.candidates)
                .map(|(&pred, candidate)| Item {
                    group: context.id.clone(),
                    system: candidate.id.clone(),
                    pred,
                    human: candidate.scores["coherence"],
                })
                .collect::<Vec<_>>()
        })
        .collect();
    summary_level(&items, SkipRule::Authors)
        .unwrap()
        .correlations
        .spearman
        .unwrap()
}

#[test]
fn a_curve_point_is_what_the_runner_reports_for_that_design_and_seed() {
    let data = loaded();
    let mut options = options(vec![12], 1);
    options.bootstrap = None;
    let report = reproduce(&mut mock(), &data, &options, None, &mut []).unwrap();
    for design in [
        Design::Random,
        Design::NoRepeat,
        Design::Symmetric,
        Design::Adaptive,
    ] {
        for debias in [Debias::None, Debias::Threshold] {
            let mut compare = CompareOptions::new(
                Task::Summary,
                Attribute::named("coherence").unwrap(),
                PairwiseTemplate::builtin("c1", Task::Summary).unwrap(),
            );
            compare.design = design;
            compare.comparisons = Some(12);
            compare.seed = 0;
            compare.debias = debias;
            if design == Design::Adaptive {
                // The adaptive curve ranks as `compare --design adaptive` does by default.
                compare.rank = RankMethod::Poe;
            }
            let result = run_compare(&mut mock(), &data.contexts, &compare, None).unwrap();
            let expected = 100.0 * runner_spearman(&result, &data.contexts);
            let name = match design {
                Design::Random => "random",
                Design::NoRepeat => "no-repeat",
                Design::Adaptive => "adaptive",
                _ => "symmetric",
            };
            let point = report
                .curves
                .iter()
                .find(|p| {
                    p.column == "COH"
                        && p.prompt == "c1"
                        && p.design == name
                        && p.r == 12
                        && p.debiased == (debias == Debias::Threshold)
                })
                .unwrap();
            assert!(
                (point.mean - expected).abs() < 1e-9,
                "{point:?} vs {expected}"
            );
        }
    }
}

#[test]
fn missing_human_scores_fail_before_any_model_call() {
    let mut data = loaded();
    data.contexts[1].candidates[2].scores.remove("fluency");
    let mut scorer = mock();
    let calls = scorer.calls();
    let error = reproduce(&mut scorer, &data, &options(vec![2], 1), None, &mut []).unwrap_err();
    let text = format!("{error:#}");
    assert!(
        text.contains("context `doc1`") && text.contains("`fluency`"),
        "{text}"
    );
    assert_eq!(calls.labels(), 0);
}

#[test]
fn the_first_summeval_documents_with_a_mock_fill_every_table() {
    let Some(dir) = nlg_judge::data::find_shared_data_dir() else {
        eprintln!("shared data not found; skipping");
        return;
    };
    let data = Experiment::Summeval
        .load(
            &dir,
            nlg_judge::reproduce::DataOptions {
                limit: Some(3),
                include_reference: false,
            },
        )
        .unwrap();
    // Prefer the longer summary, a little, with a first-position bias.
    let mut scorer = MockScorer::new().with_labels(|prompt, _| {
        let length = |label: &str| -> Result<f64> {
            let start = prompt.find(label).ok_or_else(|| anyhow!("no {label:?}"))?;
            Ok(prompt[start..].lines().next().unwrap_or_default().len() as f64)
        };
        let p = sigmoid((length("Summary A: ")? - length("Summary B: ")?) / 40.0 + 0.5);
        Ok(vec![p.ln(), (1.0 - p).ln()])
    });
    let grid = nlg_judge::reproduce::subset::default_grid(16);
    let mut options = options(grid, 2);
    options.bootstrap = None;
    let report = reproduce(&mut scorer, &data, &options, None, &mut []).unwrap();
    // 4 attributes x 2 prompts x the distinct prompts of 3 documents x 240 ordered
    // pairs (some SummEval systems wrote identical summaries: their prompts are asked
    // once).
    let distinct: usize = data
        .contexts
        .iter()
        .map(|context| {
            let texts: Vec<&str> = context.candidates.iter().map(|c| c.text.as_str()).collect();
            let mut pairs = std::collections::HashSet::new();
            for (i, a) in texts.iter().enumerate() {
                for (j, b) in texts.iter().enumerate() {
                    if i != j {
                        pairs.insert((*a, *b));
                    }
                }
            }
            pairs.len()
        })
        .sum();
    assert!(
        distinct < 720,
        "the first documents hold duplicate summaries"
    );
    assert_eq!((report.computed, report.cached), (8 * distinct, 0));
    assert_eq!((report.contexts, report.candidates), (3, 48));
    assert_eq!(report.curve_grid.first(), Some(&10));
    assert_eq!(report.curve_grid.last(), Some(&240));
    for row in &report.rows {
        for cell in &row.cells {
            let cell = cell.as_ref().unwrap();
            assert!(cell.mean.spearman.is_some(), "{} {:?}", row.method, cell);
        }
    }
    // The bias statistics see 3 x 240 comparisons per prompt; the first position is
    // favoured before debiasing and balanced after.
    for cell in &report.decisions {
        assert_eq!(cell.plain.first_position.total, 720);
        assert!(cell.plain.first_position.value().unwrap() > 0.5);
        let balanced = cell.debiased.first_position.value().unwrap();
        assert!((balanced - 0.5).abs() < 0.01, "{balanced}");
    }
    let out = tempfile::tempdir().unwrap();
    let written = write_outputs(&report, out.path()).unwrap();
    assert!(written.iter().all(|p| p.is_file()));
}

/// A stand-in for a later absolute-scoring source: predicts the human scores.
struct Oracle;

impl RowSource for Oracle {
    fn name(&self) -> &str {
        "oracle"
    }

    fn rows(&mut self, _scorer: &mut dyn Scorer, task: &AttributeTask) -> Result<SourceRows> {
        let scores = task
            .contexts
            .iter()
            .map(|c| c.human_scores(&task.column.field).unwrap())
            .collect();
        Ok(SourceRows {
            rows: vec![MethodRow {
                family: "absolute".into(),
                method: "oracle".into(),
                debiased: false,
                in_paper: false,
                per_prompt: vec![PromptScores {
                    prompt: "s1".into(),
                    scores,
                }],
            }],
            computed: 0,
            cached: 0,
        })
    }
}

#[test]
fn other_row_sources_join_the_tables() {
    let mut options = options(vec![2], 1);
    options.curves = None;
    let mut extra: Vec<Box<dyn RowSource>> = vec![Box::new(Oracle)];
    let report = reproduce(&mut mock(), &loaded(), &options, None, &mut extra).unwrap();
    let oracle = report.rows.last().unwrap();
    assert_eq!(
        (oracle.family.as_str(), oracle.method.as_str()),
        ("absolute", "oracle")
    );
    for cell in &oracle.cells {
        let spearman = cell.as_ref().unwrap().mean.spearman.unwrap();
        assert!((spearman - 1.0).abs() < 1e-12);
    }
    assert_eq!(report.rows.len(), 7);
    let text = markdown(&report);
    assert!(
        text.contains("| absolute, oracle (ext.) | ✗ | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 |"),
        "{text}"
    );
    assert!(
        text.contains("| absolute, oracle (ext.) | ✗ | s1 | 100.0 |"),
        "{text}"
    );
    assert!(!text.contains("subset.png"));
}

/// The quality of the one candidate in an absolute-scoring prompt (its last `q=`).
fn single_quality(prompt: &str) -> Result<f64> {
    let tail = prompt
        .rsplit("q=")
        .next()
        .filter(|_| prompt.contains("q="))
        .ok_or_else(|| anyhow!("no quality in prompt"))?;
    let number: String = tail
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    Ok(number.parse()?)
}

/// The pairwise mock, which also answers score labels with a distribution centred on
/// `low + (high - low) q` (so the expectation grows with the quality) and writes fixed
/// G-Eval steps.
fn mock_with_scores() -> MockScorer {
    MockScorer::new()
        .with_labels(|prompt, labels| {
            if labels.len() == 2 {
                return pairwise_answer(prompt, labels);
            }
            let scores: Vec<f64> = labels
                .iter()
                .map(|l| l.trim().parse::<f64>())
                .collect::<Result<_, _>>()?;
            let (low, high) = (scores[0], scores[scores.len() - 1]);
            let centre = low + (high - low) * single_quality(prompt)?;
            Ok(scores.iter().map(|s| -(s - centre).powi(2)).collect())
        })
        .with_generation(|_| Ok("1. Read the summary.\n2. Rate it.".to_string()))
}

#[test]
fn absolute_scoring_rows_join_the_tables_and_a_rerun_computes_nothing() {
    let mut options = options(vec![2], 1);
    options.curves = None;
    let cache = ResultCache::in_memory().unwrap();
    let source = || -> Vec<Box<dyn RowSource>> {
        vec![Box::new(AbsoluteSource::new(
            vec![ScoreMethod::Prompt, ScoreMethod::Geval],
            64,
        ))]
    };
    let mut scorer = mock_with_scores();
    let calls = scorer.calls();
    let mut extra = source();
    let report = reproduce(&mut scorer, &loaded(), &options, Some(&cache), &mut extra).unwrap();
    // Steps written once per criterion (four attributes), 18 candidates x 4 attributes
    // x 2 methods scored.
    assert_eq!(calls.generations(), 4);
    for method in ["prompt scoring", "G-Eval"] {
        let row = row(&report, method, false);
        assert_eq!(row.family, "absolute");
        assert_eq!(row.in_paper, method == "prompt scoring");
        let cell = |column: usize| row.cells[column].as_ref().unwrap().mean.spearman.unwrap();
        // The expectation grows with the quality: coherence follows it exactly,
        // fluency is its reverse.
        assert!((cell(0) - 1.0).abs() < 1e-12, "{method} COH {}", cell(0));
        assert!((cell(2) + 1.0).abs() < 1e-12, "{method} FLU {}", cell(2));
    }
    let text = markdown(&report);
    assert!(
        text.contains("| absolute, prompt scoring | ✗ | 100.0 |"),
        "{text}"
    );
    assert!(
        text.contains("| absolute, G-Eval (ext.) | ✗ | 100.0 |"),
        "{text}"
    );

    let mut again = mock_with_scores();
    let again_calls = again.calls();
    let mut extra = source();
    let rerun = reproduce(&mut again, &loaded(), &options, Some(&cache), &mut extra).unwrap();
    assert_eq!(again_calls.labels(), 0);
    assert_eq!(again_calls.generations(), 0);
    assert_eq!(rerun.computed, 0);
    assert_eq!(rerun.rows, report.rows);
}

/// With absolute-scoring rows and curves, the hybrid curve (the random design's subsets
/// with the prompt scores as experts) joins the curves, the budget table and the report,
/// and a redraw reads it back from subset.csv.
#[test]
fn the_hybrid_curve_joins_the_curves_with_absolute_rows() {
    let grid = vec![2, 10, 30];
    let options = options(grid.clone(), 3);
    let mut extra: Vec<Box<dyn RowSource>> =
        vec![Box::new(AbsoluteSource::new(vec![ScoreMethod::Prompt], 64))];
    let report = reproduce(
        &mut mock_with_scores(),
        &loaded(),
        &options,
        None,
        &mut extra,
    )
    .unwrap();
    let point_of = |design: &str, column: &str, r: usize, prompt: &str| {
        report
            .curves
            .iter()
            .find(|p| {
                p.design == design
                    && p.column == column
                    && p.r == r
                    && !p.debiased
                    && p.prompt == prompt
            })
            .unwrap_or_else(|| panic!("no {design} point for {column} at R = {r}"))
    };
    let point = |design: &str, column: &str, r: usize| point_of(design, column, r, "mean");
    for column in ["COH", "CON", "FLU", "REL"] {
        for &r in &grid {
            point("hybrid", column, r);
        }
    }
    // The prompt scores follow the coherence exactly: with two comparisons per context
    // from the unbiased prompt (c2), the hybrid ranking is nearly the humans', the random
    // design's win ratio far from it. (Under c1 the first position wins almost every
    // comparison, and its few comparisons pull the hybrid fit off the prompt scores.)
    let (hybrid, random) = (
        point_of("hybrid", "COH", 2, "c2"),
        point_of("random", "COH", 2, "c2"),
    );
    assert!(hybrid.mean > 90.0, "hybrid {}", hybrid.mean);
    assert!(
        hybrid.mean > random.mean + 20.0,
        "hybrid {} vs random {}",
        hybrid.mean,
        random.mean
    );
    // One more row per attribute in the budget table.
    assert_eq!(report.budget.len(), 4 * 8);
    assert_eq!(
        report
            .budget
            .iter()
            .filter(|r| r.design == "hybrid")
            .count(),
        4
    );
    let text = markdown(&report);
    assert!(text.contains("Hybrid (ours)"), "{text}");
    assert!(
        text.contains("| COH | hybrid | PoE with absolute scores |"),
        "{text}"
    );
    let out = tempfile::tempdir().unwrap();
    write_outputs(&report, out.path()).unwrap();
    let redrawn =
        nlg_judge::reproduce::report::redraw_figures(out.path(), Experiment::Summeval).unwrap();
    assert!(!redrawn.is_empty());
    // Without absolute rows there is no hybrid curve.
    let plain = reproduce(&mut mock(), &loaded(), &options, None, &mut []).unwrap();
    assert!(plain.curves.iter().all(|p| p.design != "hybrid"));
    assert_eq!(plain.budget.len(), 4 * 7);
}

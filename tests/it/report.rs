//! The HTML report (`compare --report`) of the demo input, made with a scripted model:
//! its data equal the JSONL outputs, its structure has every context, candidate and
//! matrix cell, and nothing in it loads from elsewhere or lets a candidate's text
//! become markup. Rubric feedback and juries (each judge's run, the agreement) in the
//! page and in its Markdown twin, from the library and through the command line.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Result};
use nlg_judge::data::{read_contexts, Candidate, Context};
use nlg_judge::engine::MockScorer;
use nlg_judge::judge::jury::{combine_comparisons, JuryWeights};
use nlg_judge::judge::pairwise::{
    run_compare, write_comparisons, write_scores, CompareOptions, CompareRequest, Debias,
    PairwiseTemplate,
};
use nlg_judge::judge::rubric::FormatOutcome;
use nlg_judge::judge::{Attribute, ScoredCandidate, Task};
use nlg_judge::progress::Progress;
use nlg_judge::rank::RankMethod;
use nlg_judge::report::{compare_run, Report};
use serde_json::Value;

/// A judge that prefers the candidate with the higher human coherence, leaning towards
/// the first position: p_A = sigma(1.2 (h_A - h_B) + 1.5), 90% of the mass on the labels.
fn judge(contexts: &[Context]) -> MockScorer {
    leaning_judge(contexts, 1.2, 1.5, 0.9)
}

/// A judge with p_A = sigma(weight (h_A - h_B) + lean) from the candidates' human
/// coherence (3 without one), `mass` of the probability on the labels.
fn leaning_judge(contexts: &[Context], weight: f64, lean: f64, mass: f64) -> MockScorer {
    let known: Vec<(String, f64)> = contexts
        .iter()
        .flat_map(|c| &c.candidates)
        .map(|c| {
            (
                c.text.clone(),
                c.scores.get("coherence").copied().unwrap_or(3.0),
            )
        })
        .collect();
    MockScorer::new().with_labels(move |prompt, _| {
        let after = |label: &str| -> Result<f64> {
            let start = prompt.find(label).ok_or_else(|| anyhow!("no {label}"))? + label.len();
            known
                .iter()
                .find(|(text, _)| prompt[start..].starts_with(text.as_str()))
                .map(|(_, h)| *h)
                .ok_or_else(|| anyhow!("unknown candidate after {label}"))
        };
        let x = weight * (after("Summary A: ")? - after("Summary B: ")?) + lean;
        let p = 1.0 / (1.0 + (-x).exp());
        Ok(vec![(mass * p).ln(), (mass * (1.0 - p)).ln()])
    })
}

fn data_of(html: &str) -> Value {
    let open = "<script type=\"application/json\" id=\"report-data\">";
    let start = html.find(open).expect("a data element") + open.len();
    let end = start + html[start..].find("</script>").expect("its end");
    serde_json::from_str(&html[start..end]).expect("the data are JSON")
}

fn lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn report_of(contexts: &[Context], debias: Debias) -> (String, Vec<Value>, Vec<Value>) {
    let mut scorer = judge(contexts);
    let mut options = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence").unwrap(),
        PairwiseTemplate::builtin("c1", Task::Summary).unwrap(),
    );
    options.rank = RankMethod::Soft;
    options.debias = debias;
    let result = run_compare(&mut scorer, contexts, &options, None).unwrap();
    let (mut scores, mut comparisons) = (Vec::new(), Vec::new());
    write_scores(&result, contexts, &mut scores).unwrap();
    write_comparisons(&result, &mut comparisons).unwrap();
    let report = Report::from_compare(
        "library.jsonl: coherence",
        vec![("model".to_string(), "a scripted judge".to_string())],
        &result,
        contexts,
        "soft win ratio",
    )
    .unwrap();
    (
        report.to_html().unwrap(),
        lines(&scores),
        lines(&comparisons),
    )
}

#[test]
fn the_demo_report_holds_the_runs_numbers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/library.jsonl");
    let contexts = read_contexts(&path).unwrap();
    let (html, scores, comparisons) = report_of(&contexts, Debias::Threshold);

    // A page that loads nothing: its policy forbids it and nothing asks for it.
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        html.contains("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';")
    );
    // (The SVG namespace is a name, not an address anything is loaded from.)
    let page = html.replace("http://www.w3.org/2000/svg", "");
    for outside in ["http://", "https://", " src=", "<link", "@import", "url("] {
        assert!(!page.contains(outside), "the page refers to {outside}");
    }
    assert!(html.contains("<title>library.jsonl: coherence</title>"));

    let data = data_of(&html);
    let inputs = data["contexts"].as_array().unwrap();
    assert_eq!(inputs.len(), contexts.len());
    let run = &data["runs"][0];
    assert_eq!(run["kind"], "pairwise");
    assert_eq!(run["human_key"], "coherence");
    let results = run["contexts"].as_array().unwrap();
    assert_eq!(results.len(), contexts.len());

    // Every candidate with its text, score and rank as the scores file writes them.
    let mut line = scores.iter();
    for ((input, view), result) in contexts.iter().zip(inputs).zip(results) {
        assert_eq!(view["id"], input.id.as_str());
        assert_eq!(view["text"], input.text.as_str());
        for (k, candidate) in input.candidates.iter().enumerate() {
            let written = line.next().unwrap();
            assert_eq!(written["candidate_id"], candidate.id.as_str());
            assert_eq!(view["candidates"][k]["id"], candidate.id.as_str());
            assert_eq!(view["candidates"][k]["text"], candidate.text.as_str());
            assert_eq!(result["scores"][k].as_f64(), written["score"].as_f64());
            assert_eq!(result["ranks"][k].as_f64(), written["rank"].as_f64());
            assert_eq!(
                result["human"][k].as_f64(),
                candidate.scores.get("coherence").copied()
            );
        }
    }
    assert!(line.next().is_none());

    // The matrix: n x n cells, each comparison's p_a as the comparisons file writes it,
    // both orders present, -1 on the diagonal.
    let mut compared = 0;
    for (input, result) in contexts.iter().zip(results) {
        let n = input.candidates.len();
        let matrix: Vec<i64> = result["matrix"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(matrix.len(), n * n);
        let index = |id: &str| input.candidates.iter().position(|c| c.id == id).unwrap();
        for c in comparisons
            .iter()
            .filter(|c| c["context_id"] == input.id.as_str())
        {
            let (a, b) = (
                index(c["a"].as_str().unwrap()),
                index(c["b"].as_str().unwrap()),
            );
            let p = c["p_a"].as_f64().unwrap();
            assert_eq!(matrix[a * n + b] as f64 / 1e6, p, "{a} vs {b}");
            compared += 1;
        }
        for i in 0..n {
            assert_eq!(matrix[i * n + i], -1);
            for j in (0..n).filter(|&j| j != i) {
                assert!(
                    matrix[i * n + j] >= 0,
                    "the full design compares {i} vs {j}"
                );
            }
        }
    }
    assert_eq!(compared, comparisons.len());
    assert_eq!(
        compared,
        contexts
            .iter()
            .map(|c| c.candidates.len() * (c.candidates.len() - 1))
            .sum::<usize>()
    );

    // The positional bias and agreement figures of the run.
    let fraction = |v: &Value| v[0].as_f64().unwrap() / v[1].as_f64().unwrap();
    assert!(
        fraction(&run["first_position_raw"]) > 0.5,
        "the judge leans to A"
    );
    assert!(
        (fraction(&run["first_position"]) - 0.5).abs() <= 0.1,
        "debiased"
    );
    assert!(run["tau"].as_f64().unwrap() > 0.5);
    let spearman = run["correlation"]["spearman"]["value"].as_f64().unwrap();
    assert!(spearman > 0.8, "{spearman}");
    // One context: no interval, and the page is told why.
    assert!(run["correlation"]["spearman"]["ci"].is_null());
    assert!(run["correlation"]["no_interval"]
        .as_str()
        .unwrap()
        .starts_with("no interval: one group (context) only"));
    assert_eq!(
        results[0]["spearman"].as_f64(),
        Some(spearman),
        "one context"
    );
}

#[test]
fn candidate_texts_stay_text() {
    let hostile = "</script><script>alert('x')</script><img src=x onerror=alert(1)> & \u{2028}";
    let contexts = vec![Context {
        id: "<b>ctx</b>".into(),
        text: hostile.into(),
        candidates: (0..3)
            .map(|k| Candidate {
                id: format!("c{k}<i>"),
                text: format!("{hostile} {k}"),
                reference: None,
                scores: BTreeMap::from([("coherence".to_string(), k as f64)]),
                system_id: Some("\"sys\"".into()),
                metadata: Default::default(),
                source: None,
            })
            .collect(),
    }];
    let (html, _, _) = report_of(&contexts, Debias::None);
    // The only script elements are the page's own two.
    assert_eq!(html.matches("<script").count(), 2);
    assert_eq!(html.matches("</script>").count(), 2);
    assert!(!html.contains("<img") && !html.contains("<b>ctx"));
    // The texts come back whole from the data.
    let data = data_of(&html);
    assert_eq!(data["contexts"][0]["text"], hostile);
    assert_eq!(data["contexts"][0]["candidates"][1]["id"], "c1<i>");
}

/// A scored candidate of `context` with a rubric feedback and its format.
fn graded(context: &Context, k: usize, feedback: &str, format: FormatOutcome) -> ScoredCandidate {
    let candidate = &context.candidates[k];
    ScoredCandidate {
        context_id: context.id.clone(),
        candidate_id: candidate.id.clone(),
        system_id: None,
        score: 1.0 + k as f64,
        distribution: None,
        feedback: Some(feedback.to_string()),
        format: Some(format),
        reasoning: None,
        reasoning_cut: false,
        human: candidate.scores.clone(),
    }
}

#[test]
fn rubric_feedback_goes_in_as_text_in_html_and_markdown() {
    let hostile = "Good | but </script><script>alert(1)</script> *see* [x](y)\nSecond line.";
    let contexts = vec![Context {
        id: "d1".into(),
        text: "An article.".into(),
        candidates: (0..2)
            .map(|k| Candidate {
                id: format!("c{k}"),
                text: format!("Summary {k}."),
                reference: None,
                scores: BTreeMap::from([("coherence".to_string(), k as f64)]),
                system_id: None,
                metadata: Default::default(),
                source: None,
            })
            .collect(),
    }];
    let scored = vec![
        graded(&contexts[0], 0, hostile, FormatOutcome::Cut),
        graded(&contexts[0], 1, "Clear.", FormatOutcome::Kept),
    ];
    let report = Report::from_scores(
        "rubric",
        vec![],
        "Coherence",
        "rubric score (plain format)",
        &scored,
        &contexts,
        Some("coherence"),
    )
    .unwrap();
    let html = report.to_html().unwrap();
    assert_eq!(html.matches("<script").count(), 2);
    let data = data_of(&html);
    let context = &data["runs"][0]["contexts"][0];
    assert_eq!(context["feedback"], serde_json::json!([hostile, "Clear."]));
    assert_eq!(context["formats"], serde_json::json!(["cut", "kept"]));

    let markdown = report.to_markdown();
    assert!(!markdown.contains("<script"), "{markdown}");
    // Best first: c1 (score 2) before c0, with its format in the table.
    let c1 = markdown
        .find("| 1 | c1 | 2.0000 | 1.00 | kept | Summary 1. |")
        .unwrap();
    let c0 = markdown
        .find("| 2 | c0 | 1.0000 | 0.00 | cut | Summary 0. |")
        .unwrap();
    assert!(c1 < c0, "{markdown}");
    assert!(
        markdown.contains(
            "- c0: Good \\| but &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt; \\*see\\* \
             \\[x\\](y) Second line."
        ),
        "{markdown}"
    );
    // Other methods have no feedback to show.
    let plain: Vec<ScoredCandidate> = scored
        .iter()
        .cloned()
        .map(|mut c| {
            c.feedback = None;
            c.format = None;
            c
        })
        .collect();
    let report = Report::from_scores("s", vec![], "c", "score", &plain, &contexts, None).unwrap();
    let data = data_of(&report.to_html().unwrap());
    assert!(data["runs"][0]["contexts"][0].get("feedback").is_none());
    assert!(!report.to_markdown().contains("Feedback"));
}

#[test]
fn a_jury_report_holds_its_ranking_each_judge_and_their_agreement() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/library.jsonl");
    let contexts = read_contexts(&path).unwrap();
    let options = CompareRequest::new("coherence")
        .options(Progress::none())
        .unwrap();
    let results: Vec<_> = [(1.0, 0.0), (-0.5, 1.0)]
        .iter()
        .map(|&(weight, lean)| {
            let mut judge = leaning_judge(&contexts, weight, lean, 1.0);
            run_compare(&mut judge, &contexts, &options, None).unwrap()
        })
        .collect();
    let names = vec!["honest".to_string(), "contrary <b>".to_string()];
    let refs: Vec<_> = results.iter().collect();
    let jury =
        combine_comparisons(&names, &refs, &JuryWeights::Given(vec![2.0, 1.0]), false).unwrap();
    let judges = results
        .iter()
        .map(|r| {
            (
                compare_run(r, &contexts, "win ratio").unwrap(),
                r.diagnostics.clone(),
            )
        })
        .collect();
    let report = Report::from_jury(
        "jury",
        vec![],
        &jury,
        &contexts,
        "jury score",
        Some("coherence"),
        judges,
    )
    .unwrap();
    let html = report.to_html().unwrap();
    assert!(!html.contains("<b>"));
    let data = data_of(&html);
    let runs = data["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["kind"], "jury");
    assert_eq!(runs[0]["judges"], serde_json::json!(names));
    assert_eq!(
        (runs[1]["name"].as_str(), runs[2]["name"].as_str()),
        (Some("honest"), Some("contrary <b>"))
    );
    assert_eq!(runs[1]["kind"], "pairwise");
    let six = |x: f64| format!("{x:.6}").parse::<f64>().unwrap();
    let combined = &jury.contexts[0];
    let view = &runs[0]["contexts"][0];
    for k in 0..contexts[0].candidates.len() {
        assert_eq!(view["scores"][k].as_f64(), Some(six(combined.scores[k])));
        assert_eq!(view["ranks"][k].as_f64(), Some(combined.ranks[k]));
        for j in 0..2 {
            let own = six(results[j].contexts[0].scores[k]);
            assert_eq!(view["judge_scores"][j][k].as_f64(), Some(own));
            assert_eq!(runs[1 + j]["contexts"][0]["scores"][k].as_f64(), Some(own));
        }
    }
    // The judges disagree: the agreement says so, as the jury computed it.
    let spearman = data["jury"]["agreement"]["spearman"][0][1]
        .as_f64()
        .unwrap();
    assert_eq!(Some(spearman), jury.agreement.spearman[0][1]);
    assert!(spearman < 0.0, "{spearman}");
    assert_eq!(data["jury"]["judges"][0]["weight"], 2.0);
    assert!(data["jury"]["agreement"]["kappa"].is_array());
    // The jury's agreement with the human scores.
    assert!(runs[0]["correlation"]["spearman"]["value"].is_number());

    let markdown = report.to_markdown();
    for needle in [
        "## The jury\n\n| judge | weight |\n|---|---:|\n| honest | 2.000 |\n| contrary &lt;b&gt; | 1.000 |",
        "| | honest | contrary &lt;b&gt; |",
        "## jury (the jury's ranking; jury score)",
        "| rank | candidate | jury score | human coherence | honest | contrary &lt;b&gt; | text |",
        "## honest (pairwise comparison; win ratio)",
    ] {
        assert!(markdown.contains(needle), "{needle}\n{markdown}");
    }
}

#[test]
fn the_command_line_writes_rubric_and_jury_reports_in_html_and_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/library.jsonl");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args(args)
            .arg("--input")
            .arg(&input)
            .arg("--no-cache")
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{args:?}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    // The mock writes " 1. Read the text.\n2. Rate it." and never the plain format's
    // `Score:`: every feedback is `missing`, and the report shows each.
    run(&[
        "score",
        "--model",
        "mock",
        "--method",
        "rubric",
        "--rubric",
        "coherence",
        "--output",
        "rubric.jsonl",
        "--report",
        "rubric.html",
    ]);
    let data = data_of(&std::fs::read_to_string(dir.path().join("rubric.html")).unwrap());
    let context = &data["runs"][0]["contexts"][0];
    assert_eq!(context["feedback"][0], "1. Read the text.\n2. Rate it.");
    assert_eq!(context["formats"][4], "missing");
    assert!(data["runs"][0]["diagnostics"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "format" && c["status"] == "warn"));

    // Relative grading with a judge that may call a tie (Auto-J's protocol): the run panel
    // says how the ranking counted the ties and the data carry each comparison's P(tie);
    // without a tie label (plain) neither.
    for (protocol, tied) in [("auto-j", true), ("plain", false)] {
        let (output, report) = (format!("{protocol}.jsonl"), format!("{protocol}.html"));
        run(&[
            "compare",
            "--model",
            "mock",
            "--rubric",
            "coherence",
            "--protocol",
            protocol,
            "--max-feedback-tokens",
            "8",
            "--output",
            &output,
            "--report",
            &report,
        ]);
        let data = data_of(&std::fs::read_to_string(dir.path().join(&report)).unwrap());
        let ties = data["facts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f[0] == "ties");
        assert_eq!(ties.is_some(), tied, "{protocol}: {:?}", data["facts"]);
        if let Some(ties) = ties {
            assert!(
                ties[1].as_str().unwrap().contains("half a win for each"),
                "{ties}"
            );
        }
        let context = &data["runs"][0]["contexts"][0];
        assert_eq!(context.get("p_tie").is_some(), tied, "{protocol}");
    }

    let stdout = run(&[
        "compare",
        "--model",
        "mock",
        "--model",
        "mock:delay-ms=0",
        "--attribute",
        "coherence",
        "--output",
        "jury.jsonl",
        "--report",
        "jury.html",
    ]);
    assert!(
        stdout.contains("results: report to open in a browser: jury.html"),
        "{stdout}"
    );
    let data = data_of(&std::fs::read_to_string(dir.path().join("jury.html")).unwrap());
    let names: Vec<&str> = data["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["jury", "mock", "mock:delay-ms=0"]);
    assert_eq!(data["jury"]["judges"][1]["name"], "mock:delay-ms=0");
    assert!(data["facts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f[0] == "judges" && f[1] == "mock (weight 1), mock:delay-ms=0 = mock (weight 1)"));

    let stdout = run(&[
        "score",
        "--model",
        "mock",
        "--model",
        "mock:delay-ms=0",
        "--method",
        "prompt",
        "--attribute",
        "coherence",
        "--output",
        "scores.jsonl",
        "--report",
        "jury.md",
    ]);
    assert!(
        stdout.contains("results: report (Markdown): jury.md"),
        "{stdout}"
    );
    let markdown = std::fs::read_to_string(dir.path().join("jury.md")).unwrap();
    assert!(markdown.starts_with("# library.jsonl: coherence of 1 context(s), a jury of 2\n"));
    assert!(markdown.contains("## The jury"), "{markdown}");
    assert!(
        markdown.contains("| rank | candidate | jury score (standardised) | human coherence | mock | mock:delay-ms=0 | text |"),
        "{markdown}"
    );
}

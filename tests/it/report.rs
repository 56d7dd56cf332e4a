//! The HTML report (`compare --report`) of the demo input, made with a scripted model:
//! its data equal the JSONL outputs, its structure has every context, candidate and
//! matrix cell, and nothing in it loads from elsewhere or lets a candidate's text
//! become markup.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Result};
use nlg_judge::data::{read_contexts, Candidate, Context};
use nlg_judge::engine::MockScorer;
use nlg_judge::judge::pairwise::{
    run_compare, write_comparisons, write_scores, CompareOptions, Debias, PairwiseTemplate,
};
use nlg_judge::judge::{Attribute, Task};
use nlg_judge::rank::RankMethod;
use nlg_judge::report::Report;
use serde_json::Value;

/// A judge that prefers the candidate with the higher human coherence, leaning towards
/// the first position: p_A = sigma(1.2 (h_A - h_B) + 1.5).
fn judge(contexts: &[Context]) -> MockScorer {
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
        let p =
            1.0 / (1.0 + (-(1.2 * (after("Summary A: ")? - after("Summary B: ")?) + 1.5)).exp());
        Ok(vec![(0.9 * p).ln(), (0.9 * (1.0 - p)).ln()])
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

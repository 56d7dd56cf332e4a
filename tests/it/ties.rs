//! Ties (issue 59, item 4): a relative protocol with a tie label reads P(A), P(B) and
//! P(tie); the win ratio and Bradley-Terry count a tie as half a win for each side, Product
//! of Experts reads P(A) renormalised over A and B, each stated in the run's `ties` and
//! the rubric record of every row; the tie rate is a diagnostic; the format check names
//! the tie among the labels and the report shows each comparison's P(tie). A protocol
//! without a tie reads A and B as before. The judge is a scripted mock; the protocols are
//! inline.

use nlg_judge::data::{Candidate, Context};
use nlg_judge::engine::MockScorer;
use nlg_judge::judge::attribute::{Attribute, Task};
use nlg_judge::judge::pairwise::run::{
    run_compare, write_comparisons, write_scores, CompareOptions, CompareResult,
};
use nlg_judge::judge::pairwise::{Design, PairwiseTemplate};
use nlg_judge::judge::rubric::protocol::Origin;
use nlg_judge::judge::rubric::relative::RelativeGrading;
use nlg_judge::judge::rubric::{Rubric, RubricProtocol};
use nlg_judge::rank::{poe_gaussian, BradleyTerry, Outcome, RankMethod};
use nlg_judge::report::Report;
use serde_json::Value;

/// An inline protocol: the verdict after `Verdict:`, `A`, `B` and (with `tie`) `Tie`.
fn protocol(tie: bool) -> RubricProtocol {
    let choices = if tie {
        r#"{ a = "A", b = "B", tie = "Tie" }"#
    } else {
        r#"{ a = "A", b = "B" }"#
    };
    let text = format!(
        r#"name = "tie-judge"
[relative]
user = '''Which is better?
A: {{{{ response_a }}}}
B: {{{{ response_b }}}}'''
opening = "Feedback:"
marker = "Verdict:"
separator = " "
choices = {choices}
"#
    );
    RubricProtocol::from_toml(&text, Origin::Inline).unwrap()
}

/// Candidates x, y, z (indices 0, 1, 2), named in their texts.
fn contexts() -> Vec<Context> {
    let candidate = |id: &str| Candidate {
        id: id.to_string(),
        text: format!("candidate {id}."),
        reference: None,
        scores: Default::default(),
        system_id: None,
        metadata: Default::default(),
        source: None,
    };
    vec![Context {
        id: "d1".into(),
        text: "An article.".into(),
        candidates: ["x", "y", "z"].into_iter().map(candidate).collect(),
    }]
}

/// The raw probabilities the judge gives A, B and the tie with `first` shown as A (each
/// triple's mass is 0.8, so the three normalised are 1.25 times these):
///
/// | A vs B | raw A, B, tie | normalised | most likely | P(A) + P(tie)/2 | P(A)/(P(A)+P(B)) |
/// |---|---|---|---|---|---|
/// | x vs y | .1 .3 .4 | .125 .375 .5 | tie | .375 | .25 |
/// | y vs x | .2 .1 .5 | .25 .125 .625 | tie | .5625 | 2/3 |
/// | x vs z | .05 .6 .15 | .0625 .75 .1875 | B | .15625 | 1/13 |
/// | z vs x | .6 .1 .1 | .75 .125 .125 | A | .8125 | 6/7 |
/// | y vs z | .2 .2 .4 | .25 .25 .5 | tie | .5 | .5 |
/// | z vs y | .2 .1 .5 | .25 .125 .625 | tie | .5625 | 2/3 |
fn raw(first: &str, second: &str) -> [f64; 3] {
    match (first, second) {
        ("x", "y") => [0.1, 0.3, 0.4],
        ("y", "x") => [0.2, 0.1, 0.5],
        ("x", "z") => [0.05, 0.6, 0.15],
        ("z", "x") => [0.6, 0.1, 0.1],
        ("y", "z") => [0.2, 0.2, 0.4],
        ("z", "y") => [0.2, 0.1, 0.5],
        other => panic!("{other:?}"),
    }
}

/// The candidate shown after `heading` in `prompt`.
fn shown(prompt: &str, heading: &str) -> String {
    let at = prompt.find(heading).unwrap() + heading.len();
    let rest = &prompt[at..];
    let at = rest.find("candidate ").unwrap() + "candidate ".len();
    rest[at..at + 1].to_string()
}

/// A judge answering at once (no feedback) with [`raw`]'s probabilities; it checks the
/// labels it is asked for: ` A`, ` B` and, with a tie, ` Tie`.
fn judge(tie: bool) -> MockScorer {
    MockScorer::new().with_labels(move |prompt, labels| {
        let expected: &[&str] = if tie {
            &[" A", " B", " Tie"]
        } else {
            &[" A", " B"]
        };
        assert_eq!(labels, expected, "the choices read after the marker");
        let raw = raw(&shown(prompt, "\nA: "), &shown(prompt, "\nB: "));
        Ok(raw[..labels.len()].iter().map(|p| p.ln()).collect())
    })
}

fn run(tie: bool, rank: RankMethod) -> CompareResult {
    run_with(judge(tie), tie, rank, None)
}

/// A full design of [`contexts`] put to `judge` with the inline protocol, a feedback of at
/// most `feedback_tokens` before each verdict (none: the verdict at once).
fn run_with(
    mut judge: MockScorer,
    tie: bool,
    rank: RankMethod,
    feedback_tokens: Option<usize>,
) -> CompareResult {
    let task = Task::Summary;
    let mut options = CompareOptions::new(
        task,
        Attribute::named("coherence").unwrap(),
        PairwiseTemplate::builtin("c1", task).unwrap(),
    );
    options.design = Design::Full;
    options.rank = rank;
    let rubric = Rubric::builtin("coherence", task).unwrap();
    let relative =
        RelativeGrading::new(&judge, rubric, Some(protocol(tie)), feedback_tokens, false).unwrap();
    options.relative = Some(Box::new(relative));
    run_compare(&mut judge, &contexts(), &options, None).unwrap()
}

fn lines(write: impl Fn(&mut Vec<u8>)) -> Vec<Value> {
    let mut out = Vec::new();
    write(&mut out);
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The keys of a JSON object, sorted.
fn keys(object: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = object
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
    }
}

#[test]
fn a_tie_label_is_read_as_a_third_probability() {
    let result = run(true, RankMethod::WinRatio);
    let context = &result.contexts[0];
    assert_eq!(context.comparisons.len(), 6);
    let ids = ["x", "y", "z"];
    for c in &context.comparisons {
        let (p_b, p_tie) = (c.p_b.unwrap(), c.p_tie.unwrap());
        assert!((c.p_a + p_b + p_tie - 1.0).abs() < 1e-12, "{c:?}");
        let raw = raw(ids[c.first], ids[c.second]);
        close(&[c.p_a, p_b, p_tie], &raw.map(|p| p / 0.8));
        assert!(
            (c.label_mass - 0.8).abs() < 1e-12,
            "raw mass of the three: {c:?}"
        );
    }
    // The comparisons file carries P(B) and P(tie) beside P(A).
    let rows = lines(|out| write_comparisons(&result, out).unwrap());
    let row = rows
        .iter()
        .find(|r| r["a"] == "x" && r["b"] == "y")
        .unwrap();
    assert_eq!(
        (&row["p_a"], &row["p_b"], &row["p_tie"]),
        (
            &serde_json::json!(0.125),
            &serde_json::json!(0.375),
            &serde_json::json!(0.5)
        )
    );
    // How the ties were counted is stated in the run and in every row's rubric record.
    let ties = result.ties.as_deref().expect("a ties note");
    assert!(ties.contains("half a win for each candidate"), "{ties}");
    let scores = lines(|out| write_scores(&result, &contexts(), out).unwrap());
    for row in scores.iter().chain(&rows) {
        assert_eq!(row["rubric"]["ties"], ties, "{row}");
    }
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["ties"], ties);
    assert!(json["contexts"][0]["comparisons"][0].get("p_tie").is_some());
    // The label mass names the three labels.
    let mass = result.diagnostics.get("label_mass").unwrap();
    assert!(
        mass.message.contains("labels A, B and tie"),
        "{}",
        mass.message
    );
}

#[test]
fn win_ratio_counts_the_most_likely_tie_as_half_a_win_each() {
    // Half wins: x 1 of 4 (the two ties with y), y 2 of 4 (four ties), z 3 of 4 (two wins
    // over x, two ties with y). Deciding the ties between A and B instead gives 0, 2, 4.
    let result = run(true, RankMethod::WinRatio);
    assert_eq!(result.contexts[0].scores, [0.25, 0.5, 0.75]);
    assert!(result.ties.unwrap().contains("the win ratio counts"));
}

#[test]
fn soft_win_ratio_and_bradley_terry_read_a_tie_as_half_a_win() {
    // The expected outcomes P(A) + P(tie)/2 of the table in `raw`.
    let expected = [
        (0, 1, 0.375),
        (1, 0, 0.5625),
        (0, 2, 0.15625),
        (2, 0, 0.8125),
        (1, 2, 0.5),
        (2, 1, 0.5625),
    ];
    let soft = run(true, RankMethod::Soft);
    // x: .375 + .4375 + .15625 + .1875; y: .625 + .5625 + .5 + .4375;
    // z: .84375 + .8125 + .5 + .5625; each of 4.
    close(
        &soft.contexts[0].scores,
        &[1.15625 / 4.0, 2.125 / 4.0, 2.71875 / 4.0],
    );
    let bt = run(true, RankMethod::BradleyTerry);
    let outcomes: Vec<Outcome> = expected
        .iter()
        .map(|&(i, j, p)| Outcome::new(i, j, p))
        .collect();
    let want = BradleyTerry::default().fit(3, &outcomes).unwrap();
    close(&bt.contexts[0].scores, &want);
    assert!(bt.ties.unwrap().contains("Bradley-Terry is fitted"));
}

#[test]
fn product_of_experts_reads_p_a_renormalised_over_a_and_b() {
    let result = run(true, RankMethod::Poe);
    let renormalised = [
        (0, 1, 0.25),
        (1, 0, 2.0 / 3.0),
        (0, 2, 1.0 / 13.0),
        (2, 0, 6.0 / 7.0),
        (1, 2, 0.5),
        (2, 1, 2.0 / 3.0),
    ];
    let outcomes: Vec<Outcome> = renormalised
        .iter()
        .map(|&(i, j, p)| Outcome::new(i, j, p))
        .collect();
    let want = poe_gaussian(3, &outcomes);
    let got = &result.contexts[0].scores;
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-9, "{got:?} vs {want:?}");
    }
    assert!(result.ties.unwrap().contains("P(A)/(P(A)+P(B))"));
}

#[test]
fn the_tie_rate_warns_when_the_judge_mostly_calls_ties() {
    let result = run(true, RankMethod::WinRatio);
    let check = result
        .diagnostics
        .get("tie_rate")
        .expect("a tie_rate check");
    assert!((check.value - 4.0 / 6.0).abs() < 1e-12, "{check:?}");
    assert!(check.is_warning());
    assert_eq!(check.count, 6);
    // Mean P(tie): (.5 + .625 + .1875 + .125 + .5 + .625) / 6 = .427.
    assert!(
        check
            .message
            .contains("4 of 6 comparisons (mean P(tie) 0.427)")
            && check.message.contains("the win ratio counts"),
        "{}",
        check.message
    );
    let remedy = check.remedy.as_deref().unwrap();
    assert!(
        remedy.contains("--rank poe") && remedy.contains("without a tie label"),
        "{remedy}"
    );
    // Under Product of Experts the remedy does not offer it again.
    let poe = run(true, RankMethod::Poe);
    let check = poe.diagnostics.get("tie_rate").unwrap();
    assert!(!check.remedy.as_deref().unwrap().contains("--rank poe"));
    let text = result.diagnostics.text();
    assert!(text.contains("WARNING tie_rate"), "{text}");
}

#[test]
fn without_a_tie_label_the_comparisons_read_a_and_b_as_before() {
    let result = run(false, RankMethod::WinRatio);
    assert!(result.ties.is_none());
    assert!(result.diagnostics.get("tie_rate").is_none());
    let mass = result.diagnostics.get("label_mass").unwrap();
    assert!(mass.message.contains("labels A and B"), "{}", mass.message);
    let ids = ["x", "y", "z"];
    for c in &result.contexts[0].comparisons {
        assert_eq!((c.p_b, c.p_tie), (None, None));
        let [a, b, _] = raw(ids[c.first], ids[c.second]);
        assert!((c.p_a - a / (a + b)).abs() < 1e-12, "{c:?}");
        assert!((c.label_mass - (a + b)).abs() < 1e-12, "{c:?}");
    }
    // Decided between A and B: x loses all four, y wins over x twice, z all four.
    assert_eq!(result.contexts[0].scores, [0.0, 0.5, 1.0]);
    let rows = lines(|out| write_comparisons(&result, out).unwrap());
    for row in &rows {
        assert_eq!(
            keys(row),
            ["a", "b", "context_id", "label_mass", "p_a", "rubric"]
        );
        assert!(row["rubric"].get("ties").is_none());
    }
    let json = serde_json::to_value(&result).unwrap();
    assert!(json.get("ties").is_none());
    assert_eq!(
        keys(&json["contexts"][0]["comparisons"][0]),
        ["first", "label_mass", "p_a", "second"]
    );
}

/// [`run`] with feedback: the judge writes `feedback` before its verdict on every pair.
fn run_with_feedback(tie: bool, feedback: &'static str) -> CompareResult {
    let judge = judge(tie).with_generation(move |_| Ok(feedback.to_string()));
    run_with(judge, tie, RankMethod::WinRatio, Some(64))
}

/// The report of a run: its HTML page's data (the run's one context) and its Markdown.
fn report(result: &CompareResult) -> (Value, String) {
    let report = Report::from_compare("ties", vec![], result, &contexts(), "win ratio").unwrap();
    let html = report.to_html().unwrap();
    let open = "<script type=\"application/json\" id=\"report-data\">";
    let start = html.find(open).unwrap() + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    let data: Value = serde_json::from_str(&html[start..end]).unwrap();
    (data["runs"][0]["contexts"][0].clone(), report.to_markdown())
}

#[test]
fn the_format_check_and_the_report_name_the_tie() {
    let result = run_with_feedback(true, " They are about as good. Verdict: Tie");
    // The format check names the protocol's own labels, the tie among them.
    let format = result.diagnostics.get("format").expect("a format check");
    assert!(
        format.message.starts_with(
            "6 of 6 feedbacks kept to the format (`Verdict:` once, then A, B or Tie); the \
             marker without A, B or Tie 0,"
        ),
        "{}",
        format.message
    );
    // The report's data: each comparison's P(tie) beside the matrix's P(A)/(P(A)+P(B)),
    // in millionths as the comparisons file writes them; -1 where not compared.
    let (context, markdown) = report(&result);
    let p_tie: Vec<i64> = context["p_tie"]
        .as_array()
        .expect("the report's P(tie)")
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(p_tie.len(), 9);
    for c in &result.contexts[0].comparisons {
        let want = (c.p_tie.unwrap() * 1e6).round() as i64;
        assert_eq!(p_tie[c.first * 3 + c.second], want, "{c:?}");
    }
    for i in 0..3 {
        assert_eq!(p_tie[i * 3 + i], -1);
    }
    // x vs y: P(A), P(B), P(tie) .125, .375, .5 (the table at `raw`): P(A better) .25.
    assert_eq!(p_tie[1], 500_000);
    assert_eq!(context["matrix"][1], 250_000);
    // The Markdown's feedback lines carry P(tie) after P(A better), and say over what.
    assert!(
        markdown.contains(
            "Feedback on each comparison (A shown first; P(A better) over A and B, the tie \
             left out; P(tie) over all three):\n\n- A x vs B y, P(A better) 0.250, P(tie) \
             0.500, format kept: They are about as good.\n"
        ),
        "{markdown}"
    );
}

#[test]
fn without_a_tie_label_the_format_check_and_the_report_are_as_before() {
    let result = run_with_feedback(false, " A reads better. Verdict: A");
    let format = result.diagnostics.get("format").unwrap();
    assert!(
        format.message.starts_with(
            "6 of 6 feedbacks kept to the format (`Verdict:` once, then A or B); the marker \
             without A or B 0,"
        ),
        "{}",
        format.message
    );
    let (context, markdown) = report(&result);
    // No P(tie) in the page's data: the context's keys are the ones it always had.
    assert_eq!(
        keys(&context),
        [
            "accuracy",
            "consistency",
            "distributions",
            "first_position",
            "human",
            "kendall",
            "matrix",
            "note",
            "pair_feedback",
            "ranks",
            "scores",
            "spearman"
        ]
    );
    // x vs y: P(A) = .1/(.1 + .3) over A and B.
    assert!(
        markdown.contains(
            "Feedback on each comparison (A shown first):\n\n- A x vs B y, P(A better) 0.250, \
             format kept: A reads better.\n"
        ),
        "{markdown}"
    );
    assert!(!markdown.contains("P(tie)"), "{markdown}");
}

/// `/v1/compare` with an inline protocol that has a tie label: each comparison's
/// feedback comes back with P(A), P(B) and P(tie), the answer says how the ranking
/// counted the ties, and the diagnostics carry the tie rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_answers_the_three_probabilities_and_how_ties_counted() {
    use crate::common::service::Service;
    use nlg_judge::server::ServerConfig;
    use serde_json::json;

    let judge = judge(true).with_generation(|_| Ok(" They are about as good. Verdict: Tie".into()));
    let server = Service::start(Box::new(judge), ServerConfig::default()).await;
    let protocol = json!({
        "name": "tie-judge",
        "relative": {
            "user": "Which is better?\nA: {{ response_a }}\nB: {{ response_b }}",
            "opening": "Feedback:",
            "marker": "Verdict:",
            "separator": " ",
            "choices": {"a": "A", "b": "B", "tie": "Tie"}
        }
    });
    let candidates: Vec<Value> = ["x", "y", "z"]
        .iter()
        .map(|id| json!({"id": id, "text": format!("candidate {id}.")}))
        .collect();
    let answer = server
        .post(
            "/v1/compare",
            &json!({"context": "An article.", "candidates": candidates, "rubric": "coherence",
                    "protocol": protocol, "rank": "win-ratio", "max_feedback_tokens": 256}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let body = answer.json();
    let scores: Vec<f64> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["score"].as_f64().unwrap())
        .collect();
    assert_eq!(scores, [0.25, 0.5, 0.75], "ties as half wins");
    let ties = body["ties"].as_str().expect("the answer's ties");
    assert!(ties.contains("half a win for each candidate"), "{ties}");
    let feedbacks = body["feedbacks"].as_array().unwrap();
    assert_eq!(feedbacks.len(), 6);
    for feedback in feedbacks {
        let sum: f64 = ["p_a", "p_b", "p_tie"]
            .iter()
            .map(|k| feedback[k].as_f64().unwrap())
            .sum();
        assert!((sum - 1.0).abs() < 1e-12, "{feedback}");
        assert_eq!(feedback["format"], "kept", "`Tie` is one of the choices");
    }
    let tie_rate = body["diagnostics"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "tie_rate")
        .expect("the tie rate");
    assert_eq!(tie_rate["status"], "warn");
    assert!(
        tie_rate["remedy"]
            .as_str()
            .unwrap()
            .contains("\"rank\": \"poe\""),
        "{tie_rate}"
    );
    server.shutdown().await;
}

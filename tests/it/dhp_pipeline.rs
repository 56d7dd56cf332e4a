//! DHP end to end with scripted models: perturb (rules and scripted LLM edits), score with
//! G-Eval and pairwise, analyze. The judge prefers exactly the original texts, so every
//! perturbation must come out discerned (D > 1); a judge that cannot tell them apart
//! must not (D = 0 with p = 1).

use std::collections::BTreeSet;

use nlg_judge::dhp::items::DhpItem;
use nlg_judge::dhp::llm::LlmEditor;
use nlg_judge::dhp::perturb::{read_existing, run_perturb, Editor, PerturbPlan, Status};
use nlg_judge::dhp::score::{score_perturbations, DhpMethod, DhpScoreOptions, ScoreEvent};
use nlg_judge::dhp::{analyze, DhpTask, Weights};
use nlg_judge::engine::{MockScorer, ResultCache};
use nlg_judge::judge::geval::StepsSource;

fn items() -> Vec<DhpItem> {
    let names = [
        "Anna", "Ben", "Carla", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jo", "Kim", "Lu",
    ];
    names
        .iter()
        .enumerate()
        .map(|(i, name)| DhpItem {
            id: format!("story{i}"),
            context: format!("{name} wanted a dog. {name} saved money. {name} went to the shelter. {name} met a puppy."),
            text: format!("{name} adopted the puppy and named it Spot number {i}."),
            wrong: Some(format!("{name} decided to buy a boat instead.")),
        })
        .collect()
}

/// The judge: in a G-Eval prompt, the top score when the rated ending is an original,
/// else the bottom one;
/// in a pairwise prompt, the side holding the original. An original is the story's own
/// ending after that story.
fn judge(originals: Vec<(String, String)>) -> MockScorer {
    MockScorer::new().with_labels(move |prompt, labels| {
        let wanted = if prompt.contains("Ending A:") {
            let a_original = originals.iter().any(|(story, o)| {
                prompt.contains(story) && prompt.contains(&format!("Ending A: {o}\n"))
            });
            if a_original {
                "A"
            } else {
                "B"
            }
        } else {
            let original = originals.iter().any(|(story, o)| {
                prompt.contains(story) && prompt.contains(&format!("Ending:\n\n{o}\n"))
            });
            // the top of the criterion's scale for originals, the bottom otherwise
            let scores: Vec<i64> = labels
                .iter()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            let pick = if original {
                scores.iter().max()
            } else {
                scores.iter().min()
            };
            return Ok(labels
                .iter()
                .map(|l| {
                    if l.trim().parse::<i64>().ok().as_ref() == pick {
                        -0.1
                    } else {
                        -4.0
                    }
                })
                .collect());
        };
        Ok(labels
            .iter()
            .map(|l| if l.trim() == wanted { -0.1 } else { -4.0 })
            .collect())
    })
}

fn perturbed_rows(dir: &std::path::Path) -> Vec<nlg_judge::dhp::perturb::PerturbRow> {
    let items = items();
    let plan = PerturbPlan {
        task: DhpTask::StoryCompletion,
        perturbations: DhpTask::StoryCompletion.perturbations(),
        items: &items,
        seed: 11,
    };
    // The "LLM" swaps the name for a fictional one or breaks the grammar.
    let mut editor_model = MockScorer::new().with_generation(|prompt| {
        let ending = prompt
            .rsplit("Ending:\n\n")
            .next()
            .and_then(|s| s.split("\n\nRevised").next())
            .unwrap_or_default()
            .to_string();
        Ok(if prompt.contains("fictional") {
            format!(
                "Revised Ending:\nZorblax{}",
                &ending[ending.find(' ').unwrap_or(0)..]
            )
        } else {
            ending.replace("adopted", "adopt")
        })
    });
    let mut editor = LlmEditor {
        scorer: &mut editor_model,
        cache: None,
        seed: 1,
        attempts: 2,
        temperature: 0.7,
        top_p: 0.9,
    };
    let output = dir.join("perturbed.jsonl");
    run_perturb(
        &plan,
        &output,
        Some(&mut editor as &mut dyn Editor),
        &mut |_| Ok(()),
    )
    .unwrap();
    read_existing(&output).unwrap()
}

#[test]
fn a_judge_that_prefers_originals_is_discerning_on_every_perturbation() {
    let dir = tempfile::tempdir().unwrap();
    let rows = perturbed_rows(dir.path());
    assert_eq!(rows.len(), 12 * 6);
    assert!(rows.iter().all(|r| r.status == Status::Ok), "{rows:?}");
    let fictional = rows
        .iter()
        .find(|r| r.perturbation == "fictional-entities")
        .unwrap();
    assert!(fictional
        .perturbed
        .as_deref()
        .unwrap()
        .starts_with("Zorblax adopted"));

    // (story, its own ending): another story's ending is not an original here
    let originals: Vec<(String, String)> =
        items().into_iter().map(|i| (i.context, i.text)).collect();
    let cache = ResultCache::in_memory().unwrap();
    let options = DhpScoreOptions {
        task: DhpTask::StoryCompletion,
        method: DhpMethod::Geval,
        metrics: vec!["coherence".into(), "consistency".into(), "fluency".into()],
        with_context: true,
        steps: StepsSource::Given("1. Read the story.\n2. Rate the ending.".into()),
        progress: nlg_judge::progress::Progress::none(),
    };
    let mut model = judge(originals.clone());
    // Each finished metric is handed over with every row so far (the CLI saves them).
    let mut events = Vec::new();
    let scores = score_perturbations(&mut model, &rows, &options, Some(&cache), &mut |event| {
        events.push(match event {
            ScoreEvent::MetricStarted(metric) => format!("start {metric}"),
            ScoreEvent::MetricDone { metric, rows } => format!("done {metric} {}", rows.len()),
        });
        Ok(())
    })
    .unwrap();
    // 12 items x (original + 6 perturbed) x 3 metrics
    assert_eq!(scores.len(), 12 * 7 * 3);
    assert_eq!(
        events,
        [
            "start coherence",
            "done coherence 84",
            "start consistency",
            "done consistency 168",
            "start fluency",
            "done fluency 252"
        ]
    );
    let weights = Weights::default_for(DhpTask::StoryCompletion).unwrap();
    let analysis = analyze(&scores, Some(&weights)).unwrap();
    let names: BTreeSet<&str> = analysis
        .perturbations
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names.len(), 6);
    for p in &analysis.perturbations {
        // 12 positive, tied differences: the normal approximation (ties), p ~ 1.7e-4
        assert_eq!(p.n, 12);
        assert!(p.d > 1.0 && p.d_ew.unwrap() > 1.0, "{p:?}");
    }
    assert!(analysis.d_min > 1.0);

    // Rerun: everything comes from the cache (the model would now answer otherwise).
    let mut forgetful = judge(Vec::new());
    let again = score_perturbations(&mut forgetful, &rows, &options, Some(&cache), &mut |_| {
        Ok(())
    })
    .unwrap();
    assert_eq!(again, scores);

    // A caller that cannot save stops the run after the first metric.
    let mut started = 0;
    let error = score_perturbations(
        &mut forgetful,
        &rows,
        &options,
        Some(&cache),
        &mut |event| {
            match event {
                ScoreEvent::MetricStarted(_) => started += 1,
                ScoreEvent::MetricDone { .. } => anyhow::bail!("disk full"),
            }
            Ok(())
        },
    )
    .unwrap_err();
    assert_eq!(error.to_string(), "disk full");
    assert_eq!(started, 1);

    // Pairwise: the original wins both orders.
    let options = DhpScoreOptions {
        method: DhpMethod::Pairwise,
        metrics: vec!["coherence".into()],
        ..options
    };
    let scores = score_perturbations(&mut model, &rows, &options, None, &mut |_| Ok(())).unwrap();
    let perturbed: Vec<f64> = scores
        .iter()
        .filter(|r| r.perturbation != "original")
        .map(|r| r.score)
        .collect();
    assert_eq!(perturbed.len(), 12 * 6);
    assert!(perturbed.iter().all(|&s| s < 0.05), "{perturbed:?}");
    let analysis = analyze(&scores, None).unwrap();
    assert!(analysis.d_min > 1.0);
}

#[test]
fn a_judge_blind_to_the_text_discerns_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rows = perturbed_rows(dir.path());
    let mut blind = MockScorer::new().with_labels(|_, labels| Ok(vec![-1.0; labels.len()]));
    let options = DhpScoreOptions {
        task: DhpTask::StoryCompletion,
        method: DhpMethod::Geval,
        metrics: vec!["fluency".into()],
        with_context: false,
        steps: StepsSource::Given("1. Rate.".into()),
        progress: nlg_judge::progress::Progress::none(),
    };
    let scores = score_perturbations(&mut blind, &rows, &options, None, &mut |_| Ok(())).unwrap();
    let analysis = analyze(&scores, None).unwrap();
    for p in &analysis.perturbations {
        assert_eq!(p.p["fluency"], 1.0);
        assert_eq!(p.d, 0.0);
    }
}

#[test]
fn scoring_rejects_metrics_the_task_does_not_have() {
    let dir = tempfile::tempdir().unwrap();
    let rows = perturbed_rows(dir.path());
    let mut model = judge(Vec::new());
    let options = DhpScoreOptions {
        task: DhpTask::StoryCompletion,
        method: DhpMethod::Geval,
        metrics: vec!["relevance".into()],
        with_context: true,
        steps: StepsSource::Given("1. Rate.".into()),
        progress: nlg_judge::progress::Progress::none(),
    };
    let error =
        score_perturbations(&mut model, &rows, &options, None, &mut |_| Ok(())).unwrap_err();
    assert!(
        error.to_string().contains("has no metric `relevance`"),
        "{error}"
    );
}

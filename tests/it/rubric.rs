//! Rubric grading (`score --method rubric`): the prompts against the fixtures written from
//! the judges' published templates (`tests/fixtures/rubric/`), byte for byte.

use std::path::PathBuf;

use nlg_judge::engine::RubricProtocol;
use nlg_judge::judge::geval::Sections;
use nlg_judge::judge::rubric::protocol::{render, RubricInput};
use nlg_judge::judge::rubric::Rubric;
use nlg_judge::judge::ScoreScale;
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rubric")
}

fn fixture(name: &str) -> String {
    let path = fixture_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The example of `inputs.json` as a rubric and the inputs it grades.
fn example() -> (Rubric, Value) {
    let inputs: Value = serde_json::from_str(&fixture("inputs.json")).unwrap();
    let text = |key: &str| inputs[key].as_str().unwrap().to_string();
    let rubric = Rubric {
        name: text("name"),
        criterion: text("criterion"),
        scale: ScoreScale::new(1, 5).unwrap(),
        descriptions: inputs["descriptions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_string())
            .collect(),
        instruction: Some(text("instruction")),
        task: None,
        aliases: Vec::new(),
        sections: Sections {
            source: text("source_heading"),
            reference: text("reference_heading"),
            output: text("output_heading"),
        },
    };
    (rubric, inputs)
}

#[test]
fn prometheus_prompts_are_the_published_template_byte_for_byte() {
    let (rubric, inputs) = example();
    let input = RubricInput {
        context: inputs["context"].as_str(),
        reference: inputs["reference"].as_str(),
        output: inputs["response"].as_str().unwrap(),
    };
    let with_reference = render(RubricProtocol::Prometheus, &rubric, &input).unwrap();
    assert_eq!(with_reference.user, fixture("prometheus_absolute.txt"));
    assert_eq!(
        with_reference.system.as_deref(),
        Some(fixture("prometheus_system.txt").as_str())
    );
    let without = RubricInput {
        reference: None,
        ..input
    };
    let rendered = render(RubricProtocol::Prometheus, &rubric, &without).unwrap();
    assert_eq!(
        rendered.user,
        fixture("prometheus_absolute_no_reference.txt")
    );
}

#[test]
fn flow_judge_prompts_are_the_published_template_byte_for_byte() {
    let (mut rubric, inputs) = example();
    let input = RubricInput {
        context: inputs["context"].as_str(),
        reference: inputs["reference"].as_str(),
        output: inputs["response"].as_str().unwrap(),
    };
    let rendered = render(RubricProtocol::FlowJudge, &rubric, &input).unwrap();
    assert_eq!(rendered.system, None);
    assert_eq!(rendered.user, fixture("flow_judge_inputs.txt"));
    // Nothing but the output: the published template without inputs.
    rubric.instruction = None;
    let bare = RubricInput {
        context: None,
        reference: None,
        output: input.output,
    };
    let rendered = render(RubricProtocol::FlowJudge, &rubric, &bare).unwrap();
    assert_eq!(rendered.user, fixture("flow_judge_no_inputs.txt"));
}

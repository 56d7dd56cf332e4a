//! Rubric grading: a criterion and one description per score, put to a judge model in
//! the format it was trained on (Prometheus 2, Flow-Judge) or in our plain format for any
//! instruct model. The model writes a feedback and then a result marker (`[RESULT] `,
//! `<score>`, `Score:`); the score is read as the model's distribution over the scale at
//! the position after the marker, like G-Eval's.
//!
//! This module is pure prompt building and reading, no tensors:
//!
//! - here: the [`Rubric`] type, rubric files (TOML or JSON), rubrics given whole by a
//!   caller ([`Rubric::from_inline`]: the service's `rubric` object, Python's dict) and
//!   the built-in rubrics (`rubrics/<group>/<name>.toml`, embedded at build time,
//!   documented in `rubrics/README.md`);
//! - [`protocol`]: protocols as data (`rubrics/protocols/*.toml`): the built-in ones
//!   rendered byte for byte as published
//!   (`tests/fixtures/rubric/` holds the published templates' renderings);
//! - [`reading`]: what the model wrote: the feedback cut at the marker (or the marker
//!   appended), and whether the model kept to its format;
//! - [`run`]: the decided method and its feedback step (one generation per candidate, a
//!   run's in one batch, each score read from its feedback's state);
//! - [`relative`]: relative grading of two responses (`compare --rubric`);
//! - [`rounds`]: the one route both write their answers by (a thinking judge's
//!   reasoning round, then the feedback round; [`thinking`]).

pub mod protocol;
pub mod reading;
pub mod relative;
pub mod rounds;
pub mod run;
pub mod thinking;

use std::path::Path;

use anyhow::{bail, ensure, Context as _, Result};
use serde::{Deserialize, Serialize};

pub use protocol::{RubricInput, RubricProtocol};
pub use reading::{FormatCounts, FormatOutcome, Reading};
pub use run::RubricMethod;

use super::attribute::Task;
use super::geval::criteria::ensure_filled;
use super::geval::Sections;
use super::scale::ScoreScale;

/// The scale of a rubric file that names none (Prometheus 2's).
pub const DEFAULT_SCALE: ScoreScale = match ScoreScale::const_new(1, 5) {
    Some(scale) => scale,
    None => panic!("1-5 is a valid scale"),
};

/// `(group, file text)` of every built-in rubric: SummEval's four attributes, Topical-Chat's
/// five, and HANNA's six story attributes.
const BUILTIN: [(&str, &str); 15] = [
    (
        "summary",
        include_str!("../../../rubrics/summary/coherence.toml"),
    ),
    (
        "summary",
        include_str!("../../../rubrics/summary/consistency.toml"),
    ),
    (
        "summary",
        include_str!("../../../rubrics/summary/fluency.toml"),
    ),
    (
        "summary",
        include_str!("../../../rubrics/summary/relevance.toml"),
    ),
    (
        "dialogue",
        include_str!("../../../rubrics/dialogue/naturalness.toml"),
    ),
    (
        "dialogue",
        include_str!("../../../rubrics/dialogue/coherence.toml"),
    ),
    (
        "dialogue",
        include_str!("../../../rubrics/dialogue/engagingness.toml"),
    ),
    (
        "dialogue",
        include_str!("../../../rubrics/dialogue/groundedness.toml"),
    ),
    (
        "dialogue",
        include_str!("../../../rubrics/dialogue/understandability.toml"),
    ),
    (
        "story",
        include_str!("../../../rubrics/story/relevance.toml"),
    ),
    (
        "story",
        include_str!("../../../rubrics/story/coherence.toml"),
    ),
    ("story", include_str!("../../../rubrics/story/empathy.toml")),
    (
        "story",
        include_str!("../../../rubrics/story/surprise.toml"),
    ),
    (
        "story",
        include_str!("../../../rubrics/story/engagement.toml"),
    ),
    (
        "story",
        include_str!("../../../rubrics/story/complexity.toml"),
    ),
];

/// One criterion with a description of every score of its scale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rubric {
    /// The criterion's name ("Coherence"): names the attribute and the human scores.
    pub name: String,
    /// The question the rubric answers ("Does the summary hold together ...?").
    pub criterion: String,
    pub scale: ScoreScale,
    /// One description per score, lowest score first.
    pub descriptions: Vec<String>,
    /// What the candidates were asked to do ("Summarize the following news article."):
    /// Prometheus' "instruction to evaluate" (with the context after it), Flow-Judge's
    /// `<instruction>` input. Optional.
    pub instruction: Option<String>,
    pub task: Option<Task>,
    /// Other names that select a built-in rubric.
    pub aliases: Vec<String>,
    /// Headings of the context, the reference and the output.
    pub sections: Sections,
}

/// How a run graded on a rubric, for the output rows (`rubric`) and what the service and
/// Python answer: the rubric's name, criterion and scale, the protocol and where it came
/// from, and the feedback bound (`null`: no feedback).
pub fn rubric_record(
    rubric: &Rubric,
    protocol: &RubricProtocol,
    source: run::ProtocolSource,
    feedback_tokens: Option<usize>,
) -> serde_json::Value {
    serde_json::json!({
        "name": rubric.name,
        "criterion": rubric.criterion,
        "scale": [rubric.scale.low(), rubric.scale.high()],
        "protocol": protocol,
        "protocol_source": source.name(),
        "max_feedback_tokens": feedback_tokens,
    })
}

/// The same for a report's run panel: `(what, value)` facts. `per` names what one
/// feedback is written for ("candidate", "ordered pair"), `read` what is read after the
/// marker ("the score", "A or B", "Response 1, Response 2 or Tie").
pub fn rubric_facts(
    rubric: &Rubric,
    protocol: &RubricProtocol,
    source: run::ProtocolSource,
    feedback_tokens: Option<usize>,
    marker: &str,
    per: &str,
    read: &str,
) -> Vec<(String, String)> {
    vec![
        (
            "rubric".to_string(),
            format!("{} ({}): {}", rubric.name, rubric.scale, rubric.criterion),
        ),
        (
            "protocol".to_string(),
            format!("{protocol} ({})", source.describe()),
        ),
        (
            "feedback".to_string(),
            match feedback_tokens {
                Some(tokens) => format!(
                    "at most {tokens} tokens per {per}, then {read} read after `{}`",
                    marker.trim_end()
                ),
                None => format!("none: {read} read right after `{}`", marker.trim_end()),
            },
        ),
    ]
}

/// The file format (see `rubrics/README.md`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RubricFile {
    name: String,
    criterion: String,
    scale: Option<[i64; 2]>,
    descriptions: Vec<String>,
    instruction: Option<String>,
    task: Option<Task>,
    #[serde(default)]
    aliases: Vec<String>,
    sections: Option<Sections>,
}

/// A rubric given whole inside a request: a rubric file's fields without `aliases` and
/// `task` (the request's task sets the default headings), the name optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InlineRubric {
    name: Option<String>,
    criterion: String,
    descriptions: Vec<String>,
    scale: Option<[i64; 2]>,
    instruction: Option<String>,
    sections: Option<Sections>,
}

/// The name of a rubric given whole without one.
pub const INLINE_NAME: &str = "Quality";

impl Rubric {
    /// A rubric given whole as a JSON object (`criterion`, `descriptions`: one per score,
    /// lowest first; optional `name` (default [`INLINE_NAME`]), `scale` (`[low, high]`,
    /// default 1-5), `instruction`, `sections`), its headings by `task` unless it gives
    /// them. Every error names the field as `field.<path>` (`rubric.descriptions[2]`),
    /// `field` being what the caller calls the object.
    pub fn from_inline(value: serde_json::Value, task: Option<Task>, field: &str) -> Result<Self> {
        anyhow::ensure!(
            value.is_object(),
            "field `{field}`: expected a built-in rubric's name or an object with `criterion` \
             and `descriptions` (one per score, lowest first)"
        );
        let inline: InlineRubric = serde_path_to_error::deserialize(value).map_err(|error| {
            let path = error.path().to_string();
            if path == "." {
                anyhow::anyhow!("field `{field}`: {}", error.inner())
            } else {
                anyhow::anyhow!("invalid field `{field}.{path}`: {}", error.inner())
            }
        })?;
        Self::from_file_fields(RubricFile {
            name: inline.name.unwrap_or_else(|| INLINE_NAME.to_string()),
            criterion: inline.criterion,
            scale: inline.scale,
            descriptions: inline.descriptions,
            instruction: inline.instruction,
            task,
            aliases: Vec::new(),
            sections: inline.sections,
        })
        .with_context(|| format!("field `{field}`"))
    }

    /// Parse a rubric file's text: JSON when `origin` ends in `.json`, else TOML.
    /// `origin` names the file in every error, with the field at fault.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let file: RubricFile = if origin.to_ascii_lowercase().ends_with(".json") {
            serde_json::from_str(text)
                .with_context(|| format!("{origin}: not a valid rubric file (JSON)"))?
        } else {
            toml::from_str(text)
                .with_context(|| format!("{origin}: not a valid rubric file (TOML)"))?
        };
        Self::from_file_fields(file).with_context(|| format!("rubric file {origin}"))
    }

    fn from_file_fields(file: RubricFile) -> Result<Self> {
        let scale = match file.scale {
            Some([low, high]) => ScoreScale::new(low, high).context("field `scale`")?,
            None => DEFAULT_SCALE,
        };
        let rubric = Self {
            name: file.name.trim().to_string(),
            criterion: file.criterion.trim().to_string(),
            scale,
            descriptions: file
                .descriptions
                .iter()
                .map(|d| d.trim().to_string())
                .collect(),
            instruction: file
                .instruction
                .map(|i| i.trim().to_string())
                .filter(|i| !i.is_empty()),
            task: file.task,
            aliases: file
                .aliases
                .iter()
                .map(|a| a.trim().to_ascii_lowercase())
                .collect(),
            sections: file
                .sections
                .unwrap_or_else(|| Sections::for_task(file.task)),
        };
        rubric.check()?;
        Ok(rubric)
    }

    /// Every field usable: names one line, nothing empty, one description per score.
    fn check(&self) -> Result<()> {
        let own = [("name", self.name.as_str()), ("criterion", &self.criterion)];
        ensure_filled(own.into_iter().chain(self.sections.fields()))?;
        ensure!(!self.name.contains('\n'), "field `name` must be one line");
        let scores = self.scale.scores();
        ensure!(
            self.descriptions.len() == scores.len(),
            "field `descriptions`: {} description(s) for the scale {} ({} scores): give one \
             per score, lowest first",
            self.descriptions.len(),
            self.scale,
            scores.len()
        );
        for (index, (description, score)) in self.descriptions.iter().zip(&scores).enumerate() {
            ensure!(
                !description.is_empty(),
                "field `descriptions[{index}]` (score {score}) is empty"
            );
            ensure!(
                !description.contains('\n'),
                "field `descriptions[{index}]` (score {score}) must be one line: the rubric \
                 lists one line per score"
            );
        }
        Ok(())
    }

    /// Read a rubric file (`.json`: JSON, else TOML).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read rubric file {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Every built-in rubric with its group (`summary`, `dialogue`, `story`).
    pub fn builtins() -> Result<Vec<(&'static str, Self)>> {
        BUILTIN
            .iter()
            .map(|(group, text)| {
                Ok((
                    *group,
                    Self::parse(text, &format!("built-in {group} rubric"))?,
                ))
            })
            .collect()
    }

    /// The group a task's built-in rubrics are in.
    fn group_of(task: Task) -> Option<&'static str> {
        match task {
            Task::Summary => Some("summary"),
            Task::Dialogue => Some("dialogue"),
            Task::DataToText | Task::Custom => None,
        }
    }

    /// The built-in rubric `name`: `group/name` (`story/coherence`), or a name or alias
    /// alone, taken from the task's group when several groups have it (`coherence` is
    /// SummEval's for `--task summary`, Topical-Chat's for `--task dialogue`).
    pub fn builtin(name: &str, task: Task) -> Result<Self> {
        let wanted = name.trim().to_ascii_lowercase();
        let (group, short) = match wanted.split_once('/') {
            Some((group, short)) => (Some(group.to_string()), short.to_string()),
            None => (None, wanted.clone()),
        };
        let matches: Vec<(&str, Self)> = Self::builtins()?
            .into_iter()
            .filter(|(g, r)| {
                group.as_deref().is_none_or(|wanted| wanted == *g)
                    && (r.name.to_lowercase() == short || r.aliases.contains(&short))
            })
            .collect();
        match matches.len() {
            0 => bail!(
                "no built-in rubric `{name}`; built-in: {} (or give a rubric of your own, see \
                 rubrics/README.md)",
                Self::builtin_list()?
            ),
            1 => Ok(matches
                .into_iter()
                .next()
                .map(|(_, r)| r)
                .expect("one match")),
            _ => {
                let groups: Vec<String> = matches
                    .iter()
                    .map(|(g, r)| format!("{g}/{}", r.name.to_lowercase()))
                    .collect();
                let preferred = Self::group_of(task);
                match matches.into_iter().find(|(g, _)| Some(*g) == preferred) {
                    Some((_, rubric)) => Ok(rubric),
                    None => bail!(
                        "the built-in rubric `{name}` exists for several tasks and none is the \
                         {} task's: name one ({})",
                        task.name(),
                        groups.join(", ")
                    ),
                }
            }
        }
    }

    /// The built-in rubrics as help texts and errors list them: `group/name`, aliases in
    /// brackets.
    pub fn builtin_list() -> Result<String> {
        let names: Vec<String> = Self::builtins()?
            .into_iter()
            .map(|(group, rubric)| {
                let name = format!("{group}/{}", rubric.name.to_lowercase());
                if rubric.aliases.is_empty() {
                    name
                } else {
                    format!("{name} ({})", rubric.aliases.join(", "))
                }
            })
            .collect();
        Ok(names.join(", "))
    }

    /// The rubric `spec` names: a file when it ends in `.toml` or `.json`, else a
    /// built-in name ([`Rubric::builtin`]).
    pub fn load(spec: &str, task: Task) -> Result<Self> {
        let lower = spec.to_ascii_lowercase();
        if lower.ends_with(".toml") || lower.ends_with(".json") {
            Self::from_file(Path::new(spec))
        } else {
            Self::builtin(spec, task)
        }
    }

    /// `(score, description)` lowest first.
    pub fn levels(&self) -> impl Iterator<Item = (i64, &str)> {
        self.scale
            .scores()
            .into_iter()
            .zip(self.descriptions.iter().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_with_one_description_per_score() {
        let all = Rubric::builtins().unwrap();
        assert_eq!(all.len(), BUILTIN.len());
        for (group, rubric) in &all {
            assert_eq!(rubric.scale, DEFAULT_SCALE, "{group}/{}", rubric.name);
            assert_eq!(rubric.descriptions.len(), 5);
            assert!(rubric.instruction.is_some(), "{group}/{}", rubric.name);
        }
        let story = all.iter().find(|(g, _)| *g == "story").unwrap();
        assert_eq!(story.1.sections.output, "Story");
    }

    #[test]
    fn builtins_are_chosen_by_group_name_alias_and_task() {
        let summary = Rubric::builtin("coherence", Task::Summary).unwrap();
        assert_eq!(summary.sections.output, "Summary");
        let dialogue = Rubric::builtin("Coherence", Task::Dialogue).unwrap();
        assert_eq!(dialogue.sections.output, "Response");
        assert_eq!(
            Rubric::builtin("continuity", Task::Summary).unwrap(),
            dialogue
        );
        let story = Rubric::builtin("story/coherence", Task::Summary).unwrap();
        assert_eq!(story.sections.source, "Writing Prompt");
        // A name only one group has needs no task.
        assert_eq!(
            Rubric::builtin("empathy", Task::Dialogue).unwrap().name,
            "Empathy"
        );
        // Several groups and none is the task's: no guess.
        let error = format!(
            "{:#}",
            Rubric::builtin("coherence", Task::Custom).unwrap_err()
        );
        assert!(error.contains("summary/coherence"), "{error}");
        let error = format!("{:#}", Rubric::builtin("wit", Task::Summary).unwrap_err());
        assert!(
            error.contains("`wit`") && error.contains("story/surprise"),
            "{error}"
        );
        assert_ne!(summary, dialogue);
    }

    #[test]
    fn json_and_toml_files_read_alike() {
        let dir = tempfile::tempdir().unwrap();
        let toml_path = dir.path().join("r.toml");
        std::fs::write(
            &toml_path,
            "name = \"Wit\"\ncriterion = \"Is it witty?\"\nscale = [0, 2]\n\
             descriptions = [\"no\", \"a bit\", \"very\"]\n",
        )
        .unwrap();
        let json_path = dir.path().join("r.json");
        std::fs::write(
            &json_path,
            r#"{"name": "Wit", "criterion": "Is it witty?", "scale": [0, 2],
               "descriptions": ["no", "a bit", "very"]}"#,
        )
        .unwrap();
        let from_toml = Rubric::from_file(&toml_path).unwrap();
        assert_eq!(from_toml, Rubric::from_file(&json_path).unwrap());
        assert_eq!(
            from_toml.levels().collect::<Vec<_>>(),
            [(0, "no"), (1, "a bit"), (2, "very")]
        );
        assert_eq!(from_toml.sections, Sections::for_task(None));
        assert_eq!(from_toml.instruction, None);
        assert_eq!(
            Rubric::load(&json_path.display().to_string(), Task::Summary).unwrap(),
            from_toml
        );
    }

    #[test]
    fn inline_rubrics_read_as_files_do_and_name_the_field() {
        let five = ["bad", "poor", "fair", "good", "great"];
        let rubric = Rubric::from_inline(
            serde_json::json!({"criterion": "Is it helpful?", "descriptions": five}),
            Some(Task::Dialogue),
            "rubric",
        )
        .unwrap();
        assert_eq!(rubric.name, INLINE_NAME);
        assert_eq!(rubric.scale, DEFAULT_SCALE);
        assert_eq!(rubric.sections.output, "Response");
        assert_eq!(rubric.levels().nth(4), Some((5, "great")));
        let named = Rubric::from_inline(
            serde_json::json!({"name": "Wit", "criterion": "Witty?", "scale": [0, 2],
                               "descriptions": ["no", "a bit", "very"],
                               "instruction": " Tell a joke. "}),
            None,
            "rubric",
        )
        .unwrap();
        assert_eq!(
            (named.name.as_str(), named.instruction.as_deref()),
            ("Wit", Some("Tell a joke."))
        );
        assert_eq!(named.sections, Sections::for_task(None));
        let error = |value: serde_json::Value| {
            format!(
                "{:#}",
                Rubric::from_inline(value, None, "rubric").unwrap_err()
            )
        };
        let text = error(serde_json::json!({"criterion": "c", "descriptions": ["a", "b"]}));
        assert!(
            text.starts_with("field `rubric`: field `descriptions`: 2 description(s)"),
            "{text}"
        );
        let text = error(serde_json::json!({"descriptions": five}));
        assert!(
            text.contains("`rubric`") && text.contains("missing field `criterion`"),
            "{text}"
        );
        let text = error(serde_json::json!({"criterion": "c", "descriptions": [1, 2, 3, 4, 5]}));
        assert!(
            text.contains("invalid field `rubric.descriptions[0]`"),
            "{text}"
        );
        let text =
            error(serde_json::json!({"criterion": "c", "descriptions": five, "aliases": []}));
        assert!(text.contains("aliases"), "{text}");
        let text = error(serde_json::json!({"criterion": " ", "descriptions": five}));
        assert!(
            text.contains("`rubric`") && text.contains("criterion"),
            "{text}"
        );
        assert!(error(serde_json::json!(["a"])).contains("field `rubric`: expected"));
    }

    #[test]
    fn bad_files_name_the_file_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let check = |file: &str, text: &str, needles: &[&str]| {
            let path = dir.path().join(file);
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", Rubric::from_file(&path).unwrap_err());
            assert!(error.contains(file), "{file}: {error}");
            for needle in needles {
                assert!(error.contains(needle), "{needle}: {error}");
            }
        };
        let five = "descriptions = [\"a\", \"b\", \"c\", \"d\", \"e\"]\n";
        check(
            "four.toml",
            "name = \"X\"\ncriterion = \"c\"\ndescriptions = [\"a\", \"b\", \"c\", \"d\"]\n",
            &["`descriptions`", "4 description(s)", "1-5 (5 scores)"],
        );
        check(
            "nocrit.toml",
            &format!("name = \"X\"\n{five}"),
            &["criterion"],
        );
        check(
            "extra.toml",
            &format!("name = \"X\"\ncriterion = \"c\"\ncolour = 1\n{five}"),
            &["colour"],
        );
        check(
            "scale.toml",
            &format!("name = \"X\"\ncriterion = \"c\"\nscale = [5, 1]\n{five}"),
            &["`scale`", "low < high"],
        );
        check(
            "blank.toml",
            "name = \"X\"\ncriterion = \"c\"\ndescriptions = [\"a\", \"b\", \" \", \"d\", \"e\"]\n",
            &["`descriptions[2]` (score 3) is empty"],
        );
        check(
            "lines.toml",
            "name = \"X\"\ncriterion = \"c\"\ndescriptions = [\"a\", \"b\", \"c\\nd\", \"d\", \"e\"]\n",
            &["`descriptions[2]`", "one line"],
        );
        check(
            "bad.json",
            "{\"name\": \"X\",\n \"criterion\": 3}",
            &["JSON", "line 2"],
        );
        let missing = dir.path().join("missing.toml");
        let error = format!("{:#}", Rubric::from_file(&missing).unwrap_err());
        assert!(error.contains("missing.toml"), "{error}");
    }
}

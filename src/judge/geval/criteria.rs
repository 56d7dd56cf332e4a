//! G-Eval criteria: what the model is told it rates (task introduction, criterion
//! definition, score scale, input headings), from TOML files.
//!
//! The built-in files under `criteria/` (SummEval's four attributes, Topical-Chat's five)
//! are embedded at build time and chosen by task and attribute name; users pass their own
//! file in the same format (documented in `criteria/README.md`).

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::judge::attribute::Task;
use crate::judge::scale::ScoreScale;

/// `(task, file text)` of every built-in criterion.
const BUILTIN: [(Task, &str); 12] = [
    (
        Task::Summary,
        include_str!("../../../criteria/summary/coherence.toml"),
    ),
    (
        Task::Summary,
        include_str!("../../../criteria/summary/consistency.toml"),
    ),
    (
        Task::Summary,
        include_str!("../../../criteria/summary/fluency.toml"),
    ),
    (
        Task::Summary,
        include_str!("../../../criteria/summary/relevance.toml"),
    ),
    (
        Task::Dialogue,
        include_str!("../../../criteria/dialogue/naturalness.toml"),
    ),
    (
        Task::Dialogue,
        include_str!("../../../criteria/dialogue/coherence.toml"),
    ),
    (
        Task::Dialogue,
        include_str!("../../../criteria/dialogue/engagingness.toml"),
    ),
    (
        Task::Dialogue,
        include_str!("../../../criteria/dialogue/groundedness.toml"),
    ),
    (
        Task::Dialogue,
        include_str!("../../../criteria/dialogue/understandability.toml"),
    ),
    (
        Task::DataToText,
        include_str!("../../../criteria/data-to-text/fluency.toml"),
    ),
    (
        Task::DataToText,
        include_str!("../../../criteria/data-to-text/grammar.toml"),
    ),
    (
        Task::DataToText,
        include_str!("../../../criteria/data-to-text/semantics.toml"),
    ),
];

/// Headings of the input sections of a G-Eval prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sections {
    /// Heading of the context (article, dialogue, triples).
    pub source: String,
    /// Heading of the expected output (reference-based mode).
    pub reference: String,
    /// Heading of the output being rated.
    pub output: String,
}

impl Sections {
    /// The headings a task's prompts use; `None`: generic ones.
    pub fn for_task(task: Option<Task>) -> Self {
        let (source, reference, output) = match task {
            Some(Task::Summary) => ("Source Text", "Reference Summary", "Summary"),
            Some(Task::Dialogue) => ("Conversation History", "Reference Response", "Response"),
            Some(Task::DataToText) => ("Triples", "Reference Text", "Text"),
            None | Some(Task::Custom) => ("Input", "Expected Output", "Output"),
        };
        Self {
            source: source.to_string(),
            reference: reference.to_string(),
            output: output.to_string(),
        }
    }
}

impl Sections {
    /// The headings with the names of their fields (`sections.source`, ...).
    pub fn fields(&self) -> [(&'static str, &str); 3] {
        [
            ("sections.source", &self.source),
            ("sections.reference", &self.reference),
            ("sections.output", &self.output),
        ]
    }
}

/// An error naming the first of `fields` (name, value) that is blank.
pub(crate) fn ensure_filled<'a>(
    fields: impl IntoIterator<Item = (&'static str, &'a str)>,
) -> Result<()> {
    for (field, value) in fields {
        if value.trim().is_empty() {
            bail!("field `{field}` is empty");
        }
    }
    Ok(())
}

/// One criterion to rate on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Criteria {
    /// Shown in the form line (`- Coherence:`).
    pub name: String,
    pub scale: ScoreScale,
    pub task: Option<Task>,
    /// Other attribute names that select this criterion.
    pub aliases: Vec<String>,
    /// What the rater is given and asked to do.
    pub introduction: String,
    /// What the criterion means and how to score it.
    pub criterion: String,
    pub sections: Sections,
}

/// The file format (see `criteria/README.md`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CriteriaFile {
    name: String,
    scale: [i64; 2],
    task: Option<Task>,
    #[serde(default)]
    aliases: Vec<String>,
    introduction: String,
    criterion: String,
    sections: Option<Sections>,
}

impl Criteria {
    /// A criterion from its parts; section headings follow `task`.
    pub fn new(
        name: &str,
        scale: ScoreScale,
        task: Option<Task>,
        introduction: &str,
        criterion: &str,
    ) -> Result<Self> {
        let criteria = Self {
            name: name.trim().to_string(),
            scale,
            task,
            aliases: Vec::new(),
            introduction: introduction.trim().to_string(),
            criterion: criterion.trim().to_string(),
            sections: Sections::for_task(task),
        };
        criteria.check()?;
        Ok(criteria)
    }

    fn check(&self) -> Result<()> {
        let own = [
            ("name", self.name.as_str()),
            ("introduction", &self.introduction),
            ("criterion", &self.criterion),
        ];
        ensure_filled(own.into_iter().chain(self.sections.fields()))?;
        if self.name.contains('\n') {
            bail!("field `name` must be one line");
        }
        Ok(())
    }

    /// Parse the TOML text of a criteria file; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let file: CriteriaFile =
            toml::from_str(text).with_context(|| format!("{origin}: not a valid criteria file"))?;
        let scale = ScoreScale::new(file.scale[0], file.scale[1])
            .with_context(|| format!("{origin}: field `scale`"))?;
        let criteria = Self {
            name: file.name.trim().to_string(),
            scale,
            task: file.task,
            aliases: file
                .aliases
                .iter()
                .map(|a| a.trim().to_ascii_lowercase())
                .collect(),
            introduction: file.introduction.trim().to_string(),
            criterion: file.criterion.trim().to_string(),
            sections: file
                .sections
                .unwrap_or_else(|| Sections::for_task(file.task)),
        };
        criteria.check().with_context(|| origin.to_string())?;
        Ok(criteria)
    }

    /// Read a criteria file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read criteria file {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Every built-in criterion.
    pub fn builtins() -> Result<Vec<Self>> {
        BUILTIN
            .iter()
            .map(|(task, text)| Self::parse(text, &format!("built-in {} criteria", task.name())))
            .collect()
    }

    /// The built-in criterion for `attribute` (name or alias, case-insensitive) of `task`.
    pub fn builtin(task: Task, attribute: &str) -> Result<Self> {
        let wanted = attribute.trim().to_ascii_lowercase();
        let found = Self::builtins()?
            .into_iter()
            .filter(|c| c.task == Some(task))
            .find(|c| c.name.to_lowercase() == wanted || c.aliases.contains(&wanted));
        match found {
            Some(criteria) => Ok(criteria),
            None => bail!(
                "no built-in G-Eval criteria for `{attribute}` in the {} task; built-in: {} \
                 (for another attribute, give its criteria: --criteria-text \"Empathy (1-5): \
                 ...\" or --criteria FILE)",
                task.name(),
                Self::builtin_list(task)?
            ),
        }
    }

    /// The built-in criteria of `task` as help texts and errors list them: names in lower
    /// case, other spellings in brackets ("coherence (continuity, maintains-context)"),
    /// "none" for a task without any.
    pub fn builtin_list(task: Task) -> Result<String> {
        let names: Vec<String> = Self::builtins()?
            .into_iter()
            .filter(|c| c.task == Some(task))
            .map(|c| {
                let name = c.name.to_lowercase();
                if c.aliases.is_empty() {
                    name
                } else {
                    format!("{name} ({})", c.aliases.join(", "))
                }
            })
            .collect();
        Ok(if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        })
    }

    /// The same criterion rated on another scale.
    pub fn with_scale(mut self, scale: ScoreScale) -> Self {
        self.scale = scale;
        self
    }

    /// sha256 (hex) of everything that shapes the prompt: names the criterion in the
    /// result cache.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [
            self.name.as_str(),
            &self.scale.to_string(),
            &self.introduction,
            &self.criterion,
            &self.sections.source,
            &self.sections.reference,
            &self.sections.output,
        ] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hex::encode(hasher.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_names_its_scale_in_the_criterion() {
        let all = Criteria::builtins().unwrap();
        assert_eq!(all.len(), BUILTIN.len());
        for c in &all {
            let range = format!("({}-{})", c.scale.low(), c.scale.high());
            assert!(
                c.criterion.starts_with(&format!("{} {range}", c.name)),
                "{}: {}",
                c.name,
                c.criterion
            );
        }
    }

    #[test]
    fn builtins_are_chosen_by_task_and_name_or_alias() {
        let summary = Criteria::builtin(Task::Summary, "Coherence").unwrap();
        assert_eq!(summary.scale, ScoreScale::new(1, 5).unwrap());
        assert_eq!(summary.sections.output, "Summary");
        let dialogue = Criteria::builtin(Task::Dialogue, "continuity").unwrap();
        assert_eq!(dialogue.name, "Coherence");
        assert_eq!(dialogue.scale, ScoreScale::new(1, 3).unwrap());
        assert_eq!(dialogue.sections.source, "Conversation History");
        assert_eq!(
            Criteria::builtin(Task::Dialogue, "groundedness")
                .unwrap()
                .scale,
            ScoreScale::new(0, 1).unwrap()
        );
        assert_ne!(summary.digest(), dialogue.digest());
        let error = Criteria::builtin(Task::Summary, "naturalness")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("`naturalness`") && error.contains("relevance"),
            "{error}"
        );
        let list = Criteria::builtin_list(Task::Dialogue).unwrap();
        assert!(
            list.contains("coherence (continuity, maintains-context)"),
            "{list}"
        );
        assert_eq!(Criteria::builtin_list(Task::Custom).unwrap(), "none");
    }

    #[test]
    fn files_are_read_with_defaults_and_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "name = \"Helpfulness\"\nscale = [0, 10]\nintroduction = \"Rate an answer.\"\n\
             criterion = \"Helpfulness (0-10): does it help?\"\n",
        )
        .unwrap();
        let c = Criteria::from_file(&path).unwrap();
        assert_eq!(c.scale.scores().len(), 11);
        assert_eq!(c.sections, Sections::for_task(None));
        std::fs::write(
            &path,
            "name = \"X\"\nscale = [1, 3]\ntask = \"data-to-text\"\nintroduction = \"i\"\n\
             criterion = \"c\"\n[sections]\nsource = \"Facts\"\nreference = \"Gold\"\noutput = \"Text\"\n",
        )
        .unwrap();
        let c = Criteria::from_file(&path).unwrap();
        assert_eq!(c.task, Some(Task::DataToText));
        assert_eq!(c.sections.source, "Facts");
    }

    #[test]
    fn bad_files_name_the_file_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        let check = |text: &str, needle: &str| {
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", Criteria::from_file(&path).unwrap_err());
            assert!(
                error.contains("bad.toml") && error.contains(needle),
                "{needle}: {error}"
            );
        };
        check(
            "name = \"X\"\nscale = [5, 1]\nintroduction = \"i\"\ncriterion = \"c\"\n",
            "scale",
        );
        check(
            "name = \"X\"\nscale = [1, 5]\nintroduction = \"i\"\n",
            "criterion",
        );
        check(
            "name = \"X\"\nscale = [1, 5]\nintroduction = \"i\"\ncriterion = \"c\"\ncolour = 1\n",
            "colour",
        );
        check(
            "name = \"X\"\nscale = [1, 5]\nintroduction = \"  \"\ncriterion = \"c\"\n",
            "introduction",
        );
        let missing = dir.path().join("missing.toml");
        let error = format!("{:#}", Criteria::from_file(&missing).unwrap_err());
        assert!(error.contains("missing.toml"), "{error}");
    }
}

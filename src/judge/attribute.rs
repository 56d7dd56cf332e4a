//! What is judged: the task (which fixes the nouns of the prompts) and the attribute
//! (which fixes the adjective).
//!
//! Adjectives follow the comparative-assessment authors: coherent, consistent, fluent,
//! relevant, natural, "good a continuation" (their wording for Topical-Chat continuity,
//! kept as is), engaging, "grammatically correct". For WebNLG semantics, which the papers
//! do not spell out, we ask for "semantically accurate" (the WebNLG 2017 annotators
//! judged whether the text correctly conveys the triples). Topical-Chat's groundedness
//! and understandability (USR) are asked for as "grounded in the fact" and
//! "understandable".

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The kind of generation task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// Summaries of a passage (SummEval): "Summary A", "Passage:".
    Summary,
    /// Responses to a dialogue (Topical-Chat): "Response A", "Dialogue:".
    Dialogue,
    /// Texts verbalising triples (WebNLG): "Text A", "Triples:".
    DataToText,
    /// Any other data: the nouns come from `--item` and `--context-label` ([`Nouns`]).
    Custom,
}

impl Task {
    /// The candidates' noun, capitalised as in the prompts ("Summary A").
    pub fn item(self) -> &'static str {
        match self {
            Task::Summary => "Summary",
            Task::Dialogue => "Response",
            Task::DataToText | Task::Custom => "Text",
        }
    }

    /// The context's label, capitalised as in the `c2` prompts ("Passage:").
    pub fn context_label(self) -> &'static str {
        match self {
            Task::Summary => "Passage",
            Task::Dialogue => "Dialogue",
            Task::DataToText => "Triples",
            Task::Custom => "Input",
        }
    }

    /// The kebab-case name (`summary`, `dialogue`, `data-to-text`).
    pub fn name(self) -> &'static str {
        match self {
            Task::Summary => "summary",
            Task::Dialogue => "dialogue",
            Task::DataToText => "data-to-text",
            Task::Custom => "custom",
        }
    }
}

/// The nouns a pairwise prompt uses: the candidates' (`{item}`: "Summary A") and the
/// context's label (`{context_label}`: "Passage:"). The built-in tasks are presets;
/// `--task custom` names its own ("Story", "Prompt").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nouns {
    pub item: String,
    pub context_label: String,
}

impl Nouns {
    /// A built-in task's nouns.
    pub fn of_task(task: Task) -> Self {
        Self {
            item: task.item().to_string(),
            context_label: task.context_label().to_string(),
        }
    }

    /// The task's nouns with the given ones replacing them; `custom` needs both.
    pub fn resolve(task: Task, item: Option<&str>, context_label: Option<&str>) -> Result<Self> {
        let item = item.map(str::trim).filter(|s| !s.is_empty());
        let context_label = context_label.map(str::trim).filter(|s| !s.is_empty());
        if task == Task::Custom && (item.is_none() || context_label.is_none()) {
            bail!(
                "--task custom needs the nouns of its prompts: add --item (what a candidate \
                 is, e.g. --item Story) and --context-label (what the context is, e.g. \
                 --context-label Prompt)"
            );
        }
        let preset = Self::of_task(task);
        Ok(Self {
            item: item.map_or(preset.item, str::to_string),
            context_label: context_label.map_or(preset.context_label, str::to_string),
        })
    }
}

/// A judged attribute: its canonical name and the adjective the prompts use.
///
/// Built-in attributes have tuned adjectives; any other name needs the user's own
/// comparative phrase ([`Attribute::resolve`]), never a guessed one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    pub name: String,
    pub adjective: String,
    /// The comparative phrase when it is not "more {adjective}" (`--adjective "better
    /// written"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparative: Option<String>,
    /// The user's own question, replacing "Which {item} is {comparative}"
    /// (`--question "Which story shows more empathy"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
}

/// `(canonical name, adjective)` of every known attribute.
pub const ATTRIBUTES: [(&str, &str); 11] = [
    ("coherence", "coherent"),
    ("consistency", "consistent"),
    ("fluency", "fluent"),
    ("relevance", "relevant"),
    ("naturalness", "natural"),
    ("continuity", "good a continuation"),
    ("engagingness", "engaging"),
    ("grammaticality", "grammatically correct"),
    ("semantics", "semantically accurate"),
    ("groundedness", "grounded in the fact"),
    ("understandability", "understandable"),
];

/// Other spellings: `(alias, canonical name)`. `grammar` is WebNLG's score column.
const ALIASES: [(&str, &str); 3] = [
    ("grammar", "grammaticality"),
    ("semantic-adequacy", "semantics"),
    ("engagement", "engagingness"),
];

/// The error for an attribute that is not built in: how to give one of your own
/// (`--adjective`, and `--question` where the method asks one), and the built-in list.
fn unknown_attribute(name: &str, asks_question: bool) -> anyhow::Error {
    let lower = name.trim().to_ascii_lowercase();
    let question = if asks_question {
        format!(" or --question (e.g. --question \"Which story shows more {lower}\")")
    } else {
        String::new()
    };
    anyhow::anyhow!(
        "unknown attribute `{name}`: for an attribute of your own, say how the prompt \
         compares it with --adjective (e.g. --adjective \"more {lower}\"){question}; built-in \
         attributes: {}",
        builtin_attribute_list()
    )
}

/// The built-in attributes as help texts and errors list them, other spellings in
/// brackets: "coherence, ..., grammaticality (grammar), ...". The one list every command
/// shows, so that `--help` and the unknown-attribute error agree.
pub fn builtin_attribute_list() -> String {
    ATTRIBUTES
        .iter()
        .map(|(name, _)| {
            let aliases: Vec<&str> = ALIASES
                .iter()
                .filter(|(_, canonical)| canonical == name)
                .map(|(alias, _)| *alias)
                .collect();
            if aliases.is_empty() {
                name.to_string()
            } else {
                format!("{name} ({})", aliases.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names under which an input's human scores of attribute `name` may be kept, in the
/// order they are looked for: the name as given, then for a built-in attribute its
/// canonical name and its other spellings (`engagement` finds `Engagement` and
/// `engagingness`). The one lookup every command uses (`compare`, `score`, the service).
pub fn score_keys(name: &str) -> Vec<String> {
    let mut keys = vec![name.trim().to_string()];
    if let Some(builtin) = Attribute::builtin(name) {
        keys.push(builtin.name.clone());
        keys.extend(
            ALIASES
                .iter()
                .filter(|(_, canonical)| *canonical == builtin.name)
                .map(|(alias, _)| alias.to_string()),
        );
    }
    let mut seen = std::collections::HashSet::new();
    keys.retain(|k| seen.insert(k.to_ascii_lowercase()));
    keys
}

impl Attribute {
    /// The attribute called `name` (case-insensitive, aliases accepted).
    pub fn named(name: &str) -> Result<Self> {
        Self::builtin(name).ok_or_else(|| unknown_attribute(name, true))
    }

    /// The built-in attribute called `name`, if there is one.
    fn builtin(name: &str) -> Option<Self> {
        let lower = name.trim().to_ascii_lowercase();
        let canonical = ALIASES
            .iter()
            .find(|(alias, _)| *alias == lower)
            .map_or(lower.as_str(), |(_, canonical)| canonical);
        ATTRIBUTES
            .iter()
            .find(|(known, _)| *known == canonical)
            .map(|(known, adjective)| Self {
                name: known.to_string(),
                adjective: adjective.to_string(),
                comparative: None,
                question: None,
            })
    }

    /// The attribute as prompt scoring names it ("... measures the summary's {name}"):
    /// a built-in one under its canonical name, any other under its own; no adjective
    /// is needed (the prompt uses none).
    pub fn for_prompt_scoring(name: &str) -> Result<Self> {
        let lower = name.trim().to_ascii_lowercase();
        if lower.is_empty() {
            bail!("the attribute name is empty");
        }
        Ok(Self::builtin(name).unwrap_or_else(|| Self::custom(&lower, None)))
    }

    /// Whether `name` is a built-in attribute (or another spelling of one).
    pub fn is_builtin(name: &str) -> bool {
        Self::builtin(name).is_some()
    }

    /// The attribute `name`: a built-in one keeps its tuned adjective unless a phrase is
    /// given; any other name needs `adjective` (a comparative phrase such as "more
    /// empathetic", or an adjective that follows "more") or `question`.
    pub fn resolve(name: &str, adjective: Option<&str>, question: Option<&str>) -> Result<Self> {
        Self::resolve_asking(name, adjective, Some(question))
    }

    /// As [`Attribute::resolve`] for methods that ask no pairwise question (prompt
    /// scoring, GPTScore): an attribute of the user's own needs `adjective`, and the
    /// error names no `--question`.
    pub fn resolve_adjective(name: &str, adjective: Option<&str>) -> Result<Self> {
        Self::resolve_asking(name, adjective, None)
    }

    /// `question`: `None` where the method takes no question at all.
    fn resolve_asking(
        name: &str,
        adjective: Option<&str>,
        question: Option<Option<&str>>,
    ) -> Result<Self> {
        let asks = question.is_some();
        let adjective = adjective.map(str::trim).filter(|s| !s.is_empty());
        let question = question
            .flatten()
            .map(|q| q.trim().trim_end_matches('?').trim_end())
            .filter(|s| !s.is_empty());
        let lower = name.trim().to_ascii_lowercase();
        if lower.is_empty() {
            bail!("the attribute name is empty");
        }
        let mut attribute = match (Self::builtin(name), adjective) {
            (Some(builtin), None) => builtin,
            (Some(builtin), Some(_)) => Self {
                name: builtin.name,
                ..Self::custom(&lower, adjective)
            },
            (None, None) if question.is_none() => return Err(unknown_attribute(name, asks)),
            (None, _) => Self::custom(&lower, adjective),
        };
        attribute.question = question.map(str::to_string);
        Ok(attribute)
    }

    /// An attribute of the user's own; `phrase` "more X" gives adjective X, any other
    /// phrase is the comparative as written (and the adjective).
    fn custom(name: &str, phrase: Option<&str>) -> Self {
        let phrase = phrase.unwrap_or(name);
        match phrase.strip_prefix("more ") {
            Some(adjective) => Self {
                name: name.to_string(),
                adjective: adjective.trim().to_string(),
                comparative: None,
                question: None,
            },
            None => Self {
                name: name.to_string(),
                adjective: phrase.to_string(),
                comparative: Some(phrase.to_string()),
                question: None,
            },
        }
    }

    /// The comparative phrase: "more coherent", or the user's own.
    pub fn comparative(&self) -> String {
        match &self.comparative {
            Some(phrase) => phrase.clone(),
            None => format!("more {}", self.adjective),
        }
    }

    /// The pairwise question without its "..., A or B?" tail: the user's own, or
    /// "Which {item} is {comparative}".
    pub fn question(&self, item: &str) -> String {
        match &self.question {
            Some(question) => question.clone(),
            None => format!("Which {item} is {}", self.comparative()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_attributes_and_aliases_map_to_adjectives() {
        assert_eq!(Attribute::named("Coherence").unwrap().adjective, "coherent");
        assert_eq!(
            Attribute::named("continuity").unwrap().adjective,
            "good a continuation"
        );
        let grammar = Attribute::named("grammar").unwrap();
        assert_eq!(grammar.name, "grammaticality");
        assert_eq!(grammar.adjective, "grammatically correct");
    }

    #[test]
    fn own_attributes_need_a_phrase_and_keep_it() {
        let error = Attribute::resolve("Empathy", None, None)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--adjective") && error.contains("--question"),
            "{error}"
        );
        let empathy = Attribute::resolve("Empathy", Some("more empathetic"), None).unwrap();
        assert_eq!(empathy.name, "empathy");
        assert_eq!(empathy.adjective, "empathetic");
        assert_eq!(empathy.question("Story"), "Which Story is more empathetic");
        let written = Attribute::resolve("style", Some("better written"), None).unwrap();
        assert_eq!(written.question("Text"), "Which Text is better written");
        let asked =
            Attribute::resolve("empathy", None, Some("Which story shows more empathy?")).unwrap();
        assert_eq!(asked.question("Story"), "Which story shows more empathy");
        let builtin = Attribute::resolve("coherence", None, None).unwrap();
        assert_eq!(builtin, Attribute::named("coherence").unwrap());
        assert_eq!(
            builtin.question("Summary"),
            "Which Summary is more coherent"
        );
    }

    #[test]
    fn custom_task_needs_both_nouns() {
        let error = Nouns::resolve(Task::Custom, Some("Story"), None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--context-label"), "{error}");
        let nouns = Nouns::resolve(Task::Custom, Some("Story"), Some("Prompt")).unwrap();
        assert_eq!(
            (nouns.item.as_str(), nouns.context_label.as_str()),
            ("Story", "Prompt")
        );
        assert_eq!(
            Nouns::resolve(Task::Dialogue, None, None).unwrap().item,
            "Response"
        );
    }

    #[test]
    fn unknown_attribute_lists_the_known_ones() {
        let error = Attribute::named("funniness").unwrap_err().to_string();
        assert!(error.contains("`funniness`"), "{error}");
        let list = builtin_attribute_list();
        assert!(error.contains(&list), "{error}");
        for name in ATTRIBUTES
            .iter()
            .map(|(n, _)| n)
            .chain(ALIASES.iter().map(|(a, _)| a))
        {
            assert!(list.contains(name), "{list}");
            assert!(Attribute::is_builtin(name), "{name}");
        }
        assert!(list.contains("grammaticality (grammar)"), "{list}");
        assert!(!Attribute::is_builtin("funniness"));
    }

    #[test]
    fn methods_without_a_question_do_not_suggest_one() {
        let error = Attribute::resolve_adjective("wit", None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--adjective"), "{error}");
        assert!(!error.contains("--question"), "{error}");
        assert!(error.contains(&builtin_attribute_list()), "{error}");
        let witty = Attribute::resolve_adjective("wit", Some("more witty")).unwrap();
        assert_eq!((witty.adjective.as_str(), witty.question), ("witty", None));
    }
}

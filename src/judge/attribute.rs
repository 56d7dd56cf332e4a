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
}

impl Task {
    /// The candidates' noun, capitalised as in the prompts ("Summary A").
    pub fn item(self) -> &'static str {
        match self {
            Task::Summary => "Summary",
            Task::Dialogue => "Response",
            Task::DataToText => "Text",
        }
    }

    /// The kebab-case name (`summary`, `dialogue`, `data-to-text`).
    pub fn name(self) -> &'static str {
        match self {
            Task::Summary => "summary",
            Task::Dialogue => "dialogue",
            Task::DataToText => "data-to-text",
        }
    }
}

/// A judged attribute: its canonical name and the adjective the prompts use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    pub name: String,
    pub adjective: String,
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

impl Attribute {
    /// The attribute called `name` (case-insensitive, aliases accepted).
    pub fn named(name: &str) -> Result<Self> {
        let lower = name.trim().to_ascii_lowercase();
        let canonical = ALIASES
            .iter()
            .find(|(alias, _)| *alias == lower)
            .map_or(lower.as_str(), |(_, canonical)| canonical);
        match ATTRIBUTES.iter().find(|(known, _)| *known == canonical) {
            Some((known, adjective)) => Ok(Self {
                name: known.to_string(),
                adjective: adjective.to_string(),
            }),
            None => {
                let known: Vec<&str> = ATTRIBUTES
                    .iter()
                    .map(|(n, _)| *n)
                    .chain(ALIASES.iter().map(|(a, _)| *a))
                    .collect();
                bail!(
                    "unknown attribute `{name}`; known attributes: {}",
                    known.join(", ")
                )
            }
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
    fn unknown_attribute_lists_the_known_ones() {
        let error = Attribute::named("funniness").unwrap_err().to_string();
        assert!(error.contains("`funniness`"), "{error}");
        for (name, _) in ATTRIBUTES {
            assert!(error.contains(name), "{error}");
        }
    }
}

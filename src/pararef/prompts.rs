//! The paraphrasing prompts of the Para-Ref paper (section 3.2): the basic prompt, and
//! ten instructions that ask for changes of order, structure, voice, tense, tone, style,
//! wording and formality, one paraphrase per instruction.

use std::fmt;
use std::str::FromStr;

use anyhow::{bail, Result};

/// The paper's basic prompt (`{reference}` follows it).
pub const BASIC: &str = "Paraphrase the sentences:";

/// The paper's ten diverse instructions, in its order.
pub const DIVERSE: [&str; 10] = [
    "Change the order of the sentences:",
    "Change the structure of the sentences:",
    "Change the voice of the sentences:",
    "Change the tense of the sentences:",
    "Alter the tone of the sentences:",
    "Alter the style of the sentences:",
    "Rephrase the sentences while retaining the original meaning:",
    "Use synonyms or related words to express the sentences with the same meaning:",
    "Use more formal language to change the level of formality of the sentences:",
    "Use less formal language to change the level of formality of the sentences:",
];

/// Which instructions produce the paraphrases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PromptSet {
    /// "Paraphrase the sentences: {reference}" for every paraphrase.
    Basic,
    /// The ten instructions in turn (paraphrase k uses instruction k mod 10).
    #[default]
    Diverse,
}

impl PromptSet {
    pub fn name(self) -> &'static str {
        match self {
            PromptSet::Basic => "basic",
            PromptSet::Diverse => "diverse",
        }
    }

    /// The instruction of paraphrase `k` (0-based).
    pub fn instruction(self, k: usize) -> &'static str {
        match self {
            PromptSet::Basic => BASIC,
            PromptSet::Diverse => DIVERSE[k % DIVERSE.len()],
        }
    }

    /// The user message asking for paraphrase `k` of `reference`.
    pub fn prompt(self, k: usize, reference: &str) -> String {
        format!("{} {}", self.instruction(k), reference)
    }
}

impl fmt::Display for PromptSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PromptSet {
    type Err = anyhow::Error;

    fn from_str(name: &str) -> Result<Self> {
        match name {
            "basic" => Ok(PromptSet::Basic),
            "diverse" => Ok(PromptSet::Diverse),
            _ => bail!("unknown prompt set '{name}' (known: basic, diverse)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diverse_prompts_cycle_through_the_ten_instructions() {
        assert_eq!(
            PromptSet::Diverse.prompt(2, "It rained."),
            "Change the voice of the sentences: It rained."
        );
        assert_eq!(
            PromptSet::Diverse.instruction(13),
            PromptSet::Diverse.instruction(3)
        );
        assert_eq!(
            PromptSet::Basic.prompt(7, "x"),
            "Paraphrase the sentences: x"
        );
        let error = "fancy".parse::<PromptSet>().unwrap_err().to_string();
        assert!(error.contains("fancy"), "{error}");
    }
}

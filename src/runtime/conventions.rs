//! Card facts about how a model family is prompted: whether it reads the prompt with a
//! decoder only or with an encoder and a decoder ([`ModelKind`]), the label conventions
//! of its pairwise and absolute questions ([`Conventions`]), and, for judge models, the
//! rubric-grading protocol they were trained on (a built-in protocol's name). They come from model
//! cards (or are inferred for checkpoints without one) and reach the methods through the
//! engine's `ModelInfo`.

use serde::{Deserialize, Serialize};

/// Whether the model reads the prompt with a decoder only or an encoder and a decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    DecoderOnly,
    EncoderDecoder,
    /// An encoder that only embeds text (BERTScore's encoder); never behind a scorer.
    EncoderOnly,
}

/// How a model family is asked for a judgement (from the model card).
///
/// `{item}` in `answer_prefix` is replaced by the task's item noun ("Summary",
/// "Response", "Text").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conventions {
    /// Appended to the user prompt of a pairwise question (Llama-2-chat: "\n\nAnswer:").
    pub pairwise_suffix: String,
    /// Opens the answer of a pairwise question (FlanT5: "{item}"; Llama-2: " {item}").
    pub answer_prefix: String,
    /// The two label words scored right after the answer prefix.
    pub label_a: String,
    pub label_b: String,
    /// Appended to the user prompt of an absolute-scoring question (chat: "\n\nScore:").
    pub score_suffix: String,
    /// Whether prompts go through the chat template by default.
    pub chat: bool,
    /// The rubric-grading format the model was trained on: the card's `[judge] protocol`
    /// (not a key of the `[conventions]` table); `None` for models that were not.
    #[serde(skip)]
    pub rubric_protocol: Option<String>,
}

/// The names of the built-in rubric-grading protocols (`rubrics/protocols/*.toml`, which
/// `judge::rubric::protocol` reads): what a card's `[judge] protocol` may name.
pub const BUILTIN_PROTOCOL_NAMES: [&str; 9] = [
    "prometheus",
    "flow-judge",
    "plain",
    "plain-thinking",
    "selene",
    "glider",
    "skywork-critic",
    "auto-j",
    "j1",
];

impl Default for Conventions {
    fn default() -> Self {
        Self {
            pairwise_suffix: String::new(),
            answer_prefix: "{item}".to_string(),
            label_a: " A".to_string(),
            label_b: " B".to_string(),
            score_suffix: String::new(),
            chat: false,
            rubric_protocol: None,
        }
    }
}

impl Conventions {
    /// The answer prefix with the item noun substituted.
    pub fn answer_prefix_for(&self, item: &str) -> String {
        self.answer_prefix.replace("{item}", item)
    }
}

//! A judge's protocol as data: the prompt it was trained on and how it writes its verdict,
//! read from a protocol file (`rubrics/protocols/README.md` documents the format), so that
//! a new judge needs a file, not code.
//!
//! A protocol has up to two forms: `absolute` (one output graded on a rubric's scale) and
//! `relative` (two outputs compared). Each form holds its system text and user text as
//! Jinja templates over named fields ([`template`]), the opening of the model's answer,
//! the result marker after which the verdict is read, what is written between the marker
//! and a label, and the labels (the rubric's scores; or A, B and optionally a tie). The
//! built-in protocols (`prometheus`, `flow-judge`, `plain`, ...) are files of the same
//! format in `rubrics/protocols/`, embedded at build time; `--protocol FILE` takes a
//! user's, the service takes one inline, and a model card names its built-in protocol.

pub mod requests;
pub mod template;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::engine::EngineError;
use crate::judge::rubric::Rubric;
use crate::judge::scale::ScoreScale;

pub use requests::{
    direct_answer, feedback_request, prompt, reading_point, score_request, wrap, Start,
};
pub use template::{plural_of, render_relative, PairInput, RubricInput};

/// The absolute form's prompt of `protocol` grading `input` on `rubric`, checked against
/// the scale the protocol was trained on.
pub fn render(
    protocol: &RubricProtocol,
    rubric: &Rubric,
    input: &RubricInput,
) -> Result<RubricPrompt> {
    protocol.check_scale(&rubric.name, rubric.scale)?;
    template::render_absolute(protocol, rubric, input)
}

/// `(file name, text)` of every built-in protocol.
const BUILTIN_FILES: [(&str, &str); 9] = [
    (
        "prometheus.toml",
        include_str!("../../../../rubrics/protocols/prometheus.toml"),
    ),
    (
        "flow-judge.toml",
        include_str!("../../../../rubrics/protocols/flow-judge.toml"),
    ),
    (
        "plain.toml",
        include_str!("../../../../rubrics/protocols/plain.toml"),
    ),
    (
        "plain-thinking.toml",
        include_str!("../../../../rubrics/protocols/plain-thinking.toml"),
    ),
    (
        "selene.toml",
        include_str!("../../../../rubrics/protocols/selene.toml"),
    ),
    (
        "glider.toml",
        include_str!("../../../../rubrics/protocols/glider.toml"),
    ),
    (
        "skywork-critic.toml",
        include_str!("../../../../rubrics/protocols/skywork-critic.toml"),
    ),
    (
        "auto-j.toml",
        include_str!("../../../../rubrics/protocols/auto-j.toml"),
    ),
    (
        "j1.toml",
        include_str!("../../../../rubrics/protocols/j1.toml"),
    ),
];

/// A judge's protocol: cheap to clone, compared by name and content.
#[derive(Clone)]
pub struct RubricProtocol(Arc<Spec>);

struct Spec {
    file: ProtocolFile,
    origin: Origin,
    /// The first 12 hex digits of the sha256 of the file's fields (not its comments).
    fingerprint: String,
    templates: minijinja::Environment<'static>,
}

/// Where a protocol was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// One of `rubrics/protocols/`, embedded.
    Builtin,
    /// A user's file.
    File(PathBuf),
    /// Given whole inside a request (the service's `protocol` object).
    Inline,
}

/// The protocol file (see `rubrics/protocols/README.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolFile {
    /// What runs and caches call it.
    pub name: String,
    /// One line for `--help` and listings.
    #[serde(default)]
    pub description: String,
    /// Where its texts come from (repository, path, revision).
    pub source: Option<String>,
    /// Grading one output on a rubric's scale.
    pub absolute: Option<Form>,
    /// Comparing two outputs.
    pub relative: Option<Form>,
    /// For judges that reason before their verdict (thinking models): the markers around
    /// the reasoning.
    pub reasoning: Option<Reasoning>,
}

/// The reasoning a thinking judge writes before its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reasoning {
    /// Opens the reasoning (`<think>`); the model writes it.
    pub open: String,
    /// Closes it (`</think>`): written by us after a reasoning cut at its budget.
    pub close: String,
    /// Written between the closing marker and what follows: after a reasoning we close,
    /// and after one the model closed (its round stops at the marker, before the blank
    /// the model writes next: Qwen3's "\n\n").
    #[serde(default = "newline")]
    pub after_close: String,
    /// The opening of the answer that switches thinking off where the model allows it
    /// (Qwen3's `enable_thinking=false`: an empty reasoning, `<think>\n\n</think>\n\n`).
    pub off: Option<String>,
}

/// One form of a protocol: its prompt and how the model writes its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Form {
    /// The system message (a template), if the judge was trained with one.
    pub system: Option<String>,
    /// The user message (a template).
    pub user: String,
    /// Opens the model's answer when it writes a feedback ("Feedback:").
    #[serde(default)]
    pub opening: String,
    /// After this the model writes its verdict; it is read right after the last one.
    pub marker: String,
    /// Written between the marker and a label (a space after `Score:`; nothing after
    /// `[RESULT] `, whose own space goes to the label).
    #[serde(default)]
    pub separator: String,
    /// Where a feedback's generation may stop (after the verdict).
    #[serde(default)]
    pub stop: Vec<String>,
    /// Between a feedback that has no marker and the marker appended after it.
    #[serde(default = "newline")]
    pub joiner: String,
    /// Tags the model writes around its feedback (`<feedback>`, `</feedback>`): taken off
    /// the feedback shown, and the closing tag written before an appended marker when
    /// the model left it open.
    pub feedback_tags: Option<[String; 2]>,
    /// Absolute form: the only scale the judge was trained on; any scale when absent.
    pub scale: Option<[i64; 2]>,
    /// Relative form: how each choice is written after the marker.
    pub choices: Option<Choices>,
    /// Whether the judge writes a feedback before its verdict; `false`: the verdict is
    /// read right after the prompt and the marker (the judge was trained to answer at
    /// once, as Skywork-Critic), through the prefix trie.
    #[serde(default = "yes")]
    pub feedback: bool,
}

fn yes() -> bool {
    true
}

fn newline() -> String {
    "\n".to_string()
}

/// The labels of a relative form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Choices {
    pub a: String,
    pub b: String,
    /// A tie label, for judges that may say neither is better.
    pub tie: Option<String>,
}

impl Choices {
    /// The labels in reading order: A, B, then the tie where there is one.
    pub fn labels(&self) -> Vec<&str> {
        let mut labels = vec![self.a.as_str(), self.b.as_str()];
        labels.extend(self.tie.as_deref());
        labels
    }

    /// The labels as a sentence names them, as they are written: "A or B", "Response 1,
    /// Response 2 or Tie".
    pub fn named(&self) -> String {
        let labels = self.labels();
        match labels.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => labels.concat(),
        }
    }
}

/// Which form of a protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grading {
    Absolute,
    Relative,
}

impl Grading {
    fn key(self) -> &'static str {
        match self {
            Grading::Absolute => "absolute",
            Grading::Relative => "relative",
        }
    }
}

/// A rendered judge prompt: the system message where the protocol has one, and the user
/// text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RubricPrompt {
    pub system: Option<String>,
    pub user: String,
}

/// A protocol the caller's request cannot use (exit code 2, a `ValueError`).
fn bad(message: String) -> anyhow::Error {
    EngineError::BadRequest(message).into()
}

impl RubricProtocol {
    /// The built-in protocols, in `rubrics/protocols/`'s order.
    pub fn builtins() -> &'static [RubricProtocol] {
        static BUILTINS: OnceLock<Vec<RubricProtocol>> = OnceLock::new();
        BUILTINS.get_or_init(|| {
            BUILTIN_FILES
                .iter()
                .map(|(file, text)| {
                    Self::from_toml(text, Origin::Builtin)
                        .unwrap_or_else(|e| panic!("built-in protocol {file}: {e:#}"))
                })
                .collect()
        })
    }

    /// The names of the built-in protocols.
    pub fn builtin_names() -> Vec<&'static str> {
        Self::builtins().iter().map(|p| p.name()).collect()
    }

    /// The built-in protocol `name`.
    pub fn named(name: &str) -> Result<Self> {
        Self::builtins()
            .iter()
            .find(|p| p.name() == name)
            .cloned()
            .ok_or_else(|| {
                bad(format!(
                    "unknown protocol '{name}': the built-in protocols are {}; a protocol file \
                     (.toml, see rubrics/protocols/README.md) is named by its path",
                    Self::builtin_names().join(", ")
                ))
            })
    }

    /// Prometheus 2's (absolute and relative grading).
    pub fn prometheus() -> Self {
        Self::named("prometheus").expect("built in")
    }

    /// Flow-Judge v0.1's (absolute grading only).
    pub fn flow_judge() -> Self {
        Self::named("flow-judge").expect("built in")
    }

    /// Ours, for any instruct model.
    pub fn plain() -> Self {
        Self::named("plain").expect("built in")
    }

    /// A built-in protocol by name, or a protocol file by path (a name that is not built
    /// in and names an existing file, or ends in `.toml`).
    pub fn resolve(name_or_path: &str) -> Result<Self> {
        if let Ok(builtin) = Self::named(name_or_path) {
            return Ok(builtin);
        }
        let path = Path::new(name_or_path);
        if path.is_file() || name_or_path.ends_with(".toml") {
            return Self::from_file(path);
        }
        Self::named(name_or_path)
    }

    /// Read a protocol file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            bad(format!(
                "cannot read the protocol file {}: {e}",
                path.display()
            ))
        })?;
        Self::from_toml(&text, Origin::File(path.to_path_buf()))
            .with_context(|| format!("protocol file {}", path.display()))
    }

    /// A protocol from a file's text.
    pub fn from_toml(text: &str, origin: Origin) -> Result<Self> {
        let file: ProtocolFile = toml::from_str(text).map_err(|e| bad(format!("{e}")))?;
        Self::from_parts(file, origin)
    }

    /// A protocol given whole as a JSON object with a file's fields (the service's).
    pub fn from_json(value: serde_json::Value) -> Result<Self> {
        let file: ProtocolFile = serde_path_to_error::deserialize(value)
            .map_err(|e| bad(format!("protocol object: {e}")))?;
        Self::from_parts(file, Origin::Inline)
    }

    fn from_parts(file: ProtocolFile, origin: Origin) -> Result<Self> {
        check(&file)?;
        let templates = template::compile(&file)?;
        let fields = serde_json::to_vec(&file).expect("a protocol serialises");
        let fingerprint = hex::encode(Sha256::digest(&fields))[..12].to_string();
        let protocol = Self(Arc::new(Spec {
            file,
            origin,
            fingerprint,
            templates,
        }));
        template::probe(&protocol)?;
        Ok(protocol)
    }

    pub fn name(&self) -> &str {
        &self.0.file.name
    }

    pub fn description(&self) -> &str {
        &self.0.file.description
    }

    pub fn source(&self) -> Option<&str> {
        self.0.file.source.as_deref()
    }

    pub fn origin(&self) -> &Origin {
        &self.0.origin
    }

    /// The protocol's fields as its file holds them.
    pub fn file(&self) -> &ProtocolFile {
        &self.0.file
    }

    /// The name caches know it by: a built-in protocol's name; a user's, its name and the
    /// fingerprint of its fields (so that an edited file is a new protocol).
    pub fn cache_name(&self) -> String {
        match self.0.origin {
            Origin::Builtin => self.name().to_string(),
            _ => format!("{}@{}", self.name(), self.0.fingerprint),
        }
    }

    /// The form `grading` of this protocol, or why it has none.
    /// The reasoning markers of a thinking judge's protocol.
    pub fn reasoning(&self) -> Option<&Reasoning> {
        self.0.file.reasoning.as_ref()
    }

    pub fn form(&self, grading: Grading) -> Result<&Form> {
        let form = match grading {
            Grading::Absolute => self.0.file.absolute.as_ref(),
            Grading::Relative => self.0.file.relative.as_ref(),
        };
        form.ok_or_else(|| {
            let (what, instead) = match grading {
                Grading::Absolute => (
                    "absolute grading (one output on a rubric's scale)",
                    "grade with a protocol that has an [absolute] form",
                ),
                Grading::Relative => (
                    "relative grading (two outputs compared)",
                    "compare with a protocol that has a [relative] form, or grade each \
                     candidate on its own",
                ),
            };
            let having: Vec<&str> = Self::builtins()
                .iter()
                .filter(|p| match grading {
                    Grading::Absolute => p.0.file.absolute.is_some(),
                    Grading::Relative => p.0.file.relative.is_some(),
                })
                .map(|p| p.name())
                .collect();
            bad(format!(
                "the {} protocol has no {what}: {instead} (built in: {})",
                self.name(),
                having.join(", ")
            ))
        })
    }

    /// The absolute form.
    pub fn absolute(&self) -> Result<&Form> {
        self.form(Grading::Absolute)
    }

    /// The relative form.
    pub fn relative(&self) -> Result<&Form> {
        self.form(Grading::Relative)
    }

    /// Check that the absolute form can grade on `scale`.
    pub fn check_scale(&self, rubric_name: &str, scale: ScoreScale) -> Result<()> {
        let form = self.absolute()?;
        if let Some([low, high]) = form.scale {
            if (scale.low(), scale.high()) != (low, high) {
                return Err(bad(format!(
                    "the {} protocol grades on {low}-{high} only (its judge was trained so), and \
                     the rubric {rubric_name} has the scale {scale}: grade in the plain protocol \
                     (any scale) or another that takes it, or with a {low}-{high} rubric",
                    self.name()
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn templates(&self) -> &minijinja::Environment<'static> {
        &self.0.templates
    }
}

/// A protocol file's rules beyond its types.
fn check(file: &ProtocolFile) -> Result<()> {
    let named = |field: &str, message: &str| Err(bad(format!("{field}: {message}")));
    if file.name.trim().is_empty() || file.name.contains(['/', '\\', '@']) {
        return named("name", "a protocol needs a name without '/', '\\' or '@'");
    }
    if let Some(reasoning) = &file.reasoning {
        if reasoning.open.trim().is_empty() || reasoning.close.trim().is_empty() {
            return named(
                "reasoning",
                "give the reasoning's opening and closing markers, both non-empty",
            );
        }
        if reasoning.open == reasoning.close {
            return named(
                "reasoning.close",
                "the closing marker must differ from the opening one",
            );
        }
    }
    if file.absolute.is_none() && file.relative.is_none() {
        return named(
            "absolute",
            "a protocol needs an [absolute] form, a [relative] form, or both",
        );
    }
    for grading in [Grading::Absolute, Grading::Relative] {
        let form = match grading {
            Grading::Absolute => &file.absolute,
            Grading::Relative => &file.relative,
        };
        let Some(form) = form else { continue };
        let key = grading.key();
        if form.marker.trim().is_empty() {
            return named(
                &format!("{key}.marker"),
                "the result marker cannot be empty (the verdict is read right after it)",
            );
        }
        if form.stop.iter().any(String::is_empty) {
            return named(&format!("{key}.stop"), "a stop string cannot be empty");
        }
        if let Some([open, close]) = &form.feedback_tags {
            if open.is_empty() || close.is_empty() {
                return named(
                    &format!("{key}.feedback_tags"),
                    "give the opening and the closing tag, both non-empty",
                );
            }
        }
        match grading {
            Grading::Absolute => {
                if form.choices.is_some() {
                    return named(
                        "absolute.choices",
                        "an absolute form reads the rubric's scores; choices belong to [relative]",
                    );
                }
                if let Some([low, high]) = form.scale {
                    if ScoreScale::new(low, high).is_err() {
                        return named(
                            "absolute.scale",
                            &format!("[{low}, {high}] is not a scale (lowest, then highest)"),
                        );
                    }
                }
            }
            Grading::Relative => {
                if form.scale.is_some() {
                    return named(
                        "relative.scale",
                        "a relative form reads choices, not a scale",
                    );
                }
                let Some(choices) = &form.choices else {
                    return named(
                        "relative.choices",
                        "a relative form needs its choices: { a = \"A\", b = \"B\" } (and \
                         tie = \"...\" for a judge that may call a tie)",
                    );
                };
                let labels = choices.labels();
                if labels.iter().any(|l| l.trim().is_empty()) {
                    return named("relative.choices", "a choice cannot be empty");
                }
                for (i, label) in labels.iter().enumerate() {
                    if labels[..i].contains(label) {
                        return named(
                            "relative.choices",
                            &format!("the choice {label:?} is given twice"),
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

impl std::fmt::Display for RubricProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Debug for RubricProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RubricProtocol")
            .field("name", &self.name())
            .field("origin", &self.0.origin)
            .field("fingerprint", &self.0.fingerprint)
            .finish()
    }
}

impl PartialEq for RubricProtocol {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.0.fingerprint == other.0.fingerprint
    }
}

impl Eq for RubricProtocol {}

/// As runs record it: the name.
impl Serialize for RubricProtocol {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// As requests give it: a built-in protocol's name, or a whole protocol as an object with
/// a protocol file's fields. Never a path: a request does not read the server's files.
impl<'de> Deserialize<'de> for RubricProtocol {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let protocol = match value {
            serde_json::Value::String(name) => Self::named(&name),
            serde_json::Value::Object(_) => Self::from_json(value),
            _ => Err(bad(
                "a protocol is a built-in protocol's name or an object with a protocol file's \
                 fields"
                    .to_string(),
            )),
        };
        protocol.map_err(|e| serde::de::Error::custom(format!("{e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_protocols_load_and_the_runtime_knows_their_names() {
        let names = RubricProtocol::builtin_names();
        assert_eq!(names, crate::runtime::BUILTIN_PROTOCOL_NAMES);
        for (protocol, (file, _)) in RubricProtocol::builtins().iter().zip(BUILTIN_FILES) {
            assert_eq!(format!("{}.toml", protocol.name()), file);
            assert!(!protocol.description().is_empty(), "{file}");
            assert_eq!(protocol.cache_name(), protocol.name());
        }
        assert!(RubricProtocol::flow_judge().relative().is_err());
        assert!(RubricProtocol::prometheus().relative().is_ok());
    }

    #[test]
    fn unknown_names_list_the_builtins() {
        let error = format!("{:#}", RubricProtocol::resolve("g-eval").unwrap_err());
        assert!(error.contains("unknown protocol 'g-eval'"), "{error}");
        assert!(error.contains("prometheus, flow-judge, plain"), "{error}");
    }

    fn with(extra: &str) -> String {
        format!(
            "name = \"mine\"\n[absolute]\nuser = \"Grade {{{{ response }}}}\"\nmarker = \"Score:\"\n{extra}"
        )
    }

    #[test]
    fn malformed_files_name_the_field() {
        let error = |text: &str| {
            format!(
                "{:#}",
                RubricProtocol::from_toml(text, Origin::Inline).unwrap_err()
            )
        };
        assert!(error(&with("colour = 1")).contains("colour"));
        assert!(error("name = \"x\"\n").contains("absolute"));
        assert!(error(&with("scale = [5, 1]")).contains("absolute.scale"));
        assert!(error(&with("choices = { a = \"A\", b = \"B\" }")).contains("absolute.choices"));
        let relative = "name = \"r\"\n[relative]\nuser = \"x\"\nmarker = \"Better:\"\n";
        assert!(error(relative).contains("relative.choices"));
        let twice = format!("{relative}choices = {{ a = \"A\", b = \"A\" }}\n");
        assert!(error(&twice).contains("given twice"));
        let empty_marker = "name = \"e\"\n[absolute]\nuser = \"x\"\nmarker = \" \"\n";
        assert!(error(empty_marker).contains("absolute.marker"));
        // A template that does not parse, or reads a field there is not, names its place.
        let syntax = "name = \"s\"\n[absolute]\nuser = \"{% if %}\"\nmarker = \"S:\"\n";
        assert!(error(syntax).contains("absolute.user"), "{}", error(syntax));
        let unknown = "name = \"u\"\n[absolute]\nuser = \"{{ respones }}\"\nmarker = \"S:\"\n";
        let message = error(unknown);
        assert!(
            message.contains("absolute.user") && message.contains("respones"),
            "{message}"
        );
        // Bad input is the request's fault.
        let bad = RubricProtocol::from_toml("name = 3", Origin::Inline).unwrap_err();
        assert_eq!(
            crate::engine::error_kind(&bad),
            crate::engine::ErrorKind::BadRequest
        );
    }

    #[test]
    fn a_user_protocol_is_cached_by_its_fields() {
        let one = RubricProtocol::from_toml(&with(""), Origin::Inline).unwrap();
        let again =
            RubricProtocol::from_toml(&format!("# a comment\n{}", with("")), Origin::Inline)
                .unwrap();
        let other = RubricProtocol::from_toml(&with("separator = \" \""), Origin::Inline).unwrap();
        assert_eq!(one, again);
        assert_eq!(one.cache_name(), again.cache_name());
        assert_ne!(one.cache_name(), other.cache_name());
        assert!(one.cache_name().starts_with("mine@"));
    }

    #[test]
    fn requests_give_a_name_or_an_object_never_a_path() {
        let named: RubricProtocol = serde_json::from_str("\"plain\"").unwrap();
        assert_eq!(named, RubricProtocol::plain());
        let error = serde_json::from_str::<RubricProtocol>("\"/etc/protocol.toml\"").unwrap_err();
        assert!(error.to_string().contains("unknown protocol"), "{error}");
        let object = serde_json::json!({
            "name": "mine",
            "absolute": {"user": "Grade {{ response }}", "marker": "Score:", "separator": " "}
        });
        let inline: RubricProtocol = serde_json::from_value(object).unwrap();
        assert_eq!(inline.absolute().unwrap().separator, " ");
        assert_eq!(serde_json::to_string(&inline).unwrap(), "\"mine\"");
    }
}

//! A scoring run as a caller asks for it (the command line's options, the Python
//! package's keywords): checked and settled into [`ScoreOptions`] here (criteria from a
//! file or free text, a task prompt, given evaluation steps, a rubric by name or file),
//! so that every front end takes one route to the same run.

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};

use super::attribute::{Attribute, Task};
use super::diagnostics::Audience;
use super::geval::steps::DEFAULT_MAX_TOKENS;
use super::geval::{criteria_from_text, Criteria, StepsSource};
use super::rubric::{Rubric, RubricProtocol};
use super::scale::ScoreScale;
use super::scoring::{RubricOptions, ScoreMethod, ScoreOptions};
use crate::progress::Progress;

/// What a caller chose for a scoring run (see `nlg-judge score --help`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRequest {
    pub method: ScoreMethod,
    /// Needed unless `criteria_text` names it.
    pub attribute: Option<String>,
    pub adjective: Option<String>,
    pub task: Task,
    /// G-Eval criteria file (TOML).
    pub criteria: Option<PathBuf>,
    /// G-Eval criteria as free text ("Coherence (1-5): ...").
    pub criteria_text: Option<String>,
    pub task_prompt: Option<String>,
    /// G-Eval evaluation steps from this file.
    pub steps: Option<PathBuf>,
    pub max_step_tokens: usize,
    pub scale: Option<ScoreScale>,
    /// G-Eval: show each candidate's reference as the expected output; rubric grading:
    /// as the reference answer.
    pub reference: bool,
    /// Rubric grading's choices (`--method rubric` only).
    pub rubric: Option<RubricRequest>,
    /// Who reads the errors: they name the options in that reader's words (`--rubric`,
    /// `rubric=`).
    pub audience: Audience,
}

/// Which rubric a caller chose.
#[derive(Debug, Clone, PartialEq)]
pub enum RubricChoice {
    /// A built-in rubric's name, or a rubric file (`.toml`, `.json`): `--rubric`.
    Named(String),
    /// A rubric given whole (Python's dict, see [`Rubric::from_inline`]).
    Given(Box<Rubric>),
}

/// Rubric grading as a caller asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct RubricRequest {
    pub rubric: RubricChoice,
    /// `None`: the model card's protocol, else plain.
    pub protocol: Option<RubricProtocol>,
    /// Write a feedback before the score (one generation per candidate).
    pub feedback: bool,
    pub max_feedback_tokens: usize,
    /// Thinking judges: most tokens of a reasoning (`None`: the default).
    pub max_reasoning_tokens: Option<usize>,
    /// Thinking judges: thinking off, where the protocol can switch it off.
    pub thinking_off: bool,
}

impl RubricRequest {
    /// The command line's defaults for `rubric`: feedback first, the card's protocol.
    pub fn new(rubric: &str) -> Self {
        Self {
            rubric: RubricChoice::Named(rubric.to_string()),
            protocol: None,
            feedback: true,
            max_feedback_tokens: super::rubric::run::DEFAULT_FEEDBACK_TOKENS,
            max_reasoning_tokens: None,
            thinking_off: false,
        }
    }
}

impl ScoreRequest {
    /// The command line's defaults.
    pub fn new(method: ScoreMethod, attribute: Option<&str>) -> Self {
        Self {
            method,
            attribute: attribute.map(str::to_string),
            adjective: None,
            task: Task::Summary,
            criteria: None,
            criteria_text: None,
            task_prompt: None,
            steps: None,
            max_step_tokens: DEFAULT_MAX_TOKENS,
            scale: None,
            reference: false,
            rubric: None,
            audience: Audience::CommandLine,
        }
    }

    /// `flag` (a command-line option, `--criteria-text`, or one with its value,
    /// `--method geval`) in the words of whoever reads the errors: as it is on the
    /// command line, `criteria_text=` or `method="geval"` in Python.
    fn word(&self, flag: &str) -> String {
        if self.audience != Audience::Python {
            return flag.to_string();
        }
        let bare = flag.trim_start_matches('-');
        match bare.split_once(' ') {
            Some((name, value)) => format!("{}=\"{value}\"", name.replace('-', "_")),
            None if bare == "reference" => "reference=True".to_string(),
            None => format!("{}=", bare.replace('-', "_")),
        }
    }

    /// The task when the caller names none. A built-in attribute or criterion is read
    /// with `summary`'s wording (SummEval's: "Summary:", "Source Text:"); an attribute
    /// or criterion of the caller's own (free-text criteria, an attribute that is not
    /// built in) with the generic wording of `custom` ("Text:", "Input:", "Output:"),
    /// since nothing says what its data are: the service reads free-text criteria so
    /// too. A criteria file's headings are its own whatever the task.
    pub fn default_task(
        method: ScoreMethod,
        attribute: Option<&str>,
        criteria_text: Option<&str>,
    ) -> Task {
        let own = match method {
            ScoreMethod::Geval => criteria_text.is_some(),
            ScoreMethod::Prompt | ScoreMethod::Gptscore => {
                !attribute.is_some_and(Attribute::is_builtin)
            }
            // A rubric file's headings are its own; built-in names read by task.
            ScoreMethod::Rubric => false,
        };
        if own {
            Task::Custom
        } else {
            Task::Summary
        }
    }

    /// Check the choices and settle the run's options: files read, method-specific
    /// options checked. Criteria read from free text are announced through `progress`.
    pub fn options(&self, progress: Progress) -> Result<ScoreOptions> {
        let geval_only = [
            ("--criteria", self.criteria.is_some()),
            ("--criteria-text", self.criteria_text.is_some()),
            ("--task-prompt", self.task_prompt.is_some()),
            ("--steps", self.steps.is_some()),
        ];
        let w = |flag: &str| self.word(flag);
        if self.method != ScoreMethod::Geval {
            if let Some((flag, _)) = geval_only.iter().find(|(_, set)| *set) {
                bail!("{} applies to {} only", w(flag), w("--method geval"));
            }
            if self.method == ScoreMethod::Gptscore && self.scale.is_some() {
                bail!(
                    "{} does not apply to {}",
                    w("--scale"),
                    w("--method gptscore")
                );
            }
        }
        if self.reference && !matches!(self.method, ScoreMethod::Geval | ScoreMethod::Rubric) {
            bail!(
                "{} applies to {} and rubric only",
                w("--reference"),
                w("--method geval")
            );
        }
        let rubric = match (&self.rubric, self.method) {
            (None, ScoreMethod::Rubric) => match self.audience {
                Audience::Python => bail!("rubric grading needs a rubric (rubric=)"),
                _ => bail!("--method rubric needs a rubric: --rubric NAME or --rubric FILE"),
            },
            (Some(_), ScoreMethod::Rubric) if self.scale.is_some() => bail!(
                "{} does not apply to {}: the rubric's descriptions set its scale (its `scale` \
                 field in a rubric file)",
                w("--scale"),
                w("--method rubric")
            ),
            (Some(chosen), ScoreMethod::Rubric) => Some(RubricOptions {
                rubric: match &chosen.rubric {
                    RubricChoice::Named(spec) => {
                        Rubric::load(spec, self.task).with_context(|| match self.audience {
                            Audience::Python => "rubric".to_string(),
                            _ => "--rubric".to_string(),
                        })?
                    }
                    RubricChoice::Given(rubric) => rubric.as_ref().clone(),
                },
                protocol: chosen.protocol.clone(),
                feedback_tokens: chosen.feedback.then_some(chosen.max_feedback_tokens),
                reasoning_tokens: chosen.max_reasoning_tokens,
                thinking_off: chosen.thinking_off,
            }),
            (Some(_), _) => bail!("{} applies to {} only", w("--rubric"), w("--method rubric")),
            (None, _) => None,
        };
        if self.criteria.is_some() && self.criteria_text.is_some() {
            bail!(
                "{} and {} cannot be used together",
                w("--criteria"),
                w("--criteria-text")
            );
        }
        let from_text = match &self.criteria_text {
            Some(text) => Some(
                criteria_from_text(
                    text,
                    self.task_prompt.as_deref(),
                    self.scale,
                    Some(self.task),
                )
                .with_context(|| w("--criteria-text").trim_end_matches('=').to_string())?,
            ),
            None => None,
        };
        let attribute = match (&self.attribute, &from_text, &rubric) {
            (Some(attribute), _, _) => attribute.clone(),
            (None, Some((criteria, _)), _) => criteria.name.to_lowercase(),
            (None, None, Some(chosen)) => chosen.rubric.name.to_lowercase(),
            (None, None, None) => bail!(
                "{} is needed (or {})",
                w("--attribute").trim_end_matches('='),
                w("--criteria-text").trim_end_matches('=')
            ),
        };
        // The attribute is checked now, before a caller loads a model for it.
        match self.method {
            // The prompt names the attribute itself ("... measures the summary's
            // surprise"): any name reads, and an adjective would change nothing.
            ScoreMethod::Prompt => {
                if self.adjective.is_some() {
                    bail!(
                        "{} does not apply to {}: its prompt names the attribute itself (\"... \
                         measures the summary's {}\"); it applies to {} (and to compare)",
                        w("--adjective"),
                        w("--method prompt"),
                        Attribute::for_prompt_scoring(&attribute)?.name,
                        w("--method gptscore")
                    );
                }
                Attribute::for_prompt_scoring(&attribute)?;
            }
            ScoreMethod::Gptscore => {
                Attribute::resolve_adjective(&attribute, self.adjective.as_deref())?;
            }
            ScoreMethod::Geval if self.criteria.is_none() && from_text.is_none() => {
                Criteria::builtin(self.task, &attribute)?;
            }
            ScoreMethod::Geval | ScoreMethod::Rubric => {}
        }
        if self.adjective.is_some() && self.method == ScoreMethod::Rubric {
            bail!(
                "{} does not apply to {}: the rubric names the criterion",
                w("--adjective"),
                w("--method rubric")
            );
        }
        let mut options = ScoreOptions::new(self.method, self.task, &attribute);
        options.adjective = self.adjective.clone();
        options.reference = self.reference;
        options.rubric = rubric;
        match from_text {
            Some((criteria, source)) => {
                progress.note(&format!(
                    "G-Eval criteria from the text: {} on the scale {} (from {})",
                    criteria.name,
                    criteria.scale,
                    source.describe()
                ));
                // The scale is settled: the text's range wins over --scale.
                options.criteria = Some(criteria);
            }
            None => {
                options.scale = self.scale;
                let prompt = self.task_prompt.as_deref();
                if let Some(path) = &self.criteria {
                    let mut criteria = Criteria::from_file(path)?;
                    if let Some(prompt) = prompt.filter(|p| !p.trim().is_empty()) {
                        criteria.introduction = prompt.trim().to_string();
                    }
                    options.criteria = Some(criteria);
                } else if let Some(prompt) = prompt {
                    let mut criteria = Criteria::builtin(self.task, &attribute)?;
                    criteria.introduction = prompt.trim().to_string();
                    options.criteria = Some(criteria);
                }
            }
        }
        options.steps = match &self.steps {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read steps file {}", path.display()))?;
                if text.trim().is_empty() {
                    bail!("steps file {} is empty", path.display());
                }
                StepsSource::Given(text)
            }
            None => StepsSource::Generate {
                max_tokens: self.max_step_tokens,
            },
        };
        options.progress = progress;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geval_options_are_refused_for_the_other_methods() {
        let mut request = ScoreRequest::new(ScoreMethod::Prompt, Some("coherence"));
        request.reference = true;
        let error = request.options(Progress::none()).unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "--reference applies to --method geval and rubric only"
        );
        let request = ScoreRequest::new(ScoreMethod::Geval, None);
        assert!(request.options(Progress::none()).is_err());
    }

    /// Issue 60: Python's callers read its keywords, not the command line's flags.
    #[test]
    fn python_callers_read_their_keywords() {
        let mut request = ScoreRequest::new(ScoreMethod::Prompt, Some("coherence"));
        request.audience = Audience::Python;
        request.reference = true;
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert_eq!(
            error,
            "reference=True applies to method=\"geval\" and rubric only"
        );
        let mut request = ScoreRequest::new(ScoreMethod::Rubric, None);
        request.audience = Audience::Python;
        request.rubric = Some(RubricRequest::new("/no/such/rubric.toml"));
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert!(
            error.starts_with("rubric: cannot read rubric file /no/such/rubric.toml"),
            "{error}"
        );
        assert!(!error.contains("--"), "{error}");
        let mut request = ScoreRequest::new(ScoreMethod::Geval, None);
        request.audience = Audience::Python;
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert_eq!(error, "attribute is needed (or criteria_text)");
    }

    #[test]
    fn unknown_attributes_are_refused_before_any_model() {
        // Prompt scoring names the attribute in its prompt: any name reads, and an
        // adjective would do nothing, so it is refused.
        let request = ScoreRequest::new(ScoreMethod::Prompt, Some("surprise"));
        assert!(request.options(Progress::none()).is_ok());
        let mut request = ScoreRequest::new(ScoreMethod::Prompt, Some("surprise"));
        request.adjective = Some("banana-like".into());
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert!(
            error.contains("does not apply to --method prompt")
                && error.contains("measures the summary's surprise"),
            "{error}"
        );
        let request = ScoreRequest::new(ScoreMethod::Gptscore, Some("wit"));
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert!(
            error.contains("--adjective") && !error.contains("--question"),
            "{error}"
        );
        let mut request = ScoreRequest::new(ScoreMethod::Gptscore, Some("wit"));
        request.adjective = Some("more witty".into());
        assert!(request.options(Progress::none()).is_ok());
        let request = ScoreRequest::new(ScoreMethod::Geval, Some("wit"));
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert!(error.contains("--criteria-text"), "{error}");
    }

    #[test]
    fn own_attributes_and_criteria_default_to_generic_wording() {
        let default = ScoreRequest::default_task;
        assert_eq!(
            default(ScoreMethod::Geval, Some("coherence"), None),
            Task::Summary
        );
        assert_eq!(
            default(ScoreMethod::Prompt, Some("Fluency"), None),
            Task::Summary
        );
        assert_eq!(
            default(ScoreMethod::Geval, None, Some("Wit (1-5): ...")),
            Task::Custom
        );
        assert_eq!(
            default(ScoreMethod::Prompt, Some("wit"), None),
            Task::Custom
        );
        assert_eq!(
            default(ScoreMethod::Gptscore, Some("wit"), None),
            Task::Custom
        );
    }

    #[test]
    fn rubric_requests_are_checked_before_any_model() {
        let mut request = ScoreRequest::new(ScoreMethod::Rubric, None);
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert!(error.contains("--rubric NAME"), "{error}");
        request.rubric = Some(RubricRequest::new("relevance"));
        let options = request.options(Progress::none()).unwrap();
        assert_eq!(options.attribute, "relevance");
        let chosen = options.rubric.unwrap();
        assert_eq!(chosen.rubric.sections.output, "Summary");
        assert_eq!(
            chosen.feedback_tokens,
            Some(crate::judge::rubric::run::DEFAULT_FEEDBACK_TOKENS)
        );
        assert_eq!(chosen.protocol, None);
        let mut direct = RubricRequest::new("dialogue/coherence");
        direct.feedback = false;
        direct.protocol = Some(RubricProtocol::flow_judge());
        request.rubric = Some(direct);
        request.attribute = Some("continuity".into());
        let options = request.options(Progress::none()).unwrap();
        assert_eq!(options.attribute, "continuity");
        let chosen = options.rubric.unwrap();
        assert_eq!(
            (chosen.feedback_tokens, chosen.protocol),
            (None, Some(RubricProtocol::flow_judge()))
        );
        request.scale = Some(ScoreScale::new(1, 3).unwrap());
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert!(error.contains("--scale does not apply"), "{error}");
        request.scale = None;
        request.rubric = Some(RubricRequest::new("no-such-rubric"));
        let error = format!("{:#}", request.options(Progress::none()).unwrap_err());
        assert!(
            error.starts_with("--rubric: no built-in rubric `no-such-rubric`"),
            "{error}"
        );
        let mut prompt = ScoreRequest::new(ScoreMethod::Prompt, Some("coherence"));
        prompt.rubric = Some(RubricRequest::new("coherence"));
        let error = format!("{:#}", prompt.options(Progress::none()).unwrap_err());
        assert_eq!(error, "--rubric applies to --method rubric only");
    }

    #[test]
    fn free_text_criteria_name_the_attribute() {
        let mut request = ScoreRequest::new(ScoreMethod::Geval, None);
        request.criteria_text = Some("Empathy (1-3): how warm the reply is.".into());
        let options = request.options(Progress::none()).unwrap();
        assert_eq!(options.attribute, "empathy");
        assert_eq!(options.criteria.unwrap().scale.high(), 3);
    }
}

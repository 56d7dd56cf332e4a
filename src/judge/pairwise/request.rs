//! A compare run as a caller asks for it (the command line's options, the Python
//! package's keywords): names and optional values, checked and settled into
//! [`CompareOptions`] here, so that every front end takes one route to the same run.

use anyhow::{bail, Result};

use super::adaptive::{AdaptiveSettings, StopRule};
use super::design::Design;
use super::run::{CompareOptions, Debias};
use super::template::PairwiseTemplate;
use crate::judge::attribute::{Attribute, Nouns, Task};
use crate::judge::rubric::Rubric;
use crate::progress::Progress;
use crate::rank::RankMethod;

/// What a caller chose for a compare run (see `nlg-judge compare --help`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRequest {
    pub attribute: String,
    /// The comparative for an attribute of one's own ("more empathetic").
    pub adjective: Option<String>,
    /// The whole question instead ("Which story shows more empathy").
    pub question: Option<String>,
    /// `c1`, `c2`, or a template file.
    pub template: String,
    pub task: Task,
    pub item: Option<String>,
    pub context_label: Option<String>,
    pub design: Design,
    pub comparisons: Option<usize>,
    pub rounds: Option<usize>,
    pub round_size: Option<usize>,
    pub stop_when: Option<StopRule>,
    pub seed: u64,
    /// `None`: win ratio, or Product-of-Experts for the adaptive design.
    pub rank: Option<RankMethod>,
    pub debias: Debias,
    pub human_key: Option<String>,
}

impl CompareRequest {
    /// The command line's defaults for `attribute`.
    pub fn new(attribute: &str) -> Self {
        Self {
            attribute: attribute.to_string(),
            adjective: None,
            question: None,
            template: "c1".to_string(),
            task: Task::Summary,
            item: None,
            context_label: None,
            design: Design::Full,
            comparisons: None,
            rounds: None,
            round_size: None,
            stop_when: None,
            seed: 0,
            rank: None,
            debias: Debias::None,
            human_key: None,
        }
    }

    /// The ranking method: the one asked for, else win ratio (Product-of-Experts for the
    /// adaptive design, whose candidates meet different opponents).
    pub fn rank_method(&self) -> RankMethod {
        self.rank.unwrap_or(match self.design {
            Design::Adaptive => RankMethod::Poe,
            _ => RankMethod::WinRatio,
        })
    }

    /// The ranking used instead of the default when the judge cannot be ranked by it:
    /// Product of Experts, when `--rank` is not given and the design has both orders of
    /// its pairs (see [`CompareOptions::rank_fallback`]); a method asked for is kept.
    pub fn rank_fallback(&self) -> Option<RankMethod> {
        (self.rank.is_none() && crate::judge::diagnostics::both_orders(self.design))
            .then_some(RankMethod::Poe)
    }

    /// Relative rubric grading (`compare --rubric`, `/v1/compare` with a `rubric`): the
    /// rubric asks the question. The attribute defaults to the rubric's name (lower
    /// case) and the rubric's criterion is the question; an adjective, a question or a
    /// template of one's own is refused, the rubric naming the criterion. `word` names an
    /// option in the caller's words (`--adjective`, field `adjective`).
    pub fn with_rubric(mut self, rubric: &Rubric, word: impl Fn(&str) -> String) -> Result<Self> {
        for (option, given) in [
            ("adjective", self.adjective.is_some()),
            ("question", self.question.is_some()),
            ("template", self.template != "c1"),
        ] {
            if given {
                bail!(
                    "{} does not apply with {}: the rubric names the criterion",
                    word(option),
                    word("rubric")
                );
            }
        }
        if self.attribute.trim().is_empty() {
            self.attribute = rubric.name.to_lowercase();
        }
        self.question = Some(rubric.criterion.clone());
        Ok(self)
    }

    /// Check the choices and settle the run's options (errors are the caller's input's).
    pub fn options(&self, progress: Progress) -> Result<CompareOptions> {
        let attribute = Attribute::resolve(
            &self.attribute,
            self.adjective.as_deref(),
            self.question.as_deref(),
        )?;
        let nouns = Nouns::resolve(
            self.task,
            self.item.as_deref(),
            self.context_label.as_deref(),
        )?;
        let template = PairwiseTemplate::resolve(&self.template, self.task)?;
        self.design.check_request(self.comparisons)?;
        let adaptive = AdaptiveSettings {
            rounds: self.rounds,
            round_size: self.round_size,
            stop: self.stop_when,
        };
        if self.design == Design::Adaptive {
            adaptive.check(self.comparisons)?;
        } else if adaptive != AdaptiveSettings::default() {
            bail!("--rounds, --round-size and --stop-when apply to --design adaptive only");
        }
        Ok(CompareOptions {
            task: self.task,
            nouns,
            attribute,
            template,
            design: self.design,
            comparisons: self.comparisons,
            adaptive,
            seed: self.seed,
            rank: self.rank_method(),
            rank_fallback: self.rank_fallback(),
            debias: self.debias,
            score_field: self.human_key.clone(),
            progress,
            audience: Default::default(),
            relative: None,
            prior: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_checks_are_the_command_lines() {
        let options = CompareRequest::new("coherence")
            .options(Progress::none())
            .unwrap();
        assert_eq!(options.rank, RankMethod::WinRatio);
        assert_eq!(options.rank_fallback, Some(RankMethod::Poe));
        assert_eq!(options.design, Design::Full);
        let asked = CompareRequest {
            rank: Some(RankMethod::WinRatio),
            ..CompareRequest::new("coherence")
        };
        assert_eq!(asked.options(Progress::none()).unwrap().rank_fallback, None);
        let adaptive = CompareRequest {
            design: Design::Adaptive,
            ..CompareRequest::new("coherence")
        };
        assert_eq!(adaptive.rank_method(), RankMethod::Poe);
        let misplaced = CompareRequest {
            rounds: Some(2),
            ..CompareRequest::new("coherence")
        };
        let error = misplaced.options(Progress::none()).unwrap_err();
        assert!(format!("{error:#}").contains("--design adaptive only"));
        assert!(CompareRequest::new("empathy")
            .options(Progress::none())
            .is_err());
    }
}

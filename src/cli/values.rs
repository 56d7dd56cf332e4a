//! The command line's names for the core's option enums (weight policy, evaluation
//! strategy, task, design, debiasing, ranking, scoring method,
//! experiment, DHP task and method, paraphrase prompt set): clap's `ValueEnum` is implemented here, so that no
//! layer below `cli/` knows clap.

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::arch::WeightPolicy;
use crate::dhp::score::DhpMethod;
use crate::dhp::task::DhpTask;
use crate::engine::Strategy;
use crate::judge::pairwise::{Debias, Design};
use crate::judge::rubric::RubricProtocol;
use crate::judge::{ScoreMethod, Task};
use crate::pararef::prompts::PromptSet;
use crate::rank::RankMethod;
use crate::reproduce::Experiment;

/// `impl ValueEnum for $type`: each variant with its command-line name and help.
macro_rules! command_line_values {
    ($type:ty { $($variant:path => $name:literal: $help:literal),+ $(,)? }) => {
        impl ValueEnum for $type {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($variant),+]
            }

            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(match self {
                    $($variant => PossibleValue::new($name).help($help)),+
                })
            }
        }
    };
}

command_line_values!(WeightPolicy {
    WeightPolicy::Auto => "auto": "Dequantise to f32 on CPU, keep quantized on GPUs",
    WeightPolicy::F32 => "f32": "Dequantise every weight to f32",
    WeightPolicy::Quantized => "quantized":
        "Keep weights quantized where candle has a kernel for their block type",
});

command_line_values!(Strategy {
    Strategy::Tree => "tree": "All prompts of a call in one prefix trie: shared prefixes computed once",
    Strategy::Naive => "naive": "Every prompt on its own (labels of one prompt still share it): the baseline",
});

command_line_values!(Experiment {
    Experiment::Summeval => "summeval": "SummEval summaries: COH, CON, FLU, REL (Tables 1, 5-7; Figures 4-5)",
    Experiment::Topicalchat => "topicalchat": "Topical-Chat responses: COH, CNT, ENG, NAT (Tables 3, 6, 8, 9)",
    Experiment::Webnlg => "webnlg": "WebNLG data-to-text: FLU, GRA, SEM (Tables 4, 6, 8, 9)",
});

command_line_values!(RankMethod {
    RankMethod::WinRatio => "win-ratio": "Fraction of comparisons won, decisions `p > tau` (the papers' default)",
    RankMethod::Soft => "soft": "Mean probability of winning (probabilities instead of decisions)",
    RankMethod::BradleyTerry => "bradley-terry": "Bradley-Terry maximum likelihood on the probabilities",
    RankMethod::Poe => "poe": "Product-of-Experts Gaussian: least squares on logit(p) = s_i - s_j",
});

command_line_values!(Task {
    Task::Summary => "summary": "Summaries of a passage (SummEval)",
    Task::Dialogue => "dialogue": "Responses to a dialogue (Topical-Chat)",
    Task::DataToText => "data-to-text": "Texts verbalising triples (WebNLG)",
    Task::Custom => "custom": "Any other data (the option's text says which nouns)",
});

command_line_values!(Design {
    Design::Full => "full": "All N(N-1) ordered pairs",
    Design::Random => "random": "R ordered pairs drawn without replacement",
    Design::NoRepeat => "no-repeat": "R ordered pairs, never both orders of a pair",
    Design::Symmetric => "symmetric": "R/2 pairs, each in both orders (R even)",
    Design::Adaptive => "adaptive":
        "Pairs chosen in rounds where the fit is least sure of the order, both orders each (R even; see --stop-when)",
});

command_line_values!(Debias {
    Debias::None => "none": "Decide at 0.5; use the probabilities as they are",
    Debias::Threshold => "threshold":
        "Balanced threshold over the run's comparisons (P(A) = 0.5), and the equivalent reweighting of the probabilities for the soft rankings",
});

command_line_values!(ScoreMethod {
    ScoreMethod::Prompt => "prompt": "Ask for a score between 1 and 10; expectation over the score tokens",
    ScoreMethod::Geval => "geval": "G-Eval: criteria, auto chain-of-thought steps, form filling; expectation",
    ScoreMethod::Gptscore => "gptscore": "GPTScore: mean log-likelihood of the candidate given instruction and context",
    ScoreMethod::Rubric => "rubric":
        "Rubric grading in the judge's own format: a feedback generated per candidate (one generation each, not through the prefix trie), then the score read after the result marker; expectation",
});

/// `--protocol NAME|FILE`: a built-in protocol by name, or a protocol file.
pub fn parse_protocol(value: &str) -> Result<RubricProtocol, String> {
    RubricProtocol::resolve(value).map_err(|e| format!("{e:#}"))
}

/// The help of `--protocol`: what it takes, and the built-in protocols with their
/// descriptions.
pub fn protocol_help(what: &str) -> String {
    let builtins: Vec<String> = RubricProtocol::builtins()
        .iter()
        .map(|p| format!("{} ({})", p.name(), p.description()))
        .collect();
    format!(
        "{what}: the judge's protocol, a built-in one by name or a protocol file (TOML, see \
         rubrics/protocols/README.md); default: the model card's, else plain. Built-in: {}",
        builtins.join("; ")
    )
}

command_line_values!(PromptSet {
    PromptSet::Basic => "basic": "\"Paraphrase the sentences: {reference}\" for every paraphrase",
    PromptSet::Diverse => "diverse": "The ten instructions in turn (paraphrase k uses instruction k mod 10)",
});

command_line_values!(DhpMethod {
    DhpMethod::Geval => "geval": "G-Eval: expectation of the score over the scale (the paper's method)",
    DhpMethod::Prompt => "prompt": "Ask for a 1-10 score; expectation",
    DhpMethod::Gptscore => "gptscore": "Mean token log-likelihood of the text",
    DhpMethod::Pairwise => "pairwise": "Probability that the original beats its perturbed copy (both orders)",
});

command_line_values!(DhpTask {
    DhpTask::Summarization => "summarization": "SummEval reference summaries",
    DhpTask::StoryCompletion => "story-completion": "Story Cloze endings",
    DhpTask::Translation => "translation": "WMT22 references (de-en, zh-en)",
    DhpTask::QuestionAnswering => "question-answering":
        "A user's own question-answering JSONL (question, context, answer)",
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are those clap's derive gave (kebab-case variant names), so command
    /// lines and scripts written before keep working.
    #[test]
    fn names_are_the_kebab_case_variant_names() {
        fn names<T: ValueEnum>() -> Vec<String> {
            T::value_variants()
                .iter()
                .map(|v| v.to_possible_value().unwrap().get_name().to_string())
                .collect()
        }
        assert_eq!(names::<WeightPolicy>(), ["auto", "f32", "quantized"]);
        assert_eq!(
            names::<RankMethod>(),
            ["win-ratio", "soft", "bradley-terry", "poe"]
        );
        assert_eq!(
            names::<Task>(),
            ["summary", "dialogue", "data-to-text", "custom"]
        );
        assert_eq!(
            names::<Design>(),
            ["full", "random", "no-repeat", "symmetric", "adaptive"]
        );
        assert_eq!(
            Debias::from_str("threshold", false).unwrap(),
            Debias::Threshold
        );
        assert_eq!(
            ScoreMethod::from_str("gptscore", false).unwrap(),
            ScoreMethod::Gptscore
        );
        // The cards' names: one spelling for `[judge] protocol` and `--protocol`.
        assert_eq!(
            parse_protocol("flow-judge").unwrap(),
            RubricProtocol::flow_judge()
        );
        let error = parse_protocol("nope").unwrap_err();
        assert!(error.contains("prometheus, flow-judge, plain"), "{error}");
    }
}

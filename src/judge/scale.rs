//! Integer score scales read off a model's answer distribution: the shared core of
//! absolute prompt scoring and G-Eval.
//!
//! A scale `low..=high` becomes one label per score. Each label is the number as the
//! model would write it right after the prompt: the tokens are read off the tokenisation
//! of the whole text "prompt + number" (the part after the prompt's own tokens), so a
//! number after "Score:" is " 7" (with the space the tokeniser attaches to it) and after
//! an assistant turn opening ("assistant\n") or at a decoder start it is "7". Multi-digit
//! scores ("10" is two tokens for many tokenisers) are multi-token labels that the engine
//! scores by teacher forcing. Only the prompt's end decides how the number is tokenised
//! (tokens never reach back over hundreds of characters), so the labels are read off the
//! prompt's last [`TAIL_CHARS`] characters: cheap for long prompts, and the same labels
//! for every candidate of a run.
//!
//! A shorter score can be a token prefix of a longer one ("1" of "10"): `P("1")` then also
//! counts every answer that goes on to "10". The distribution therefore uses each score's
//! *exclusive* probability, `P("1") - P("10") - ...` (the probability of the score's
//! tokens not followed by a longer score of the scale); on scales without such prefixes
//! (1-5) it is the plain label probability.

use anyhow::{bail, ensure, Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::engine::{LabelResult, ModelKind, Prompt, Scorer, TextPrompt, TokenPrompt};

/// Most scores one scale may have (each is a label the model scores).
pub const MAX_SCALE_SIZE: usize = 101;

/// An inclusive integer score range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "[i64; 2]", into = "[i64; 2]")]
pub struct ScoreScale {
    low: i64,
    high: i64,
}

impl ScoreScale {
    /// `low..=high`; needs `low < high` and at most [`MAX_SCALE_SIZE`] scores.
    pub fn new(low: i64, high: i64) -> Result<Self> {
        ensure!(
            low < high,
            "a score scale needs low < high, got [{low}, {high}]"
        );
        let size = high.checked_sub(low).and_then(|d| d.checked_add(1));
        ensure!(
            size.is_some_and(|s| s <= MAX_SCALE_SIZE as i64),
            "the score scale [{low}, {high}] has more than {MAX_SCALE_SIZE} scores"
        );
        Ok(Self { low, high })
    }

    /// `low..=high` in constant expressions; `None` where [`ScoreScale::new`] fails.
    pub const fn const_new(low: i64, high: i64) -> Option<Self> {
        if low < high && (high as i128 - low as i128) < MAX_SCALE_SIZE as i128 {
            Some(Self { low, high })
        } else {
            None
        }
    }

    pub fn low(self) -> i64 {
        self.low
    }

    pub fn high(self) -> i64 {
        self.high
    }

    /// The scores, lowest first.
    pub fn scores(self) -> Vec<i64> {
        (self.low..=self.high).collect()
    }

    /// Parse "1-5", "1..5", "0-1" (also "-2..2").
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim();
        let parsed = text.split_once("..").or_else(|| {
            // The separating dash is the first one after the first character, so that a
            // negative low end ("-2-2") keeps its sign.
            text.char_indices()
                .skip(1)
                .find(|&(_, c)| c == '-')
                .map(|(at, _)| (&text[..at], &text[at + 1..]))
        });
        let (low, high) =
            parsed.with_context(|| format!("score scale `{text}`: expected LOW-HIGH, e.g. 1-5"))?;
        let number = |part: &str| {
            part.trim()
                .parse::<i64>()
                .with_context(|| format!("score scale `{text}`: `{part}` is not an integer"))
        };
        Self::new(number(low)?, number(high)?)
    }
}

impl TryFrom<[i64; 2]> for ScoreScale {
    type Error = anyhow::Error;

    fn try_from([low, high]: [i64; 2]) -> Result<Self> {
        Self::new(low, high)
    }
}

impl From<ScoreScale> for [i64; 2] {
    fn from(scale: ScoreScale) -> Self {
        [scale.low, scale.high]
    }
}

impl std::fmt::Display for ScoreScale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.low, self.high)
    }
}

/// How many characters of the user text's end are kept when deriving score labels.
pub const TAIL_CHARS: usize = 256;

/// `prompt` with its user text cut to about its last [`TAIL_CHARS`] characters, from a
/// whitespace on.
fn tail_of(prompt: &TextPrompt) -> TextPrompt {
    let user = &prompt.user;
    if user.len() <= TAIL_CHARS {
        return prompt.clone();
    }
    let mut start = user.len() - TAIL_CHARS;
    while !user.is_char_boundary(start) {
        start += 1;
    }
    if let Some(space) = user[start..].find(char::is_whitespace) {
        start += space;
    }
    TextPrompt {
        system: prompt.system.clone(),
        user: user[start..].to_string(),
        answer_prefix: prompt.answer_prefix.clone(),
    }
}

/// The text that precedes a label scored after `prompt`, as the model reads it.
fn text_before_label(scorer: &dyn Scorer, prompt: &Prompt) -> Result<String> {
    let rendered = scorer.render(prompt)?;
    Ok(match scorer.info().kind {
        // The labels follow the decoder start token and the decoder prefix.
        ModelKind::EncoderDecoder => rendered.decoder_prefix,
        ModelKind::DecoderOnly => rendered.input + &rendered.decoder_prefix,
        ModelKind::EncoderOnly => anyhow::bail!("an encoder-only model scores no labels"),
    })
}

/// The tokens `full` adds after `base`, when `base` is a prefix of it.
fn added_tokens(base: &TokenPrompt, full: &TokenPrompt) -> Option<Vec<u32>> {
    if base.decoder_prefix.is_empty() && full.decoder_prefix.is_empty() {
        full.input
            .strip_prefix(base.input.as_slice())
            .map(<[u32]>::to_vec)
    } else if base.input == full.input {
        full.decoder_prefix
            .strip_prefix(base.decoder_prefix.as_slice())
            .map(<[u32]>::to_vec)
    } else {
        None
    }
}

/// Token ids of each score of `scale` written right after `prompt` (see the module
/// header), lowest score first. The prompt's answer prefix is where the number goes; a
/// space separates it from the number unless the prompt ends in whitespace.
pub fn score_label_tokens(
    scorer: &dyn Scorer,
    prompt: &TextPrompt,
    chat: bool,
    scale: ScoreScale,
) -> Result<Vec<Vec<u32>>> {
    label_tokens(scorer, prompt, chat, scale, None)
}

/// [`score_label_tokens`] with the numbers written `separator` after the prompt (`""`:
/// right after it, as after a result marker such as `<score>`).
pub fn score_label_tokens_after(
    scorer: &dyn Scorer,
    prompt: &TextPrompt,
    chat: bool,
    scale: ScoreScale,
    separator: &str,
) -> Result<Vec<Vec<u32>>> {
    label_tokens(scorer, prompt, chat, scale, Some(separator))
}

fn label_tokens(
    scorer: &dyn Scorer,
    prompt: &TextPrompt,
    chat: bool,
    scale: ScoreScale,
    separator: Option<&str>,
) -> Result<Vec<Vec<u32>>> {
    let words: Vec<String> = scale.scores().iter().map(|s| s.to_string()).collect();
    words_label_tokens(scorer, prompt, chat, &words, separator).map_err(|clash| match clash {
        LabelClash::Same(i, j, tokens) => anyhow::anyhow!(
            "scores {} and {} have the same tokens {tokens:?}",
            scale.low + i as i64,
            scale.low + j as i64
        ),
        LabelClash::Other(error) => error,
    })
}

/// The token ids of each of `words` as the model would write it `separator` after the
/// prompt's answer so far (`""`: right after it, as after a result marker such as
/// `[RESULT] `): the tokens the words add to the prompt's own, or the word encoded alone
/// where it merges with the prompt's last token. Two words with the same tokens are an
/// error naming both.
pub fn text_label_tokens_after(
    scorer: &dyn Scorer,
    prompt: &TextPrompt,
    chat: bool,
    words: &[&str],
    separator: &str,
) -> Result<Vec<Vec<u32>>> {
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    words_label_tokens(scorer, prompt, chat, &words, Some(separator)).map_err(|clash| match clash {
        LabelClash::Same(i, j, tokens) => anyhow::anyhow!(
            "the labels {:?} and {:?} have the same tokens {tokens:?}",
            words[i],
            words[j]
        ),
        LabelClash::Other(error) => error,
    })
}

/// Why label words could not be told apart.
enum LabelClash {
    /// Words `.0` and `.1` have the same tokens.
    Same(usize, usize, Vec<u32>),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for LabelClash {
    fn from(error: anyhow::Error) -> Self {
        LabelClash::Other(error)
    }
}

fn words_label_tokens(
    scorer: &dyn Scorer,
    prompt: &TextPrompt,
    chat: bool,
    words: &[String],
    separator: Option<&str>,
) -> std::result::Result<Vec<Vec<u32>>, LabelClash> {
    let prompt = &tail_of(prompt);
    let wrap = |text: TextPrompt| {
        if chat {
            Prompt::chat(text)
        } else {
            Prompt::plain(text)
        }
    };
    let base_prompt = wrap(prompt.clone());
    let space = match separator {
        Some(separator) => separator,
        None => match text_before_label(scorer, &base_prompt)?.chars().last() {
            None => "",
            Some(c) if c.is_whitespace() => "",
            Some(_) => " ",
        },
    };
    let base = scorer.encode_prompt(&base_prompt)?;
    let mut labels = Vec::with_capacity(words.len());
    for word in words {
        let written = format!("{space}{word}");
        let mut full_text = prompt.clone();
        full_text.answer_prefix.push_str(&written);
        let full = scorer.encode_prompt(&wrap(full_text))?;
        let tokens = match added_tokens(&base, &full) {
            Some(tokens) if !tokens.is_empty() => tokens,
            _ => {
                // The word merged with the prompt's last token: score it as the
                // tokeniser writes the word on its own.
                tracing::debug!(
                    word,
                    "label does not extend the prompt's tokens; encoding it alone"
                );
                scorer.encode_label(&crate::engine::Label::Text(written.clone()))?
            }
        };
        labels.push(tokens);
    }
    for (i, a) in labels.iter().enumerate() {
        if let Some(j) = labels[i + 1..].iter().position(|b| b == a) {
            return Err(LabelClash::Same(i, i + 1 + j, a.clone()));
        }
    }
    Ok(labels)
}

/// The model's answer distribution over a scale's scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreDistribution {
    /// The scores, lowest first.
    pub scores: Vec<i64>,
    /// P(score) as the model gives it (exclusive of longer scores sharing its tokens).
    pub raw: Vec<f64>,
    /// `raw` renormalised over the scale: sums to 1.
    pub normalised: Vec<f64>,
    /// `sum_s s * normalised(s)`.
    pub expectation: f64,
    /// The most probable score (the lowest one on ties).
    pub argmax: i64,
    /// `sum raw`: how much of the model's probability the scale received.
    pub mass: f64,
}

impl ScoreDistribution {
    /// The distribution from a label result whose labels are the scale's scores in
    /// order (as built by [`score_label_tokens`]).
    pub fn from_result(scale: ScoreScale, result: &LabelResult) -> Result<Self> {
        let scores = scale.scores();
        ensure!(
            result.labels.len() == scores.len(),
            "expected {} score labels for the scale {scale}, got {}",
            scores.len(),
            result.labels.len()
        );
        let logprobs: Vec<f64> = result.labels.iter().map(|l| l.logprob).collect();
        let top = logprobs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !top.is_finite() {
            bail!("every score of the scale {scale} got zero probability (log-probs {logprobs:?})");
        }
        // Probabilities relative to the largest one, so that tiny masses do not underflow.
        let relative: Vec<f64> = logprobs.iter().map(|l| (l - top).exp()).collect();
        let tokens: Vec<&[u32]> = result.labels.iter().map(|l| l.tokens.as_slice()).collect();
        let mut exclusive = relative.clone();
        for (i, own) in tokens.iter().enumerate() {
            for (j, other) in tokens.iter().enumerate() {
                let extends = other.len() > own.len() && other.starts_with(own);
                // Only the nearest longer scores: deeper ones are inside them already.
                let nearest = extends
                    && !tokens.iter().any(|middle| {
                        middle.len() > own.len()
                            && middle.len() < other.len()
                            && middle.starts_with(own)
                            && other.starts_with(middle)
                    });
                if nearest {
                    exclusive[i] -= relative[j];
                }
            }
            exclusive[i] = exclusive[i].max(0.0);
        }
        let total: f64 = exclusive.iter().sum();
        if total <= 0.0 || !total.is_finite() {
            bail!("the scores of the scale {scale} have no probability left once longer scores are taken out");
        }
        let normalised: Vec<f64> = exclusive.iter().map(|p| p / total).collect();
        let scale_top = top.exp();
        let raw: Vec<f64> = exclusive.iter().map(|p| p * scale_top).collect();
        let expectation = scores
            .iter()
            .zip(&normalised)
            .map(|(&s, &p)| s as f64 * p)
            .sum();
        let mut best = 0;
        for (k, &p) in normalised.iter().enumerate() {
            if p > normalised[best] {
                best = k;
            }
        }
        Ok(Self {
            argmax: scores[best],
            mass: raw.iter().sum(),
            scores,
            raw,
            normalised,
            expectation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::LabelScore;

    fn result(labels: &[(&[u32], f64)]) -> LabelResult {
        LabelResult {
            labels: labels
                .iter()
                .map(|&(tokens, p)| LabelScore {
                    tokens: tokens.to_vec(),
                    logprob: p.ln(),
                })
                .collect(),
            prompt_tokens: 1,
        }
    }

    #[test]
    fn expectation_over_a_scale_without_shared_prefixes() {
        let scale = ScoreScale::new(1, 3).unwrap();
        let d = ScoreDistribution::from_result(
            scale,
            &result(&[(&[1], 0.1), (&[2], 0.2), (&[3], 0.1)]),
        )
        .unwrap();
        assert!((d.mass - 0.4).abs() < 1e-12);
        assert!((d.normalised[1] - 0.5).abs() < 1e-12);
        assert!((d.raw[2] - 0.1).abs() < 1e-12);
        // 1 * 0.25 + 2 * 0.5 + 3 * 0.25
        assert!((d.expectation - 2.0).abs() < 1e-12);
        assert_eq!(d.argmax, 2);
    }

    #[test]
    fn a_score_that_prefixes_a_longer_one_loses_the_longer_ones_mass() {
        // "1" = [5], "10" = [5, 4], "2" = [6]: P("1") = 0.5 counts "10" (0.3) too.
        let scale = ScoreScale::new(1, 3).unwrap();
        let d = ScoreDistribution::from_result(
            scale,
            &result(&[(&[5], 0.5), (&[6], 0.1), (&[5, 4], 0.3)]),
        )
        .unwrap();
        assert!((d.raw[0] - 0.2).abs() < 1e-12, "{:?}", d.raw);
        assert!((d.raw[2] - 0.3).abs() < 1e-12);
        assert!((d.mass - 0.6).abs() < 1e-12);
        assert!((d.expectation - (0.2 + 0.2 + 0.9) / 0.6).abs() < 1e-12);
    }

    #[test]
    fn nested_prefixes_subtract_only_the_nearest_longer_score() {
        // [1] < [1,0] < [1,0,0]: P([1]) excludes P([1,0]) which already holds [1,0,0].
        let scale = ScoreScale::new(1, 3).unwrap();
        let d = ScoreDistribution::from_result(
            scale,
            &result(&[(&[1], 0.6), (&[1, 0], 0.4), (&[1, 0, 0], 0.1)]),
        )
        .unwrap();
        let expected = [0.2, 0.3, 0.1];
        for (got, want) in d.raw.iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{:?}", d.raw);
        }
    }

    #[test]
    fn tiny_probabilities_still_normalise() {
        let scale = ScoreScale::new(0, 1).unwrap();
        let mut r = result(&[(&[1], 1.0), (&[2], 1.0)]);
        r.labels[0].logprob = -1000.0;
        r.labels[1].logprob = -1000.0 - 3f64.ln();
        let d = ScoreDistribution::from_result(scale, &r).unwrap();
        assert!((d.normalised[0] - 0.75).abs() < 1e-12);
        assert_eq!(d.mass, 0.0);
        assert!((d.expectation - 0.25).abs() < 1e-12);
    }

    #[test]
    fn zero_mass_and_wrong_label_counts_are_errors() {
        let scale = ScoreScale::new(1, 2).unwrap();
        let mut r = result(&[(&[1], 1.0), (&[2], 1.0)]);
        r.labels[0].logprob = f64::NEG_INFINITY;
        r.labels[1].logprob = f64::NEG_INFINITY;
        assert!(ScoreDistribution::from_result(scale, &r).is_err());
        r.labels.pop();
        let error = ScoreDistribution::from_result(scale, &r)
            .unwrap_err()
            .to_string();
        assert!(error.contains("expected 2 score labels"), "{error}");
    }

    #[test]
    fn long_prompts_are_cut_to_their_tail_at_a_word_boundary() {
        let mut prompt = TextPrompt::user(format!("{}end: é", "wörd ".repeat(100)));
        prompt.system = Some("sys".into());
        prompt.answer_prefix = "Score".into();
        let tail = tail_of(&prompt);
        assert!(tail.user.len() <= TAIL_CHARS && tail.user.len() > TAIL_CHARS - 10);
        assert!(tail.user.starts_with(' ') && tail.user.ends_with("wörd end: é"));
        assert!(prompt.user.ends_with(&tail.user));
        assert_eq!(
            (tail.system, tail.answer_prefix),
            (prompt.system, prompt.answer_prefix)
        );
        let short = TextPrompt::user("Score:");
        assert_eq!(tail_of(&short), short);
    }

    #[test]
    fn scales_parse_and_validate() {
        assert_eq!(
            ScoreScale::parse("1-5").unwrap(),
            ScoreScale::new(1, 5).unwrap()
        );
        assert_eq!(ScoreScale::parse(" 0..1 ").unwrap().scores(), vec![0, 1]);
        assert_eq!(ScoreScale::parse("-2-2").unwrap().scores().len(), 5);
        assert!(ScoreScale::parse("5-1")
            .unwrap_err()
            .to_string()
            .contains("low < high"));
        assert!(ScoreScale::parse("1-x")
            .unwrap_err()
            .to_string()
            .contains("`x`"));
        assert!(ScoreScale::parse("7").is_err());
        assert!(ScoreScale::new(0, 1000).is_err());
        let scale: ScoreScale = serde_json::from_str("[1, 10]").unwrap();
        assert_eq!(scale.to_string(), "1-10");
        assert!(serde_json::from_str::<ScoreScale>("[3, 3]").is_err());
    }
}

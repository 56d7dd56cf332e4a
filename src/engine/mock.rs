//! A scripted [`Scorer`] for testing methods without a model.
//!
//! The mock renders prompts the way a decoder-only model without chat template would
//! (user text, then the answer prefix; with `chat`, simple tags around the turns),
//! "tokenises" text as one id per byte, and answers every request from closures the test
//! provides. It counts the calls so that tests can assert caching and reuse.
//!
//! [`MockScorer::from_spec`] makes one from a model name, `mock[:key=value,...]`, so that
//! the service can be exercised without weights (`nlg-judge serve --model mock`): load
//! tests of the service itself, client integration, fault drills. Its answers are not
//! judgements. Keys: `delay-ms` (each model call sleeps this long), `panic-on` (a call
//! whose prompt contains this text panics, to drill the service's panic handling).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{bail, Result};

use super::completion::{CompletionRequest, CompletionResult, TokenLogprob};
use super::decoder::prefix_cache::PrefixCache;
use super::generation::{one_at_a_time, unscored, GenerationSink};
use super::request::{
    ContinuationRequest, ContinuationResult, FinishReason, Generation, Label, LabelRequest,
    LabelResult, LabelScore, Prompt, TokenPrompt,
};
use super::scorer::{Conventions, ModelInfo, ModelKind, RenderedPrompt, Scorer};

/// `(rendered prompt text, label texts) -> log-prob per label`.
pub type LabelScript = Box<dyn FnMut(&str, &[String]) -> Result<Vec<f64>> + Send>;
/// `(rendered prompt text, continuation) -> log-prob per continuation byte`.
pub type ContinuationScript = Box<dyn FnMut(&str, &str) -> Result<Vec<f64>> + Send>;
/// `(rendered prompt text) -> generated text`.
pub type GenerationScript = Box<dyn FnMut(&str) -> Result<String> + Send>;

/// Call counters shared with the test (clone before moving the mock away).
#[derive(Debug, Clone, Default)]
pub struct MockCalls {
    /// Scorer calls for labels (one call may carry many requests).
    pub label_calls: Arc<AtomicUsize>,
    pub label_requests: Arc<AtomicUsize>,
    pub continuation_requests: Arc<AtomicUsize>,
    pub generations: Arc<AtomicUsize>,
}

impl MockCalls {
    pub fn labels(&self) -> usize {
        self.label_requests.load(Ordering::SeqCst)
    }
    pub fn label_calls(&self) -> usize {
        self.label_calls.load(Ordering::SeqCst)
    }
    pub fn continuations(&self) -> usize {
        self.continuation_requests.load(Ordering::SeqCst)
    }
    pub fn generations(&self) -> usize {
        self.generations.load(Ordering::SeqCst)
    }
}

/// A scorer whose answers come from closures.
pub struct MockScorer {
    info: ModelInfo,
    labels: LabelScript,
    continuation: ContinuationScript,
    generation: GenerationScript,
    calls: MockCalls,
}

impl MockScorer {
    /// A mock that gives every label log-prob `ln(0.5)`, every continuation byte
    /// log-prob `-1`, and generates an empty string. Replace the answers with the
    /// `with_*` methods.
    pub fn new() -> Self {
        Self {
            info: ModelInfo {
                name: "mock".to_string(),
                architecture: "mock".to_string(),
                kind: ModelKind::DecoderOnly,
                fingerprint: "mock".to_string(),
                context_window: 1 << 20,
                conventions: Conventions::default(),
            },
            labels: Box::new(|_, labels| Ok(vec![(0.5f64).ln(); labels.len()])),
            continuation: Box::new(|_, text| Ok(vec![-1.0; text.len()])),
            generation: Box::new(|_| Ok(String::new())),
            calls: MockCalls::default(),
        }
    }

    pub fn with_info(mut self, info: ModelInfo) -> Self {
        self.info = info;
        self
    }

    pub fn with_conventions(mut self, conventions: Conventions) -> Self {
        self.info.conventions = conventions;
        self
    }

    pub fn with_labels(
        mut self,
        script: impl FnMut(&str, &[String]) -> Result<Vec<f64>> + Send + 'static,
    ) -> Self {
        self.labels = Box::new(script);
        self
    }

    pub fn with_continuation(
        mut self,
        script: impl FnMut(&str, &str) -> Result<Vec<f64>> + Send + 'static,
    ) -> Self {
        self.continuation = Box::new(script);
        self
    }

    pub fn with_generation(
        mut self,
        script: impl FnMut(&str) -> Result<String> + Send + 'static,
    ) -> Self {
        self.generation = Box::new(script);
        self
    }

    /// A mock from a model name `mock[:key=value,...]` (see the module header); `None`
    /// when `name` is not a mock's.
    pub fn from_spec(name: &str) -> Result<Option<Self>> {
        let options = match name.strip_prefix("mock") {
            Some("") => "",
            Some(rest) => match rest.strip_prefix(':') {
                Some(options) => options,
                None => return Ok(None),
            },
            None => return Ok(None),
        };
        let mut delay = std::time::Duration::ZERO;
        let mut panic_on: Option<String> = None;
        for option in options.split(',').filter(|o| !o.is_empty()) {
            let (key, value) = option
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("mock model option `{option}` is not key=value"))?;
            match key {
                "delay-ms" => {
                    let ms: u64 = value.parse().map_err(|_| {
                        anyhow::anyhow!("mock model: delay-ms `{value}` is not a whole number")
                    })?;
                    delay = std::time::Duration::from_millis(ms);
                }
                "panic-on" if !value.is_empty() => panic_on = Some(value.to_string()),
                _ => bail!(
                    "mock model: unknown option `{option}` (known: delay-ms=N, panic-on=TEXT)"
                ),
            }
        }
        let check = move |prompt: &str| {
            if let Some(text) = &panic_on {
                if prompt.contains(text.as_str()) {
                    panic!("mock model: the prompt contains `{text}`");
                }
            }
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
        };
        let (on_label, on_continuation, on_generation) = (check.clone(), check.clone(), check);
        Ok(Some(
            Self::new()
                .with_labels(move |prompt, labels| {
                    on_label(prompt);
                    Ok(vec![(1.0 / labels.len().max(1) as f64).ln(); labels.len()])
                })
                .with_continuation(move |prompt, text| {
                    on_continuation(prompt);
                    Ok(vec![-1.0; text.len()])
                })
                .with_generation(move |prompt| {
                    on_generation(prompt);
                    Ok(" 1. Read the text.\n2. Rate it.".to_string())
                }),
        ))
    }

    /// The call counters (shared: keep a clone before handing the mock away).
    pub fn calls(&self) -> MockCalls {
        self.calls.clone()
    }

    fn text_of(&self, prompt: &Prompt) -> Result<String> {
        let rendered = self.render(prompt)?;
        Ok(rendered.input + &rendered.decoder_prefix)
    }

    fn label_text(label: &Label) -> Result<String> {
        match label {
            Label::Text(text) if text.is_empty() => bail!("empty label"),
            Label::Text(text) => Ok(text.clone()),
            Label::Tokens(ids) if ids.is_empty() => bail!("empty label"),
            Label::Tokens(ids) => bytes_to_text(ids),
        }
    }
}

impl Default for MockScorer {
    fn default() -> Self {
        Self::new()
    }
}

fn bytes_to_text(ids: &[u32]) -> Result<String> {
    let bytes = ids
        .iter()
        .map(|&id| {
            u8::try_from(id).map_err(|_| anyhow::anyhow!("mock token id {id} is not a byte"))
        })
        .collect::<Result<Vec<u8>>>()?;
    Ok(String::from_utf8(bytes)?)
}

impl Scorer for MockScorer {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt> {
        match prompt {
            Prompt::Text { text, chat } => {
                let input = if *chat {
                    let system = text
                        .system
                        .as_ref()
                        .map(|s| format!("<system>{s}</system>"))
                        .unwrap_or_default();
                    format!(
                        "{system}<user>{}</user><assistant>{}",
                        text.user, text.answer_prefix
                    )
                } else {
                    format!("{}{}", text.user, text.answer_prefix)
                };
                Ok(RenderedPrompt {
                    input,
                    decoder_prefix: String::new(),
                })
            }
            Prompt::Tokens(tokens) => Ok(RenderedPrompt {
                input: bytes_to_text(&tokens.input)?,
                decoder_prefix: bytes_to_text(&tokens.decoder_prefix)?,
            }),
        }
    }

    fn encode_prompt(&self, prompt: &Prompt) -> Result<TokenPrompt> {
        match prompt {
            Prompt::Tokens(tokens) => Ok(tokens.clone()),
            Prompt::Text { .. } => {
                let rendered = self.render(prompt)?;
                Ok(TokenPrompt {
                    input: rendered.input.bytes().map(u32::from).collect(),
                    decoder_prefix: vec![],
                })
            }
        }
    }

    fn encode_label(&self, label: &Label) -> Result<Vec<u32>> {
        Ok(Self::label_text(label)?.bytes().map(u32::from).collect())
    }

    fn label_logprobs_each(
        &mut self,
        requests: &[LabelRequest],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        self.calls.label_calls.fetch_add(1, Ordering::SeqCst);
        for (index, request) in requests.iter().enumerate() {
            let text = self.text_of(&request.prompt)?;
            let label_texts = request
                .labels
                .iter()
                .map(Self::label_text)
                .collect::<Result<Vec<_>>>()?;
            self.calls.label_requests.fetch_add(1, Ordering::SeqCst);
            let logprobs = (self.labels)(&text, &label_texts)?;
            if logprobs.len() != label_texts.len() {
                bail!(
                    "mock label script returned {} log-probs for {} labels",
                    logprobs.len(),
                    label_texts.len()
                );
            }
            let labels = label_texts
                .iter()
                .zip(logprobs)
                .map(|(label, logprob)| LabelScore {
                    tokens: label.bytes().map(u32::from).collect(),
                    logprob,
                })
                .collect();
            on_result(
                index,
                LabelResult {
                    labels,
                    prompt_tokens: text.len(),
                },
            )?;
        }
        Ok(())
    }

    fn continuation_logprobs(
        &mut self,
        requests: &[ContinuationRequest],
    ) -> Result<Vec<ContinuationResult>> {
        requests
            .iter()
            .map(|request| {
                let text = self.text_of(&request.prompt)?;
                self.calls
                    .continuation_requests
                    .fetch_add(1, Ordering::SeqCst);
                let token_logprobs = (self.continuation)(&text, &request.continuation)?;
                Ok(ContinuationResult {
                    tokens: request.continuation.bytes().map(u32::from).collect(),
                    token_logprobs,
                })
            })
            .collect()
    }

    fn generate_each(
        &mut self,
        requests: &[CompletionRequest],
        _prefix_cache: &mut PrefixCache,
        sink: &mut dyn GenerationSink,
    ) -> Result<()> {
        for (index, request) in requests.iter().enumerate() {
            if request.prompt_logprobs || request.logprobs {
                crate::bad_request!(
                    "completion {index}: model '{}' (a scripted mock) gives no token \
                     log-probabilities",
                    self.info.name
                );
            }
            if request.allowed_tokens.is_some() {
                crate::bad_request!(
                    "completion {index}: model '{}' (a scripted mock) does not restrict \
                     generation to allowed tokens",
                    self.info.name
                );
            }
        }
        one_at_a_time(
            self,
            requests.len(),
            &mut |mock, index| {
                let request = &requests[index];
                let prompt = mock.encode_prompt(&request.prompt)?.input;
                let generation = match request.max_tokens {
                    0 => Generation {
                        text: String::new(),
                        tokens: Vec::new(),
                        finish: FinishReason::MaxTokens,
                    },
                    _ => mock.generate_one(request)?,
                };
                let mut generated: Vec<TokenLogprob> = generation
                    .tokens
                    .iter()
                    .map(|&id| unscored(id, vec![id as u8]))
                    .collect();
                if generation.finish == FinishReason::EndOfSequence {
                    generated.push(unscored(MOCK_EOS, Vec::new()));
                }
                Ok(CompletionResult {
                    prompt: prompt
                        .iter()
                        .map(|&id| unscored(id, vec![id as u8]))
                        .collect(),
                    generated,
                    text: generation.text,
                    finish: generation.finish,
                    cached_prompt_tokens: 0,
                })
            },
            sink,
        )
    }
}

/// The id the mock's generations end with (outside its byte vocabulary).
const MOCK_EOS: u32 = 256;

impl MockScorer {
    /// One scripted generation: the script's text, cut before the first stop string and
    /// at `max_tokens` bytes.
    fn generate_one(&mut self, request: &CompletionRequest) -> Result<Generation> {
        let text = self.text_of(&request.prompt)?;
        self.calls.generations.fetch_add(1, Ordering::SeqCst);
        let mut output = (self.generation)(&text)?;
        let mut finish = FinishReason::EndOfSequence;
        if let Some(cut) = request
            .stop
            .iter()
            .filter_map(|stop| output.find(stop.as_str()))
            .min()
        {
            output.truncate(cut);
            finish = FinishReason::Stop;
        }
        if output.len() > request.max_tokens {
            let mut end = request.max_tokens;
            while !output.is_char_boundary(end) {
                end -= 1;
            }
            output.truncate(end);
            finish = FinishReason::MaxTokens;
        }
        Ok(Generation {
            tokens: output.bytes().map(u32::from).collect(),
            text: output,
            finish,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::request::{GenerationRequest, Sampling, TextPrompt};
    use crate::engine::Generate;

    #[test]
    fn scripted_labels_reach_the_caller_and_are_counted() {
        let mut mock = MockScorer::new().with_labels(|text, labels| {
            assert!(text.ends_with("Answer"));
            Ok(labels
                .iter()
                .map(|l| {
                    if l == " A" {
                        (0.3f64).ln()
                    } else {
                        (0.1f64).ln()
                    }
                })
                .collect())
        });
        let calls = mock.calls();
        let request = LabelRequest {
            prompt: Prompt::plain(TextPrompt::user("Q?").with_answer_prefix(" Answer")),
            labels: vec![" A".into(), " B".into()],
        };
        let results = mock.label_logprobs(&[request.clone(), request]).unwrap();
        assert_eq!(calls.labels(), 2);
        let p = results[0].normalised();
        assert!((p[0] - 0.75).abs() < 1e-12);
    }

    #[test]
    fn mock_specs_are_read_and_checked() {
        assert!(MockScorer::from_spec("smollm2-135m-instruct")
            .unwrap()
            .is_none());
        assert!(MockScorer::from_spec("mockingbird").unwrap().is_none());
        assert!(MockScorer::from_spec("mock").unwrap().is_some());
        assert!(MockScorer::from_spec("mock:delay-ms=1,panic-on=BOOM")
            .unwrap()
            .is_some());
        for bad in ["mock:delay-ms=x", "mock:colour=red", "mock:delay-ms"] {
            assert!(MockScorer::from_spec(bad).is_err(), "{bad}");
        }
        let mut mock = MockScorer::from_spec("mock:panic-on=BOOM")
            .unwrap()
            .unwrap();
        let request = |text: &str| LabelRequest {
            prompt: Prompt::plain(TextPrompt::user(text)),
            labels: vec![" 1".into(), " 2".into()],
        };
        let fine = mock.label_logprobs(&[request("calm")]).unwrap();
        assert!((fine[0].normalised()[0] - 0.5).abs() < 1e-12);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mock.label_logprobs(&[request("a BOOM here")])
        }));
        assert!(panicked.is_err());
    }

    #[test]
    fn empty_label_is_an_error() {
        let mut mock = MockScorer::new();
        let request = LabelRequest {
            prompt: Prompt::plain(TextPrompt::user("Q?")),
            labels: vec!["".into()],
        };
        assert!(mock.label_logprobs(&[request]).is_err());
    }

    #[test]
    fn generation_honours_stop_strings_and_max_tokens() {
        let mut mock = MockScorer::new().with_generation(|_| Ok("one two\nthree".to_string()));
        let mut request = GenerationRequest {
            prompt: Prompt::plain(TextPrompt::user("go")),
            max_tokens: 100,
            sampling: Sampling::Greedy,
            stop: vec!["\n".to_string()],
        };
        let out = mock.generate(&request).unwrap();
        assert_eq!(out.text, "one two");
        assert_eq!(out.finish, FinishReason::Stop);
        request.stop.clear();
        request.max_tokens = 3;
        let out = mock.generate(&request).unwrap();
        assert_eq!(out.text, "one");
        assert_eq!(out.finish, FinishReason::MaxTokens);
    }
}

//! Absolute scoring with the real SmolLM2-135M-Instruct: score labels as the tokeniser
//! writes the numbers after the prompt, multi-token scores by teacher forcing, and G-Eval
//! on SummEval summaries with its evaluation steps generated once (written again while
//! degenerate) and then reused.
//!
//! Token ids in `number_labels_are_the_numbers_tokens_in_the_full_text` come from the
//! transformers tokenizer of the same GGUF (`AutoTokenizer.from_pretrained(dir,
//! gguf_file=...)`): "Score: 10" -> [..., ":" 42, "Ġ" 216, "1" 33, "0" 32],
//! "assistant\n10" -> [..., "Ċ" 198, "1" 33, "0" 32], " 7" -> [216, 39].

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use nlg_judge::data::{group_contexts, summeval, Context};
use nlg_judge::engine::{load_scorer, LoadOptions};
use nlg_judge::engine::{
    CompletionRequest, ContinuationRequest, ContinuationResult, GenerationSink, Label,
    LabelRequest, LabelResult, ModelInfo, PrefixCache, Prompt, RenderedPrompt, ResultCache, Scorer,
    TextPrompt, TokenPrompt,
};
use nlg_judge::judge::geval::StepsOrigin;
use nlg_judge::judge::scale::score_label_tokens;
use nlg_judge::judge::{
    absolute, resolve_method, run_scoring, ResolvedMethod, ScoreMethod, ScoreOptions, Task,
};
use nlg_judge::runtime::{load_tokenizer, resolve_model};

const CARD: &str = "smollm2-135m-instruct";

fn smollm2_scorer() -> Box<dyn Scorer> {
    common::card_file(CARD);
    let mut options = LoadOptions::from_env().expect("load options");
    options.device = "cpu".to_string();
    load_scorer(CARD, &options).expect("SmolLM2 loads")
}

/// A scorer that counts the generation and label requests it passes on.
struct Counting {
    inner: Box<dyn Scorer>,
    generations: Arc<AtomicUsize>,
    label_requests: Arc<AtomicUsize>,
}

impl Counting {
    fn new(inner: Box<dyn Scorer>) -> Self {
        Self {
            inner,
            generations: Arc::default(),
            label_requests: Arc::default(),
        }
    }
}

impl Scorer for Counting {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt> {
        self.inner.render(prompt)
    }
    fn encode_prompt(&self, prompt: &Prompt) -> Result<TokenPrompt> {
        self.inner.encode_prompt(prompt)
    }
    fn encode_label(&self, label: &Label) -> Result<Vec<u32>> {
        self.inner.encode_label(label)
    }
    fn label_logprobs_each(
        &mut self,
        requests: &[LabelRequest],
        on_result: &mut dyn FnMut(usize, LabelResult) -> Result<()>,
    ) -> Result<()> {
        self.label_requests
            .fetch_add(requests.len(), Ordering::SeqCst);
        self.inner.label_logprobs_each(requests, on_result)
    }
    fn continuation_logprobs(
        &mut self,
        requests: &[ContinuationRequest],
    ) -> Result<Vec<ContinuationResult>> {
        self.inner.continuation_logprobs(requests)
    }
    fn generate_each(
        &mut self,
        requests: &[CompletionRequest],
        cache: &mut PrefixCache,
        sink: &mut dyn GenerationSink,
    ) -> Result<()> {
        let generating = requests.iter().filter(|r| r.max_tokens > 0).count();
        self.generations.fetch_add(generating, Ordering::SeqCst);
        self.inner.generate_each(requests, cache, sink)
    }
}

fn label_ids(request: &LabelRequest) -> Vec<Vec<u32>> {
    request
        .labels
        .iter()
        .map(|l| match l {
            Label::Tokens(ids) => ids.clone(),
            Label::Text(text) => panic!("score labels are token ids, got {text:?}"),
        })
        .collect()
}

#[test]
fn number_labels_are_the_numbers_tokens_in_the_full_text() {
    let mut scorer = smollm2_scorer();
    let tokenizer =
        load_tokenizer(&resolve_model(CARD, &common::resolve_options()).unwrap()).unwrap();
    assert!(scorer.info().conventions.chat);

    // Chat (the card's convention): the score opens the assistant turn, no space. The
    // context is long enough that the labels come from the prompt's tail only.
    let article = "The cat sat on the mat all day. ".repeat(20);
    let request = absolute::request(
        scorer.as_ref(),
        Task::Summary,
        "coherence",
        &article,
        "A cat sat.",
        absolute::DEFAULT_SCALE,
    )
    .unwrap();
    let labels = label_ids(&request);
    assert_eq!(
        labels[9],
        vec![33, 32],
        "10 after the assistant turn opening"
    );
    assert_eq!(labels[6], vec![39]);
    let rendered = scorer.render(&request.prompt).unwrap().input;
    assert!(rendered.ends_with("<|im_start|>assistant\n"));
    let full = tokenizer.encode_prompt(&format!("{rendered}10")).unwrap();
    assert_eq!(full[full.len() - 2..], labels[9][..]);

    // A plain prompt ending in "Score:": the space belongs to the number.
    let plain = TextPrompt::user("Rate the summary from 1 to 10.\n\nScore:");
    let labels =
        score_label_tokens(scorer.as_ref(), &plain, false, absolute::DEFAULT_SCALE).unwrap();
    assert_eq!(labels[9], vec![216, 33, 32]);
    assert_eq!(labels[6], vec![216, 39]);
    let full = tokenizer
        .encode_prompt(&format!("{} 10", plain.user))
        .unwrap();
    assert_eq!(full[full.len() - 3..], labels[9][..]);

    // Teacher forcing: log P("10") is the sum of its tokens' log-probs as a continuation.
    let result = scorer
        .label_logprobs(std::slice::from_ref(&request))
        .unwrap();
    let continuation = scorer
        .continuation_logprobs(&[ContinuationRequest {
            prompt: request.prompt.clone(),
            continuation: "10".to_string(),
        }])
        .unwrap();
    assert_eq!(continuation[0].tokens, vec![33, 32]);
    let summed: f64 = continuation[0].token_logprobs.iter().sum();
    // Tolerance: the two calls batch differently (f32 arithmetic).
    assert!(
        (result[0].labels[9].logprob - summed).abs() < 1e-4,
        "{} vs {summed}",
        result[0].labels[9].logprob
    );
    // "1" is the first step of "10".
    assert!((result[0].labels[0].logprob - continuation[0].token_logprobs[0]).abs() < 1e-4);
}

/// The first SummEval document with its first three summaries (`None` without the
/// shared data).
fn three_summaries() -> Option<Vec<Context>> {
    let dir = nlg_judge::data::find_shared_data_dir()?;
    let records: Vec<_> = summeval::read(&dir).unwrap().into_iter().take(3).collect();
    let contexts = group_contexts(records).unwrap();
    assert_eq!(contexts.len(), 1);
    Some(contexts)
}

#[test]
fn geval_scores_summeval_summaries_and_reuses_its_steps() {
    let Some(contexts) = three_summaries() else {
        eprintln!("shared data not found; skipping");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cache_path = dir.path().join("results.sqlite");
    let options = ScoreOptions::new(ScoreMethod::Geval, Task::Summary, "coherence");

    let mut first = Counting::new(smollm2_scorer());
    let cache = ResultCache::open(&cache_path).unwrap();
    let started = Instant::now();
    let method = resolve_method(&mut first, &options, Some(&cache)).unwrap();
    let steps_time = started.elapsed();
    let ResolvedMethod::Geval { steps, .. } = &method else {
        panic!("G-Eval expected")
    };
    assert_eq!(steps.origin, StepsOrigin::Generated);
    assert!(steps.text.starts_with("1."), "{}", steps.text);
    // SmolLM2's greedy steps repeat one sentence (the report): they are written
    // again with sampling, and only a sound list is kept.
    let attempts = first.generations.load(Ordering::SeqCst);
    assert!(
        (1..=1 + nlg_judge::judge::geval::steps::SAMPLED_ATTEMPTS as usize).contains(&attempts),
        "{attempts}"
    );
    assert_eq!(
        nlg_judge::judge::diagnostics::steps_problem(&steps.text),
        None
    );
    eprintln!("sound steps after {attempts} attempt(s)");
    let started = Instant::now();
    let run = run_scoring(
        &mut first,
        &contexts,
        &method,
        &Default::default(),
        Some(&cache),
    )
    .unwrap();
    let scoring_time = started.elapsed();
    eprintln!(
        "steps ({} chars) generated in {steps_time:.2?}; 3 summaries scored in {scoring_time:.2?}\n{}",
        steps.text.len(),
        steps.text
    );
    assert_eq!((run.computed, run.cached), (3, 0));
    for scored in &run.candidates {
        let d = scored.distribution.as_ref().unwrap();
        eprintln!(
            "{}: score {:.4}, mass {:.4}, p {:?}",
            scored.candidate_id, scored.score, d.mass, d.normalised
        );
        assert!((1.0..=5.0).contains(&scored.score), "{}", scored.score);
        let total: f64 = d.normalised.iter().sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        let raw: f64 = d.raw.iter().sum();
        assert!((raw - d.mass).abs() < 1e-12 && d.mass > 0.0 && d.mass <= 1.0 + 1e-9);
    }
    drop(cache);

    // A second run over the stored cache: the steps are read back, nothing is generated
    // or scored again.
    let Counting { inner, .. } = first;
    let mut second = Counting::new(inner);
    let cache = ResultCache::open(&cache_path).unwrap();
    let method = resolve_method(&mut second, &options, Some(&cache)).unwrap();
    let ResolvedMethod::Geval { steps: again, .. } = &method else {
        panic!("G-Eval expected")
    };
    assert_eq!(again.origin, StepsOrigin::Cached);
    assert_eq!(again.text, steps.text);
    let rerun = run_scoring(
        &mut second,
        &contexts,
        &method,
        &Default::default(),
        Some(&cache),
    )
    .unwrap();
    assert_eq!(second.generations.load(Ordering::SeqCst), 0);
    assert_eq!(second.label_requests.load(Ordering::SeqCst), 0);
    assert_eq!(rerun.candidates, run.candidates);
}

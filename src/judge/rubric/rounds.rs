//! The one route by which rubric grading (absolute, [`super::run`]) and relative grading
//! ([`super::relative`]) write a run's answers, so that the two cannot drift apart: a
//! thinking judge's reasoning round first where the run has one ([`super::thinking`]),
//! then the feedback round after each closed reasoning, all of a round's generations in
//! one engine call, each answer read as it arrives and its verdict asked right after it.
//! What differs between the two gradings (the request of an answer, how it is read, where
//! the reading is kept, the verdict's label request) is theirs, behind [`Answers`].

use anyhow::{anyhow, Context as _, Result};

use super::protocol::{Form, Reasoning, Start};
use super::reading::Reading;
use super::thinking::{after_thought, reason, Thought};
use crate::engine::{
    generate_cached_all, GeneratedCounts, Generation, GenerationReader, GenerationRequest,
    PlannedLabel, ResultCache, Scorer,
};
use crate::progress::{Progress, ProgressTask};

/// A run's answers as one grading writes and reads them, by index (`0..count()`).
pub trait Answers {
    /// How many answers the run writes.
    fn count(&self) -> usize;
    /// The protocol's reasoning markers (a thinking judge's), if it has any.
    fn reasoning(&self) -> Option<&Reasoning>;
    /// The form as the run opens its answers.
    fn form(&self) -> &Form;
    /// The generation of answer `index` from `start`, at most `max_tokens`.
    fn request(
        &self,
        scorer: &dyn Scorer,
        index: usize,
        start: Start,
        max_tokens: usize,
    ) -> Result<GenerationRequest>;
    /// Read `generation` as an answer in `form`.
    fn read(&self, form: &Form, generation: &Generation) -> Reading;
    /// Keep answer `index`'s reading.
    fn keep(&mut self, index: usize, reading: Reading);
    /// The verdict's label request after kept answer `index`, planned.
    fn verdict(&self, scorer: &dyn Scorer, index: usize) -> Result<PlannedLabel>;
}

/// What a grading calls its rounds: progress bars, cache kind, error contexts.
pub struct RoundNames {
    /// The reasoning round's progress bar.
    pub reasonings: &'static str,
    /// The feedback round's progress bar.
    pub feedbacks: &'static str,
    /// Kind of the feedback generations in the result cache.
    pub cache_kind: &'static str,
    /// What the feedback round does, for its errors.
    pub writing: &'static str,
}

/// Write (or read back from `cache`) every answer of `answers`: with a reasoning `budget`
/// (a thinking judge, thinking on) its reasoning round first, then the feedback round
/// (at most `max_tokens`) after each closed reasoning, each answer kept as it arrives and
/// its verdict read right after it. An answer the judge gave whole in its reasoning round
/// (it did not reason) is kept as it is, with no feedback round; its verdict is read with
/// the others' that the cache lacks. Returns what the feedback round computed now.
pub fn write_answers(
    scorer: &mut dyn Scorer,
    cache: Option<&ResultCache>,
    answers: &mut dyn Answers,
    budget: Option<usize>,
    max_tokens: usize,
    names: &RoundNames,
    progress: &Progress,
) -> Result<GeneratedCounts> {
    let total = answers.count();
    // A thinking judge reasons first, within its own budget.
    let thoughts: Vec<Thought> = match (budget, answers.reasoning()) {
        (Some(budget), Some(reasoning)) => {
            let requests = (0..total)
                .map(|index| answers.request(&*scorer, index, Start::Reasoning, budget))
                .collect::<Result<Vec<_>>>()?;
            let bar = progress.task(total as u64, names.reasonings);
            reason(scorer, cache, reasoning, &requests, budget, &bar)
                .context("writing the judge's reasonings")?
        }
        _ => vec![Thought::default(); total],
    };
    let mut rows = Vec::with_capacity(total);
    let mut requests = Vec::with_capacity(total);
    for (index, thought) in thoughts.iter().enumerate() {
        if thought.whole.is_none() {
            rows.push(index);
            requests.push(answers.request(
                &*scorer,
                index,
                Start::Feedback(&thought.text),
                max_tokens,
            )?);
        }
    }
    let bar = progress.task(total as u64, names.feedbacks);
    let mut reader = AnswerReader {
        answers,
        thoughts: &thoughts,
        rows: &rows,
        bar: &bar,
    };
    for (index, thought) in thoughts.iter().enumerate() {
        if let Some(whole) = &thought.whole {
            reader.keep(index, whole);
            bar.step(1)?;
        }
    }
    generate_cached_all(scorer, cache, names.cache_kind, &requests, &mut reader)
        .context(names.writing)
}

/// Reads each answer of the feedback round as it arrives and asks its verdict.
struct AnswerReader<'a> {
    answers: &'a mut dyn Answers,
    thoughts: &'a [Thought],
    /// The answer (index into `thoughts`) of each feedback request.
    rows: &'a [usize],
    bar: &'a ProgressTask,
}

impl AnswerReader<'_> {
    /// Keep answer `index`: its reasoning round's text, then `generation`.
    fn keep(&mut self, index: usize, generation: &Generation) {
        let answers = &*self.answers;
        let reading = after_thought(
            &self.thoughts[index],
            answers.reasoning(),
            answers.form(),
            |form| answers.read(form, generation),
        );
        self.answers.keep(index, reading);
    }
}

impl GenerationReader for AnswerReader<'_> {
    fn generation(
        &mut self,
        index: usize,
        generation: &Generation,
        cached: bool,
        scorer: &dyn Scorer,
    ) -> Result<Option<PlannedLabel>> {
        let index = *self
            .rows
            .get(index)
            .ok_or_else(|| anyhow!("no answer for feedback request {index}"))?;
        self.keep(index, generation);
        let request = self.answers.verdict(scorer, index)?;
        if cached {
            self.bar.found_in_cache(1);
        } else {
            self.bar.step(1)?;
        }
        Ok(Some(request))
    }
}

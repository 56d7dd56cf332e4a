//! The texts DHP perturbs, per task, read from the shared data sets (or a user's file):
//!
//! - summarization: SummEval, per document the reference (of 11) with the most sentences
//!   (the paper's choice), the article as context;
//! - story completion: Story Cloze validation stories, the right ending perturbed, the
//!   four-sentence story as context, the wrong ending kept for "wrong-ending";
//! - translation: WMT22 reference A of de-en or zh-en longer than 300 characters, the
//!   source segment as context;
//! - question answering: a user's JSONL with `question`, `context`, `answer` (optional
//!   `id`); the Answer-Equivalence set the paper used is not available here.
//!
//! Story Cloze and translation items are sampled (seeded) as the paper did; `limit`
//! takes the first items after that.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Deserialize;

use super::rules::split_sentences;
use super::task::DhpTask;

/// One text to perturb.
#[derive(Debug, Clone, PartialEq)]
pub struct DhpItem {
    pub id: String,
    /// What the judge sees besides the text (article, story, source, question).
    pub context: String,
    /// The high-quality text that is perturbed.
    pub text: String,
    /// The data set's wrong alternative (Story Cloze's wrong ending).
    pub wrong: Option<String>,
}

/// Where to read a task's items.
#[derive(Debug, Clone)]
pub struct ItemSource<'a> {
    /// The shared data directory (`summeval/`, `storycloze/`, `wmt22/`).
    pub data_dir: &'a Path,
    /// Question answering: the user's JSONL file.
    pub input: Option<&'a Path>,
    /// Translation: `de-en` or `zh-en`.
    pub pair: &'a str,
    /// Seed of the random selection (Story Cloze, WMT22).
    pub seed: u64,
    /// At most this many items (default 100, the paper's N).
    pub limit: usize,
}

/// Read the items of `task`.
pub fn load_items(task: DhpTask, source: &ItemSource) -> Result<Vec<DhpItem>> {
    let mut items = match task {
        DhpTask::Summarization => summeval(&source.data_dir.join("summeval/summeval.jsonl"))?,
        DhpTask::StoryCompletion => sampled(
            storycloze(
                &source
                    .data_dir
                    .join("storycloze/cloze_test_val__spring2016.csv"),
            )?,
            source.seed,
        ),
        DhpTask::Translation => sampled(wmt22(source.data_dir, source.pair)?, source.seed),
        DhpTask::QuestionAnswering => {
            let path = source.input.context(
                "question answering reads your own JSONL (question, context, answer): pass --input",
            )?;
            question_answering(path)?
        }
    };
    items.truncate(source.limit);
    if items.is_empty() {
        bail!("no items to perturb for {}", task.name());
    }
    Ok(items)
}

fn sampled(mut items: Vec<DhpItem>, seed: u64) -> Vec<DhpItem> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    items.shuffle(&mut rng);
    items
}

#[derive(Deserialize)]
struct SummevalRow {
    doc_id: String,
    source: String,
    references: Vec<String>,
}

/// One item per SummEval document: the reference with the most sentences.
pub fn summeval(path: &Path) -> Result<Vec<DhpItem>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read SummEval at {}", path.display()))?;
    let mut seen = HashSet::new();
    let mut items = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: SummevalRow = serde_json::from_str(line)
            .with_context(|| format!("{}:{}", path.display(), index + 1))?;
        if !seen.insert(row.doc_id.clone()) {
            continue;
        }
        let best = row
            .references
            .iter()
            .enumerate()
            .max_by_key(|(i, r)| (split_sentences(r).len(), std::cmp::Reverse(*i)))
            .map(|(_, r)| r.clone())
            .with_context(|| format!("{}:{}: no references", path.display(), index + 1))?;
        items.push(DhpItem {
            id: row.doc_id,
            context: row.source,
            text: best,
            wrong: None,
        });
    }
    Ok(items)
}

/// Story Cloze (validation CSV): story id, four sentences, two endings, the right one.
pub fn storycloze(path: &Path) -> Result<Vec<DhpItem>> {
    let mut reader = csv::Reader::from_path(path)
        .with_context(|| format!("cannot open Story Cloze at {}", path.display()))?;
    let mut items = Vec::new();
    for (index, record) in reader.records().enumerate() {
        let at = || format!("{} record {}", path.display(), index + 1);
        let record = record.with_context(at)?;
        if record.len() < 8 {
            bail!("{}: {} fields, expected 8", at(), record.len());
        }
        let right = match &record[7] {
            "1" => 5,
            "2" => 6,
            other => bail!("{}: AnswerRightEnding is `{other}`, expected 1 or 2", at()),
        };
        let wrong = 11 - right;
        items.push(DhpItem {
            id: record[0].to_string(),
            context: (1..=4).map(|i| &record[i]).collect::<Vec<_>>().join(" "),
            text: record[right].to_string(),
            wrong: Some(record[wrong].to_string()),
        });
    }
    Ok(items)
}

/// WMT22 general test: reference A segments longer than 300 characters.
pub fn wmt22(data_dir: &Path, pair: &str) -> Result<Vec<DhpItem>> {
    let source_language = match pair {
        "de-en" => "de",
        "zh-en" => "zh",
        other => bail!("unknown WMT22 pair `{other}` (de-en or zh-en)"),
    };
    let read = |name: String| -> Result<Vec<String>> {
        let path = data_dir.join("wmt22").join(name);
        Ok(std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .lines()
            .map(str::to_string)
            .collect())
    };
    let sources = read(format!("generaltest2022.{pair}.src.{source_language}"))?;
    let references = read(format!("generaltest2022.{pair}.ref.A.en"))?;
    if sources.len() != references.len() {
        bail!(
            "WMT22 {pair}: {} source lines but {} reference lines",
            sources.len(),
            references.len()
        );
    }
    Ok(sources
        .into_iter()
        .zip(references)
        .enumerate()
        .filter(|(_, (_, reference))| reference.chars().count() > 300)
        .map(|(i, (source, reference))| DhpItem {
            id: format!("{pair}-{}", i + 1),
            context: source,
            text: reference,
            wrong: None,
        })
        .collect())
}

#[derive(Deserialize)]
struct QaRow {
    id: Option<serde_json::Value>,
    question: String,
    context: String,
    answer: String,
}

/// A user's question-answering JSONL: `question`, `context`, `answer`, optional `id`.
pub fn question_answering(path: &Path) -> Result<Vec<DhpItem>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut items = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: QaRow = serde_json::from_str(line).with_context(|| {
            format!(
                "{}:{}: expected {{\"question\", \"context\", \"answer\"}}",
                path.display(),
                index + 1
            )
        })?;
        let id = match row.id {
            Some(serde_json::Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => (index + 1).to_string(),
        };
        items.push(DhpItem {
            id,
            context: format!("Question: {}\n\nParagraph: {}", row.question, row.context),
            text: row.answer,
            wrong: None,
        });
    }
    Ok(items)
}

//! Absolute scores (`nlg-judge score`'s output: prompt scoring, G-Eval) as experts beside
//! a compare run's comparisons ([`crate::rank::hybrid`]): read, matched to the run's
//! candidates by `context_id` and `candidate_id`, and handed to the ranking and to the
//! adaptive design's fit one context at a time.
//!
//! Everything is checked before a model is loaded, with the file and line named: a line
//! that is not a JSON object with `context_id`, `candidate_id` and a numeric `score`, a
//! candidate scored twice, a candidate of the input without a score, and a score for a
//! candidate the input does not have (a score file from other data).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

use crate::data::Context;
use crate::rank::hybrid::check_prior_weight;

/// One absolute score per candidate, and the weight of each as an expert.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorScores {
    /// Where the scores came from (a file's path), for messages.
    source: String,
    /// context id -> candidate id -> (score, line).
    scores: HashMap<String, HashMap<String, (f64, usize)>>,
    /// The weight of one absolute expert relative to one comparison.
    pub weight: f64,
}

impl PriorScores {
    /// Scores given directly (`(context_id, candidate_id, score)`), e.g. by a library
    /// caller; `source` names them in messages. Duplicates and non-finite scores are
    /// refused.
    pub fn new(
        source: &str,
        rows: impl IntoIterator<Item = (String, String, f64)>,
        weight: f64,
    ) -> Result<Self> {
        check_prior_weight(weight)?;
        let mut prior = Self {
            source: source.to_string(),
            scores: HashMap::new(),
            weight,
        };
        for (index, (context, candidate, score)) in rows.into_iter().enumerate() {
            prior.insert(index + 1, context, candidate, score)?;
        }
        Ok(prior)
    }

    /// Read `nlg-judge score`'s JSONL output (any file of lines with `context_id`,
    /// `candidate_id` and a numeric `score`; other fields are ignored).
    pub fn read(path: &Path, weight: f64) -> Result<Self> {
        check_prior_weight(weight)?;
        let source = path.display().to_string();
        let file = std::fs::File::open(path).with_context(|| format!("cannot open {source}"))?;
        let mut prior = Self {
            source: source.clone(),
            scores: HashMap::new(),
            weight,
        };
        for (index, line) in BufReader::new(file).lines().enumerate() {
            let number = index + 1;
            let line = line.with_context(|| format!("{source}:{number}: cannot read the line"))?;
            if line.trim().is_empty() {
                continue;
            }
            let (context, candidate, score) =
                parse_line(&line).map_err(|e| anyhow::anyhow!("{source}:{number}: {e:#}"))?;
            prior.insert(number, context, candidate, score)?;
        }
        if prior.scores.is_empty() {
            bail!(
                "{source}: no scores (expected `nlg-judge score` output, one JSON line per \
                 candidate)"
            );
        }
        Ok(prior)
    }

    fn insert(
        &mut self,
        line: usize,
        context: String,
        candidate: String,
        score: f64,
    ) -> Result<()> {
        if !score.is_finite() {
            bail!(
                "{}:{line}: the score of `{candidate}` in context `{context}` is {score}, not a \
                 finite number",
                self.source
            );
        }
        let slot = self.scores.entry(context.clone()).or_default();
        if let Some((_, first)) = slot.get(&candidate) {
            bail!(
                "{}:{line}: `{candidate}` of context `{context}` is scored twice (first on line \
                 {first}); give one score per candidate",
                self.source
            );
        }
        slot.insert(candidate, (score, line));
        Ok(())
    }

    /// Check that every candidate of `contexts` has a score and every score belongs to a
    /// candidate of `contexts`, naming the file and line of the first that does not.
    pub fn check_contexts(&self, contexts: &[Context]) -> Result<()> {
        for context in contexts {
            for candidate in &context.candidates {
                let found = self
                    .scores
                    .get(&context.id)
                    .is_some_and(|c| c.contains_key(&candidate.id));
                if !found {
                    let at = candidate
                        .source
                        .as_deref()
                        .map_or_else(String::new, |s| format!(" ({s})"));
                    bail!(
                        "{}: no score for `{}` of context `{}`{at}; score the same input with \
                         `nlg-judge score` (every candidate needs one)",
                        self.source,
                        candidate.id,
                        context.id
                    );
                }
            }
        }
        let mut unknown: Vec<(usize, &str, &str)> = Vec::new();
        for (context_id, candidates) in &self.scores {
            let context = contexts.iter().find(|c| &c.id == context_id);
            for (candidate_id, &(_, line)) in candidates {
                let known =
                    context.is_some_and(|c| c.candidates.iter().any(|k| &k.id == candidate_id));
                if !known {
                    unknown.push((line, context_id, candidate_id));
                }
            }
        }
        if let Some(&(line, context, candidate)) = unknown.iter().min() {
            bail!(
                "{}:{line}: `{candidate}` of context `{context}` is not a candidate of the input \
                 ({} such line(s)): were the scores made from another file?",
                self.source,
                unknown.len()
            );
        }
        Ok(())
    }

    /// The absolute scores of `context`'s candidates, in its order.
    pub fn for_context(&self, context: &Context) -> Result<Vec<f64>> {
        context
            .candidates
            .iter()
            .map(|candidate| {
                self.scores
                    .get(&context.id)
                    .and_then(|c| c.get(&candidate.id))
                    .map(|&(score, _)| score)
                    .with_context(|| {
                        format!(
                            "{}: no score for `{}` of context `{}`",
                            self.source, candidate.id, context.id
                        )
                    })
            })
            .collect()
    }

    /// Where the scores came from.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// `context_id`, `candidate_id` and `score` of one line.
fn parse_line(line: &str) -> Result<(String, String, f64)> {
    let value: Value = serde_json::from_str(line).context("not a JSON object")?;
    let object = value.as_object().context("not a JSON object")?;
    let text = |key: &str| -> Result<String> {
        match object.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(other) => bail!("`{key}` is {other}, not a string"),
            None => bail!("no `{key}`"),
        }
    };
    let context = text("context_id")?;
    let candidate = text("candidate_id")?;
    let score = match object.get("score") {
        Some(Value::Number(n)) => n.as_f64().context("`score` is not a number")?,
        Some(other) => bail!("`score` of `{candidate}` is {other}, not a number"),
        None => bail!("no `score` for `{candidate}`"),
    };
    Ok((context, candidate, score))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Candidate;

    fn context(id: &str, candidates: &[&str]) -> Context {
        Context {
            id: id.to_string(),
            text: String::new(),
            candidates: candidates
                .iter()
                .map(|c| Candidate {
                    id: c.to_string(),
                    text: String::new(),
                    reference: None,
                    scores: Default::default(),
                    system_id: None,
                    metadata: Default::default(),
                    source: Some(format!("in.jsonl:{c}")),
                })
                .collect(),
        }
    }

    fn written(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scores.jsonl");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn scores_are_matched_by_context_and_candidate() {
        let (_dir, path) = written(
            "{\"context_id\":\"d1\",\"candidate_id\":\"b\",\"score\":2.5,\"rank\":2}\n\n\
             {\"context_id\":\"d1\",\"candidate_id\":\"a\",\"score\":7}\n\
             {\"context_id\":\"d2\",\"candidate_id\":\"a\",\"score\":-1.0}\n",
        );
        let prior = PriorScores::read(&path, 0.5).unwrap();
        let contexts = [context("d1", &["a", "b"]), context("d2", &["a"])];
        prior.check_contexts(&contexts).unwrap();
        assert_eq!(prior.for_context(&contexts[0]).unwrap(), [7.0, 2.5]);
        assert_eq!(prior.for_context(&contexts[1]).unwrap(), [-1.0]);
        assert_eq!(prior.weight, 0.5);
    }

    #[test]
    fn problems_name_the_file_and_line() {
        let error = |text: &str| {
            let (_dir, path) = written(text);
            let contexts = [context("d1", &["a", "b"])];
            let message = match PriorScores::read(&path, 1.0) {
                Ok(prior) => format!("{:#}", prior.check_contexts(&contexts).unwrap_err()),
                Err(e) => format!("{e:#}"),
            };
            message.replace(&path.display().to_string(), "FILE")
        };
        let a = "{\"context_id\":\"d1\",\"candidate_id\":\"a\",\"score\":1}\n";
        let b = "{\"context_id\":\"d1\",\"candidate_id\":\"b\",\"score\":2}\n";
        let message = error(&format!("{a}{b}{a}"));
        assert!(
            message.starts_with("FILE:3: `a` of context `d1` is scored twice (first on line 1)"),
            "{message}"
        );
        let message = error(a);
        assert!(
            message.contains("no score for `b` of context `d1` (in.jsonl:b)"),
            "{message}"
        );
        let message = error(&format!(
            "{a}{b}{{\"context_id\":\"d9\",\"candidate_id\":\"a\",\"score\":1}}\n"
        ));
        assert!(
            message.starts_with("FILE:3: `a` of context `d9` is not a candidate"),
            "{message}"
        );
        let message = error(&format!(
            "{a}{{\"context_id\":\"d1\",\"candidate_id\":\"b\",\"score\":null}}\n"
        ));
        assert!(
            message.starts_with("FILE:2: `score` of `b` is null"),
            "{message}"
        );
        let message = error("not json\n");
        assert!(
            message.starts_with("FILE:1: not a JSON object"),
            "{message}"
        );
        let message = error(&format!("{a}{{\"context_id\":\"d1\",\"score\":2}}\n"));
        assert!(
            message.starts_with("FILE:2: no `candidate_id`"),
            "{message}"
        );
        assert!(error("\n").contains("no scores"));
        let (_dir, path) = written(a);
        assert!(PriorScores::read(&path, 0.0).is_err());
        assert!(PriorScores::new("x", [("d".into(), "a".into(), f64::NAN)], 1.0).is_err());
    }
}

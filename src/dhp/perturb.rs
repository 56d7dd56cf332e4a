//! `dhp perturb`: every item x perturbation becomes one JSONL row
//! (`item_id, task, perturbation, level, degree, method, context, original, perturbed,
//! status`, and `reason` unless the status is `ok`). Rows are appended and flushed one
//! by one; a rerun reads the file, drops a torn last line left by a killed run, and makes
//! only the missing rows. Rule-based rows are seeded per item and perturbation, so a
//! resumed run writes the rows an uninterrupted one would. A perturbation that does not
//! apply (a one-sentence text to reorder) is `skipped`, an LLM edit that gave no usable
//! text `failed`: both keep `perturbed` null, never the original.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::items::DhpItem;
use super::rules::{self, item_rng};
use super::task::{Degree, DhpTask, Kind, Level, LlmEdit, Method, Perturbation};

/// What became of one perturbation of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// The rule does not apply to this text.
    Skipped,
    /// The model gave no usable text within the allowed attempts.
    Failed,
}

/// One output row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerturbRow {
    pub item_id: String,
    pub task: DhpTask,
    pub perturbation: String,
    pub level: Level,
    pub degree: Degree,
    pub method: Method,
    pub context: String,
    pub original: String,
    pub perturbed: Option<String>,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// LLM edits: the sampling seed of the accepted (or last) attempt and the attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<usize>,
}

/// The result of an LLM edit.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmOutcome {
    /// The edited text, or why no attempt gave one.
    pub text: Result<String, String>,
    pub seed: u64,
    pub attempts: usize,
}

/// Makes LLM edits (the model, prompts and cache live behind it).
pub trait Editor {
    fn edit(
        &mut self,
        task: DhpTask,
        edit: LlmEdit,
        degree: Degree,
        item: &DhpItem,
    ) -> Result<LlmOutcome>;
}

/// Rows already in `path` (keys `(item_id, perturbation)`); a torn last line is cut off.
pub fn read_existing(path: &Path) -> Result<Vec<PerturbRow>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut rows = Vec::new();
    let mut good_end = 0;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (index, line) in lines.iter().enumerate() {
        let complete = line.ends_with('\n');
        if line.trim().is_empty() {
            good_end += line.len();
            continue;
        }
        match serde_json::from_str::<PerturbRow>(line) {
            Ok(row) if complete => {
                rows.push(row);
                good_end += line.len();
            }
            // the last line of a killed run
            _ if index + 1 == lines.len() => break,
            Err(error) => bail!("{}:{}: {error}", path.display(), index + 1),
            Ok(_) => unreachable!("only the last line can lack its newline"),
        }
    }
    if good_end < text.len() {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        file.set_len(good_end as u64)?;
    }
    Ok(rows)
}

/// Make one rule-based perturbation of `item` (`items`: all items, for replacements).
pub fn rule_perturbation(
    perturbation: &Perturbation,
    item: &DhpItem,
    items: &[DhpItem],
    seed: u64,
) -> Result<String> {
    let mut rng = item_rng(seed, &item.id, &perturbation.name);
    match perturbation.kind {
        Kind::CharDeletion { k } => rules::delete_chars(&item.text, k, &mut rng),
        Kind::Typos { k } => rules::add_typos(&item.text, k, &mut rng),
        Kind::WordDeletion { k } => rules::delete_words(&item.text, k, &mut rng),
        Kind::Reorder { k } => Ok(rules::reorder_sentences(&item.text, k, &mut rng)?.0),
        Kind::RandomReplacement => {
            let others: Vec<&DhpItem> = items
                .iter()
                .filter(|o| o.id != item.id && o.text.trim() != item.text.trim())
                .collect();
            if others.is_empty() {
                bail!("no other item to take a replacement from");
            }
            Ok(others[rng.gen_range(0..others.len())].text.clone())
        }
        Kind::WrongAlternative => item
            .wrong
            .clone()
            .filter(|w| !w.trim().is_empty())
            .context("the item has no wrong alternative"),
        Kind::Llm(_) => bail!("`{}` is an LLM perturbation", perturbation.name),
    }
}

/// The perturbations of `task` named in `names` (all of the task's when empty), only the
/// rule-based ones with `rule_only`; an unknown name or an empty selection is an error.
pub fn select_perturbations<S: AsRef<str>>(
    task: DhpTask,
    names: &[S],
    rule_only: bool,
) -> Result<Vec<Perturbation>> {
    let mut perturbations = if names.is_empty() {
        task.perturbations()
    } else {
        names
            .iter()
            .map(|name| task.perturbation(name.as_ref().trim()))
            .collect::<Result<Vec<_>>>()?
    };
    if rule_only {
        perturbations.retain(|p| p.method() == Method::Rule);
    }
    if perturbations.is_empty() {
        bail!("no perturbations selected");
    }
    Ok(perturbations)
}

/// Settings of a perturbation run.
pub struct PerturbPlan<'a> {
    pub task: DhpTask,
    pub perturbations: Vec<Perturbation>,
    pub items: &'a [DhpItem],
    pub seed: u64,
}

/// Make the rows `output` does not have yet, appending each as it is made.
/// `editor` makes the LLM perturbations (an error when one is needed and there is none);
/// `on_row` sees every row written (an error from it stops the run there). Returns (rows written now, rows found).
pub fn run_perturb(
    plan: &PerturbPlan,
    output: &Path,
    mut editor: Option<&mut dyn Editor>,
    on_row: &mut dyn FnMut(&PerturbRow) -> Result<()>,
) -> Result<(usize, usize)> {
    let existing = read_existing(output)?;
    let done: HashSet<(String, String)> = existing
        .iter()
        .map(|r| (r.item_id.clone(), r.perturbation.clone()))
        .collect();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(output)
        .with_context(|| format!("cannot write {}", output.display()))?;
    let mut written = 0;
    // Rules first (cheap), then LLM edits.
    let mut ordered: Vec<&Perturbation> = plan.perturbations.iter().collect();
    ordered.sort_by_key(|p| p.method() == Method::Llm);
    for perturbation in ordered {
        for item in plan.items {
            if done.contains(&(item.id.clone(), perturbation.name.clone())) {
                continue;
            }
            let mut row = PerturbRow {
                item_id: item.id.clone(),
                task: plan.task,
                perturbation: perturbation.name.clone(),
                level: perturbation.level,
                degree: perturbation.degree,
                method: perturbation.method(),
                context: item.context.clone(),
                original: item.text.clone(),
                perturbed: None,
                status: Status::Ok,
                reason: None,
                seed: None,
                attempts: None,
            };
            match perturbation.kind {
                Kind::Llm(edit) => {
                    let editor = editor.as_deref_mut().with_context(|| {
                        format!("`{}` needs a model (LLM perturbation)", perturbation.name)
                    })?;
                    let outcome = editor
                        .edit(plan.task, edit, perturbation.degree, item)
                        .with_context(|| format!("item `{}`, {}", item.id, perturbation.name))?;
                    row.seed = Some(outcome.seed);
                    row.attempts = Some(outcome.attempts);
                    match outcome.text {
                        Ok(text) => row.perturbed = Some(text),
                        Err(reason) => {
                            row.status = Status::Failed;
                            row.reason = Some(reason);
                        }
                    }
                }
                _ => match rule_perturbation(perturbation, item, plan.items, plan.seed) {
                    Ok(text) if text.trim() == item.text.trim() => {
                        row.status = Status::Skipped;
                        row.reason = Some("the rule left the text unchanged".into());
                    }
                    Ok(text) => row.perturbed = Some(text),
                    Err(error) => {
                        row.status = Status::Skipped;
                        row.reason = Some(format!("{error:#}"));
                    }
                },
            }
            let line = serde_json::to_string(&row)?;
            writeln!(file, "{line}")?;
            file.flush()?;
            written += 1;
            on_row(&row)?;
        }
    }
    Ok((written, existing.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<DhpItem> {
        (0..4)
            .map(|i| DhpItem {
                id: format!("s{i}"),
                context: format!("Story {i} begins. It goes on."),
                text: format!("The ending number {i} is here."),
                wrong: Some(format!("A wrong ending {i}.")),
            })
            .collect()
    }

    struct Scripted(usize);

    impl Editor for Scripted {
        fn edit(
            &mut self,
            _: DhpTask,
            _: LlmEdit,
            _: Degree,
            item: &DhpItem,
        ) -> Result<LlmOutcome> {
            self.0 += 1;
            Ok(LlmOutcome {
                text: if item.id == "s1" {
                    Err("empty generation".into())
                } else {
                    Ok(item.text.replace("number", "Zorblax"))
                },
                seed: 7,
                attempts: 1,
            })
        }
    }

    #[test]
    fn rows_resume_after_a_torn_line_and_match_an_uninterrupted_run() {
        let dir = tempfile::tempdir().unwrap();
        let items = items();
        let plan = PerturbPlan {
            task: DhpTask::StoryCompletion,
            perturbations: DhpTask::StoryCompletion.perturbations(),
            items: &items,
            seed: 3,
        };
        let full = dir.path().join("full.jsonl");
        let mut editor = Scripted(0);
        let (written, found) =
            run_perturb(&plan, &full, Some(&mut editor), &mut |_| Ok(())).unwrap();
        assert_eq!((written, found), (24, 0));
        let full_text = std::fs::read_to_string(&full).unwrap();

        // a killed run: 10 rows and half of the 11th
        let part = dir.path().join("part.jsonl");
        let lines: Vec<&str> = full_text.lines().collect();
        let mut torn = lines[..10].join("\n");
        torn.push('\n');
        torn.push_str(&lines[10][..20]);
        std::fs::write(&part, torn).unwrap();
        let mut editor = Scripted(0);
        let (written, found) =
            run_perturb(&plan, &part, Some(&mut editor), &mut |_| Ok(())).unwrap();
        assert_eq!((written, found), (14, 10));
        assert_eq!(std::fs::read_to_string(&part).unwrap(), full_text);
        // and a complete file makes nothing
        let (written, _) = run_perturb(&plan, &part, Some(&mut editor), &mut |_| Ok(())).unwrap();
        assert_eq!(written, 0);

        let rows = read_existing(&full).unwrap();
        let failed: Vec<&PerturbRow> = rows.iter().filter(|r| r.status == Status::Failed).collect();
        assert_eq!(failed.len(), 2); // s1, fictional entities and grammar
        assert!(failed
            .iter()
            .all(|r| r.perturbed.is_none() && r.reason.is_some()));
        let wrong = rows
            .iter()
            .find(|r| r.perturbation == "wrong-ending" && r.item_id == "s2")
            .unwrap();
        assert_eq!(wrong.perturbed.as_deref(), Some("A wrong ending 2."));
        let random = rows
            .iter()
            .find(|r| r.perturbation == "random-ending" && r.item_id == "s2")
            .unwrap();
        let replacement = random.perturbed.as_deref().unwrap();
        assert!(replacement != items[2].text && items.iter().any(|i| i.text == replacement));
    }

    #[test]
    fn inapplicable_rules_are_recorded_as_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let items = vec![DhpItem {
            id: "one".into(),
            context: String::new(),
            text: "Just one sentence here.".into(),
            wrong: None,
        }];
        let plan = PerturbPlan {
            task: DhpTask::Summarization,
            perturbations: vec![DhpTask::Summarization
                .perturbation("reorder-minor")
                .unwrap()],
            items: &items,
            seed: 1,
        };
        let out = dir.path().join("p.jsonl");
        run_perturb(&plan, &out, None, &mut |_| Ok(())).unwrap();
        let rows = read_existing(&out).unwrap();
        assert_eq!(rows[0].status, Status::Skipped);
        assert!(rows[0].reason.as_deref().unwrap().contains("1 sentence"));
        assert!(rows[0].perturbed.is_none());
        // an LLM perturbation without an editor is an error, not a silent copy
        let plan = PerturbPlan {
            perturbations: vec![DhpTask::Summarization
                .perturbation("grammar-minor")
                .unwrap()],
            ..plan
        };
        let error = run_perturb(&plan, &out, None, &mut |_| Ok(())).unwrap_err();
        assert!(error.to_string().contains("needs a model"), "{error}");
    }
}

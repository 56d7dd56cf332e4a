//! Input data: the generic one-candidate-per-line JSONL format, and readers that turn the
//! shared human-judgement sets (SummEval, Topical-Chat, WebNLG) into it.

pub mod jsonl;
pub mod predictions;
pub mod summeval;
pub mod topicalchat;
pub mod webnlg;

use std::path::{Path, PathBuf};

pub use jsonl::{
    contexts_from_rows, empty_candidates_warning, find_human_key, find_human_key_among,
    group_contexts, human_key_for, human_keys, read_contexts, read_records, read_single_contexts,
    write_records, Candidate, CandidateRecord, Context,
};

/// Where the shared human-judgement data lives, relative to the repository root.
pub const DEFAULT_DATA_DIR: &str = "../shared/data";

/// Keep the records of the first `limit` contexts (in record order); all when `None`.
pub fn limit_contexts(records: Vec<CandidateRecord>, limit: Option<usize>) -> Vec<CandidateRecord> {
    let Some(limit) = limit else {
        return records;
    };
    let mut seen: Vec<String> = Vec::new();
    records
        .into_iter()
        .filter(|record| {
            if seen.contains(&record.context_id) {
                return true;
            }
            if seen.len() < limit {
                seen.push(record.context_id.clone());
                return true;
            }
            false
        })
        .collect()
}

/// The shared data directory for tests: `NLG_JUDGE_DATA`, else the first `shared/data`
/// found beside the crate or one of its ancestors (worktrees sit one level deeper than
/// the main checkout). `None` when there is none.
pub fn find_shared_data_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("NLG_JUDGE_DATA") {
        return Some(PathBuf::from(dir));
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("shared").join("data"))
        .find(|dir| dir.join("README.md").is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(context: &str, candidate: &str) -> CandidateRecord {
        CandidateRecord {
            context_id: context.into(),
            context: String::new(),
            candidate_id: candidate.into(),
            candidate: String::new(),
            reference: None,
            scores: Default::default(),
            system_id: None,
            metadata: Default::default(),
        }
    }

    #[test]
    fn limit_keeps_every_record_of_the_first_contexts() {
        let records = vec![
            record("a", "1"),
            record("b", "1"),
            record("a", "2"),
            record("c", "1"),
            record("b", "2"),
        ];
        let kept: Vec<_> = limit_contexts(records.clone(), Some(2))
            .into_iter()
            .map(|r| format!("{}{}", r.context_id, r.candidate_id))
            .collect();
        assert_eq!(kept, ["a1", "b1", "a2", "b2"]);
        assert_eq!(limit_contexts(records, None).len(), 5);
    }
}

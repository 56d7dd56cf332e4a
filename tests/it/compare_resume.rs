//! `nlg-judge compare` on a real SummEval document (its first 10 summaries, 90 comparisons)
//! with SmolLM2: sane probabilities, and a run killed midway and started again gives
//! byte-identical output to an uninterrupted run without recomputing what was cached.
//! (Ten of the sixteen summaries keep several leaf passes to interrupt while the test
//! costs CI a third of the whole document's time.)

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Result;

fn nlg_judge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
}

fn compare_args(input: &Path, cache: &Path, out: &Path, pairs: &Path) -> Vec<String> {
    [
        "compare",
        "--model",
        "smollm2-135m-instruct",
        "--attribute",
        "coherence",
        "--input",
        &input.display().to_string(),
        "--cache",
        &cache.display().to_string(),
        "--output",
        &out.display().to_string(),
        "--comparisons-out",
        &pairs.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn cached_rows(cache: &Path) -> usize {
    let Ok(db) =
        rusqlite::Connection::open_with_flags(cache, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    db.query_row("SELECT COUNT(*) FROM label_results", [], |row| {
        row.get::<_, i64>(0)
    })
    .map(|n| n as usize)
    .unwrap_or(0)
}

/// Summaries of the document kept, and the comparisons they make (both orders).
const SUMMARIES: usize = 10;
const COMPARISONS: usize = SUMMARIES * (SUMMARIES - 1);

#[test]
fn a_killed_run_resumes_to_byte_identical_output() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let records = nlg_judge::data::summeval::read(&common::shared_data_dir())?;
    let records: Vec<_> = nlg_judge::data::limit_contexts(records, Some(1))
        .into_iter()
        .take(SUMMARIES)
        .collect();
    assert_eq!(records.len(), SUMMARIES);
    let input = dir.path().join("doc.jsonl");
    let mut file = std::fs::File::create(&input)?;
    nlg_judge::data::write_records(&mut file, &records)?;
    drop(file);

    // The uninterrupted run.
    let (cache_a, out_a, pairs_a) = (
        dir.path().join("a.sqlite"),
        dir.path().join("a.jsonl"),
        dir.path().join("a_pairs.jsonl"),
    );
    let status = nlg_judge()
        .args(compare_args(&input, &cache_a, &out_a, &pairs_a))
        .stderr(Stdio::null())
        .status()?;
    assert!(status.success());

    // Sane comparisons: every ordered pair, p strictly inside (0, 1), label mass given.
    let pairs: Vec<serde_json::Value> = std::fs::read_to_string(&pairs_a)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(pairs.len(), COMPARISONS);
    let mut ordered = std::collections::HashSet::new();
    for pair in &pairs {
        let p = pair["p_a"].as_f64().expect("p_a");
        let mass = pair["label_mass"].as_f64().expect("label_mass");
        assert!(p > 0.0 && p < 1.0, "p_a {p}");
        assert!(mass > 0.0 && mass <= 1.0, "label mass {mass}");
        ordered.insert((pair["a"].to_string(), pair["b"].to_string()));
    }
    for (a, b) in &ordered {
        assert!(
            ordered.contains(&(b.clone(), a.clone())),
            "{a} vs {b} lacks its other order"
        );
    }

    // The interrupted run: killed once some comparisons are stored, then started again.
    let (cache_b, out_b, pairs_b) = (
        dir.path().join("b.sqlite"),
        dir.path().join("b.jsonl"),
        dir.path().join("b_pairs.jsonl"),
    );
    let mut child = nlg_judge()
        .args(compare_args(&input, &cache_b, &out_b, &pairs_b))
        .stderr(Stdio::null())
        .spawn()?;
    common::wait::until("20 comparisons cached by the run to interrupt", || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before it could be interrupted");
        }
        cached_rows(&cache_b) >= 20
    });
    child.kill()?;
    child.wait()?;
    let stored = cached_rows(&cache_b);
    assert!(
        stored < COMPARISONS,
        "the run finished before it was killed"
    );
    assert!(
        !out_b.exists(),
        "a killed run must not leave a final output"
    );

    let resumed = nlg_judge()
        .args(compare_args(&input, &cache_b, &out_b, &pairs_b))
        .output()?;
    assert!(resumed.status.success());
    let log = String::from_utf8_lossy(&resumed.stdout).to_string()
        + &String::from_utf8_lossy(&resumed.stderr);
    assert!(
        log.contains(&format!(
            "{} computed, {stored} from the cache",
            COMPARISONS - stored
        )),
        "the resumed run must reuse the {stored} stored comparisons: {log}"
    );
    assert_eq!(
        std::fs::read(&out_a)?,
        std::fs::read(&out_b)?,
        "scores differ"
    );
    assert_eq!(
        std::fs::read(&pairs_a)?,
        std::fs::read(&pairs_b)?,
        "comparisons differ"
    );
    Ok(())
}

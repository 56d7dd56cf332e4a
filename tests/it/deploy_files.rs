//! The deploy/ files, checked as far as a machine without Slurm or Kubernetes allows: the
//! sbatch script passes `bash -n` and, run by hand with Slurm's variables set, its three
//! array tasks merge into the single run's bytes; the Indexed Job declares the fields
//! Kubernetes requires (read line by line: no YAML parser among our dependencies, so this
//! checks keys and values at their indentation, not full YAML syntax).

use crate::common;

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `key: value` pairs of a YAML file with their indentation, comments dropped.
fn entries(path: &Path) -> Vec<(usize, String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let indent = l.len() - l.trim_start().len();
            let (key, value) = l.trim().trim_start_matches("- ").split_once(':')?;
            Some((indent, key.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

fn value_of(entries: &[(usize, String, String)], key: &str) -> Option<String> {
    entries
        .iter()
        .find(|(_, k, _)| k == key)
        .map(|(_, _, v)| v.clone())
}

#[test]
fn the_indexed_job_has_the_fields_kubernetes_requires() {
    let job = entries(&root().join("deploy/kubernetes/compare-job.yaml"));
    assert_eq!(value_of(&job, "apiVersion").as_deref(), Some("batch/v1"));
    assert_eq!(value_of(&job, "kind").as_deref(), Some("Job"));
    assert_eq!(value_of(&job, "completionMode").as_deref(), Some("Indexed"));
    let completions: usize = value_of(&job, "completions").unwrap().parse().unwrap();
    assert!(completions >= 1);
    // Indexed Jobs need restartPolicy Never or OnFailure.
    let restart = value_of(&job, "restartPolicy").unwrap();
    assert!(restart == "Never" || restart == "OnFailure", "{restart}");
    // The shard count given to nlg-judge is the job's completion count.
    let body = std::fs::read_to_string(root().join("deploy/kubernetes/compare-job.yaml")).unwrap();
    assert!(body.contains(&format!("--shards {completions}")), "{body}");
    assert!(body.contains("$JOB_COMPLETION_INDEX"));
    assert!(value_of(&job, "persistentVolumeClaim").is_some());
    assert_eq!(value_of(&job, "runAsNonRoot").as_deref(), Some("true"));
    let merge = entries(&root().join("deploy/kubernetes/merge-job.yaml"));
    assert_eq!(value_of(&merge, "kind").as_deref(), Some("Job"));
    let merge_body =
        std::fs::read_to_string(root().join("deploy/kubernetes/merge-job.yaml")).unwrap();
    assert!(merge_body.contains("nlg-judge merge /work/out/shard-*.jsonl"));
}

#[test]
fn the_sbatch_script_runs_by_hand_and_its_tasks_merge_to_one_run() {
    let script = root().join("deploy/slurm/compare.sbatch");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check.stderr));

    let model = common::t5::fixture_model_dir();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut lines = String::new();
    for k in 1..=6 {
        for c in 0..3 {
            lines.push_str(&format!(
                "{{\"context_id\": \"d{k}\", \"context\": \"Story number {k}.\", \"candidate_id\": \"c{c}\", \"candidate\": \"Summary {c} of {k}.\"}}\n"
            ));
        }
    }
    std::fs::write(&input, lines).unwrap();
    let binary = env!("CARGO_BIN_EXE_nlg-judge");
    let out = dir.path().join("out");
    for task in 0..3 {
        let run = Command::new("bash")
            .arg(&script)
            .args(["--no-cache"])
            .env("NLG_JUDGE", binary)
            .env("INPUT", &input)
            .env("OUT", &out)
            .env("MODEL", model.path())
            .env("SLURM_ARRAY_TASK_ID", task.to_string())
            .env("SLURM_ARRAY_TASK_COUNT", "3")
            .env_remove("JOB_COMPLETION_INDEX")
            .output()
            .unwrap();
        // --no-cache conflicts with the script's --cache: the script must pass the
        // caller's extra arguments through, so this names the conflict.
        assert!(!run.status.success());
        assert!(
            text(&run.stderr).contains("--no-cache"),
            "{}",
            text(&run.stderr)
        );
        let run = Command::new("bash")
            .arg(&script)
            .env("NLG_JUDGE", binary)
            .env("INPUT", &input)
            .env("OUT", &out)
            .env("MODEL", model.path())
            .env("SLURM_ARRAY_TASK_ID", task.to_string())
            .env("SLURM_ARRAY_TASK_COUNT", "3")
            .env_remove("JOB_COMPLETION_INDEX")
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", text(&run.stderr));
        assert!(text(&run.stderr).contains(&format!("shard {task}/3 taken (Slurm job array")));
    }
    let single = dir.path().join("single.jsonl");
    let run = Command::new(binary)
        .args([
            "compare",
            "--attribute",
            "coherence",
            "--no-cache",
            "--model",
        ])
        .arg(model.path())
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&single)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    let merged = dir.path().join("merged.jsonl");
    let mut merge = Command::new(binary);
    merge.arg("merge");
    for task in 0..3 {
        merge.arg(out.join(format!("shard-{task}.jsonl")));
    }
    let run = merge
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(
        std::fs::read(merged).unwrap(),
        std::fs::read(single).unwrap()
    );
}

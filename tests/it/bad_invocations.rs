//! Bad invocations of every subcommand, as a table: each exits 2 (the user's to fix) with
//! a message naming what is wrong, before any work: no output file appears, no
//! `.partial` file is left, and the input is untouched. Paths are refused when an output
//! is an input (however spelled), a folder, or under a file; models, cards and caches
//! that do not exist, human scores that are not numbers and options that do nothing are
//! refused the same way. The mock model stands in wherever a model is named, so nothing
//! here loads weights.

use std::path::{Path, PathBuf};
use std::process::Command;

const INPUT: &str = "{\"context_id\":\"d\",\"context\":\"An article.\",\"candidate_id\":\"a\",\"candidate\":\"One summary.\",\"scores\":{\"Coherence\":3}}\n\
{\"context_id\":\"d\",\"context\":\"An article.\",\"candidate_id\":\"b\",\"candidate\":\"Another summary.\",\"scores\":{\"Coherence\":4}}\n";

const STRING_SCORE: &str = "{\"context_id\":\"d\",\"context\":\"c\",\"candidate_id\":\"a\",\"candidate\":\"x\",\"scores\":{\"Coherence\":3}}\n\
{\"context_id\":\"d\",\"context\":\"c\",\"candidate_id\":\"b\",\"candidate\":\"y\",\"scores\":{\"Coherence\":\"high\"}}\n";

/// A folder with an input file, a folder, a plain file and a file with a string score.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.jsonl"), INPUT).unwrap();
        std::fs::write(dir.path().join("strings.jsonl"), STRING_SCORE).unwrap();
        std::fs::write(dir.path().join("plain.txt"), "not a folder").unwrap();
        std::fs::create_dir(dir.path().join("folder")).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::create_dir(dir.path().join("cache")).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Every file under the folder, relative, sorted (the cache folder excluded).
    fn files(&self) -> Vec<String> {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, root, out);
                } else {
                    out.push(path.strip_prefix(root).unwrap().display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(self.dir.path(), self.dir.path(), &mut out);
        out.retain(|f| !f.starts_with("cache/"));
        out.sort();
        out
    }
}

/// One bad invocation: its arguments (`@` stands for the setup's folder) and what the
/// message must say.
struct Case {
    args: &'static str,
    says: &'static str,
}

const CASES: &[Case] = &[
    // Outputs that are inputs, however they are spelled.
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --output @/in.jsonl",
        says: "--output @/in.jsonl is the file given to --input",
    },
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --output @/sub/../in.jsonl",
        says: "is the file given to --input",
    },
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --comparisons-out @/./in.jsonl",
        says: "--comparisons-out",
    },
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --report @/out.html --output @/out.html",
        says: "one would overwrite the other",
    },
    Case {
        args: "score --model mock --method prompt --input @/in.jsonl --attribute coherence --output @/in.jsonl",
        says: "is the file given to --input",
    },
    Case {
        args: "metric --input @/in.jsonl --output @/in.jsonl",
        says: "is the file given to --input",
    },
    Case {
        args: "paraphrase --model mock --input @/in.jsonl --output @/in.jsonl",
        says: "is the file given to --input",
    },
    Case {
        args: "merge @/a.jsonl --input @/in.jsonl --output @/in.jsonl",
        says: "is the file given to --input",
    },
    Case {
        args: "dhp score --model mock --input @/in.jsonl --output @/in.jsonl",
        says: "is the file given to --input",
    },
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --cache @/c.sqlite --output @/c.sqlite",
        says: "--output @/c.sqlite is the file given to --cache",
    },
    // Folders, and paths under a file.
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --output @/folder",
        says: "is a folder",
    },
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --report @/folder",
        says: "--report @/folder is a folder: give a file path (for example @/folder/report.html)",
    },
    Case {
        args: "score --model mock --method prompt --input @/in.jsonl --attribute coherence --output @/folder",
        says: "is a folder",
    },
    Case {
        args: "score --model mock --method geval --input @/in.jsonl --attribute coherence --steps-out @/folder",
        says: "--steps-out @/folder is a folder",
    },
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --output @/plain.txt/out.jsonl",
        says: "is a file, not a folder",
    },
    Case {
        args: "convert --dataset summeval --data-dir @/folder --output @/folder",
        says: "is a folder",
    },
    Case {
        args: "reproduce summeval --model mock --out @/plain.txt",
        says: "--out @/plain.txt is a file",
    },
    Case {
        args: "pararef --model mock --out-dir @/plain.txt",
        says: "--out-dir @/plain.txt is a file",
    },
    Case {
        args: "bench pairwise --model mock --data-dir @/folder --save-probabilities @/folder",
        says: "is a folder",
    },
    Case {
        args: "dhp report --run x=@/missing.json --output @/folder",
        says: "cannot read",
    },
    // Models, cards and caches that do not exist.
    Case {
        args: "compare --model smollm3-135m --input @/in.jsonl --attribute coherence --output @/out.jsonl",
        says: "unknown model 'smollm3-135m'",
    },
    Case {
        args: "compare --model @/missing.gguf --input @/in.jsonl --attribute coherence --output @/out.jsonl",
        says: "does not exist",
    },
    Case {
        args: "score --model mock:nonsense --method prompt --input @/in.jsonl --attribute coherence --output @/out.jsonl",
        says: "mock model option",
    },
    Case {
        args: "models show smollm3-135m",
        says: "no model card named 'smollm3-135m'",
    },
    Case {
        args: "models path smollm3-135m",
        says: "no model card named",
    },
    Case {
        args: "cache check --cache @/missing.sqlite",
        says: "no result cache at",
    },
    Case {
        args: "cache repair --cache @/folder",
        says: "is a folder",
    },
    Case {
        args: "labels --model mock --prompt-file @/missing.txt --label A",
        says: "cannot read prompt file",
    },
    // Input that is not what it must be.
    Case {
        args: "compare --model mock --input @/strings.jsonl --attribute coherence --output @/out.jsonl",
        says: "is a string, not a number",
    },
    Case {
        args: "score --model mock --method prompt --input @/strings.jsonl --attribute coherence --output @/out.jsonl",
        says: "is a string, not a number",
    },
    Case {
        args: "compare --model mock --input @/in.jsonl --attribute coherence --human-key nope --output @/out.jsonl",
        says: "no candidate has the human score `nope`",
    },
    Case {
        args: "score --model mock --method prompt --input @/in.jsonl --attribute coherence --human-key nope --output @/out.jsonl",
        says: "no candidate has the human score `nope`",
    },
    Case {
        args: "dhp analyze --scores @/missing.jsonl",
        says: "cannot read",
    },
    Case {
        args: "correlate --input @/missing.jsonl",
        says: "",
    },
    // Options that would do nothing.
    Case {
        args: "score --model mock --method prompt --input @/in.jsonl --attribute surprise --adjective banana-like --output @/out.jsonl",
        says: "--adjective does not apply to --method prompt",
    },
];

#[test]
fn every_bad_invocation_exits_2_before_work_and_leaves_everything_as_it_was() {
    let mut failures = Vec::new();
    for case in CASES {
        let setup = Setup::new();
        let root = setup.dir.path().display().to_string();
        let before = setup.files();
        let args: Vec<String> = case
            .args
            .split_whitespace()
            .map(|a| a.replace('@', &root))
            .collect();
        let output = Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
            .args(&args)
            .env("NLG_JUDGE_CACHE", setup.path("cache"))
            .env("NLG_JUDGE_PROGRESS_INTERVAL", "0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let says = case.says.replace('@', &root);
        let mut wrong = Vec::new();
        if output.status.code() != Some(2) {
            wrong.push(format!("exit code {:?}, not 2", output.status.code()));
        }
        if !stderr.contains(&says) {
            wrong.push(format!("the message does not say `{says}`"));
        }
        let after = setup.files();
        if after != before {
            wrong.push(format!("files changed: {before:?} -> {after:?}"));
        }
        if std::fs::read_to_string(setup.path("in.jsonl")).unwrap() != INPUT {
            wrong.push("the input changed".to_string());
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "nlg-judge {}\n  {}\n  stderr: {}",
                case.args,
                wrong.join("; "),
                stderr.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad invocations misbehaved:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

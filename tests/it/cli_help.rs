//! The command line's own words about itself (issue 40): every subcommand's help, and
//! the errors its options can give before a model is loaded, name only flags that
//! subcommand accepts, and so does every command line the README and docs/ show; the
//! built-in attribute lists of `--help` are the ones the errors give; progress reaches
//! a log file as plain lines; input errors exit with 2.

use std::collections::BTreeSet;
use std::process::Command;

use clap::CommandFactory;
use nlg_judge::cli::Cli;
use nlg_judge::judge::geval::Criteria;
use nlg_judge::judge::pairwise::CompareRequest;
use nlg_judge::judge::{ScoreMethod, ScoreRequest, Task};
use nlg_judge::progress::Progress;

/// Every `--flag` token in `text`: `--` after a non-word character, then a letter, then
/// letters, digits and inner hyphens (`--` alone, `--9` and `a--b` are no flags).
fn flags_in(text: &str) -> BTreeSet<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut flags = BTreeSet::new();
    for start in 0..chars.len().saturating_sub(2) {
        let opens = chars[start] == '-'
            && chars[start + 1] == '-'
            && (start == 0 || !(chars[start - 1].is_alphanumeric() || chars[start - 1] == '-'));
        if !opens || !chars[start + 2].is_ascii_alphabetic() {
            continue;
        }
        let name: String = chars[start + 2..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == '-')
            .collect();
        flags.insert(name.trim_end_matches('-').to_string());
    }
    flags
}

/// The long flags `command` accepts (its own, the propagated global ones, aliases,
/// `--help` and `--version`).
fn accepted(command: &clap::Command) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = ["help".to_string(), "version".to_string()].into();
    for arg in command.get_arguments() {
        if let Some(long) = arg.get_long() {
            names.insert(long.to_string());
        }
        for alias in arg.get_all_aliases().unwrap_or_default() {
            names.insert(alias.to_string());
        }
    }
    names
}

/// The built command tree (global flags propagated into every subcommand).
fn command_tree() -> clap::Command {
    let mut command = Cli::command();
    command.build();
    command
}

/// `(path, command)` for every subcommand under `command`, at any depth.
/// clap's own `help` subcommands are left out: they show the texts checked where they
/// belong.
fn subcommands(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("{path} {}", sub.get_name()).trim().to_string();
        out.push((name.clone(), sub.clone()));
        subcommands(sub, &name, out);
    }
}

fn find(path: &str) -> clap::Command {
    let mut all = Vec::new();
    subcommands(&command_tree(), "", &mut all);
    all.into_iter()
        .find(|(name, _)| name == path)
        .map(|(_, command)| command)
        .unwrap_or_else(|| panic!("no subcommand `{path}`"))
}

/// The flags `text` names that `path` does not accept.
fn foreign_flags(path: &str, text: &str) -> Vec<String> {
    let accepted = accepted(&find(path));
    flags_in(text)
        .into_iter()
        .filter(|flag| !accepted.contains(flag))
        .collect()
}

#[test]
fn the_flag_finder_reads_flags_and_nothing_else() {
    let found = flags_in("use --item (e.g. --item Story), --x-y; not a--b, -- or --9; --no-cache.");
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["item", "no-cache", "x-y"]
    );
}

#[test]
fn every_help_names_only_flags_its_command_accepts() {
    let tree = command_tree();
    let mut all = vec![("nlg-judge".to_string(), tree.clone())];
    subcommands(&tree, "", &mut all);
    assert!(all.len() > 20, "{} subcommands", all.len());
    let mut violations = Vec::new();
    for (path, mut command) in all {
        let help = command.render_long_help().to_string();
        let accepted = accepted(&command);
        for flag in flags_in(&help) {
            if !accepted.contains(&flag) {
                violations.push(format!("`{path} --help` names --{flag}"));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The errors `score` and `compare` give for their options before any model is loaded.
#[test]
fn option_errors_name_only_flags_of_their_command() {
    let score = |edit: &dyn Fn(&mut ScoreRequest)| {
        let mut request = ScoreRequest::new(ScoreMethod::Prompt, Some("wit"));
        edit(&mut request);
        format!("{:#}", request.options(Progress::none()).unwrap_err())
    };
    let score_errors = [
        score(&|r| r.adjective = Some("witty".into())),
        score(&|r| r.method = ScoreMethod::Gptscore),
        score(&|r| r.method = ScoreMethod::Geval),
        score(&|r| {
            r.method = ScoreMethod::Geval;
            r.task = Task::Custom;
        }),
        score(&|r| r.reference = true),
        score(&|r| r.attribute = None),
    ];
    let compare = |edit: &dyn Fn(&mut CompareRequest)| {
        let mut request = CompareRequest::new("wit");
        edit(&mut request);
        format!("{:#}", request.options(Progress::none()).unwrap_err())
    };
    let compare_errors = [
        compare(&|_| {}),
        compare(&|r| {
            r.attribute = "coherence".into();
            r.task = Task::Custom;
        }),
    ];
    let mut violations = Vec::new();
    let all: [(&str, &[String]); 2] = [("score", &score_errors), ("compare", &compare_errors)];
    for (path, errors) in all {
        for error in errors.iter() {
            assert!(error.contains("--"), "{error}");
            for flag in foreign_flags(path, error) {
                violations.push(format!("`{path}` error names --{flag}: {error}"));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The text of an argument's help.
fn arg_help(path: &str, flag: &str) -> String {
    let command = find(path);
    let arg = command
        .get_arguments()
        .find(|a| a.get_long() == Some(flag))
        .unwrap_or_else(|| panic!("`{path}` has no --{flag}"));
    arg.get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default()
}

/// The part of `text` after `start` up to the first of `ends` (or the end).
fn between<'a>(text: &'a str, start: &str, ends: &[&str]) -> &'a str {
    let from = text
        .find(start)
        .unwrap_or_else(|| panic!("no `{start}` in: {text}"))
        + start.len();
    let rest = &text[from..];
    let to = ends
        .iter()
        .filter_map(|end| rest.find(end))
        .min()
        .unwrap_or(rest.len());
    rest[..to].trim()
}

#[test]
fn built_in_attribute_lists_in_help_are_the_errors_lists() {
    // compare: the pairwise attributes.
    let help = arg_help("compare", "attribute");
    let error = format!(
        "{:#}",
        CompareRequest::new("wit")
            .options(Progress::none())
            .unwrap_err()
    );
    let shown = between(&help, "built-in (tuned wording) ", &[";"]);
    let told = between(&error, "built-in attributes: ", &["\n"]);
    assert_eq!(shown, told);
    assert!(shown.split(", ").count() >= 11, "{shown}");

    // score: the same list for GPTScore (prompt scoring takes any name) ...
    let help = arg_help("score", "attribute");
    let error = format!(
        "{:#}",
        ScoreRequest::new(ScoreMethod::Gptscore, Some("wit"))
            .options(Progress::none())
            .unwrap_err()
    );
    assert_eq!(
        between(&help, "GPTScore: built-in ", &["; any other"]),
        between(&error, "built-in attributes: ", &["\n"])
    );
    // ... and G-Eval's criteria of each task.
    for task in [Task::Summary, Task::Dialogue, Task::DataToText] {
        let error = format!("{:#}", Criteria::builtin(task, "wit").unwrap_err());
        let told = between(&error, "built-in: ", &[" (for another"]);
        let listed = format!("{told} (--task {})", task.name());
        assert!(help.contains(&listed), "{listed} not in: {help}");
    }
}

fn nlg_judge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nlg-judge"))
}

const INPUT: &str = "{\"context_id\":\"d\",\"context\":\"A passage.\",\"candidate_id\":\"a\",\"candidate\":\"One.\"}\n\
{\"context_id\":\"d\",\"context\":\"A passage.\",\"candidate_id\":\"b\",\"candidate\":\"Two.\"}\n\
{\"context_id\":\"d\",\"context\":\"A passage.\",\"candidate_id\":\"c\",\"candidate\":\"Three.\"}\n";

#[test]
fn progress_reaches_a_log_file_as_plain_lines() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, INPUT).unwrap();
    let log = dir.path().join("stderr.log");
    let status = nlg_judge()
        .args(["compare", "--model", "mock", "--no-cache", "--attribute"])
        .args(["coherence", "--output"])
        .arg(dir.path().join("out.jsonl"))
        .arg("--input")
        .arg(&input)
        .env("NLG_JUDGE_PROGRESS_INTERVAL", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in: {text:?}");
    // Three candidates, all six ordered pairs: a line at every step, then the last one.
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("compare: "))
        .collect();
    for done in 1..=6 {
        let share = format!(
            "compare: {done}/6 comparisons ({:.0}%), ",
            100.0 * done as f64 / 6.0
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&share) && l.contains("/s")),
            "no `{share}` in: {text}"
        );
    }
    let last = lines.last().expect("progress lines");
    assert!(
        last.starts_with("compare: 6/6 comparisons (100%) in "),
        "{text}"
    );
    assert!(lines[0].contains("ETA "), "{text}");
}

#[test]
fn score_on_own_attributes_says_which_nouns_it_uses() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, INPUT).unwrap();
    let run = |extra: &[&str]| {
        let output = nlg_judge()
            .args([
                "score",
                "--model",
                "mock",
                "--no-cache",
                "--method",
                "prompt",
            ])
            .arg("--input")
            .arg(&input)
            .args(extra)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    // Prompt scoring names the attribute in its prompt: an attribute of one's own needs
    // nothing more ...
    let (code, stderr) = run(&["--attribute", "wit"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("generic nouns of --task custom"),
        "{stderr}"
    );
    let (code, stderr) = run(&["--attribute", "wit", "--task", "summary"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("--task custom"), "{stderr}");
    // ... and an adjective, which it would not use, is an input error refused before the
    // model loads.
    let (code, stderr) = run(&["--attribute", "wit", "--adjective", "witty"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--adjective does not apply to --method prompt")
            && !stderr.contains("--question"),
        "{stderr}"
    );
    // GPTScore does use it: without one, an attribute of one's own is refused, naming
    // the flag `score` has.
    let output = nlg_judge()
        .args([
            "score",
            "--model",
            "mock",
            "--no-cache",
            "--method",
            "gptscore",
        ])
        .arg("--input")
        .arg(&input)
        .args(["--attribute", "wit"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--adjective") && !stderr.contains("--question"),
        "{stderr}"
    );
}

#[test]
fn input_errors_exit_with_2_on_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    let missing = missing.to_str().unwrap();
    let out = dir.path().join("out.jsonl");
    let out = out.to_str().unwrap();
    let no_data = dir.path().join("no-data");
    let no_data = no_data.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["metric", "--input", missing],
        vec!["merge", missing, "--input", missing, "--output", out],
        vec!["correlate", "--input", missing],
        vec![
            "paraphrase",
            "--model",
            "mock",
            "--input",
            missing,
            "--output",
            out,
        ],
        vec![
            "convert",
            "--dataset",
            "summeval",
            "--data-dir",
            no_data,
            "--output",
            out,
        ],
        vec![
            "dhp", "score", "--model", "mock", "--input", missing, "--output", out,
        ],
    ];
    for args in cases {
        let output = nlg_judge().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
    // A missing data directory says how to give another.
    let output = nlg_judge()
        .args([
            "convert",
            "--dataset",
            "summeval",
            "--data-dir",
            no_data,
            "--output",
            out,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--data-dir")
            && stderr.contains("NLG_JUDGE_DATA")
            && stderr.contains("does not exist"),
        "{stderr}"
    );
}

/// The command lines a Markdown text shows: inside fenced code blocks, each line (with
/// its `\` continuations) from `nlg-judge ` to the end of that command (a pipe, `&&`,
/// `;`, a comment or the line's end); in prose, each inline code span from `nlg-judge `.
fn command_lines(markdown: &str) -> Vec<String> {
    fn after_name(text: &str, out: &mut Vec<String>) {
        let mut rest = text;
        while let Some(at) = rest.find("nlg-judge ") {
            let boundary = rest[..at]
                .chars()
                .next_back()
                .is_none_or(|c| c.is_whitespace() || "/(`\"'$".contains(c));
            let tail = &rest[at + "nlg-judge ".len()..];
            if boundary {
                let end = ["|", "&&", ";", " #", "`"]
                    .iter()
                    .filter_map(|stop| tail.find(stop))
                    .min()
                    .unwrap_or(tail.len());
                out.push(tail[..end].trim().to_string());
            }
            rest = tail;
        }
    }
    let mut lines = Vec::new();
    let mut in_block = false;
    let mut joined = String::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            if line.trim_start().starts_with('#') {
                continue; // a shell comment
            }
            match line.strip_suffix('\\') {
                Some(head) => joined.push_str(head),
                None => {
                    joined.push_str(line);
                    after_name(&joined, &mut lines);
                    joined.clear();
                }
            }
        } else {
            for (k, span) in line.split('`').enumerate() {
                if k % 2 == 1 {
                    after_name(span, &mut lines);
                }
            }
        }
    }
    lines
}

/// The subcommand path a command line starts with (`models fetch`, `bench pairwise`;
/// empty for the top level) and the flags it gives.
fn path_and_flags(line: &str, paths: &BTreeSet<String>) -> (String, BTreeSet<String>) {
    let mut path = String::new();
    for word in line.split_whitespace() {
        let longer = format!("{path} {word}").trim().to_string();
        if !paths.contains(&longer) {
            break;
        }
        path = longer;
    }
    (path, flags_in(line))
}

#[test]
fn the_command_line_reader_finds_commands_and_their_flags() {
    let text = "Run `nlg-judge compare --input x.jsonl` or `pip install x`.\n\
                ```sh\n\
                target/release/nlg-judge models fetch smollm2 \\\n  --cache-dir d | tee log # --not\n\
                ```\n";
    assert_eq!(
        command_lines(text),
        [
            "compare --input x.jsonl",
            "models fetch smollm2   --cache-dir d"
        ]
    );
    let paths: BTreeSet<String> = ["compare", "models", "models fetch"]
        .map(String::from)
        .into();
    let (path, flags) = path_and_flags("models fetch smollm2 --cache-dir d", &paths);
    assert_eq!(path, "models fetch");
    assert_eq!(flags.into_iter().collect::<Vec<_>>(), ["cache-dir"]);
}

/// Every command line the README and the docs show names a subcommand that exists and
/// only flags it accepts, so that the docs cannot drift from the commands unnoticed.
#[test]
fn every_command_line_in_the_docs_takes_its_flags() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![
        root.join("README.md"),
        root.join("python/README.md"),
        root.join("criteria/README.md"),
    ];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("docs entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let tree = command_tree();
    let mut all = Vec::new();
    subcommands(&tree, "", &mut all);
    let paths: BTreeSet<String> = all.iter().map(|(name, _)| name.clone()).collect();
    let mut checked = 0;
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable doc");
        let name = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        for line in command_lines(&text) {
            let first = line.split_whitespace().next().unwrap_or_default();
            let word = |w: &str| {
                w.starts_with(|c: char| c.is_ascii_lowercase())
                    && w.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            };
            if !first.is_empty() && !first.starts_with('-') && !word(first) {
                // A placeholder (`nlg-judge <command> --backend URL`), or the binary's
                // path handed to a script (`nlg-judge BF16 INT8`, `BIN=.../nlg-judge X=1`).
                continue;
            }
            let (path, flags) = path_and_flags(&line, &paths);
            if path.is_empty() && !first.is_empty() && !first.starts_with('-') {
                violations.push(format!("{name}: no subcommand `{first}`: `{line}`"));
                continue;
            }
            let command = match path.as_str() {
                "" => tree.clone(),
                path => find(path),
            };
            let accepted = accepted(&command);
            for flag in flags.iter().filter(|f| !accepted.contains(*f)) {
                let shown = if path.is_empty() { "nlg-judge" } else { &path };
                violations.push(format!("{name}: `{shown}` takes no --{flag}: `{line}`"));
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} command lines found");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

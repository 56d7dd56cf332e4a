"""The package behaves as a Python user expects: model work releases the interpreter's
lock, two judges in two threads agree with one after the other, Ctrl-C raises
KeyboardInterrupt within a second and loses nothing computed, progress goes to a
callback (tqdm when installed, silence otherwise), Rust errors keep their message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import nlg_judge
from conftest import LIBRARY, ROOT, STORIES

STORY_OPTIONS = dict(adjective="more empathetic", task="custom", item="Story",
                     context_label="Prompt")


def test_model_work_releases_the_interpreters_lock(judge):
    done = threading.Event()
    result = {}

    def work():
        result["value"] = judge.compare(LIBRARY, "coherence")
        done.set()

    thread = threading.Thread(target=work)
    thread.start()
    spins = 0
    while not done.is_set():
        spins += 1
    thread.join()
    # With the lock held by the model work, this thread could not have run at all.
    assert spins > 10_000
    assert result["value"].computed == 20


def test_two_judges_in_two_threads_agree_with_one_after_the_other():
    first = nlg_judge.Judge(cache=False, progress=False)
    second = nlg_judge.Judge(cache=False, progress=False)
    one_after_the_other = [
        first.compare(STORIES, "empathy", **STORY_OPTIONS)._native.scores_jsonl(),
        second.score(LIBRARY, "prompt", attribute="coherence")._native.scores_jsonl(),
    ]
    side_by_side = [None, None]

    def run(k):
        if k == 0:
            out = first.compare(STORIES, "empathy", **STORY_OPTIONS)
        else:
            out = second.score(LIBRARY, "prompt", attribute="coherence")
        side_by_side[k] = out._native.scores_jsonl()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert side_by_side == one_after_the_other


CHILD = textwrap.dedent(
    """
    import signal, sys, time
    # Ctrl-C as in a terminal, however the test suite was started: a suite launched in
    # the background of a non-interactive shell inherits SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler, so the interruption would never arrive.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import nlg_judge
    judge = nlg_judge.Judge(cache=sys.argv[1], strategy="naive", max_batch_rows=1,
                            progress=False)
    def progress(done, total, unit):
        print("progress", done, total, flush=True)
    try:
        judge.compare(sys.argv[2], "empathy", adjective="more empathetic", task="custom",
                      item="Story", context_label="Prompt", progress=progress)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), flush=True)
        sys.exit(3)
    """
)


def test_ctrl_c_raises_within_a_second_and_a_rerun_resumes_from_the_cache(cli, tmp_path):
    cache = tmp_path / "results.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(cache), str(STORIES)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    seen = 0
    sent_at = None
    for line in child.stdout:
        words = line.split()
        if words[0] == "progress":
            seen = int(words[1])
            if seen >= 3 and sent_at is None:
                sent_at = time.monotonic()
                child.send_signal(signal.SIGINT)
        elif words[0] == "interrupted":
            stopped_at = float(words[1])
            break
        elif words[0] == "finished":
            pytest.fail("the run ended before it was interrupted")
    assert child.wait(timeout=30) == 3
    assert sent_at is not None and stopped_at - sent_at < 1.0, stopped_at - sent_at
    assert seen < 36
    # A rerun takes everything computed before the interruption from the cache...
    judge = nlg_judge.Judge(cache=cache, strategy="naive", max_batch_rows=1, progress=False)
    resumed = judge.compare(STORIES, "empathy", **STORY_OPTIONS)
    assert resumed.cached >= seen and resumed.computed == 36 - resumed.cached
    # ... and ends as an uninterrupted run does.
    cli("compare", "--input", STORIES, "--attribute", "empathy", "--adjective",
        "more empathetic", "--task", "custom", "--item", "Story", "--context-label", "Prompt",
        "--strategy", "naive", "--max-batch-rows", "1", "--no-cache",
        "--output", tmp_path / "cli.jsonl")
    resumed.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()


def test_progress_goes_to_the_callback(tmp_path):
    judge = nlg_judge.Judge(cache=tmp_path / "results.sqlite", progress=False)
    calls = []
    judge.compare(LIBRARY, "coherence", progress=lambda *args: calls.append(args))
    assert calls[0] == (0, 20, "comparisons")
    assert [c[0] for c in calls] == sorted(c[0] for c in calls) and calls[-1][0] == 20
    # A callback that raises stops the run with its error.
    def fail(done, total, unit):
        if done:
            raise RuntimeError("enough")
    with pytest.raises(RuntimeError, match="enough"):
        judge.compare(LIBRARY, "fluency", progress=fail)


def test_the_default_progress_is_tqdm_when_installed_else_silent(tmp_path):
    code = (
        "import nlg_judge; j = nlg_judge.Judge(cache=False);"
        f"j.compare({str(LIBRARY)!r}, 'coherence')"
    )
    process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert process.returncode == 0, process.stderr
    try:
        import tqdm  # noqa: F401

        assert "20/20" in process.stderr
    except ImportError:
        assert process.stderr == ""


def test_rust_errors_keep_the_command_lines_message(cli, tmp_path):
    missing = tmp_path / "missing.gguf"
    process = cli("compare", "--input", LIBRARY, "--attribute", "coherence", "--model",
                  missing, "--no-cache", check=False)
    # A model that does not exist is the caller's to fix: exit 2, and ValueError.
    assert process.returncode == 2
    lines = process.stderr.strip().splitlines()
    expected = ": ".join(
        [lines[0].removeprefix("error: ")] + [l.strip().removeprefix("caused by: ") for l in lines[1:]]
    )
    with pytest.raises(ValueError) as error:
        nlg_judge.Judge(model=missing, cache=False)
    assert str(error.value) == expected

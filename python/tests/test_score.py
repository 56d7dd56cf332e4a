"""`Judge.score`, `Judge.geval` and `Judge.labels` equal the command line's outputs."""

from __future__ import annotations

import json

import pytest

import nlg_judge

from conftest import LIBRARY, STORIES

STEPS = "1. Read the article.\n2. Read the summary.\n3. Rate how well the sentences hang together."


@pytest.mark.parametrize("method", ["prompt", "gptscore"])
def test_scores_equal_the_command_lines(cli, judge, tmp_path, method):
    cli("score", "--method", method, "--input", LIBRARY, "--attribute", "coherence",
        "--no-cache", "--output", tmp_path / "cli.jsonl")
    result = judge.score(LIBRARY, method, attribute="coherence")
    result.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert result.method == method and len(result) == 5


def test_geval_with_given_steps_equals_the_command_line(cli, judge, tmp_path):
    steps = tmp_path / "steps.txt"
    steps.write_text(STEPS)
    cli("score", "--method", "geval", "--input", LIBRARY, "--attribute", "coherence",
        "--steps", steps, "--scale", "1-5", "--no-cache", "--output", tmp_path / "cli.jsonl")
    result = judge.score(LIBRARY, attribute="coherence", steps=steps, scale="1-5")
    result.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert result.steps == STEPS and result.scale == [1, 5] and result.criteria == "Coherence"
    frame = result.to_pandas()
    assert {"p.1", "p.5", "raw.3", "scores.coherence"} <= set(frame.columns)
    # One item through `geval` takes the route of `score`: the same prompt, so the same
    # cache entry (alone, in a batch of one, its float sums differ in the 7th digit).
    cached = nlg_judge.Judge(cache=tmp_path / "results.sqlite", progress=False)
    batch = cached.score(LIBRARY, attribute="coherence", steps=steps, scale="1-5")
    row = json.loads(LIBRARY.read_text().splitlines()[0])
    one = cached.geval(row["candidate"], "coherence", context=row["context"], steps=STEPS,
                       scale=[1, 5])
    assert one["score"] == batch.records[0]["score"]
    assert one["score"] == pytest.approx(result.records[0]["score"], rel=1e-5)
    assert one["criteria_name"] == "Coherence" and one["steps"] == STEPS
    assert abs(sum(one["probabilities"].values()) - 1) < 1e-9


def test_free_text_criteria_and_misplaced_options(judge):
    # In Python's words, not the command line's flags (issue 60).
    with pytest.raises(ValueError, match='reference=True applies to method="geval" and rubric only'):
        judge.score(LIBRARY, "prompt", attribute="coherence", reference=True)
    with pytest.raises(ValueError, match="scale: '1-'"):
        judge.score(LIBRARY, "prompt", attribute="coherence", scale="1-")
    result = judge.score(STORIES, criteria_text="Empathy (1-3): how warm the story is.",
                         steps=None, max_step_tokens=8, progress=False)
    assert result.criteria == "Empathy" and result.scale == [1, 3]
    assert result.correlate().n_groups == 3


def test_labels_equal_the_command_line(cli, judge, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Is the sky blue? Answer Yes or No.")
    process = cli("labels", "--prompt-file", prompt, "--label", " Yes", "--label", " No",
                  "--chat", "--json")
    expected = json.loads(process.stdout)
    ours = judge.labels(prompt.read_text(), [" Yes", " No"], chat=True)
    assert ours["labels"] == expected["labels"]
    assert ours["label_mass"] == expected["label_mass"]

"""`Judge.compare` equals `nlg-judge compare` byte for byte, takes lists, DataFrames and
paths alike, and names the row and field of bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import nlg_judge
from conftest import LIBRARY, STORIES, read_rows


def test_scores_and_comparisons_equal_the_command_lines(cli, judge, tmp_path):
    options = dict(attribute="coherence", debias="threshold", rank="soft")
    cli(
        "compare", "--input", LIBRARY, "--attribute", "coherence", "--debias", "threshold",
        "--rank", "soft", "--no-cache", "--output", tmp_path / "cli.jsonl",
        "--comparisons-out", tmp_path / "cli-comparisons.jsonl",
    )
    result = judge.compare(LIBRARY, **options)
    result.to_jsonl(tmp_path / "py.jsonl")
    result.comparisons_to_jsonl(tmp_path / "py-comparisons.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert (tmp_path / "py-comparisons.jsonl").read_bytes() == (
        tmp_path / "cli-comparisons.jsonl"
    ).read_bytes()
    assert result.computed == 20 and result.cached == 0


def test_the_matrix_holds_every_comparison_and_nan_elsewhere(cli, judge, tmp_path):
    result = judge.compare(STORIES, "empathy", adjective="more empathetic", task="custom",
                           item="Story", context_label="Prompt", template="c2",
                           design="symmetric", comparisons=6, seed=3)
    comparisons = result.comparisons_to_pandas()
    assert len(result) == 3
    for context in result:
        n = len(context.candidate_ids)
        assert context.probabilities.shape == (n, n)
        assert np.isnan(np.diag(context.probabilities)).all()
        rows = comparisons[comparisons.context_id == context.context_id]
        assert np.count_nonzero(~np.isnan(context.probabilities)) == len(rows) == 6
        for row in rows.itertuples():
            i, j = context.candidate_ids.index(row.a), context.candidate_ids.index(row.b)
            assert round(context.probabilities[i, j], 6) == pytest.approx(row.p_a, abs=1e-12)
        assert sorted(context.ranks) == sorted(np.asarray(context.ranks))
        assert context.ranking()[0] == context.candidate_ids[int(np.argmin(context.ranks))]
    # The same run from the command line writes the same scores.
    cli(
        "compare", "--input", STORIES, "--attribute", "empathy", "--adjective",
        "more empathetic", "--task", "custom", "--item", "Story", "--context-label", "Prompt",
        "--template", "c2", "--design", "symmetric", "--comparisons", "6", "--seed", "3",
        "--no-cache", "--output", tmp_path / "cli.jsonl",
    )
    result.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()


def test_lists_dataframes_and_paths_give_the_same_result(tmp_path):
    judge = nlg_judge.Judge(cache=tmp_path / "results.sqlite", progress=False)
    rows = read_rows(LIBRARY)
    from_path = judge.compare(LIBRARY, "coherence")
    from_list = judge.compare(rows, "coherence")
    from_frame = judge.compare(pd.DataFrame(rows), "coherence")
    # json_normalize flattens `scores` into `scores.<key>` columns: read back as scores.
    from_flat = judge.compare(pd.json_normalize(rows), "coherence")
    expected = from_path._native.scores_jsonl()
    for other in (from_list, from_frame, from_flat):
        assert other._native.scores_jsonl() == expected
        # Same prompts: every comparison came from the first run's cache.
        assert other.cached == 20 and other.computed == 0
    frame = from_path.to_pandas()
    assert list(frame.columns[:4]) == ["context_id", "candidate_id", "score", "rank"]
    assert len(frame) == 5 and frame["text"].str.len().min() > 20


def test_a_bad_row_names_the_row_and_field(judge):
    rows = read_rows(LIBRARY)
    del rows[2]["candidate"]
    # Counted from 1, like a file's lines; the list index or DataFrame label beside.
    with pytest.raises(
        ValueError, match=r"row 3 \(index 2\): bad record: missing field `candidate`"
    ):
        judge.compare(rows, "coherence")
    frame = pd.DataFrame(read_rows(LIBRARY), index=list("abcde"))
    frame.loc["d", "context"] = None
    with pytest.raises(
        ValueError, match=r"row 4 \(index label 'd'\): bad record: missing field `context`"
    ):
        judge.compare(frame, "coherence")
    with pytest.raises(ValueError, match=r"design: invalid value 'sideways'"):
        judge.compare(LIBRARY, "coherence", design="sideways")
    with pytest.raises(ValueError, match=r"--design adaptive only"):
        judge.compare(LIBRARY, "coherence", rounds=2)


def test_a_bad_line_of_a_file_names_the_file_and_line(judge, tmp_path):
    lines = LIBRARY.read_text().splitlines()
    lines[3] = lines[3].replace('"candidate"', '"kandidate"')
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{bad}:4: bad record: missing field `candidate`"):
        judge.compare(bad, "coherence")


def test_the_table_and_correlation_are_the_command_lines(cli, judge, tmp_path):
    process = cli(
        "compare", "--input", STORIES, "--attribute", "empathy", "--adjective",
        "more empathetic", "--task", "custom", "--item", "Story", "--context-label", "Prompt",
        "--no-cache", "--correlate", "--output", tmp_path / "cli.jsonl",
    )
    result = judge.compare(STORIES, "empathy", adjective="more empathetic", task="custom",
                           item="Story", context_label="Prompt")
    # The same table, figures and checks; the remedies and notes name what each reader
    # can change: flags on the command line, keywords in Python.
    def without_remedies(text):
        return "\n".join(l for l in text.splitlines() if not l.startswith("    remedy: "))

    in_python = without_remedies(process.stdout).replace("--rank win-ratio", 'rank="win-ratio"')
    assert in_python.startswith(without_remedies(str(result)))
    python_advice = str(result).split("judge diagnostics")[1]
    assert "--" not in python_advice and "Judge(model=...)" in python_advice
    assert str(result.correlate()) in process.stdout
    # The module's function on a result is --correlate too: intervals by default.
    as_flag = nlg_judge.correlate(result, "empathy")
    assert str(as_flag) == str(result.correlate()) and str(as_flag) in process.stdout
    assert as_flag.ci is not None and as_flag.ci["resamples"] == 1000
    assert nlg_judge.correlate(result, "empathy", bootstrap=None).ci is None
    assert result.human_key == "Empathy"

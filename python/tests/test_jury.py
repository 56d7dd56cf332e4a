"""`Jury` equals the command line's jury (`--model A --model B`): the output lines byte
for byte, the weights and agreement of its diagnostics sidecar, its table; one judge
twice, and agreement weights for two judges, are refused before any model loads, as on
the command line; a judge that sets candidates aside cannot sit on one."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import nlg_judge
from conftest import LIBRARY

MODELS = ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"]


@pytest.fixture(scope="module")
def jury():
    with nlg_judge.Jury(MODELS, cache=False, progress=False) as panel:
        yield panel


def test_a_jury_compare_equals_the_command_line(cli, jury, tmp_path):
    out = tmp_path / "cli.jsonl"
    process = cli("compare", "--model", MODELS[0], "--model", MODELS[1], "--input", LIBRARY,
                  "--attribute", "coherence", "--no-cache", "--output", out)
    result = jury.compare(LIBRARY, "coherence", progress=False)
    result.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == out.read_bytes()
    sidecar = json.loads((tmp_path / "cli.jsonl.diagnostics.json").read_text())
    assert result.diagnostics["weights"] == sidecar["weights"]
    assert result.diagnostics["agreement"] == sidecar["agreement"]
    assert sorted(result.diagnostics["judges"]) == sorted(MODELS)
    assert result.names == MODELS and [j["weight"] for j in result.judges] == [1.0, 1.0]
    assert np.allclose(np.diag(result.spearman), 1.0)
    assert result.kappa.shape == (2, 2)
    # The table the command prints, before its `results:` lines.
    assert process.stdout.startswith(str(result)), process.stdout
    # Each judge's own result is there, with its own ranking of the same candidates.
    for name in MODELS:
        own = result.results[name]
        assert own[0].candidate_ids == result[0].candidate_ids
        assert np.array_equal(
            result[0].judge_scores[MODELS.index(name)], own[0].scores
        )
    frame = result.to_pandas()
    assert {f"judge.{m}" for m in MODELS} <= set(frame.columns)
    assert list(frame["candidate_id"]) == result[0].candidate_ids


def test_a_jury_of_scores_equals_the_command_line(cli, tmp_path):
    out = tmp_path / "cli.jsonl"
    process = cli("score", "--method", "prompt", "--attribute", "coherence", "--model", MODELS[0],
                  "--model", MODELS[1], "--input", LIBRARY, "--no-cache", "--correlate",
                  "--output", out)
    with nlg_judge.Jury(MODELS, cache=False, progress=False) as panel:
        result = panel.score(LIBRARY, "prompt", attribute="coherence", progress=False)
    result.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == out.read_bytes()
    sidecar = json.loads((tmp_path / "cli.jsonl.diagnostics.json").read_text())
    assert result.judges == sidecar["weights"]
    assert result.kappa is None
    assert result.weights_note is None and "weights_note" not in sidecar
    # The jury's Spearman with the human scores is the one `--correlate` prints.
    line = re.search(r"^\s+jury\s+(-?[0-9.]+)", process.stdout, re.M)
    assert line, process.stdout
    assert f"{result.correlate(bootstrap=None).spearman:.4f}" == line.group(1)
    own = result.correlate(judge=MODELS[0], bootstrap=None).spearman
    assert own == pytest.approx(result.results[MODELS[0]].correlate(bootstrap=None).spearman)


def test_agreement_weights_for_two_judges_are_refused_before_any_loads(cli):
    # Issue 60: with two judges each one's agreement with "the others" is one number, so
    # the weights would always be equal; refused before a model loads, as on the command
    # line (exit code 2). The names are of no model: loading one would fail otherwise.
    with pytest.raises(ValueError, match=r'weights="agreement" needs 3 judges or more \(this jury has 2\)'):
        nlg_judge.Jury(["no-such-model", "other-model"], weights="agreement")
    process = cli("score", "--method", "prompt", "--attribute", "coherence", "--model",
                  "no-such-model", "--model", "other-model", "--jury-weights", "agreement",
                  "--input", LIBRARY, "--no-cache", check=False)
    assert process.returncode == 2, process.stderr
    assert "--jury-weights agreement needs 3 judges or more (this jury has 2)" in process.stderr


def test_one_judge_twice_is_refused(judge, cli):
    # Issue 60: one judge twice would be that judge alone with double weight.
    with pytest.raises(ValueError, match="'smollm2-135m-instruct' is given twice"):
        nlg_judge.Jury([judge, judge])
    with pytest.raises(ValueError, match="'no-such-model' is given twice"):
        nlg_judge.Jury(["no-such-model", "other", "no-such-model"])
    process = cli("compare", "--model", "no-such-model", "--model", "no-such-model",
                  "--attribute", "coherence", "--input", LIBRARY, "--no-cache", check=False)
    assert process.returncode == 2, process.stderr
    assert "--model no-such-model is given twice" in process.stderr


def test_weights_and_judges_that_cannot_sit_are_refused(judge):
    with pytest.raises(ValueError, match="2 weights for 1 judges"):
        nlg_judge.Jury([judge], weights=[1, 2])
    # Refused before any judge loads (the names are of no model).
    with pytest.raises(ValueError, match="judge 2: weight -1"):
        nlg_judge.Jury(["no-such-model", "other-model"], weights=[1, -1])
    with pytest.raises(ValueError, match="design='adaptive' takes one judge"):
        nlg_judge.Jury([judge]).compare(LIBRARY, "coherence", design="adaptive")
    rows = [
        {"context_id": "news", "context": "The council approved the library budget.",
         "candidate_id": cid, "candidate": text}
        for cid, text in [("S1", "The council approved it."), ("P0", "budget " * 9000),
                          ("S2", "Libraries get a budget.")]
    ]
    # One judge sets the over-long candidate aside and ranks the others, as the CLI does.
    alone = judge.compare(rows, "coherence")
    assert [s["candidate_id"] for s in alone.set_aside] == ["P0"]
    assert alone.set_aside[0]["tokens"] > alone.set_aside[0]["limit"] == 8192
    assert alone[0].candidate_ids == ["S1", "S2"]
    # A jury's judges must judge the same candidates.
    with pytest.raises(ValueError, match="judge `smollm2-135m-instruct` cannot compare every candidate"):
        with nlg_judge.Judge(cache=False, progress=False) as other:
            nlg_judge.Jury([judge, other]).compare(rows, "coherence")

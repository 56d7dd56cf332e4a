"""`correlate` and the metrics equal `nlg-judge correlate` and `nlg-judge metric`."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import nlg_judge
from nlg_judge import metrics
from conftest import STORIES, read_rows


@pytest.fixture(scope="module")
def ranked(tmp_path_factory, cli):
    path = tmp_path_factory.mktemp("ranked") / "ranked.jsonl"
    cli("compare", "--input", STORIES, "--attribute", "empathy", "--adjective",
        "more empathetic", "--task", "custom", "--item", "Story", "--context-label", "Prompt",
        "--rank", "soft", "--no-cache", "--output", path)
    return path


@pytest.mark.parametrize("level", ["summary", "system", "pooled"])
def test_fields_of_a_file_equal_the_command_line(cli, ranked, level):
    process = cli("correlate", "--input", ranked, "--pred", "score", "--human",
                  "scores.Empathy", "--level", level, "--bootstrap", "200", "--seed", "4",
                  "--json")
    ours = nlg_judge.correlate("score", "scores.Empathy", input=ranked, level=level,
                               bootstrap=200, seed=4)
    assert ours.to_json() + "\n" == process.stdout
    table = cli("correlate", "--input", ranked, "--pred", "score", "--human",
                "scores.Empathy", "--level", level, "--bootstrap", "200", "--seed", "4")
    assert str(ours) == table.stdout


def test_arrays_rows_and_joined_files_give_the_same_figures(cli, ranked):
    rows = read_rows(ranked)
    expected = nlg_judge.correlate("score", "scores.Empathy", input=ranked, bootstrap=100)
    from_rows = nlg_judge.correlate("score", "scores.Empathy", input=rows, bootstrap=100)
    from_frame = nlg_judge.correlate("score", "scores.Empathy", input=pd.DataFrame(rows),
                                     bootstrap=100)
    arrays = nlg_judge.correlate(
        np.array([r["score"] for r in rows]),
        pd.Series([r["scores"]["Empathy"] for r in rows]),
        group=[r["context_id"] for r in rows],
        bootstrap=100,
    )
    joined = nlg_judge.correlate("score", "scores.Empathy", pred_file=ranked,
                                 human_file=STORIES, bootstrap=100)
    process = cli("correlate", "--pred-file", ranked, "--human-file", STORIES, "--pred",
                  "score", "--human", "scores.Empathy", "--bootstrap", "100", "--json")
    assert joined.to_json() + "\n" == process.stdout
    for other in (from_rows, from_frame, arrays, joined):
        assert other.to_dict() == expected.to_dict()


def test_bad_values_are_value_errors():
    with pytest.raises(ValueError, match="give group="):
        nlg_judge.correlate([1, 2, 3], [1, 2, 3])
    with pytest.raises(ValueError, match="pred has 3 values, human 2"):
        nlg_judge.correlate([1, 2, 3], [1, 2], level="pooled")
    with pytest.raises(ValueError, match=r"row 2 \(index 1\): field `score` \(pred\) is missing"):
        nlg_judge.correlate("score", "h", input=[{"score": 1, "h": 1, "context_id": 1},
                                                 {"h": 2, "context_id": 1}])


REFERENCES = [
    {"context_id": "d1", "candidate_id": "a", "candidate": "The cat sat on the mat.",
     "references": ["A cat was sitting on the mat.", "The cat is on the mat."],
     "scores": {"fluency": 4}},
    {"context_id": "d1", "candidate_id": "b", "candidate": "Mat the on sat cat.",
     "reference": "A cat was sitting on the mat.", "system_id": "S2"},
    {"context_id": "d2", "candidate_id": "a", "candidate": "Rain is expected tomorrow morning.",
     "reference": "Tomorrow morning it will probably rain."},
]


def test_metrics_equal_the_command_line(cli, tmp_path):
    path = tmp_path / "refs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in REFERENCES))
    process = cli("metric", "--input", path, "--stemmer", "--agg", "mean")
    expected = [json.loads(line) for line in process.stdout.splitlines()]
    assert metrics.score(path, stemmer=True, agg="mean") == expected
    assert metrics.score(REFERENCES, stemmer=True, agg="mean") == expected
    default = [json.loads(l) for l in cli("metric", "--input", path).stdout.splitlines()]
    candidates = [r["candidate"] for r in REFERENCES]
    references = [r.get("references", r.get("reference")) for r in REFERENCES]
    assert metrics.bleu(candidates, references) == [d["metrics"]["bleu"] for d in default]
    assert metrics.chrf(candidates, references, word_order=2) == [
        d["metrics"]["chrf++"] for d in default
    ]
    assert metrics.rouge(candidates[0], references[0], kind="rouge2") == default[0]["metrics"]["rouge2"]
    corpus = metrics.corpus(candidates, references)
    stderr = cli("metric", "--input", path, "--corpus").stderr
    assert f"corpus BLEU {corpus['bleu']:.4f}  chrF {corpus['chrf']:.4f}" in stderr


def test_bertscore_equals_the_command_line(cli, tmp_path):
    path = tmp_path / "refs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in REFERENCES))
    process = cli("metric", "--input", path, "--metric", "bertscore")
    expected = [json.loads(line)["metrics"]["bertscore"] for line in process.stdout.splitlines()]
    candidates = [r["candidate"] for r in REFERENCES]
    references = [r.get("references", r.get("reference")) for r in REFERENCES]
    assert metrics.bertscore(candidates, references) == expected

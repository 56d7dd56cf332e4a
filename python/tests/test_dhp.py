"""`nlg_judge.dhp` equals `nlg-judge dhp perturb` and `dhp analyze`."""

from __future__ import annotations

import json
import random

import pytest

from nlg_judge import dhp

QA = [
    {"id": f"q{k}", "question": question, "context": context, "answer": answer}
    for k, (question, context, answer) in enumerate([
        ("Where did the library open?",
         "The town of Millbrook opened its first public library on Saturday. The building is a converted grain warehouse on River Street.",
         "The library opened in a converted grain warehouse on River Street in Millbrook, after a long campaign by teachers."),
        ("Who led the campaign?",
         "Local teachers led a three-year fundraising campaign. Private donations paid two thirds of the cost.",
         "A group of local teachers led the campaign for three years, and private donors paid most of the cost."),
        ("How far was the nearest library?",
         "Until now, residents had to drive 40 kilometres to the nearest library in Ashford.",
         "Residents used to drive forty kilometres to reach the library in Ashford, the nearest one until now."),
    ])
]


def test_rule_perturbations_equal_the_command_line(cli, tmp_path):
    source = tmp_path / "qa.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in QA))
    cli("dhp", "perturb", "--task", "question-answering", "--input", source, "--rule-only",
        "--limit", "3", "--output", tmp_path / "cli.jsonl")
    rows = dhp.perturb("question-answering", tmp_path / "py.jsonl", input=source,
                       rule_only=True, limit=3, progress=False)
    assert (tmp_path / "py.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert {row["method"] for row in rows} == {"rule"} and len(rows) >= 3
    with pytest.raises(ValueError, match="LLM perturbations need a model"):
        dhp.perturb("question-answering", tmp_path / "llm.jsonl", input=source, limit=3)


def test_analysis_equals_the_command_line(cli, tmp_path):
    rng = random.Random(5)
    rows = []
    for item in range(12):
        for metric in ("coherence", "fluency"):
            original = rng.uniform(3, 5)
            rows.append({"item": str(item), "perturbation": "original", "metric": metric,
                         "score": original})
            for name, level, drop in (("typos", "C", 0.8), ("reorder", "S", 0.05)):
                rows.append({"item": str(item), "perturbation": name, "level": level,
                             "metric": metric, "score": original - rng.uniform(0, drop)})
    path = tmp_path / "scores.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = json.loads(cli("dhp", "analyze", "--scores", path, "--json").stdout)
    from_file = dhp.analyze(path)
    assert dict(from_file) == expected
    assert dict(dhp.analyze(rows)) == expected
    assert str(from_file) in cli("dhp", "analyze", "--scores", path).stdout

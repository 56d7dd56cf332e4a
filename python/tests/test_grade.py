"""`Judge.grade` (rubric grading) equals `nlg-judge score --method rubric`: the output
lines byte for byte (feedback and format included), a dict rubric as the same rubric
file, the feedback texts and format counts as attributes and DataFrame columns."""

from __future__ import annotations

import collections
import json

import pytest

from conftest import LIBRARY, STORIES, read_rows

RUBRIC = {
    "name": "Warmth",
    "criterion": "How warm and caring is the story towards its characters?",
    "scale": [1, 3],
    "descriptions": ["Cold or dismissive.", "Neutral.", "Warm and caring."],
    "instruction": "Write a short story.",
}


def test_grade_with_feedback_equals_the_command_line(cli, judge, tmp_path):
    out = tmp_path / "cli.jsonl"
    cli("score", "--method", "rubric", "--rubric", "coherence", "--input", LIBRARY,
        "--max-feedback-tokens", "24", "--no-cache", "--output", out)
    result = judge.grade(LIBRARY, "coherence", max_feedback_tokens=24)
    result.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == out.read_bytes()
    rows = read_rows(out)
    assert result.method == "rubric" and len(result) == 5
    assert result.feedback == [row["feedback"] for row in rows]
    assert result.formats == [row["format"] for row in rows]
    counts = collections.Counter(row["format"].replace("-", "_") for row in rows)
    assert result.format_counts == {k: counts.get(k, 0) for k in
                                    ("kept", "no_score", "repeated", "missing", "cut")}
    assert result.rubric["name"] == "Coherence" and result.rubric["protocol"] == "plain"
    assert result.rubric["protocol_source"] == "default"
    assert result.rubric["max_feedback_tokens"] == 24
    # Issue 60: every output row records how it was graded, as the result does.
    for row in rows:
        assert row["rubric"] == {
            "name": "Coherence", "criterion": row["rubric"]["criterion"], "scale": [1, 5],
            "protocol": "plain", "protocol_source": "default", "max_feedback_tokens": 24,
        }
    assert result.criteria == "Coherence" and result.scale == [1, 5]
    # The format check measures what the command line's sidecar measures.
    sidecar = json.loads((tmp_path / "cli.jsonl.diagnostics.json").read_text())
    ours = {c["name"]: c for c in result.diagnostics["checks"]}
    theirs = {c["name"]: c for c in sidecar["checks"]}
    assert ours["format"]["value"] == theirs["format"]["value"]
    assert ours["format"]["message"] == theirs["format"]["message"]
    assert ours["format"]["value"] * 5 == pytest.approx(result.format_counts["kept"])
    frame = result.to_pandas()
    assert list(frame["feedback"]) == result.feedback
    assert list(frame["format"]) == result.formats
    assert {"p.1", "p.5", "scores.coherence"} <= set(frame.columns)


def test_a_dict_rubric_grades_as_the_same_rubric_file(cli, judge, tmp_path):
    path = tmp_path / "warmth.json"
    path.write_text(json.dumps(RUBRIC))
    out = tmp_path / "cli.jsonl"
    cli("score", "--method", "rubric", "--rubric", path, "--input", STORIES, "--no-feedback",
        "--task", "custom", "--protocol", "flow-judge", "--no-cache", "--output", out)
    result = judge.grade(STORIES, RUBRIC, feedback=False, task="custom", protocol="flow-judge")
    result.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == out.read_bytes()
    assert result.feedback is None and result.format_counts is None
    assert result.scale == [1, 3] and result.rubric["protocol_source"] == "requested"
    assert all(len(r["distribution"]["normalised"]) == 3 for r in result.records)
    # The file's path works as on the command line.
    again = judge.grade(STORIES, path, feedback=False, task="custom", protocol="flow-judge")
    assert list(again.scores) == list(result.scores)


def test_bad_rubrics_and_options_name_the_field(judge):
    with pytest.raises(ValueError, match=r"field `rubric`: field `descriptions`: 2 description"):
        judge.grade(LIBRARY, {"criterion": "c", "descriptions": ["a", "b"]})
    with pytest.raises(ValueError, match=r"invalid field `rubric.colour`"):
        judge.grade(LIBRARY, {"criterion": "c", "descriptions": list("abcde"), "colour": 1})
    with pytest.raises(ValueError, match="no built-in rubric `wit`"):
        judge.grade(LIBRARY, "wit")
    with pytest.raises(ValueError, match="max_feedback_tokens does not apply with feedback=False"):
        judge.grade(LIBRARY, "coherence", feedback=False, max_feedback_tokens=10)
    with pytest.raises(ValueError, match="protocol: unknown protocol 'gpt'"):
        judge.grade(LIBRARY, "coherence", protocol="gpt")
    with pytest.raises(ValueError, match="1-5 only"):
        judge.grade(LIBRARY, RUBRIC, protocol="prometheus", feedback=False)


PROTOCOL = '''
name = "terse"

[absolute]
user = "Rate {{ response }} for {{ criterion_name | lower }} from {{ scale_low }} to {{ scale_high }}."
marker = "Rating:"
separator = " "
'''


def test_a_protocol_file_grades_as_the_command_line_and_bad_ones_name_the_field(cli, judge, tmp_path):
    # Issue 59: protocol= takes a protocol file's path, as --protocol does.
    path = tmp_path / "terse.toml"
    path.write_text(PROTOCOL)
    out = tmp_path / "cli.jsonl"
    cli("score", "--method", "rubric", "--rubric", "coherence", "--input", LIBRARY,
        "--protocol", path, "--no-feedback", "--no-cache", "--output", out)
    result = judge.grade(LIBRARY, "coherence", protocol=path, feedback=False)
    result.to_jsonl(tmp_path / "py.jsonl")
    assert (tmp_path / "py.jsonl").read_bytes() == out.read_bytes()
    assert result.rubric["protocol"] == "terse"
    assert result.rubric["protocol_source"] == "requested"
    path.write_text(PROTOCOL.replace("{{ response }}", "{{ respones }}"))
    with pytest.raises(ValueError, match=r"absolute\.user.*respones"):
        judge.grade(LIBRARY, "coherence", protocol=str(path), feedback=False)
    # A reasoning budget or thinking off is refused for a judge that does not think.
    with pytest.raises(ValueError, match="has no reasoning"):
        judge.grade(LIBRARY, "coherence", max_reasoning_tokens=64)
    with pytest.raises(ValueError, match="has no reasoning"):
        judge.grade(LIBRARY, "coherence", thinking=False)
    with pytest.raises(ValueError, match="max_reasoning_tokens must be a whole number"):
        judge.grade(LIBRARY, "coherence", max_reasoning_tokens=0)


def _rows(**extra):
    """Two candidates of one context, with `extra` fields on the first."""
    rows = [
        {"context_id": "d", "context": "An article.", "candidate_id": cid, "candidate": text}
        for cid, text in [("a", "A summary."), ("b", "Another summary.")]
    ]
    rows[0].update(extra)
    return rows


def test_rows_the_options_cannot_take_are_refused_before_the_model_runs(judge, tmp_path):
    # Issue 60: reference=True with rows without a `reference` is the caller's to fix,
    # named by its row, in Python's words (as the command line's exit code 2).
    with pytest.raises(ValueError) as error:
        judge.grade(_rows(reference="The gold summary."), "coherence", reference=True)
    message = str(error.value)
    assert "reference=True shows each candidate's `reference`, but candidate `b`" in message
    assert "(1 of 2 candidates have none)" in message and "--reference" not in message
    # Issue 60: a human score that is not a number is refused (it was read as NaN).
    with pytest.raises(ValueError, match=r"`scores.coherence` is a string, not a number"):
        judge.grade(_rows(scores={"coherence": "high"}), "coherence", feedback=False)
    # Issue 60: errors name Python's keywords, not the command line's flags.
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 1\n")
    with pytest.raises(ValueError) as error:
        judge.grade(LIBRARY, bad)
    assert str(error.value).startswith("rubric: "), str(error.value)
    assert "--rubric" not in str(error.value)

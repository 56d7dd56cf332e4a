"""DHP discernment (``nlg-judge dhp``): is a model a discerning judge? Perturb reference
texts (:func:`perturb`), score originals and copies with a judge (:func:`score`), test
the differences (:func:`analyze`)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _data, _native, _progress

PathLike = Union[str, "os.PathLike[str]"]
_DEFAULTS = json.loads(_native.defaults())

__all__ = ["perturb", "score", "analyze", "Analysis"]


def perturb(
    task: str,
    output: PathLike,
    *,
    data_dir: Optional[PathLike] = None,
    input: Optional[PathLike] = None,
    pair: str = "de-en",
    seed: int = 2024,
    limit: int = 100,
    perturbations: Optional[Sequence[str]] = None,
    rule_only: bool = False,
    attempts: int = 3,
    temperature: float = 0.7,
    top_p: float = 0.9,
    judge: Any = None,
    progress: Any = None,
) -> List[Dict[str, Any]]:
    """Perturb a task's reference texts (``nlg-judge dhp perturb``), one JSONL row per
    item and perturbation appended to ``output`` (a rerun makes only the missing rows).

    Args:
        task: ``summarization`` (SummEval), ``story-completion`` (Story Cloze),
            ``translation`` (WMT22) or ``question-answering`` (your ``input``).
        output: the JSONL file the rows go to.
        data_dir: the shared data sets (default: ``$NLG_JUDGE_DATA``, else
            ``../shared/data``).
        input: question answering: your JSONL with question, context, answer.
        pair: translation: ``de-en`` or ``zh-en``.
        seed: seed of the item selection and every perturbation.
        limit: number of items (the paper's 100).
        perturbations: only these (names); default all of the task's.
        rule_only: only the rule-based perturbations (no model needed).
        attempts: generations tried per LLM edit before it is recorded as failed.
        temperature, top_p: sampling of LLM edits.
        judge: the :class:`Judge` whose model makes the LLM edits (needed unless
            ``rule_only``).
        progress: None (tqdm when installed), False, or ``f(done, total, unit)``.

    Returns:
        Every row of ``output`` (dicts: item_id, task, perturbation, level, degree,
        method, context, original, perturbed, status, ...).
    """
    if data_dir is None:
        data_dir = os.environ.get("NLG_JUDGE_DATA", _DEFAULTS["data_dir"])
    _native.dhp_perturb(
        task,
        os.fspath(output),
        os.fspath(data_dir),
        None if input is None else os.fspath(input),
        pair,
        seed,
        limit,
        list(perturbations or []),
        rule_only,
        attempts,
        temperature,
        top_p,
        None if judge is None else judge._native,
        _progress.sink(progress),
    )
    with open(output, encoding="utf-8") as rows:
        return _data.jsonl_rows(rows.read())


def score(
    judge: Any,
    input: PathLike,
    output: PathLike,
    *,
    method: str = "geval",
    metrics: Optional[Sequence[str]] = None,
    no_context: bool = False,
    progress: Any = None,
) -> List[Dict[str, Any]]:
    """Score originals and perturbed copies with ``judge`` (``nlg-judge dhp score``);
    each finished metric is saved to ``output`` at once, every model answer cached.

    Args:
        judge: the :class:`Judge` to test.
        input: the rows of :func:`perturb`.
        output: score rows for :func:`analyze`.
        method: ``geval`` (the paper's), ``prompt``, ``gptscore`` or ``pairwise``.
        metrics: only these metrics (default: all of the task's).
        no_context: score the texts without their context.
        progress: None (tqdm when installed), False, or ``f(done, total, unit)``.

    Returns:
        The score rows (dicts: item, perturbation, metric, score, ...).
    """
    judge._native.dhp_score(
        os.fspath(input),
        os.fspath(output),
        method,
        list(metrics or []),
        no_context,
        _progress.sink(progress),
    )
    with open(output, encoding="utf-8") as rows:
        return _data.jsonl_rows(rows.read())


class Analysis(dict):
    """The analysis ``nlg-judge dhp analyze --json`` prints, as a dict; ``str()`` is the
    command's table."""

    def __init__(self, data: Dict[str, Any], table: str) -> None:
        super().__init__(data)
        self.table = table

    def __str__(self) -> str:
        return self.table


def analyze(
    scores: Any, *, weights: Optional[PathLike] = None, task: Optional[str] = None
) -> Analysis:
    """Wilcoxon signed-rank tests, combined p-values and discernment scores from score
    rows (``nlg-judge dhp analyze``).

    Args:
        scores: a score-row JSONL path (:func:`score`'s output), or the rows (a list
            of dicts or a DataFrame with item, perturbation, level, metric, score).
        weights: expert weights (TOML) for the weighted harmonic-mean p-value.
        task: the task, for its shipped default weights.

    Returns:
        An :class:`Analysis` (D per perturbation, D_avg, D_min, ...).
    """
    if isinstance(scores, (str, os.PathLike)):
        name = os.fspath(scores)
        with open(name, encoding="utf-8") as rows:
            text = rows.read()
    else:
        name = "the rows"
        text = "\n".join(json_text for _, json_text in _data.source(scores, "scores"))
    data, table, weighted = _native.dhp_analyze(
        text, name, None if weights is None else os.fspath(weights), task
    )
    return Analysis(json.loads(data), table)

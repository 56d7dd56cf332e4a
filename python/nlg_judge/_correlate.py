"""`correlate`: meta-evaluation of any predictions against human scores."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

from . import _data, _native
from ._results import CompareResult, Correlation, ScoreResult


def _is_field(value: Any) -> bool:
    return isinstance(value, str)


class _ByData:
    """The default of ``bootstrap=``: 1000 resamples for a result, as ``--correlate``
    does; none for arrays and fields, as ``nlg-judge correlate`` does."""

    def __repr__(self) -> str:
        return "1000 for a result, else None"


_BY_DATA: Any = _ByData()
_RESULT_RESAMPLES = 1000


def correlate(
    pred: Any,
    human: Any,
    *,
    group: Union[str, Sequence[Any], None] = None,
    system: Union[str, Sequence[Any], None] = None,
    input: Any = None,
    pred_file: Any = None,
    human_file: Any = None,
    level: str = "summary",
    skip: str = "authors",
    bootstrap: Optional[int] = _BY_DATA,
    seed: int = 0,
    ci: float = 0.95,
) -> Correlation:
    """Correlate a metric's predictions with human scores (``nlg-judge correlate``):
    Pearson, Spearman (average ranks for ties) and Kendall tau-b.

    Three ways to give the data:

    - arrays: ``correlate(pred, human, group=context_ids)`` with ``pred`` and ``human``
      sequences of numbers (lists, NumPy arrays, pandas Series), ``group`` the context
      of each item (needed at summary level) and ``system`` its system (needed at
      system level);
    - fields of rows: ``correlate("score", "scores.coherence", input=rows)`` with
      ``pred``/``human``/``group``/``system`` dotted field names (defaults
      ``context_id`` and ``system_id``) and ``input`` a JSONL path, a list of dicts or a
      DataFrame; or ``pred_file=`` (predictions) joined with ``human_file=`` (human
      scores) on (context_id, candidate_id);
    - a result: ``correlate(result, "coherence")`` with a :class:`CompareResult` or
      :class:`ScoreResult` and the human-score key: the figures ``--correlate`` prints,
      bootstrap intervals included (1000 resamples, seed 0, unless told otherwise).

    Args:
        level: ``summary`` (correlate within each group, then average), ``system``
            (per-system means) or ``pooled`` (all items at once).
        skip: summary level: ``authors`` (skip groups with constant human scores; a
            constant prediction scores 0) or ``geval`` (skip groups where either side
            is constant).
        bootstrap: resamples of the groups for confidence intervals (None: none);
            by default 1000 for a result (as ``--correlate``), none for arrays and
            fields (as ``nlg-judge correlate`` without ``--bootstrap``).
        seed: seed of the resampling.
        ci: confidence level of the intervals, in (0, 1).

    Returns:
        A :class:`Correlation` (``str()`` is the command's table, ``to_dict()`` its
        ``--json`` object).

    Raises:
        ValueError: bad values (unequal lengths, non-finite numbers, a missing field,
            too few groups).
    """
    if isinstance(pred, (CompareResult, ScoreResult)):
        key = human if isinstance(human, str) else None
        if bootstrap is _BY_DATA:
            bootstrap = _RESULT_RESAMPLES
        return pred.correlate(
            key, level=level, skip=skip, bootstrap=bootstrap, seed=seed, ci=ci
        )
    if bootstrap is _BY_DATA:
        bootstrap = None
    if _is_field(pred) or _is_field(human):
        if not (_is_field(pred) and _is_field(human)):
            raise TypeError("pred and human: give two field names, or two sequences of numbers")
        return Correlation(
            *_native.correlate(
                None,
                None if input is None else _data.source(input, "input"),
                None if pred_file is None else _data.source(pred_file, "pred_file"),
                None if human_file is None else _data.source(human_file, "human_file"),
                pred,
                human,
                "context_id" if group is None else group,
                "system_id" if system is None else system,
                level,
                skip,
                bootstrap,
                seed,
                ci,
            )
        )
    if input is not None or pred_file is not None or human_file is not None:
        raise TypeError("input=, pred_file= and human_file= take field names as pred and human")
    preds = [float(x) for x in pred]
    humans = [float(x) for x in human]
    if len(preds) != len(humans):
        raise ValueError(f"pred has {len(preds)} values, human {len(humans)}")
    if group is None:
        if level == "summary":
            raise ValueError(
                "summary level correlates within each group: give group= (the context of "
                "each item), or level='pooled'"
            )
        groups = ["" for _ in preds]
    else:
        groups = [str(g) for g in group]
    if system is None:
        if level == "system":
            raise ValueError("system level needs system= (the system of each item)")
        systems = ["" for _ in preds]
    else:
        systems = [str(s) for s in system]
    for name, values in (("group", groups), ("system", systems)):
        if len(values) != len(preds):
            raise ValueError(f"{name} has {len(values)} values, pred {len(preds)}")
    items = list(zip(groups, systems, preds, humans))
    return Correlation(
        *_native.correlate(
            items, None, None, None, None, None, "", "", level, skip, bootstrap, seed, ci
        )
    )

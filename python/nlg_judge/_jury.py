"""`Jury`: several judges of one run combined into one ranking, as the command line's
``compare``/``score --model A --model B`` (or ``--jury FILE``) combines them."""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Union

from . import _native
from ._judge import Judge
from ._results import JuryResult

Data = Any


class Jury:
    """A panel of judges: each judges the same candidates on its own (its own model, its
    own cache entries and diagnostics, through :class:`Judge`), then their results are
    combined: comparisons into one Product of Experts ranking (each judge's positional
    bias corrected first where the design lacks both orders), absolute scores by the
    weighted mean of each judge's scores standardised over the run. The agreement
    between the judges comes with the result (Spearman within contexts; Cohen's kappa of
    comparison decisions). Results equal the command line's jury for the same input.

    Every judge's model stays loaded while the Jury lives (the command line loads one at
    a time): close it (or use ``with``) to let them go.

    Args:
        judges: the judges: model names (each loaded as ``Judge(name, **options)``,
            named by the name as given, like ``--model``) or :class:`Judge` objects
            (named by their model's name). The same name or the same Judge twice is
            refused (it would be one judge with its weight doubled); two Judges of one
            model are ``name`` and ``name#2``.
        weights: None or ``"equal"`` (every judge weighs 1), ``"agreement"`` (a judge's
            mean Spearman with the others, none where negative; three judges or more, and
            where no judge agrees with another every judge weighs 1, said in
            ``JuryResult.weights_note``), or one non-negative number per judge (a jury
            file's ``weight``).
        options: keywords of :class:`Judge` for the judges given by name (``cache``,
            ``device``, ``precision``, ``progress``, ...).

    Raises:
        ValueError: no judges, a judge given twice, or bad weights (agreement weights
            for fewer than three judges).
    """

    def __init__(
        self,
        judges: Sequence[Union[str, "os.PathLike[str]", Judge]],
        weights: Union[None, str, Sequence[float]] = None,
        **options: Any,
    ) -> None:
        if isinstance(judges, (str, Judge)) or not len(judges):
            raise ValueError("judges: give a list of one judge or more (model names or Judges)")
        self._agreement = False
        self._weights: Optional[List[float]] = None
        if isinstance(weights, str):
            if weights not in ("equal", "agreement"):
                raise ValueError(f"weights: 'equal', 'agreement' or a list of numbers, not {weights!r}")
            self._agreement = weights == "agreement"
        elif weights is not None:
            self._weights = [float(w) for w in weights]
            if len(self._weights) != len(judges):
                raise ValueError(f"weights: {len(self._weights)} weights for {len(judges)} judges")
        for k, judge in enumerate(judges):
            for earlier in judges[:k]:
                same = earlier is judge or (
                    not isinstance(judge, Judge)
                    and not isinstance(earlier, Judge)
                    and os.fspath(earlier) == os.fspath(judge)
                )
                if same:
                    shown = judge.model["name"] if isinstance(judge, Judge) else os.fspath(judge)
                    raise ValueError(
                        f"judges: {shown!r} is given twice: a jury of one judge twice is that "
                        "judge alone with its weight doubled; give each judge once (weights=[...] "
                        "gives a judge its weight)"
                    )
        # Checked before any judge is loaded (as the command line's exit code 2).
        _native.check_jury_weights(len(judges), self._weights, self._agreement)
        self._own: List[Judge] = []
        self.judges: List[Judge] = []
        given_names: List[str] = []
        for judge in judges:
            if isinstance(judge, Judge):
                self.judges.append(judge)
                given_names.append(judge.model["name"])
            else:
                loaded = Judge(os.fspath(judge), **options)
                self._own.append(loaded)
                self.judges.append(loaded)
                given_names.append(os.fspath(judge))
        self.names: List[str] = []
        """The judges' names in the results (``model``, ``model#2`` for a repeat)."""
        seen: dict = {}
        for name in given_names:
            seen[name] = seen.get(name, 0) + 1
            self.names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")

    def compare(self, data: Data, attribute: str = "coherence", **options: Any) -> JuryResult:
        """Every judge compares the candidates (:meth:`Judge.compare`), then the jury
        combines the comparisons (``nlg-judge compare --model A --model B``).

        Args:
            data: the candidates (see :meth:`Judge.compare`).
            attribute: what to judge (see :meth:`Judge.compare`).
            options: the other keywords of :meth:`Judge.compare` (``design``,
                ``comparisons``, ``rank``, ``debias``, ``human_key``, ``progress``, ...),
                the same for every judge. ``design="adaptive"`` takes one judge.

        Returns:
            A :class:`JuryResult`; ``results`` holds each judge's :class:`CompareResult`.

        Raises:
            ValueError: bad options or rows, or a judge that cannot compare every
                candidate (too long for its model: a jury's judges judge the same ones).
        """
        design = options.get("design", "full")
        if design == "adaptive":
            raise ValueError(
                "design='adaptive' takes one judge: each judge would choose its own pairs"
            )
        results = [judge.compare(data, attribute, **options) for judge in self.judges]
        native = _native.jury_compare(
            self.names, [r._native for r in results], self._weights, self._agreement, design
        )
        wanted = options.get("human_key") or attribute
        return JuryResult(native, self.names, results, wanted)

    def score(self, data: Data, method: str = "geval", **options: Any) -> JuryResult:
        """Every judge scores the candidates (:meth:`Judge.score`; G-Eval's steps written
        by each judge for itself), then the jury averages their standardised scores
        (``nlg-judge score --model A --model B``).

        Args:
            data: the candidates (see :meth:`Judge.score`).
            method: ``geval``, ``prompt`` or ``gptscore``.
            options: the other keywords of :meth:`Judge.score`, the same for every judge.

        Returns:
            A :class:`JuryResult`; ``results`` holds each judge's :class:`ScoreResult`.
        """
        results = [judge.score(data, method, **options) for judge in self.judges]
        return self._scores(results, options)

    def grade(
        self, data: Data, rubric: Union[str, "os.PathLike[str]", dict] = "coherence", **options: Any
    ) -> JuryResult:
        """Every judge grades the candidates on the rubric (:meth:`Judge.grade`, each in
        its own protocol unless ``protocol`` says otherwise), then the jury averages their
        standardised scores (``nlg-judge score --method rubric --model A --model B``).

        Args:
            data: the candidates (see :meth:`Judge.grade`).
            rubric: a built-in rubric's name, a rubric file, or a dict (see
                :meth:`Judge.grade`).
            options: the other keywords of :meth:`Judge.grade`, the same for every judge.

        Returns:
            A :class:`JuryResult`; ``results`` holds each judge's :class:`ScoreResult`
            with its feedback texts and format counts.
        """
        results = [judge.grade(data, rubric, **options) for judge in self.judges]
        return self._scores(results, options)

    def _scores(self, results: List[Any], options: dict) -> JuryResult:
        native = _native.jury_scores(
            self.names, [r._native for r in results], self._weights, self._agreement
        )
        criteria = results[0].criteria
        wanted = (
            options.get("human_key")
            or options.get("attribute")
            or (criteria.lower() if criteria else None)
        )
        return JuryResult(native, self.names, results, wanted)

    def close(self) -> None:
        """Let the judges this Jury loaded go (Judges given to it stay open)."""
        for judge in self._own:
            judge.close()

    def __enter__(self) -> "Jury":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Jury({self.names!r})"

"""Results of `Judge.compare`, `Judge.score` and `correlate`: the library's values as
NumPy arrays and plain Python, with the command line's outputs of them
(`to_jsonl` writes the bytes `--output` writes; `str()` is the table it prints)."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, Iterator, List, Optional, Union

import numpy as np

from . import _data

PathLike = Union[str, "os.PathLike[str]"]

_CORRELATE_DEFAULTS = dict(level="summary", skip="authors", bootstrap=None, seed=0, ci=0.95)


def _pandas() -> Any:
    """The pandas module, or an error that says how to get it (an optional dependency:
    the package's ``pandas`` extra)."""
    try:
        import pandas
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "DataFrames need pandas, an optional dependency of nlg-judge: "
            "pip install pandas, or install the package with its extra: "
            "pip install './python[pandas]'",
            name="pandas",
        ) from error
    return pandas


def _rate(rate: Optional[dict]) -> Optional[float]:
    """`hits / total` of a library rate, None when nothing was counted."""
    if not rate or not rate.get("total"):
        return None
    return rate["hits"] / rate["total"]


def _write(path: PathLike, text: str) -> None:
    """Write through a temporary file renamed into place (as the command line does)."""
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    partial = path + ".partial"
    with open(partial, "w", encoding="utf-8", newline="") as out:
        out.write(text)
    os.replace(partial, path)


class Correlation:
    """A meta-evaluation: Pearson, Spearman and Kendall tau-b at one level, with bootstrap
    intervals when asked for. Attributes mirror ``nlg-judge correlate --json``:
    ``level``, ``pearson``, ``spearman``, ``kendall`` (None when undefined), ``n_groups``,
    ``n_items``, ``skip`` and ``n_groups_skipped`` (summary level), ``n_systems`` (system
    level), ``ci`` (dict: ``confidence``, ``resamples``, ``seed``, an interval
    ``[lower, upper]`` per coefficient, ``n_defined``). ``str()`` is the command's table;
    ``to_dict()`` its JSON object."""

    def __init__(self, report_json: str, table: str) -> None:
        self._report: Dict[str, Any] = json.loads(report_json)
        self._table = table
        for key in ("level", "pearson", "spearman", "kendall", "n_groups", "n_items"):
            setattr(self, key, self._report[key])
        self.skip: Optional[str] = self._report.get("skip")
        self.n_groups_skipped: Optional[int] = self._report.get("n_groups_skipped")
        self.n_systems: Optional[int] = self._report.get("n_systems")
        self.ci: Optional[Dict[str, Any]] = self._report.get("ci")

    def to_dict(self) -> Dict[str, Any]:
        """The object ``nlg-judge correlate --json`` prints."""
        return json.loads(json.dumps(self._report))

    def to_json(self) -> str:
        """The line ``nlg-judge correlate --json`` prints (without the newline)."""
        return json.dumps(self._report, separators=(",", ":"))

    def __str__(self) -> str:
        return self._table

    def __repr__(self) -> str:
        def fmt(x: Optional[float]) -> str:
            return "undefined" if x is None else f"{x:.4f}"

        return (
            f"Correlation(level={self.level!r}, spearman={fmt(self.spearman)}, "
            f"kendall={fmt(self.kendall)}, pearson={fmt(self.pearson)}, "
            f"n_groups={self.n_groups}, n_items={self.n_items})"
        )


class _Correlates:
    """`correlate` of a run's scores against the human scores of its input."""

    _native: Any

    def correlate(
        self,
        human_key: Optional[str] = None,
        *,
        level: str = "summary",
        skip: str = "authors",
        bootstrap: Optional[int] = 1000,
        seed: int = 0,
        ci: float = 0.95,
    ) -> Correlation:
        """Agreement of the scores with the human scores, as ``--correlate`` of
        ``compare`` and ``score`` reports it by default (summary level, 1000 bootstrap
        resamples, seed 0, 95% intervals); compare's scores as ``to_jsonl`` writes them.

        Args:
            human_key: key of the human scores (default: the run's ``human_key=``,
                else the attribute's, matched case-insensitively).
            level: ``summary`` (per context, then averaged), ``system`` (per-system
                means) or ``pooled``.
            skip: summary level: ``authors`` (skip contexts with constant human scores)
                or ``geval`` (skip where either side is constant).
            bootstrap: resamples of the contexts for confidence intervals (None: none).
            seed: seed of the resampling.
            ci: confidence level of the intervals.
        """
        return Correlation(*self._native.correlate(human_key, level, skip, bootstrap, seed, ci))



class ContextResult:
    """One context's comparisons and ranking.

    Attributes:
        context_id: the context's id.
        candidate_ids: the candidates' ids, in input order.
        probabilities: N x N NumPy array; ``[i, j]`` is P(candidate i, shown first as A,
            is better than candidate j), NaN where (i, j) was not compared (the diagonal,
            and pairs a design left out).
            With a judge that may call a tie (a protocol with a tie label), P(A) over the
            three answers A, B and tie.
        label_mass: N x N array of the label words' total probability per comparison
            (a diagnostic: little mass means a prompt the model does not answer).
        tie_probabilities: N x N array of P(tie) over the three answers, for a judge that
            may call a tie (NaN where not compared); None otherwise.
        scores: the candidates' scores (higher is better), full precision.
        ranks: 1 = best; ties share the average rank.
        first_position: P(A), the fraction of comparisons the first position won at the
            run's threshold (0.5 is unbiased); None when nothing was compared.
        consistency: fraction of pairs whose two orders agree (None without both orders).
        accuracy: pairwise accuracy against the human scores (None without them).
        adaptive: for ``design="adaptive"``: ``{"rounds": k, "ending": {"reason": ...}}``.
    """

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.context_id: str = raw["context_id"]
        self.candidate_ids: List[str] = list(raw["candidate_ids"])
        n = len(self.candidate_ids)
        self.probabilities = np.full((n, n), np.nan)
        self.label_mass = np.full((n, n), np.nan)
        self.tie_probabilities: Optional[Any] = None
        for c in raw["comparisons"]:
            self.probabilities[c["first"], c["second"]] = c["p_a"]
            self.label_mass[c["first"], c["second"]] = c["label_mass"]
            if "p_tie" in c:
                if self.tie_probabilities is None:
                    self.tie_probabilities = np.full((n, n), np.nan)
                self.tie_probabilities[c["first"], c["second"]] = c["p_tie"]
        self.comparisons: int = len(raw["comparisons"])
        self.scores = np.asarray(raw["scores"], dtype=float)
        self.ranks = np.asarray(raw["ranks"], dtype=float)
        self.first_position = _rate(raw["first_position"])
        self.consistency = _rate(raw["consistency"])
        self.accuracy = _rate(raw.get("accuracy"))
        self.adaptive: Optional[Dict[str, Any]] = raw.get("adaptive")

    def ranking(self) -> List[str]:
        """Candidate ids, best first (ties in input order)."""
        order = sorted(range(len(self.candidate_ids)), key=lambda k: (self.ranks[k], k))
        return [self.candidate_ids[k] for k in order]

    def __repr__(self) -> str:
        return (
            f"ContextResult({self.context_id!r}, {len(self.candidate_ids)} candidates, "
            f"{self.comparisons} comparisons, best {self.ranking()[0]!r})"
        )


class CompareResult(_Correlates):
    """The result of `Judge.compare`: per context the probability matrix, scores, ranks
    and bias figures (`contexts`, also by id: ``result["doc1"]``), and the run's figures.

    Attributes:
        contexts: list of :class:`ContextResult`, in input order.
        tau: the decision threshold (0.5 unless ``debias="threshold"``).
        first_position_raw: P(A) at 0.5, before debiasing.
        first_position: P(A) at ``tau``.
        consistency: fraction of pairs whose two orders agree.
        accuracy: pairwise accuracy against the human scores (None without them).
        human_key: the input's human-score key matching the attribute (or ``human_key=``).
        computed, cached: comparisons the model computed now / found in the result cache.
        set_aside: candidates too long for the model, left out of the ranking as on the
            command line (each a dict: ``context_id``, ``candidate_id``, ``tokens`` its
            comparisons need, the model's ``limit``, ``source``); the diagnostics'
            ``too_long`` check names them too.
        rank: the ranking the scores come from (``win-ratio``, ``poe``, ...).
        diagnostics: whether the judge was judging, as ``compare --output`` writes it in
            ``OUT.diagnostics.json``: ``warnings``, ``checks`` (name, value, threshold,
            warn_when, status, message, remedy) and ``adjusted`` when a default changed.
        ties: for a judge that may call a tie (a protocol with a tie label), how the
            ranking counted the ties (the diagnostics' ``tie_rate`` says how often the
            judge called one); None otherwise.
    """

    def __init__(self, native: Any) -> None:
        self._native = native
        raw = json.loads(native.to_json())
        self.rank: str = raw["rank"]
        self.diagnostics: Dict[str, Any] = raw["diagnostics"]
        self.contexts: List[ContextResult] = [ContextResult(c) for c in raw["contexts"]]
        self.tau: float = raw["tau"]
        self.first_position_raw = _rate(raw["first_position_raw"])
        self.first_position = _rate(raw["first_position"])
        self.consistency = _rate(raw["consistency"])
        self.accuracy = _rate(raw.get("accuracy"))
        self.score_field: Optional[str] = raw.get("score_field")
        self.human_key: Optional[str] = raw.get("human_key")
        self.computed: int = raw["computed"]
        self.cached: int = raw["cached"]
        self.set_aside: List[Dict[str, Any]] = raw.get("set_aside", [])
        self.ties: Optional[str] = raw.get("ties")

    def __getitem__(self, key: Union[int, str]) -> ContextResult:
        if isinstance(key, int):
            return self.contexts[key]
        for context in self.contexts:
            if context.context_id == key:
                return context
        raise KeyError(key)

    def __iter__(self) -> Iterator[ContextResult]:
        return iter(self.contexts)

    def __len__(self) -> int:
        return len(self.contexts)

    def to_jsonl(self, path: PathLike) -> None:
        """Write one line per candidate (context_id, candidate_id, score with 6 decimals,
        rank, system_id, human scores): the bytes ``nlg-judge compare --output`` writes."""
        _write(path, self._native.scores_jsonl())

    def to_records(self) -> List[Dict[str, Any]]:
        """The lines of `to_jsonl` as dicts."""
        return _data.jsonl_rows(self._native.scores_jsonl())

    def to_pandas(self) -> Any:
        """A DataFrame, one row per candidate: the columns of `to_jsonl` (scores as the
        file writes them, 6 decimals) plus ``text``; human scores as ``scores.<key>``."""
        pd = _pandas()

        texts = {}
        for context in json.loads(self._native.inputs()):
            for candidate in context["candidates"]:
                texts[(context["context_id"], candidate["candidate_id"])] = candidate["text"]
        rows = []
        for record in self.to_records():
            human = record.pop("scores", {})
            record["text"] = texts.get((record["context_id"], record["candidate_id"]))
            for key, value in human.items():
                record[f"scores.{key}"] = value
            rows.append(record)
        return pd.DataFrame(rows)

    def comparisons_to_jsonl(self, path: PathLike) -> None:
        """Write one line per comparison (context_id, a, b, p_a, label_mass): the bytes
        ``nlg-judge compare --comparisons-out`` writes."""
        _write(path, self._native.comparisons_jsonl())

    def comparisons_to_pandas(self) -> Any:
        """A DataFrame, one row per comparison (the lines of `comparisons_to_jsonl`)."""
        pd = _pandas()

        return pd.DataFrame(_data.jsonl_rows(self._native.comparisons_jsonl()))

    def __str__(self) -> str:
        return self._native.table()

    def __repr__(self) -> str:
        return (
            f"CompareResult({len(self.contexts)} contexts, "
            f"{sum(c.comparisons for c in self.contexts)} comparisons, "
            f"{self.computed} computed, {self.cached} from the cache)"
        )


class ScoreResult(_Correlates):
    """The result of `Judge.score`: one score per candidate, in input order.

    Attributes:
        method: ``prompt``, ``geval``, ``gptscore`` or ``rubric``.
        records: one dict per candidate: context_id, candidate_id, system_id, score,
            and for prompt scoring, G-Eval and rubric grading ``distribution`` (scores,
            raw, normalised, expectation, argmax, mass); with a rubric feedback
            ``feedback`` and ``format``; ``human``: the input's human scores.
        scores: NumPy array of the scores (expected score; GPTScore: mean token
            log-probability).
        criteria, scale, steps: G-Eval's criterion name, scale [low, high] and the
            evaluation steps used (given, cached or written by the model); for rubric
            grading the rubric's name and scale.
        rubric: rubric grading: ``name``, ``criterion``, ``protocol``,
            ``protocol_source`` (``requested``, ``card`` or ``default``) and
            ``max_feedback_tokens`` (None without feedback); None for other methods.
        feedback: rubric grading with feedback: each candidate's feedback (the text
            before the result marker), in record order; None otherwise.
        formats: rubric grading with feedback: whether each feedback kept to the format
            (``kept``, ``no-score``, ``repeated``, ``missing``, ``cut``); None otherwise.
        format_counts: those outcomes counted (``kept``, ``no_score``, ``repeated``,
            ``missing``, ``cut``), as the diagnostics' ``format`` check reports them.
        computed, cached: results the model computed now / found in the result cache.
        diagnostics: whether the judge was judging (label mass, ties, G-Eval's steps, a
            rubric judge's format), as ``score --output`` writes it in
            ``OUT.diagnostics.json``.
    """

    def __init__(self, native: Any) -> None:
        self._native = native
        raw = json.loads(native.to_json())
        self.method: str = raw["method"]
        self.diagnostics: Dict[str, Any] = raw["diagnostics"]
        self.records: List[Dict[str, Any]] = raw["candidates"]
        self.scores = np.asarray([c["score"] for c in self.records], dtype=float)
        self.criteria: Optional[str] = raw.get("criteria")
        self.scale: Optional[List[int]] = raw.get("scale")
        self.steps: Optional[str] = raw.get("steps")
        self.rubric: Optional[Dict[str, Any]] = raw.get("rubric")
        self.format_counts: Optional[Dict[str, int]] = raw.get("format_counts")
        with_feedback = self.format_counts is not None
        self.feedback: Optional[List[str]] = (
            [c.get("feedback") for c in self.records] if with_feedback else None
        )
        self.formats: Optional[List[str]] = (
            [c.get("format") for c in self.records] if with_feedback else None
        )
        self.computed: int = raw["computed"]
        self.cached: int = raw["cached"]

    def __len__(self) -> int:
        return len(self.records)

    def to_jsonl(self, path: PathLike) -> None:
        """Write one line per candidate: the bytes ``nlg-judge score --output`` writes."""
        _write(path, self._native.scores_jsonl())

    def to_records(self) -> List[Dict[str, Any]]:
        """The lines of `to_jsonl` as dicts."""
        return _data.jsonl_rows(self._native.scores_jsonl())

    def to_pandas(self) -> Any:
        """A DataFrame, one row per candidate: context_id, candidate_id, system_id, score,
        argmax, label_mass, ``p.<score>`` (normalised probabilities), ``raw.<score>``, for
        rubric grading with feedback ``feedback`` and ``format``, and ``scores.<key>``
        (human scores)."""
        pd = _pandas()

        rows = []
        for record in self.to_records():
            for name, prefix in (("probabilities", "p."), ("raw_probabilities", "raw."), ("scores", "scores.")):
                for key, value in record.pop(name, {}).items():
                    record[prefix + key] = value
            rows.append(record)
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        mean = float(np.mean(self.scores)) if len(self.scores) else math.nan
        return (
            f"ScoreResult({self.method}, {len(self.records)} candidates, mean {mean:.4f}, "
            f"{self.computed} computed, {self.cached} from the cache)"
        )


def _matrix(rows: Optional[List[List[Optional[float]]]]) -> Optional[Any]:
    """A matrix of the library's (None where undefined) as a NumPy array with NaN."""
    if rows is None:
        return None
    return np.asarray([[np.nan if v is None else v for v in row] for row in rows], dtype=float)


class JuryContext:
    """One context of a jury's result.

    Attributes:
        context_id: the context's id.
        candidate_ids: the candidates' ids, in input order.
        scores: the jury's scores (higher is better).
        ranks: 1 = best; ties share the average rank.
        judge_scores: judges x candidates NumPy array of each judge's own scores.
    """

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.context_id: str = raw["context_id"]
        self.candidate_ids: List[str] = list(raw["candidate_ids"])
        self.scores = np.asarray(raw["scores"], dtype=float)
        self.ranks = np.asarray(raw["ranks"], dtype=float)
        self.judge_scores = np.asarray(raw["judge_scores"], dtype=float)

    def ranking(self) -> List[str]:
        """Candidate ids, best first (ties in input order)."""
        order = sorted(range(len(self.candidate_ids)), key=lambda k: (self.ranks[k], k))
        return [self.candidate_ids[k] for k in order]

    def __repr__(self) -> str:
        return (
            f"JuryContext({self.context_id!r}, {len(self.candidate_ids)} candidates, "
            f"best {self.ranking()[0]!r})"
        )


class JuryResult:
    """The result of a :class:`Jury`: each judge's own result, the combined ranking and
    how the judges agree, as ``compare``/``score --model A --model B`` computes them.

    Attributes:
        judges: one dict per judge: ``name`` and ``weight`` (as used).
        names: the judges' names (a model named twice is ``model#2`` the second time).
        results: each judge's own result by name (:class:`CompareResult` or
            :class:`ScoreResult`).
        contexts: list of :class:`JuryContext`, in input order (also by id:
            ``result["doc1"]``).
        spearman: judges x judges NumPy array: Spearman's correlation between two judges'
            scores within each context, averaged over contexts (NaN where undefined).
        kappa: for comparisons, judges x judges Cohen's kappa of their decisions on the
            comparisons both made (NaN where undefined); None for scores.
        diagnostics: what the jury's ``--output`` sidecar ``OUT.diagnostics.json`` holds:
            ``judges`` (each judge's diagnostics by name), ``weights``, ``agreement``
            (and ``weights_note`` where the jury has one).
        weights_note: None, or why the weights are not the ones asked for (agreement
            weights that were all 0: every judge weighs 1 instead).
    """

    def __init__(
        self, native: Any, names: List[str], results: List[Any], wanted: Optional[str]
    ) -> None:
        self._native = native
        self._wanted = wanted
        raw = json.loads(native.to_json())
        self.judges: List[Dict[str, Any]] = raw["judges"]
        self.names: List[str] = list(names)
        self.results: Dict[str, Any] = dict(zip(names, results))
        self.contexts: List[JuryContext] = [JuryContext(c) for c in raw["contexts"]]
        self.spearman = _matrix(raw["agreement"]["spearman"])
        self.kappa = _matrix(raw["agreement"].get("kappa"))
        self.diagnostics: Dict[str, Any] = json.loads(native.diagnostics_json())
        self.weights_note: Optional[str] = raw.get("weights_note")

    def __getitem__(self, key: Union[int, str]) -> JuryContext:
        if isinstance(key, int):
            return self.contexts[key]
        for context in self.contexts:
            if context.context_id == key:
                return context
        raise KeyError(key)

    def __iter__(self) -> Iterator[JuryContext]:
        return iter(self.contexts)

    def __len__(self) -> int:
        return len(self.contexts)

    def to_jsonl(self, path: PathLike) -> None:
        """Write one line per candidate (context_id, candidate_id, the jury's score and
        rank, each judge's score under ``judges``, system_id, human scores): the bytes a
        jury's ``--output`` holds."""
        _write(path, self._native.scores_jsonl())

    def to_records(self) -> List[Dict[str, Any]]:
        """The lines of `to_jsonl` as dicts."""
        return _data.jsonl_rows(self._native.scores_jsonl())

    def to_pandas(self) -> Any:
        """A DataFrame, one row per candidate: the columns of `to_jsonl`, each judge's
        score as ``judge.<name>`` and the human scores as ``scores.<key>``."""
        pd = _pandas()

        rows = []
        for record in self.to_records():
            for name, prefix in (("judges", "judge."), ("scores", "scores.")):
                for key, value in record.pop(name, {}).items():
                    record[prefix + key] = value
            rows.append(record)
        return pd.DataFrame(rows)

    def correlate(
        self,
        human_key: Optional[str] = None,
        *,
        judge: Optional[str] = None,
        level: str = "summary",
        skip: str = "authors",
        bootstrap: Optional[int] = 1000,
        seed: int = 0,
        ci: float = 0.95,
    ) -> Correlation:
        """Agreement of the jury's scores (or one judge's, by name) with the human
        scores, as :meth:`CompareResult.correlate` measures it.

        Args:
            human_key: key of the human scores (default: the one the judges matched to
                the attribute, else the attribute's).
            judge: a judge's name for that judge's scores instead of the jury's.
            level: ``summary``, ``system`` or ``pooled``.
            skip: summary level: ``authors`` or ``geval``.
            bootstrap: resamples of the contexts for confidence intervals (None: none).
            seed: seed of the resampling.
            ci: confidence level of the intervals.
        """
        index = None
        if judge is not None:
            if judge not in self.names:
                raise ValueError(f"judge: no judge {judge!r} (judges: {', '.join(self.names)})")
            index = self.names.index(judge)
        return Correlation(
            *self._native.correlate(
                human_key, self._wanted, index, level, skip, bootstrap, seed, ci
            )
        )

    def __str__(self) -> str:
        return self._native.table()

    def __repr__(self) -> str:
        judges = ", ".join(f"{j['name']} ({j['weight']:g})" for j in self.judges)
        return f"JuryResult({len(self.contexts)} contexts, judges {judges})"

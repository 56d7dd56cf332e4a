"""Reference-based metrics (``nlg-judge metric``): BLEU, chrF and chrF++ (equal to
sacrebleu 2.x), ROUGE-1/2/L (equal to Google's rouge-score), BERTScore F1
(all-MiniLM-L6-v2, fetched on first use).

Each function scores one candidate (a string; returns a float) or several (a list;
returns a list), each against its references: a string, or a list of strings (several
references, aggregated by ``agg``). For many candidates, ``references`` is a list with
one entry (string or list) per candidate. :func:`score` runs the command itself on
rows (the generic JSONL format with ``reference`` or ``references``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from . import _data, _native, _progress

Texts = Union[str, Sequence[str]]
References = Union[str, Sequence[Union[str, Sequence[str]]]]

__all__ = ["score", "bleu", "chrf", "rouge", "bertscore", "corpus"]


def score(
    data: Any,
    metric: Union[str, Sequence[str]] = "bleu,chrf,chrf++,rouge1,rouge2,rougeL",
    *,
    paraphrases: Any = None,
    agg: str = "max",
    stemmer: bool = False,
    idf: bool = False,
    progress: Any = None,
) -> List[Dict[str, Any]]:
    """Score every row of ``data`` (``nlg-judge metric``): one dict per row with
    ``context_id``, ``candidate_id``, ``system_id``, ``metrics`` (by metric name) and
    ``human`` (the row's human scores), exactly the lines the command writes.

    Args:
        data: a JSONL path, a list of dicts or a DataFrame with ``context_id``,
            ``candidate_id``, ``candidate`` and ``reference`` (a string) or
            ``references`` (a list).
        metric: comma-separated names or a list: bleu, chrf, chrf++, rouge1, rouge2,
            rougeL, bertscore.
        paraphrases: a ``nlg-judge paraphrase`` output file: each reference's
            paraphrases join the references (Para-Ref).
        agg: several references: ``max`` (best reference), ``mean``, or ``native``
            (sacrebleu's pooled counts for BLEU, rouge-score's score_multi for ROUGE).
        stemmer: Porter stemmer for ROUGE.
        idf: BERTScore: idf weights over all references.
        progress: None (tqdm when installed), False, or ``f(done, total, unit)``.
    """
    names = [m for m in (metric.split(",") if isinstance(metric, str) else metric)]
    text = _native.metric_rows(
        _data.source(data),
        [n.strip() for n in names],
        None if paraphrases is None else str(paraphrases),
        agg,
        stemmer,
        idf,
        _progress.sink(progress),
    )
    return _data.jsonl_rows(text)


def _rows(candidates: Texts, references: References) -> tuple:
    single = isinstance(candidates, str)
    cands = [candidates] if single else list(candidates)
    if single:
        refs = [references]
    elif isinstance(references, str):
        raise ValueError(
            "references: give one entry (a string or a list of strings) per candidate"
        )
    else:
        refs = list(references)
    if len(refs) != len(cands):
        raise ValueError(f"{len(cands)} candidates but {len(refs)} references")
    rows = []
    for i, (candidate, reference) in enumerate(zip(cands, refs)):
        row: Dict[str, Any] = {"context_id": "0", "candidate_id": str(i), "candidate": candidate}
        if isinstance(reference, str):
            row["reference"] = reference
        else:
            row["references"] = list(reference)
        rows.append(row)
    return single, rows


def _one(metric: str, candidates: Texts, references: References, **options: Any) -> Any:
    single, rows = _rows(candidates, references)
    lines = score(rows, [metric], progress=False, **options)
    values = [line["metrics"][metric] for line in lines]
    return values[0] if single else values


def bleu(candidates: Texts, references: References, *, agg: str = "max") -> Any:
    """Sentence BLEU (sacrebleu's sentence_bleu: 13a tokenisation, exponential
    smoothing) of each candidate against its references; ``agg``: ``max``, ``mean`` or
    ``native`` (pooled counts over the references)."""
    return _one("bleu", candidates, references, agg=agg)


def chrf(
    candidates: Texts, references: References, *, word_order: int = 0, agg: str = "max"
) -> Any:
    """chrF (``word_order=0``) or chrF++ (``word_order=2``), as sacrebleu's
    sentence_chrf; ``agg``: ``max``, ``mean`` or ``native`` (the best reference)."""
    if word_order not in (0, 2):
        raise ValueError("word_order: 0 (chrF) or 2 (chrF++)")
    return _one("chrf" if word_order == 0 else "chrf++", candidates, references, agg=agg)


def rouge(
    candidates: Texts,
    references: References,
    *,
    kind: str = "rougeL",
    stemmer: bool = False,
    agg: str = "max",
) -> Any:
    """ROUGE F-measure as rouge-score computes it; ``kind``: ``rouge1``, ``rouge2`` or
    ``rougeL``; ``stemmer``: Porter stemming; ``agg``: ``max``, ``mean`` or ``native``
    (rouge-score's score_multi)."""
    return _one(kind, candidates, references, agg=agg, stemmer=stemmer)


def bertscore(
    candidates: Texts, references: References, *, idf: bool = False, agg: str = "max"
) -> Any:
    """BERTScore F1 with all-MiniLM-L6-v2 (last layer, greedy matching); ``idf``: idf
    weights over the given references."""
    return _one("bertscore", candidates, references, agg=agg, idf=idf)


def corpus(candidates: Sequence[str], references: Sequence[Union[str, Sequence[str]]]) -> Dict[str, float]:
    """Corpus-level BLEU, chrF and chrF++ (sacrebleu's corpus_score; all references),
    as ``nlg-judge metric --corpus``: ``{"bleu", "chrf", "chrf++"}``."""
    refs = [[r] if isinstance(r, str) else list(r) for r in references]
    b, c, cpp = _native.corpus_metrics(list(candidates), refs)
    return {"bleu": b, "chrf": c, "chrf++": cpp}

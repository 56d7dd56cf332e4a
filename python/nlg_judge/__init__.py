"""nlg-judge: evaluate generated text with local open language models.

Pairwise comparative assessment, G-Eval, prompt scoring, GPTScore and rubric grading on
a local model (:class:`Judge`), juries of several (:class:`Jury`), meta-evaluation
against human scores (:func:`correlate`), reference-based metrics
(:mod:`nlg_judge.metrics`) and the DHP discernment benchmark (:mod:`nlg_judge.dhp`),
on the Rust engine of the ``nlg-judge`` command: same routes,
same result cache, same numbers.

    >>> import nlg_judge
    >>> judge = nlg_judge.Judge()                      # SmolLM2-135M-Instruct, loaded once
    >>> result = judge.compare("examples/data/library.jsonl", "coherence", rank="soft")
    >>> result[0].probabilities                        # N x N, NaN where not compared
    >>> result.to_pandas()
    >>> nlg_judge.correlate(result, "coherence")

Errors: ``ValueError`` for bad input (options, rows: the message names the row or line
and the field), :class:`NlgJudgeError` for the rest; Ctrl-C raises
``KeyboardInterrupt`` and loses nothing computed.
"""

from ._native import NlgJudgeError, __version__
from ._judge import Judge
from ._jury import Jury
from ._results import (
    CompareResult,
    ContextResult,
    Correlation,
    JuryContext,
    JuryResult,
    ScoreResult,
)
from ._correlate import correlate
from . import dhp, metrics

__all__ = [
    "Judge",
    "Jury",
    "CompareResult",
    "ContextResult",
    "ScoreResult",
    "JuryResult",
    "JuryContext",
    "Correlation",
    "correlate",
    "metrics",
    "dhp",
    "NlgJudgeError",
    "__version__",
]

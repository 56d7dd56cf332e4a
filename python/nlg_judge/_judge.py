"""`Judge`: a local judge model loaded once, and the methods that use it."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _data, _native, _progress
from ._results import CompareResult, ScoreResult

_DEFAULTS: Dict[str, int] = json.loads(_native.defaults())
PathLike = Union[str, "os.PathLike[str]"]
Data = Any  # list of dicts, pandas.DataFrame, or a JSONL path


def _path(value: Optional[PathLike]) -> Optional[str]:
    return None if value is None else os.fspath(value)


class Judge:
    """A judge model, loaded once (on its own worker thread) and reused by every call.

    Model work runs without the interpreter's lock: other Python threads run meanwhile,
    and two Judges in two threads work side by side. Ctrl-C stops a call within a second
    with ``KeyboardInterrupt``; every model answer computed before is kept in the result
    cache, so calling again resumes where it stopped. Results equal the command line's
    for the same input and options (same routes, same cache).

    Args:
        model: a card name (``nlg-judge models list``; fetched into the model cache on
            first use), a ``.gguf`` file, or a directory with ``config.json``,
            safetensors weights and ``tokenizer.json`` (``--model``).
        device: ``auto`` (a GPU when compiled in and present, else the CPU), ``cpu``,
            ``cuda[:N]`` or ``metal`` (``--device``).
        precision: arithmetic of the model's matrix products on the CPU: ``f32``
            (exact, the default here), ``bf16``, ``int8``, or ``auto`` (f32, or bf16
            where f32 would not fit in the available memory; the command line's
            default) (``--precision``). Results are cached per precision.
        cache: the result cache (SQLite file): None for the default
            (``$NLG_JUDGE_CACHE/results.sqlite``, else the user cache directory), a
            path, or False for none (``--no-cache``: everything computed anew).
        weights: quantized GGUF weights: ``auto`` (dequantised to f32 on the CPU),
            ``f32`` or ``quantized`` (``--weights``).
        max_batch_tokens: most tokens one forward pass computes (``--max-batch-tokens``).
        max_batch_rows: most sequences one forward pass computes (``--max-batch-rows``).
        max_arena_mib: most memory, in MiB, for keys and values: generation's rows and
            prefix cache together, and the level plan's shared prefixes (bf16 on a GPU); a
            run that needs more goes in waves, with the same results within rounding
            (``--max-arena-mib``). The default is lowered at load to what fits beside the
            weights (said on stderr).
        strategy: ``tree`` (shared prefixes computed once) or ``naive`` (every prompt on
            its own; same results) (``--strategy``).
        backend: a model served by an engine instead of loaded here (``--backend``; see
            docs/engines.md): the OpenAI-compatible base address of vLLM, SGLang, TGI,
            llama.cpp's server or ``nlg-judge serve`` (``"http://gpu-node:8000/v1"``),
            with ``model`` the name the engine serves; or a dict with ``url`` and any of
            ``tokenizer`` (a card, a .gguf file or the model's directory; default: the
            card named like ``model``), ``token_file`` (else the environment variable
            ``NLG_JUDGE_BACKEND_TOKEN``), ``ca_file``, ``timeout_seconds``, ``retries``,
            ``concurrency``, ``top_k``, ``accept_top_k_only``, as the command line's
            flags. ``device``, ``precision`` and ``weights`` then keep their defaults.
        progress: how loading reports progress (see ``nlg_judge._progress``): None for
            tqdm when installed, False for silence, or a callback ``f(done, total, unit)``.

    Raises:
        ValueError: an unknown option value.
        NlgJudgeError: the model cannot be found, fetched or loaded.
    """

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        device: str = "auto",
        precision: str = "f32",
        cache: Union[None, bool, PathLike] = None,
        *,
        weights: str = "auto",
        max_batch_tokens: int = _DEFAULTS["max_batch_tokens"],
        max_batch_rows: int = _DEFAULTS["max_batch_rows"],
        max_arena_mib: int = _DEFAULTS["max_arena_mib"],
        strategy: str = "tree",
        backend: Union[None, str, Dict[str, Any]] = None,
        progress: Any = None,
    ) -> None:
        for name, value in (
            ("max_batch_tokens", max_batch_tokens),
            ("max_batch_rows", max_batch_rows),
            ("max_arena_mib", max_arena_mib),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number of at least 0, got {value!r}")
        if cache is True:
            cache = None
        backend_json = None
        if backend is not None:
            config = {"url": backend} if isinstance(backend, str) else dict(backend)
            for name, value, default in (
                ("device", device, "auto"),
                ("precision", precision, "f32"),
                ("weights", weights, "auto"),
            ):
                if value != default:
                    raise ValueError(
                        f"{name}={value!r} applies to a model loaded here, not to one served "
                        "by a backend (the engine's own settings decide)"
                    )
            for key in ("token_file", "ca_file"):
                if config.get(key) is not None:
                    config[key] = os.fspath(config[key])
            backend_json = json.dumps(config)
        self._native = _native.NativeJudge(
            os.fspath(model),
            device,
            precision,
            None if cache is False else _path(cache),
            cache is False,
            weights,
            max_batch_tokens,
            max_batch_rows,
            max_arena_mib,
            strategy,
            backend_json,
            _progress.sink(progress),
        )
        self.model: Dict[str, Any] = json.loads(self._native.info())
        """The loaded model: name, architecture, kind, fingerprint (sha256 of the weights,
        with the precision), context_window; and ``cache``: the result cache's location."""

    def compare(
        self,
        data: Data,
        attribute: str = "coherence",
        *,
        adjective: Optional[str] = None,
        question: Optional[str] = None,
        template: str = "c1",
        task: str = "summary",
        item: Optional[str] = None,
        context_label: Optional[str] = None,
        design: str = "full",
        comparisons: Optional[int] = None,
        rounds: Optional[int] = None,
        round_size: Optional[int] = None,
        stop_when: Optional[str] = None,
        seed: int = 0,
        rank: Optional[str] = None,
        debias: str = "none",
        human_key: Optional[str] = None,
        progress: Any = None,
    ) -> CompareResult:
        """Rank the candidates of each context by pairwise comparisons (``nlg-judge
        compare``): P(A better than B) from the label words' probabilities.

        Args:
            data: the candidates, one per row with ``context_id``, ``context``,
                ``candidate_id``, ``candidate`` and optional ``reference``,
                ``system_id``, ``scores`` (human scores by name): a list of dicts, a
                pandas DataFrame (``scores.<key>`` columns are read as ``scores``), or a
                JSONL file's path. Every context needs two candidates or more.
            attribute: what to judge: built in coherence, consistency, fluency,
                relevance, naturalness, continuity, engagingness, grammaticality,
                semantics, groundedness, understandability; any other word with
                ``adjective`` or ``question``.
            adjective: the comparative the question uses ("more empathetic").
            question: the whole question instead, without ", A or B?".
            template: ``c1`` or ``c2`` (the paper's prompts) or a template file.
            task: ``summary``, ``dialogue``, ``data-to-text`` or ``custom`` (prompt
                nouns; ``custom`` takes ``item`` and ``context_label``).
            item: what a candidate is called in the prompt ("Story").
            context_label: what the context is called in the prompt ("Prompt").
            design: ``full`` (all N(N-1) ordered pairs), ``random``, ``no-repeat``,
                ``symmetric`` (R comparisons per context) or ``adaptive`` (rounds where
                the ranking is least sure).
            comparisons: R, comparisons per context for the random, no-repeat and
                symmetric designs; the budget of the adaptive one.
            rounds: adaptive design: rounds after the first.
            round_size: adaptive design: comparisons per round after the first.
            stop_when: adaptive design: ``"stable:0.95"`` or ``"ci:1.0"``.
            seed: seed of the random designs (mixed with each context id).
            rank: ``win-ratio``, ``soft``, ``bradley-terry`` or ``poe``; None: the
                command line's default (win-ratio; poe for the adaptive design).
            debias: ``none`` or ``threshold`` (the run's threshold so that the first
                position wins half of the comparisons).
            human_key: key of the human scores for accuracy (default: the attribute's
                name, matched case-insensitively).
            progress: None (tqdm when installed), False, or ``f(done, total, unit)``.

        Returns:
            A :class:`CompareResult`.

        Raises:
            ValueError: bad options or a bad row (the message names the row or line and
                the field).
            NlgJudgeError: the model or the cache failed.
            KeyboardInterrupt: Ctrl-C (what was computed is cached).
        """
        return CompareResult(
            self._native.compare(
                _data.source(data),
                attribute,
                adjective,
                question,
                _path(template),
                task,
                item,
                context_label,
                design,
                comparisons,
                rounds,
                round_size,
                stop_when,
                seed,
                rank,
                debias,
                human_key,
                _progress.sink(progress),
            )
        )

    def score(
        self,
        data: Data,
        method: str = "geval",
        *,
        attribute: Optional[str] = None,
        adjective: Optional[str] = None,
        human_key: Optional[str] = None,
        task: str = "summary",
        criteria: Optional[PathLike] = None,
        criteria_text: Optional[str] = None,
        task_prompt: Optional[str] = None,
        steps: Optional[PathLike] = None,
        max_step_tokens: int = _DEFAULTS["max_step_tokens"],
        scale: Optional[str] = None,
        reference: bool = False,
        progress: Any = None,
    ) -> ScoreResult:
        """Score each candidate on its own (``nlg-judge score``).

        Args:
            data: the candidates (see :meth:`compare`); a context may have one.
            method: ``geval`` (G-Eval: criteria, evaluation steps written once by the
                model and cached, form filling; expectation over the scale), ``prompt``
                (ask for a 1-10 score; expectation) or ``gptscore`` (mean
                log-likelihood of the candidate).
            attribute: the attribute (G-Eval's built-in criteria: coherence,
                consistency, fluency, relevance; naturalness, coherence, engagingness,
                groundedness, understandability for dialogue; fluency, grammar,
                semantics for data-to-text). Needed unless ``criteria_text`` names it.
            adjective: GPTScore: the adjective of an attribute that is not built in
                ("empathetic"). Prompt scoring needs none (its prompt names the
                attribute) and refuses one.
            human_key: key of the human scores for :meth:`ScoreResult.correlate`
                (default: the attribute's name).
            task: ``summary``, ``dialogue``, ``data-to-text`` or ``custom``.
            criteria: G-Eval criteria file (TOML: name, scale, introduction, criterion).
            criteria_text: G-Eval criteria as free text, e.g. ``"Coherence (1-5):
                evaluate the logical flow..."`` (scale from the range, else ``scale``).
            task_prompt: G-Eval task introduction, replacing the criteria's own.
            steps: G-Eval evaluation steps from this file instead of the model's.
            max_step_tokens: most tokens the model may write for the steps.
            scale: ``"LOW-HIGH"`` (prompt scoring: default 1-10; G-Eval: replaces the
                criteria's scale).
            reference: G-Eval: show each candidate's ``reference`` as the expected
                output.
            progress: None (tqdm when installed), False, or ``f(done, total, unit)``.

        Returns:
            A :class:`ScoreResult`.

        Raises:
            ValueError: bad options or a bad row. NlgJudgeError: model or cache failures.
            KeyboardInterrupt: Ctrl-C (what was computed is cached).
        """
        return ScoreResult(
            self._native.score(
                _data.source(data),
                method,
                attribute,
                adjective,
                human_key,
                task,
                _path(criteria),
                criteria_text,
                task_prompt,
                _path(steps),
                max_step_tokens,
                scale,
                reference,
                _progress.sink(progress),
            )
        )

    def grade(
        self,
        data: Data,
        rubric: Union[str, PathLike, Dict[str, Any]] = "coherence",
        *,
        protocol: Union[str, PathLike, None] = None,
        feedback: bool = True,
        max_feedback_tokens: Optional[int] = None,
        max_reasoning_tokens: Optional[int] = None,
        thinking: bool = True,
        reference: bool = False,
        task: str = "summary",
        attribute: Optional[str] = None,
        human_key: Optional[str] = None,
        progress: Any = None,
    ) -> ScoreResult:
        """Grade each candidate on a rubric in the judge model's own format (``nlg-judge
        score --method rubric``): the model writes a feedback, then its score is read as
        its distribution over the scale right after the result marker (``[RESULT] ``,
        ``<score>``, ``Score:``).

        Args:
            data: the candidates (see :meth:`compare`); a context may have one.
            rubric: a built-in rubric's name (``"coherence"``, ``"dialogue/engagingness"``;
                a name alone is taken from ``task``'s group), a rubric file (``.toml`` or
                ``.json``, see rubrics/README.md), or a dict with ``criterion`` and
                ``descriptions`` (one per score, lowest first) and optionally ``name``,
                ``scale`` ([low, high], default [1, 5]), ``instruction`` and ``sections``
                (``{"source", "reference", "output"}`` headings; default: ``task``'s).
            protocol: a built-in protocol's name (``prometheus``, ``flow-judge``,
                ``plain``, ...) or a protocol file (``.toml``, see
                rubrics/protocols/README.md) (default: the model card's, so
                prometheus-7b-v2 and flow-judge-v0.1 grade in their own; plain for every
                other model).
            feedback: write a feedback before the score (one generation per candidate);
                False reads the score right after the rubric prompt and the marker.
            max_feedback_tokens: most tokens of each feedback (default 512; a feedback
                cut there gets the marker appended and counts as ``cut`` in
                ``format_counts``).
            max_reasoning_tokens: a thinking judge's (a protocol with reasoning
                markers) most tokens of reasoning before its feedback (default 1024); a
                reasoning cut there is closed before the verdict is read and counts as
                ``unclosed_reasoning`` in ``format_counts``.
            thinking: False switches a thinking judge's thinking off, where its protocol
                says how (Qwen3's empty ``<think></think>``).
            reference: show each candidate's ``reference`` as the reference answer
                (Prometheus' "Reference Answer (Score 5)").
            task: ``summary``, ``dialogue``, ``data-to-text`` or ``custom``: picks a
                built-in rubric's group and a dict rubric's headings.
            attribute: names the human scores for :meth:`ScoreResult.correlate`
                (default: the rubric's name).
            human_key: key of the human scores (default: the attribute's).
            progress: None (tqdm when installed), False, or ``f(done, total, unit)``.

        Returns:
            A :class:`ScoreResult` with ``feedback`` (each candidate's feedback text),
            ``formats`` and ``format_counts`` (whether the judge kept to its format), and
            ``rubric`` (name, criterion, protocol and where it came from);
            ``to_pandas()`` has the columns ``feedback`` and ``format``.

        Raises:
            ValueError: bad options, an unknown rubric or a bad dict (the message names
                the field), or a bad row. NlgJudgeError: model or cache failures.
            KeyboardInterrupt: Ctrl-C (what was computed is cached).
        """
        if not feedback and max_feedback_tokens is not None:
            raise ValueError(
                "max_feedback_tokens does not apply with feedback=False (no feedback is written)"
            )
        tokens = _DEFAULTS["max_feedback_tokens"] if max_feedback_tokens is None else max_feedback_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValueError(f"max_feedback_tokens must be a whole number of at least 1, got {tokens!r}")
        if max_reasoning_tokens is not None and (
            isinstance(max_reasoning_tokens, bool)
            or not isinstance(max_reasoning_tokens, int)
            or max_reasoning_tokens < 1
        ):
            raise ValueError(
                f"max_reasoning_tokens must be a whole number of at least 1, got {max_reasoning_tokens!r}"
            )
        if isinstance(rubric, dict):
            name, given = None, json.dumps(rubric)
        elif isinstance(rubric, (str, os.PathLike)):
            name, given = os.fspath(rubric), None
        else:
            raise ValueError(
                f"rubric: give a built-in rubric's name, a rubric file or a dict, not {type(rubric).__name__}"
            )
        return ScoreResult(
            self._native.grade(
                _data.source(data),
                name,
                given,
                None if protocol is None else os.fspath(protocol),
                feedback,
                tokens,
                max_reasoning_tokens,
                bool(thinking),
                reference,
                task,
                attribute,
                human_key,
                _progress.sink(progress),
            )
        )

    def labels(
        self,
        prompt: str,
        labels: Sequence[str],
        *,
        answer_prefix: str = "",
        chat: bool = False,
        system: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Log-probabilities of a few label words after a prompt (``nlg-judge labels``).

        Args:
            prompt: the user's message.
            labels: the label words; leading spaces matter (" A" and "A" differ).
            answer_prefix: text that opens the answer before the labels ("Summary").
            chat: render the prompt with the model's chat template.
            system: the system message with ``chat`` (default: the model's own).

        Returns:
            ``{"labels": [{"text", "token_ids", "logprob", "prob_normalised"}, ...],
            "label_mass", "prompt_tokens", "rendered"}`` (``rendered``: the prompt as
            the model reads it).
        """
        if isinstance(labels, str):
            labels = [labels]
        return json.loads(self._native.labels(prompt, list(labels), answer_prefix, chat, system))

    def geval(
        self,
        output: str,
        criteria: Union[str, Dict[str, Any]] = "coherence",
        *,
        context: Optional[str] = None,
        expected_output: Optional[str] = None,
        task_prompt: Optional[str] = None,
        task: Optional[str] = None,
        steps: Optional[str] = None,
        scale: Optional[Sequence[int]] = None,
        max_step_tokens: int = _DEFAULTS["max_step_tokens"],
        progress: Any = None,
    ) -> Dict[str, Any]:
        """G-Eval of one output: what the service's ``POST /v1/geval`` answers, computed
        as ``score(method="geval")`` computes it (same prompts, same cache).

        Args:
            output: the text to rate.
            criteria: a built-in criterion name ("coherence"), the criterion as free
                text ("Empathy (1-5): how warm the reply is."; its scale from the
                range), or a dict with ``name``, ``criterion`` and optional
                ``introduction`` and ``scale`` ([low, high]).
            context: the input the output was written for (the source text).
            expected_output: the expected output (reference-based rating).
            task_prompt: the task introduction, replacing the criterion's own.
            task: ``summary`` (default), ``dialogue``, ``data-to-text`` or ``custom``.
            steps: evaluation steps (text) instead of the model's own.
            scale: ``[low, high]`` instead of the criterion's scale.
            max_step_tokens: most tokens the model may write for the steps.
            progress: None (tqdm when installed), False, or ``f(done, total, unit)``.

        Returns:
            ``{"score", "argmax", "probabilities", "raw_probabilities", "label_mass",
            "steps", "scale", "scale_source", "criteria_name"}``.
        """
        body: Dict[str, Any] = {"output": output, "criteria": criteria}
        for key, value in (
            ("context", context),
            ("expected_output", expected_output),
            ("task_prompt", task_prompt),
            ("task", task),
            ("steps", steps),
            ("scale", list(scale) if scale is not None else None),
        ):
            if value is not None:
                body[key] = value
        return json.loads(
            self._native.geval(json.dumps(body), max_step_tokens, _progress.sink(progress))
        )

    def close(self) -> None:
        """Let the model's worker thread end (after the calls already made); later calls
        raise NlgJudgeError. Also done when the Judge is garbage-collected."""
        self._native.close()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Judge(model={self.model['name']!r}, cache={self.model['cache']!r})"

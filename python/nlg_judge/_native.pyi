"""Type stubs of the extension module (the Rust side; use the public API in
``nlg_judge`` instead)."""

from typing import Any, List, Optional, Sequence, Tuple, Union

__version__: str

class NlgJudgeError(Exception):
    """A failure of nlg-judge that is not the caller's input: model files, the model,
    the result cache, reading or writing files."""

Source = Union[str, List[Tuple[str, str]]]

class NativeJudge:
    def __init__(
        self,
        model: str,
        device: str,
        precision: str,
        cache: Optional[str],
        no_cache: bool,
        weights: str,
        max_batch_tokens: int,
        max_batch_rows: int,
        max_arena_mib: int,
        strategy: str,
        backend: Optional[str] = None,
        sink: Any = None,
    ) -> None: ...
    def info(self) -> str: ...
    def close(self) -> None: ...
    def compare(
        self,
        source: Source,
        attribute: str,
        adjective: Optional[str],
        question: Optional[str],
        template: str,
        task: str,
        item: Optional[str],
        context_label: Optional[str],
        design: str,
        comparisons: Optional[int],
        rounds: Optional[int],
        round_size: Optional[int],
        stop_when: Optional[str],
        seed: int,
        rank: Optional[str],
        debias: str,
        human_key: Optional[str],
        sink: Any = None,
    ) -> NativeCompareResult: ...
    def score(
        self,
        source: Source,
        method: str,
        attribute: Optional[str],
        adjective: Optional[str],
        human_key: Optional[str],
        task: str,
        criteria: Optional[str],
        criteria_text: Optional[str],
        task_prompt: Optional[str],
        steps: Optional[str],
        max_step_tokens: int,
        scale: Optional[str],
        reference: bool,
        sink: Any = None,
    ) -> NativeScoreResult: ...
    def grade(
        self,
        source: Source,
        rubric: Optional[str],
        rubric_json: Optional[str],
        protocol: Optional[str],
        feedback: bool,
        max_feedback_tokens: int,
        max_reasoning_tokens: Optional[int],
        thinking: bool,
        reference: bool,
        task: str,
        attribute: Optional[str],
        human_key: Optional[str],
        sink: Any = None,
    ) -> NativeScoreResult: ...
    def labels(
        self,
        prompt: str,
        labels: List[str],
        answer_prefix: str,
        chat: bool,
        system: Optional[str],
    ) -> str: ...
    def geval(self, body: str, max_step_tokens: int, sink: Any = None) -> str: ...
    def dhp_score(
        self,
        input: str,
        output: str,
        method: str,
        metrics: List[str],
        no_context: bool,
        sink: Any = None,
    ) -> int: ...

class NativeCompareResult:
    def to_json(self) -> str: ...
    def scores_jsonl(self) -> str: ...
    def comparisons_jsonl(self) -> str: ...
    def table(self) -> str: ...
    def inputs(self) -> str: ...
    def correlate(
        self,
        key: Optional[str],
        level: str,
        skip: str,
        bootstrap: Optional[int],
        seed: int,
        ci: float,
    ) -> Tuple[str, str]: ...

class NativeScoreResult:
    def to_json(self) -> str: ...
    def scores_jsonl(self) -> str: ...
    def correlate(
        self,
        key: Optional[str],
        level: str,
        skip: str,
        bootstrap: Optional[int],
        seed: int,
        ci: float,
    ) -> Tuple[str, str]: ...

class NativeJuryResult:
    def to_json(self) -> str: ...
    def scores_jsonl(self) -> str: ...
    def diagnostics_json(self) -> str: ...
    def table(self) -> str: ...
    def correlate(
        self,
        key: Optional[str],
        wanted: Optional[str],
        judge: Optional[int],
        level: str,
        skip: str,
        bootstrap: Optional[int],
        seed: int,
        ci: float,
    ) -> Tuple[str, str]: ...

def check_jury_weights(
    judges: int, weights: Optional[List[float]], agreement: bool
) -> None: ...
def jury_compare(
    names: List[str],
    results: List[NativeCompareResult],
    weights: Optional[List[float]],
    agreement: bool,
    design: str,
) -> NativeJuryResult: ...
def jury_scores(
    names: List[str],
    results: List[NativeScoreResult],
    weights: Optional[List[float]],
    agreement: bool,
) -> NativeJuryResult: ...
def correlate(
    items: Optional[Sequence[Tuple[str, str, float, float]]],
    input: Optional[Source],
    pred_file: Optional[Source],
    human_file: Optional[Source],
    pred: Optional[str],
    human: Optional[str],
    group: str,
    system: str,
    level: str,
    skip: str,
    bootstrap: Optional[int],
    seed: int,
    ci: float,
) -> Tuple[str, str]: ...
def metric_rows(
    source: Source,
    metrics: List[str],
    paraphrases: Optional[str],
    agg: str,
    stemmer: bool,
    idf: bool,
    sink: Any = None,
) -> str: ...
def corpus_metrics(
    candidates: List[str], references: List[List[str]]
) -> Tuple[float, float, float]: ...
def dhp_perturb(
    task: str,
    output: str,
    data_dir: str,
    input: Optional[str],
    pair: str,
    seed: int,
    limit: int,
    perturbations: List[str],
    rule_only: bool,
    attempts: int,
    temperature: float,
    top_p: float,
    judge: Optional[NativeJudge] = None,
    sink: Any = None,
) -> str: ...
def dhp_analyze(
    text: str, source: str, weights: Optional[str], task: Optional[str]
) -> Tuple[str, str, bool]: ...
def run_cli(argv: List[str]) -> int: ...
def choices() -> str: ...
def defaults() -> str: ...

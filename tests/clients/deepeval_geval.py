"""deepeval's G-Eval with `nlg-judge serve` as its judge, in two parts.

A. deepeval's G-Eval as its users run it (deepeval's own prompt, JSON answer), on SummEval
   summaries: each score must be deepeval's probability-weighted score, not its fallback
   to the bare integer. The raw chat responses are captured and deepeval's own weighting
   function (`calculate_weighted_summed_score`) is applied to them again: it must give
   the metric's score, from a distribution over several score tokens.

B. Where the prompts are the same: `nlg-judge score --method geval` rates each summary
   with our G-Eval prompt (shown with --show-prompt); the same prompt goes through the
   chat route with `logprobs`/`top_logprobs: 20` and one generated token, whose
   alternatives are the distribution at the score's position. Weighted as nlg-judge
   weighs (every score of the scale, renormalised) it must equal nlg-judge's score;
   weighted by deepeval's rule (digit tokens of at least 1%, renormalised; deepeval's own
   function where the generated token is a digit) it must equal the same rule applied to
   nlg-judge's `raw_probabilities` (both within --tolerance).

deepeval's `LocalModel` never asks for log-probs (it has no `generate_raw_response`, so
G-Eval falls back to the bare score); `NlgJudgeModel` below adds that one call.

    python tests/clients/deepeval_geval.py --url http://127.0.0.1:8080 --token T \
        --binary target/release/nlg-judge --input /tmp/summeval.jsonl --items 8
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
os.environ.setdefault("DEEPEVAL_DISABLE_TIMEOUTS", "1")

from deepeval.metrics import GEval  # noqa: E402
from deepeval.metrics.g_eval.utils import calculate_weighted_summed_score  # noqa: E402
from deepeval.metrics.utils import trimAndLoadJson  # noqa: E402
from deepeval.models import LocalModel  # noqa: E402
from deepeval.test_case import LLMTestCase, LLMTestCaseParams  # noqa: E402

STEPS = [
    "Read the news article carefully and identify its main topic and key points.",
    "Read the summary and check whether its sentences follow one another in a clear, logical order.",
    "Check whether the summary builds into one connected account instead of a list of loose facts.",
    "Assign a coherence score from 1 to 5.",
]


class NlgJudgeModel(LocalModel):
    """deepeval's local model plus the log-prob call G-Eval makes; keeps the responses."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.responses = []

    def generate_raw_response(self, prompt, top_logprobs=20, audio=None):
        client = self.load_model(async_mode=False)
        response = client.chat.completions.create(
            model=self.name,
            messages=[{"role": "user", "content": prompt}],
            temperature=self.temperature,
            logprobs=True,
            top_logprobs=top_logprobs,
            **self.generation_kwargs,
        )
        self.responses.append((prompt, response))
        return response, 0.0

    async def a_generate_raw_response(self, prompt, top_logprobs=20, audio=None):
        client = self.load_model(async_mode=True)
        response = await client.chat.completions.create(
            model=self.name,
            messages=[{"role": "user", "content": prompt}],
            temperature=self.temperature,
            logprobs=True,
            top_logprobs=top_logprobs,
            **self.generation_kwargs,
        )
        self.responses.append((prompt, response))
        return response, 0.0


def deepeval_filtered(probabilities):
    """deepeval's weighting over {score: probability}: drop under 1%, renormalise."""
    kept = {s: p for s, p in probabilities.items() if p >= 0.01}
    total = sum(kept.values())
    return sum(s * p for s, p in kept.items()) / total


def ours(binary, model, record, steps_file, env):
    """nlg-judge's G-Eval of one summary: its user prompt and its output line."""
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one.jsonl"
        one.write_text(json.dumps(record) + "\n")
        out = Path(tmp) / "out.jsonl"
        done = subprocess.run(
            [binary, "score", "--model", model, "--method", "geval", "--attribute", "coherence",
             "--input", str(one), "--steps", str(steps_file), "--show-prompt", "--output", str(out),
             "--no-cache"],
            capture_output=True, text=True, env=env,
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        shown = done.stderr
        user = shown.split("<|im_start|>user\n", 1)[1].split("<|im_end|>\n<|im_start|>assistant\n", 1)[0]
        return user, json.loads(out.read_text().splitlines()[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--binary", required=True)
    parser.add_argument("--input", required=True, help="generic JSONL (nlg-judge convert --dataset summeval)")
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--max-tokens", type=int, default=256, help="bound of the judge's answers")
    args = parser.parse_args()

    records = [json.loads(line) for line in open(args.input)][: args.items]
    judge = NlgJudgeModel(
        model=args.model, base_url=f"{args.url}/v1", api_key=args.token, temperature=0,
        generation_kwargs={"max_tokens": args.max_tokens},
    )
    env = dict(os.environ)

    # A. deepeval's own G-Eval.
    print("A. deepeval G-Eval (deepeval's prompt), judge = nlg-judge serve\n")
    print("| item | deepeval score (0-10) | score tokens over 1% | recomputed from the response | weighted (not the fallback) |")
    print("|---|---|---|---|---|")
    weighted_ok = 0
    parsed = 0
    for k, record in enumerate(records):
        metric = GEval(
            name="Coherence",
            evaluation_steps=STEPS,
            evaluation_params=[LLMTestCaseParams.INPUT, LLMTestCaseParams.ACTUAL_OUTPUT],
            model=judge,
            async_mode=False,
            verbose_mode=False,
        )
        case = LLMTestCase(input=record["context"], actual_output=record["candidate"])
        judge.responses.clear()
        try:
            metric.measure(case, _show_indicator=False)
        except ValueError as error:
            print(f"| {k} | deepeval failed: {error} | | | |")
            continue
        parsed += 1
        score = metric.score * 10  # deepeval reports (score - 0) / 10
        _, response = judge.responses[-1]
        content = response.choices[0].message.content
        raw = trimAndLoadJson(content)["score"]  # deepeval's own reading of the answer
        recomputed = calculate_weighted_summed_score(raw, response)
        position = next(t for t in reversed(response.choices[0].logprobs.content) if t.token == str(raw))
        tokens = sorted(a.token for a in position.top_logprobs if a.token.isdecimal() and a.logprob >= math.log(0.01))
        weighted = abs(recomputed - score) < 1e-9 and len(tokens) > 1
        weighted_ok += weighted
        print(f"| {k} | {score:.4f} | {', '.join(tokens)} | {recomputed:.4f} | {'yes' if weighted else 'no'} |")
    print(f"\nprobability-weighted: {weighted_ok} of the {parsed} answers deepeval could read "
          f"({len(records) - parsed} not valid JSON)\n")

    # B. The same prompt both ways.
    print("B. same prompt: nlg-judge score --method geval vs the chat route's top_logprobs at the score position\n")
    print("| item | nlg-judge score | from top_logprobs, nlg-judge's weighting | \\|Δ\\| | deepeval's rule on top_logprobs | deepeval's rule on nlg-judge's probabilities | \\|Δ\\| | deepeval's function |")
    print("|---|---|---|---|---|---|---|---|")
    client = judge.load_model(async_mode=False)
    worst = 0.0
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as steps_file:
        steps_file.write("\n".join(f"{i + 1}. {s}" for i, s in enumerate(STEPS)))
    for k, record in enumerate(records):
        user, line = ours(args.binary, args.model, record, steps_file.name, env)
        response = client.chat.completions.create(
            model=args.model, messages=[{"role": "user", "content": user}],
            temperature=0, max_tokens=1, logprobs=True, top_logprobs=20,
        )
        first = response.choices[0].logprobs.content[0]
        digits = {int(a.token): math.exp(a.logprob) for a in first.top_logprobs if a.token.isdecimal()}
        raw = {int(s): p for s, p in line["raw_probabilities"].items()}
        scale = {s: digits.get(s, 0.0) for s in raw}
        endpoint = sum(s * p for s, p in scale.items()) / sum(scale.values())
        d_ours = abs(endpoint - line["score"])
        theirs = deepeval_filtered(digits)
        outside = {d: p for d, p in digits.items() if d not in raw}
        filtered = deepeval_filtered({**raw, **outside})
        d_theirs = abs(theirs - filtered)
        function = "first token not a digit"
        if first.token.isdecimal():
            value = calculate_weighted_summed_score(int(first.token), response)
            function = f"{value:.4f}"
            d_theirs = max(d_theirs, abs(value - theirs))
        missing = [s for s in raw if s not in digits]
        note = f" (scores {missing} not in the top 20)" if missing else ""
        worst = max(worst, d_ours, d_theirs)
        print(f"| {k} | {line['score']:.4f} | {endpoint:.4f}{note} | {d_ours:.1e} | {theirs:.4f} | {filtered:.4f} "
              f"| {d_theirs:.1e} | {function} |")
    os.unlink(steps_file.name)
    ok = worst <= args.tolerance and parsed > 0 and weighted_ok == parsed
    print(f"\nlargest difference with deepeval's rule: {worst:.1e} (tolerance {args.tolerance:g}); "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""lm-evaluation-harness's own task runner on a local multiple-choice task, two ways:

- its `local-completions` model against `nlg-judge serve` (loglikelihood requests: token
  ids, `echo`, `logprobs: 1`, `max_tokens: 1`), tokenising through the service's
  vLLM-style tokenizer routes;
- its `hf` model on the same SmolLM2 weights: transformers loads the GGUF file,
  dequantised to f32 (our default precision runs the same dequantised weights).

It compares every request's log-likelihood (within --tolerance), the greedy flags and
the accuracy, and reports each run's wall time. Prints a markdown summary; the raw
lm-eval outputs stay in --out.

    python tests/clients/lm_eval_compare.py --url http://127.0.0.1:8080 --token T \
        --gguf ~/.cache/nlg-judge/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \
        --out /tmp/lm-eval
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TASK = "nlgjudge_facts"
TASKS_DIR = Path(__file__).parent / "tasks"


def run(name, model, model_args, batch_size, out, env):
    """One lm-eval run; returns its wall time and its samples per (doc, choice)."""
    target = Path(out) / name
    command = [
        sys.executable, "-m", "lm_eval", "run",
        "--model", model,
        "--model_args", model_args,
        "--tasks", TASK,
        "--include_path", str(TASKS_DIR),
        "--batch_size", str(batch_size),
        "--output_path", str(target),
        "--log_samples",
        "--seed", "1234",
    ]
    if model == "hf":
        command += ["--device", "cpu"]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"lm-eval run {name} failed ({done.returncode})")
    (target / "log.txt").write_text(done.stdout + done.stderr)
    samples = {}
    accuracy = {}
    [path] = glob.glob(str(target / "**" / f"samples_{TASK}_*.jsonl"), recursive=True)
    for line in open(path):
        sample = json.loads(line)
        for choice, resp in enumerate(sample["resps"]):
            loglikelihood, greedy = resp[0]
            samples[(sample["doc_id"], choice)] = (float(loglikelihood), bool(greedy))
        accuracy.setdefault("acc", []).append(sample["acc"])
        accuracy.setdefault("acc_norm", []).append(sample["acc_norm"])
    accuracy = {k: sum(v) / len(v) for k, v in accuracy.items()}
    return wall, samples, accuracy


def hf_load_time(gguf, env):
    """Seconds transformers takes to load the GGUF (dequantising it) and its tokeniser."""
    code = (
        "import time, torch, transformers as t; s = time.perf_counter(); "
        f"t.AutoTokenizer.from_pretrained({str(gguf.parent)!r}, gguf_file={gguf.name!r}); "
        f"t.AutoModelForCausalLM.from_pretrained({str(gguf.parent)!r}, gguf_file={gguf.name!r}, dtype=torch.float32); "
        "print(time.perf_counter() - s)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else float("nan")


def predictions(samples):
    docs = {}
    for (doc, choice), (ll, _) in samples.items():
        docs.setdefault(doc, []).append((ll, choice))
    return {doc: max(lls)[1] for doc, lls in docs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the service's root URL")
    parser.add_argument("--token", required=True)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-sizes", default="1,16", help="local-completions batch sizes")
    parser.add_argument("--hf-batch-size", type=int, default=16)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()

    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
        OPENAI_API_KEY=args.token,
    )
    gguf = Path(args.gguf).expanduser()
    load = lambda: open("/proc/loadavg").read().split()[:3]  # noqa: E731
    print(f"load before: {' '.join(load())}", file=sys.stderr)
    runs = []
    hf_args = f"pretrained={gguf.parent},gguf_file={gguf.name},dtype=float32"
    runs.append(("hf", f"hf (batch {args.hf_batch_size})",
                 *run("hf", "hf", hf_args, args.hf_batch_size, args.out, env)))
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        local_args = (
            f"model={args.model},base_url={args.url}/v1/completions,auth_token={args.token},"
            f"num_concurrent=1,max_retries=1,tokenized_requests=True"
        )
        runs.append((f"local-{batch}", f"local-completions (batch {batch})",
                     *run(f"local-{batch}", "local-completions", local_args, batch, args.out, env)))
    loading = hf_load_time(gguf, env)
    print(f"load after: {' '.join(load())}", file=sys.stderr)

    reference = runs[0][3]
    print(f"| run | wall time (s) | requests | acc | acc_norm | largest \\|Δ log-likelihood\\| vs hf | same greedy flags | same predictions |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for key, label, wall, samples, accuracy in runs:
        assert samples.keys() == reference.keys(), f"{key}: different requests"
        diffs = [abs(samples[k][0] - reference[k][0]) for k in reference]
        greedy = sum(samples[k][1] == reference[k][1] for k in reference)
        same = predictions(samples) == predictions(reference)
        largest = max(diffs)
        if key != "hf":
            worst = max(worst, largest)
        print(f"| {label} | {wall:.1f} | {len(samples)} | {accuracy['acc']:.4f} | {accuracy['acc_norm']:.4f} "
              f"| {largest:.2e} | {greedy}/{len(reference)} | {same} |")
    ok = worst <= args.tolerance and all(
        predictions(r[3]) == predictions(reference) for r in runs
    )
    print(f"\nhf's wall time includes loading the GGUF into transformers (dequantised to f32): "
          f"{loading:.1f} s measured on its own; the service had loaded the model before the runs.")
    print(f"largest per-request difference {worst:.2e} (tolerance {args.tolerance:g}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

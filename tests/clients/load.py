"""Load on the OpenAI routes of `nlg-judge serve`: concurrent clients on loopback, each
sending a bounded number of requests before a deadline; every request sent must be
answered (no request lost), and the latency percentiles and throughput are reported.

The clients mix what judge tools send: lm-evaluation-harness-style scoring (a question
and one of its answers, `echo`, `logprobs: 1`, `max_tokens: 1`; the questions are shared
between clients, so prompts share prefixes), G-Eval-style chats (`logprobs`,
`top_logprobs: 20`, a few tokens) and short sampled completions.

    python tests/clients/load.py --url http://127.0.0.1:8080 --token T --clients 64 \
        --requests 4 --deadline 600
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx

FACTS = Path(__file__).parent / "tasks" / "facts.jsonl"


def bodies(model, client, count):
    """The requests of one client."""
    facts = [json.loads(line) for line in open(FACTS)]
    out = []
    for k in range(count):
        kind = (client + k) % 3
        fact = facts[(client * 7 + k) % 12]  # twelve questions: shared between clients
        if kind == 0:
            choice = fact["choices"][(client + k) % len(fact["choices"])]
            out.append(("/v1/completions", {
                "model": model, "prompt": f"Question: {fact['question']}\nAnswer: {choice}",
                "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0, "seed": 1234,
            }))
        elif kind == 1:
            out.append(("/v1/chat/completions", {
                "model": model,
                "messages": [{"role": "user", "content":
                              "You will rate an answer for correctness on a scale from 1 to 5.\n\n"
                              f"Question: {fact['question']}\nAnswer: {fact['choices'][k % 4]}\n\n"
                              "Score (1-5):"}],
                "logprobs": True, "top_logprobs": 20, "max_tokens": 4, "temperature": 0,
            }))
        else:
            out.append(("/v1/completions", {
                "model": model, "prompt": f"Question: {fact['question']}\nAnswer:",
                "max_tokens": 8, "temperature": 0.7, "seed": client * 100 + k,
            }))
    return out


async def client_loop(http, url, token, model, client, count, deadline, records):
    for path, body in bodies(model, client, count):
        if time.monotonic() > deadline:
            records.append({"client": client, "status": "not sent (deadline)"})
            continue
        started = time.monotonic()
        try:
            response = await http.post(url + path, json=body, headers={"Authorization": f"Bearer {token}"})
            status = response.status_code
            usage = response.json().get("usage", {}) if status == 200 else {}
        except Exception as error:  # a lost request
            status, usage = f"failed: {type(error).__name__}: {error}", {}
        records.append({
            "client": client, "path": path, "status": status, "latency": time.monotonic() - started,
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "cached_tokens": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0),
        })


def percentile(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    index = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[index]


async def main_async(args):
    records = []
    deadline = time.monotonic() + args.deadline
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    timeout = httpx.Timeout(args.deadline + 60)
    started = time.monotonic()
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
        await asyncio.gather(*[
            client_loop(http, args.url, args.token, args.model, c, args.requests, deadline, records)
            for c in range(args.clients)
        ])
    wall = time.monotonic() - started
    return records, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=4, help="requests per client")
    parser.add_argument("--deadline", type=float, default=600, help="seconds after which no request is sent")
    parser.add_argument("--label", default="")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args()

    load_before = open("/proc/loadavg").read().split()[:3]
    records, wall = asyncio.run(main_async(args))
    load_after = open("/proc/loadavg").read().split()[:3]
    if args.json:
        Path(args.json).write_text(json.dumps({"wall": wall, "records": records}))
    sent = [r for r in records if "latency" in r]
    ok = [r for r in sent if r["status"] == 200]
    errors = [r for r in sent if r["status"] != 200]
    unsent = len(records) - len(sent)
    latencies = [r["latency"] for r in ok]
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = sum(r["cached_tokens"] for r in ok)
    print(f"| {args.label} | {args.clients} | {len(sent)} | {len(ok)} | {len(errors)} | {unsent} "
          f"| {wall:.1f} | {len(ok) / wall:.2f} | {percentile(latencies, 0.5):.2f} | {percentile(latencies, 0.9):.2f} "
          f"| {percentile(latencies, 0.99):.2f} | {max(latencies, default=float('nan')):.2f} "
          f"| {cached / max(prompt, 1):.2f} | {' '.join(load_before)} / {' '.join(load_after)} |")
    for r in errors[:5]:
        print(f"error: {r}", file=sys.stderr)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())

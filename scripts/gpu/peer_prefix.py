"""transformers on the GPU, evaluating the comparison prompts of `prepare.py` the way the
shared peers harness's strongest CPU mode does (`hf_prefix`: the article once into a KV
cache, each first summary once on top of it, each second summary on top of that), in
batch 1 (`prefix`) or with the 15 second summaries of one first summary batched
(`prefix_b15`, right padding, the head applied at each row's last token).

Writes one JSON object (stdout, or --out): seconds per document (after a warm-up), tokens
evaluated, p(A) per comparison.
Usage: python scripts/gpu/peer_prefix.py MODEL_DIR --mode prefix|prefix_b15 --dtype f32|bf16
"""
import argparse
import copy
import json
import math
import os
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache


def p_first(logit_a, logit_b):
    d = float(logit_b) - float(logit_a)
    return math.exp(-d) / (1.0 + math.exp(-d)) if d > 0 else 1.0 / (1.0 + math.exp(d))


def lcp(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def crop(cache, length):
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_document(model, pairs, a_id, b_id, batched, pad):
    dev = model.device
    ids = [p["ids"] for p in pairs]
    shared = min(lcp(ids[0], s) for s in ids)
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([ids[0][:shared]], device=dev), past_key_values=cache, use_cache=True,
          logits_to_keep=1)
    tokens = shared
    probs = {}
    by_first = {}
    for p in pairs:
        by_first.setdefault(p["i"], []).append(p)
    for first, group in by_first.items():
        own = min(lcp(group[0]["ids"], p["ids"]) for p in group)
        crop(cache, shared)
        segment = group[0]["ids"][shared:own]
        if segment:
            model(input_ids=torch.tensor([segment], device=dev), past_key_values=cache, use_cache=True,
                  logits_to_keep=1)
        tokens += len(segment)
        suffixes = [p["ids"][own:] for p in group]
        if not batched:
            for p, suffix in zip(group, suffixes):
                crop(cache, own)
                out = model(input_ids=torch.tensor([suffix], device=dev), past_key_values=cache,
                            use_cache=True, logits_to_keep=1)
                logits = out.logits[0, -1]
                probs[(p["i"], p["j"])] = (logits[a_id], logits[b_id])
        else:
            width = max(map(len, suffixes))
            batch = torch.full((len(suffixes), width), pad, dtype=torch.long)
            for row, suffix in enumerate(suffixes):
                batch[row, :len(suffix)] = torch.tensor(suffix)
            rows = copy.deepcopy(cache)
            rows.batch_repeat_interleave(len(suffixes))
            hidden = model.model(input_ids=batch.to(dev), past_key_values=rows, use_cache=True).last_hidden_state
            last = torch.tensor([len(s) - 1 for s in suffixes], device=dev)
            logits = model.lm_head(hidden[torch.arange(len(suffixes), device=dev), last])
            for row, p in enumerate(group):
                probs[(p["i"], p["j"])] = (logits[row, a_id], logits[row, b_id])
            del rows
        tokens += sum(map(len, suffixes))
    synchronize(model.device)
    return [p_first(*probs[(p["i"], p["j"])]) for p in pairs], tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--mode", choices=["prefix", "prefix_b15"], required=True)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", help="write the JSON here (else stdout)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N comparisons per document")
    args = ap.parse_args()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    with open(os.path.join(args.model, "prompts.json")) as f:
        prompts = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation=args.attn).to(args.device)
    model.eval()
    pad = model.config.pad_token_id or 0
    docs = prompts["docs"]
    result = {"model": os.path.basename(args.model.rstrip("/")), "mode": args.mode, "dtype": args.dtype,
              "attn": args.attn, "torch": torch.__version__, "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
              "docs": {}}
    with torch.inference_mode():
        first = next(iter(docs.values()))["pairs"][:30]
        run_document(model, first, prompts["A_id"], prompts["B_id"], args.mode == "prefix_b15", pad)
        for key, doc in docs.items():
            pairs = doc["pairs"][:args.limit] if args.limit else doc["pairs"]
            synchronize(model.device)
            start = time.perf_counter()
            probs, tokens = run_document(model, pairs, prompts["A_id"], prompts["B_id"],
                                         args.mode == "prefix_b15", pad)
            seconds = time.perf_counter() - start
            result["docs"][key] = {"seconds": seconds, "tokens": tokens, "comparisons": len(probs), "p_a": probs}
    result["seconds"] = sum(d["seconds"] for d in result["docs"].values())
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
        print(f"transformers {args.mode} {args.dtype} on {result['device']}: {result['seconds']:.2f} s")
    else:
        print(json.dumps(result))


if __name__ == "__main__":
    main()

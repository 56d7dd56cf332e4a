"""Summarise the hybrid measurement: summary-level Spearman with the human coherence
(from `nlg-judge correlate`, in measure.out) and each ranking's agreement with the full
design's PoE ranking (Spearman within each context, averaged; a constant ranking counts
0), mean and sd over the 5 subset seeds."""
import collections, json, statistics, sys
import numpy as np

def ranks(x):
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r

def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])

def scores(path):
    by = collections.defaultdict(dict)
    for line in open(path):
        v = json.loads(line)
        by[v["context_id"]][v["candidate_id"]] = v["score"]
    return by

full = scores("runs/full.poe.jsonl")
def agreement(path):
    s = scores(path)
    vals = []
    for c, ref in full.items():
        ids = sorted(ref)
        a = [s[c][i] for i in ids]; b = [ref[i] for i in ids]
        r = spearman(a, b)
        vals.append(0.0 if r != r else r)
    return sum(vals) / len(vals)

human = {}
for line in open("measure.out"):
    parts = line.split()
    human[parts[0]] = float(parts[1])
rows = collections.OrderedDict()
for name, rho in human.items():
    parts = name.split(".")
    if len(parts) == 4:
        design, r, seed, rank = parts
        key = (design, int(r), rank)
    else:
        key = (name, None, "")
    vs = agreement(f"runs/{name}.jsonl") if name not in ("prompt-alone", "geval-alone") else \
        agreement({"prompt-alone": "prompt.coh.jsonl", "geval-alone": "geval.coh.jsonl"}[name])
    rows.setdefault(key, []).append((rho, vs))
print("| design | R | ranking | seeds | Spearman x100 with humans (mean ± sd) | x100 with full-design PoE |")
print("|---|---:|---|---:|---:|---:|")
for (design, r, rank), vals in rows.items():
    hs = [100 * v[0] for v in vals]; fs = [100 * v[1] for v in vals]
    sd = lambda x: statistics.stdev(x) if len(x) > 1 else 0.0
    print(f"| {design} | {r if r else ''} | {rank} | {len(vals)} | {statistics.mean(hs):.1f} ± {sd(hs):.1f} | {statistics.mean(fs):.1f} ± {sd(fs):.1f} |")

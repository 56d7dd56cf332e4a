"""Reference values for the statistics tests (src/stats/*, tests/correlate_cli.rs).

Run once with a Python that has numpy and scipy (the project used scipy 1.17.1,
numpy 2.4.6); the printed numbers are written into the Rust tests by hand, each with
a comment naming the call that produced it. CI never runs this script.

    python tests/reference/stats_reference.py [path/to/summeval.jsonl]
"""

import json
import sys
from collections import defaultdict

import numpy as np
import scipy
from scipy import stats

print(f"scipy {scipy.__version__}, numpy {np.__version__}")


def show(name, value):
    print(f"{name} = {value!r}")


def corr3(x, y):
    return (
        stats.pearsonr(x, y).statistic,
        stats.spearmanr(x, y).statistic,
        stats.kendalltau(x, y).statistic,
    )


# --- ranks ---
show("rankdata([3,1,4,1,5,9,2,6,5,3,5])", list(stats.rankdata([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])))

# --- correlations ---
cases = {
    "no_ties": ([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]),
    "ties": ([1, 2, 2, 3, 3, 3, 4], [1, 3, 2, 2, 3, 4, 4]),
    "n2": ([1, 2], [3, 1]),
    "reals": (
        [0.31, 1.7, -2.2, 4.05, 0.31, 3.3, 2.0, -0.5],
        [1.0, 2.5, 0.5, 3.0, 2.5, 2.5, 1.5, 0.0],
    ),
}
for name, (x, y) in cases.items():
    show(f"corr3[{name}] (pearsonr, spearmanr, kendalltau tau-b)", corr3(x, y))

# --- percentile interval (numpy default 'linear' method) ---
values = [0.42, 0.13, 0.88, 0.57, 0.29, 0.71, 0.05, 0.66, 0.35, 0.94]
show("np.percentile(values, [2.5, 97.5])", list(np.percentile(values, [2.5, 97.5])))
show("np.percentile(values, [5, 95])", list(np.percentile(values, [5, 95])))


# --- meta-evaluation levels on a constructed set ---
# groups: g1 varied human, constant prediction; g2 constant human; g3, g4 ordinary.
items = [
    # group, system, pred, human
    ("g1", "s1", 2.0, 1.0), ("g1", "s2", 2.0, 3.0), ("g1", "s3", 2.0, 2.0),
    ("g2", "s1", 1.0, 4.0), ("g2", "s2", 3.0, 4.0), ("g2", "s3", 2.0, 4.0),
    ("g3", "s1", 0.5, 1.0), ("g3", "s2", 0.9, 2.0), ("g3", "s3", 0.7, 3.0),
    ("g4", "s1", 3.0, 2.0), ("g4", "s2", 1.0, 5.0), ("g4", "s3", 2.5, 4.0),
]


def by_group(rows):
    groups = defaultdict(list)
    for g, _s, p, h in rows:
        groups[g].append((p, h))
    return groups


def summary(rows, rule):
    per = []
    for g, pairs in by_group(rows).items():
        p = [a for a, _ in pairs]
        h = [b for _, b in pairs]
        if len(set(h)) == 1:
            continue
        if len(set(p)) == 1:
            if rule == "geval":
                continue
            per.append((0.0, 0.0, 0.0))
            continue
        per.append(corr3(p, h))
    return tuple(float(np.mean([c[i] for c in per])) for i in range(3)), len(per)


show("summary authors (means of per-group pearson, spearman, kendall), n_groups", summary(items, "authors"))
show("summary geval, n_groups", summary(items, "geval"))

sys_pred = defaultdict(list)
sys_human = defaultdict(list)
for _g, s, p, h in items:
    sys_pred[s].append(p)
    sys_human[s].append(h)
systems = sorted(sys_pred)
show(
    "system level (per-system means)",
    corr3([np.mean(sys_pred[s]) for s in systems], [np.mean(sys_human[s]) for s in systems]),
)
show("pooled", corr3([r[2] for r in items], [r[3] for r in items]))

# --- Wilcoxon signed-rank, alternative='greater' (zero_method='wilcox', correction=False) ---
wcases = {
    # n = 10, distinct |d|, no zeros: exact null distribution
    "exact": (
        [17.0, 10.0, 20.0, 15.0, 5.0, 17.0, 23.0, 9.0, 15.0, 19.0],
        [10.0, 12.0, 9.0, 11.0, 10.0, 8.0, 10.0, 12.0, 9.0, 11.0],
    ),
    # n = 8 with tied |d| and a zero: scipy's 'auto' uses an exact permutation test
    "permutation": (
        [3.0, 4.0, 2.0, 5.0, 3.0, 4.0, 1.0, 2.0],
        [2.0, 3.0, 2.0, 3.0, 4.0, 2.0, 2.0, 1.0],
    ),
}
rng = np.random.default_rng(7)
# n = 30 with ties and zeros (integer scores): normal approximation with tie correction
a = rng.integers(1, 6, size=30).astype(float)
b = np.clip(a - rng.integers(-1, 3, size=30), 1, 5).astype(float)
wcases["normal_ties"] = (list(a), list(b))
# n = 60, continuous, no ties: n > 50, normal approximation
c = np.round(rng.normal(0.2, 1.0, size=60), 6)
d = np.round(rng.normal(0.0, 1.0, size=60), 6)
wcases["normal_large"] = (list(c), list(d))
for name, (x, y) in wcases.items():
    r = stats.wilcoxon(x, y, alternative="greater")
    show(f"wilcoxon[{name}] x", [float(v) for v in x])
    show(f"wilcoxon[{name}] y", [float(v) for v in y])
    show(f"wilcoxon[{name}] (statistic, pvalue)", (float(r.statistic), float(r.pvalue)))
    for method in ("exact", "asymptotic"):
        rm = stats.wilcoxon(x, y, alternative="greater", method=method)
        show(f"    (method={method!r}: pvalue)", float(rm.pvalue))

# --- harmonic-mean p-value: hmean with weights = sum(w) / sum(w / p) ---
p = [0.01, 0.2, 0.04, 0.5]
w = [3.0, 1.0, 2.0, 2.0]
show("hmean(p)", float(stats.hmean(p)))
show("hmean(p, weights=w)", float(stats.hmean(p, weights=w)))

# --- SummEval: coherence vs relevance, grouped by doc_id ---
if len(sys.argv) > 1:
    rows = [json.loads(line) for line in open(sys.argv[1])]
    srows = [(r["doc_id"], r["system_id"], r["coherence"], r["relevance"]) for r in rows]
    show("summeval coherence~relevance summary authors", summary(srows, "authors"))
    show("summeval coherence~relevance summary geval", summary(srows, "geval"))
    sp = defaultdict(list)
    sh = defaultdict(list)
    for _g, s, p_, h in srows:
        sp[s].append(p_)
        sh[s].append(h)
    ss = sorted(sp)
    show(
        "summeval coherence~relevance system",
        corr3([np.mean(sp[s]) for s in ss], [np.mean(sh[s]) for s in ss]),
    )
    show("summeval coherence~relevance pooled", corr3([r[2] for r in srows], [r[3] for r in srows]))
    self_rows = [(g, s, coh, coh) for g, s, coh, _rel in srows]
    show("summeval coherence~coherence summary authors", summary(self_rows, "authors"))

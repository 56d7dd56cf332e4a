"""Largest |p - p_ref| between two `bench pairwise --save-probabilities` files, in full
precision (the command prints four decimals), and how many decisions agree.

Usage: python scripts/gpu/compare_probabilities.py RUN.json REFERENCE.json
"""
import json
import sys


def main():
    run, reference = (json.load(open(path)) for path in sys.argv[1:3])
    assert run["documents"] == reference["documents"], "different comparisons"
    p, q = run["p_first"], reference["p_first"]
    diff = max(abs(a - b) for a, b in zip(p, q))
    same = sum((a > 0.5) == (b > 0.5) for a, b in zip(p, q))
    print(f"{sys.argv[1]} vs {sys.argv[2]}: {len(p)} comparisons, largest |p - p_ref| {diff:.3e}, "
          f"same decision {same}/{len(p)}")


if __name__ == "__main__":
    main()

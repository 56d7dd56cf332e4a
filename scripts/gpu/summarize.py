"""One line per strategy of ours against one transformers run of `run.sh`: times, tokens,
speed ratio, and the largest |p(A) difference| over the comparisons (the same documents,
pairs in the same (first, second) order, the same token ids).

Usage: python scripts/gpu/summarize.py OURS.json OURS_PROBABILITIES.json PEER.json
(OURS.json: `bench pairwise --json`; OURS_PROBABILITIES.json: its --save-probabilities,
which holds the last strategy run, the tree.)
"""
import json
import sys


def main():
    ours = json.load(open(sys.argv[1]))
    probabilities = json.load(open(sys.argv[2]))
    peer = json.load(open(sys.argv[3]))
    peer_p = [p for key in sorted(peer["docs"], key=int) for p in peer["docs"][key]["p_a"]]
    peer_tokens = sum(d["tokens"] for d in peer["docs"].values())
    ours_p = probabilities["p_first"]
    diff = max(abs(a - b) for a, b in zip(ours_p, peer_p)) if len(ours_p) == len(peer_p) else None
    for strategy in ["naive", "tree"]:
        seconds = ours.get(f"seconds_{strategy}")
        if seconds is None:
            continue
        print(f"ours {strategy} {seconds:.2f} s ({ours[f'tokens_{strategy}']} tokens) | transformers "
              f"{peer['mode']} {peer['dtype']} {peer['seconds']:.2f} s ({peer_tokens} tokens) | "
              f"ours {peer['seconds'] / seconds:.2f}x | {len(ours_p)} comparisons, largest "
              f"|p_tree - p_transformers| {'n/a' if diff is None else f'{diff:.2e}'}")


if __name__ == "__main__":
    main()

"""Rank stories with a local judge, check the ranking against human ratings, and plot both.

    pip install ./python matplotlib        # from the repository root (pandas optional)
    python examples/python/rank_and_correlate.py [--output results/stories.png]

The data are our own (examples/data/stories.jsonl): three story prompts, four stories
each, with invented Empathy ratings. The judge (SmolLM2-135M-Instruct, the default
model) compares every ordered pair of stories of a prompt; the script prints the
ranking, the agreement with the human ratings (Spearman per prompt, averaged, with a
bootstrap interval), and draws each prompt's probability matrix next to a scatter of
judge scores against human ratings.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
import numpy as np  # noqa: E402

import nlg_judge  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", default=ROOT / "examples" / "data" / "stories.jsonl")
    parser.add_argument("--output", default=Path("results") / "stories.png")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()

    judge = nlg_judge.Judge(args.model)
    result = judge.compare(
        args.input,
        "empathy",
        adjective="more empathetic",
        task="custom",
        item="Story",
        context_label="Prompt",
        template="c2",
        debias="threshold",
        rank="soft",
    )
    print(result)
    agreement = nlg_judge.correlate(result, "Empathy", bootstrap=1000)
    print(agreement)

    records = result.to_records()  # the rows `to_jsonl` writes; result.to_pandas() with pandas
    contexts = list(result)
    figure, axes = plt.subplots(
        1, len(contexts) + 1, figsize=(4.4 * (len(contexts) + 1), 4.4), layout="constrained"
    )
    # The small model prefers whichever story it reads first (P(A) ~ 0.85 everywhere):
    # colour around the run's debiasing threshold, so red means "A wins" after debiasing.
    spread = max(float(np.nanmax(np.abs(c.probabilities - result.tau))) for c in contexts)
    norm = TwoSlopeNorm(vcenter=result.tau, vmin=result.tau - spread, vmax=result.tau + spread)
    for k, (ax, context) in enumerate(zip(axes, contexts)):
        image = ax.imshow(context.probabilities, norm=norm, cmap="RdBu_r")
        labels = context.candidate_ids
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("B (shown second)")
        if k == 0:
            ax.set_ylabel("A (shown first)")
        ax.set_title(f"{context.context_id}: P(A more empathetic)", fontsize=10)
        for (i, j), p in np.ndenumerate(context.probabilities):
            if not np.isnan(p):
                ax.text(j, i, f"{p:.2f}", ha="center", va="center", fontsize=8)
    bar = figure.colorbar(image, ax=axes[: len(contexts)].tolist(), shrink=0.8)
    bar.set_label(f"P(A better); white at the threshold {result.tau:.2f}")

    scatter = axes[-1]
    for context in contexts:
        rows = [r for r in records if r["context_id"] == context.context_id]
        scatter.scatter(
            [r["scores"]["Empathy"] for r in rows],
            [r["score"] for r in rows],
            label=context.context_id,
            s=40,
        )
    scatter.set_xlabel("human Empathy rating")
    scatter.set_ylabel("judge score (soft win ratio, debiased)")
    spearman = agreement.spearman
    low, high = agreement.ci["spearman"] if agreement.ci["spearman"] else (np.nan, np.nan)
    scatter.set_title(f"Spearman per prompt {spearman:.2f} [{low:.2f}, {high:.2f}]", fontsize=10)
    scatter.legend(fontsize=8)

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=120)
    print(f"figure: {output}")


if __name__ == "__main__":
    main()

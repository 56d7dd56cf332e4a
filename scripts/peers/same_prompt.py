"""Does the peers harness's transformers give our probability when it is asked our prompt?

The peers harness (../shared/bench/peers) opens the assistant turn with "Answer: Summary";
SmolLM2's card opens it with "Summary" (models/smollm2-135m-instruct.toml). This script
takes the harness's first prompt of SummEval document 0 (pair 0,1), asks transformers
(f32, weights dequantised from the same Q4_1 GGUF) for P(A) with each opening, and prints
both beside ours when given (`bench pairwise --docs 1 --save-probabilities FILE`).

Usage: <venv with transformers, gguf, torch>/bin/python same_prompt.py [OURS.json]
Needs the harness's state (run_peers.sh once): ~/.cache/nlg-judge-peers.
"""

import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

STATE = os.path.expanduser("~/.cache/nlg-judge-peers")
HARNESS_OPENING = "Answer: Summary"
OUR_OPENING = "Summary"


def main():
    prompts = json.load(open(os.path.join(STATE, "work/prompts.json")))
    model_path = prompts["model"]
    folder, name = os.path.dirname(model_path), os.path.basename(model_path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    pair = prompts["docs"]["0"]["pairs"][0]
    assert (pair["i"], pair["j"]) == (0, 1)
    assert pair["text"].endswith(HARNESS_OPENING)
    stem = pair["text"][: -len(HARNESS_OPENING)]
    for opening in (HARNESS_OPENING, OUR_OPENING):
        ids = tok.encode(stem + opening, add_special_tokens=False)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].double()
        p_a = float(torch.sigmoid(logits[prompts["A_id"]] - logits[prompts["B_id"]]))
        print(f"transformers, assistant turn opened with {opening!r}: P(A) = {p_a:.9f}")
    if len(sys.argv) > 1:
        ours = json.load(open(sys.argv[1]))["p_first"][0]
        print(f"nlg-judge (card opening {OUR_OPENING!r}): P(A) = {ours:.9f}")


if __name__ == "__main__":
    main()

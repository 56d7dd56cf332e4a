"""Reference label log-probs from llama.cpp's own Python API, for llama_cpp_backend.sh.

Evaluates the given token ids with `llama_cpp.Llama(..., logits_all=True)` and prints,
as JSON, the log-softmax of the last position restricted to the label ids, and the
summed prompt log-probs of each label continuation (prompt + label ids, echo-style).
The backend's numbers must equal these within 1e-4.

    python llama_cpp_ref.py --gguf MODEL.gguf --prompt-ids 1,2,3 --label-ids 330 --label-ids 389
"""

import argparse
import json
import math

import llama_cpp


def log_softmax(row):
    m = max(row)
    s = sum(math.exp(x - m) for x in row)
    return [x - m - math.log(s) for x in row]


def continuation_logprob(llm, prompt, label):
    ids = prompt + label
    llm.reset()
    llm.eval(ids)
    total = 0.0
    for i, tok in enumerate(label):
        row = llm.scores[len(prompt) + i - 1].tolist()
        total += log_softmax(row)[tok]
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--label-ids", action="append", required=True,
                    help="comma-separated ids of one label; repeat per label")
    ap.add_argument("--n-ctx", type=int, default=2048)
    a = ap.parse_args()
    prompt = [int(x) for x in a.prompt_ids.split(",") if x]
    labels = [[int(x) for x in s.split(",") if x] for s in a.label_ids]
    llm = llama_cpp.Llama(model_path=a.gguf, n_ctx=a.n_ctx, logits_all=True, verbose=False)
    out = {"labels": [{"ids": l, "logprob": continuation_logprob(llm, prompt, l)} for l in labels]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

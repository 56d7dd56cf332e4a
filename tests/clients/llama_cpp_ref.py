"""Reference label log-probs from llama.cpp's own Python API, for llama_cpp_backend.sh.

Tokenizes the prompt (a text file, as `compare --show-prompt` prints it) with the GGUF's
own tokenizer, or takes token ids, then evaluates them with `llama_cpp.Llama(..., logits_all=True)` and prints,
as JSON, the log-softmax of the last position restricted to the label ids, and the
summed prompt log-probs of each label continuation (prompt + label ids, echo-style).
The backend's numbers must equal these within 1e-4.

    python llama_cpp_ref.py --gguf MODEL.gguf --prompt-ids 1,2,3 --label-ids 330 --label-ids 389
    python llama_cpp_ref.py --gguf MODEL.gguf --prompt-file prompt.txt --label " A" --label " B"
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
    ap.add_argument("--prompt-ids", help="comma-separated token ids")
    ap.add_argument("--prompt-file", help="prompt text, tokenized by the GGUF's tokenizer")
    ap.add_argument("--label-ids", action="append", default=[],
                    help="comma-separated ids of one label; repeat per label")
    ap.add_argument("--label", action="append", default=[],
                    help="label text, tokenized without BOS; repeat per label")
    ap.add_argument("--n-ctx", type=int, default=2048)
    a = ap.parse_args()
    if (a.prompt_ids is None) == (a.prompt_file is None):
        ap.error("give exactly one of --prompt-ids and --prompt-file")
    llm = llama_cpp.Llama(model_path=a.gguf, n_ctx=a.n_ctx, logits_all=True, verbose=False)
    if a.prompt_file:
        with open(a.prompt_file, encoding="utf-8") as f:
            text = f.read().rstrip("\n")
        prompt = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    else:
        prompt = [int(x) for x in a.prompt_ids.split(",") if x]
    labels = [[int(x) for x in s.split(",") if x] for s in a.label_ids]
    labels += [llm.tokenize(t.encode("utf-8"), add_bos=False, special=False) for t in a.label]
    if not labels:
        ap.error("give at least one --label or --label-ids")
    out = {"labels": [{"ids": l, "logprob": continuation_logprob(llm, prompt, l)} for l in labels]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

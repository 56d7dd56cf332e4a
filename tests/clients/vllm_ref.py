"""Reference label log-probs from vLLM's own Python API (offline `vllm.LLM`), for
vllm_backend.sh: the same engine as the server, without HTTP or our client.

Tokenizes the prompt (a text file, as `compare --show-prompt` prints it, special tokens
read as such) with the checkpoint's tokenizer, then for each label evaluates prompt +
label with `prompt_logprobs` and sums the label tokens' log-probs. Prints JSON. The
backend's numbers must equal these within 1e-4.

    python vllm_ref.py --model DIR --prompt-file prompt.txt --label " A" --label " B"
"""

import argparse
import json

from transformers import AutoTokenizer
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="checkpoint directory")
    ap.add_argument("--prompt-file", required=True)
    ap.add_argument("--label", action="append", required=True,
                    help="label text, tokenized without special tokens; repeat per label")
    ap.add_argument("--max-model-len", type=int, default=2048)
    a = ap.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    with open(a.prompt_file, encoding="utf-8") as f:
        text = f.read().rstrip("\n")
    prompt = tokenizer.encode(text, add_special_tokens=False)
    labels = [tokenizer.encode(t, add_special_tokens=False) for t in a.label]
    llm = LLM(model=a.model, dtype="float32", max_model_len=a.max_model_len,
              enable_prefix_caching=False)
    params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=prompt + l) for l in labels], params)
    result = []
    for label, output in zip(labels, outputs):
        rows = output.prompt_logprobs[len(prompt):]
        result.append({"ids": label,
                       "logprob": sum(row[t].logprob for row, t in zip(rows, label))})
    # vLLM logs to standard output too: the result is the line that starts with "RESULT ".
    print("RESULT " + json.dumps({"prompt_tokens": len(prompt), "labels": result}), flush=True)


if __name__ == "__main__":
    main()

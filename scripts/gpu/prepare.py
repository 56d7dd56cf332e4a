"""Everything the GPU check needs that only this machine has, written into one folder.

The GPU machine reaches nothing outside itself and receives at most 64 MiB, so the real
GGUF weights cannot travel. What travels instead, per model (SmolLM2-135M-Instruct and
Qwen2.5-Coder-0.5B-Instruct, read from their GGUF files in nlg-judge's model cache):
  - config.json, tokenizer.json and tokenizer_config.json (chat template included), which
    `make_random_models.py` fills with random weights of the real shape on the GPU machine;
  - prompts.json: the token ids of every ordered comparison of the SummEval documents, as
    `nlg-judge bench pairwise` builds them for a ChatML model (template c1 through the
    tokenizer's chat template, the answer opened with "Summary"; the shared peers harness
    opens it with "Answer: Summary" instead), so both sides score the same tokens and
    their probabilities can be compared.
Plus the SummEval rows of those documents, for `nlg-judge bench pairwise --data-dir`.

Usage: python scripts/gpu/prepare.py OUT_DIR [DOCS...]   (DOCS default: 0 1)
"""
import json
import os
import sys

from transformers import AutoConfig, AutoTokenizer

QUESTION = "Which Summary is more coherent, Summary A or Summary B?"
ASSISTANT_PREFIX = "Summary"
CACHE = os.environ.get("NLG_JUDGE_CACHE", os.path.expanduser("~/.cache/nlg-judge"))
MODELS = {
    "smollm2-135m": "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-0.5b": "models/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
DATA = os.environ.get("NLG_JUDGE_DATA", os.path.join(os.path.dirname(__file__), "../../../shared/data"))


def summeval_rows(docs):
    path = os.path.join(DATA, "summeval", "summeval.jsonl")
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r["doc_idx"] in docs]


def prompts(tokenizer, rows, docs):
    a_ids = tokenizer.encode(" A", add_special_tokens=False)
    b_ids = tokenizer.encode(" B", add_special_tokens=False)
    assert len(a_ids) == 1 and len(b_ids) == 1, (a_ids, b_ids)
    out = {"A_id": a_ids[0], "B_id": b_ids[0], "docs": {}}
    for d in docs:
        doc = sorted((r for r in rows if r["doc_idx"] == d), key=lambda r: r.get("cand_idx", 0))
        article = doc[0]["source"]
        summaries = [r["summary"] for r in doc]
        pairs = []
        for i, first in enumerate(summaries):
            for j, second in enumerate(summaries):
                if i == j:
                    continue
                content = f"{article}\n\nSummary A: {first}\n\nSummary B: {second}\n\n{QUESTION}"
                text = tokenizer.apply_chat_template(
                    [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
                ) + ASSISTANT_PREFIX
                pairs.append({"i": i, "j": j, "ids": tokenizer.encode(text, add_special_tokens=False)})
        out["docs"][str(d)] = {"pairs": pairs}
    return out


def main():
    out_dir = sys.argv[1]
    docs = [int(d) for d in sys.argv[2:]] or [0, 1]
    rows = summeval_rows(docs)
    os.makedirs(os.path.join(out_dir, "data", "summeval"), exist_ok=True)
    with open(os.path.join(out_dir, "data", "summeval", "summeval.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    for name, rel in MODELS.items():
        gguf = os.path.join(CACHE, rel)
        target = os.path.join(out_dir, name)
        os.makedirs(target, exist_ok=True)
        folder, file = os.path.dirname(gguf), os.path.basename(gguf)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        tokenizer.save_pretrained(target)
        config = AutoConfig.from_pretrained(folder, gguf_file=file)
        config.save_pretrained(target)
        with open(os.path.join(target, "prompts.json"), "w") as f:
            json.dump(prompts(tokenizer, rows, docs), f)
        print(f"{name}: {config.model_type}, {config.num_hidden_layers} layers, hidden {config.hidden_size}")


if __name__ == "__main__":
    main()

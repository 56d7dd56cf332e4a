"""Write a pairwise workload whose candidates are longer than their context, in the shape
of SummEval's file, so that `nlg-judge bench pairwise` and the peers harness (prep.py reads
the same fields) run it unchanged:

    python3 benches/peers/long_candidates.py ../shared/data /tmp/long-candidates
    NLG_JUDGE_DATA=/tmp/long-candidates benches/peers/back_to_back.sh target/release/nlg-judge

Each "document" is a one-line writing task (the context, a dozen tokens) and eight news
stories of 200-260 words (the candidates: the first sentences of eight SummEval source
articles, cut at a sentence end), so every comparison prompt holds two long candidates
after a short shared prefix. This is the shape where a prefix trie shares least: only the
task line and candidate A's text are shared, and every candidate B is computed afresh for
each pair. The texts are real articles; only the pairing is made up (the human scores are
placeholders: this file is for throughput, not for agreement).
"""
import json
import os
import re
import sys

CANDIDATES = 8
DOCUMENTS = 2
MIN_WORDS, MAX_WORDS = 200, 260
TASK = "Write a news story of about 250 words for today's front page."


def cut(text):
    """The article's first sentences, from MIN_WORDS up to MAX_WORDS words, ending at a sentence end."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    out, words = [], 0
    for sentence in sentences:
        n = len(sentence.split())
        if words >= MIN_WORDS or words + n > MAX_WORDS and words > 0:
            break
        out.append(sentence)
        words += n
    return " ".join(out), words


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: long_candidates.py SHARED_DATA_DIR OUT_DIR")
    source = os.path.join(sys.argv[1], "summeval", "summeval.jsonl")
    articles = {}
    with open(source) as f:
        for line in f:
            row = json.loads(line)
            articles.setdefault(row["doc_idx"], row["source"])
    stories = []
    for doc_idx in sorted(articles):
        text, words = cut(articles[doc_idx])
        if MIN_WORDS <= words <= MAX_WORDS:
            stories.append((doc_idx, text, words))
        if len(stories) == CANDIDATES * DOCUMENTS:
            break
    if len(stories) < CANDIDATES * DOCUMENTS:
        raise SystemExit(f"only {len(stories)} articles have {MIN_WORDS}-{MAX_WORDS} words in their first sentences")
    os.makedirs(os.path.join(sys.argv[2], "summeval"), exist_ok=True)
    target = os.path.join(sys.argv[2], "summeval", "summeval.jsonl")
    with open(target, "w") as f:
        for d in range(DOCUMENTS):
            for c in range(CANDIDATES):
                article_idx, text, _ = stories[d * CANDIDATES + c]
                f.write(json.dumps({
                    "doc_id": f"long-{d}", "doc_idx": d, "system_id": f"article-{article_idx}",
                    "cand_idx": c, "source": TASK, "summary": text, "reference": None,
                    "coherence": 3.0, "consistency": 3.0, "fluency": 3.0, "relevance": 3.0,
                }) + "\n")
    words = [w for _, _, w in stories]
    print(f"wrote {target}: {DOCUMENTS} documents x {CANDIDATES} candidates, "
          f"{min(words)}-{max(words)} words each, context {len(TASK.split())} words")


if __name__ == "__main__":
    main()

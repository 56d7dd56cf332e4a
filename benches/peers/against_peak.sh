#!/usr/bin/env bash
# Ours against `hf_prefix` (the shared peers harness: transformers f32 with a hand-built
# prefix cache) on one document, back to back, with ours reporting its share of the CPU's
# multiply-add peak; prints both times, the ratio, the share, and the largest ratio this
# CPU allows (our products and attention FLOPs at 100% of the peak).
# Usage: benches/peers/against_peak.sh BINARY MODEL_CARD [DATA_DIR] [PRECISION]
#   DATA_DIR holds summeval/summeval.jsonl (default ../shared/data; or the output of
#   benches/peers/long_candidates.py); PRECISION (default f32) is ours only.
# Env: PEERS (the harness directory), PEERS_STATE (its venv-hf and cache), PYTHON.
set -euo pipefail
bin=$1 card=$2 data=$(realpath "${3:-../shared/data}") precision=${4:-f32}
PEERS="${PEERS:-$(realpath ../shared/bench/peers)}"
export PEERS_STATE="${PEERS_STATE:-$HOME/.cache/nlg-judge-peers}"
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
python="${PYTHON:-$PEERS_STATE/venv-hf/bin/python}"
model_dir="${NLG_JUDGE_CACHE:-$HOME/.cache/nlg-judge}/models/$card"
export PEERS_MODEL=$(find "$model_dir" -name '*.gguf' | head -1)
[ -n "$PEERS_MODEL" ] || { echo "no GGUF under $model_dir: nlg-judge models fetch $card" >&2; exit 1; }
export PEERS_DATA="$data/summeval/summeval.jsonl"
echo "== $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
(cd "$PEERS_STATE" && PEERS_DOCS=0 "$python" "$PEERS/prep.py" >/dev/null)
peer=$(cd "$PEERS_STATE" && PEERS_DOCS=0 "$python" "$PEERS/hf_modes.py" --mode prefix 2>&1 | grep -E '\] doc 0' \
  || { echo "peer hf_prefix FAILED" >&2; exit 1; })
echo "peer: $peer"
peer_seconds=$(sed -n 's/.*doc 0: *\([0-9.]*\)s.*/\1/p' <<<"$peer")
ours=$(NLG_JUDGE_DATA="$data" "$bin" bench pairwise --model "$card" --docs 1 --mode tree \
  --precision "$precision" --json 2>/dev/null | tail -1)
PEER_SECONDS=$peer_seconds "$python" -c '
import json, os, sys
r = json.loads(sys.stdin.read())
peer = float(os.environ["PEER_SECONDS"])
flops = r["achieved_gflops_tree"] * r["seconds_tree"]
floor = flops / r["peak_fma_gflops"]
print("ours: %.2f s, %d tokens, %s, %.1f GFLOP/s products + attention = %.0f%% of the %s peak (%.1f GFLOP/s, %d threads)" % (
    r["seconds_tree"], r["tokens_tree"], r["precision"], r["achieved_gflops_tree"],
    100 * r["fraction_of_peak_tree"], r["peak_fma_path"], r["peak_fma_gflops"], r["peak_fma_threads"]))
print("ours vs hf_prefix: %.2fx; at 100%% of the peak ours would take %.1f s: largest ratio possible %.2fx" % (
    peer / r["seconds_tree"], floor, peer / floor))
' <<<"$ours"

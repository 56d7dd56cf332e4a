#!/usr/bin/env bash
# Every instruction path of ours next to the strongest peer, back to back, interleaved:
# `nlg-judge bench pairwise --mode tree` on SummEval document(s) 0..DOCS-1 at f32, bf16
# and int8 on the native path and with NLG_JUDGE_CPU=<each of LEVELS>, and the peers
# harness's `hf_prefix` (transformers, f32, hand-built prefix cache), REPEATS rounds.
# Prints the CPU's flags, then one line per run: wall seconds from the tool's own timer.
#
# Usage: benches/paths.sh BINARY            (a release build of nlg-judge)
# Env: MODEL (card, default smollm2-135m-instruct), DOCS (1), REPEATS (1),
#      LEVELS ("portable"; e.g. "avx2 portable" on an AVX-512 machine),
#      PRECISIONS ("f32 bf16 int8"), LEVEL_PRECISIONS (precisions run at the masked
#      levels, default "f32 bf16 int8"; the portable bf16/int8 rows take ~5-7 min per doc),
#      PEER (1: run hf_prefix; needs the peers harness at PEERS and a Python with torch,
#      transformers and accelerate at PEERS_PYTHON, PYTHONPATH passes through),
#      NLG_JUDGE_DATA (the directory holding summeval/summeval.jsonl, read by both sides:
#      point it at a copy holding fewer candidates for a shorter run).
set -u
BIN="${1:?usage: benches/paths.sh BINARY}"
MODEL="${MODEL:-smollm2-135m-instruct}"
DOCS="${DOCS:-1}"
REPEATS="${REPEATS:-1}"
LEVELS="${LEVELS:-portable}"
PRECISIONS="${PRECISIONS:-f32 bf16 int8}"
LEVEL_PRECISIONS="${LEVEL_PRECISIONS:-f32 bf16 int8}"
PEER="${PEER:-1}"
PEERS="${PEERS:-/work/shared/bench/peers}"
PEERS_PYTHON="${PEERS_PYTHON:-/work/venv/bin/python}"
export PEERS_STATE="${PEERS_STATE:-$HOME/.cache/nlg-judge-peers}"
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
DATA="$(realpath "${NLG_JUDGE_DATA:-/work/shared/data}")"
export NLG_JUDGE_DATA="$DATA"

echo "== machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%FT%TZ)"
echo "== cpu flags (vector): $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' \
  | grep -E '^(avx|fma|f16c|sse4|vnni|amx)' | tr '\n' ' ')"
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"

ours() { # LEVEL PRECISION
  local level="$1" precision="$2" out
  out=$(NLG_JUDGE_CPU="$level" "$BIN" bench pairwise --model "$MODEL" --docs "$DOCS" \
    --mode tree --precision "$precision" --json 2>/dev/null | tail -1)
  echo "ours level=${level:-native} precision=$precision $(echo "$out" | "$PEERS_PYTHON" -c '
import json, sys
r = json.loads(sys.stdin.read())
print("seconds=%.1f tokens=%s gflops=%.1f calibration_gflops=%.1f path=%s kernels=%s" % (
    r["seconds_tree"], r["tokens_tree"], r["effective_gflops_tree"], r["calibration_gflops"],
    r["instruction_path"], ",".join("%s:%s" % kv for kv in r["kernel_paths"].items())))' 2>&1)"
}

peer() {
  local docs
  docs=$(seq -s ' ' 0 $((DOCS - 1)))
  local out
  out=$(cd "$PEERS_STATE" && PEERS_DOCS="$docs" "$PEERS_PYTHON" "$PEERS/hf_modes.py" --mode prefix 2>&1)
  # The harness prints one "[hf_prefix] doc N ..." line per document; without one, the
  # peer failed (a missing package, no GGUF): say so with its own words, never silently.
  if echo "$out" | grep -qE '\] doc '; then
    echo "$out" | grep -E '\] doc ' | sed 's/^/peer hf_prefix /'
  else
    echo "peer hf_prefix FAILED: $(echo "$out" | grep -iE 'error|failed|not found' | head -3 | tr '\n' ' ')"
  fi
}

if [ "$PEER" = 1 ]; then
  mkdir -p "$PEERS_STATE"
  if [ -z "${PEERS_MODEL:-}" ]; then
    PEERS_MODEL=$(find "${NLG_JUDGE_CACHE:-$HOME/.cache/nlg-judge}/models/$MODEL/" -name '*.gguf' 2>/dev/null | head -1)
    export PEERS_MODEL
  fi
  (cd "$PEERS_STATE" && PEERS_DATA="$DATA/summeval/summeval.jsonl" \
    PEERS_DOCS="$(seq -s ' ' 0 $((DOCS - 1)))" "$PEERS_PYTHON" "$PEERS/prep.py" >/dev/null 2>&1) \
    || { echo "peers prep failed (PEERS_MODEL must name the model's GGUF)"; PEER=0; }
fi
for r in $(seq 1 "$REPEATS"); do
  echo "== round $r"
  [ "$PEER" = 1 ] && peer
  for p in $PRECISIONS; do ours "" "$p"; done
  for level in $LEVELS; do
    for p in $LEVEL_PRECISIONS; do ours "$level" "$p"; done
  done
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"

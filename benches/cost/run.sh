#!/usr/bin/env bash
# Cost as the model grows, and how far from the machine's limit (issue 26, items 5-6).
#
# Phase `cost`: `nlg-judge bench pairwise --mode tree --json` on SummEval document 0 cut
# to its first CANDIDATES candidates (CANDIDATES x (CANDIDATES-1) comparisons), for
# SmolLM2-135M, Qwen2.5-0.5B (their cards) and random-weight GGUFs shaped like
# Qwen2.5-1.5B and Llama-3-8B (Q4_K_M blocks, made here by
# benches/memory/make_llama3_8b_gguf.py under OUT, never in the repository), each at the
# default --weights/--precision (what they resolve to is read back from the JSON). Records
# tokens, seconds, tokens/s, peak RSS (/usr/bin/time's and the tool's own), the fraction
# of the model-shape calibration reached, and prints a markdown table with the cost per
# parameter.
# Phase `paths`: SmolLM2 at f32, bf16 and int8 on the native path and with
# NLG_JUDGE_CPU=portable, back to back: the fraction of the model-shape calibration each
# reaches (the calibration runs at the same precision and path as the run).
#
# Usage: benches/cost/run.sh BINARY [cost|paths|all]   (a release build of nlg-judge)
# The random GGUFs' tokenizer is byte-level (one token per byte, ~4x a real tokenizer's
# count), so their runs read the document and summaries cut to RANDOM_CUT characters
# (SOURCE:SUMMARY) and the 8B reads CANDIDATES_8B candidates, to keep the 8B run near 15
# minutes on 2 cores; the cost per token is what the table compares.
# Env: OUT (work directory for the data cut, the GGUFs and the JSON; /work/scratch/cost),
#      CANDIDATES (3), CANDIDATES_8B (2), RANDOM_CUT (200:100), PYTHON (with the
#      `gguf` package; /work/venv/bin/python), BIGMEM_LOCK (a file to `flock` around the
#      1.5B and 8B runs, which need several GiB; /work/coord/bigmem.lock when its
#      directory exists), NLG_JUDGE_CACHE (where the cards' files are), NLG_JUDGE_SOURCE
#      (the full data directory holding summeval/summeval.jsonl; /work/shared/data).
set -u
BIN="$(realpath "${1:?usage: benches/cost/run.sh BINARY [cost|paths|all]}")"
PHASE="${2:-all}"
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-/work/scratch/cost}"
CANDIDATES="${CANDIDATES:-3}"
CANDIDATES_8B="${CANDIDATES_8B:-2}"
RANDOM_CUT="${RANDOM_CUT:-200:100}"
PYTHON="${PYTHON:-/work/venv/bin/python}"
SOURCE="${NLG_JUDGE_SOURCE:-/work/shared/data}"
if [ -z "${BIGMEM_LOCK+x}" ] && [ -d /work/coord ]; then
  BIGMEM_LOCK=/work/coord/bigmem.lock
fi
BIGMEM_LOCK="${BIGMEM_LOCK:-}"
GENERATOR="$HERE/../memory/make_llama3_8b_gguf.py"
mkdir -p "$OUT"

# SummEval document 0, its first N candidates, as a data directory of its own; with
# SOURCE:SUMMARY (characters), the document and the summaries cut to that length.
cut_data() { # N [SOURCE:SUMMARY] -> prints the directory
  local n="$1" limits="${2:-0:0}" dir="$OUT/data-$1-${2:-full}"
  mkdir -p "$dir/summeval"
  "$PYTHON" - "$SOURCE/summeval/summeval.jsonl" "$dir/summeval/summeval.jsonl" "$n" \
    "$limits" <<'EOF'
import json, sys
source, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
source_chars, summary_chars = (int(x) for x in sys.argv[4].split(":"))
with open(source) as f, open(target, "w") as out:
    for line in f:
        record = json.loads(line)
        if record["doc_idx"] == 0 and record["cand_idx"] < n:
            if source_chars:
                record["source"] = record["source"][:source_chars]
            if summary_chars:
                record["summary"] = record["summary"][:summary_chars]
            out.write(json.dumps(record) + "\n")
EOF
  echo "$dir"
}

# Parameters of a GGUF (every tensor's elements: a tied embedding counted once).
gguf_parameters() {
  "$PYTHON" -c '
import sys
from gguf import GGUFReader
print(sum(int(t.n_elements) for t in GGUFReader(sys.argv[1]).tensors))' "$1"
}

# The file of a card in NLG_JUDGE_CACHE (the first .gguf of its directory).
card_file() {
  ls "${NLG_JUDGE_CACHE:-$HOME/.cache/nlg-judge}/models/$1/"*.gguf | head -1
}

# bench NAME MODEL CANDIDATES[@SOURCE:SUMMARY] LOCK [ENV...] [-- EXTRA ARGS]: one run,
# JSON and time to OUT.
bench() {
  local name="$1" model="$2" n="${3%@*}" lock="$4" limits=""
  [ "$3" != "$n" ] && limits="${3#*@}"
  shift 4
  local envs=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  args=("$@")
  local data
  data="$(cut_data "$n" "$limits")"
  local wrap=()
  if [ "$lock" = 1 ] && [ -n "$BIGMEM_LOCK" ]; then wrap=(flock "$BIGMEM_LOCK"); fi
  echo "== $name: $model, $n candidates ${limits:+(source:summary cut to $limits chars)}, ${envs[*]:-} ${args[*]:-} (load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%T))" >&2
  env "${envs[@]}" NLG_JUDGE_DATA="$data" "${wrap[@]}" nice -n 5 /usr/bin/time \
    -f '%M %e' -o "$OUT/$name.time" "$BIN" bench pairwise --model "$model" --docs 1 \
    --mode tree --json "${args[@]}" >"$OUT/$name.json" 2>"$OUT/$name.err" \
    || { echo "   failed: $(tail -3 "$OUT/$name.err")" >&2; return 1; }
}

cpu_header() {
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; vector flags:" \
    "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|vnni|amx)' \
      | tr '\n' ' ')(no avx512 unless listed)"
  echo "MemAvailable $(awk '/MemAvailable/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
}

phase_cost() {
  local small="$OUT/qwen1.5b-shape-q4km.gguf" big="$OUT/llama3-8b-q4km.gguf"
  [ -f "$small" ] || nice -n 5 "$PYTHON" "$GENERATOR" --shape 1.5b "$small" >&2
  [ -f "$big" ] || nice -n 5 "$PYTHON" "$GENERATOR" "$big" >&2
  local before after
  before="$(cut -d' ' -f1-3 /proc/loadavg)"
  bench smollm2 smollm2-135m-instruct "$CANDIDATES" 0
  bench qwen05 qwen2.5-coder-0.5b-instruct "$CANDIDATES" 0
  bench rand15 "$small" "$CANDIDATES@$RANDOM_CUT" 1
  bench rand8 "$big" "$CANDIDATES_8B@$RANDOM_CUT" 1
  after="$(cut -d' ' -f1-3 /proc/loadavg)"
  cpu_header
  echo "load average (1, 5, 15 min) before: $before; after: $after"
  echo
  "$PYTHON" - "$OUT" \
    "smollm2|SmolLM2-135M|$(gguf_parameters "$(card_file smollm2-135m-instruct)")" \
    "qwen05|Qwen2.5-0.5B|$(gguf_parameters "$(card_file qwen2.5-coder-0.5b-instruct)")" \
    "rand15|random 1.5B (Qwen2.5-1.5B shape)|$(gguf_parameters "$small")" \
    "rand8|random 8B (Llama-3-8B shape)|$(gguf_parameters "$big")" <<'EOF'
import json, sys, os
out = sys.argv[1]
print("| model | weights, precision (as run) | parameters (all / block matmuls) | comparisons | tokens | seconds | tokens/s | s per 1k tokens per B block params | peak RSS (time) | RSS bytes per parameter | % of 1024^3 GEMM | % of model-shape calibration (rows) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for spec in sys.argv[2:]:
    name, label, params = spec.split("|")
    params = int(params)
    try:
        r = json.load(open(os.path.join(out, name + ".json")))
        rss_kib, wall = open(os.path.join(out, name + ".time")).read().split()[-2:]
    except (OSError, ValueError) as e:
        print(f"| {label} | failed ({e}) |")
        continue
    rss = int(rss_kib) * 1024
    block = r["matmul_parameters"]
    tokens, seconds = r["tokens_tree"], r["seconds_tree"]
    cost = seconds / (tokens / 1e3) / (block / 1e9)
    print(f"| {label} | {r['weights_used']}, {r['precision']} ({r['instruction_path']}) "
          f"| {params/1e9:.3f} B / {block/1e9:.3f} B | {r['comparisons']} | {tokens} "
          f"| {seconds:.1f} | {r['tokens_per_second_tree']:.1f} | {cost:.2f} "
          f"| {rss/2**30:.2f} GiB | {rss/params:.2f} "
          f"| {100*r['fraction_of_calibration_tree']:.0f}% "
          f"| {100*r['fraction_of_model_shapes_tree']:.0f}% ({r['calibration_model_shapes_rows']}) |")
EOF
}

phase_paths() {
  local before after
  before="$(cut -d' ' -f1-3 /proc/loadavg)"
  local runs=()
  for level in native portable; do
    for precision in f32 bf16 int8; do
      local envs=(NLG_JUDGE_CPU=$level)
      bench "paths-$precision-$level" smollm2-135m-instruct "$CANDIDATES" 0 "${envs[@]}" \
        -- --precision "$precision" && runs+=("paths-$precision-$level")
    done
  done
  after="$(cut -d' ' -f1-3 /proc/loadavg)"
  cpu_header
  echo "load average (1, 5, 15 min) before: $before; after: $after"
  echo
  "$PYTHON" - "$OUT" "${runs[@]}" <<'EOF'
import json, sys, os
out = sys.argv[1]
print("| precision | path (NLG_JUDGE_CPU) | products | tokens/s | effective GFLOP/s | 1024^3 f32 GEMM GFLOP/s | model-shape calibration GFLOP/s (rows) | fraction of model shapes | fraction of 1024^3 |")
print("|---|---|---|---|---|---|---|---|---|")
for name in sys.argv[2:]:
    r = json.load(open(os.path.join(out, name + ".json")))
    level = name.rsplit("-", 1)[1]
    print(f"| {r['precision']} | {level} | {r['instruction_path']} ({r['weights_used']}) "
          f"| {r['tokens_per_second_tree']:.0f} | {r['effective_gflops_tree']:.1f} "
          f"| {r['calibration_gflops']:.1f} | {r['calibration_model_shapes_gflops']:.1f} "
          f"({r['calibration_model_shapes_rows']}) | {r['fraction_of_model_shapes_tree']:.2f} "
          f"| {r['fraction_of_calibration_tree']:.2f} |")
EOF
}

case "$PHASE" in
  cost) phase_cost ;;
  paths) phase_paths ;;
  all) phase_paths; echo; phase_cost ;;
  *) echo "unknown phase $PHASE (cost, paths or all)" >&2; exit 2 ;;
esac

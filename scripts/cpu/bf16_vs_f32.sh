#!/usr/bin/env bash
# bf16 against f32 end to end on this CPU, alternating back to back (f32, bf16, f32, bf16):
# SummEval document 0, SmolLM2-135M, the prefix trie. Prints each run's seconds, achieved
# GFLOP/s and fractions of the FMA and vdpbf16ps peaks, then bf16's agreement with f32
# (max |dp|, share of the same decisions). Usage: scripts/cpu/bf16_vs_f32.sh [OUT_DIR]
# (needs the release build and NLG_JUDGE_DATA or ../shared/data).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-$(mktemp -d)}
mkdir -p "$out"
data=${NLG_JUDGE_DATA:-$(cd .. && pwd)/shared/data}
lscpu | grep -E 'Model name|CPU family|^Model:|^CPU\(s\)'
lscpu | grep -o 'avx512_bf16\|amx_bf16' | sort -u | tr '\n' ' '; echo
for round in 1 2; do
  for p in f32 bf16; do
    target/release/nlg-judge bench pairwise --model smollm2-135m-instruct --docs 1 \
      --mode tree --precision "$p" --json --data-dir "$data" \
      --save-probabilities "$out/p-$p-$round.json" >"$out/$p-$round.json" 2>"$out/$p-$round.err"
    python3 - "$out/$p-$round.json" "$p" "$round" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
keys = ["seconds_tree", "achieved_gflops_tree", "calibration_model_shapes_gflops",
        "peak_fma_gflops", "peak_bf16_dot_gflops", "peak_amx_gflops",
        "fraction_of_peak_tree", "fraction_of_bf16_dot_peak_tree"]
print(sys.argv[2], sys.argv[3], *(f"{k}={d.get(k)}" for k in keys))
PY
  done
done
python3 - "$out" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/p-{name}.json"))["p_first"]
f32, bf16 = load("f32-1"), load("bf16-1")
dp = [abs(a - b) for a, b in zip(f32, bf16)]
same = sum((a > 0.5) == (b > 0.5) for a, b in zip(f32, bf16)) / len(f32)
print(f"bf16 against f32: {len(f32)} comparisons, max |dp| {max(dp):.4f}, "
      f"mean |dp| {sum(dp) / len(dp):.4f}, same decisions {same:.1%}; "
      f"f32 repeat max |dp| {max(abs(a - b) for a, b in zip(f32, load('f32-2')))}")
PY

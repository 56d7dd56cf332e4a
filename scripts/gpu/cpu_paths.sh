#!/usr/bin/env bash
# The lent GPU machine's CPU is an AVX-512 Xeon, a CPU the project's own machines seldom are:
# on 2 of its cores (taskset), SummEval document 0 (240 comparisons) on the SmolLM2 shape
# with random weights (speed does not depend on their values), ours `bench pairwise --mode
# tree` at f32, bf16 and int8 on every instruction path (`NLG_JUDGE_CPU`), and transformers
# with a hand-built prefix cache (`peer_prefix.py --mode prefix`, f32, the same token ids),
# rows back to back. Run from the repository root after `scripts/gpu/run.sh` (or with its
# binary unpacked to /tmp/nlg-judge and the random weights made); log to OUT.
set -u
G="${GPU_DIR:-.gpu}"
OUT="${OUT:-/tmp/gpu-out}"
W=/tmp/gpu-cpu
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/cpu-paths.txt") 2>&1
export NLG_JUDGE_CACHE=/tmp/nlg-judge-cache NLG_JUDGE_DATA="$G/data" OMP_NUM_THREADS=2 MKL_NUM_THREADS=2
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore TOKENIZERS_PARALLELISM=false
bin=/tmp/nlg-judge
if [ ! -x "$bin" ]; then
  python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('$G/nlg-judge.xz'), open('$bin', 'wb'))"
  chmod +x "$bin"
fi
model="$G/smollm2-135m"
[ -f "$model/model.safetensors" ] || python3 scripts/gpu/make_random_models.py "$model"
python3 - "$model" "$W/one" <<'PY'
import json, os, shutil, sys
src, dst = sys.argv[1:]
os.makedirs(dst, exist_ok=True)
for name in os.listdir(src):
    if name != "prompts.json" and not os.path.exists(os.path.join(dst, name)):
        os.symlink(os.path.abspath(os.path.join(src, name)), os.path.join(dst, name))
p = json.load(open(os.path.join(src, "prompts.json")))
p["docs"] = dict(list(p["docs"].items())[:1])
json.dump(p, open(os.path.join(dst, "prompts.json"), "w"))
PY
echo "== $(lscpu | sed -n 's/^Model name: *//p'); $(grep -o -E 'avx512(f|_bf16|_vnni)|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
# Whether vCPUs 0 and 1 are two cores or two threads of one.
echo "== vCPU 0 and 1 on cores: $(lscpu -p=CPU,CORE | grep -E '^(0|1),' | cut -d, -f2 | tr '\n' ' ')"
# One row: LABEL, the value of NLG_JUDGE_CPU, then bench pairwise's extra arguments.
row() {
  local label=$1 level=$2
  shift 2
  echo "-- $label: $(NLG_JUDGE_CPU=$level taskset -c 0,1 "$bin" bench pairwise --model "$model" \
    --device cpu --docs 1 --mode tree "$@" 2>&1 |
    grep -E '^tree|instruction path|calibration GEMM|against the reference|rror' | tr '\n' ' ')"
}
echo "-- peer: $(taskset -c 0,1 python3 scripts/gpu/peer_prefix.py "$W/one" --mode prefix --dtype f32 \
  --device cpu --out "$W/peer.json" 2>&1 | tail -1)"
row "native f32" native --save-probabilities "$W/f32.json"
for level in native avx512f avx2; do
  for precision in bf16 int8; do
    row "$level $precision" "$level" --precision "$precision" --compare-with "$W/f32.json"
  done
done
row "avx2 f32" avx2 --compare-with "$W/f32.json"
cp "$W"/*.json "$OUT"/ 2>/dev/null
echo "== done"

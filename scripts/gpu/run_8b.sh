#!/usr/bin/env bash
# Issue 38, item 7: a real-size judge on the GPU. Run after run.sh (same folder GPU_DIR,
# default .gpu, that `scripts/gpu/pack.sh` fills; python3 with torch and transformers), from
# the repository root. Writes its log and a JSON archive to OUT (default /tmp/gpu-out-8b).
#   1. a Llama-3-8B-shaped model with random bf16 weights, made here (make_llama3_8b.py);
#   2. ours, `bench pairwise` on SummEval documents 0-1 in bf16 by the level plan: time,
#      tokens per second, passes, operations per layer and pass, and the products' rate at
#      the model's shapes (cuBLAS bf16) for the fraction of the GPU's dense rate;
#   3. ours, `compare` on all of SummEval (100 documents x 240 ordered comparisons, 24,000)
#      in bf16, with the result cache on: a run stopped by its time bound keeps what it did,
#      and running this script again resumes it (the time is then the sum of the runs);
#   4. transformers with its batched prefix cache (`peer_prefix.py --mode prefix_b15`) in
#      bf16 on the same GPU, documents 0-1, the same token ids;
#   5. vLLM with prefix caching, where this machine has it installed: our `compare --backend`
#      through it on documents 0-1, against step 2's probabilities.
# GPU_DEVICE=cpu TINY=1 LIMIT_CONTEXTS=2 runs the same steps on a 2-layer model on a CPU, to
# check this script without a GPU; SKIP_VLLM=1 leaves out step 5.
set -u
G="${GPU_DIR:-.gpu}"
OUT="${OUT:-/tmp/gpu-out-8b}"
W=/tmp/gpu-work-8b
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/log.txt") 2>&1
trap 'tar -C "$W" -czf "$OUT/results.tar.gz" --exclude "*.safetensors" --exclude llama3-8b --exclude cache .' EXIT
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
export TOKENIZERS_PARALLELISM=false RUST_BACKTRACE=1
export NLG_JUDGE_CACHE="$W/cache" NLG_JUDGE_DATA="$G/data"
GPU="${GPU_DEVICE:-cuda}"
TINY_FLAG=()
[ "${TINY:-0}" = 1 ] && TINY_FLAG=(--tiny)
LIMIT=()
[ -n "${LIMIT_CONTEXTS:-}" ] && LIMIT=(--limit-contexts "$LIMIT_CONTEXTS")
# step, bounded, unpack_binary.
source scripts/gpu/lib.sh

step machine
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null
echo "$(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"

step binary
unpack_binary

model="$W/llama3-8b"
step "model: Llama-3-8B shape, random bf16 weights"
[ -f "$model/config.json" ] || bounded 300 python3 scripts/gpu/make_llama3_8b.py "$model" \
  "$G/smollm2-135m" --device "$GPU" "${TINY_FLAG[@]}" || { echo "no model: stopping"; exit 1; }
du -sh "$model"

step "ours: bench pairwise, documents 0-1, bf16, level plan"
bounded_json "$W/ours.json" 300 "$bin" bench pairwise --model "$model" --device "$GPU" \
  --precision bf16 --docs 2 --mode tree --plan levels --json --save-probabilities "$W/ours-p.json"
python3 - "$W/ours.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"   no result ({e})")
# H100 and H200 SXM: 989 TFLOP/s dense bf16 (NVIDIA's data sheets).
print(f"   {d['comparisons']} comparisons in {d['seconds_tree']:.2f} s, {d['tokens_tree']} tokens, "
      f"{d['tokens_per_second_tree']:.0f} tokens/s, {d['effective_gflops_tree']:.0f} GFLOP/s "
      f"({d['effective_gflops_tree'] / 989e3:.1%} of 989 TFLOP/s dense bf16; the products alone "
      f"at the model's shapes {d['calibration_model_shapes_gflops']:.0f} GFLOP/s); plan {d['plan']}, "
      f"{d['passes_tree']} passes, {d['ops_per_layer_pass_max']} ops per layer and pass")
PY

step "ours: compare, all of SummEval (coherence, c1), bf16; cached, so a rerun resumes"
"$bin" convert --dataset summeval --data-dir "$W/data" "${LIMIT[@]}" --output "$W/summeval.jsonl" 2>/dev/null \
  || { mkdir -p "$W/data/summeval" && xz -dc "$G/summeval-all.jsonl.xz" >"$W/data/summeval/summeval.jsonl" \
       && "$bin" convert --dataset summeval --data-dir "$W/data" "${LIMIT[@]}" --output "$W/summeval.jsonl"; }
echo "   $(wc -l <"$W/summeval.jsonl") summaries"
start=$(date +%s%N)
bounded 540 "$bin" compare --input "$W/summeval.jsonl" --attribute coherence --template c1 \
  --model "$model" --device "$GPU" --precision bf16 \
  --comparisons-out "$W/compare.jsonl" --output "$W/compare.scores.jsonl"
echo "   this run: $((($(date +%s%N) - start) / 1000000)) ms; comparisons written: $(wc -l <"$W/compare.jsonl" 2>/dev/null || echo 0)"

step "transformers, batched prefix cache, bf16, documents 0-1"
bounded 300 python3 scripts/gpu/peer_prefix.py "$model" --mode prefix_b15 --dtype bf16 \
  --device "$GPU" --out "$W/peer.json"
python3 scripts/gpu/summarize.py "$W/ours.json" "$W/ours-p.json" "$W/peer.json"

if [ "${SKIP_VLLM:-0}" != 1 ] && python3 -c 'import vllm' 2>/dev/null; then
  step "vLLM with prefix caching: our compare --backend, documents 0-1"
  port=18777
  python3 -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name llama3-8b \
    --dtype bfloat16 --enable-prefix-caching --max-logprobs 20 --max-model-len 8192 \
    --host 127.0.0.1 --port "$port" >"$W/vllm.log" 2>&1 &
  vllm_pid=$!
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
    kill -0 "$vllm_pid" 2>/dev/null || break
    sleep 1
  done
  "$bin" convert --dataset summeval --data-dir "$G/data" --output "$W/doc01.jsonl" 2>/dev/null
  bounded 300 "$bin" compare --input "$W/doc01.jsonl" --attribute coherence --template c1 \
    --backend "http://127.0.0.1:$port/v1" --model llama3-8b --tokenizer "$model" --no-cache \
    --comparisons-out "$W/vllm-compare.jsonl" --output "$W/vllm-scores.jsonl"
  kill "$vllm_pid" 2>/dev/null
else
  step "vLLM: skipped (SKIP_VLLM=1, or python3 -c 'import vllm' fails here)"
fi
step done

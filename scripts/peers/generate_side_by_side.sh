#!/usr/bin/env bash
# Issue 58's check, one script, back to back: SummEval document 0's 16 rubric-feedback
# prompts (plain protocol, SmolLM2-135M Q4_1, 128-token feedbacks) through
#   - transformers' batched generate (the peers harness's genpeer.py, bf16 and f32), and
#   - `nlg-judge bench generate` (the whole `score --method rubric` run: feedbacks, then
#     each score read after its marker) at f32, bf16 and int8.
#   - llama-cpp-python, one prompt at a time (genpeer.py's llama mode), where the peers'
#     venv-llama exists.
# Usage: scripts/peers/generate_side_by_side.sh OUT_DIR   (needs the peers' venv-hf, and
# venv-llama for the llama row: ../shared/bench/peers/run_peers.sh sets them up under
# ~/.cache/nlg-judge-peers)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?output directory}
mkdir -p "$out"
export NLG_JUDGE_DATA=${NLG_JUDGE_DATA:-$(cd .. && pwd)/shared/data}
state=${PEERS_STATE:-$HOME/.cache/nlg-judge-peers}
bin=target/release/nlg-judge
gguf=$($bin models path smollm2-135m-instruct)
new=${NEW_TOKENS:-128}
lscpu | grep -E "Model name|Flags" | sed 's/Flags:.*\(amx_tile\|avx512_bf16\|avx512f\).*/Flags: (see lscpu)/' > "$out/cpu.txt"
$bin bench generate --docs 1 --candidates 16 --max-feedback-tokens "$new" \
  --save-prompts "$out/prompts.json" --rows 64 --json > /dev/null 2>&1 || true
for dtype in bf16 f32; do
  "$state/venv-hf/bin/python" ../shared/bench/peers/genpeer.py hf_batch --prompts "$out/prompts.json" \
    --gguf "$gguf" --new "$new" --dtype "$dtype" | tee "$out/hf_batch_$dtype.json"
done
if "$state/venv-llama/bin/python" -c "import llama_cpp" 2>/dev/null; then
  "$state/venv-llama/bin/python" ../shared/bench/peers/genpeer.py llama --prompts "$out/prompts.json" \
    --gguf "$gguf" --new "$new" | tee "$out/llama.json"
else
  echo "llama-cpp-python is not installed in $state/venv-llama: no llama row" | tee "$out/llama.json"
fi
for precision in f32 bf16 int8; do
  $bin bench generate --docs 1 --candidates 16 --max-feedback-tokens "$new" --precision "$precision" \
    --json --save-feedbacks "$out/feedbacks_$precision.json" | tee "$out/ours_$precision.json"
done

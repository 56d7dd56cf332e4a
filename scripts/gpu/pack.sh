#!/usr/bin/env bash
# Fill the folder the GPU check carries (GPU_DIR, default .gpu; ignored by git): the
# `--features cuda` release build (`.ci/cuda-build` with CUDA_BUILD_PROFILE=release and the
# CUDA line of the GPU's driver, e.g. CUDA_WHEEL_VERSION=13.0 CUDA_COMPUTE_CAP=90),
# xz-compressed, what `prepare.py` and `gguf_metadata.py` write, all of SummEval (for
# run_8b.sh) and the `gguf` wheel. At most 64 MiB travel.
# Usage: scripts/gpu/pack.sh BINARY [TEST_BINARY]   (env: PYTHON with transformers and gguf,
# GPU_DIR). TEST_BINARY: the `it` integration tests built with `--features cuda`
# (`CUDA_BUILD_TESTS=1 .ci/cuda-build` prints its path); run.sh runs their GPU twins.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$1
G="${GPU_DIR:-.gpu}"
py="${PYTHON:-python3}"
cache="${NLG_JUDGE_CACHE:-$HOME/.cache/nlg-judge}"
mkdir -p "$G"
[ -f "$G/smollm2-135m/prompts.json" ] || "$py" scripts/gpu/prepare.py "$G" 0 1
[ -f "$G/smollm2-metadata.gguf" ] || "$py" scripts/gpu/gguf_metadata.py \
  "$cache/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf" "$G/smollm2-metadata.gguf"
# All of SummEval (13 MB, ~2 MB compressed) for run_8b.sh's full run.
[ -f "$G/summeval-all.jsonl.xz" ] || xz -T2 -9 -c \
  "${NLG_JUDGE_DATA:-../shared/data}/summeval/summeval.jsonl" >"$G/summeval-all.jsonl.xz"
[ -n "$(ls "$G"/whl/gguf-*.whl 2>/dev/null)" ] || "$py" -m pip download -q --no-deps \
  --only-binary=:all: -d "$G/whl" gguf==0.19.0
strip -o "$G/nlg-judge" "$bin"
xz -T2 -6 -f "$G/nlg-judge"
if [ -n "${2:-}" ]; then
  strip -o "$G/it" "$2"
  xz -T2 -6 -f "$G/it"
  pwd >"$G/it.root"
fi
du -sh "$G"
du -sh --apparent-size "$G"/* "$G"/*/* | sort -h | tail -8

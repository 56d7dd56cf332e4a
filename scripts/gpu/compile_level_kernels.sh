#!/usr/bin/env bash
# Compile the level pass's CUDA kernels (src/arch/llama/level_ops.cu) without a GPU or a
# driver, the way the binary does at run time and the way nvcc would:
#   1. NVRTC (the library the binary loads), through ctypes, with the binary's options
#      (none: cudarc's `compile_ptx`), then each kernel's PTX entry listed;
#   2. nvcc to PTX and ptxas to machine code for sm_80 (A100) and sm_90 (H100/H200), with
#      ptxas's registers, shared memory and spills per kernel.
# Needs the toolkit that `.ci/cuda-build` assembles from NVIDIA's wheels (run that first;
# CUDA_BUILD_DIR as there). Prints everything; exits non-zero on any compile error.
set -euo pipefail
cd "$(dirname "$0")/../.."
work="${CUDA_BUILD_DIR:-/tmp/nlg-judge-cuda-build}"
toolkit="$work/cuda"
source_file=src/arch/llama/level_ops.cu
[ -x "$toolkit/bin/nvcc" ] || { echo "no toolkit in $toolkit: run .ci/cuda-build first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== NVRTC $(ls "$toolkit"/lib64/libnvrtc.so.* | head -1 | sed 's/.*\.so\.//'), default options"
"$work/venv/bin/python" - "$toolkit/lib64/libnvrtc.so" "$source_file" <<'PY'
import ctypes, re, sys
nvrtc = ctypes.CDLL(sys.argv[1])
source = open(sys.argv[2], "rb").read()
program = ctypes.c_void_p()
def check(status, what):
    if status != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise SystemExit(f"{what}: {nvrtc.nvrtcGetErrorString(status).decode()}")
check(nvrtc.nvrtcCreateProgram(ctypes.byref(program), source, b"level_ops.cu", 0, None, None), "create")
status = nvrtc.nvrtcCompileProgram(program, 0, None)
size = ctypes.c_size_t()
nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetProgramLog(program, log)
if log.value.strip():
    print(log.value.decode())
check(status, "compile")
nvrtc.nvrtcGetPTXSize(program, ctypes.byref(size))
ptx = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetPTX(program, ptx)
text = ptx.value.decode()
target = re.search(r"^\.target (\S+)", text, re.M).group(1)
entries = re.findall(r"\.entry (\w+)", text)
print(f"   PTX for {target}, {len(text)} bytes, {len(entries)} kernels: {' '.join(sorted(entries))}")
if len(entries) != 9:
    raise SystemExit("expected 9 kernels (3 operations x f32, bf16, f16)")
PY

for arch in 80 90; do
  echo "== nvcc -> PTX -> ptxas, sm_$arch"
  "$toolkit/bin/nvcc" --ptx -arch="compute_$arch" -o "$out/level_$arch.ptx" "$source_file"
  "$toolkit/bin/ptxas" -arch="sm_$arch" -v "$out/level_$arch.ptx" -o "$out/level_$arch.cubin" 2>&1 |
    awk '/Compiling entry/ { name = $(NF-2); gsub(/\047/, "", name) }
         /spill/ { spill = $0; sub(/^ +/, "", spill) }
         /Used/ { sub(/.*Used/, "Used"); printf "   %-24s %s; %s\n", name, $0, spill }'
done

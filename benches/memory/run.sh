#!/bin/sh
# Peak RSS and load time of nlg-judge on a random-weight GGUF shaped like Llama-3-8B
# (Q4_K_M, ~4.9 GB; made by make_llama3_8b_gguf.py), one run per load policy, through
# the loading route every command takes (examples/load_model.rs: memory plan, then the
# weights). Needs ~12 GiB free.
#
#   cargo build --example load_model
#   benches/memory/run.sh target/debug/examples/load_model /work/scratch/cards/llama3-8b-q4km.gguf
set -u
BIN=$1
MODEL=$2
free -g
grep MemAvailable /proc/meminfo
# bf16 (~20 GiB by the estimate) is left out: the plan refuses it unless ~21 GiB are free.
# To measure it anyway: LOAD_MODEL_AVAILABLE_GIB=22 "$BIN" "$MODEL" auto bf16 (18.4 GiB peak).
for policy in "auto auto" "quantized f32" "f32 f32" "auto int8"; do
  echo "== weights, precision: $policy"
  # shellcheck disable=SC2086
  nice -n 5 /usr/bin/time -f "peak RSS %M KiB, wall %e s, exit %x" "$BIN" "$MODEL" $policy 2>&1 | tail -4
done

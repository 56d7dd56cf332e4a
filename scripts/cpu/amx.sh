#!/usr/bin/env bash
# Issue 50 on any x86-64 machine, in one script, rows back to back: whether the AMX tiles
# ran (and if not, why), the tile unit's measured bf16 peak, SummEval document 0 (240
# comparisons, SmolLM2) by the trie in f32, bf16, int8 and auto with each one's agreement
# with f32 (largest |dp|, same decisions: auto may pick bf16 only at <= 0.01 and >= 99%),
# and, where the peers harness can run without installing anything, transformers'
# hf_prefix_b15 in bf16 beside them. Every `bench pairwise --json` line and a summary
# (summary.json, summary.txt) go to the output directory.
#
# Usage (from the repository root): scripts/cpu/amx.sh [OUT_DIR]
#   OUT_DIR           default results/amx-<host>-<UTC time>
#   NLG_JUDGE_BIN     the binary (default target/release/nlg-judge, built when missing)
#   AMX_MODEL         default smollm2-135m-instruct (fetched by `models fetch` if missing)
#   AMX_THREADS       rayon threads and the peers' threads (default: all of nproc)
#   PEERS_DIR         the peers harness (default ../shared/bench/peers); AMX_PEERS=0 skips it
#   AMX_DRY_RUN=1     print the commands, run nothing
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
OUT="${1:-results/amx-$(hostname -s)-$(date -u +%Y%m%dT%H%M%SZ)}"
BIN="${NLG_JUDGE_BIN:-target/release/nlg-judge}"
MODEL="${AMX_MODEL:-smollm2-135m-instruct}"
THREADS="${AMX_THREADS:-$(nproc)}"
PEERS_DIR="${PEERS_DIR:-../shared/bench/peers}"
DRY="${AMX_DRY_RUN:-0}"
export RAYON_NUM_THREADS="$THREADS"

run() {
  echo "+ $*" >&2
  [ "$DRY" = 1 ] || "$@"
}

mkdir -p "$OUT"
{
  echo "date: $(date -u -Is)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
  echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) vCPUs, threads $THREADS"
  echo "flags: $(grep -m1 -o -w -E 'amx_(tile|bf16|int8)|avx512_(bf16|vnni)|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "kernel: $(uname -r)"
} | tee "$OUT/machine.txt"

if [ ! -x "$BIN" ]; then
  run cargo build --release --bin nlg-judge || exit 1
fi
if ! run "$BIN" models path "$MODEL" >/dev/null 2>&1; then
  run "$BIN" models fetch "$MODEL" --no-progress || exit 1
fi

# One row: NAME, then bench pairwise's extra arguments; its JSON line to OUT/NAME.json.
row() {
  local name=$1
  shift
  echo "== $name" >&2
  if [ "$DRY" = 1 ]; then
    echo "+ $BIN bench pairwise --model $MODEL --device cpu --docs 1 --mode tree --json $*" >&2
    return
  fi
  "$BIN" bench pairwise --model "$MODEL" --device cpu --docs 1 --mode tree --json "$@" \
    >"$OUT/$name.json" 2>"$OUT/$name.stderr" ||
    echo "!! $name failed: $(tail -3 "$OUT/$name.stderr")" >&2
}

row f32 --precision f32 --save-probabilities "$OUT/f32-probabilities.json"
for precision in bf16 int8 auto; do
  row "$precision" --precision "$precision" --compare-with "$OUT/f32-probabilities.json"
done

# The peers: transformers' hf_prefix_b15 in bf16 (torch runs bf16 through oneDNN, on AMX
# where the CPU has it), only if the harness's own environment is installed already
# (run_peers.sh would otherwise install torch, several GB).
peers_state="${PEERS_STATE:-$HOME/.cache/nlg-judge-peers}"
if [ "${AMX_PEERS:-1}" = 0 ]; then
  echo "peers: skipped (AMX_PEERS=0)" | tee "$OUT/peers.txt"
elif [ ! -x "$PEERS_DIR/run_peers.sh" ]; then
  echo "peers: skipped ($PEERS_DIR/run_peers.sh not found)" | tee "$OUT/peers.txt"
elif ! "$peers_state/venv-hf/bin/python" -c "import torch, transformers" 2>/dev/null; then
  echo "peers: skipped (no torch/transformers in $peers_state/venv-hf; run $PEERS_DIR/run_peers.sh once to install)" |
    tee "$OUT/peers.txt"
else
  echo "== peers hf_prefix_b15_bf16" >&2
  if [ "$DRY" = 1 ]; then
    echo "+ PEERS_DOCS=0 PEERS_MODES=hf_prefix_b15_bf16 PEERS_THREADS=$THREADS $PEERS_DIR/run_peers.sh" >&2
  else
    PEERS_DOCS=0 PEERS_MODES=hf_prefix_b15_bf16 PEERS_THREADS="$THREADS" "$PEERS_DIR/run_peers.sh" \
      >"$OUT/peers.txt" 2>&1 || echo "!! peers failed: see $OUT/peers.txt" >&2
    cp "$peers_state"/results/*hf_prefix_b15_bf16*.json "$OUT"/ 2>/dev/null
  fi
fi
[ "$DRY" = 1 ] && exit 0

# The summary: one row per precision, the AMX facts from the f32 row.
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, json, os, sys
out = sys.argv[1]
rows, summary = [], {"machine": open(os.path.join(out, "machine.txt")).read().splitlines()}
# Issue 61: the tile kernels' seconds split into the tile instructions and the work
# around them (null where no tile path ran).
TILE_PARTS = tuple(f"seconds_{p}_tree" for p in (
    "attention_tiles", "attention_softmax", "attention_packing", "attention_other",
    "products_tiles", "products_conversion", "products_other"))
for name in ("f32", "bf16", "int8", "auto"):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            r = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        rows.append(f"{name:<5} failed (see {name}.stderr)")
        continue
    a = r.get("agreement") or {}
    summary[name] = {k: r.get(k) for k in (
        "precision", "instruction_path", "kernel_paths", "seconds_tree", "tokens_per_second_tree",
        "achieved_gflops_tree", "peak_fma_gflops", "peak_amx_gflops", "amx_unavailable",
        "peak_rss_bytes_tree", "seconds_products_tree", "seconds_attention_tree",
        "seconds_rest_tree", "tile_unit_tree") + TILE_PARTS}
    summary[name]["agreement"] = a or None
    ok = a and a["max_abs_diff"] <= 0.01 and a["same_decision"] >= 0.99
    rows.append(
        f"{name:<5} {r.get('precision', '?'):<5} path {r.get('instruction_path')}: "
        f"{r.get('seconds_tree', float('nan')):.2f} s, {r.get('achieved_gflops_tree') or 0:.1f} GFLOP/s"
        + (f"; max |dp| {a['max_abs_diff']:.4f}, same decisions {100 * a['same_decision']:.2f}%"
           f" ({'within' if ok else 'outside'} auto's bound)" if a else ""))
    if r.get("seconds_products_tree") is not None:
        rows.append(f"      products {r['seconds_products_tree']:.2f} s, attention "
                    f"{r['seconds_attention_tree']:.2f} s, rest {r['seconds_rest_tree']:.2f} s")
    if r.get("tile_unit_tree"):
        parts = ", ".join(f"{k[len('seconds_'):-len('_tree')]} {r[k]:.2f} s"
                          for k in TILE_PARTS if r.get(k) is not None)
        rows.append(f"      tiles ({r['tile_unit_tree']}): {parts}")
first = summary.get("f32", {})
amx_peak = first.get("peak_amx_gflops")
bf16_row = summary.get("bf16") or {}
print("AMX tiles: " + (
    "the portable model stood in (NLG_JUDGE_TILES=model)" if bf16_row.get("tile_unit_tree") == "model"
    else "ran" if bf16_row.get("instruction_path") == "amx"
    else f"did not run ({first.get('amx_unavailable') or 'see bf16.stderr'})"))
print(f"AMX bf16 peak: {amx_peak:.1f} GFLOP/s" if amx_peak else "AMX bf16 peak: not measured")
print(f"FMA peak: {first.get('peak_fma_gflops') or 0:.1f} GFLOP/s")
print("\n".join(rows))
peers = sorted(glob.glob(os.path.join(out, "*hf_prefix_b15_bf16*.json")))
summary["peers"] = [json.load(open(p)) for p in peers]
print("peers: " + (", ".join(os.path.basename(p) for p in peers) or "none (see peers.txt)"))
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
echo "written to $OUT" >&2

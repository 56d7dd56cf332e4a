#!/usr/bin/env bash
# The remote backend (issue 39) against our own `nlg-judge serve` on loopback, a real HTTP
# engine, on SummEval document 0 (16 summaries): `compare` (240 ordered comparisons,
# coherence, c1), `score --method prompt` and `score --method geval` (given steps, 1-5),
# each run in process and through `--backend`, both in f32 without a result cache.
# Prints the largest differences (p_a, label mass, scores), the decisions that differ,
# and the times (the issue's benchmark: remote within 1.5x of in process). Slow
# (minutes), not in `cargo test`; its output is recorded in docs/results.md.
#
#   tests/clients/serve_backend.sh            # uses target/release/nlg-judge
#   CONCURRENCY=8 tests/clients/serve_backend.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=tests/clients/out/serve_backend
mkdir -p "$OUT"
BIN=target/release/nlg-judge
[ -x "$BIN" ] || cargo build --release --locked
MODEL=smollm2-135m-instruct
CONCURRENCY=${CONCURRENCY:-32}
"$BIN" convert --dataset summeval --data-dir "${NLG_JUDGE_DATA:-../shared/data}" \
    --limit-contexts 1 --output "$OUT/doc0.jsonl" 2>/dev/null
printf '1. Read the article and the summary.\n2. Check that the sentences follow one another.\n3. Rate coherence from 1 to 5.\n' >"$OUT/steps.txt"

"$BIN" serve --model "$MODEL" --precision f32 --addr 127.0.0.1:0 2>"$OUT/serve.log" >/dev/null &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
URL=
for _ in $(seq 1 120); do
    URL=$(grep -o 'http://[0-9.:]*' "$OUT/serve.log" | head -1 || true)
    [ -n "$URL" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$OUT/serve.log" >&2; exit 1; }
    sleep 1
done
echo "serve on $URL ($(lscpu | grep -m1 'Model name' | sed 's/ *Model name: *//'), $(nproc) cores)"

run() { # name, then the command's arguments; prints the seconds taken
    local name=$1; shift
    local start; start=$(date +%s.%N)
    "$BIN" "$@" --no-cache 2>"$OUT/$name.log" >/dev/null || { cat "$OUT/$name.log" >&2; exit 1; }
    echo "$(date +%s.%N) - $start" | bc
}
LOCAL=(--model "$MODEL" --precision f32)
REMOTE=(--model "$MODEL" --backend "$URL/v1" --concurrency "$CONCURRENCY")
COMPARE=(compare --input "$OUT/doc0.jsonl" --attribute coherence --template c1)
PROMPT=(score --method prompt --input "$OUT/doc0.jsonl" --attribute coherence)
GEVAL=(score --method geval --input "$OUT/doc0.jsonl" --attribute coherence --steps "$OUT/steps.txt" --scale 1-5)
# The remote runs first, then the in-process ones: the service's model is loaded and warm.
t_compare_remote=$(run compare_remote "${COMPARE[@]}" "${REMOTE[@]}" --comparisons-out "$OUT/compare_remote.jsonl" --output "$OUT/compare_remote.scores.jsonl")
t_compare_local=$(run compare_local "${COMPARE[@]}" "${LOCAL[@]}" --comparisons-out "$OUT/compare_local.jsonl" --output "$OUT/compare_local.scores.jsonl")
t_prompt_remote=$(run prompt_remote "${PROMPT[@]}" "${REMOTE[@]}" --output "$OUT/prompt_remote.jsonl")
t_prompt_local=$(run prompt_local "${PROMPT[@]}" "${LOCAL[@]}" --output "$OUT/prompt_local.jsonl")
t_geval_remote=$(run geval_remote "${GEVAL[@]}" "${REMOTE[@]}" --output "$OUT/geval_remote.jsonl")
t_geval_local=$(run geval_local "${GEVAL[@]}" "${LOCAL[@]}" --output "$OUT/geval_local.jsonl")

python3 - "$OUT" "$t_compare_local" "$t_compare_remote" "$t_prompt_local" "$t_prompt_remote" \
    "$t_geval_local" "$t_geval_remote" <<'PY'
import json, sys
out = sys.argv[1]
times = [float(x) for x in sys.argv[2:]]
def rows(name, key):
    return {key(r): r for r in map(json.loads, open(f"{out}/{name}"))}
pair = lambda r: (r["context_id"], r["a"], r["b"])
item = lambda r: (r["context_id"], r["candidate_id"])
local, remote = rows("compare_local.jsonl", pair), rows("compare_remote.jsonl", pair)
assert set(local) == set(remote) and len(local) == 240, (len(local), len(remote))
dp = max(abs(local[k]["p_a"] - remote[k]["p_a"]) for k in local)
dm = max(abs(local[k]["label_mass"] - remote[k]["label_mass"]) for k in local)
flips = sum((local[k]["p_a"] > 0.5) != (remote[k]["p_a"] > 0.5) for k in local)
print(f"compare: 240 comparisons, max |Δp_a| {dp:.2e}, max |Δ label mass| {dm:.2e}, "
      f"decisions differing {flips}; in process {times[0]:.1f} s, remote {times[1]:.1f} s "
      f"(remote/in-process {times[1]/times[0]:.2f}x)")
for name, (tl, tr) in (("prompt", times[2:4]), ("geval", times[4:6])):
    local, remote = rows(f"{name}_local.jsonl", item), rows(f"{name}_remote.jsonl", item)
    assert set(local) == set(remote) and len(local) == 16
    ds = max(abs(local[k]["score"] - remote[k]["score"]) for k in local)
    print(f"score {name}: 16 summaries, max |Δscore| {ds:.2e}; in process {tl:.1f} s, "
          f"remote {tr:.1f} s ({tr/tl:.2f}x)")
PY
grep -h "^backend " "$OUT"/*_remote.log | sed 's/^/  /'

#!/usr/bin/env bash
# The remote backend (issue 39) against llama-cpp-python's OpenAI-compatible server, a
# third-party engine: (a) the label log-probs `nlg-judge compare --backend` reports for the
# first comparison equal llama.cpp's own Python API on the same tokens (1e-4), and (b) on
# SummEval document 0 (240 ordered comparisons, coherence, c1) the remote run's decisions
# agree with the in-process f32 run's (target >= 95%; also reported at each run's balanced
# threshold, where SmolLM2's positional bias does not decide them). Results recorded in
# docs/results.md. Slow (minutes), not in `cargo test`.
#
#   python3 -m venv /work/venv-llama
#   CMAKE_BUILD_PARALLEL_LEVEL=1 /work/venv-llama/bin/pip install 'llama-cpp-python[server]==0.3.36'
#   PYTHON=/work/venv-llama/bin/python tests/clients/llama_cpp_backend.sh
# (llama.cpp compiles from source: ~25 min on one core of a 2-core Xeon.)
#
# Uses target/release/nlg-judge (built if missing) and the smollm2-135m-instruct card's
# GGUF. Outputs go to tests/clients/out/llama_cpp/ (not committed).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-/work/venv-llama/bin/python}
OUT=tests/clients/out/llama_cpp
mkdir -p "$OUT"
BIN=target/release/nlg-judge
[ -x "$BIN" ] || cargo build --release --locked
MODEL=smollm2-135m-instruct
GGUF=$("$BIN" models path "$MODEL" | grep -m1 '\.gguf$' || true)
[ -n "$GGUF" ] || { echo "no GGUF for $MODEL: run '$BIN models fetch $MODEL'" >&2; exit 1; }
PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT/v1"

"$PYTHON" -m llama_cpp.server --model "$GGUF" --model_alias "$MODEL" --host 127.0.0.1 \
    --port "$PORT" --n_ctx 2048 --logits_all true >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
    curl -sf "$URL/models" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$OUT/server.log" >&2; exit 1; }
    sleep 1
done
curl -sf "$URL/models" >"$OUT/models.json"
echo "llama_cpp.server on $URL: $(cat "$OUT/models.json")"

# SummEval document 0, 16 summaries.
"$BIN" convert --dataset summeval --data-dir "${NLG_JUDGE_DATA:-../shared/data}" --limit-contexts 1 --output "$OUT/doc0.jsonl"
COMMON=(compare --input "$OUT/doc0.jsonl" --attribute coherence --template c1 --no-cache)

# (b) remote and in-process, the same 240 comparisons.
start=$(date +%s)
"$BIN" "${COMMON[@]}" --backend "$URL" --model "$MODEL" --tokenizer "$MODEL" \
    --comparisons-out "$OUT/remote.jsonl" --output "$OUT/remote.scores.jsonl" 2>"$OUT/remote.log"
remote_s=$(( $(date +%s) - start ))
start=$(date +%s)
"$BIN" "${COMMON[@]}" --model "$MODEL" --precision f32 \
    --comparisons-out "$OUT/local.jsonl" --output "$OUT/local.scores.jsonl" 2>"$OUT/local.log"
local_s=$(( $(date +%s) - start ))

# (a) the first comparison's prompt, and llama.cpp's own log-probs of the labels on it.
# --show-prompt prints it on standard error between a `--- context` and a `--- labels` line
# (the run goes on; its answers come from the results cache).
"$BIN" compare --input "$OUT/doc0.jsonl" --attribute coherence --template c1 --model "$MODEL" \
    --show-prompt 2>"$OUT/show.log" >/dev/null
awk '/^--- labels:/{exit} p{print} /^--- context/{p=1}' "$OUT/show.log" >"$OUT/prompt.txt"
"$PYTHON" tests/clients/llama_cpp_ref.py --gguf "$GGUF" --prompt-file "$OUT/prompt.txt" \
    --label " A" --label " B" >"$OUT/reference.json"

"$PYTHON" - "$OUT" "$remote_s" "$local_s" <<'PY'
import json, math, sys
out, remote_s, local_s = sys.argv[1], sys.argv[2], sys.argv[3]
def rows(name):
    return {(r["context_id"], r["a"], r["b"]): r for r in map(json.loads, open(f"{out}/{name}"))}
remote, local = rows("remote.jsonl"), rows("local.jsonl")
keys = sorted(set(remote) & set(local))
same = sum((remote[k]["p_a"] > 0.5) == (local[k]["p_a"] > 0.5) for k in keys)
# SmolLM2 prefers position A (P(A) > 0.5 nearly always), so the 0.5 decisions agree
# trivially; the decisions at each run's balanced threshold (its median P(A)) are the test.
def balanced(rows):
    med = sorted(r["p_a"] for r in rows.values())[len(rows) // 2]
    return {k: r["p_a"] > med for k, r in rows.items()}
rb, lb_ = balanced(remote), balanced(local)
same_bal = sum(rb[k] == lb_[k] for k in keys)
diff = max(abs(remote[k]["p_a"] - local[k]["p_a"]) for k in keys)
first = next(iter(map(json.loads, open(f"{out}/remote.jsonl"))))
ref = json.load(open(f"{out}/reference.json"))["labels"]
la, lb = ref[0]["logprob"], ref[1]["logprob"]
ref_mass = math.exp(la) + math.exp(lb)
ref_pa = math.exp(la) / ref_mass
err_pa = abs(first["p_a"] - ref_pa)
err_mass = abs(math.log(first["label_mass"]) - math.log(ref_mass))
route = "see remote.log"
for line in open(f"{out}/remote.log").read().replace("\r", "\n").splitlines():
    if line.startswith("backend ") or line.startswith("note: the engine"):
        route = line.strip() if route == "see remote.log" else f"{route}; {line.strip()}"
print(f"(a) first comparison: p_a remote {first['p_a']:.6f} vs llama.cpp API {ref_pa:.6f} "
      f"(|diff| {err_pa:.2e}); log label mass |diff| {err_mass:.2e} (tolerance 1e-4)")
print(f"(b) SummEval doc 0: {same}/{len(keys)} same decisions ({100*same/len(keys):.1f}%, target >= 95%), "
      f"at the balanced threshold {same_bal}/{len(keys)} ({100*same_bal/len(keys):.1f}%); "
      f"max |p_a diff| {diff:.4f}; remote {remote_s} s, in-process f32 {local_s} s; route: {route}")
# The issue's criterion is the decisions at 0.5; the balanced threshold is reported beside
# it (llama.cpp's Q4_1 x Q8 dot products against our dequantised f32 move P(A) by up to
# a few hundredths, which flips comparisons near the median).
ok = err_pa <= 1e-4 and err_mass <= 1e-4 and same >= 0.95 * len(keys)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY

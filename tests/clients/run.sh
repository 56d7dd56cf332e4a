#!/usr/bin/env bash
# Real clients against `nlg-judge serve`'s OpenAI-compatible routes: the `openai`
# package (pytest), lm-evaluation-harness (local-completions vs hf on the same weights),
# deepeval's G-Eval, and a 64-client load. Slow (minutes to tens of minutes on two cores),
# so not part of `cargo test`; the output is recorded in docs/results.md.
#
#   python3 -m venv /tmp/clients && /tmp/clients/bin/pip install openai lm-eval deepeval pytest torch transformers gguf
#   PYTHON=/tmp/clients/bin/python tests/clients/run.sh [all|openai|tls|lm-eval|prefix-cache|deepeval|load]
#
# `tls` runs the openai checks over HTTPS: a CA and a certificate for 127.0.0.1 made by
# openssl here, `serve --tls-cert/--tls-key`, the client verifying with the CA.
#
# Uses target/release/nlg-judge (built if missing) and the smollm2-135m-instruct card.
# Outputs go to tests/clients/out/ (not committed).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
WHAT=${1:-all}
OUT=tests/clients/out
mkdir -p "$OUT"
BIN=target/release/nlg-judge
[ -x "$BIN" ] || cargo build --release
MODEL=smollm2-135m-instruct
GGUF=$("$BIN" models path "$MODEL" | head -1)
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" > "$OUT/token"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"

SERVER_PID=""
start() { # start [extra serve args]: serve $SERVE_MODEL on a free port, wait until it answers
    PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    local began=$SECONDS
    "$BIN" serve --model "${SERVE_MODEL:-$MODEL}" --addr "127.0.0.1:$PORT" --token-file "$OUT/token" \
        --no-cache "$@" > "$OUT/serve-$PORT.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        if curl -sf ${CURL_CA:+--cacert "$CURL_CA"} "${SCHEME:-http}://127.0.0.1:$PORT/healthz" > /dev/null; then
            echo "(service up after $((SECONDS - began)) s)"
            return 0
        fi
        sleep 0.2
    done
    echo "the service did not start; see $OUT/serve-$PORT.log" >&2
    exit 1
}
stop() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" && wait "$SERVER_PID" || true; SERVER_PID=""; }
trap stop EXIT

if [[ $WHAT == all || $WHAT == openai ]]; then
    echo "== the openai package (pytest)"
    start
    NLG_JUDGE_URL="http://127.0.0.1:$PORT/v1" NLG_JUDGE_TOKEN=$TOKEN NLG_JUDGE_MODEL=$MODEL \
        "$PYTHON" -m pytest -q tests/clients/test_openai_client.py -p no:cacheprovider
    stop
fi

if [[ $WHAT == all || $WHAT == tls ]]; then
    echo "== the openai package over TLS (pytest)"
    TLS=$OUT/tls
    mkdir -p "$TLS"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=clients-ca \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
        -keyout "$TLS/ca.key" -out "$TLS/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
        -keyout "$TLS/server.key" -out "$TLS/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$TLS/ext.cnf"
    openssl x509 -req -in "$TLS/server.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial \
        -days 2 -extfile "$TLS/ext.cnf" -out "$TLS/server.pem" 2>/dev/null
    SCHEME=https CURL_CA=$TLS/ca.pem start --tls-cert "$TLS/server.pem" --tls-key "$TLS/server.key"
    NLG_JUDGE_URL="https://127.0.0.1:$PORT/v1" NLG_JUDGE_CA=$TLS/ca.pem NLG_JUDGE_TOKEN=$TOKEN \
        NLG_JUDGE_MODEL=$MODEL "$PYTHON" -m pytest -q tests/clients/test_openai_client.py -p no:cacheprovider
    stop
fi

if [[ $WHAT == all || $WHAT == lm-eval ]]; then
    echo "== lm-evaluation-harness: local-completions against the service vs hf on the same weights"
    start
    "$PYTHON" tests/clients/lm_eval_compare.py --url "http://127.0.0.1:$PORT" --token "$TOKEN" \
        --model "$MODEL" --gguf "$GGUF" --out "$OUT/lm-eval"
    stop
fi

if [[ $WHAT == all || $WHAT == prefix-cache ]]; then
    echo "== the prefix cache under lm-eval's local-completions (batch 1): tokens the model computed, wall time"
    echo "| prefix cache | wall time (s) | prompt tokens (distinct per request) | tokens computed | load before / after |"
    echo "|---|---|---|---|---|"
    for mib in 512 0; do
        RUST_LOG=nlg_judge::engine::decoder::complete=debug start --prefix-cache-mib "$mib"
        before=$(cut -d' ' -f1-3 /proc/loadavg)
        began=$(date +%s.%N)
        OPENAI_API_KEY=$TOKEN HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$PYTHON" -m lm_eval run \
            --model local-completions --tasks nlgjudge_facts --include_path tests/clients/tasks \
            --batch_size 1 --output_path "$OUT/prefix-cache-$mib" \
            --model_args "model=$MODEL,base_url=http://127.0.0.1:$PORT/v1/completions,auth_token=$TOKEN" \
            > "$OUT/prefix-cache-$mib.log" 2>&1
        wall=$(echo "$(date +%s.%N) - $began" | bc)
        log=$OUT/serve-$PORT.log
        stop
        sed -i 's/\x1b\[[0-9;]*m//g' "$log" # the log's colours
        sum() { grep -o " $1=[0-9]*" "$log" | cut -d= -f2 | paste -sd+ | bc; }
        trie=$(sum trie_tokens)
        cached=$(sum cached_tokens)
        computed=$(sum tokens)
        printf '| %s MiB | %.1f | %s (%s from the cache) | %s | %s / %s |\n' "$mib" "$wall" "$trie" "$cached" \
            "$computed" "$before" "$(cut -d' ' -f1-3 /proc/loadavg)"
    done
fi

if [[ $WHAT == all || $WHAT == deepeval ]]; then
    "$BIN" convert --dataset summeval --limit-contexts 1 --output "$OUT/summeval-1.jsonl" > /dev/null
    # Qwen2.5-0.5B writes deepeval's JSON answers; SmolLM2-135M often does not (shown, not
    # required).
    for judge in qwen2.5-coder-0.5b-instruct "$MODEL"; do
        echo "== deepeval G-Eval with the service as judge ($judge)"
        SERVE_MODEL=$judge start
        "$PYTHON" tests/clients/deepeval_geval.py --url "http://127.0.0.1:$PORT" --token "$TOKEN" \
            --model "$judge" --binary "$BIN" --input "$OUT/summeval-1.jsonl" --items 8 \
            || [[ $judge == "$MODEL" ]]
        stop
    done
fi

if [[ $WHAT == all || $WHAT == load ]]; then
    echo "== load: concurrent clients on loopback"
    echo "| run | clients | sent | answered 200 | errors | not sent (deadline) | wall (s) | requests/s | p50 (s) | p90 (s) | p99 (s) | max (s) | cached prompt share | load before / after |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    start
    "$PYTHON" tests/clients/load.py --url "http://127.0.0.1:$PORT" --token "$TOKEN" --model "$MODEL" \
        --clients 1 --requests 12 --deadline 600 --label "1 client, prefix cache 512 MiB"
    stop
    start
    "$PYTHON" tests/clients/load.py --url "http://127.0.0.1:$PORT" --token "$TOKEN" --model "$MODEL" \
        --clients 64 --requests 4 --deadline 600 --label "64 clients, prefix cache 512 MiB" --json "$OUT/load-64.json"
    stop
    start --prefix-cache-mib 0
    "$PYTHON" tests/clients/load.py --url "http://127.0.0.1:$PORT" --token "$TOKEN" --model "$MODEL" \
        --clients 64 --requests 4 --deadline 600 --label "64 clients, no prefix cache"
    stop
fi

#!/usr/bin/env bash
# Reliability figures of `nlg-judge serve` and of the files, on loopback only, bounded in
# count and time (docs/results.md, "Reliability"):
#   1. soak: 64 keep-alive clients for SOAK_SECONDS (default 600) against the mock model:
#      requests, errors, p50/p99 latency, peak RSS of the service;
#   2. burst: 10x the soak's clients (640), 4 distinct requests each, against a model that
#      takes 2 ms a call: answers by status (503s with Retry-After), connection errors, and
#      whether any request was lost silently (sent, no answer);
#   3. SIGTERM under load: 64 clients, a model taking 100 ms a call, SIGTERM after 5 s:
#      time to exit, exit code, requests in flight at the signal answered or not;
#   4. faults: full disk (a 1 MiB tmpfs; RLIMIT_FSIZE where mounting is not allowed),
#      read-only cache (the tmpfs remounted read-only), corrupt cache, kill -9 during a
#      run: what the user sees, what is kept, whether a rerun completes;
#   5. fuzz: the seeded property tests with FUZZ_CASES cases each;
#   6. network: TLS (a CA and a certificate made by openssl here) and two tokens: one
#      floods with 64 clients, the other sends with 4, for 20 s against a model taking
#      2 ms a call and --max-queued-per-token 8: answers by status for each token (the
#      flood's 503s stay its own), plain HTTP on the TLS port, a token removed by SIGHUP.
# The mock model (`--model mock`) keeps the figures about the service, not the model.
#
# Usage: scripts/reliability/run.sh [OUT_DIR]   (env: BIN, SOAK_SECONDS, FUZZ_CASES, SKIP)
# SKIP: space-separated parts to skip (soak burst sigterm faults fuzz network).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/target/reliability}
BIN=${BIN:-$ROOT/target/release/nlg-judge}
SOAK_SECONDS=${SOAK_SECONDS:-600}
FUZZ_CASES=${FUZZ_CASES:-4096}
SKIP=${SKIP:-}
LOAD="python3 $ROOT/scripts/reliability/load.py"
mkdir -p "$OUT"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    if mountpoint -q "$WORK/disk" 2>/dev/null; then umount "$WORK/disk" || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build --release, or set BIN)" >&2; exit 1; }
skip() { [[ " $SKIP " == *" $1 "* ]]; }

# Start `serve` with the given arguments; sets SERVER_PID and ADDR.
start_server() {
    local log=$1
    shift
    "$BIN" serve --addr 127.0.0.1:0 "$@" 2>"$log" &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    for _ in $(seq 1 600); do
        ADDR=$(grep -o 'https\?://127.0.0.1:[0-9]*' "$log" | head -1 | sed 's#https\?://##') || true
        [ -n "$ADDR" ] && return 0
        sleep 0.1
    done
    echo "serve did not start: $(cat "$log")" >&2
    exit 1
}

peak_rss_mib() { awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
rss_mib() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

{
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, shared with other builds"
    echo "binary: $BIN"
    echo "date: $(date -u +%FT%TZ)"
} >"$OUT/machine.txt"

if ! skip soak; then
    echo "== soak: 64 clients, ${SOAK_SECONDS} s" >&2
    start_server "$WORK/soak.log" --model mock --cache "$WORK/soak.sqlite"
    start_rss=$(rss_mib "$SERVER_PID")
    $LOAD --addr "$ADDR" --clients 64 --duration "$SOAK_SECONDS" --keepalive >"$OUT/soak.json"
    peak=$(peak_rss_mib "$SERVER_PID")
    end_rss=$(rss_mib "$SERVER_PID")
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" && code=0 || code=$?
    echo "{\"rss_start_mib\": $start_rss, \"rss_end_mib\": $end_rss, \"peak_rss_mib\": $peak, \"exit\": $code}" >"$OUT/soak_rss.json"
    cat "$OUT/soak.json" "$OUT/soak_rss.json" >&2
fi

if ! skip burst; then
    echo "== burst: 640 clients x 4 requests" >&2
    start_server "$WORK/burst.log" --model mock:delay-ms=2 --no-cache
    $LOAD --addr "$ADDR" --clients 640 --per-client 4 --duration 120 --kinds score --unique >"$OUT/burst.json"
    curl -s "http://$ADDR/healthz" >"$OUT/burst_health.json" || true
    peak=$(peak_rss_mib "$SERVER_PID")
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
    echo "{\"peak_rss_mib\": $peak}" >"$OUT/burst_rss.json"
    cat "$OUT/burst.json" "$OUT/burst_health.json" >&2
fi

if ! skip sigterm; then
    echo "== SIGTERM under load" >&2
    start_server "$WORK/sigterm.log" --model mock:delay-ms=100 --no-cache
    $LOAD --addr "$ADDR" --clients 64 --duration 15 --kinds score >"$OUT/sigterm_load.json" &
    LOAD_PID=$!
    sleep 5
    busy=$(curl -s "http://$ADDR/healthz" | python3 -c 'import json,sys; print(json.load(sys.stdin)["queued"])')
    t0=$(date +%s.%N)
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" && code=0 || code=$?
    t1=$(date +%s.%N)
    wait "$LOAD_PID" || true
    stopped=$(grep '^stopped' "$WORK/sigterm.log" || true)
    python3 - "$t0" "$t1" "$code" "$busy" "$stopped" >"$OUT/sigterm.json" <<'EOF'
import json, sys
t0, t1, code, busy, stopped = sys.argv[1:]
print(json.dumps({"exit": int(code), "seconds_to_exit": round(float(t1) - float(t0), 3),
                  "queued_at_signal": int(busy), "server_line": stopped}))
EOF
    cat "$OUT/sigterm_load.json" "$OUT/sigterm.json" >&2
fi

if ! skip faults; then
    echo "== faults" >&2
    python3 - "$WORK/input.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as out:
    for c in range(300):
        for k in range(2):
            out.write(json.dumps({"context_id": f"d{c}", "context": f"Document {c} " * 20,
                                  "candidate_id": f"s{k}", "candidate": f"Summary {k} of {c}."}) + "\n")
EOF
    SCORE=(score --method prompt --input "$WORK/input.jsonl")
    MOCK=(--model mock --attribute coherence)
    faults="$OUT/faults.txt"
    : >"$faults"
    note() { echo "$*" >>"$faults"; }
    entries() { "$BIN" cache check --cache "$1" 2>/dev/null | head -1 || true; }

    # Full disk: a 1 MiB tmpfs holds the cache.
    mkdir -p "$WORK/disk"
    if mount -t tmpfs -o size=1m tmpfs "$WORK/disk" 2>/dev/null; then
        how="1 MiB tmpfs"
        "$BIN" "${SCORE[@]}" "${MOCK[@]}" --cache "$WORK/disk/results.sqlite" --output "$WORK/full.jsonl" \
            >/dev/null 2>"$WORK/full.err" && code=0 || code=$?
    else
        how="RLIMIT_FSIZE 256 KiB (ulimit -f 256; mounting not allowed here)"
        (trap '' XFSZ; ulimit -f 256; exec "$BIN" "${SCORE[@]}" "${MOCK[@]}" --cache "$WORK/disk/results.sqlite" \
            --output "$WORK/full.jsonl") >/dev/null 2>"$WORK/full.err" && code=0 || code=$?
    fi
    note "## disk full ($how)"
    note "exit $code; stderr: $(tail -c 600 "$WORK/full.err" | tr '\n' ' ')"
    note "kept: $(entries "$WORK/disk/results.sqlite"); output file exists: $([ -e "$WORK/full.jsonl" ] && echo yes || echo no); partial file left: $(ls "$WORK"/full.jsonl.partial 2>/dev/null && echo yes || echo no)"
    if mountpoint -q "$WORK/disk"; then
        mount -o remount,size=64m "$WORK/disk"
        "$BIN" "${SCORE[@]}" "${MOCK[@]}" --cache "$WORK/disk/results.sqlite" --output "$WORK/full.jsonl" \
            >/dev/null 2>&1 && code=0 || code=$?
        note "after freeing space: exit $code, $(entries "$WORK/disk/results.sqlite"), output lines $(wc -l <"$WORK/full.jsonl" 2>/dev/null || echo 0)"

        # Read-only cache: the same file system remounted read-only.
        mount -o remount,ro "$WORK/disk"
        "$BIN" "${SCORE[@]}" --model mock --attribute fluency --cache "$WORK/disk/results.sqlite" \
            --output "$WORK/ro.jsonl" >/dev/null 2>"$WORK/ro.err" && code=0 || code=$?
        note "## read-only cache (tmpfs remounted ro)"
        note "exit $code; stderr: $(tail -c 600 "$WORK/ro.err" | tr '\n' ' ')"
        note "kept: the cache is untouched: $(entries "$WORK/disk/results.sqlite")"
        umount "$WORK/disk"
    fi

    # Corrupt cache: a first run fills it, then bytes in its middle are overwritten.
    "$BIN" "${SCORE[@]}" "${MOCK[@]}" --cache "$WORK/corrupt.sqlite" --output "$WORK/c1.jsonl" >/dev/null 2>&1
    size=$(stat -c %s "$WORK/corrupt.sqlite")
    dd if=/dev/urandom of="$WORK/corrupt.sqlite" bs=1 seek=$((size / 2)) count=4096 conv=notrunc 2>/dev/null
    dd if=/dev/urandom of="$WORK/corrupt.sqlite" bs=1 seek=0 count=100 conv=notrunc 2>/dev/null
    "$BIN" "${SCORE[@]}" "${MOCK[@]}" --cache "$WORK/corrupt.sqlite" --output "$WORK/c2.jsonl" \
        >/dev/null 2>"$WORK/corrupt.err" && code=0 || code=$?
    note "## corrupt cache (header and 4 KiB in the middle overwritten)"
    note "run: exit $code; stderr: $(tail -c 600 "$WORK/corrupt.err" | tr '\n' ' ')"
    "$BIN" cache check --cache "$WORK/corrupt.sqlite" >"$WORK/check.out" 2>&1 && code=0 || code=$?
    note "cache check: exit $code; $(head -c 400 "$WORK/check.out" | tr '\n' ' ')"
    "$BIN" cache repair --cache "$WORK/corrupt.sqlite" >"$WORK/repair.out" 2>&1 && code=0 || code=$?
    note "cache repair: exit $code; $(head -c 600 "$WORK/repair.out" | tr '\n' ' ')"
    "$BIN" "${SCORE[@]}" "${MOCK[@]}" --cache "$WORK/corrupt.sqlite" --output "$WORK/c2.jsonl" >/dev/null 2>&1 && code=0 || code=$?
    note "rerun after repair: exit $code; identical output to the first run: $(cmp -s "$WORK/c1.jsonl" "$WORK/c2.jsonl" && echo yes || echo no)"

    # kill -9 during a run (the model takes 20 ms a call), then a rerun.
    "$BIN" "${SCORE[@]}" --attribute coherence --model mock:delay-ms=20 --cache "$WORK/kill.sqlite" --output "$WORK/k.jsonl" \
        >/dev/null 2>&1 &
    pid=$!
    sleep 2
    kill -9 "$pid" 2>/dev/null || echo "(the run had ended before the kill)" >>"$faults"
    wait "$pid" 2>/dev/null || true
    note "## kill -9 during a run (after 2 s)"
    note "output file exists: $([ -e "$WORK/k.jsonl" ] && echo yes || echo no); partial: $([ -e "$WORK/k.jsonl.partial" ] && echo yes || echo no); cache: $(entries "$WORK/kill.sqlite")"
    "$BIN" cache check --cache "$WORK/kill.sqlite" >/dev/null 2>&1 && sound=yes || sound=no
    started=$(date +%s.%N)
    "$BIN" "${SCORE[@]}" --attribute coherence --model mock:delay-ms=20 --cache "$WORK/kill.sqlite" --output "$WORK/k.jsonl" \
        >/dev/null 2>&1 && code=0 || code=$?
    note "cache sound after the kill: $sound; rerun exit $code in $(python3 -c "import time; print(round(time.time() - $started, 1))") s, output lines $(wc -l <"$WORK/k.jsonl")"
    cat "$faults" >&2
fi

if ! skip network; then
    echo "== network: TLS and two tokens, one flooding" >&2
    tls="$WORK/tls"
    mkdir -p "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=reliability-ca -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
        -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$tls/ext.cnf"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
        -days 2 -extfile "$tls/ext.cnf" -out "$tls/server.pem" 2>/dev/null
    flood=$(openssl rand -hex 24)
    other=$(openssl rand -hex 24)
    printf '# reliability tokens\nflood:%s\nother:%s\n' "$flood" "$other" >"$tls/tokens"
    start_server "$WORK/network.log" --model mock:delay-ms=2 --no-cache --token-file "$tls/tokens" \
        --tls-cert "$tls/server.pem" --tls-key "$tls/server.key" --max-queued-per-token 8
    $LOAD --addr "$ADDR" --clients 64 --duration 20 --kinds score --unique --token "$flood" \
        --tls-ca "$tls/ca.pem" >"$OUT/network_flood.json" &
    FLOOD_PID=$!
    $LOAD --addr "$ADDR" --clients 4 --duration 20 --kinds score --unique --token "$other" \
        --tls-ca "$tls/ca.pem" >"$OUT/network_other.json"
    wait "$FLOOD_PID" || true
    plain=$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/healthz" || true)
    curl -s --cacert "$tls/ca.pem" -H "Authorization: Bearer $other" "https://$ADDR/healthz" \
        >"$OUT/network_health.json" || true
    printf '# reliability tokens\nother:%s\n' "$other" >"$tls/tokens"
    kill -HUP "$SERVER_PID"
    for _ in $(seq 1 100); do grep -q SIGHUP "$WORK/network.log" && break; sleep 0.1; done
    removed=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tls/ca.pem" \
        -H "Authorization: Bearer $flood" "https://$ADDR/v1/models" || true)
    kept=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tls/ca.pem" \
        -H "Authorization: Bearer $other" "https://$ADDR/v1/models" || true)
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" && code=0 || code=$?
    echo "{\"plain_http_on_tls_port\": \"$plain\", \"removed_token_after_sighup\": \"$removed\", \"kept_token\": \"$kept\", \"exit\": $code}" \
        >"$OUT/network.json"
    cat "$OUT/network_flood.json" "$OUT/network_other.json" "$OUT/network_health.json" "$OUT/network.json" >&2
fi

if ! skip fuzz; then
    echo "== fuzz: $FUZZ_CASES cases per property" >&2
    (cd "$ROOT" && NLG_JUDGE_FUZZ_CASES=$FUZZ_CASES nice -n 5 cargo test -q --test it fuzz -- --nocapture 2>&1) \
        | grep -E '^fuzz |test result|panicked|FAILED' >"$OUT/fuzz.txt" || true
    cat "$OUT/fuzz.txt" >&2
fi
echo "figures in $OUT" >&2

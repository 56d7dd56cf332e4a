#!/usr/bin/env bash
# Ours (`nlg-judge bench pairwise --mode tree` over SummEval documents 0 and 1) and the
# strongest peer (transformers + hand-built prefix cache, `hf_prefix` of the shared peers
# harness) on the same documents, back to back, REPEATS times; prints every result line.
# Usage: benches/peers/back_to_back.sh BINARY [BINARY...]   (e.g. builds before and after)
# Env: PEERS (the harness directory), NLG_JUDGE_DATA (both sides read its
# summeval/summeval.jsonl: SummEval, or a workload in its shape such as the one
# long_candidates.py writes), REPEATS (default 1), DOCS (2).
# The peers' venv must exist (run the harness's run_peers.sh once, or see its README).
set -u
PEERS="${PEERS:-/work/shared/bench/peers}"
export PEERS_STATE="${PEERS_STATE:-$HOME/.cache/nlg-judge-peers}"
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
REPEATS="${REPEATS:-1}"
DOCS="${DOCS:-2}"
peer_docs=$(seq -s ' ' 0 $((DOCS - 1)))
echo "== machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%FT%TZ)"
export PEERS_DATA="$(realpath "${NLG_JUDGE_DATA:-../shared/data}")/summeval/summeval.jsonl"
echo "== data: $PEERS_DATA"
(cd "$PEERS_STATE" && PEERS_DOCS="$peer_docs" venv-hf/bin/python "$PEERS/prep.py" >/dev/null 2>&1) \
  || { echo "peers prep failed"; exit 1; }
for r in $(seq 1 "$REPEATS"); do
  for bin in "$@"; do
    echo "repeat $r ours $bin: $("$bin" bench pairwise --docs "$DOCS" --mode tree 2>/dev/null | grep -E '^tree|GFLOP|calibration')"
  done
  (cd "$PEERS_STATE" && PEERS_DOCS="$peer_docs" venv-hf/bin/python "$PEERS/hf_modes.py" --mode prefix 2>&1 \
    | grep -E '\] doc ' | sed "s/^/repeat $r /")
done

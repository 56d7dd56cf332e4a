#!/bin/bash
# The hybrid measurement of docs/results.md (issue 51 item 3): SummEval, the first 12
# documents, coherence, SmolLM2-135M (the default model). Stage 1 fills the result cache
# with every model answer (prompt scoring, G-Eval, the full comparison design, ~25 min on
# 2 cores); stage 2 only re-ranks subsets from the cache (every design's comparisons are
# among the full design's). Run from a folder of your own:
#   NLG_JUDGE=/path/to/nlg-judge DATA=/path/to/shared/data scripts/hybrid/summeval.sh > measure.out
#   python3 scripts/hybrid/summarise.py    # numpy; reads measure.out and runs/: the table
set -euo pipefail
B=${NLG_JUDGE:-nlg-judge}
C=$PWD/results.sqlite
IN=summeval12.jsonl
$B convert --dataset summeval --data-dir "${DATA:-../shared/data}" --limit-contexts 12 --output $IN
$B score --method prompt --input $IN --attribute coherence --cache $C --output prompt.coh.jsonl
$B score --method geval --input $IN --attribute coherence --cache $C --output geval.coh.jsonl
$B compare --input $IN --attribute coherence --design full --cache $C --output full.coh.jsonl
mkdir -p runs
rho() { $B correlate --input "$1" --pred score --human scores.coherence --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["spearman"])'; }
run() { # name, args...
  local name=$1; shift
  $B compare --input $IN --attribute coherence --cache $C --output runs/$name.jsonl "$@" > runs/$name.log 2>&1
  echo "$name $(rho runs/$name.jsonl) $(grep -o '[0-9]* computed' runs/$name.log | head -1)"
}
echo "prompt-alone $(rho prompt.coh.jsonl)"
[ -f geval.coh.jsonl ] && echo "geval-alone $(rho geval.coh.jsonl)"
for rank in win-ratio poe; do run full.$rank --design full --rank $rank; done
run full.hybrid-prompt --design full --prior-scores prompt.coh.jsonl
[ -f geval.coh.jsonl ] && run full.hybrid-geval --design full --prior-scores geval.coh.jsonl
for R in 24 60; do
  for seed in 0 1 2 3 4; do
    for design in random symmetric; do
      for rank in win-ratio poe; do run $design.$R.$seed.$rank --design $design --comparisons $R --seed $seed --rank $rank; done
      run $design.$R.$seed.hybrid-prompt --design $design --comparisons $R --seed $seed --prior-scores prompt.coh.jsonl
      [ -f geval.coh.jsonl ] && run $design.$R.$seed.hybrid-geval --design $design --comparisons $R --seed $seed --prior-scores geval.coh.jsonl
    done
    run adaptive.$R.$seed.poe --design adaptive --comparisons $R --seed $seed
    run adaptive.$R.$seed.hybrid-prompt --design adaptive --comparisons $R --seed $seed --prior-scores prompt.coh.jsonl
    [ -f geval.coh.jsonl ] && run adaptive.$R.$seed.hybrid-geval --design adaptive --comparisons $R --seed $seed --prior-scores geval.coh.jsonl
  done
done

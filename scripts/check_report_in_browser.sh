#!/usr/bin/env bash
# The HTML reports in a real browser (headless Chromium, Debian's package): builds the
# demo's compare, G-Eval, relative rubric grading (without and with a tie label) and jury
# reports (with the default model, fetched and cached like the README's first command), a
# DHP report from the committed analyses and a synthetic run of 300 contexts x 32
# candidates; opens each at 1400 and 420 px (a jury's judges' pages too); fails on any
# console error, page error or request that leaves the file, on what a page draws over
# itself (a y title over tick labels, a marker label over bars, a dangling sentence), and
# on P(tie) missing from the tie run's feedback table and pair line or shown without a
# tie label; prints sizes and load times; leaves the screenshots in OUT (default
# target/report-check).
#
#   scripts/check_report_in_browser.sh [OUT]     (PROFILE=release for the release binary)
#
# Needs: chromium (apt-get install -y chromium), node with npm (installs playwright-core
# into a cache folder, not into the repository). Outside CI's fast path; its recorded
# output is in docs/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/report-check}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
chromium="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || { echo "no chromium at $chromium (apt-get install -y chromium)" >&2; exit 1; }
tools="${XDG_CACHE_HOME:-$HOME/.cache}/nlg-judge-browser-check"
if [ ! -d "$tools/node_modules/playwright-core" ]; then
  mkdir -p "$tools"
  (cd "$tools" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund playwright-core@1)
fi
cp scripts/check_report_in_browser.mjs "$tools/"

# PROFILE=release uses (and builds) the release binary, as the tests do.
profile="${PROFILE:-debug}"
if [ "$profile" = release ]; then
  cargo build --quiet --release --bin nlg-judge --example synthetic_report
else
  cargo build --quiet --bin nlg-judge --example synthetic_report
fi
bin=target/$profile/nlg-judge
echo "== reports"
$bin compare --input examples/data/library.jsonl --attribute coherence --debias threshold \
  --rank soft --output "$out/demo-scores.jsonl" --report "$out/demo.html" 2>&1 | grep '^results: report'
$bin score --input examples/data/library.jsonl --attribute coherence --method geval \
  --output "$out/demo-geval.jsonl" --report "$out/geval.html" 2>&1 | grep '^results: report'
# Relative rubric grading (each comparison's feedback), and a jury over three contexts
# (each judge's page has the per-context histograms with the run's marker).
$bin compare --input examples/data/library.jsonl --rubric coherence --max-feedback-tokens 24 \
  --output "$out/relative-scores.jsonl" --report "$out/relative.html" 2>&1 | grep '^results: report'
# A judge that may call a tie (Auto-J's protocol): each comparison's P(tie) beside P(A).
$bin compare --input examples/data/library.jsonl --rubric coherence --protocol auto-j \
  --max-feedback-tokens 24 --output "$out/relative-tie-scores.jsonl" \
  --report "$out/relative-tie.html" 2>&1 | grep '^results: report'
$bin compare --input examples/data/stories.jsonl --attribute coherence --task custom --item Story \
  --context-label Prompt --rank poe --model smollm2-135m-instruct --model mock \
  --output "$out/jury-scores.jsonl" --report "$out/jury.html" 2>&1 | grep '^results: report'
(cd docs/results/dhp && "$OLDPWD/$bin" dhp report --title "DHP summarization (SummEval), G-Eval" \
  --run "SmolLM2-135M, 100 documents (LLM edits: 20)=summarization-smollm2-100.json" \
  --run "SmolLM2-135M, 30 documents, rule only=summarization-smollm2.json" \
  --run "Qwen2.5-0.5B, 100 documents (LLM edits: 20)=summarization-qwen25-100.json" \
  --report "$out/dhp.html" >/dev/null)
started=$(date +%s%N)
target/$profile/examples/synthetic_report 300 32 "$out/large.html"
echo "synthetic report written in $(( ($(date +%s%N) - started) / 1000000 )) ms ($profile build)"
ls -l "$out"/*.html | awk '{printf "%-10s %9d bytes  %s\n", "size", $5, $9}'
gzip -c "$out/large.html" | wc -c | awk '{printf "large.html gzipped: %d bytes\n", $1}'
echo "== browser ($("$chromium" --version 2>/dev/null | head -1)); load average $(cut -d' ' -f1-3 /proc/loadavg)"
CHROMIUM="$chromium" node "$tools/check_report_in_browser.mjs" "$out" \
  demo="$out/demo.html" geval="$out/geval.html" relative="$out/relative.html" \
  relative-tie="$out/relative-tie.html" jury="$out/jury.html" dhp="$out/dhp.html" large="$out/large.html"
echo "screenshots: $out/*.png"

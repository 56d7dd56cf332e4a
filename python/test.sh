#!/usr/bin/env bash
# The Python package's tests, as CI runs them from a fresh clone (the README's test
# command calls this after `cargo test --workspace`): a virtual environment under
# target/, maturin, pytest, numpy and pandas from PyPI, the extension built once with
# `pip install ./python` in the workspace's release profile (so it reuses the
# dependencies the README's first command, `cargo run --release`, already built), the
# release `nlg-judge` binary for the command-line parity tests, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
target=${CARGO_TARGET_DIR:-$root/target}
venv="$target/python-venv"
started=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# The build backend runs `maturin` from PATH.
export PATH="$venv/bin:$PATH"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "maturin>=1.9,<2" "pytest>=7" numpy pandas
echo "== python/test.sh: building the extension (pip install ./python, release profile)"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-build-isolation \
  --no-deps --force-reinstall ./python 2>&1 | grep -vE '^\s+(Compiling|Checking) ' || {
  echo "python/test.sh: building the package failed" >&2
  exit 1
}
cargo build --release --quiet --bin nlg-judge
built=$(date +%s)
echo "== python/test.sh: set-up took $((built - started)) s; running pytest"
# pytest's closing line ("N passed in T s") is the last line, for CI to read.
NLG_JUDGE_BIN="$target/release/nlg-judge" exec "$venv/bin/python" -m pytest python/tests -q "$@"

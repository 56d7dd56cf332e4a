# Shared by the GPU scripts (run.sh, run_8b.sh): sourced, not run.
# step: a dated heading in the log. bounded SECONDS CMD...: run CMD with a time bound,
# its output without blank lines and progress bars, then say how it ended (on stderr).
# unpack_binary: the packed `--features cuda` build from $G as /tmp/nlg-judge (in $bin),
# with the CUDA libraries of the machine's torch wheels (or /usr/local/cuda) on the
# library path.
step() { echo; echo "== $(date -u +%T) $*"; }

bounded() {
  local limit=$1 start
  shift
  start=$(date +%s%N)
  timeout "$limit" "$@" 2>&1 | grep -vE '^\s*$|Loading|it/s\]'
  local rc=${PIPESTATUS[0]}
  echo "-- rc=$rc in $((($(date +%s%N) - start) / 1000000)) ms" >&2
  return "$rc"
}

# bounded_json FILE SECONDS CMD...: as bounded, with CMD's standard output (a --json
# document) in FILE alone: notes on standard error (a model's first hashing, warnings)
# go to the log, not into the document.
bounded_json() {
  local file=$1 limit=$2 start rc
  shift 2
  start=$(date +%s%N)
  timeout "$limit" "$@" 2> >(grep -vE '^\s*$|Loading|it/s\]' >&2) >"$file"
  rc=$?
  echo "-- rc=$rc in $((($(date +%s%N) - start) / 1000000)) ms" >&2
  return "$rc"
}

unpack_binary() {
  bin=/tmp/nlg-judge
  python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('$G/nlg-judge.xz'), open('$bin', 'wb'))"
  chmod +x "$bin"
  local nvroot libdirs
  nvroot=$(python3 -c 'import os, nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
  libdirs=$(find $nvroot /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ldd "$bin" | grep -E 'cuda|cublas|curand|nvrtc|not found'
  "$bin" --version
}

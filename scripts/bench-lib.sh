# shellcheck shell=bash
# Shared by scripts/bench-floor.sh and scripts/bench-vs-redis.sh (sourced, not run).
#
# Builds the binaries once (like `make build`: CGO_ENABLED=0, -trimpath,
# stripped) into a private directory, starts each server fresh for every run
# (so a run's peak RSS is its own), runs `ticketing bench` with --output json
# and collects the results in $OUT, which `ticketing bench-report` tabulates.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-3}            # runs per target and row (interleaved: ticketing, floor, ...)
DURATION=${DURATION:-10s}  # measured time of one run
WARMUP=${WARMUP:-2s}       # unmeasured time before it
OUT=${OUT:-}
BIN=""
PIDS=()

# usage: the calling script's header comment, then the common options.
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  bench_usage_common
}

bench_usage_common() {
  cat <<'USAGE'
Options:
  -n RUNS       runs per target (default 3; targets are interleaved run by run)
  -d DURATION   measured time of each run (default 10s)
  -w WARMUP     unmeasured warm-up before each run (default 2s)
  -o DIR        keep the JSON results in DIR (default: a temporary directory)
Environment: RUNS, DURATION, WARMUP, OUT do the same.
USAGE
}

bench_parse_opts() {
  while getopts "n:d:w:o:h" opt; do
    case $opt in
      n) RUNS=$OPTARG ;;
      d) DURATION=$OPTARG ;;
      w) WARMUP=$OPTARG ;;
      o) OUT=$OPTARG ;;
      h) usage; exit 0 ;;
      *) usage >&2; exit 2 ;;
    esac
  done
  SHIFT=$((OPTIND - 1))
}

bench_cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] && wait "$p" 2>/dev/null || true
  done
  [ -n "$BIN" ] && rm -rf "$BIN"
}

bench_setup() {
  trap bench_cleanup EXIT
  BIN=$(mktemp -d "${TMPDIR:-/tmp}/ticketing-bench.XXXXXX")
  if [ -z "$OUT" ]; then
    OUT="$BIN/results" # removed at exit with the rest of $BIN (bench_results)
  fi
  mkdir -p "$OUT"
  echo "building into $BIN ..." >&2
  (cd "$ROOT" &&
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$BIN/ticketing" ./cmd/ticketing &&
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$BIN/floor" ./scripts/floor)
  {
    echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "go: $(go version | cut -d' ' -f3-)"
    echo "commit: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$ROOT" && git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  } | tee "$OUT/machine.txt" >&2
}

# wait_log FILE PATTERN: wait up to 10 s for a line matching PATTERN, print
# its first capture of "ADDR".
wait_addr() {
  local file=$1 re=$2 i
  for i in $(seq 1 100); do
    if grep -qE "$re" "$file" 2>/dev/null; then
      grep -oE "$re" "$file" | head -1 | grep -oE '127\.0\.0\.1:[0-9]+'
      return 0
    fi
    sleep 0.1
  done
  echo "server did not start; log:" >&2
  cat "$file" >&2
  return 1
}

# start_ticketing: starts a fresh `ticketing serve`; sets SRV_PID, SRV_ADDR.
start_ticketing() {
  local log="$BIN/serve.log"
  : >"$log"
  "$BIN/ticketing" serve --listen 127.0.0.1:0 "$@" 2>"$log" &
  SRV_PID=$!
  PIDS+=("$SRV_PID")
  SRV_ADDR=$(wait_addr "$log" 'addr=127\.0\.0\.1:[0-9]+')
}

# start_floor [ARGS]: starts a fresh floor server (ARGS: e.g. --hotkey);
# sets SRV_PID, SRV_ADDR.
start_floor() {
  local log="$BIN/floor.log"
  : >"$log"
  "$BIN/floor" --listen 127.0.0.1:0 "$@" 2>"$log" &
  SRV_PID=$!
  PIDS+=("$SRV_PID")
  SRV_ADDR=$(wait_addr "$log" 'listening on 127\.0\.0\.1:[0-9]+')
}

stop_server() {
  kill -TERM "$SRV_PID" 2>/dev/null || true
  wait "$SRV_PID" 2>/dev/null || true
  local keep=() p
  for p in "${PIDS[@]}"; do [ "$p" != "$SRV_PID" ] && keep+=("$p"); done
  PIDS=("${keep[@]:-}")
}

# run_bench NAME LABEL ARGS...: one `ticketing bench` run against SRV_ADDR,
# JSON appended to $OUT/NAME.json; the one-line summary goes to stderr.
run_bench() {
  local name=$1 label=$2
  shift 2
  local stats=true
  [ "$label" = floor ] && stats=false
  echo "+ ticketing bench --label $label --duration $DURATION --warmup $WARMUP $*" >&2
  "$BIN/ticketing" bench --addr "$SRV_ADDR" --label "$label" --server-pid "$SRV_PID" \
    --server-stats="$stats" --progress=false --duration "$DURATION" --warmup "$WARMUP" \
    --output json "$@" >"$BIN/last.json"
  cat "$BIN/last.json" >>"$OUT/$name.json"
  "$BIN/ticketing" bench-report --oneline "$BIN/last.json" >&2
}

# The budget rows (docs/benchmarks.md). Each is a `ticketing bench` argument list.
ROW_pipelined="--mode pairs --conns 8 --pipeline 64 --keys 10000"
ROW_unpipelined="--mode pairs --conns 64 --pipeline 1 --keys 10000"
ROW_latency="--mode pairs --conns 1 --pipeline 1 --keys 10000"
ROW_hotkey="--mode pairs --conns 100 --pipeline 1 --keys 10000 --hot-keys 1 --wait 60s"
ROW_memory="--mode fill --conns 4 --pipeline 256 --keys 1000000 --lease 10m --warmup 0"

# bench_results: the last line of a run, saying where the JSON is kept.
bench_results() {
  case $OUT in
    "$BIN"/*) echo "results: not kept (pass -o DIR to keep the JSON)" >&2 ;;
    *) echo "results: $OUT" >&2 ;;
  esac
}

#!/usr/bin/env bash
# Ticketing against Redis's lock recipe, with the machine's floor, in one run.
#
# Starts redis-server and `ticketing serve` on loopback (a fresh process for
# every run) and drives both with the same lock workload: the same
# connections, pipeline depth, key space and key names. Ticketing through
# `ticketing bench` (raw wire frames), Redis through scripts/redisbench, a Go
# program on github.com/redis/go-redis/v9 using the usual recipe
# (SET key token NX PX lease; release: compare-and-delete Lua via EVALSHA).
# The floor server (scripts/bench-floor.sh) runs the same shape too. Runs
# alternate ticketing, redis, floor; the table shows medians, spreads and the
# ratios ticketing ÷ redis and ticketing ÷ floor.
#
#   scripts/bench-vs-redis.sh [options] [ROW...]   (default: pipelined)
#
# Rows: pipelined (8 conns × 64, the budget's "≥ 4× Redis" row), unpipelined
# (64 conns × 1), latency (1 × 1).
#
# Needs redis-server on PATH: apt-get install -y redis-server (README).
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

bench_parse_opts "$@"
shift "$SHIFT"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(pipelined)
for r in "${rows[@]}"; do
  case $r in
    pipelined | unpipelined | latency) ;;
    *) echo "unknown row $r" >&2; usage >&2; exit 2 ;;
  esac
done
if ! command -v redis-server >/dev/null; then
  echo "redis-server not found: apt-get install -y redis-server" >&2
  exit 2
fi

bench_setup
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$BIN/redisbench" ./scripts/redisbench)
echo "redis: $(redis-server --version)" | tee -a "$OUT/machine.txt" >&2

# free_port: a port below the ephemeral range (so no client socket holds it)
# that nothing listens on.
free_port() {
  local lo p
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  while :; do
    p=$((10000 + RANDOM % (lo - 10000)))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

start_redis() {
  local port attempt i
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
      --daemonize no --loglevel warning --dir "$BIN" >"$BIN/redis.log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
    SRV_ADDR="127.0.0.1:$port"
    for i in $(seq 1 100); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        return 0
      fi
      kill -0 "$SRV_PID" 2>/dev/null || break # exited: port taken after all
      sleep 0.1
    done
    stop_server
  done
  echo "redis-server did not start:" >&2
  cat "$BIN/redis.log" >&2
  return 1
}

run_redis() {
  local name=$1
  shift
  # redisbench takes the same shape flags as ticketing bench (pairs mode)
  local a=() skip=""
  for x in "$@"; do
    if [ -n "$skip" ]; then skip=""; continue; fi
    case $x in --mode) skip=1 ;; *) a+=("$x") ;; esac
  done
  echo "+ redisbench --duration $DURATION --warmup $WARMUP ${a[*]}" >&2
  "$BIN/redisbench" --addr "$SRV_ADDR" --server-pid "$SRV_PID" --duration "$DURATION" \
    --warmup "$WARMUP" "${a[@]}" >"$BIN/last.json"
  cat "$BIN/last.json" >>"$OUT/$name.json"
  "$BIN/ticketing" bench-report --oneline "$BIN/last.json" >&2
}

for row in "${rows[@]}"; do
  var="ROW_$row"
  read -r -a args <<<"${!var}"
  for i in $(seq 1 "$RUNS"); do
    start_ticketing; run_bench "$row" ticketing "${args[@]}"; stop_server
    start_redis; run_redis "$row" "${args[@]}"; stop_server
    start_floor; run_bench "$row" floor "${args[@]}"; stop_server
  done
done

echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
"$BIN/ticketing" bench-report --budget "$OUT"/*.json | tee "$OUT/report.md"
bench_results

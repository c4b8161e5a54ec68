#!/usr/bin/env bash
# The machine's loopback floor beside Ticketing, in the same run.
#
# The floor server (scripts/floor) answers every 32-byte request with a
# 16-byte response and does nothing else; `ticketing bench` drives it with the
# very same connections, pipeline depth and frames as the Ticketing server, so
# each Ticketing figure can be read as a share of what this machine can do at
# all. Runs alternate (ticketing, floor, ticketing, floor, ...) and every run
# starts a fresh server process, so noise from other load hits both alike and
# each run's peak RSS (VmHWM) is its own.
#
#   scripts/bench-floor.sh [options] ROW...
#
# Rows (docs/benchmarks.md, "Budget"):
#   pipelined    pairs, 8 conns × pipeline 64, 10 k keys     (with Redis: scripts/bench-vs-redis.sh)
#   unpipelined  pairs, 64 conns × pipeline 1                 target ≥ 90 % of the floor
#   latency      pairs, 1 conn × pipeline 1                   target p99 ≤ 150 µs
#   hotkey       100 conns, each acquire(wait)+release on one key: handoffs/s, FIFO;
#                beside the hot-key floor (scripts/floor --hotkey: the same FIFO handoff, no lock table)
#   memory       1 M distinct held keys: RSS and bytes per key (Ticketing only, one run)
#   all          every row above, then the budget table
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

bench_parse_opts "$@"
shift "$SHIFT"
[ $# -gt 0 ] || { usage >&2; exit 2; }
rows=()
for r in "$@"; do
  case $r in
    all) rows+=(pipelined unpipelined latency hotkey memory) ;;
    pipelined | unpipelined | latency | hotkey | memory) rows+=("$r") ;;
    *) echo "unknown row $r" >&2; usage >&2; exit 2 ;;
  esac
done

bench_setup
for row in "${rows[@]}"; do
  var="ROW_$row"
  read -r -a args <<<"${!var}"
  case $row in
    hotkey)
      for i in $(seq 1 "$RUNS"); do
        start_ticketing; run_bench "$row" ticketing "${args[@]}"; stop_server
        start_floor --hotkey; run_bench "$row" floor "${args[@]}"; stop_server
      done ;;
    memory)
      start_ticketing; run_bench "$row" ticketing "${args[@]}"; stop_server ;;
    *)
      for i in $(seq 1 "$RUNS"); do
        start_ticketing; run_bench "$row" ticketing "${args[@]}"; stop_server
        start_floor; run_bench "$row" floor "${args[@]}"; stop_server
      done ;;
  esac
done

echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
"$BIN/ticketing" bench-report --budget "$OUT"/*.json | tee "$OUT/report.md"
bench_results

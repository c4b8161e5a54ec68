#!/usr/bin/env bash
# A Ticketing cluster's throughput and every node's memory, beside a single
# node (no raft) in the same run.
#
#   scripts/bench-cluster.sh [options] [3|5]
#
# Each run starts a fresh in-memory cluster of 3 (default) or 5 nodes with
# scripts/cluster-local.sh (default flags; state in $TICKETING_CLUSTER_DIR,
# default a temporary directory; port base $TICKETING_CLUSTER_PORT, default
# 17470), drives its leader with the
# pipelined row (pairs, 8 conns × pipeline 64, 10 k keys), reads every node's
# peak RSS (VmHWM), stops it; then does the same against a fresh single node.
# Runs alternate (cluster, single, cluster, ...) so machine noise hits both
# alike. The table's ratio is cluster ÷ single node: what replication costs.
# Targets (issue 7): 3 nodes ≥ 200,000 ops/s, every node's RSS ≤ 32 MB.
set -euo pipefail
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

bench_parse_opts "$@"
shift "$SHIFT"
SIZE=${1:-3}
case $SIZE in 3 | 5) ;; *) usage >&2; exit 2 ;; esac
export TICKETING_CLUSTER_PORT=${TICKETING_CLUSTER_PORT:-17470}

bench_setup
export TICKETING_BIN="$BIN/ticketing" TICKETING_CLUSTER_DIR=${TICKETING_CLUSTER_DIR:-$BIN/cluster}
cluster() { "$ROOT/scripts/cluster-local.sh" "$@"; }
trap 'cluster stop >/dev/null 2>&1 || true; bench_cleanup' EXIT
read -r -a args <<<"$ROW_pipelined"

for i in $(seq 1 "$RUNS"); do
  cluster start "$SIZE" >/dev/null
  SRV_ADDR=$("$BIN/ticketing" status --addr "127.0.0.1:$TICKETING_CLUSTER_PORT" -o json |
    sed -n 's/.*"leader": *"\([^"]*\)".*/\1/p' | head -1)
  port=${SRV_ADDR##*:}
  SRV_PID=$(cat "$TICKETING_CLUSTER_DIR/n$(((port - TICKETING_CLUSTER_PORT) / 2 + 1)).pid")
  run_bench "cluster$SIZE" "cluster-$SIZE-nodes" "${args[@]}"
  rss=""
  for f in "$TICKETING_CLUSTER_DIR"/n*.pid; do
    p=$(cat "$f")
    kb=$(awk '/VmHWM/{print $2}' "/proc/$p/status")
    role=follower
    [ "$p" = "$SRV_PID" ] && role=leader
    rss+=" $(basename "$f" .pid) ($role) $((kb / 1024)).$(((kb % 1024) * 10 / 1024)) MB,"
  done
  echo "  every node's peak RSS:${rss%,}" | tee -a "$OUT/rss.txt" >&2
  cluster stop >/dev/null
  start_ticketing; run_bench "cluster$SIZE" single-node "${args[@]}"; stop_server
done

echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
"$BIN/ticketing" bench-report "$OUT"/*.json | tee "$OUT/report.md"
cat "$OUT/rss.txt"
bench_results

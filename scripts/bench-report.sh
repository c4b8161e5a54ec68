#!/usr/bin/env bash
# docs/benchmarks.md's current table: every workload measured in one run and
# written by this one script (issue 36 item 2), each figure beside its
# reference from the same run (the floor, a single node, the single-key
# pair) and its target.
#
#   scripts/bench-report.sh [options] [ROW...]   measure (default: every row), print the table
#   scripts/bench-report.sh --write [options]    ... and put it into docs/benchmarks.md
#   scripts/bench-report.sh --list               the row set: id, workload, command (runs nothing)
#   scripts/bench-report.sh --check              docs/benchmarks.md's table has exactly the row
#                                                set of --list, in order (CI; figures not compared)
#
# Rows: pipelined unpipelined latency hotkey rss memory heldbytes set2
# cluster3 upstream upstream3 java-virtual rust-blocking (upstream*: the Rust
# client's example client/rust/examples/upstream.rs, skipped when cargo is
# missing; java-virtual, rust-blocking: scripts/bench-clients.sh, the client's
# 64-caller figure beside the Go client's from the same run, skipped when the
# client's toolchain or, for java-virtual, a JDK 21+ is missing). Runs
# alternate (ticketing, reference, ticketing, ...) with a fresh server per
# run, as in scripts/bench-floor.sh; the figure is the median with its
# min – max. Needs jq. About 10 minutes with the defaults (-n 3 -d 10s).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DOC=$ROOT/docs/benchmarks.md
BEGIN='<!-- bench-report: begin (scripts/bench-report.sh --write; do not edit by hand) -->'
END='<!-- bench-report: end -->'

# The row set: id | workload | command. The doc's table has one row per id,
# in this order (--check).
ROWS=(
  "pipelined|pairs, 8 conns × pipeline 64, 10 k keys|scripts/bench-floor.sh pipelined"
  "unpipelined|pairs, 64 conns × pipeline 1|scripts/bench-floor.sh unpipelined"
  "latency|pairs, 1 conn × pipeline 1: p99|scripts/bench-floor.sh latency"
  "hotkey|one hot key, 100 waiters: handoffs/s, max wait ÷ FIFO bound|scripts/bench-floor.sh hotkey"
  "rss|server RSS peak in the pipelined row|scripts/bench-floor.sh pipelined"
  "memory|RSS per held lock, 1 M keys of 16 B|scripts/bench-floor.sh memory"
  "heldbytes|heap bytes per held lock in the table, 100 k keys|go test ./server/locktable -run HeldLockBytes -v"
  "set2|2-key set acquire+release vs a single-key pair, pipelined row|ticketing bench … --set-size 2"
  "cluster3|3-node cluster, pipelined row; every node's RSS|scripts/bench-cluster.sh 3"
  "upstream|upstream workload, single node: 32 keys × 1,250 cycles, 64 tasks (Rust client)|cargo run --release --example upstream"
  "upstream3|upstream workload, 3 nodes|same, TICKETING_ADDR = the 3 nodes"
  "java-virtual|Java blocking client, 64 virtual threads (newest JDK ≥ 21 installed), pairs/s vs the Go client's 64 callers|BENCH_API=virtual scripts/bench-clients.sh java"
  "rust-blocking|Rust blocking client, 64 threads, pairs/s vs the Go client's 64 callers|BENCH_API=blocking scripts/bench-clients.sh rust"
)

row_ids() { local r; for r in "${ROWS[@]}"; do echo "${r%%|*}"; done; }

case ${1:-} in
  --list)
    for r in "${ROWS[@]}"; do IFS='|' read -r id w c <<<"$r"; printf '%s\t%s\t%s\n' "$id" "$w" "$c"; done
    exit 0 ;;
  --check)
    # the doc's rows: the first cell of each table line inside the markers
    got=$(awk -v b="$BEGIN" -v e="$END" '$0 == b {on = 1; next} $0 == e {on = 0} on' "$DOC" |
      grep -E '^\| `[a-z0-9-]+` \|' | sed -E 's/^\| `([a-z0-9-]+)` \|.*/\1/' || true)
    want=$(row_ids)
    if [ "$got" != "$want" ]; then
      echo "docs/benchmarks.md: the table's rows differ from scripts/bench-report.sh --list" >&2
      diff <(echo "$want") <(echo "$got") >&2 || true
      echo "regenerate it: scripts/bench-report.sh --write" >&2
      exit 1
    fi
    echo "docs/benchmarks.md: $(echo "$want" | wc -l) rows, as scripts/bench-report.sh defines"
    exit 0 ;;
esac

WRITE=false
if [ "${1:-}" = --write ]; then WRITE=true; shift; fi
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"
bench_parse_opts "$@"
shift "$SHIFT"
command -v jq >/dev/null || { echo "bench-report.sh needs jq" >&2; exit 2; }
want=("$@")
[ ${#want[@]} -gt 0 ] || mapfile -t want < <(row_ids)
bench_setup

declare -A FIG REF TGT
on() { local r; for r in "${want[@]}"; do [ "$r" = "$1" ] && return 0; done; return 1; }

# vals FILE LABEL JQ: JQ of FILE's runs with LABEL, sorted.
vals() { jq -r --arg l "$2" "select(.label == \$l) | $3" "$1" | sort -g; }
median() { awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
mops() { awk '{printf "%.2f M", $1/1e6}'; }
kops() { awk '{printf "%.0f k", $1/1e3}'; }
figure() { # FILE LABEL JQ FMT: "median (min – max)", each formatted by FMT
  local v
  v=$(vals "$1" "$2" "$3")
  echo "$(echo "$v" | median | $4) ($(echo "$v" | head -1 | $4) – $(echo "$v" | tail -1 | $4))"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.0f %%", 100*a/b; else print "?"}'; }
med() { vals "$1" "$2" "$3" | median; }

alternate() { # NAME ROWVAR: ticketing, floor, ... RUNS times
  local name=$1 i
  read -r -a args <<<"${!2}"
  for i in $(seq 1 "$RUNS"); do
    start_ticketing; run_bench "$name" ticketing "${args[@]}"; stop_server
    start_floor; run_bench "$name" floor "${args[@]}"; stop_server
  done
}

if on pipelined || on rss; then
  alternate pipelined ROW_pipelined
  f=$OUT/pipelined.json
  FIG[pipelined]="$(figure "$f" ticketing .ops_per_sec mops) ops/s, server $(med "$f" ticketing .server_cpu_us_per_op | awk '{printf "%.2f", $1}') µs/op"
  REF[pipelined]="floor $(figure "$f" floor .ops_per_sec mops): **$(ratio "$(med "$f" ticketing .ops_per_sec)" "$(med "$f" floor .ops_per_sec)")**"
  FIG[rss]="$(figure "$f" ticketing '.server_mem.rss_peak_bytes/1048576' "xargs printf %.1f") MB"
  REF[rss]="floor server $(figure "$f" floor '.server_mem.rss_peak_bytes/1048576' "xargs printf %.1f") MB"
fi
if on unpipelined; then
  alternate unpipelined ROW_unpipelined
  f=$OUT/unpipelined.json
  FIG[unpipelined]="$(figure "$f" ticketing .ops_per_sec kops) ops/s"
  REF[unpipelined]="floor $(figure "$f" floor .ops_per_sec kops): **$(ratio "$(med "$f" ticketing .ops_per_sec)" "$(med "$f" floor .ops_per_sec)")**"
fi
if on latency; then
  alternate latency ROW_latency
  f=$OUT/latency.json
  FIG[latency]="p99 $(figure "$f" ticketing .latency.p99_us "xargs printf %.0f") µs, p50 $(med "$f" ticketing .latency.p50_us | xargs printf %.0f) µs"
  REF[latency]="floor p99 $(figure "$f" floor .latency.p99_us "xargs printf %.0f") µs"
fi
if on hotkey; then
  read -r -a args <<<"$ROW_hotkey"
  for i in $(seq 1 "$RUNS"); do
    start_ticketing; run_bench hotkey ticketing "${args[@]}"; stop_server
    start_floor --hotkey; run_bench hotkey floor "${args[@]}"; stop_server
  done
  f=$OUT/hotkey.json
  FIG[hotkey]="$(figure "$f" ticketing .handoffs_per_sec kops) handoffs/s; max wait $(med "$f" ticketing .fairness.max_wait_over_bound | xargs printf %.2f)× the bound"
  REF[hotkey]="hot-key floor $(figure "$f" floor .handoffs_per_sec kops): **$(ratio "$(med "$f" ticketing .handoffs_per_sec)" "$(med "$f" floor .handoffs_per_sec)")**; its max wait $(med "$f" floor .fairness.max_wait_over_bound | xargs printf %.2f)× the bound"
fi
if on memory; then
  read -r -a args <<<"$ROW_memory"
  start_ticketing; run_bench memory ticketing "${args[@]}"; stop_server
  FIG[memory]="$(med "$OUT/memory.json" ticketing .bytes_per_held_key | xargs printf %.0f) B"
  REF[memory]="Redis ≈ 150 B (earlier run, docs/benchmarks-history.md)"
fi
if on heldbytes; then
  hb=$(cd "$ROOT" && go test -count=1 ./server/locktable -run 'HeldLockBytes' -v 2>&1 | sed -n 's/.*: \([0-9.]*\) heap bytes per held lock.*/\1/p' | head -1)
  FIG[heldbytes]="${hb:-?} B"
  REF[heldbytes]="—"
fi
if on set2; then
  read -r -a args <<<"$ROW_pipelined"
  for i in $(seq 1 "$RUNS"); do
    start_ticketing; run_bench set2 single "${args[@]}"; stop_server
    start_ticketing; run_bench set2 set2 "${args[@]}" --set-size 2; stop_server
  done
  f=$OUT/set2.json
  s=$(med "$f" single .ops_per_sec) p=$(med "$f" set2 .ops_per_sec)
  FIG[set2]="set2 $(figure "$f" set2 .ops_per_sec mops) ops/s, server $(med "$f" set2 .server_cpu_us_per_op | xargs printf %.2f) µs/op: **$(awk -v s="$s" -v p="$p" 'BEGIN {printf "%.1f×", s/p}')** a single pair's cost"
  REF[set2]="single-key $(figure "$f" single .ops_per_sec mops) ops/s, $(med "$f" single .server_cpu_us_per_op | xargs printf %.2f) µs/op"
fi
if on cluster3; then
  (OUT=$OUT/cluster RUNS=$RUNS DURATION=$DURATION WARMUP=$WARMUP "$ROOT/scripts/bench-cluster.sh" 3) >&2
  f=$OUT/cluster/cluster3.json
  FIG[cluster3]="$(figure "$f" cluster-3-nodes .ops_per_sec kops) ops/s; nodes $(grep -oE '[0-9.]+ MB' "$OUT/cluster/rss.txt" | sort -g | sed -n '1p;$p' | tr '\n' ' ' | awk '{print $1 "–" $3 " MB"}')"
  REF[cluster3]="single node $(figure "$f" single-node .ops_per_sec mops): $(ratio "$(med "$f" cluster-3-nodes .ops_per_sec)" "$(med "$f" single-node .ops_per_sec)")"
fi
upstream_runs() { # NAME ADDR
  local i
  for i in $(seq 1 "$RUNS"); do
    TICKETING_ADDR=$2 "$UPBIN" | sed -n 's/^UPSTREAM //p' >>"$OUT/$1.json"
  done
}
upstream_fig() { # NAME: "median (min – max) cycles/s, counters exact: BOOL"
  local v
  v=$(jq -r .cycles_per_sec "$OUT/$1.json" | sort -g)
  echo "$(echo "$v" | median | kops) cycles/s ($(echo "$v" | head -1 | kops) – $(echo "$v" | tail -1 | kops)), counters exact: $(jq -s 'all(.bad_counters == 0)' "$OUT/$1.json")"
}
if (on upstream || on upstream3) && command -v cargo >/dev/null; then
  (cd "$ROOT/client/rust" && cargo build --release --example upstream >&2)
  UPBIN=$ROOT/client/rust/target/release/examples/upstream
  if on upstream; then
    start_ticketing; upstream_runs upstream "$SRV_ADDR"; stop_server
    FIG[upstream]=$(upstream_fig upstream)
    REF[upstream]="upstream publishes 143 k cycles/s (10 cores; not this machine)"
  fi
  if on upstream3; then
    export TICKETING_BIN="$BIN/ticketing" TICKETING_CLUSTER_DIR=$BIN/ucluster TICKETING_CLUSTER_PORT=${TICKETING_CLUSTER_PORT:-17470}
    p=$TICKETING_CLUSTER_PORT
    "$ROOT/scripts/cluster-local.sh" start 3 >&2
    upstream_runs upstream3 "127.0.0.1:$p,127.0.0.1:$((p + 2)),127.0.0.1:$((p + 4))"
    "$ROOT/scripts/cluster-local.sh" stop >&2
    FIG[upstream3]=$(upstream_fig upstream3)
    REF[upstream3]="upstream publishes 35 k cycles/s (10 cores; not this machine)"
  fi
fi

# clients_row ID LANG API BENCHAPI: RUNS runs of scripts/bench-clients.sh LANG
# (a fresh server each, the Go client first, then LANG against the same
# server, BENCH_API=API), each run's LANG BENCHAPI 64-caller pairs/s and the Go
# client's 64-caller pairs/s of that run as one JSON line in $OUT/ID.json.
clients_row() {
  local id=$1 lang=$2 api=$3 row=$4 i secs
  secs=${DURATION%s}
  [[ "$secs" =~ ^[0-9]+([.][0-9]+)?$ ]] || secs=5
  for i in $(seq 1 "$RUNS"); do
    BENCH_API=$api BENCH_SECONDS=$secs TICKETING_BIN="$BIN/ticketing" "$ROOT/scripts/bench-clients.sh" "$lang" 2>"$OUT/$id.$i.err" |
      awk -v l="$lang" -v a="$row" '$1 == "go" && $3 == 64 {g = $4} $1 == l && $2 == a && $3 == 64 {p = $4}
        END {if (g > 0 && p > 0) printf "{\"label\":\"%s\",\"go\":%s,\"pairs_per_sec\":%s,\"ratio\":%.4f}\n", l, g, p, p / g}' >>"$OUT/$id.json"
  done
  if [ ! -s "$OUT/$id.json" ]; then
    echo "bench-report: no $id figure: $(grep -h '^skipped' "$OUT/$id".*.err 2>/dev/null | head -1)" >&2
    return 0
  fi
  local f=$OUT/$id.json
  FIG[$id]="$(figure "$f" "$lang" .pairs_per_sec kops) pairs/s: **$(med "$f" "$lang" .ratio | xargs printf %.2f)** of Go ($(vals "$f" "$lang" .ratio | head -1 | xargs printf %.2f) – $(vals "$f" "$lang" .ratio | tail -1 | xargs printf %.2f))"
  REF[$id]="Go client, 64 callers, same runs: $(figure "$f" "$lang" .go kops) pairs/s"
}
if on java-virtual; then
  (cd "$ROOT/client/java" && ./ci.sh build >&2) # the jars of this tree
  clients_row java-virtual java virtual virtual-thr
fi
if on rust-blocking && command -v cargo >/dev/null; then
  clients_row rust-blocking rust blocking blocking
fi

TGT[pipelined]="≥ 85 % of the floor"
TGT[unpipelined]="≥ 90 % of the floor"
TGT[latency]="p99 ≤ 150 µs"
TGT[hotkey]="≥ 30 k/s; max wait ≤ 1.5× the bound"
TGT[rss]="≤ 10 MB"
TGT[memory]="≤ 64 B"
TGT[heldbytes]="≤ 64 B"
TGT[set2]="≤ 1.5×"
TGT[cluster3]="≥ 1 M ops/s; nodes ≤ 32 MB"
TGT[upstream]="recorded"
TGT[upstream3]="recorded"
TGT[java-virtual]="≥ 0.8 of Go (issue 34 item 8)"
TGT[rust-blocking]="≥ 0.8 of Go (issue 33 item 4)"

table() {
  echo "$BEGIN"
  echo
  echo "Measured $(date -u '+%Y-%m-%d %H:%M') UTC at $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet || echo '+changes'), $(nproc) CPUs, load average $(sed -n 's/load average at start: //p' "$OUT/machine.txt") at start; $RUNS run(s) of $DURATION per target, alternating."
  echo
  echo "| row | workload | command | this tree | same-run reference | target |"
  echo "|---|---|---|---|---|---|"
  local r id w c
  for r in "${ROWS[@]}"; do
    IFS='|' read -r id w c <<<"$r"
    echo "| \`$id\` | $w | \`$c\` | ${FIG[$id]:-not measured in this run} | ${REF[$id]:-—} | ${TGT[$id]} |"
  done
  echo
  echo "$END"
}
table | tee "$OUT/table.md"
if $WRITE; then
  awk -v b="$BEGIN" -v e="$END" -v t="$OUT/table.md" '
    $0 == b {while ((getline l < t) > 0) print l; skip = 1; next}
    $0 == e {skip = 0; next}
    !skip' "$DOC" >"$OUT/doc.md"
  cp "$OUT/doc.md" "$DOC"
  echo "written: docs/benchmarks.md" >&2
fi
bench_results

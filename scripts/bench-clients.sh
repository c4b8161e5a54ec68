#!/usr/bin/env bash
# Client throughput beside the Go client (docs/clients.md): starts one
# `ticketing serve` with a token, runs the Go client benchmark
# (client/testkit/cmd/clientbench: acquire+release pairs through ONE
# client.Client, 64 callers and 1 caller), then each present language's
# `client/<lang>/ci.sh bench` against the same server, and prints every BENCH
# line as a table with its ratio to the Go client's row of the same caller
# count in this run. Figures on a shared or loaded machine mean little.
#
# Usage: scripts/bench-clients.sh [LANG...]   (default: every present language)
# Environment: BENCH_SECONDS (default 5) per configuration; TICKETING_BIN
# (default bin/ticketing, built by `make build`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIN=${TICKETING_BIN:-$ROOT/bin/ticketing}
export BENCH_SECONDS=${BENCH_SECONDS:-5}
LANGS=("$@")
[ ${#LANGS[@]} -gt 0 ] || LANGS=(python js rust java kotlin c cpp ruby csharp)

if [ ! -x "$BIN" ]; then
  echo "bench-clients: $BIN not found: run make build (or set TICKETING_BIN)" >&2
  exit 2
fi

TMP=$(mktemp -d)
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TMP/token"
"$BIN" serve --listen 127.0.0.1:0 --token-file "$TMP/token" --log-level info 2> "$TMP/server.log" &
SERVER_PID=$!
addr=""
for _ in $(seq 1 300); do
  addr=$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p' "$TMP/server.log" | head -n1)
  [ -n "$addr" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "bench-clients: server exited:" >&2; cat "$TMP/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "bench-clients: server did not start" >&2; exit 1; }
export TICKETING_ADDR=$addr
TICKETING_TOKEN=$(cat "$TMP/token")
export TICKETING_TOKEN
echo "server $addr, BENCH_SECONDS=$BENCH_SECONDS" >&2

lines="$TMP/bench.lines"
: > "$lines"
echo "== go (client/testkit/cmd/clientbench)" >&2
CGO_ENABLED=0 go build -o "$TMP/clientbench" ./client/testkit/cmd/clientbench
"$TMP/clientbench" | tee -a "$lines" >&2

skipped=()
done_ci=" "
for l in "${LANGS[@]}"; do
  # C++'s bench is C's (client/cpp/ci.sh only execs it, and one run prints
  # both languages' rows); Kotlin's is its own (java's ci.sh with
  # TICKETING_CI_LANG=kotlin, through client/kotlin/ci.sh).
  owner=$l
  case $l in cpp) owner=c ;; esac
  ci="client/$owner/ci.sh"
  if [ ! -f "$ci" ]; then skipped+=("$l: no $ci yet"); continue; fi
  case "$done_ci" in *" $owner "*) continue ;; esac
  if ! msg=$(bash "$ci" toolchain 2>&1); then skipped+=("$l: toolchain missing: $msg"); continue; fi
  done_ci="$done_ci$owner "
  echo "== $l ($ci bench)" >&2
  if ! bash "$ci" bench > "$TMP/$l.out" 2> "$TMP/$l.err"; then
    skipped+=("$l: ci.sh bench failed: $(tail -n 3 "$TMP/$l.err" | tr '\n' ' ')")
  fi
  grep '^BENCH ' "$TMP/$l.out" | tee -a "$lines" >&2 || skipped+=("$l: no BENCH line")
done

# Table: each row's ratio to the Go client row with the same caller count.
python3 - "$lines" <<'PY' 2>/dev/null || awk '{print}' "$lines"
import json, sys
rows = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("BENCH ")]
go = {r["callers"]: r["pairs_per_sec"] for r in rows if r.get("lang") == "go"}
print(f'{"lang":<8} {"api":<12} {"callers":>7} {"pairs/s":>12} {"vs go":>7}')
for r in rows:
    base = go.get(r["callers"])
    ratio = f'{r["pairs_per_sec"] / base:.2f}' if base else "-"
    print(f'{r["lang"]:<8} {r.get("api", ""):<12} {r["callers"]:>7} {r["pairs_per_sec"]:>12.1f} {ratio:>7}')
PY
for s in "${skipped[@]:-}"; do [ -n "$s" ] && echo "skipped $s"; done
exit 0

#!/usr/bin/env bash
# operations-check: runs the commands of docs/operations.md as a new user
# would, to prove the guide works as written. Every fenced block preceded by
# "<!-- ops-check -->" runs, in document order, in this one shell (so the
# nodes it starts in the background are this shell's jobs, as in the user's);
# the "<!-- ops-check: install -->" block runs in the checkout.
#
# Environment:
#   TICKETING_BIN  use this binary instead of running the install block
#                  (the Go test passes the one it built from the same source)
#   PORT           first of the 8 consecutive free ports the guide's cluster
#                  uses (default: a random free range)
#   WORK           directory to run in (default: a temporary one, removed)
#
# Exits non-zero at the first failing command; on any exit every process it
# started is killed and reaped. Go test: TestOperationsDoc (cmd/ticketing).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
doc="$root/docs/operations.md"
bin=${TICKETING_BIN:-}
# A new user's shell has no TICKETING_* settings.
for v in $(compgen -e | grep '^TICKETING_' || true); do unset "$v"; done

own_work=
if [ -z "${WORK:-}" ]; then
  WORK=$(mktemp -d)
  own_work=1
fi
mkdir -p "$WORK"
blocks=$(mktemp -d)

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local pids
  pids=$(jobs -p)
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    echo "operations-check: FAILED (exit $rc)" >&2
    for f in "$WORK"/ticketing-demo/cluster/*.log; do
      [ -f "$f" ] || continue
      echo "--- $f (last lines)" >&2
      tail -n 15 "$f" >&2
    done
  fi
  rm -rf "$blocks"
  if [ -n "$own_work" ]; then rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "${PORT:-}" ]; then
  # 8 consecutive ports nobody listens on.
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 30000))
    busy=
    for q in $(seq "$p" $((p + 7))); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$q") 2>/dev/null; then busy=1; break; fi
    done
    if [ -z "$busy" ]; then PORT=$p; break; fi
  done
fi
export PORT

# Extract the marked blocks: one file per block, named by order and kind.
awk -v dir="$blocks" '
  /^<!-- ops-check(: install)? -->$/ { kind = ($0 ~ /install/) ? "install" : "run"; armed = 1; next }
  armed && /^```/ { n++; file = sprintf("%s/%03d-%s.sh", dir, n, kind); inblock = 1; armed = 0; next }
  inblock && /^```/ { inblock = 0; close(file); next }
  inblock { print > file; next }
  armed && NF { armed = 0 }
' "$doc"
count=$(find "$blocks" -name '*.sh' | wc -l)
if [ "$count" -lt 5 ]; then
  echo "operations-check: found only $count checked blocks in $doc" >&2
  exit 1
fi

run_block() {
  echo "operations-check: block $(basename "$1" .sh)"
  sed 's/^/  | /' "$1"
  # shellcheck disable=SC1090
  . "$1"
}

for f in "$blocks"/*-install.sh; do
  [ -f "$f" ] || continue
  if [ -n "$bin" ]; then
    echo "operations-check: install block skipped: using TICKETING_BIN=$bin"
    mkdir -p "$WORK/bin"
    ln -sf "$bin" "$WORK/bin/ticketing"
    export PATH="$WORK/bin:$PATH"
  else
    (cd "$root" && run_block "$f")
    export PATH="$root/bin:$PATH"
  fi
done

cd "$WORK"
for f in "$blocks"/*-run.sh; do
  run_block "$f"
done
echo "operations-check: OK ($count blocks of docs/operations.md, ports $PORT-$((PORT + 7)))"

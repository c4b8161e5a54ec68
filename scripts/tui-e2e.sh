#!/usr/bin/env bash
# End-to-end test of `ticketing top` in a real terminal (tmux):
#   builds the binary, starts a single-node server on a free loopback port,
#   makes one holder and 3 waiters on one key, runs `ticketing top` in an
#   80x24 tmux pane, checks that the key, its queue depth 3 and the holder's
#   token are on screen, quits with q and checks that the terminal is
#   restored (alternate screen left, the shell prompt back, stty settings as
#   before).
#
# Usage: scripts/tui-e2e.sh [--capture FILE] [--size WxH] [--load]
#   --capture FILE  also write the dashboard's capture-pane text to FILE
#   --size WxH      pane size (default 80x24)
#   --load          more to look at (for docs/top.md): a few more held keys
#                   and queues, a queue spike, `ticketing bench` traffic,
#                   1s polls, and 35 s of it before the capture
# Env: TICKETING_BIN=path  use this binary instead of building one.
#
# Idempotent: everything lives in a fresh temp directory and a private tmux
# server (its own socket), all reaped on exit, whatever the exit.
set -euo pipefail
cd "$(dirname "$0")/.."

capture_out=""
size="80x24"
load=0
while [ $# -gt 0 ]; do
  case "$1" in
    --capture) capture_out="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --load) load=1; shift ;;
    *) echo "usage: $0 [--capture FILE] [--size WxH] [--load]" >&2; exit 2 ;;
  esac
done
interval=250ms
[ "$load" = 1 ] && interval=1s
cols=${size%x*}
rows=${size#*x}

command -v tmux >/dev/null 2>&1 || { echo "tui-e2e: tmux is not installed" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tui-e2e.XXXXXX")
sock="$work/tmux.sock"
pids=()
cleanup() {
  local rc=$?
  tmux -S "$sock" kill-server >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$rc" -ne 0 ] && [ -d "$work" ]; then
    echo "tui-e2e: FAILED (exit $rc); server log:" >&2
    sed 's/^/  /' "$work/server.log" >&2 2>/dev/null || true
    if [ -f "$work/last.txt" ]; then
      echo "tui-e2e: last pane capture:" >&2
      sed 's/^/  |/' "$work/last.txt" >&2
    fi
  fi
  # The pane's processes end asynchronously after kill-server: retry.
  for _ in 1 2 3 4 5; do rm -rf "$work" 2>/dev/null && break; sleep 0.2; done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { echo "tui-e2e: $*"; }
fail() { echo "tui-e2e: FAIL: $*" >&2; exit 1; }

# wait_for DESCRIPTION SECONDS COMMAND...: retry COMMAND every 0.1 s.
wait_for() {
  local what=$1 secs=$2; shift 2
  local tries=$((secs * 10))
  for ((i = 0; i < tries; i++)); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  fail "timed out after ${secs}s waiting for $what"
}

# --- binary -----------------------------------------------------------------
if [ -n "${TICKETING_BIN:-}" ]; then
  bin=$TICKETING_BIN
else
  say "building ticketing"
  bin="$work/ticketing"
  go build -o "$bin" ./cmd/ticketing
fi

# --- server on a free port (the kernel picks it: no race) ---------------------
: >"$work/server.log"
"$bin" serve --listen 127.0.0.1:0 --node-id e2e 2>"$work/server.log" &
pids+=($!)
server_addr() { grep -o 'msg=serving addr=[0-9.:]*' "$work/server.log" 2>/dev/null | head -n1 | sed 's/.*addr=//'; }
listening() { [ -n "$(server_addr)" ]; }
wait_for "the server to listen" 20 listening
addr=$(server_addr)
export TICKETING_ADDR="$addr"
say "server on $addr"

# --- one holder and 3 waiters on one key -------------------------------------
key="e2e/hot-key"
token=$("$bin" acquire "$key" --lease 5m --wait 5s)
[[ "$token" =~ ^[0-9]+$ ]] || fail "acquire printed $token, want a token"
say "holder token $token"
for i in 1 2 3; do
  "$bin" acquire "$key" --lease 1m --wait 60s >"$work/waiter$i.out" 2>&1 &
  pids+=($!)
done

if [ "$load" = 1 ]; then
  "$bin" acquire jobs/nightly-report --lease 10m >/dev/null
  for i in 1 2; do
    "$bin" acquire jobs/nightly-report --lease 1m --wait 60s >/dev/null 2>&1 &
    pids+=($!)
  done
  "$bin" acquire db/migrations --lease 3m >/dev/null
  "$bin" acquire cache/warmup --lease 45s >/dev/null
  "$bin" bench --conns 2 --pipeline 2 --keys 500 --hot-keys 1 --contention 0.2 \
    --wait 2s --hold 20ms --duration 120s --progress=false --server-stats=false \
    >"$work/bench.out" 2>&1 &
  pids+=($!)
fi

# --- ticketing top in tmux -----------------------------------------------------
# A private tmux server (-S), no user config (-f /dev/null), a plain shell
# with a known prompt, so "the prompt is back" is checkable.
printf 'PS1="e2e-prompt\\$ "\nunset HISTFILE\n' >"$work/bashrc"
tmux -S "$sock" -f /dev/null new-session -d -s e2e -x "$cols" -y "$rows" \
  "env -i PATH=\"$PATH\" HOME=\"$work\" TERM=screen-256color TICKETING_ADDR=$addr bash --noprofile --rcfile $work/bashrc -i"
tmux -S "$sock" set-option -t e2e status off >/dev/null
tmux -S "$sock" resize-window -t e2e -x "$cols" -y "$rows" >/dev/null 2>&1 || true

pane() { tmux -S "$sock" capture-pane -p -t e2e >"$work/last.txt"; cat "$work/last.txt"; }
alt_on() { tmux -S "$sock" display-message -p -t e2e '#{alternate_on}'; }
prompt_ready() { pane | grep -q 'e2e-prompt\$ *$'; }

wait_for "the shell prompt" 10 prompt_ready
tmux -S "$sock" send-keys -t e2e "stty -g >$work/stty.before; clear" Enter
wait_for "stty -g" 10 test -s "$work/stty.before"

tmux -S "$sock" send-keys -t e2e "$bin top --addr $addr --interval $interval" Enter

# The dashboard is up once it shows the key with its three waiters.
shows_queue() {
  local s
  s=$(pane)
  [ "$(alt_on)" = 1 ] || return 1
  grep -F "$key" <<<"$s" | grep -Eq "(^|[[:space:]])$token[[:space:]].*[[:space:]]3[[:space:]]"
}
wait_for "top to show $key with depth 3 and token $token" 20 shows_queue
if [ "$load" = 1 ]; then
  sleep 5
  for i in 1 2 3; do # a queue depth spike: 2 → 5
    "$bin" acquire jobs/nightly-report --lease 1m --wait 60s >/dev/null 2>&1 &
    pids+=($!)
  done
  say "letting the dashboard fill for 30s"
  sleep 30
  wait_for "top to show $key with depth 3 and token $token" 20 shows_queue
fi

screen=$(pane)
grep -Fq "$key" <<<"$screen" || fail "key $key not on screen"
line=$(grep -F "$key" <<<"$screen" | head -n1)
# The key's row: KEY TOKEN LEASE DEPTH OLDEST-WAIT.
read -r k t _lease depth _wait <<<"$line"
[ "$k" = "$key" ] || fail "row starts with $k, want $key"
[ "$t" = "$token" ] || fail "row shows token $t, want $token"
[ "$depth" = 3 ] || fail "row shows depth $depth, want 3"
grep -q "$addr" <<<"$screen" || fail "node $addr not on screen"
grep -Eq "^$addr +single .* up" <<<"$screen" || fail "node line does not show single/up"
say "on screen: $line"
if [ -n "$capture_out" ]; then
  cp "$work/last.txt" "$capture_out"
  say "capture written to $capture_out"
fi

# --- q quits and restores the terminal -----------------------------------------
tmux -S "$sock" send-keys -t e2e q
back_to_shell() { [ "$(alt_on)" = 0 ] && prompt_ready; }
wait_for "top to quit and the prompt to come back" 10 back_to_shell
tmux -S "$sock" send-keys -t e2e "stty -g >$work/stty.after" Enter
wait_for "stty -g after" 10 test -s "$work/stty.after"
cmp -s "$work/stty.before" "$work/stty.after" || fail "terminal settings not restored: $(cat "$work/stty.before") vs $(cat "$work/stty.after")"
# Typed text echoes again (not raw mode): the shell sees and runs it.
tmux -S "$sock" send-keys -t e2e "echo restored-ok" Enter
wait_for "the shell to echo" 10 bash -c "tmux -S '$sock' capture-pane -p -t e2e | grep -qx 'restored-ok'"

say "PASS"

# shellcheck shell=bash
# Shared by client/<lang>/ci.sh package-check (sourced, not run): a real
# `ticketing serve` on a port from the OS for the README's first example,
# reaped when the check ends.
#
#   . "$repo/scripts/package-check-lib.sh"
#   pc_start_server "$work"          # sets PC_ADDR (host:port) and PC_PID
#   ... run the example against $PC_ADDR ...
#   pc_stop_server                   # put it in the caller's EXIT trap too
#
# The server binary is $TICKETING_BIN (default: bin/ticketing of the repo).

pc_stop_server() {
  if [ -n "${PC_PID:-}" ]; then
    kill -TERM "$PC_PID" 2>/dev/null || true
    wait "$PC_PID" 2>/dev/null || true
    PC_PID=""
  fi
}

# pc_start_server DIR [serve flags...]: starts the server with its log in
# DIR/server.log and waits (at most 20 s) for its "serving addr=" line.
pc_start_server() {
  local dir=$1
  shift
  local bin=${TICKETING_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bin/ticketing}
  [ -x "$bin" ] || { echo "package-check: server binary $bin missing (make build, or set TICKETING_BIN)" >&2; return 1; }
  "$bin" serve --listen 127.0.0.1:0 "$@" </dev/null >"$dir/server.out" 2>"$dir/server.log" &
  PC_PID=$!
  local i
  PC_ADDR=""
  for i in $(seq 1 200); do
    PC_ADDR=$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p' "$dir/server.log" | head -1)
    [ -n "$PC_ADDR" ] && return 0
    kill -0 "$PC_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "package-check: the server did not start:" >&2
  cat "$dir/server.log" >&2
  pc_stop_server
  return 1
}

# pc_first_block FILE LANG: the first ```LANG fenced block of a Markdown file.
pc_first_block() {
  awk -v lang="$2" '
    !inb && $0 ~ "^```" lang "[[:space:]]*$" { inb = 1; next }
    inb && /^```/ { exit }
    inb { print }
  ' "$1"
}

#!/usr/bin/env bash
# Fresh-machine demo: build the binary, start a single-node server on a free
# loopback port, take a real lock, release it, show the server's status, stop.
# Fails (non-zero, with the server's log on stderr) when the server does not
# come up or any step does not do what it says.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p bin
go build -o bin/ticketing ./cmd/ticketing

port=${TICKETING_DEMO_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo 17470)}
export TICKETING_ADDR="127.0.0.1:${port}"
log=$(mktemp)
bin/ticketing serve --listen "$TICKETING_ADDR" 2>"$log" &
srv=$!
ok=0
cleanup() {
  kill -TERM "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  if [ "$ok" != 1 ]; then
    echo "demo: failed; the server's log:" >&2
    sed 's/^/  | /' "$log" >&2 || true
  fi
  rm -f "$log"
}
trap cleanup EXIT

up=0
for _ in $(seq 1 100); do
  if ! kill -0 "$srv" 2>/dev/null; then break; fi   # the server exited: no point waiting
  if bin/ticketing ping --count 1 >/dev/null 2>&1; then up=1; break; fi
  sleep 0.1
done
if [ "$up" != 1 ]; then
  echo "demo: the server at $TICKETING_ADDR did not come up" >&2
  exit 1
fi

echo "+ ticketing acquire demo/key --lease 30s"
token=$(bin/ticketing acquire demo/key --lease 30s)
echo "$token"
echo "+ ticketing acquire demo/key -n    # held: exits 3"
set +e; bin/ticketing acquire demo/key -n; rc=$?; set -e
echo "exit $rc"
if [ "$rc" != 3 ]; then echo "demo: expected exit 3 while the lock is held" >&2; exit 1; fi
echo "+ ticketing locks"
bin/ticketing locks
echo "+ ticketing release demo/key \$token"
bin/ticketing release demo/key "$token"
echo "exit $?"
echo "+ ticketing run demo/key -- sh -c 'echo in the critical section with fencing token \$TICKETING_FENCING_TOKEN'"
bin/ticketing run demo/key -- sh -c 'echo "in the critical section with fencing token $TICKETING_FENCING_TOKEN"'
echo "+ ticketing status"
bin/ticketing status
ok=1

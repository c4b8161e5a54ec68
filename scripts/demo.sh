#!/usr/bin/env bash
# Fresh-machine demo: build the binary, start a single-node server on a free
# loopback port, take a real lock, release it, show the server's status, stop.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p bin
go build -o bin/ticketing ./cmd/ticketing

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo 17470)
export TICKETING_ADDR="127.0.0.1:${port}"
log=$(mktemp)
bin/ticketing serve --listen "$TICKETING_ADDR" 2>"$log" &
srv=$!
trap 'kill -TERM $srv 2>/dev/null; wait $srv 2>/dev/null; rm -f "$log"' EXIT

for _ in $(seq 1 50); do
  bin/ticketing ping --count 1 >/dev/null 2>&1 && break
  sleep 0.1
done

echo "+ ticketing acquire demo/key --lease 30s"
token=$(bin/ticketing acquire demo/key --lease 30s)
echo "$token"
echo "+ ticketing acquire demo/key -n    # held: exits 3"
set +e; bin/ticketing acquire demo/key -n; rc=$?; set -e
echo "exit $rc"
echo "+ ticketing locks"
bin/ticketing locks
echo "+ ticketing release demo/key $token"
bin/ticketing release demo/key "$token"
echo "exit $?"
echo "+ ticketing run demo/key -- echo 'in the critical section with token' \$TICKETING_TOKEN"
bin/ticketing run demo/key -- sh -c 'echo "in the critical section with token $TICKETING_TOKEN"'
echo "+ ticketing status"
bin/ticketing status

#!/usr/bin/env bash
# ci.sh package-check (issue 32 P2/P3): the package a user installs, checked
# the way the README installs and uses it.
#   1. `npm pack` (prepack builds dist/) and the tarball's contents: the
#      built code of both module systems, the README, CHANGELOG and
#      package.json; nothing of the tests, sources, scripts or build/; no
#      internals in the shipped .d.ts files.
#   2. A fresh project under `mktemp -d` (outside the repository):
#      `npm install <tarball>`, then the README's first example as ESM
#      (example.mjs), as CommonJS (example.cjs) and as TypeScript
#      (`tsc --strict`, as the README states, and once more with
#      exactOptionalPropertyTypes), each run against a real
#      `ticketing serve` on a port from the OS (with a token); the server
#      is reaped on exit.
# Env: TICKETING_BIN (default ../../bin/ticketing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${TICKETING_BIN:-$repo/bin/ticketing}"
[[ -x "$bin" ]] || { echo "package-check: server binary $bin missing (make build or TICKETING_BIN)" >&2; exit 1; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" # the checks run in another directory

tmp="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "package-check: $*" >&2; exit 1; }

# --- 1. the artifact
(cd "$here" && npm pack --silent --pack-destination "$tmp" >/dev/null) || fail "npm pack failed"
version="$(node -p 'require(process.argv[1]).version' "$here/package.json")"
tgz="$tmp/ticketing-client-$version.tgz"
[[ -f "$tgz" ]] || fail "npm pack did not write ticketing-client-$version.tgz: $(ls "$tmp")"
tar tzf "$tgz" | sed 's|^package/||' | sort >"$tmp/files"
echo "packed $(basename "$tgz"): $(wc -l <"$tmp/files") files"
for f in package.json README.md CHANGELOG.md dist/esm/index.js dist/esm/index.d.ts \
  dist/cjs/index.js dist/cjs/index.d.ts dist/cjs/package.json; do
  grep -qx "$f" "$tmp/files" || fail "the package lacks $f"
done
if grep -Ev '^(package\.json|README\.md|CHANGELOG\.md|dist/(esm|cjs)/[a-z0-9_-]+\.(js|d\.ts)|dist/cjs/package\.json)$' "$tmp/files"; then
  fail "the package ships the files above (only dist/, README, CHANGELOG and package.json belong in it)"
fi
mkdir "$tmp/pkg"
tar xzf "$tgz" -C "$tmp/pkg"
# Internals that must not be part of the published types (issue 32 finding 3).
if grep -nE '(class Conn\b|interface Call\b|_test|_conns|compensations|\bhooks\b|lastErr|connectErr|backoffDelay|\bcomplete\(|\bnotify\b)' \
  "$tmp"/pkg/package/dist/*/*.d.ts; then
  fail "the shipped .d.ts files expose the internals above"
fi

# --- 2. a fresh project outside the repository, as the README installs it
app="$tmp/app"
mkdir "$app"
cd "$app"
echo '{"name":"app","version":"1.0.0","private":true,"type":"module"}' >package.json
npm install --silent --no-audit --no-fund "$tgz" || fail "npm install of the tarball failed"

# The README's examples: the fenced block after each "<!-- package-check: NAME -->".
extract() {
  awk -v want="<!-- package-check: $1 -->" '
    $0 == want { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$here/README.md"
}
extract esm >example.mjs
extract cjs >example.cjs
[[ -s example.mjs && -s example.cjs ]] || fail "README.md lacks the package-check: esm / cjs example blocks"
cp example.mjs example.ts

# TypeScript as the README states (typescript and @types/node from npm; the
# versions of this repository's lock file, so the npm cache serves them).
ts_ver="$(node -p 'require(process.argv[1]).packages["node_modules/typescript"].version' "$here/package-lock.json")"
types_ver="$(node -p 'require(process.argv[1]).packages["node_modules/@types/node"].version' "$here/package-lock.json")"
npm install --silent --prefer-offline --no-audit --no-fund -D "typescript@$ts_ver" "@types/node@$types_ver" \
  || fail "npm install -D typescript @types/node failed"
npx --no-install tsc --strict --module nodenext --target es2022 example.ts || fail "tsc --strict example.ts failed"
npx --no-install tsc --strict --exactOptionalPropertyTypes --noUncheckedIndexedAccess --noEmit \
  --module nodenext --target es2022 example.ts || fail "tsc --strict --exactOptionalPropertyTypes example.ts failed"
# The scoped form and the public types, with the lib the README names for `await using`.
cat >scoped.ts <<'TS'
import { Client, type Lease, type ErrorCode, TicketingError } from "ticketing-client";
export async function f(c: Client): Promise<bigint> {
  const lease: Lease = await c.acquire("k", { leaseMs: 1000, waitMs: 0 });
  const code: ErrorCode = "BUSY";
  void code;
  {
    await using scoped = await c.acquire("k2", { leaseMs: 1000 });
    void scoped.remainingMs();
  }
  void (new Error() instanceof TicketingError);
  return lease.token;
}
TS
cat >scoped.cts <<'TS'
import { Client } from "ticketing-client";
export const connect: typeof Client.connect = Client.connect;
TS
npx --no-install tsc --strict --noEmit --module nodenext --target es2022 --lib es2022,esnext.disposable \
  scoped.ts scoped.cts || fail "tsc --strict of the scoped form failed"

# A real server on a port from the OS, with a token.
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
"$bin" serve --listen 127.0.0.1:0 --token-file "$tmp/token" 2>"$tmp/server.log" &
server_pid=$!
addr=""
for _ in $(seq 1 300); do
  addr="$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p' "$tmp/server.log" | head -n1)"
  [[ -n "$addr" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log" >&2; fail "the server exited"; }
  sleep 0.1
done
[[ -n "$addr" ]] || fail "the server did not start within 30 s"
export TICKETING_ADDR="$addr"
TICKETING_TOKEN="$(cat "$tmp/token")"
export TICKETING_TOKEN

run() {
  local what="$1"
  shift
  local out
  out="$(timeout 60 "$@" 2>&1)" || { echo "$out" >&2; fail "$what: exit $?"; }
  grep -q '^orders/42 held with fencing token [0-9]\+$' <<<"$out" || { echo "$out" >&2; fail "$what: no lease"; }
  echo "$what: ok"
}
run "README example (ESM)" node example.mjs
run "README example (CommonJS)" node example.cjs
run "README example (tsc --strict)" node example.js

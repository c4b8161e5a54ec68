#!/usr/bin/env bash
# Packs the client with `npm pack`, installs the tarball into a fresh
# project (offline: no run-time dependencies) and imports it as ESM and as
# CommonJS, and type-checks a TypeScript consumer against the bundled .d.ts.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && npm pack --silent --pack-destination "$tmp" >/dev/null)
tgz="$(ls "$tmp"/ticketing-*.tgz)"
echo "packed $(basename "$tgz"): $(tar tzf "$tgz" | wc -l) files"
mkdir "$tmp/app"
cd "$tmp/app"
echo '{"name":"app","version":"1.0.0","private":true}' >package.json
npm install --silent --offline --no-audit --no-fund "$tgz"
cat >esm.mjs <<'JS'
import { Client, Lease, TicketingError, BusyError, VERSION } from "ticketing";
import assert from "node:assert";
assert.equal(typeof Client.connect, "function");
assert.ok(new BusyError("x") instanceof TicketingError);
assert.equal(typeof Lease.prototype[Symbol.asyncDispose], "function");
console.log("ESM import ok", VERSION);
JS
cat >cjs.cjs <<'JS'
const { Client, TicketingError, InvalidError, VERSION } = require("ticketing");
const assert = require("node:assert");
assert.equal(typeof Client.connect, "function");
assert.ok(new InvalidError("x") instanceof TicketingError);
console.log("CJS require ok", VERSION);
JS
node esm.mjs
node cjs.cjs
cat >use.mts <<'TS'
import { Client, type Lease, type ErrorCode } from "ticketing";
export async function f(c: Client): Promise<bigint> {
  const lease: Lease = await c.acquire("k", { leaseMs: 1000, waitMs: 0 });
  const code: ErrorCode = "BUSY";
  void code;
  {
    await using scoped = await c.acquire("k2", { leaseMs: 1000 });
    void scoped.remainingMs();
  }
  return lease.token;
}
TS
cat >use.cts <<'TS'
import { Client } from "ticketing";
export const connect: typeof Client.connect = Client.connect;
TS
node "$here/node_modules/typescript/bin/tsc" --strict --noEmit --module nodenext --moduleResolution nodenext \
  --target es2022 --lib es2022 --types node --typeRoots "$here/node_modules/@types" use.mts use.cts
echo "TypeScript consumer (ESM and CJS) type-checks against the bundled .d.ts"

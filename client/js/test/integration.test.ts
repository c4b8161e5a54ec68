// Against the real server ($TICKETING_BIN serve). What the testkit checks
// for every language (wait 0, FIFO and the queued deadline, lease expiry,
// cancel, 100 in flight: client/testkit, issue 32 P4) is not repeated here;
// these are this client's own: bigint tokens, await using, the lease
// signal, toJSON, the process exit, reconnect.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pathToFileURL } from "node:url";

import { Client } from "../src/index.js";
import { jsRoot, sleep, startServer, type Server } from "./helpers.js";

let srv: Server;
let cl: Client;

before(async () => {
  srv = await startServer();
  cl = await Client.connect({ addrs: [srv.addr] });
});

after(async () => {
  await cl?.close();
  await srv?.stop();
});

test("await using and withLock release on normal and exceptional exit", async () => {
  {
    await using lease = await cl.acquire("it/using", { leaseMs: 10000 });
    assert.ok(lease.token > 0n);
  }
  (await cl.acquire("it/using", { leaseMs: 1000, waitMs: 0 })).release();
  await sleep(50);
  await assert.rejects(
    (async () => {
      await using lease = await cl.acquire("it/using2", { leaseMs: 10000 });
      void lease;
      throw new Error("boom");
    })(),
    /boom/,
  );
  await (await cl.acquire("it/using2", { leaseMs: 1000, waitMs: 0 })).release();

  const v = await cl.withLock(
    "it/with",
    { leaseMs: 10000 },
    async (l) => l.token,
  );
  assert.ok(v > 0n);
  await assert.rejects(
    cl.withLock("it/with", { leaseMs: 10000 }, async () => {
      throw new Error("inside");
    }),
    /inside/,
  );
  await (await cl.acquire("it/with", { leaseMs: 1000, waitMs: 0 })).release();
});

test("the lease signal aborts at the deadline", async () => {
  const l = await cl.acquire("it/signal", { leaseMs: 200 });
  const t0 = performance.now();
  await new Promise((r) =>
    l.signal.addEventListener("abort", r, { once: true }),
  );
  assert.ok(performance.now() - t0 >= 100);
  assert.ok(l.expired);
  const l2 = await cl.acquire("it/signal2", { leaseMs: 5000 });
  const t1 = performance.now();
  const soon = l2.expiringSignal(4800);
  await new Promise((r) => soon.addEventListener("abort", r, { once: true }));
  assert.ok(performance.now() - t1 < 3000);
  assert.ok(!l2.signal.aborted);
  await l2.release();
  assert.ok(l2.signal.aborted);
  assert.ok(l2.expiringSignal(0).aborted);
});

test("JSON.stringify(lease) has the token as an exact decimal string", async () => {
  const l = await cl.acquire("it/json", { leaseMs: 5000 });
  try {
    const j = JSON.parse(JSON.stringify(l)) as Record<string, unknown>;
    assert.equal(j["key"], "it/json");
    assert.equal(j["token"], l.token.toString());
    assert.equal(BigInt(j["token"] as string), l.token);
    assert.ok(l.token > 2n ** 53n);
    assert.equal(j["released"], false);
    assert.equal(typeof j["deadline"], "number");
  } finally {
    await l.release();
  }
  const b = await cl.acquire(Uint8Array.of(0x61, 0x62), { leaseMs: 5000 });
  try {
    assert.equal(JSON.parse(JSON.stringify(b)).keyHex, "6162");
  } finally {
    await b.release();
  }
});

test("a program whose only pending work is awaiting lease.signal runs to the deadline (exit 0, not 13)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "tkjs-exit-"));
  try {
    const script = join(dir, "main.mjs");
    const index = pathToFileURL(join(jsRoot, "build", "src", "index.js"));
    writeFileSync(
      script,
      `import { Client } from ${JSON.stringify(index.href)};
const client = await Client.connect({ addrs: [${JSON.stringify(srv.addr)}] });
const lease = await client.acquire("it/exit13", { leaseMs: 300 });
await new Promise((r) => lease.signal.addEventListener("abort", r, { once: true }));
console.log("lease ended", lease.expired);
await client.close();
`,
    );
    const child = spawn(process.execPath, [script], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => {
      const t = setTimeout(() => child.kill("SIGKILL"), 20000);
      child.once("exit", (c) => {
        clearTimeout(t);
        resolve(c);
      });
    });
    assert.equal(code, 0, out);
    assert.match(out, /lease ended true/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the client survives a server restart on the same port (reconnect)", async () => {
  const s1 = await startServer();
  const c = await Client.connect({ addrs: [s1.addr], connectTimeoutMs: 5000 });
  try {
    await (await c.acquire("it/restart", { leaseMs: 1000 })).release();
    await s1.stop();
    await sleep(100);
    const s2 = await startServer([]).catch(() => undefined);
    // A fresh port: the old client cannot reach it, but it stays usable (CONNECT, not broken).
    await assert.rejects(
      c.acquire("it/restart", { leaseMs: 1000, waitMs: 0 }),
      (e: unknown) =>
        ["CONNECT", "INDETERMINATE"].includes((e as { code: string }).code),
    );
    await s2?.stop();
  } finally {
    await c.close();
  }
});

// The edge rules of issue 31 (docs/architecture.md "Client library
// behaviour") and the protocol 1.1 additions (protocol.md §12) in this
// client's own logic, against scripted fake servers. The testkit runs the
// cross-language scenarios; these pin what only this client decides.
import assert from "node:assert/strict";
import * as net from "node:net";
import { test } from "node:test";

import {
  AuthError,
  Client,
  ClosedError,
  IndeterminateError,
  InsufficientLeaseError,
  InvalidError,
  TlsError,
  UnsupportedError,
} from "../src/index.js";
import { testing } from "../src/client.js";
import * as wire from "../src/wire.js";
import { respond, startFake, until, type FakeOptions } from "./helpers.js";

const { Status, Op } = wire;
const TOKEN = (1700000000000n << 20n) + 7n;

test("R2: a written acquire unanswered past its wait plus the allowance is Indeterminate and withdrawn with C", async () => {
  const fake = await startFake(); // never answers
  const cl = await Client.connect({
    addrs: [fake.addr],
    answerAllowanceMs: 300,
  });
  try {
    const t0 = performance.now();
    await assert.rejects(
      cl.acquire("silent", { leaseMs: 1000, waitMs: 200 }),
      (e: unknown) =>
        e instanceof IndeterminateError &&
        /"silent" at 127\.0\.0\.1:\d+/.test(e.message) &&
        /allowance/.test(e.message),
    );
    const dt = performance.now() - t0;
    assert.ok(dt >= 450 && dt < 4000, `ended after ${dt} ms`);
    await until(
      () => fake.requests.some((r) => r.op === Op.Cancel),
      3000,
      "the C withdrawing it",
    );
    const [a, c] = fake.requests;
    assert.equal(a!.op, Op.Acquire);
    assert.equal(c!.op, Op.Cancel);
    assert.equal(c!.argHi, a!.reqId);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("R4: calls waiting for a connection fail with AUTH as soon as the server refuses the token", async () => {
  const opts: FakeOptions = { token: "s3cret" };
  const fake = await startFake(opts);
  const cl = await Client.connect({
    addrs: [fake.addr],
    token: "s3cret",
  });
  try {
    opts.handshake = "reject-auth"; // the server's token changed
    for (const c of fake.conns) c.sock.destroy();
    await until(
      () => testing.conns(cl).every((c) => c.state === "down"),
      5000,
      "the connections down",
    );
    const t0 = performance.now();
    await assert.rejects(
      cl.acquire("k", { leaseMs: 1000, waitMs: 10000 }),
      (e: unknown) => e instanceof AuthError && /acquire "k"/.test(e.message),
    );
    const dt = performance.now() - t0;
    assert.ok(dt < 5000, `AUTH after ${dt} ms, not after the 10 s wait`);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("R5: REJECT TLS_REQUIRED to a plaintext client is a TLS error at once", async () => {
  const reject = Buffer.alloc(40);
  reject[0] = 0x45;
  reject[1] = wire.Code.TLS_REQUIRED;
  const srv = net.createServer((s) => {
    s.on("error", () => {});
    s.end(reject);
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const addr = `127.0.0.1:${(srv.address() as net.AddressInfo).port}`;
  try {
    const t0 = performance.now();
    await assert.rejects(
      Client.connect({ addrs: [addr], connectTimeoutMs: 8000 }),
      (e: unknown) =>
        e instanceof TlsError &&
        e.protocolCode === wire.Code.TLS_REQUIRED &&
        /requires TLS/.test(e.message),
    );
    assert.ok(performance.now() - t0 < 4000);
  } finally {
    await new Promise<void>((r) => srv.close(() => r()));
  }
});

test("R5: a TLS client against a plaintext server: 'the server does not speak TLS'", async () => {
  const fake = await startFake();
  try {
    const t0 = performance.now();
    await assert.rejects(
      Client.connect({ addrs: [fake.addr], tls: true, connectTimeoutMs: 8000 }),
      (e: unknown) =>
        e instanceof TlsError && /does not speak TLS/.test(e.message),
    );
    assert.ok(performance.now() - t0 < 4000);
  } finally {
    await fake.close();
  }
});

test("R6, R7, R8: second release of a lease is a no-op; a closed client is CLOSED at once; token 0 is refused", async () => {
  const fake = await startFake({
    onRequest: (c, r) =>
      respond(
        c,
        r,
        r.op === Op.Acquire ? Status.Granted : Status.Released,
        r.op === Op.Acquire ? { value: TOKEN } : {},
      ),
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    const l = await cl.acquire("k", { leaseMs: 1000 });
    assert.equal(await l.release(), true);
    assert.equal(await l.release(), false); // R6: already released, no error
    assert.equal(fake.requests.filter((r) => r.op === Op.Release).length, 1);
    await assert.rejects(
      cl.release("k", 0n),
      (e: unknown) => e instanceof InvalidError && /token/.test(e.message),
    );
    await assert.rejects(
      cl.acquire("x".repeat(251), { leaseMs: 1000 }),
      (e: unknown) =>
        e instanceof InvalidError &&
        /1\.\.250 bytes.*\(got 251 bytes\)/.test(e.message),
    );
    const l2 = await cl.acquire("k2", { leaseMs: 1000 });
    const sent = fake.requests.length;
    await cl.close();
    const t0 = performance.now();
    await assert.rejects(l2.release(), ClosedError); // R7: not Indeterminate
    await assert.rejects(cl.release("k2", TOKEN), ClosedError);
    await assert.rejects(cl.acquire("k3", { leaseMs: 1000 }), ClosedError);
    assert.ok(performance.now() - t0 < 1000);
    assert.equal(fake.requests.length, sent);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("R13: tryAcquire resolves null when not acquired; R14: too little lease left is released and InsufficientLease", async () => {
  const fake = await startFake({
    onRequest: (c, r) => {
      const key = r.key.toString();
      if (r.op === Op.Release) return respond(c, r, Status.Released);
      if (key === "held") return respond(c, r, Status.Timeout);
      if (key === "short") {
        // answered 1.2 s after the write: that much of the lease is gone
        setTimeout(() => respond(c, r, Status.Granted, { value: TOKEN }), 1200);
        return;
      }
      respond(c, r, Status.Granted, { value: TOKEN });
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    assert.equal(
      await cl.tryAcquire("held", { leaseMs: 1000, waitMs: 100 }),
      null,
    );
    const l = await cl.tryAcquire("free", { leaseMs: 10000, waitMs: 5000 });
    assert.ok(l !== null && l.token === TOKEN);
    await l.release();
    await assert.rejects(
      cl.acquire("short", {
        leaseMs: 2000,
        waitMs: 5000,
        minRemainingMs: 1000, // about 2000 − 1200 left < 1000
      }),
      (e: unknown) =>
        e instanceof InsufficientLeaseError &&
        e.code === "INSUFFICIENT_LEASE" &&
        /"short"/.test(e.message),
    );
    const rel = fake.requests.filter((r) => r.op === Op.Release);
    assert.equal(rel.at(-1)!.key.toString(), "short");
    assert.equal(rel.at(-1)!.arg, TOKEN);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("1.1: the feature ping, the default label, and key sets only where KEY_SETS is announced", async () => {
  const old = await startFake(); // a 1.0 server: features 0
  const c1 = await Client.connect({ addrs: [old.addr] });
  try {
    await assert.rejects(
      c1.acquireSet(["a", "b"], { leaseMs: 1000 }),
      UnsupportedError,
    );
    assert.equal(old.requests.length, 0); // nothing sent
    assert.ok(old.conns.every((c) => c.label === undefined)); // no L to a 1.0 server
  } finally {
    await c1.close();
    await old.close();
  }
  const fake = await startFake({
    features: wire.Feature.KeySets | wire.Feature.Labels,
    onRequest: (c, r) => {
      if (r.op === Op.AcquireSet && r.argLo === 0)
        respond(c, r, Status.Granted, { value: TOKEN });
      else if (r.op === Op.ReleaseSet) respond(c, r, Status.Released);
      // a set with a wait stays queued (until cancelled)
      else if (r.op === Op.Cancel) respond(c, r, Status.Released);
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr], appName: "billing" });
  try {
    await until(() => fake.conns.every((c) => c.label !== undefined), 3000);
    assert.match(
      fake.conns[0]!.label!,
      /^billing [^/ ]+\/\d+ js\/\d+\.\d+\.\d+$/,
    );
    const l = await cl.acquireSet(["acct/17", "acct/42"], { leaseMs: 30000 });
    assert.deepEqual(l.key, ["acct/17", "acct/42"]);
    const s = fake.requests[0]!;
    assert.equal(s.op, Op.AcquireSet);
    assert.equal(s.keyLen, 2); // count
    assert.equal(
      s.body.toString("hex"),
      "07" +
        Buffer.from("acct/17").toString("hex") +
        "07" +
        Buffer.from("acct/42").toString("hex"),
    );
    assert.equal(await l.release(), true);
    const x = fake.requests[1]!;
    assert.equal(x.op, Op.ReleaseSet);
    assert.equal(x.arg, TOKEN);
    assert.deepEqual(x.body, s.body);
    // A queued set is withdrawn with C naming its first key (§12.2).
    const ac = new AbortController();
    const p = cl.acquireSet(["q/1", "q/2", "q/3"], {
      leaseMs: 1000,
      waitMs: 10000,
      signal: ac.signal,
    });
    await until(() => fake.requests.length === 3, 3000, "the queued S");
    ac.abort();
    await assert.rejects(p, (e: unknown) => (e as Error).name === "AbortError");
    await until(() => fake.requests.length === 4, 3000, "the C");
    const cancel = fake.requests[3]!;
    assert.equal(cancel.op, Op.Cancel);
    assert.equal(cancel.argHi, fake.requests[2]!.reqId);
    assert.equal(cancel.key.toString(), "q/1");
    // Bad sets are refused before sending.
    for (const bad of [
      ["one"],
      ["a", "a"],
      Array(17)
        .fill("k")
        .map((k, i) => k + i),
      ["ok", ""],
    ]) {
      await assert.rejects(cl.acquireSet(bad, { leaseMs: 1000 }), InvalidError);
    }
    assert.equal(fake.requests.length, 4);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("1.1: the label is cut at a character boundary to 64 bytes", () => {
  const l = wire.cutLabel("é".repeat(40)); // 80 bytes
  assert.ok(l.length <= 64);
  assert.equal(l.length, 64);
  assert.ok(l.toString("utf8").isWellFormed());
  assert.equal(wire.cutLabel("a\nb").toString(), "a b");
  assert.equal(wire.cutLabel("x".repeat(63) + "€").length, 63);
});

test("a server that never answers the feature ping is used as a 1.0 server (connected, no L, the process not held)", async () => {
  const fake = await startFake({
    silentPing: true,
    onRequest: (c, r) => respond(c, r, Status.Granted, { value: TOKEN }),
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    const l = await cl.acquire("k", { leaseMs: 1000 });
    assert.equal(l.token, TOKEN);
    assert.ok(fake.conns.every((c) => c.label === undefined));
  } finally {
    await cl.close();
    await fake.close();
  }
});

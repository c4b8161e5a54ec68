// The edge rules of issue 31 (docs/architecture.md "Client library
// behaviour") and the protocol 1.1 additions (protocol.md §12) in this
// client's own logic, against scripted fake servers. The testkit runs the
// cross-language scenarios; these pin what only this client decides.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InvalidError, UnsupportedError } from "../src/index.js";
import * as wire from "../src/wire.js";
import { respond, startFake, until } from "./helpers.js";

const { Status, Op } = wire;
const TOKEN = (1700000000000n << 20n) + 7n;

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

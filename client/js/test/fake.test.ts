// Failure paths against a scripted fake server: only what a real server does
// not produce and no testkit scenario covers (a silent handshake, U answers, N
// after a lost release, DUPLICATE_REQ_ID and unknown statuses, client-side
// max_inflight, unref'ed timers, aborting a release). REJECT, no server, two
// connections, bad input, dropped replies, B, M and its hop limit, cancel and
// its race, release retries, backoff, close and R1 are testkit scenarios run
// against this client's driver (client/testkit, issue 32 P4).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";

import {
  BusyError,
  CancelledError,
  Client,
  ConnectError,
  IndeterminateError,
  InvalidError,
  LockTimeoutError,
  NotHolderError,
} from "../src/index.js";
import * as wire from "../src/wire.js";
import { jsRoot, respond, startFake, until } from "./helpers.js";

const { Status, Op } = wire;
const TOKEN = (1700000000000n << 20n) + 1n;

test("a silent server: CONNECT after the connect timeout", async () => {
  const fake = await startFake({ handshake: "silent" });
  try {
    await assert.rejects(
      Client.connect({ addrs: [fake.addr], connectTimeoutMs: 300 }),
      (e: unknown) => e instanceof ConnectError,
    );
  } finally {
    await fake.close();
  }
});

test("B is returned at once with its code, never retried; E is INVALID with its code", async () => {
  const fake = await startFake({
    onRequest: (c, r) => {
      if (r.key.toString() === "busy")
        respond(c, r, Status.Busy, { code: wire.Code.QUEUE_FULL });
      else
        respond(c, r, Status.Error, {
          code: wire.Code.BAD_LEASE,
          payload: Buffer.from("lease too long"),
        });
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await assert.rejects(
      cl.acquire("busy", { leaseMs: 1000, waitMs: 1000 }),
      (e: unknown) =>
        e instanceof BusyError && e.code === "BUSY" && e.protocolCode === 1,
    );
    assert.equal(fake.requests.length, 1);
    await assert.rejects(
      cl.acquire("err", { leaseMs: 1000, waitMs: 1000 }),
      (e: unknown) =>
        e instanceof InvalidError &&
        e.protocolCode === wire.Code.BAD_LEASE &&
        /lease too long/.test(e.message),
    );
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("U is INDETERMINATE", async () => {
  const fake = await startFake({
    onRequest: (c, r) => respond(c, r, Status.Unknown, { code: 5 }),
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await assert.rejects(
      cl.acquire("k", { leaseMs: 1000, waitMs: 100 }),
      IndeterminateError,
    );
    assert.equal(fake.requests.length, 1);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("a lost release answered N on retry is INDETERMINATE, a plain N is NOT_HOLDER", async () => {
  let n = 0;
  const fake = await startFake({
    onRequest: (c, r) => {
      n++;
      if (r.key.toString() === "lost" && n === 1) c.sock.destroy();
      else respond(c, r, Status.NotHolder);
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await assert.rejects(cl.release("lost", TOKEN), IndeterminateError);
    await assert.rejects(cl.release("plain", TOKEN), NotHolderError);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("duplicate req_id E is ignored; an unknown status kills the connection (PROTOCOL → INDETERMINATE)", async () => {
  const fake = await startFake({
    onRequest: (c, r) => {
      if (r.key.toString() === "dup") {
        respond(c, r, Status.Error, { code: wire.Code.DUPLICATE_REQ_ID });
        respond(c, r, Status.Granted, { value: TOKEN });
      } else {
        const b = wire.encodeResponse({
          status: Status.Granted,
          reqId: r.reqId,
        });
        b[0] = 0x5a;
        c.send(b);
      }
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    const l = await cl.acquire("dup", { leaseMs: 1000 });
    assert.equal(l.token, TOKEN);
    await assert.rejects(
      cl.acquire("bad", { leaseMs: 1000 }),
      IndeterminateError,
    );
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("max_inflight: a queued acquire beyond the limit waits client-side, then TIMEOUT", async () => {
  const fake = await startFake({ maxInflight: 1 }); // never answers
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await until(() => fake.conns.length === 2, 3000, "two connections");
    const p1 = cl.acquire("a", { leaseMs: 1000, waitMs: 5000 });
    const p2 = cl.acquire("b", { leaseMs: 1000, waitMs: 5000 });
    const p3 = cl.acquire("c", { leaseMs: 1000, waitMs: 200 });
    await assert.rejects(p3, LockTimeoutError);
    assert.equal(fake.requests.length, 2);
    await cl.close();
    await Promise.allSettled([p1, p2]);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("timers are unref'ed: a forgotten idle client does not keep the process alive", async () => {
  const fake = await startFake({
    onRequest: (c, r) =>
      respond(c, r, r.op === Op.Acquire ? Status.Granted : Status.Released, {
        value: TOKEN,
      }),
  });
  try {
    const script = `
      import { Client } from ${JSON.stringify(join(jsRoot, "dist", "esm", "index.js"))};
      const c = await Client.connect({ addrs: [${JSON.stringify(fake.addr)}] });
      const l = await c.acquire("k", { leaseMs: 60000 });
      void l.signal;
      await l.release();
      console.log("done");
    `;
    const t0 = performance.now();
    const out = await new Promise<string>((resolve, reject) => {
      const p = spawn(process.execPath, ["--input-type=module", "-e", script], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      let s = "";
      p.stdout.on("data", (d: Buffer) => (s += d.toString()));
      const t = setTimeout(() => {
        p.kill("SIGKILL");
        reject(new Error("child did not exit: the client kept it alive"));
      }, 10000);
      p.on("exit", () => {
        clearTimeout(t);
        resolve(s);
      });
    });
    assert.match(out, /done/);
    assert.ok(performance.now() - t0 < 10000);
  } finally {
    await fake.close();
  }
});

test("aborting a release: INDETERMINATE (cancelled) at once, the attempt goes on in the background", async () => {
  let answered = false;
  const fake = await startFake({
    onRequest: (c, r) => {
      setTimeout(() => {
        respond(c, r, Status.Released);
        answered = true;
      }, 300);
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    const ac = new AbortController();
    const p = cl.release("k", TOKEN, { signal: ac.signal });
    await until(() => fake.requests.length === 1, 3000, "release sent");
    ac.abort();
    await assert.rejects(
      p,
      (e: unknown) =>
        e instanceof IndeterminateError && e.cause instanceof CancelledError,
    );
    await until(() => answered, 3000, "background answer");
    assert.equal(fake.requests.length, 1);
  } finally {
    await cl.close();
    await fake.close();
  }
});

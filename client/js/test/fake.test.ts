// Failure paths against a scripted fake server.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";

import {
  AuthError,
  BusyError,
  CancelledError,
  Client,
  ClosedError,
  ConnectError,
  IndeterminateError,
  InvalidError,
  LockTimeoutError,
  NotHolderError,
  TicketingError,
} from "../src/index.js";
import { testing } from "../src/client.js";
import * as wire from "../src/wire.js";
import { jsRoot, respond, sleep, startFake, until } from "./helpers.js";

const { Status, Op } = wire;
const TOKEN = (1700000000000n << 20n) + 1n;

test("REJECT AUTH_FAILED is AUTH with the protocol code", async () => {
  const fake = await startFake({ token: "s3cret", handshake: "reject-auth" });
  try {
    await assert.rejects(
      Client.connect({
        addrs: [fake.addr],
        token: "wrong",
        connectTimeoutMs: 2000,
      }),
      (e: unknown) =>
        e instanceof AuthError && e.protocolCode === wire.Code.AUTH_FAILED,
    );
  } finally {
    await fake.close();
  }
});

test("no server: CONNECT within the connect timeout", async () => {
  const fake = await startFake();
  const addr = fake.addr;
  await fake.close();
  const t0 = performance.now();
  await assert.rejects(
    Client.connect({ addrs: [addr], connectTimeoutMs: 500 }),
    (e: unknown) => e instanceof ConnectError,
  );
  assert.ok(performance.now() - t0 < 5000);
});

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

test("two connections for a single address; bad arguments fail before sending", async () => {
  const fake = await startFake();
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await until(() => fake.conns.length === 2, 3000, "two connections");
    const bad: [string | Uint8Array, number, number][] = [
      ["", 1000, 0],
      ["x".repeat(251), 1000, 0],
      ["a\nb", 1000, 0],
      ["\ud800", 1000, 0],
      [Uint8Array.of(0xff), 1000, 0],
      ["k", 0, 0],
      ["k", -1, 0],
      ["k", 1000, -1],
      ["k", 2 ** 32, 0],
      ["k", 1000, 2 ** 32],
      ["k", NaN, 0],
    ];
    for (const [key, leaseMs, waitMs] of bad) {
      await assert.rejects(
        cl.acquire(key, { leaseMs, waitMs }),
        InvalidError,
        JSON.stringify([key, leaseMs, waitMs]),
      );
    }
    await assert.rejects(cl.release("", 1n), InvalidError);
    await assert.rejects(cl.release("k", -1n), InvalidError);
    assert.equal(fake.requests.length, 0);
  } finally {
    await cl.close();
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

test("a dropped reply is INDETERMINATE and never retried; the client reconnects", async () => {
  const fake = await startFake({
    onRequest: (c, r) => {
      if (r.op === Op.Acquire && r.key.toString() === "drop") c.sock.destroy();
      else respond(c, r, Status.Granted, { value: TOKEN });
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await assert.rejects(
      cl.acquire("drop", { leaseMs: 1000, waitMs: 2000 }),
      IndeterminateError,
    );
    await sleep(300);
    assert.equal(
      fake.requests.filter((r) => r.key.toString() === "drop").length,
      1,
    );
    const lease = await cl.acquire("ok", { leaseMs: 1000 });
    assert.equal(lease.token, TOKEN);
    await until(() => fake.conns.length >= 3, 3000, "reconnect");
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

test("T is TIMEOUT; G gives the exact u64 token and the queued-aware deadline", async () => {
  const big = (1n << 64n) - 2n;
  const fake = await startFake({
    onRequest: (c, r) => {
      if (r.key.toString() === "t") respond(c, r, Status.Timeout);
      else respond(c, r, Status.Granted, { value: big, queued: 625 });
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await assert.rejects(cl.acquire("t", { leaseMs: 1000 }), LockTimeoutError);
    const t0 = performance.now();
    const lease = await cl.acquire(Uint8Array.of(0x6b), {
      leaseMs: 1000,
      waitMs: 20000,
    });
    assert.equal(lease.token, big);
    // sent + 625×16 ms + 1000 ms
    assert.ok(
      lease.deadline >= t0 + 11000 - 1 &&
        lease.deadline <= performance.now() + 11000 + 1,
    );
    assert.ok(lease.remainingMs() > 10000);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("abort while queued sends C for that req_id; the acquire is CANCELLED", async () => {
  const fake = await startFake({
    onRequest: (c, r) => {
      if (r.op === Op.Cancel) {
        const target = c.requests.find(
          (x) => x.op === Op.Acquire && x.reqId === r.argHi,
        );
        if (target) respond(c, target, Status.Timeout);
        respond(c, r, target ? Status.Released : Status.NotHolder);
      }
      // acquires stay queued
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    const ac = new AbortController();
    const p = cl.acquire("q", {
      leaseMs: 1000,
      waitMs: 10000,
      signal: ac.signal,
    });
    await until(() => fake.requests.length === 1, 3000, "acquire sent");
    ac.abort();
    // The platform's AbortError by name (as fetch), still a TicketingError.
    await assert.rejects(
      p,
      (e: unknown) =>
        e instanceof CancelledError &&
        e instanceof TicketingError &&
        e.name === "AbortError" &&
        e.code === "CANCELLED",
    );
    await until(() => fake.requests.length === 2, 3000, "cancel sent");
    const [a, c] = fake.requests;
    assert.equal(c!.op, Op.Cancel);
    assert.equal(c!.argHi, a!.reqId);
    assert.equal(c!.key.toString(), "q");
    await sleep(100);
    assert.equal(testing.compensations(cl), 0);
    // A signal aborted before the call: nothing is sent.
    await assert.rejects(
      cl.acquire("q", { leaseMs: 1000, signal: AbortSignal.abort() }),
      CancelledError,
    );
    assert.equal(fake.requests.length, 2);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("a grant that wins the race against C is released by the client (compensation)", async () => {
  const fake = await startFake({
    onRequest: (c, r) => {
      if (r.op === Op.Cancel) {
        const target = c.requests.find(
          (x) => x.op === Op.Acquire && x.reqId === r.argHi,
        )!;
        respond(c, target, Status.Granted, { value: TOKEN });
        respond(c, r, Status.NotHolder);
      } else if (r.op === Op.Release) {
        respond(c, r, Status.Released);
      }
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    const ac = new AbortController();
    const p = cl.acquire("race", {
      leaseMs: 1000,
      waitMs: 10000,
      signal: ac.signal,
    });
    await until(() => fake.requests.length === 1, 3000, "acquire sent");
    ac.abort();
    await assert.rejects(p, CancelledError);
    await until(
      () => fake.requests.some((r) => r.op === Op.Release),
      3000,
      "compensating release",
    );
    const rel = fake.requests.find((r) => r.op === Op.Release)!;
    assert.equal(rel.arg, TOKEN);
    assert.equal(rel.key.toString(), "race");
    assert.equal(testing.compensations(cl), 1);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("a release is retried after a lost connection and succeeds only on O", async () => {
  let releases = 0;
  const fake = await startFake({
    onRequest: (c, r) => {
      if (r.op !== Op.Release) return;
      releases++;
      if (releases === 1) c.sock.destroy();
      else respond(c, r, Status.Released);
    },
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await cl.release("k", TOKEN);
    assert.equal(releases, 2);
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

test("an unanswered release gives up after the release window, never success", async () => {
  const fake = await startFake(); // never answers
  const cl = await testing.connect(
    { addrs: [fake.addr] },
    { releaseWindowMs: 400 },
  );
  try {
    const t0 = performance.now();
    await assert.rejects(cl.release("k", TOKEN), IndeterminateError);
    const dt = performance.now() - t0;
    assert.ok(dt >= 350 && dt < 3000, `gave up after ${dt} ms`);
  } finally {
    await cl.close();
    await fake.close();
  }
});

test("M without a leader: hop limit, then NoLeader (CONNECT) within the wait", async () => {
  const fake = await startFake({
    onRequest: (c, r) => respond(c, r, Status.Moved),
  });
  const cl = await Client.connect({ addrs: [fake.addr] });
  try {
    await assert.rejects(
      cl.acquire("m", { leaseMs: 1000, waitMs: 0 }),
      (e: unknown) => e instanceof ConnectError,
    );
    assert.equal(fake.requests.length, 4); // 1 + 3 followed
    const n = fake.requests.length;
    await assert.rejects(
      cl.acquire("m", { leaseMs: 1000, waitMs: 300 }),
      (e: unknown) => e instanceof TicketingError,
    );
    assert.ok(fake.requests.length - n >= 4);
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

test("reconnect backoff: 0.1 s doubling, full jitter within [0, step] (R16), capped", async () => {
  const delays: number[] = [];
  const fake = await startFake({ onConnect: (c) => c.sock.destroy() });
  let cl: Client | undefined;
  const good = await startFake();
  try {
    // Connect through a good server, then watch the other address's reconnects.
    cl = await testing.connect(
      { addrs: [good.addr, fake.addr] },
      {
        onReconnect: (addr, _n, d) => {
          if (addr === fake.addr) delays.push(d);
        },
      },
    );
    await until(() => delays.length >= 5, 8000, "five reconnect attempts");
    const steps = [100, 200, 400, 800, 1600];
    delays.slice(0, 5).forEach((d, i) => {
      assert.ok(d >= 0 && d <= steps[i]!, `delay ${i}: ${d}`);
    });
    // Full jitter: the draws spread over the whole step, the lower half
    // included (with the former [step/2, step] none would fall below).
    const draws = Array.from({ length: 2000 }, () =>
      testing.backoffDelay(cl!, 3),
    );
    assert.ok(draws.every((d) => d >= 0 && d <= 400));
    const low = draws.filter((d) => d < 200).length;
    assert.ok(low > 800 && low < 1200, `${low} of 2000 draws below step/2`);
    const firstBucket = draws.filter((d) => d < 100).length;
    assert.ok(
      firstBucket > 300 && firstBucket < 700,
      `${firstBucket} in [0, 100)`,
    );
  } finally {
    await cl?.close();
    await fake.close();
    await good.close();
  }
});

test("close: pending acquires end CLOSED or INDETERMINATE; later calls CLOSED", async () => {
  const fake = await startFake(); // never answers
  const cl = await Client.connect({ addrs: [fake.addr] });
  const p = cl.acquire("k", { leaseMs: 1000, waitMs: 10000 });
  await until(() => fake.requests.length === 1, 3000, "acquire sent");
  await cl.close();
  await assert.rejects(
    p,
    (e: unknown) =>
      e instanceof IndeterminateError && e.cause instanceof ClosedError,
  );
  await assert.rejects(cl.acquire("k", { leaseMs: 1000 }), ClosedError);
  await cl.close(); // idempotent
  await fake.close();
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

test("R1: the wait bounds the call when no connection is up, not the connect timeout (CONNECT, nothing sent)", async () => {
  const fake = await startFake({
    onRequest: (c, r) => respond(c, r, Status.Granted, { value: TOKEN }),
  });
  const cl = await Client.connect({
    addrs: [fake.addr],
    connectTimeoutMs: 5000,
  });
  try {
    await fake.close(); // every connection drops, reconnects are refused
    await until(
      () => testing.conns(cl).every((c) => c.state === "down"),
      3000,
      "connections down",
    );
    for (const waitMs of [0, 200]) {
      const t0 = performance.now();
      await assert.rejects(
        cl.acquire("k", { leaseMs: 1000, waitMs }),
        (e: unknown) =>
          e instanceof ConnectError && /acquire "k"/.test(e.message),
      );
      const dt = performance.now() - t0;
      // Before R1 each took the whole 5 s connect timeout.
      assert.ok(dt >= waitMs - 5 && dt < 2500, `wait ${waitMs}: ${dt} ms`);
    }
    assert.equal(fake.requests.length, 0);
  } finally {
    await cl.close();
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

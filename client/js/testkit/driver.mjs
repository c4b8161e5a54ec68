// Testkit driver (shared/design/testkit.md): JSON lines on stdin/stdout,
// commands run concurrently, each answered once in completion order.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";

import {
  CancelledError,
  Client,
  ClosedError,
  InvalidError,
  NoLeaderError,
  TicketingError,
  VERSION,
} from "../dist/esm/index.js";

let client = null;
const pendingOps = new Map(); // id -> AbortController of the cancellable commands
const cancellable = [
  "acquire",
  "release",
  "with_lock",
  "acquire_set",
  "release_set",
  "try_acquire",
  "lease_ending",
];
let barrier = Promise.resolve(); // a connect in progress: later commands wait for it
const inflight = new Set();

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const kinds = {
  TIMEOUT: "timeout",
  BUSY: "busy",
  INDETERMINATE: "indeterminate",
  NOT_HOLDER: "not_holder",
  AUTH: "auth",
  TLS: "tls",
  CONNECT: "connect",
  INVALID: "invalid",
  PROTOCOL: "protocol",
  CANCELLED: "cancelled",
  CLOSED: "closed",
  INSUFFICIENT_LEASE: "insufficient_lease",
  UNSUPPORTED: "unsupported",
};

// Leases this driver acquired and holds, by token (release_lease, lease_ending).
const leases = new Map();

/** Whether e or one of its causes is an instance of cls. */
function caused(e, cls) {
  for (let x = e, i = 0; x && i < 8; x = x.cause, i++) {
    if (x instanceof cls) return true;
  }
  return false;
}

function errorResult(id, e) {
  const r = {
    id,
    ok: false,
    error: "internal",
    message: String(e?.message ?? e),
  };
  if (e instanceof TicketingError) {
    r.error = kinds[e.code] ?? "internal";
    if (e.protocolCode !== undefined) r.code = e.protocolCode;
    // As the Go driver: closed and cancelled win over indeterminate.
    if (caused(e, ClosedError)) r.error = "closed";
    else if (caused(e, CancelledError)) r.error = "cancelled";
    else if (e instanceof NoLeaderError) {
      r.error = "busy";
      r.code = 5; // NO_QUORUM: no leader within the hop limit and the wait
    }
  }
  return r;
}

function keyOf(cmd) {
  if (typeof cmd.key_hex === "string") {
    if (!/^([0-9a-fA-F]{2})*$/.test(cmd.key_hex)) {
      throw new InvalidError("key_hex is not hex");
    }
    return Buffer.from(cmd.key_hex, "hex");
  }
  return cmd.key;
}

function tokenOf(cmd) {
  if (typeof cmd.token !== "string" || !/^[0-9]{1,20}$/.test(cmd.token)) {
    throw new InvalidError("token must be a decimal string");
  }
  return BigInt(cmd.token);
}

function held(lease) {
  const token = lease.token.toString();
  leases.set(token, lease);
  return { token, deadline_in_ms: Math.floor(lease.remainingMs()) };
}

function leaseOf(cmd) {
  const lease = leases.get(String(cmd.token));
  if (!lease)
    throw new InvalidError(
      `no lease with token ${cmd.token} acquired by this driver`,
    );
  return lease;
}

function needClient() {
  if (!client) {
    const e = new TicketingError("CLOSED", "no client: connect first");
    throw e;
  }
  return client;
}

function signalOf(cmd) {
  return pendingOps.get(cmd.id)?.signal;
}

async function run(cmd) {
  switch (cmd.cmd) {
    case "connect": {
      if (client) {
        const old = client;
        client = null;
        await old.close();
      }
      let tls = null;
      if (cmd.tls) {
        tls = {};
        if (cmd.tls.ca) tls.ca = readFileSync(cmd.tls.ca);
        if (cmd.tls.cert) tls.cert = readFileSync(cmd.tls.cert);
        if (cmd.tls.key) tls.key = readFileSync(cmd.tls.key);
        if (cmd.tls.server_name) tls.servername = cmd.tls.server_name;
      }
      client = await Client.connect({
        addrs: cmd.addrs,
        token: cmd.token ?? null,
        tls,
        connectTimeoutMs: cmd.connect_timeout_ms ?? undefined,
        answerAllowanceMs: cmd.answer_allowance_ms ?? undefined,
        label: cmd.label ?? undefined,
        logger: {
          warn: (m, f) =>
            process.stderr.write(`warn ${m} ${JSON.stringify(f ?? {})}\n`),
          error: (m, f) =>
            process.stderr.write(`error ${m} ${JSON.stringify(f ?? {})}\n`),
        },
      });
      return {};
    }
    case "acquire": {
      const cl = needClient();
      const lease = await cl.acquire(keyOf(cmd), {
        leaseMs: cmd.lease_ms,
        waitMs: cmd.wait_ms ?? 0,
        signal: signalOf(cmd),
        minRemainingMs: cmd.min_remaining_ms ?? undefined,
      });
      return held(lease);
    }
    case "try_acquire": {
      const cl = needClient();
      const lease = await cl.tryAcquire(keyOf(cmd), {
        leaseMs: cmd.lease_ms,
        waitMs: cmd.wait_ms ?? 0,
        signal: signalOf(cmd),
      });
      if (lease === null) return { acquired: false };
      return { acquired: true, ...held(lease) };
    }
    case "acquire_set": {
      const cl = needClient();
      const lease = await cl.acquireSet(cmd.keys, {
        leaseMs: cmd.lease_ms,
        waitMs: cmd.wait_ms ?? 0,
        signal: signalOf(cmd),
      });
      return held(lease);
    }
    case "release_set": {
      const cl = needClient();
      await cl.releaseSet(cmd.keys, tokenOf(cmd), { signal: signalOf(cmd) });
      return {};
    }
    case "release_lease": {
      const lease = leaseOf(cmd);
      const released = await lease.release({ signal: signalOf(cmd) });
      return { already: !released };
    }
    case "lease_ending": {
      const lease = leaseOf(cmd);
      const s = lease.expiringSignal(cmd.margin_ms ?? 0);
      if (!s.aborted) {
        const cancel = signalOf(cmd);
        await new Promise((resolve, reject) => {
          s.addEventListener("abort", resolve, { once: true });
          cancel?.addEventListener(
            "abort",
            () => reject(new CancelledError("lease_ending cancelled")),
            { once: true },
          );
        });
      }
      return { remaining_ms: Math.floor(lease.remainingMs()) };
    }
    case "release": {
      const cl = needClient();
      await cl.release(keyOf(cmd), tokenOf(cmd), { signal: signalOf(cmd) });
      return {};
    }
    case "with_lock": {
      const cl = needClient();
      let token = null;
      try {
        await cl.withLock(
          keyOf(cmd),
          {
            leaseMs: cmd.lease_ms,
            waitMs: cmd.wait_ms ?? 0,
            signal: signalOf(cmd),
          },
          async (lease) => {
            token = lease.token.toString();
            // The hold ends early when the driver exits (stdin EOF): the
            // scope then unwinds and releases (R10).
            if (cmd.hold_ms)
              await sleep(cmd.hold_ms, undefined, { signal: signalOf(cmd) });
            if (cmd.fail) throw new Error("driver: failing inside with_lock");
          },
        );
      } catch (e) {
        if (token === null || e instanceof TicketingError) throw e;
        // the scope's own error, raised after the lock was released: swallowed
      }
      return { token };
    }
    case "cancel": {
      const ac = pendingOps.get(cmd.target);
      if (ac) ac.abort(new Error("cancelled by the runner"));
      return {};
    }
    case "close": {
      if (client) {
        const old = client;
        client = null;
        await old.close();
      }
      return {};
    }
    case "info":
      return {
        language: "js",
        client_version: VERSION,
        runtime: `node ${process.versions.node}`,
      };
    default:
      throw new Error(`unknown cmd ${JSON.stringify(cmd.cmd)}`);
  }
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on("line", (line) => {
  if (line.trim() === "") return;
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (e) {
    process.stderr.write(`driver: bad line: ${e.message}\n`);
    return;
  }
  let p;
  if (cmd.cmd === "connect") {
    p = barrier.then(() => run(cmd));
    barrier = p.catch(() => {});
  } else {
    if (cancellable.includes(cmd.cmd)) {
      pendingOps.set(cmd.id, new AbortController());
    }
    p =
      cmd.cmd === "cancel" || cmd.cmd === "info"
        ? run(cmd)
        : barrier.then(() => run(cmd));
    p = p.finally(() => pendingOps.delete(cmd.id));
  }
  p = p.then(
    (res) => emit({ id: cmd.id, ok: true, ...res }),
    (e) => emit(errorResult(cmd.id, e)),
  );
  inflight.add(p);
  p.finally(() => inflight.delete(p));
});
rl.on("close", async () => {
  // Program exit (R10): Node runs no asynchronous disposer at exit, so the
  // driver ends its open scopes first (abort, let withLock release), waits
  // for them (bounded), then closes the client.
  for (const ac of pendingOps.values()) ac.abort(new Error("driver exiting"));
  await Promise.race([
    Promise.allSettled([...inflight]),
    sleep(5000, undefined, { ref: false }),
  ]);
  if (client) await client.close();
  process.exit(0);
});

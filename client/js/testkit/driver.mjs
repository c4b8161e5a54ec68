// Testkit driver (shared/design/testkit.md): JSON lines on stdin/stdout,
// commands run concurrently, each answered once in completion order.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";

import { Client, TicketingError, VERSION } from "../dist/esm/index.js";

let client = null;
const pendingAcquires = new Map(); // id -> AbortController
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
};

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
  }
  return r;
}

function keyOf(cmd) {
  if (typeof cmd.key_hex === "string") return Buffer.from(cmd.key_hex, "hex");
  return cmd.key;
}

function needClient() {
  if (!client) {
    const e = new TicketingError("CLOSED", "no client: connect first");
    throw e;
  }
  return client;
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
      const ac = new AbortController();
      pendingAcquires.set(cmd.id, ac);
      try {
        const lease = await cl.acquire(keyOf(cmd), {
          leaseMs: cmd.lease_ms,
          waitMs: cmd.wait_ms ?? 0,
          signal: ac.signal,
        });
        return {
          token: lease.token.toString(),
          deadline_in_ms: Math.floor(lease.remainingMs()),
        };
      } finally {
        pendingAcquires.delete(cmd.id);
      }
    }
    case "release": {
      const cl = needClient();
      await cl.release(keyOf(cmd), BigInt(cmd.token));
      return {};
    }
    case "with_lock": {
      const cl = needClient();
      let token = null;
      try {
        await cl.withLock(
          keyOf(cmd),
          { leaseMs: cmd.lease_ms, waitMs: cmd.wait_ms ?? 0 },
          async (lease) => {
            token = lease.token.toString();
            if (cmd.hold_ms) await sleep(cmd.hold_ms);
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
      const ac = pendingAcquires.get(cmd.target);
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
  const p = run(cmd).then(
    (res) => emit({ id: cmd.id, ok: true, ...res }),
    (e) => emit(errorResult(cmd.id, e)),
  );
  inflight.add(p);
  p.finally(() => inflight.delete(p));
});
rl.on("close", async () => {
  if (client) await client.close();
  await Promise.allSettled([...inflight]);
  process.exit(0);
});

import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as wire from "../src/wire.js";

/** client/js (tests run from build/test). */
export const jsRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const goldenDir = join(jsRoot, "..", "wire", "testdata", "golden");

export function readGolden(name: string): Buffer {
  const text = readFileSync(join(goldenDir, name), "utf8");
  const hex = text
    .split("\n")
    .map((l) => l.replace(/#.*$/, ""))
    .join("")
    .replace(/\s+/g, "");
  return Buffer.from(hex, "hex");
}

export const sleep = (ms: number): Promise<void> =>
  new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------
// The real server

export interface Server {
  addr: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

export async function startServer(args: string[] = []): Promise<Server> {
  const bin = process.env["TICKETING_BIN"];
  if (!bin) throw new Error("TICKETING_BIN is not set");
  const proc = spawn(bin, ["serve", "--listen", "127.0.0.1:0", ...args], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  const addr = await new Promise<string>((resolve, reject) => {
    let log = "";
    const t = setTimeout(
      () => reject(new Error(`server did not start: ${log}`)),
      10000,
    );
    proc.stderr!.on("data", (d: Buffer) => {
      log += d.toString();
      const m = /msg=serving addr=(\S+)/.exec(log);
      if (m) {
        clearTimeout(t);
        resolve(m[1]!);
      }
    });
    proc.once("exit", (code) => {
      clearTimeout(t);
      reject(new Error(`server exited ${code}: ${log}`));
    });
  });
  proc.stderr!.resume();
  return {
    addr,
    proc,
    stop: () =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null)
          return resolve();
        proc.once("exit", () => resolve());
        proc.kill("SIGKILL");
      }),
  };
}

export function tokenFile(token: string): { path: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), "tkjs-"));
  const path = join(dir, "token");
  writeFileSync(path, token);
  return { path, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

// ---------------------------------------------------------------------------
// A scripted fake server

export interface FakeConn {
  sock: net.Socket;
  index: number;
  requests: wire.Request[];
  label: string | undefined;
  send(b: Buffer): void;
}

export interface FakeOptions {
  token?: string;
  /** What to answer to a handshake: default accept with max_inflight 1024. */
  handshake?: "accept" | "reject-auth" | "bad-proof" | "silent";
  maxInflight?: number;
  /**
   * The feature bits the fake announces in its answer to the feature ping
   * (§12.1); default 0 (a 1.0 server: plain pong). The ping and `L` are
   * answered by the fake itself and kept out of `requests` (labels are in
   * `labels`).
   */
  features?: number;
  /** Never answer the feature ping (a server that goes silent after WELCOME). */
  silentPing?: boolean;
  /** Called for each request; may answer via conn.send. */
  onRequest?: (conn: FakeConn, req: wire.Request) => void;
  onConnect?: (conn: FakeConn) => void;
}

export interface Fake {
  addr: string;
  conns: FakeConn[];
  requests: wire.Request[];
  connectTimes: number[];
  close(): Promise<void>;
}

export async function startFake(opts: FakeOptions = {}): Promise<Fake> {
  const token = Buffer.from(opts.token ?? "", "utf8");
  const conns: FakeConn[] = [];
  const all: wire.Request[] = [];
  const connectTimes: number[] = [];
  const sockets = new Set<net.Socket>();
  const srv = net.createServer((sock) => {
    sockets.add(sock);
    sock.on("close", () => sockets.delete(sock));
    sock.on("error", () => {});
    connectTimes.push(performance.now());
    const fc: FakeConn = {
      sock,
      index: conns.length,
      requests: [],
      label: undefined,
      send: (b) => {
        if (!sock.destroyed) sock.write(b);
      },
    };
    conns.push(fc);
    opts.onConnect?.(fc);
    const nonce = randomBytes(32);
    sock.write(wire.encodeHello({ flags: token.length > 0 ? 1 : 0, nonce }));
    let buf: Buffer = Buffer.alloc(0);
    let authed = false;
    sock.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (!authed) {
        if (buf.length < wire.AUTH_LEN) return;
        let a: wire.Auth;
        try {
          a = wire.decodeAuth(buf.subarray(0, wire.AUTH_LEN));
        } catch {
          sock.destroy(); // not an AUTH (e.g. a TLS ClientHello)
          return;
        }
        buf = buf.subarray(wire.AUTH_LEN);
        authed = true;
        const mode = opts.handshake ?? "accept";
        if (mode === "silent") return;
        if (mode === "reject-auth") {
          sock.end(
            wire.encodeWelcome({
              status: wire.WELCOME_REJECTED,
              code: wire.Code.AUTH_FAILED,
              maxInflight: 0,
              proof: Buffer.alloc(32),
            }),
          );
          return;
        }
        const proof =
          mode === "bad-proof"
            ? randomBytes(32)
            : wire.serverProof(token, a.role, a.nonce, nonce);
        sock.write(
          wire.encodeWelcome({
            status: wire.WELCOME_ACCEPTED,
            code: 0,
            maxInflight: opts.maxInflight ?? 1024,
            proof,
          }),
        );
      }
      for (;;) {
        const r = wire.decodeRequest(buf);
        if (r === null) break;
        buf = buf.subarray(r.size);
        if (r.req.op === wire.Op.Ping && r.req.arg === wire.PING_FEATURES) {
          if (!opts.silentPing) {
            fc.send(
              wire.encodeResponse({
                status: wire.Status.Pong,
                reqId: r.req.reqId,
                queued: opts.features ?? 0,
              }),
            );
          }
          continue;
        }
        if (r.req.op === wire.Op.Label) {
          fc.label = r.req.key.toString("utf8");
          fc.send(
            wire.encodeResponse({
              status: wire.Status.Released,
              reqId: r.req.reqId,
            }),
          );
          continue;
        }
        fc.requests.push(r.req);
        all.push(r.req);
        opts.onRequest?.(fc, r.req);
      }
    });
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const port = (srv.address() as net.AddressInfo).port;
  return {
    addr: `127.0.0.1:${port}`,
    conns,
    requests: all,
    connectTimes,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        srv.close(() => resolve());
      }),
  };
}

export function respond(
  conn: FakeConn,
  req: wire.Request,
  status: number,
  extra: {
    code?: number;
    value?: bigint;
    queued?: number;
    payload?: Buffer;
  } = {},
): void {
  conn.send(wire.encodeResponse({ status, reqId: req.reqId, ...extra }));
}

/** Waits until cond() holds (polling), or fails after ms. */
export async function until(
  cond: () => boolean,
  ms = 5000,
  what = "condition",
): Promise<void> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end)
      throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

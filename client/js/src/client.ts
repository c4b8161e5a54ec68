// The client state machine, a port of the Go client (client/*.go):
// a connection actor per address (two for a single address), a picker
// (known leader first, then round robin), pipelining matched by req_id,
// reconnect backoff 0.1 s doubling to 3.2 s forever, acquire retried only
// when never written or answered M, cancel with C plus compensation, and
// releases retried for at most 5 s.

import { randomBytes } from "node:crypto";
import * as net from "node:net";
import * as tls from "node:tls";
import { performance } from "node:perf_hooks";

import {
  AuthError,
  BusyError,
  CancelledError,
  ClosedError,
  ConnectError,
  IndeterminateError,
  InvalidError,
  LockTimeoutError,
  NoLeaderError,
  NotHolderError,
  ProtocolError,
  TicketingError,
  TlsError,
} from "./errors.js";
import {
  Code,
  HELLO_FLAG_TOKENS,
  HELLO_LEN,
  Op,
  QUEUED_UNIT_MS,
  ResponseDecoder,
  Role,
  Status,
  WELCOME_ACCEPTED,
  WELCOME_LEN,
  WireError,
  clientProof,
  codeName,
  decodeHello,
  decodeWelcome,
  encodeAcquire,
  encodeAuth,
  encodeCancel,
  encodeRelease,
  proofEqual,
  serverProof,
  validKey,
  type Response,
} from "./wire.js";
import { Lease } from "./lease.js";

export const VERSION = "0.1.0";

const U32_MAX = 0xffffffff;
const DEFAULT_CONNECT_TIMEOUT_MS = 5000;
const BACKOFF_BASE_MS = 100;
const BACKOFF_CAP_MS = 3200;
const REDIRECT_BACKOFF_BASE_MS = 25;
const REDIRECT_BACKOFF_CAP_MS = 200;
const RELEASE_WINDOW_MS = 5000;
const RELEASE_QUEUE_LEN = 4096;
const MAX_MOVES = 3;
const MAX_EXTRA_ENDPOINTS = 32;
const MAX_WRITE_BUFFER = 4 << 20;

/** Where the client reports connection events; default: nowhere. Never given a token. */
export interface Logger {
  debug?(msg: string, fields?: Record<string, unknown>): void;
  info?(msg: string, fields?: Record<string, unknown>): void;
  warn?(msg: string, fields?: Record<string, unknown>): void;
  error?(msg: string, fields?: Record<string, unknown>): void;
}

export interface ConnectOptions {
  /** Server addresses `host:port`; for a cluster any subset of its nodes. */
  addrs: readonly string[];
  /** The client token; empty/absent for a server without tokens. */
  token?: string | null;
  /**
   * TLS (1.2 or later): `true` for the system CAs, or node:tls options
   * (`ca`, `cert`, `key`, `servername`, …). Absent/false: plain TCP.
   */
  tls?: boolean | tls.ConnectionOptions | null;
  /**
   * Bounds one connection attempt (TCP, TLS and handshake), how long
   * connect() waits for the first connection, and how long an operation
   * waits for a connection when none is up. Default 5000.
   */
  connectTimeoutMs?: number;
  logger?: Logger;
  /** @internal test hooks */
  _test?: {
    backoffBaseMs?: number;
    backoffCapMs?: number;
    releaseWindowMs?: number;
    onReconnect?: (addr: string, attempt: number, delayMs: number) => void;
  };
}

export interface AcquireOptions {
  /** Lease in ms (1..2^32−1, rounded up to whole ms). */
  leaseMs: number;
  /** Longest wait in the key's queue in ms; 0 (the default) = try once. */
  waitMs?: number;
  /** Aborting withdraws the acquire (`C`); a grant that won the race is released. */
  signal?: AbortSignal;
}

export interface ReleaseOptions {
  /** Stop waiting; the release goes on in the background (≤ 5 s). */
  signal?: AbortSignal;
}

type Owner = "caller" | "abandoned" | "releaser" | "dropped";
type Fail = "none" | "unsent" | "lost";
type EnqResult = "ok" | "down" | "full";

/** One request in flight on a connection. */
interface Call {
  op: number;
  key: Uint8Array;
  keyText: string | Uint8Array;
  leaseMs: number;
  waitMs: number;
  token: bigint;
  target: number;
  counts: boolean;

  conn: Conn | undefined;
  reqId: number;
  written: boolean;
  sent: number;
  pending: boolean;
  owner: Owner;

  status: number;
  code: number;
  queued: number;
  value: bigint;
  payload: Buffer | undefined;
  fail: Fail;
  failErr: unknown;
  onDone: (() => void) | undefined;
}

function newCall(
  op: number,
  key: Uint8Array,
  keyText: string | Uint8Array,
): Call {
  return {
    op,
    key,
    keyText,
    leaseMs: 0,
    waitMs: 0,
    token: 0n,
    target: 0,
    counts: false,
    conn: undefined,
    reqId: 0,
    written: false,
    sent: 0,
    pending: false,
    owner: "caller",
    status: 0,
    code: 0,
    queued: 0,
    value: 0n,
    payload: undefined,
    fail: "none",
    failErr: undefined,
    onDone: undefined,
  };
}

/** Whether st is a possible answer to op (§3); anything else is a violation. */
function fits(op: number, st: number): boolean {
  if (st === Status.Error) return true;
  switch (op) {
    case Op.Acquire:
      return (
        st === Status.Granted ||
        st === Status.Timeout ||
        st === Status.Busy ||
        st === Status.Moved ||
        st === Status.Unknown
      );
    case Op.Release:
    case Op.Cancel:
      return (
        st === Status.Released ||
        st === Status.NotHolder ||
        st === Status.Moved ||
        st === Status.Unknown
      );
    case Op.Ping:
      return st === Status.Pong;
    case Op.Query:
      return st === Status.Admin || st === Status.Moved;
  }
  return false;
}

// ---------------------------------------------------------------------------
// Small helpers

class Notifier {
  private waiters = new Set<() => void>();
  add(f: () => void): () => void {
    this.waiters.add(f);
    return () => this.waiters.delete(f);
  }
  broadcast(): void {
    if (this.waiters.size === 0) return;
    const w = this.waiters;
    this.waiters = new Set();
    for (const f of w) f();
  }
}

type WaitResult = "event" | "timeout" | "abort";

/** Waits for a broadcast of n, ms, or signal's abort; ref=false: do not keep the process alive. */
function waitEvent(
  n: Notifier | undefined,
  ms: number,
  signal: AbortSignal | undefined,
  ref: boolean,
): Promise<WaitResult> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (r: WaitResult): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      remove?.();
      signal?.removeEventListener("abort", onAbort);
      resolve(r);
    };
    const onAbort = (): void => finish("abort");
    const timer = setTimeout(() => finish("timeout"), Math.max(0, ms));
    if (!ref) timer.unref();
    const remove = n?.add(() => finish("event"));
    if (signal) {
      if (signal.aborted) {
        finish("abort");
        return;
      }
      signal.addEventListener("abort", onAbort, { once: true });
    }
  });
}

function backoffStep(base: number, cap: number, n: number): number {
  let d = base;
  for (let i = 1; i < n && d < cap; i++) d *= 2;
  return Math.min(d, cap);
}

/** Uniform in [step/2, step]. */
function jitter(step: number): number {
  if (step <= 1) return step;
  const half = step / 2;
  return half + Math.random() * (step - half);
}

export function splitHostPort(addr: string): [string, number] | null {
  let host: string;
  let portText: string;
  if (addr.startsWith("[")) {
    const end = addr.indexOf("]");
    if (end < 0 || addr[end + 1] !== ":") return null;
    host = addr.slice(1, end);
    portText = addr.slice(end + 2);
  } else {
    const i = addr.lastIndexOf(":");
    if (i < 0) return null;
    host = addr.slice(0, i);
    portText = addr.slice(i + 1);
    if (host.includes(":")) return null;
  }
  if (!/^[0-9]{1,5}$/.test(portText)) return null;
  const port = Number(portText);
  if (port > 65535) return null;
  return [host, port];
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A UTF-8 key from a string or bytes, checked as the server would (§2.1). */
export function keyBytes(key: string | Uint8Array): Uint8Array {
  let b: Uint8Array;
  if (typeof key === "string") {
    if (!key.isWellFormed()) {
      throw new InvalidError(
        "key is not well-formed Unicode (lone surrogate)",
        { key },
      );
    }
    b = Buffer.from(key, "utf8");
  } else if (key instanceof Uint8Array) {
    b = Uint8Array.from(key);
  } else {
    throw new InvalidError("key must be a string or a Uint8Array");
  }
  if (!validKey(b)) {
    throw new InvalidError(
      "key must be 1..250 bytes of UTF-8 without control characters",
      { key },
    );
  }
  return b;
}

function durationMs(
  name: string,
  v: unknown,
  min: number,
  key: string | Uint8Array,
): number {
  if (typeof v !== "number" || Number.isNaN(v)) {
    throw new InvalidError(`${name} must be a number of milliseconds`, { key });
  }
  const ms = Math.ceil(v);
  if (ms < min || ms > U32_MAX) {
    throw new InvalidError(`${name} ${v} must be ${min}..${U32_MAX} ms`, {
      key,
    });
  }
  return ms;
}

function keyLabel(key: string | Uint8Array): string {
  return typeof key === "string"
    ? JSON.stringify(key)
    : `0x${Buffer.from(key).toString("hex")}`;
}

// ---------------------------------------------------------------------------
// Connection actor

type ConnState = "down" | "up";

class Conn {
  state: ConnState = "down";
  sock: net.Socket | undefined;
  everUp = false;
  failures = 0;
  maxInflight = 1;
  inflight = 0;
  readonly pending = new Map<number, Call>();
  private nextId = 0;
  private outFrames: Buffer[] = [];
  private outCalls: Call[] = [];
  private flushScheduled = false;
  private decoder = new ResponseDecoder();
  private reffed = true;
  private attempt = 0;
  private timer: NodeJS.Timeout | undefined;
  private dialing: net.Socket | undefined;

  constructor(
    readonly cl: Client,
    readonly addr: string,
    private readonly tlsOpts: tls.ConnectionOptions | undefined,
  ) {}

  start(): void {
    this.dial();
  }

  private scheduleReconnect(): void {
    if (this.cl.closed) return;
    const d = this.cl.backoffDelay(this.attempt);
    this.cl.hooks?.onReconnect?.(this.addr, this.attempt, d);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.dial();
    }, d);
    this.timer.unref();
  }

  private dial(): void {
    const cl = this.cl;
    if (cl.closed) return;
    const hp = splitHostPort(this.addr)!;
    const [host, port] = hp;
    let phase: "tcp" | "tls" | "hello" | "welcome" = "tcp";
    let settled = false;
    let sock: net.Socket;
    const fail = (err: unknown): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      this.dialing = undefined;
      if (cl.closed) return;
      this.failed(err);
      this.attempt++;
      this.scheduleReconnect();
    };
    const timer = setTimeout(
      () =>
        fail(
          new ConnectError(
            `connecting to ${this.addr}: no handshake within ${cl.connectTimeoutMs} ms`,
          ),
        ),
      cl.connectTimeoutMs,
    );
    timer.unref();
    if (this.tlsOpts) {
      const o: tls.ConnectionOptions = {
        minVersion: "TLSv1.2",
        ...this.tlsOpts,
        host,
        port,
      };
      const sn = this.tlsOpts.servername;
      if (sn === undefined || sn === "") {
        delete o.servername;
        if (net.isIP(host) === 0) o.servername = host;
      } else if (net.isIP(sn) !== 0) {
        // An IP cannot be an SNI name: verify the certificate against it.
        delete o.servername;
        o.checkServerIdentity = (_h, cert) => tls.checkServerIdentity(sn, cert);
      }
      sock = tls.connect(o);
      sock.once("connect", () => {
        phase = "tls";
      });
      sock.once("secureConnect", () => {
        phase = "hello";
      });
    } else {
      sock = net.connect({ host, port });
      sock.once("connect", () => {
        phase = "hello";
      });
    }
    this.dialing = sock;
    sock.unref();
    sock.on("error", (e: NodeJS.ErrnoException) => {
      const code = typeof e.code === "string" ? e.code : "";
      const tlsLike =
        this.tlsOpts !== undefined &&
        (phase === "tls" ||
          code.startsWith("ERR_SSL") ||
          code.startsWith("ERR_TLS") ||
          /CERT|SIGNATURE|SELF_SIGNED|ISSUER/.test(code));
      if (tlsLike) {
        fail(new TlsError(`TLS with ${this.addr}: ${e.message}`, { cause: e }));
      } else {
        fail(
          new ConnectError(`connecting to ${this.addr}: ${e.message}`, {
            cause: e,
          }),
        );
      }
    });
    sock.on("close", () =>
      fail(
        new ConnectError(
          `connecting to ${this.addr}: connection closed during the handshake`,
        ),
      ),
    );
    let hbuf: Buffer = Buffer.alloc(0);
    let clientNonce: Buffer | undefined;
    let serverNonce: Buffer | undefined;
    let tokensConfigured = false;
    const onData = (chunk: Buffer): void => {
      if (settled) return;
      hbuf = hbuf.length === 0 ? chunk : Buffer.concat([hbuf, chunk]);
      try {
        if (clientNonce === undefined && hbuf.length >= HELLO_LEN) {
          const h = decodeHello(hbuf.subarray(0, HELLO_LEN));
          hbuf = hbuf.subarray(HELLO_LEN);
          serverNonce = h.nonce;
          tokensConfigured = (h.flags & HELLO_FLAG_TOKENS) !== 0;
          clientNonce = randomBytes(32);
          const proof = clientProof(
            cl.token,
            Role.Client,
            h.nonce,
            clientNonce,
          );
          sock.write(
            encodeAuth({ role: Role.Client, nonce: clientNonce, proof }),
          );
          phase = "welcome";
        }
        if (clientNonce !== undefined && hbuf.length >= WELCOME_LEN) {
          const w = decodeWelcome(hbuf.subarray(0, WELCOME_LEN));
          const rest = hbuf.subarray(WELCOME_LEN);
          if (w.status !== WELCOME_ACCEPTED) {
            const name = codeName(w.code);
            if (w.code === Code.AUTH_FAILED || w.code === Code.BAD_HANDSHAKE) {
              const hint =
                w.code === Code.AUTH_FAILED &&
                cl.token.length === 0 &&
                tokensConfigured
                  ? " (the server requires a token and none is configured)"
                  : "";
              fail(
                new AuthError(
                  `${this.addr} rejected the handshake (${name})${hint}`,
                  {
                    protocolCode: w.code,
                  },
                ),
              );
            } else if (
              w.code === Code.OVERLOADED ||
              w.code === Code.SHUTTING_DOWN
            ) {
              fail(
                new BusyError(
                  `${this.addr} rejected the connection (${name})`,
                  {
                    protocolCode: w.code,
                  },
                ),
              );
            } else {
              fail(
                new ProtocolError(
                  `${this.addr} rejected the handshake (${name})`,
                  {
                    protocolCode: w.code,
                  },
                ),
              );
            }
            return;
          }
          if (cl.token.length > 0) {
            const want = serverProof(
              cl.token,
              Role.Client,
              clientNonce,
              serverNonce!,
            );
            if (!proofEqual(want, w.proof)) {
              fail(
                new AuthError(
                  `${this.addr} did not prove the token (an impostor, or a server without this token)`,
                ),
              );
              return;
            }
          }
          settled = true;
          clearTimeout(timer);
          this.dialing = undefined;
          sock.removeAllListeners("data");
          sock.removeAllListeners("error");
          sock.removeAllListeners("close");
          if (cl.closed) {
            sock.destroy();
            return;
          }
          this.up(sock, w.maxInflight, rest);
        }
      } catch (e) {
        fail(new ProtocolError(`${this.addr}: ${describe(e)}`, { cause: e }));
      }
    };
    sock.on("data", onData);
  }

  private failed(err: unknown): void {
    this.failures++;
    const cl = this.cl;
    cl.lastErr = err;
    const fields = {
      addr: this.addr,
      attempt: this.failures,
      err: describe(err),
    };
    if (err instanceof AuthError)
      cl.log.error?.("ticketing: connect failed", fields);
    else if (this.failures === 1)
      cl.log.warn?.("ticketing: connect failed", fields);
    else cl.log.debug?.("ticketing: connect failed", fields);
    cl.notify.broadcast();
  }

  private up(sock: net.Socket, maxInflight: number, rest: Buffer): void {
    this.state = "up";
    this.sock = sock;
    this.everUp = true;
    this.failures = 0;
    this.attempt = 0;
    this.maxInflight = Math.max(1, Math.min(maxInflight, 1 << 30));
    this.inflight = 0;
    this.nextId = 0;
    this.outFrames = [];
    this.outCalls = [];
    this.decoder = new ResponseDecoder();
    this.reffed = false;
    sock.unref();
    sock.setNoDelay(true);
    sock.setKeepAlive(true, 15000);
    sock.on("data", (chunk: Buffer) => this.onData(sock, chunk));
    // Senders wait while the write buffer is over its bound (enqueue "down").
    sock.on("drain", () => this.cl.notify.broadcast());
    sock.on("error", (e) =>
      this.kill(
        sock,
        new ConnectError(`connection to ${this.addr} lost: ${e.message}`, {
          cause: e,
        }),
      ),
    );
    sock.on("close", () =>
      this.kill(sock, new ConnectError(`connection to ${this.addr} closed`)),
    );
    this.cl.log.info?.("ticketing: connected", {
      addr: this.addr,
      max_inflight: maxInflight,
    });
    if (rest.length > 0) this.onData(sock, rest);
    this.cl.notify.broadcast();
  }

  private updateRef(): void {
    const want = this.pending.size > 0;
    if (want !== this.reffed && this.sock) {
      this.reffed = want;
      if (want) this.sock.ref();
      else this.sock.unref();
    }
  }

  enqueue(c: Call): EnqResult {
    if (this.state !== "up" || this.sock!.writableLength > MAX_WRITE_BUFFER)
      return "down";
    if (c.counts && this.inflight >= this.maxInflight) return "full";
    this.enqueueLocked(c);
    return "ok";
  }

  private allocId(): number {
    for (;;) {
      this.nextId = (this.nextId + 1) >>> 0;
      if (this.nextId === 0) continue;
      if (!this.pending.has(this.nextId)) return this.nextId;
    }
  }

  private enqueueLocked(c: Call): void {
    const id = this.allocId();
    c.conn = this;
    c.reqId = id;
    c.pending = true;
    c.written = false;
    this.pending.set(id, c);
    if (c.counts) this.inflight++;
    let frame: Buffer;
    switch (c.op) {
      case Op.Acquire:
        c.sent = performance.now(); // t_send (§5): before the frame can be written
        frame = encodeAcquire(id, c.key, c.leaseMs, c.waitMs);
        break;
      case Op.Release:
        frame = encodeRelease(id, c.key, c.token);
        break;
      default:
        frame = encodeCancel(id, c.key, c.target);
        break;
    }
    this.outFrames.push(frame);
    this.outCalls.push(c);
    this.updateRef();
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.flushScheduled = false;
    const sock = this.sock;
    if (this.state !== "up" || !sock || this.outFrames.length === 0) return;
    const frames = this.outFrames;
    const calls = this.outCalls;
    this.outFrames = [];
    this.outCalls = [];
    for (const c of calls) c.written = true;
    sock.write(frames.length === 1 ? frames[0]! : Buffer.concat(frames));
  }

  /**
   * The caller gave up on c: leave it to the reader (a grant is
   * compensated) and withdraw a queued acquire with C. False when c was
   * already answered.
   */
  abandon(c: Call): boolean {
    if (!c.pending) return false;
    c.owner = "abandoned";
    if (c.op === Op.Acquire && c.counts) {
      const cc = newCall(Op.Cancel, c.key, c.keyText);
      cc.target = c.reqId;
      cc.owner = "dropped";
      this.enqueueLocked(cc);
    }
    return true;
  }

  private onData(sock: net.Socket, chunk: Buffer): void {
    if (this.sock !== sock) return;
    const resps: Response[] = [];
    let perr: unknown;
    try {
      this.decoder.push(chunk, resps);
    } catch (e) {
      perr = e;
    }
    const done: Call[] = [];
    let freed = false;
    let unknown = 0;
    for (const r of resps) {
      const c = this.pending.get(r.reqId);
      if (!c) {
        unknown++;
        continue;
      }
      if (r.status === Status.Error && r.code === Code.DUPLICATE_REQ_ID) {
        unknown++; // never complete an outstanding request with a code-25 E (§2.1)
        continue;
      }
      if (!fits(c.op, r.status)) {
        perr = new WireError(
          `${String.fromCharCode(c.op)} answered with ${String.fromCharCode(r.status)}`,
        );
        break;
      }
      this.pending.delete(r.reqId);
      c.pending = false;
      if (c.counts) {
        this.inflight--;
        freed = true;
      }
      c.status = r.status;
      c.code = r.code;
      c.queued = r.queued;
      c.value = r.value;
      c.payload = r.payload;
      done.push(c);
    }
    if (unknown > 0) {
      this.cl.log.warn?.("ticketing: unexpected responses ignored", {
        addr: this.addr,
        count: unknown,
      });
    }
    for (const c of done) this.cl.complete(c);
    if (perr !== undefined) {
      this.kill(
        sock,
        new ProtocolError(
          `protocol violation by ${this.addr}: ${describe(perr)}`,
          { cause: perr },
        ),
      );
      return;
    }
    this.updateRef();
    if (freed) this.cl.notify.broadcast();
  }

  /** Takes sock down (once) and completes every pending call as unsent or lost. */
  kill(sock: net.Socket, cause: unknown): void {
    if (this.sock !== sock || this.state !== "up") return;
    this.state = "down";
    this.sock = undefined;
    const calls = [...this.pending.values()];
    this.pending.clear();
    for (const c of calls) {
      c.pending = false;
      c.fail = c.written ? "lost" : "unsent";
      c.failErr = cause;
    }
    this.inflight = 0;
    this.outFrames = [];
    this.outCalls = [];
    sock.destroy();
    const cl = this.cl;
    if (!(cause instanceof ClosedError)) {
      cl.lastErr = cause;
      cl.log.warn?.("ticketing: connection lost", {
        addr: this.addr,
        pending: calls.length,
        err: describe(cause),
      });
    }
    for (const c of calls) cl.complete(c);
    cl.notify.broadcast();
    if (!cl.closed) {
      this.attempt = 1;
      this.scheduleReconnect();
    }
  }

  shutdown(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.dialing?.destroy();
    this.dialing = undefined;
    if (this.sock) this.kill(this.sock, new ClosedError("client closed"));
  }

  connecting(): boolean {
    return this.state === "down" && !this.everUp && this.failures === 0;
  }
}

interface Endpoint {
  addr: string;
  conns: Conn[];
}

class NoSlot extends Error {}

interface RelState {
  key: Uint8Array;
  keyText: string | Uint8Array;
  token: bigint;
  deadline: number;
  maybe: boolean;
  moves: number;
  retries: number;
  woken: { v: boolean };
  ref: boolean;
  cause: unknown;
}

// ---------------------------------------------------------------------------
// Client

/**
 * A connection pool to one Ticketing server or cluster; one per process.
 * Every method may be called concurrently: calls share the connections and
 * pipeline. Create with `Client.connect`, end with `close()`.
 */
export class Client {
  /** @internal */ readonly token: Buffer;
  /** @internal */ readonly connectTimeoutMs: number;
  /** @internal */ readonly log: Logger;
  /** @internal */ readonly hooks: ConnectOptions["_test"];
  /** @internal */ closed = false;
  /** @internal */ lastErr: unknown;
  /** @internal */ readonly notify = new Notifier();
  private readonly newLeader = new Notifier();
  private endpoints: Endpoint[] = [];
  private conns: Conn[] = [];
  private byAddr = new Map<string, Endpoint>();
  private extra = 0;
  private leader: Endpoint | undefined;
  private rr = 0;
  private readonly tlsOpts: tls.ConnectionOptions | undefined;
  private readonly backoffBase: number;
  private readonly backoffCap: number;
  private readonly releaseWindow: number;
  private background = 0;
  /** Grants released because their acquire was abandoned (for tests and metrics). */
  compensations = 0;

  private constructor(opts: ConnectOptions, addrs: string[]) {
    this.token = Buffer.from(opts.token ?? "", "utf8");
    const t = opts.connectTimeoutMs;
    this.connectTimeoutMs =
      typeof t === "number" && t > 0
        ? Math.ceil(t)
        : DEFAULT_CONNECT_TIMEOUT_MS;
    this.log = opts.logger ?? {};
    this.hooks = opts._test;
    this.backoffBase = opts._test?.backoffBaseMs ?? BACKOFF_BASE_MS;
    this.backoffCap = opts._test?.backoffCapMs ?? BACKOFF_CAP_MS;
    this.releaseWindow = opts._test?.releaseWindowMs ?? RELEASE_WINDOW_MS;
    if (opts.tls) {
      this.tlsOpts = opts.tls === true ? {} : { ...opts.tls };
    }
    const per = addrs.length === 1 ? 2 : 1;
    for (const a of addrs) {
      const ep = this.newEndpoint(a, per);
      this.endpoints.push(ep);
      this.conns.push(...ep.conns);
      this.byAddr.set(a, ep);
    }
  }

  /**
   * Connects to the servers at `addrs` and resolves once a connection is up.
   * Keeps one connection per address in the background (two for a single
   * address), reconnecting with backoff until close(). Rejects with
   * ConnectError (none up within connectTimeoutMs), AuthError (every
   * address refused the credentials or failed its proof), TlsError or
   * InvalidError.
   */
  static async connect(opts: ConnectOptions): Promise<Client> {
    if (!opts || !Array.isArray(opts.addrs) || opts.addrs.length === 0) {
      throw new InvalidError("connect: no server address");
    }
    const uniq: string[] = [];
    for (const a of opts.addrs) {
      if (typeof a !== "string" || splitHostPort(a) === null) {
        throw new InvalidError(
          `connect: address ${JSON.stringify(a)} is not host:port`,
        );
      }
      if (!uniq.includes(a)) uniq.push(a);
    }
    const cl = new Client(opts, uniq);
    for (const cn of cl.conns) cn.start();
    try {
      await cl.waitFirst();
    } catch (e) {
      await cl.close();
      throw e;
    }
    return cl;
  }

  private newEndpoint(addr: string, n: number): Endpoint {
    const ep: Endpoint = { addr, conns: [] };
    for (let i = 0; i < n; i++)
      ep.conns.push(new Conn(this, addr, this.tlsOpts));
    return ep;
  }

  private async waitFirst(): Promise<void> {
    const end = performance.now() + this.connectTimeoutMs;
    for (;;) {
      let all = true;
      for (const cn of this.conns) {
        if (cn.state === "up") return;
        all = all && cn.failures > 0;
      }
      if (
        all &&
        (this.lastErr instanceof AuthError || this.lastErr instanceof TlsError)
      ) {
        throw this.lastErr;
      }
      const d = end - performance.now();
      if (d <= 0) throw this.connectErr();
      await waitEvent(this.notify, d, undefined, true);
    }
  }

  /** @internal */
  connectErr(): TicketingError {
    const last = this.lastErr;
    if (last instanceof AuthError || last instanceof TlsError) return last;
    if (last !== undefined) {
      return new ConnectError(
        `no connection to any server: ${describe(last)}`,
        { cause: last },
      );
    }
    return new ConnectError(
      `no connection to any server within ${this.connectTimeoutMs} ms`,
    );
  }

  /** @internal */
  backoffDelay(n: number): number {
    return jitter(
      backoffStep(this.backoffBase, this.backoffCap, Math.max(1, n)),
    );
  }

  private redirectDelay(n: number): number {
    return jitter(
      backoffStep(
        Math.min(this.backoffBase, REDIRECT_BACKOFF_BASE_MS),
        REDIRECT_BACKOFF_CAP_MS,
        n,
      ),
    );
  }

  /**
   * Closes every connection. Calls in progress reject with ClosedError (an
   * acquire or release already written: IndeterminateError). Background
   * releases are abandoned: those locks end with their leases. Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const cn of this.conns) cn.shutdown();
    this.notify.broadcast();
    this.newLeader.broadcast();
  }

  /** `await using client = await Client.connect(…)` closes it at scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // -------------------------------------------------------------------------
  // Connection choice

  private tryEnqueue(c: Call): EnqResult {
    this.rr = (this.rr + 1) >>> 0;
    const r = this.rr;
    let res: EnqResult = "down";
    const ep = this.leader;
    if (ep) {
      const n = ep.conns.length;
      for (let i = 0; i < n; i++) {
        const x = ep.conns[(r + i) % n]!.enqueue(c);
        if (x === "ok") return x;
        if (x === "full") res = "full";
      }
      if (res === "full" || ep.conns.some((cn) => cn.connecting())) return res;
    }
    const conns = this.conns;
    const n = conns.length;
    for (let i = 0; i < n; i++) {
      const x = conns[(r + i) % n]!.enqueue(c);
      if (x === "ok") return x;
      if (x === "full") res = "full";
    }
    return res;
  }

  /** Queues c, waiting for a connection (until giveUp) or a free slot (until slotGiveUp). */
  private async send(
    c: Call,
    giveUp: number,
    slotGiveUp: number,
    signal: AbortSignal | undefined,
    ref: boolean,
  ): Promise<void> {
    let first = true;
    for (;;) {
      if (this.closed) throw new ClosedError("client closed");
      if (!first && c.op === Op.Acquire && c.counts) {
        // The time spent waiting for a connection or a slot comes out of the
        // wait the request carries: wait bounds the whole call (slotGiveUp
        // is the end of the acquire's wait budget).
        const rem = Math.max(Math.floor(slotGiveUp - performance.now()), 0);
        if (rem < c.waitMs) c.waitMs = rem;
      }
      first = false;
      const r = this.tryEnqueue(c);
      if (r === "ok") return;
      const limit = r === "full" ? slotGiveUp : giveUp;
      const d = limit - performance.now();
      if (d <= 0) {
        if (r === "full") throw new NoSlot();
        throw this.connectErr();
      }
      const w = await waitEvent(this.notify, d, signal, ref);
      if (w === "abort")
        throw new CancelledError("cancelled", { cause: signal?.reason });
    }
  }

  private follow(addr: string): void {
    if (addr === "") {
      this.leader = undefined;
      return;
    }
    const known = this.byAddr.get(addr);
    if (known) {
      this.setLeader(known);
      return;
    }
    if (splitHostPort(addr) === null) {
      this.log.warn?.("ticketing: ignoring malformed leader address", { addr });
      this.leader = undefined;
      return;
    }
    if (this.closed || this.extra >= MAX_EXTRA_ENDPOINTS) {
      this.leader = undefined;
      return;
    }
    const ep = this.newEndpoint(addr, 1);
    this.endpoints = [...this.endpoints, ep];
    this.conns = [...this.conns, ...ep.conns];
    this.byAddr.set(addr, ep);
    this.extra++;
    this.log.info?.("ticketing: following leader to a new address", { addr });
    for (const cn of ep.conns) cn.start();
    this.setLeader(ep);
  }

  private setLeader(ep: Endpoint): void {
    if (this.leader !== ep) {
      this.leader = ep;
      this.newLeader.broadcast();
    }
  }

  /** @internal Hands a finished call to its owner. */
  complete(c: Call): void {
    switch (c.owner) {
      case "caller":
        c.onDone?.();
        break;
      case "abandoned":
        if (
          c.op === Op.Acquire &&
          c.fail === "none" &&
          c.status === Status.Granted
        ) {
          // The caller gave up but the grant won the race (§5 "Cancel").
          this.compensate(c.key, c.keyText, c.value);
        }
        break;
      default:
        break;
    }
  }

  private async sleepRedirect(
    ms: number,
    known: Endpoint | undefined,
    woken: { v: boolean },
    signal: AbortSignal | undefined,
    ref: boolean,
  ): Promise<void> {
    if (ms <= 0) return;
    let n: Notifier | undefined;
    if (!woken.v) {
      if (this.leader !== undefined && this.leader !== known) {
        woken.v = true;
        return;
      }
      n = this.newLeader;
    }
    const r = await waitEvent(n, ms, signal, ref);
    if (r === "event") woken.v = true;
    if (r === "abort")
      throw new CancelledError("cancelled", { cause: signal?.reason });
    if (this.closed) throw new ClosedError("client closed");
  }

  /** Waits for c's answer; "abort" when signal ended first, "timeout" after ms. */
  private waitCall(
    c: Call,
    signal: AbortSignal | undefined,
    ms?: number,
    ref = true,
  ): Promise<"done" | "abort" | "timeout"> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const finish = (r: "done" | "abort" | "timeout"): void => {
        c.onDone = undefined;
        if (timer) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        resolve(r);
      };
      const onAbort = (): void => finish("abort");
      c.onDone = () => finish("done");
      if (ms !== undefined) {
        timer = setTimeout(() => finish("timeout"), Math.max(0, ms));
        if (!ref) timer.unref();
      }
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  // -------------------------------------------------------------------------
  // Operations

  /**
   * Waits up to `waitMs` for the lock on `key` and resolves with a Lease of
   * `leaseMs`. Rejects with LockTimeoutError (not acquired in time),
   * BusyError (`B`: refused at once, never retried; `protocolCode` says
   * why), IndeterminateError (written but no definite answer: the lock MAY
   * have been granted — do not enter the critical section), CancelledError
   * (the signal aborted: withdrawn, a grant that won the race is released),
   * ConnectError, InvalidError (bad argument, or the server's `E`),
   * ClosedError. Retried internally only when never written or answered
   * `M`, within the remaining wait.
   */
  async acquire(
    key: string | Uint8Array,
    opts: AcquireOptions,
  ): Promise<Lease> {
    const kb = keyBytes(key);
    if (typeof opts !== "object" || opts === null) {
      throw new InvalidError(
        "acquire: options { leaseMs, waitMs } are required",
        { key },
      );
    }
    const leaseMs = durationMs("leaseMs", opts.leaseMs, 1, key);
    let waitMs = durationMs("waitMs", opts.waitMs ?? 0, 0, key);
    const signal = opts.signal;
    const label = keyLabel(key);
    const cancelled = (): CancelledError =>
      new CancelledError(`acquire ${label}: cancelled`, {
        cause: signal?.reason,
        key,
      });
    if (signal?.aborted) throw cancelled();
    if (this.closed) throw new ClosedError("client closed", { key });
    const start = performance.now();
    const budgetEnd = start + waitMs;
    const connGiveUp = Math.max(budgetEnd, start + this.connectTimeoutMs);
    let moves = 0;
    let rounds = 0;
    const woken = { v: false };
    for (;;) {
      if (signal?.aborted) throw cancelled();
      const c = newCall(Op.Acquire, kb, key);
      c.leaseMs = leaseMs;
      c.waitMs = waitMs;
      c.counts = waitMs > 0;
      try {
        await this.send(c, connGiveUp, budgetEnd, signal, true);
      } catch (e) {
        if (e instanceof NoSlot) {
          throw new LockTimeoutError(
            `acquire ${label}: no free max_inflight slot within the wait`,
            { key },
          );
        }
        if (e instanceof CancelledError) throw cancelled();
        throw e;
      }
      const w = await this.waitCall(c, signal);
      if (w !== "done") {
        if (c.conn!.abandon(c)) throw cancelled();
        if (c.fail === "none" && c.status === Status.Granted) {
          this.compensate(kb, key, c.value);
        }
        throw cancelled();
      }
      if (c.fail !== "none") {
        if (c.fail === "lost") {
          if (this.closed) {
            throw new IndeterminateError(
              `acquire ${label}: client closed after the request was written`,
              {
                cause: new ClosedError("client closed"),
                key,
              },
            );
          }
          throw new IndeterminateError(
            `acquire ${label}: connection lost after the request was written: ${describe(c.failErr)}`,
            { cause: c.failErr, key },
          );
        }
        if (this.closed) throw new ClosedError("client closed", { key });
        // Never written: retry, on another connection if need be.
      } else {
        switch (c.status) {
          case Status.Granted:
            return new Lease(
              this,
              key,
              c.value,
              c.sent + c.queued * QUEUED_UNIT_MS + leaseMs,
            );
          case Status.Timeout:
            throw new LockTimeoutError(
              `acquire ${label}: timed out, not acquired`,
              { key },
            );
          case Status.Busy:
            throw new BusyError(
              `acquire ${label}: busy (${codeName(c.code)}), not acquired`,
              {
                protocolCode: c.code,
                key,
              },
            );
          case Status.Unknown:
            throw new IndeterminateError(
              `acquire ${label}: the cluster could not confirm the commit`,
              {
                protocolCode: c.code === 0 ? undefined : c.code,
                key,
              },
            );
          case Status.Error:
            throw new InvalidError(
              `acquire ${label}: server error ${codeName(c.code)}${c.payload?.length ? ": " + c.payload.toString("utf8") : ""}`,
              { protocolCode: c.code, key },
            );
          case Status.Moved: {
            const addr = c.payload?.toString("latin1") ?? "";
            this.follow(addr);
            moves++;
            if (moves > MAX_MOVES) {
              rounds++;
              const d = this.redirectDelay(rounds);
              if (waitMs === 0 || budgetEnd - performance.now() <= d) {
                throw new NoLeaderError(
                  `acquire ${label}: ${moves} consecutive redirects (last to ${JSON.stringify(addr)})`,
                  { key },
                );
              }
              try {
                await this.sleepRedirect(d, this.leader, woken, signal, true);
              } catch (e) {
                if (e instanceof CancelledError) throw cancelled();
                throw e;
              }
              moves = 0;
            }
            break;
          }
        }
      }
      if (waitMs > 0) {
        const rem = budgetEnd - performance.now();
        if (rem < 1)
          throw new LockTimeoutError(
            `acquire ${label}: timed out, not acquired`,
            { key },
          );
        waitMs = Math.floor(rem);
      }
    }
  }

  /**
   * Acquires the lock, runs fn with the lease, and releases it when fn
   * settles (normal or exceptional exit). fn's error wins over a release
   * error; otherwise a failed release rejects. `opts.signal` is passed to
   * fn's lease as well, so fn may watch `lease.signal` for the lease's end.
   */
  async withLock<T>(
    key: string | Uint8Array,
    opts: AcquireOptions,
    fn: (lease: Lease) => Promise<T> | T,
  ): Promise<T> {
    const lease = await this.acquire(key, opts);
    let result: T;
    try {
      result = await fn(lease);
    } catch (e) {
      try {
        await lease.release();
      } catch (re) {
        this.log.warn?.("ticketing: release after a failed scope failed", {
          err: describe(re),
        });
      }
      throw e;
    }
    await lease.release();
    return result;
  }

  /**
   * Releases the lock on `key` held with `token`, from any process that
   * knows the token. Resolves only when the server answered `O`.
   * NotHolderError: the key is free or held under another token (the lease
   * had ended). IndeterminateError: no confirmation within 5 s (or the
   * signal aborted first — the attempts then go on in the background until
   * those 5 s are up — or the client closed).
   */
  async release(
    key: string | Uint8Array,
    token: bigint,
    opts?: ReleaseOptions,
  ): Promise<void> {
    const kb = keyBytes(key);
    if (typeof token !== "bigint" || token < 0n || token >= 1n << 64n) {
      throw new InvalidError("token must be a bigint in 0..2^64-1", { key });
    }
    const st: RelState = {
      key: kb,
      keyText: key,
      token,
      deadline: performance.now() + this.releaseWindow,
      maybe: false,
      moves: 0,
      retries: 0,
      woken: { v: false },
      ref: true,
      cause: undefined,
    };
    const signal = opts?.signal;
    if (!signal) return this.releaseAttempts(st);
    if (signal.aborted) {
      this.releaseInBackground(st);
      throw new IndeterminateError(
        `release ${keyLabel(key)}: cancelled before confirmation`,
        {
          cause: new CancelledError("cancelled", { cause: signal.reason }),
          key,
        },
      );
    }
    const job = this.releaseAttempts(st);
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<"abort">((resolve) => {
      onAbort = () => resolve("abort");
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      const r = await Promise.race([job.then(() => "done" as const), aborted]);
      if (r === "abort") {
        st.ref = false;
        this.adopt(job);
        throw new IndeterminateError(
          `release ${keyLabel(key)}: cancelled before confirmation`,
          {
            cause: new CancelledError("cancelled", { cause: signal.reason }),
            key,
          },
        );
      }
    } finally {
      signal.removeEventListener("abort", onAbort!);
    }
  }

  private adopt(job: Promise<void>): void {
    this.background++;
    job
      .catch((e: unknown) => {
        this.log.warn?.("ticketing: background release failed", {
          err: describe(e),
        });
      })
      .finally(() => {
        this.background--;
      });
  }

  private releaseInBackground(st: RelState): boolean {
    if (this.closed || this.background >= RELEASE_QUEUE_LEN) return false;
    st.ref = false;
    this.adopt(this.releaseAttempts(st));
    return true;
  }

  private compensate(
    key: Uint8Array,
    keyText: string | Uint8Array,
    token: bigint,
  ): void {
    this.compensations++;
    const ok = this.releaseInBackground({
      key,
      keyText,
      token,
      deadline: performance.now() + this.releaseWindow,
      maybe: false,
      moves: 0,
      retries: 0,
      woken: { v: false },
      ref: false,
      cause: undefined,
    });
    if (!ok) {
      this.log.warn?.(
        "ticketing: release queue full; an abandoned grant stays held until its lease ends",
      );
    }
  }

  private giveUp(st: RelState): IndeterminateError {
    const why = st.cause === undefined ? "" : `: ${describe(st.cause)}`;
    return new IndeterminateError(
      `release ${keyLabel(st.keyText)}: not confirmed within ${this.releaseWindow} ms${why}`,
      { cause: st.cause, key: st.keyText },
    );
  }

  private closedIndeterminate(st: RelState): IndeterminateError {
    return new IndeterminateError(
      `release ${keyLabel(st.keyText)}: client closed before confirmation`,
      {
        cause: new ClosedError("client closed"),
        key: st.keyText,
      },
    );
  }

  /** A release's attempts until a definite answer or the 5 s window ends. */
  private async releaseAttempts(st: RelState): Promise<void> {
    const label = keyLabel(st.keyText);
    for (;;) {
      if (this.closed) throw this.closedIndeterminate(st);
      if (st.deadline - performance.now() <= 0) throw this.giveUp(st);
      const c = newCall(Op.Release, st.key, st.keyText);
      c.token = st.token;
      try {
        await this.send(c, st.deadline, st.deadline, undefined, st.ref);
      } catch (e) {
        if (e instanceof ClosedError) throw this.closedIndeterminate(st);
        st.cause = e;
        throw this.giveUp(st);
      }
      const w = await this.waitCall(
        c,
        undefined,
        st.deadline - performance.now(),
        st.ref,
      );
      if (w === "timeout") {
        if (c.pending) {
          c.owner = "dropped";
          throw this.giveUp(st);
        }
      }
      let wait = 0;
      if (c.fail !== "none") {
        st.cause = c.failErr;
        if (this.closed || c.failErr instanceof ClosedError)
          throw this.closedIndeterminate(st);
        if (c.fail === "lost") {
          st.maybe = true;
          st.retries++;
          wait = this.redirectDelay(st.retries);
        }
      } else {
        switch (c.status) {
          case Status.Released:
            return;
          case Status.NotHolder:
            if (st.maybe) {
              throw new IndeterminateError(
                `release ${label}: the token no longer holds the key; an earlier unconfirmed attempt may have released it`,
                { key: st.keyText },
              );
            }
            throw new NotHolderError(
              `release ${label}: not the holder (the lease may have ended)`,
              {
                key: st.keyText,
              },
            );
          case Status.Moved:
            this.follow(c.payload?.toString("latin1") ?? "");
            st.moves++;
            if (st.moves > MAX_MOVES) {
              st.moves = 0;
              st.retries++;
              wait = this.redirectDelay(st.retries);
            }
            break;
          case Status.Unknown:
            st.maybe = true;
            st.retries++;
            wait = this.redirectDelay(st.retries);
            break;
          default:
            throw new InvalidError(
              `release ${label}: server error ${codeName(c.code)}${c.payload?.length ? ": " + c.payload.toString("utf8") : ""}`,
              { protocolCode: c.code, key: st.keyText },
            );
        }
      }
      const known = this.leader;
      try {
        await this.sleepRedirect(
          Math.min(wait, st.deadline - performance.now() - 10),
          known,
          st.woken,
          undefined,
          st.ref,
        );
      } catch (e) {
        if (e instanceof ClosedError) throw this.closedIndeterminate(st);
        throw e;
      }
    }
  }

  /** @internal for tests: the connections and their states. */
  get _conns(): ReadonlyArray<{
    addr: string;
    state: string;
    pending: number;
  }> {
    return this.conns.map((c) => ({
      addr: c.addr,
      state: c.state,
      pending: c.pending.size,
    }));
  }
}

export type { Response };

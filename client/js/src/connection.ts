// The connection actor: one socket to one address, its handshake (§1),
// pipelined requests matched by req_id, and reconnects with jittered
// backoff. Everything here is internal; the pool (pool.ts) owns the
// connections and the client (client.ts) the operations.

import { randomBytes } from "node:crypto";
import * as net from "node:net";
import * as tls from "node:tls";
import { performance } from "node:perf_hooks";

import {
  AuthError,
  BusyError,
  ClosedError,
  ConnectError,
  ProtocolError,
  TlsError,
} from "./errors.js";
import {
  describe,
  splitHostPort,
  type Logger,
  type TestHooks,
} from "./options.js";
import {
  Code,
  HELLO_FLAG_TOKENS,
  HELLO_LEN,
  Op,
  ResponseDecoder,
  Role,
  Status,
  WELCOME_ACCEPTED,
  WELCOME_LEN,
  WELCOME_REJECTED,
  WireError,
  clientProof,
  codeName,
  decodeHello,
  decodeWelcome,
  encodeAcquire,
  encodeAuth,
  encodeCancel,
  encodeRelease,
  encodeAcquireSet,
  encodeReleaseSet,
  encodeLabel,
  encodePing,
  Feature,
  PING_FEATURES,
  proofEqual,
  serverProof,
  type Response,
} from "./wire.js";

const MAX_WRITE_BUFFER = 4 << 20;
/** req_ids of the handshake's own requests (sent before any other request). */
const FEATURE_PING_ID = 0xffffffff;
const EMPTY = new Uint8Array(0);
/** How often a connection with pending acquires looks for overdue ones (R2). */
const SWEEP_MS = 100;

/** What a connection needs from the pool that owns it. */
export interface ConnHost {
  readonly closed: boolean;
  readonly token: Buffer;
  /** The connection label (§12.3), already cut to 64 bytes; empty: none. */
  readonly label: Buffer;
  readonly connectTimeoutMs: number;
  /** R2: the allowance past an acquire's wait for its answer. */
  readonly answerAllowanceMs: number;
  readonly log: Logger;
  readonly hooks: TestHooks | undefined;
  readonly notify: Notifier;
  lastErr: unknown;
  backoffDelay(attempt: number): number;
  /** Hands a finished call to its owner. */
  complete(c: Call): void;
}

export type Owner =
  | "caller"
  | "abandoned"
  | "releaser"
  | "dropped"
  | "internal";
export type Fail = "none" | "unsent" | "lost";
/**
 * What enqueue did: ok; down (not up); full (max_inflight); unsupported
 * (the server lacks the feature); features (up, its feature pong not read yet).
 */
export type EnqResult = "ok" | "down" | "full" | "unsupported" | "features";

/** One request in flight on a connection. */
/** A key set (§12.2): its keys in the caller's order and the encoded body. */
export interface KeySet {
  keys: readonly Uint8Array[];
  body: Buffer;
}

export interface Call {
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
  /** S/X (§12.2): the set's keys; undefined for single-key ops. */
  set: KeySet | undefined;
  /** R2: a written acquire unanswered by this time (performance.now()) is overdue. */
  answerBy: number;
  /** Set by the sweep when answerBy passed with no answer (the call stays pending). */
  overdue: boolean;
  fail: Fail;
  failErr: unknown;
  onDone: (() => void) | undefined;
}

export function newCall(
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
    set: undefined,
    answerBy: 0,
    overdue: false,
    fail: "none",
    failErr: undefined,
    onDone: undefined,
  };
}

/** Whether st is a possible answer to op (§3); anything else is a violation. */
export function fits(op: number, st: number): boolean {
  if (st === Status.Error) return true;
  switch (op) {
    case Op.Acquire:
    case Op.AcquireSet:
      return (
        st === Status.Granted ||
        st === Status.Timeout ||
        st === Status.Busy ||
        st === Status.Moved ||
        st === Status.Unknown
      );
    case Op.Release:
    case Op.ReleaseSet:
    case Op.Cancel:
      return (
        st === Status.Released ||
        st === Status.NotHolder ||
        st === Status.Moved ||
        st === Status.Unknown
      );
    case Op.Ping:
      return st === Status.Pong;
    case Op.Label:
      return st === Status.Released || st === Status.Error;
    case Op.Query:
      return st === Status.Admin || st === Status.Moved;
  }
  return false;
}

// ---------------------------------------------------------------------------
// Small helpers

export class Notifier {
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

export type WaitResult = "event" | "timeout" | "abort";

/** Waits for a broadcast of n, ms, or signal's abort; ref=false: do not keep the process alive. */
export function waitEvent(
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

export function backoffStep(base: number, cap: number, n: number): number {
  let d = base;
  for (let i = 1; i < n && d < cap; i++) d *= 2;
  return Math.min(d, cap);
}

/** Uniform in [step/2, step] (redirect back-off). */
export function jitter(step: number): number {
  if (step <= 1) return step;
  const half = step / 2;
  return half + Math.random() * (step - half);
}

/**
 * Uniform in [0, step]: "full jitter" of the reconnect delays
 * (docs/architecture.md "Client library behaviour" R16), so clients that
 * lost one server at the same instant spread over the whole step.
 */
export function fullJitter(step: number): number {
  return Math.random() * step;
}

/** Whether a TLS handshake error means the peer did not answer with TLS records. */
function notTls(code: string, message: string): boolean {
  return (
    code === "ERR_SSL_WRONG_VERSION_NUMBER" ||
    code === "ERR_SSL_PACKET_LENGTH_TOO_LONG" ||
    code === "ERR_SSL_UNKNOWN_PROTOCOL" ||
    code === "ERR_SSL_RECORD_LAYER_FAILURE" ||
    /wrong version number|packet length too long|unknown protocol|record layer failure/i.test(
      message,
    )
  );
}

// ---------------------------------------------------------------------------
// Connection actor

type ConnState = "down" | "up";

export class Conn {
  state: ConnState = "down";
  sock: net.Socket | undefined;
  everUp = false;
  failures = 0;
  maxInflight = 1;
  inflight = 0;
  /** The feature bits this connection's server announced (§12.1); 0 for 1.0. */
  features = 0;
  /** Whether the feature pong has been read on this connection. */
  featuresKnown = false;
  /** Pending calls of the connection's own (feature ping, label): they keep nothing alive. */
  private internal = 0;
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
  private sweeper: NodeJS.Timeout | undefined;

  constructor(
    readonly cl: ConnHost,
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
      if (tlsLike && notTls(code, e.message)) {
        // §12.4: a plaintext server's HELLO ("TKTS") where a TLS record was expected.
        fail(
          new TlsError(
            `TLS with ${this.addr}: the server does not speak TLS (${e.message}); connect without tls or to its TLS port`,
            { cause: e },
          ),
        );
      } else if (tlsLike) {
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
    let welcome: { maxInflight: number } | undefined;
    const onData = (chunk: Buffer): void => {
      if (settled) return;
      hbuf = hbuf.length === 0 ? chunk : Buffer.concat([hbuf, chunk]);
      try {
        if (
          clientNonce === undefined &&
          this.tlsOpts === undefined &&
          hbuf.length >= 2 &&
          hbuf[0] === WELCOME_REJECTED &&
          hbuf[1] === Code.TLS_REQUIRED
        ) {
          // §12.4: a TLS listener's plaintext REJECT TLS_REQUIRED where
          // HELLO was expected: a configuration error, reported at once (R5).
          fail(
            new TlsError(
              `${this.addr}: the server requires TLS (it answered REJECT TLS_REQUIRED to a plaintext connection); connect with tls`,
              { protocolCode: Code.TLS_REQUIRED },
            ),
          );
          return;
        }
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
          // §12.1: the feature ping right behind AUTH (a 1.0 server
          // answers it as a plain pong: features 0).
          sock.write(
            Buffer.concat([
              encodeAuth({ role: Role.Client, nonce: clientNonce, proof }),
              encodePing(FEATURE_PING_ID, PING_FEATURES),
            ]),
          );
          phase = "welcome";
        }
        if (
          clientNonce !== undefined &&
          welcome === undefined &&
          hbuf.length >= WELCOME_LEN
        ) {
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
          welcome = w;
          hbuf = rest;
        }
        if (welcome === undefined) return;
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
        this.up(sock, welcome.maxInflight, hbuf);
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
    this.features = 0;
    this.featuresKnown = false;
    this.internal = 0;
    // §12.1: the feature ping was written right behind AUTH; its pong is
    // matched by req_id like any answer (a server that never answers it is
    // used as a 1.0 server: no S, X or L is ever sent on this connection).
    const ping = newCall(Op.Ping, EMPTY, "");
    ping.owner = "internal";
    ping.reqId = FEATURE_PING_ID;
    ping.conn = this;
    ping.pending = true;
    ping.written = true;
    ping.onDone = () => this.gotFeatures(ping);
    this.pending.set(FEATURE_PING_ID, ping);
    this.internal++;
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
    // The server's FIN: take the connection down at once, so that nothing
    // more is written to it (calls not yet written are retried, not lost).
    sock.on("end", () =>
      this.kill(
        sock,
        new ConnectError(`connection to ${this.addr} closed by the server`),
      ),
    );
    this.cl.log.info?.("ticketing: connected", {
      addr: this.addr,
      max_inflight: maxInflight,
    });
    if (rest.length > 0) this.onData(sock, rest);
    this.cl.notify.broadcast();
  }

  /** The feature pong (§12.1): the bits, then the label (§12.3) if the server takes one. */
  private gotFeatures(ping: Call): void {
    this.internal--;
    if (ping.fail !== "none") return;
    this.features = ping.queued;
    this.featuresKnown = true;
    const label = this.cl.label;
    if ((this.features & Feature.Labels) !== 0 && label.length > 0) {
      const lc = newCall(Op.Label, label, "");
      lc.owner = "internal";
      lc.onDone = () => {
        this.internal--;
        if (lc.fail === "none" && lc.status === Status.Error) {
          this.cl.log.warn?.(
            "ticketing: the server refused the connection label",
            { addr: this.addr, code: codeName(lc.code) },
          );
        }
      };
      this.internal++;
      this.enqueueLocked(lc);
    }
    this.cl.notify.broadcast();
  }

  private updateRef(): void {
    const want = this.pending.size > this.internal;
    if (want !== this.reffed && this.sock) {
      this.reffed = want;
      if (want) this.sock.ref();
      else this.sock.unref();
    }
  }

  enqueue(c: Call): EnqResult {
    if (this.state !== "up" || this.sock!.writableLength > MAX_WRITE_BUFFER)
      return "down";
    // §12.1: never an S or X before the feature pong, nor to a server that
    // did not announce KEY_SETS.
    if (c.set !== undefined) {
      if (!this.featuresKnown) return "features";
      if ((this.features & Feature.KeySets) === 0) return "unsupported";
    }
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
        c.answerBy = c.sent + c.waitMs + this.cl.answerAllowanceMs;
        frame = encodeAcquire(id, c.key, c.leaseMs, c.waitMs);
        if (this.sweeper === undefined) this.startSweeper();
        break;
      case Op.AcquireSet:
        c.sent = performance.now();
        c.answerBy = c.sent + c.waitMs + this.cl.answerAllowanceMs;
        frame = encodeAcquireSet(
          id,
          c.set!.keys.length,
          c.set!.body,
          c.leaseMs,
          c.waitMs,
        );
        if (this.sweeper === undefined) this.startSweeper();
        break;
      case Op.Release:
        frame = encodeRelease(id, c.key, c.token);
        break;
      case Op.ReleaseSet:
        frame = encodeReleaseSet(id, c.set!.keys.length, c.set!.body, c.token);
        break;
      case Op.Label:
        frame = encodeLabel(id, c.key);
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
    if (sock.readableEnded || !sock.writable) {
      // The server closed the connection (its FIN was read): nothing queued
      // here reaches it, so these calls stay unwritten (retried elsewhere,
      // never Indeterminate).
      this.kill(
        sock,
        new ConnectError(`connection to ${this.addr} closed by the server`),
      );
      return;
    }
    const frames = this.outFrames;
    const calls = this.outCalls;
    this.outFrames = [];
    this.outCalls = [];
    for (const c of calls) c.written = true;
    sock.write(frames.length === 1 ? frames[0]! : Buffer.concat(frames));
  }

  /**
   * R2 (no call outlives a silent server): while acquires are pending, marks
   * every one whose answer is overdue and wakes its caller, which withdraws
   * it (abandon: C, and a late grant is compensated) and reports it
   * Indeterminate. A timer per connection rather than per call keeps the
   * request path free of timers.
   */
  private startSweeper(): void {
    this.sweeper = setInterval(() => {
      let acquires = 0;
      const now = performance.now();
      for (const c of this.pending.values()) {
        if (c.op !== Op.Acquire && c.op !== Op.AcquireSet) continue;
        acquires++;
        if (!c.overdue && c.owner === "caller" && now > c.answerBy) {
          c.overdue = true;
          c.onDone?.();
        }
      }
      if (acquires === 0) this.stopSweeper();
    }, SWEEP_MS);
    this.sweeper.unref();
  }

  private stopSweeper(): void {
    if (this.sweeper !== undefined) clearInterval(this.sweeper);
    this.sweeper = undefined;
  }

  /**
   * The caller gave up on c: leave it to the reader (a grant is
   * compensated) and withdraw a queued acquire with C. False when c was
   * already answered.
   */
  abandon(c: Call): boolean {
    if (!c.pending) return false;
    c.owner = "abandoned";
    if ((c.op === Op.Acquire || c.op === Op.AcquireSet) && c.counts) {
      // §12.2: a set is withdrawn with C naming its first key (c.key).
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
    this.features = 0;
    this.featuresKnown = false;
    this.outFrames = [];
    this.outCalls = [];
    this.stopSweeper();
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

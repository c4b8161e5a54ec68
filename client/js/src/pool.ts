// The pool: the connections to every known address, the picker (known
// leader first, then round robin), waiting for a connection or a free
// max_inflight slot, following M to the leader, and handing finished calls
// to their owners. Internal: the public Client (client.ts) wraps one.

import { hostname } from "node:os";
import * as tls from "node:tls";
import { performance } from "node:perf_hooks";

import {
  AuthError,
  CancelledError,
  ClosedError,
  ConnectError,
  TicketingError,
  TlsError,
  UnsupportedError,
} from "./errors.js";
import {
  Conn,
  Notifier,
  backoffStep,
  fullJitter,
  jitter,
  waitEvent,
  type Call,
  type ConnHost,
  type EnqResult,
} from "./connection.js";
import {
  describe,
  splitHostPort,
  type ConnectOptions,
  type Logger,
  type TestHooks,
} from "./options.js";
import type { Releases } from "./release.js";
import { VERSION } from "./version.js";
import { Op, Status, cutLabel } from "./wire.js";

const DEFAULT_CONNECT_TIMEOUT_MS = 5000;
const BACKOFF_BASE_MS = 100;
const BACKOFF_CAP_MS = 3200;
const REDIRECT_BACKOFF_BASE_MS = 25;
const REDIRECT_BACKOFF_CAP_MS = 200;
const RELEASE_WINDOW_MS = 5000;
/** R2's answer allowance (issue 31: one setting, default between 2 and 5 s). */
export const DEFAULT_ANSWER_ALLOWANCE_MS = 3000;
const MAX_EXTRA_ENDPOINTS = 32;

/** Which outcome of enqueue a caller waits on when no connection took the call. */
const RANK: Record<EnqResult, number> = {
  ok: 4,
  full: 3,
  features: 2,
  unsupported: 1,
  down: 0,
};

export interface Endpoint {
  addr: string;
  conns: Conn[];
}

/** No free max_inflight slot within the wait. */
export class NoSlot extends Error {}

export class Pool implements ConnHost {
  readonly token: Buffer;
  readonly label: Buffer;
  readonly connectTimeoutMs: number;
  readonly answerAllowanceMs: number;
  readonly log: Logger;
  readonly hooks: TestHooks | undefined;
  closed = false;
  lastErr: unknown;
  readonly notify = new Notifier();
  readonly newLeader = new Notifier();
  endpoints: Endpoint[] = [];
  conns: Conn[] = [];
  private byAddr = new Map<string, Endpoint>();
  private extra = 0;
  leader: Endpoint | undefined;
  private rr = 0;
  private readonly tlsOpts: tls.ConnectionOptions | undefined;
  private readonly backoffBase: number;
  private readonly backoffCap: number;
  readonly releaseWindow: number;
  /** Set by the client right after construction (release.ts). */
  releases!: Releases;

  constructor(
    opts: ConnectOptions,
    addrs: string[],
    hooks: TestHooks | undefined,
  ) {
    this.token = Buffer.from(opts.token ?? "", "utf8");
    this.label = cutLabel(
      opts.label ??
        `${opts.appName ? opts.appName + " " : ""}${hostname()}/${process.pid} js/${VERSION}`,
    );
    const t = opts.connectTimeoutMs;
    this.connectTimeoutMs =
      typeof t === "number" && t > 0
        ? Math.ceil(t)
        : DEFAULT_CONNECT_TIMEOUT_MS;
    const aa = opts.answerAllowanceMs;
    this.answerAllowanceMs =
      typeof aa === "number" && aa >= 0
        ? Math.ceil(aa)
        : DEFAULT_ANSWER_ALLOWANCE_MS;
    this.log = opts.logger ?? {};
    this.hooks = hooks;
    this.backoffBase = hooks?.backoffBaseMs ?? BACKOFF_BASE_MS;
    this.backoffCap = hooks?.backoffCapMs ?? BACKOFF_CAP_MS;
    this.releaseWindow = hooks?.releaseWindowMs ?? RELEASE_WINDOW_MS;
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

  start(): void {
    for (const cn of this.conns) cn.start();
  }

  private newEndpoint(addr: string, n: number): Endpoint {
    const ep: Endpoint = { addr, conns: [] };
    for (let i = 0; i < n; i++)
      ep.conns.push(new Conn(this, addr, this.tlsOpts));
    return ep;
  }

  async waitFirst(): Promise<void> {
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

  /** The AuthError/TlsError of the last failure when no connection is up. */
  configErr(): TicketingError | undefined {
    const last = this.lastErr;
    if (!(last instanceof AuthError || last instanceof TlsError))
      return undefined;
    for (const cn of this.conns) if (cn.state === "up") return undefined;
    return last;
  }

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

  /** The delay before reconnect attempt n (R16: full jitter over the step). */
  backoffDelay(n: number): number {
    return fullJitter(
      backoffStep(this.backoffBase, this.backoffCap, Math.max(1, n)),
    );
  }

  redirectDelay(n: number): number {
    return jitter(
      backoffStep(
        Math.min(this.backoffBase, REDIRECT_BACKOFF_BASE_MS),
        REDIRECT_BACKOFF_CAP_MS,
        n,
      ),
    );
  }

  /** Closes every connection (idempotent); see Client.close. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const cn of this.conns) cn.shutdown();
    this.notify.broadcast();
    this.newLeader.broadcast();
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
        if (RANK[x] > RANK[res]) res = x;
      }
      if (res === "full" || ep.conns.some((cn) => cn.connecting())) return res;
    }
    const conns = this.conns;
    const n = conns.length;
    for (let i = 0; i < n; i++) {
      const x = conns[(r + i) % n]!.enqueue(c);
      if (x === "ok") return x;
      if (RANK[x] > RANK[res]) res = x;
    }
    return res;
  }

  /** Queues c, waiting for a connection (until giveUp) or a free slot (until slotGiveUp). */
  async send(
    c: Call,
    giveUp: number,
    slotGiveUp: number,
    signal: AbortSignal | undefined,
    ref: boolean,
  ): Promise<void> {
    let first = true;
    let featuresBy: number | undefined;
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
      // R4/R5: no connection is up and the servers refused the credentials
      // or the transport (a configuration error): fail at once, not after
      // the wait.
      if (r === "down") {
        const cfg = this.configErr();
        if (cfg !== undefined) throw cfg;
      }
      if (r === "unsupported") {
        throw new UnsupportedError(
          "key sets are not supported by this server (it does not announce KEY_SETS: protocol 1.1, §12.1); nothing was sent",
        );
      }
      if (r === "features") {
        // Up, the feature pong not read yet: wait for it for up to the
        // connect timeout (a 1.0 server answers at once), even with wait 0.
        featuresBy ??= performance.now() + this.connectTimeoutMs;
      }
      const limit =
        r === "full"
          ? slotGiveUp
          : r === "features"
            ? Math.max(giveUp, featuresBy!)
            : giveUp;
      const d = limit - performance.now();
      if (d <= 0) {
        if (r === "full") throw new NoSlot();
        if (r === "features") {
          throw new UnsupportedError(
            "key sets: the server did not announce its features (no answer to the feature ping: protocol 1.1, §12.1); nothing was sent",
          );
        }
        throw this.connectErr();
      }
      const w = await waitEvent(this.notify, d, signal, ref);
      if (w === "abort")
        throw new CancelledError("cancelled", { cause: signal?.reason });
    }
  }

  follow(addr: string): void {
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

  /** Hands a finished call to its owner. */
  complete(c: Call): void {
    switch (c.owner) {
      case "caller":
      case "internal":
        c.onDone?.();
        break;
      case "abandoned":
        if (
          (c.op === Op.Acquire || c.op === Op.AcquireSet) &&
          c.fail === "none" &&
          c.status === Status.Granted
        ) {
          // The caller gave up but the grant won the race (§5 "Cancel").
          this.releases.compensate(c.key, c.keyText, c.value, c.set);
        }
        break;
      default:
        break;
    }
  }

  async sleepRedirect(
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
  waitCall(
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
}

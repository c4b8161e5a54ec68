// The public Client: argument checks, the acquire state machine (retried
// only when never written or answered M, within the remaining wait; cancel
// with C plus compensation), withLock, release by token, close. The
// connections are the pool's (pool.ts, connection.ts); releases are
// release.ts's.

import { performance } from "node:perf_hooks";

import {
  BusyError,
  CancelledError,
  ClosedError,
  IndeterminateError,
  InvalidError,
  LockTimeoutError,
  NoLeaderError,
} from "./errors.js";
import { newCall } from "./connection.js";
import { Lease } from "./lease.js";
import {
  describe,
  durationMs,
  keyBytes,
  keyLabel,
  splitHostPort,
  type AcquireOptions,
  type ConnectOptions,
  type ReleaseOptions,
  type TestHooks,
} from "./options.js";
import { NoSlot, Pool } from "./pool.js";
import { Releases } from "./release.js";
import { Op, QUEUED_UNIT_MS, Status, codeName } from "./wire.js";

export const VERSION = "0.1.0";

const MAX_MOVES = 3;

// Set by Client's static block (it alone sees the private fields).
let connectWith: (
  opts: ConnectOptions,
  hooks: TestHooks | undefined,
) => Promise<Client>;
let internals: (c: Client) => { pool: Pool; releases: Releases };

/**
 * A connection pool to one Ticketing server or cluster; one per process.
 * Every method may be called concurrently: calls share the connections and
 * pipeline. Create with `Client.connect`, end with `close()`.
 */
export class Client {
  readonly #pool: Pool;
  readonly #releases: Releases;

  private constructor(pool: Pool) {
    this.#pool = pool;
    this.#releases = new Releases(pool);
    pool.releases = this.#releases;
  }

  /**
   * Connects to the servers at `addrs` and resolves once a connection is up.
   * Keeps one connection per address in the background (two for a single
   * address), reconnecting with backoff until close(). Rejects with
   * ConnectError (none up within connectTimeoutMs), AuthError (every
   * address refused the credentials or failed its proof), TlsError or
   * InvalidError.
   */
  static connect(opts: ConnectOptions): Promise<Client> {
    return connectWith(opts, undefined);
  }

  static {
    connectWith = async (opts, hooks) => {
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
      const pool = new Pool(opts, uniq, hooks);
      const cl = new Client(pool);
      pool.start();
      try {
        await pool.waitFirst();
      } catch (e) {
        pool.close();
        throw e;
      }
      return cl;
    };
    internals = (c) => ({ pool: c.#pool, releases: c.#releases });
  }

  /**
   * Closes every connection. Calls in progress reject with ClosedError (an
   * acquire or release already written: IndeterminateError). Background
   * releases are abandoned: those locks end with their leases. Idempotent.
   */
  async close(): Promise<void> {
    this.#pool.close();
  }

  /** `await using client = await Client.connect(…)` closes it at scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
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
    if (this.#pool.closed) throw new ClosedError("client closed", { key });
    const start = performance.now();
    const budgetEnd = start + waitMs;
    const connGiveUp = Math.max(budgetEnd, start + this.#pool.connectTimeoutMs);
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
        await this.#pool.send(c, connGiveUp, budgetEnd, signal, true);
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
      const w = await this.#pool.waitCall(c, signal);
      if (w !== "done") {
        if (c.conn!.abandon(c)) throw cancelled();
        if (c.fail === "none" && c.status === Status.Granted) {
          this.#releases.compensate(kb, key, c.value);
        }
        throw cancelled();
      }
      if (c.fail !== "none") {
        if (c.fail === "lost") {
          if (this.#pool.closed) {
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
        if (this.#pool.closed) throw new ClosedError("client closed", { key });
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
            this.#pool.follow(addr);
            moves++;
            if (moves > MAX_MOVES) {
              rounds++;
              const d = this.#pool.redirectDelay(rounds);
              if (waitMs === 0 || budgetEnd - performance.now() <= d) {
                throw new NoLeaderError(
                  `acquire ${label}: ${moves} consecutive redirects (last to ${JSON.stringify(addr)})`,
                  { key },
                );
              }
              try {
                await this.#pool.sleepRedirect(
                  d,
                  this.#pool.leader,
                  woken,
                  signal,
                  true,
                );
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
        this.#pool.log.warn?.(
          "ticketing: release after a failed scope failed",
          {
            err: describe(re),
          },
        );
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
    return this.#releases.release(key, kb, token, opts);
  }
}

/**
 * @internal For this package's tests: connect with test hooks, and look
 * inside a client. Not exported from index.ts.
 */
export const testing = {
  connect: (opts: ConnectOptions, hooks: TestHooks): Promise<Client> =>
    connectWith(opts, hooks),
  compensations: (c: Client): number => internals(c).releases.compensations,
  backoffDelay: (c: Client, attempt: number): number =>
    internals(c).pool.backoffDelay(attempt),
  conns: (
    c: Client,
  ): ReadonlyArray<{ addr: string; state: string; pending: number }> =>
    internals(c).pool.conns.map((cn) => ({
      addr: cn.addr,
      state: cn.state,
      pending: cn.pending.size,
    })),
};

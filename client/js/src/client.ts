// The public Client: argument checks, the acquire state machine (retried
// only when never written or answered M, within the remaining wait; cancel
// with C plus compensation), withLock, release by token, close. The
// connections are the pool's (pool.ts, connection.ts); releases are
// release.ts's.

import { performance } from "node:perf_hooks";

import {
  AuthError,
  BusyError,
  CancelledError,
  ClosedError,
  ConnectError,
  IndeterminateError,
  InsufficientLeaseError,
  InvalidError,
  LockTimeoutError,
  NoLeaderError,
  TicketingError,
  TlsError,
} from "./errors.js";
import { newCall, type KeySet } from "./connection.js";
import { Lease } from "./lease.js";
import {
  describe,
  durationMs,
  keyBytes,
  keyLabel,
  splitHostPort,
  tokenArg,
  type AcquireOptions,
  type ConnectOptions,
  type ReleaseOptions,
  type TestHooks,
} from "./options.js";
import { NoSlot, Pool } from "./pool.js";
import { Releases, setLabel } from "./release.js";
import {
  MAX_SET_KEYS,
  MIN_SET_KEYS,
  Op,
  QUEUED_UNIT_MS,
  Status,
  codeName,
  encodeKeySetBody,
} from "./wire.js";

export { VERSION } from "./version.js";

const MAX_MOVES = 3;

/** The checked keys of a set (R8, §12.2): 2–16 distinct valid keys. */
function keySet(keys: readonly (string | Uint8Array)[]): KeySet {
  if (
    !Array.isArray(keys) ||
    keys.length < MIN_SET_KEYS ||
    keys.length > MAX_SET_KEYS
  ) {
    throw new InvalidError(
      `keys must be an array of ${MIN_SET_KEYS}..${MAX_SET_KEYS} keys (got ${Array.isArray(keys) ? keys.length : typeof keys})`,
    );
  }
  const kbs = keys.map((k) => keyBytes(k));
  const seen = new Set<string>();
  for (const k of kbs) {
    const h = Buffer.from(k).toString("hex");
    if (seen.has(h)) {
      throw new InvalidError(
        `keys: ${keyLabel(Buffer.from(k).toString("utf8"))} appears twice in the set`,
      );
    }
    seen.add(h);
  }
  return { keys: kbs, body: encodeKeySetBody(kbs) };
}

/**
 * e with the operation and key in front of its message (R15: every error
 * names the key and the server; connection errors name the address).
 */
function located(
  e: unknown,
  what: string,
  key: string | Uint8Array | undefined,
): unknown {
  if (!(e instanceof TicketingError) || e.message.startsWith(what)) return e;
  const opts = { cause: e, protocolCode: e.protocolCode, key: key ?? e.key };
  const msg = `${what}: ${e.message}`;
  switch (e.code) {
    case "AUTH":
      return new AuthError(msg, opts);
    case "TLS":
      return new TlsError(msg, opts);
    case "CONNECT":
      return e instanceof NoLeaderError
        ? new NoLeaderError(msg, opts)
        : new ConnectError(msg, opts);
    case "CLOSED":
      return new ClosedError(msg, opts);
    case "BUSY":
      return new BusyError(msg, opts);
    default:
      return e;
  }
}

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
   * `leaseMs`. `waitMs` bounds the whole call, connecting included (R1).
   * Rejects with LockTimeoutError (not acquired in time), BusyError (`B`:
   * refused at once, never retried; `protocolCode` says why),
   * IndeterminateError (written but no definite answer — the connection
   * was lost, or no answer within the wait plus `answerAllowanceMs` (R2) —
   * the lock MAY have been granted: do not enter the critical section),
   * CancelledError (the signal aborted: withdrawn, a grant that won the race
   * is released), InsufficientLeaseError (`minRemainingMs` not left: released
   * again), ConnectError (no connection within the wait: nothing was sent),
   * AuthError/TlsError (the servers refuse the configuration), InvalidError
   * (bad argument, or the server's `E`), ClosedError. Retried internally
   * only when never written or answered `M`, within the remaining wait.
   * Every message names the key and, once sent, the server (R15).
   */
  async acquire(
    key: string | Uint8Array,
    opts: AcquireOptions,
  ): Promise<Lease> {
    const kb = keyBytes(key);
    return this.#acquire(key, keyLabel(key), kb, undefined, opts);
  }

  /**
   * `acquire` that resolves with `null` when the lock was not acquired
   * within the wait (instead of LockTimeoutError; R13). Every other outcome
   * is acquire's.
   */
  async tryAcquire(
    key: string | Uint8Array,
    opts: AcquireOptions,
  ): Promise<Lease | null> {
    try {
      return await this.acquire(key, opts);
    } catch (e) {
      if (e instanceof LockTimeoutError) return null;
      throw e;
    }
  }

  async #acquire(
    key: string | Uint8Array | readonly (string | Uint8Array)[],
    label: string,
    kb: Uint8Array,
    set: KeySet | undefined,
    opts: AcquireOptions,
  ): Promise<Lease> {
    const pool = this.#pool;
    const errKey = Array.isArray(key)
      ? undefined
      : (key as string | Uint8Array);
    if (typeof opts !== "object" || opts === null) {
      throw new InvalidError(
        `acquire ${label}: options { leaseMs, waitMs } are required`,
        { key: errKey },
      );
    }
    const leaseMs = durationMs("leaseMs", opts.leaseMs, 1, kb);
    let waitMs = durationMs("waitMs", opts.waitMs ?? 0, 0, kb);
    const minRemaining =
      opts.minRemainingMs === undefined
        ? 0
        : durationMs("minRemainingMs", opts.minRemainingMs, 0, kb);
    const signal = opts.signal;
    let conn: { addr: string } | undefined;
    // R15: the server, once a request was sent (built only for an error).
    const where = (): string => (conn ? ` at ${conn.addr}` : "");
    const cancelled = (): CancelledError =>
      new CancelledError(`acquire ${label}${where()}: cancelled`, {
        cause: signal?.reason,
        key: errKey,
      });
    if (signal?.aborted) throw cancelled();
    if (pool.closed)
      throw new ClosedError(`acquire ${label}: client closed`, {
        key: errKey,
      });
    const start = performance.now();
    const budgetEnd = start + waitMs;
    let moves = 0;
    let rounds = 0;
    const woken = { v: false };
    for (;;) {
      if (signal?.aborted) throw cancelled();
      const c = newCall(set ? Op.AcquireSet : Op.Acquire, kb, errKey ?? kb);
      c.set = set;
      c.leaseMs = leaseMs;
      c.waitMs = waitMs;
      c.counts = waitMs > 0;
      try {
        // R1: the wait bounds the connecting too (giveUp = the wait's end).
        await pool.send(c, budgetEnd, budgetEnd, signal, true);
      } catch (e) {
        if (e instanceof NoSlot) {
          throw new LockTimeoutError(
            `acquire ${label}: no free max_inflight slot within the wait`,
            { key: errKey },
          );
        }
        if (e instanceof CancelledError) throw cancelled();
        throw located(e, `acquire ${label}`, errKey);
      }
      conn = c.conn;
      const w = await pool.waitCall(c, signal);
      if (w !== "done") {
        if (c.conn!.abandon(c)) throw cancelled();
        if (c.fail === "none" && c.status === Status.Granted) {
          this.#releases.compensate(kb, errKey ?? kb, c.value, set);
        }
        throw cancelled();
      }
      if (c.overdue && c.pending) {
        // R2: written, and unanswered past its wait plus the allowance.
        c.conn!.abandon(c);
        throw new IndeterminateError(
          `acquire ${label}${where()}: no answer within the wait (${c.waitMs} ms) plus the answer allowance (${pool.answerAllowanceMs} ms); withdrawn`,
          { key: errKey },
        );
      }
      if (c.fail !== "none") {
        if (c.fail === "lost") {
          if (pool.closed) {
            throw new IndeterminateError(
              `acquire ${label}${where()}: client closed after the request was written`,
              { cause: new ClosedError("client closed"), key: errKey },
            );
          }
          throw new IndeterminateError(
            `acquire ${label}${where()}: connection lost after the request was written: ${describe(c.failErr)}`,
            { cause: c.failErr, key: errKey },
          );
        }
        if (pool.closed)
          throw new ClosedError(`acquire ${label}: client closed`, {
            key: errKey,
          });
        // Never written: retry, on another connection if need be.
      } else {
        switch (c.status) {
          case Status.Granted: {
            const token = c.value;
            // The lease releases with the key bytes and label checked and
            // built here (no second encoding per release).
            const lease = new Lease(
              (o) =>
                this.#releases.release(errKey ?? kb, kb, token, o, set, label),
              key,
              c.value,
              c.sent + c.queued * QUEUED_UNIT_MS + leaseMs,
            );
            if (minRemaining > 0 && lease.remainingMs() < minRemaining) {
              // R14: not enough of the lease left to start the work.
              const left = Math.floor(lease.remainingMs());
              try {
                await lease.release();
              } catch (e) {
                pool.log.warn?.(
                  "ticketing: release of an insufficient lease failed",
                  { err: describe(e) },
                );
              }
              throw new InsufficientLeaseError(
                `acquire ${label}${where()}: ${left} ms of the lease left after the grant, below minRemainingMs ${minRemaining}; released`,
                { key: errKey },
              );
            }
            return lease;
          }
          case Status.Timeout:
            throw new LockTimeoutError(
              `acquire ${label}${where()}: timed out, not acquired`,
              { key: errKey },
            );
          case Status.Busy:
            throw new BusyError(
              `acquire ${label}${where()}: busy (${codeName(c.code)}), not acquired`,
              { protocolCode: c.code, key: errKey },
            );
          case Status.Unknown:
            throw new IndeterminateError(
              `acquire ${label}${where()}: the cluster could not confirm the commit`,
              {
                protocolCode: c.code === 0 ? undefined : c.code,
                key: errKey,
              },
            );
          case Status.Error:
            throw new InvalidError(
              `acquire ${label}${where()}: refused: ${codeName(c.code)}${c.payload?.length ? ": " + c.payload.toString("utf8") : ""}`,
              { protocolCode: c.code, key: errKey },
            );
          case Status.Moved: {
            const addr = c.payload?.toString("latin1") ?? "";
            pool.follow(addr);
            moves++;
            if (moves > MAX_MOVES) {
              rounds++;
              const d = pool.redirectDelay(rounds);
              if (waitMs === 0 || budgetEnd - performance.now() <= d) {
                throw new NoLeaderError(
                  `acquire ${label}${where()}: ${moves} consecutive redirects (last to ${JSON.stringify(addr)})`,
                  { key: errKey },
                );
              }
              try {
                await pool.sleepRedirect(d, pool.leader, woken, signal, true);
              } catch (e) {
                if (e instanceof CancelledError) throw cancelled();
                throw located(e, `acquire ${label}`, errKey);
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
            { key: errKey },
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
    tokenArg(token, key);
    return this.#releases.release(key, kb, token, opts);
  }

  /**
   * Acquires every key of `keys` (2–16 distinct keys) at once, with one
   * lease, one wait and one fencing token (protocol 1.1 key sets,
   * protocol.md §12.2): granted when the set is at the head of every key's
   * queue and all are free; no deadlock between sets. The Lease's `key` is
   * the array; its release frees all keys. Outcomes as acquire's, plus
   * UnsupportedError when the server does not announce KEY_SETS (nothing
   * was sent).
   */
  async acquireSet(
    keys: readonly (string | Uint8Array)[],
    opts: AcquireOptions,
  ): Promise<Lease> {
    const set = keySet(keys);
    return this.#acquire(keys, setLabel(set), set.keys[0]!, set, opts);
  }

  /**
   * Releases the key set `keys` held with `token` (protocol.md §12.2 `X`):
   * the keys must be exactly the set's (any order). Outcomes as release's.
   */
  async releaseSet(
    keys: readonly (string | Uint8Array)[],
    token: bigint,
    opts?: ReleaseOptions,
  ): Promise<void> {
    const set = keySet(keys);
    tokenArg(token, set.keys[0]!);
    return this.#releases.release(
      set.keys[0]!,
      set.keys[0]!,
      token,
      opts,
      set,
      setLabel(set),
    );
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

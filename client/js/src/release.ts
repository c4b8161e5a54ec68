// Releases: by token with a bounded retry window (5 s: protocol.md §5),
// never reported as success without the server's O; releases that go on in
// the background (an aborted release, the compensation of a grant whose
// acquire was abandoned). Internal: Client.release and the pool use it.

import { performance } from "node:perf_hooks";

import {
  AuthError,
  CancelledError,
  ClosedError,
  IndeterminateError,
  InvalidError,
  NotHolderError,
  TlsError,
  UnsupportedError,
} from "./errors.js";
import { newCall, type KeySet } from "./connection.js";
import { describe, keyLabel, type ReleaseOptions } from "./options.js";
import type { Pool } from "./pool.js";
import { Op, Status, codeName } from "./wire.js";

const RELEASE_QUEUE_LEN = 4096;
const MAX_MOVES = 3;

interface RelState {
  key: Uint8Array;
  keyText: string | Uint8Array;
  /** The key (or key set) for messages. */
  label: string;
  /** A key set's release (X, §12.2); undefined: one key. */
  set: KeySet | undefined;
  /** Whether an attempt was (or may have been) written. */
  written: boolean;
  token: bigint;
  deadline: number;
  maybe: boolean;
  moves: number;
  retries: number;
  woken: { v: boolean };
  ref: boolean;
  cause: unknown;
}

export class Releases {
  /** Background releases in progress. */
  private background = 0;
  /** Grants released because their acquire was abandoned (tests, metrics). */
  compensations = 0;

  constructor(private readonly pool: Pool) {}

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
    kb: Uint8Array,
    token: bigint,
    opts?: ReleaseOptions,
    set?: KeySet,
    label = keyLabel(key),
  ): Promise<void> {
    // R7: a closed client fails at once, with Closed: nothing was sent.
    if (this.pool.closed)
      throw new ClosedError(`release ${label}: client closed`, { key });
    const st = this.newState(kb, key, label, set, token, true);
    const signal = opts?.signal;
    if (!signal) return this.releaseAttempts(st);
    if (signal.aborted) {
      this.releaseInBackground(st);
      throw new IndeterminateError(
        `release ${label}: cancelled before confirmation`,
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
          `release ${label}: cancelled before confirmation`,
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

  /** A release's state: its 5 s window starts now. */
  private newState(
    key: Uint8Array,
    keyText: string | Uint8Array,
    label: string,
    set: KeySet | undefined,
    token: bigint,
    ref: boolean,
  ): RelState {
    return {
      key,
      keyText,
      label,
      set,
      written: false,
      token,
      deadline: performance.now() + this.pool.releaseWindow,
      maybe: false,
      moves: 0,
      retries: 0,
      woken: { v: false },
      ref,
      cause: undefined,
    };
  }

  private adopt(job: Promise<void>): void {
    this.background++;
    job
      .catch((e: unknown) => {
        this.pool.log.warn?.("ticketing: background release failed", {
          err: describe(e),
        });
      })
      .finally(() => {
        this.background--;
      });
  }

  private releaseInBackground(st: RelState): boolean {
    if (this.pool.closed || this.background >= RELEASE_QUEUE_LEN) return false;
    st.ref = false;
    this.adopt(this.releaseAttempts(st));
    return true;
  }

  compensate(
    key: Uint8Array,
    keyText: string | Uint8Array,
    token: bigint,
    set?: KeySet,
  ): void {
    this.compensations++;
    const ok = this.releaseInBackground(
      this.newState(
        key,
        keyText,
        set ? setLabel(set) : keyLabel(keyText),
        set,
        token,
        false,
      ),
    );
    if (!ok) {
      this.pool.log.warn?.(
        "ticketing: release queue full; an abandoned grant stays held until its lease ends",
      );
    }
  }

  private giveUp(st: RelState): IndeterminateError {
    const why = st.cause === undefined ? "" : `: ${describe(st.cause)}`;
    return new IndeterminateError(
      `release ${st.label}: not confirmed within ${this.pool.releaseWindow} ms${why}`,
      { cause: st.cause, key: st.keyText },
    );
  }

  /** The client closed: Indeterminate once an attempt was written, else Closed (R7). */
  private closedIndeterminate(st: RelState): IndeterminateError | ClosedError {
    if (!st.written && !st.maybe) {
      return new ClosedError(`release ${st.label}: client closed`, {
        key: st.keyText,
      });
    }
    return new IndeterminateError(
      `release ${st.label}: client closed before confirmation`,
      {
        cause: new ClosedError("client closed"),
        key: st.keyText,
      },
    );
  }

  /** A release's attempts until a definite answer or the 5 s window ends. */
  private async releaseAttempts(st: RelState): Promise<void> {
    const label = st.label;
    for (;;) {
      if (this.pool.closed) throw this.closedIndeterminate(st);
      if (st.deadline - performance.now() <= 0) throw this.giveUp(st);
      const c = newCall(
        st.set ? Op.ReleaseSet : Op.Release,
        st.key,
        st.keyText,
      );
      c.set = st.set;
      c.token = st.token;
      try {
        await this.pool.send(c, st.deadline, st.deadline, undefined, st.ref);
      } catch (e) {
        if (e instanceof ClosedError) throw this.closedIndeterminate(st);
        if (
          !st.written &&
          !st.maybe &&
          (e instanceof AuthError ||
            e instanceof TlsError ||
            e instanceof UnsupportedError)
        ) {
          // Nothing was sent: the configuration error itself (R4, R5).
          const E = e.constructor as typeof AuthError;
          throw new E(`release ${label}: ${e.message}`, {
            cause: e,
            protocolCode: e.protocolCode,
            key: st.keyText,
          });
        }
        st.cause = e;
        throw this.giveUp(st);
      }
      const w = await this.pool.waitCall(
        c,
        undefined,
        st.deadline - performance.now(),
        st.ref,
      );
      if (c.fail !== "unsent") st.written = true;
      const where = (): string => ` at ${c.conn!.addr}`;
      if (w === "timeout") {
        if (c.pending) {
          c.owner = "dropped";
          throw this.giveUp(st);
        }
      }
      let wait = 0;
      if (c.fail !== "none") {
        st.cause = c.failErr;
        if (this.pool.closed || c.failErr instanceof ClosedError)
          throw this.closedIndeterminate(st);
        if (c.fail === "lost") {
          st.maybe = true;
          st.retries++;
          wait = this.pool.redirectDelay(st.retries);
        }
      } else {
        switch (c.status) {
          case Status.Released:
            return;
          case Status.NotHolder:
            if (st.maybe) {
              throw new IndeterminateError(
                `release ${label}${where()}: the token no longer holds the key; an earlier unconfirmed attempt may have released it`,
                { key: st.keyText },
              );
            }
            throw new NotHolderError(
              `release ${label}${where()}: not the holder (the lease may have ended)`,
              {
                key: st.keyText,
              },
            );
          case Status.Moved:
            this.pool.follow(c.payload?.toString("latin1") ?? "");
            st.moves++;
            if (st.moves > MAX_MOVES) {
              st.moves = 0;
              st.retries++;
              wait = this.pool.redirectDelay(st.retries);
            }
            break;
          case Status.Unknown:
            st.maybe = true;
            st.retries++;
            wait = this.pool.redirectDelay(st.retries);
            break;
          default:
            throw new InvalidError(
              `release ${label}${where()}: refused: ${codeName(c.code)}${c.payload?.length ? ": " + c.payload.toString("utf8") : ""}`,
              { protocolCode: c.code, key: st.keyText },
            );
        }
      }
      const known = this.pool.leader;
      try {
        await this.pool.sleepRedirect(
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
}

/** A key set for messages: ["a", "b"]. */
export function setLabel(set: KeySet): string {
  return `[${set.keys.map((k) => keyLabel(Buffer.from(k).toString("utf8"))).join(", ")}]`;
}

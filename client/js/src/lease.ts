import { performance } from "node:perf_hooks";

import type { ReleaseOptions } from "./options.js";

/** The shape of `JSON.stringify(lease)`. */
export type LeaseJSON = (
  | { key: string }
  | { keyHex: string }
  | { keys: string[] }
) & {
  /** The fencing token, decimal. */
  token: string;
  deadline: number;
  released: boolean;
};

/**
 * A granted lock: its key, fencing token and conservative local deadline.
 * Release it with `release()`, `await using`, or use `Client.withLock`.
 * Ownership is the token: any code (or process) holding it may release.
 */
export class Lease implements AsyncDisposable {
  /** The locked key, as given to acquire (a key set's keys for acquireSet). */
  readonly key: string | Uint8Array | readonly (string | Uint8Array)[];
  /**
   * The fencing token (u64, exact): strictly greater than every token issued
   * before it. Pass it to every resource the lock protects; the resource
   * must reject a token lower than the highest it has seen, with the check
   * and the write in one transaction.
   */
  readonly token: bigint;
  /**
   * The conservative local end of the lease on the `performance.now()`
   * clock: the time just before the acquire was written, plus the time the
   * server reports it waited in the queue, plus the lease. Keep a margin.
   */
  readonly deadline: number;

  #release: (opts?: ReleaseOptions) => Promise<void>;
  #released = false;
  #releasing: Promise<void> | undefined;
  #ac: AbortController | undefined;
  #timer: NodeJS.Timeout | undefined;

  /** @internal */
  constructor(
    release: (opts?: ReleaseOptions) => Promise<void>,
    key: string | Uint8Array | readonly (string | Uint8Array)[],
    token: bigint,
    deadline: number,
  ) {
    this.#release = release;
    this.key =
      typeof key === "string"
        ? key
        : key instanceof Uint8Array
          ? Uint8Array.from(key)
          : Object.freeze(
              key.map((k) => (typeof k === "string" ? k : Uint8Array.from(k))),
            );
    this.token = token;
    this.deadline = deadline;
  }

  /** Milliseconds until `deadline` (0 once passed). */
  remainingMs(): number {
    return Math.max(0, this.deadline - performance.now());
  }

  /** Whether the local deadline has passed: the lock may belong to someone else. */
  get expired(): boolean {
    return performance.now() >= this.deadline;
  }

  /** True once the server confirmed the release (`O`). */
  get released(): boolean {
    return this.#released;
  }

  /**
   * Aborted at `deadline` or when release() is called, whichever comes
   * first: the lock must be considered lost then. Once this signal has been
   * read, its timer keeps the process alive until the deadline or the
   * release (a program whose only pending work is awaiting this signal
   * would otherwise exit with code 13 while holding the lock, issue 32
   * finding 2); a lease whose signal is never read keeps nothing alive.
   */
  get signal(): AbortSignal {
    if (!this.#ac) {
      const ac = new AbortController();
      this.#ac = ac;
      const d = this.remainingMs();
      if (this.#releasing || this.#released || d <= 0) {
        ac.abort(new Error("lease ended"));
      } else {
        // +1: timers may fire up to a millisecond early on performance.now()'s clock
        this.#timer = setTimeout(
          () => ac.abort(new Error("lease deadline passed")),
          Math.ceil(d) + 1,
        );
      }
    }
    return this.#ac.signal;
  }

  /**
   * An AbortSignal that aborts `marginMs` before the deadline (or at once
   * when less time is left, or when release() is called): the cue to stop
   * or hand over before the lease ends. Like `signal`, it keeps the process
   * alive until it fires or the lease is released.
   */
  expiringSignal(marginMs: number): AbortSignal {
    const ac = new AbortController();
    const d = this.remainingMs() - Math.max(0, marginMs);
    if (this.#releasing || this.#released || d <= 0) {
      ac.abort(new Error("lease about to end"));
      return ac.signal;
    }
    const t = setTimeout(
      () => ac.abort(new Error("lease about to end")),
      Math.ceil(d) + 1,
    );
    const whole = this.signal;
    whole.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        if (!ac.signal.aborted) ac.abort(whole.reason);
      },
      { once: true },
    );
    return ac.signal;
  }

  #lost(reason: string): void {
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#ac && !this.#ac.signal.aborted) this.#ac.abort(new Error(reason));
  }

  /**
   * Releases the lock. Resolves only when the server confirmed it (`O`),
   * with `true`. Releasing a lease object again is a no-op that resolves
   * with `false` ("already released", issue 31 R6; a concurrent call shares
   * the attempt and resolves `false` too); a call after a failure tries
   * again. NotHolderError: the lease had already ended.
   * IndeterminateError: not confirmed within 5 s. ClosedError: the client
   * was closed before anything was sent.
   */
  async release(opts?: ReleaseOptions): Promise<boolean> {
    if (this.#released) return false;
    if (this.#releasing) {
      await this.#releasing;
      return false;
    }
    this.#lost("lease released");
    const p = this.#release(opts);
    this.#releasing = p;
    try {
      await p;
      this.#released = true;
      return true;
    } finally {
      this.#releasing = undefined;
    }
  }

  /** `await using lease = await client.acquire(…)` releases at scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /**
   * `JSON.stringify(lease)`: the key (a byte key as `keyHex`), the fencing
   * token as a decimal string (JSON has no u64: a number would round above
   * 2^53), the deadline and whether the release was confirmed. The fencing
   * token is not a secret (the client token never appears here).
   */
  toJSON(): LeaseJSON {
    const one = (k: string | Uint8Array): string =>
      typeof k === "string" ? k : Buffer.from(k).toString("hex");
    const key = this.key;
    const k: Record<string, unknown> =
      typeof key === "string"
        ? { key }
        : key instanceof Uint8Array
          ? { keyHex: one(key) }
          : { keys: (key as readonly (string | Uint8Array)[]).map(one) };
    return {
      ...k,
      token: this.token.toString(),
      deadline: this.deadline,
      released: this.#released,
    } as LeaseJSON;
  }
}

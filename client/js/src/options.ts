// The public option types and the argument checks done before anything is
// sent (issue 31 R8): keys, durations, addresses.

import type * as tls from "node:tls";

import { InvalidError } from "./errors.js";
import { validKey } from "./wire.js";

export const U32_MAX = 0xffffffff;

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
  token?: string | null | undefined;
  /**
   * TLS (1.2 or later): `true` for the system CAs, or node:tls options
   * (`ca`, `cert`, `key`, `servername`, …). Absent/false: plain TCP.
   */
  tls?: boolean | tls.ConnectionOptions | null | undefined;
  /**
   * Bounds one connection attempt (TCP, TLS and handshake), how long
   * connect() waits for the first connection, and how long an operation
   * waits for a connection when none is up. Default 5000.
   */
  connectTimeoutMs?: number | undefined;
  /**
   * How long past its wait an acquire that was written may stay unanswered
   * before it ends with IndeterminateError and is withdrawn with `C`
   * (issue 31 R2: no call outlives a silent server), counted from its
   * write. Default 3000.
   */
  answerAllowanceMs?: number | undefined;
  /**
   * The connection label shown to operators in `locks` (protocol.md §12.3;
   * servers of protocol 1.1). Default `<host>/<pid> js/<version>`, after
   * `appName` when given; cut to 64 bytes.
   */
  label?: string | undefined;
  /** An application name put before the default label. */
  appName?: string | undefined;
  logger?: Logger | undefined;
}

/** @internal Test hooks (never part of the published types). */
export interface TestHooks {
  backoffBaseMs?: number;
  backoffCapMs?: number;
  releaseWindowMs?: number;
  onReconnect?: (addr: string, attempt: number, delayMs: number) => void;
}

export interface AcquireOptions {
  /** Lease in ms (1..2^32−1, rounded up to whole ms). */
  leaseMs: number;
  /** Longest wait in the key's queue in ms; 0 (the default) = try once. */
  waitMs?: number | undefined;
  /** Aborting withdraws the acquire (`C`); a grant that won the race is released. */
  signal?: AbortSignal | undefined;
  /**
   * The minimum working time (issue 31 R14): when less of the lease than
   * this is left after the grant (a long queue ate it), the client releases
   * the lock and rejects with InsufficientLeaseError. Default: no minimum.
   */
  minRemainingMs?: number | undefined;
}

export interface ReleaseOptions {
  /** Stop waiting; the release goes on in the background (≤ 5 s). */
  signal?: AbortSignal | undefined;
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

export function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A UTF-8 key from a string or bytes, checked as the server would (§2.1). */
export function keyBytes(key: string | Uint8Array): Uint8Array {
  let b: Uint8Array;
  if (typeof key === "string") {
    if (!key.isWellFormed()) {
      throw new InvalidError(
        "key must be 1..250 bytes of valid UTF-8: it holds a lone UTF-16 surrogate (not well-formed Unicode)",
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
      `key must be 1..250 bytes of UTF-8 without control characters (got ${b.length} bytes)`,
      { key },
    );
  }
  return b;
}

/** A fencing token argument: a bigint in 1..2^64-1 (token 0 is never issued: R8). */
export function tokenArg(token: unknown, key: string | Uint8Array): bigint {
  if (typeof token !== "bigint" || token < 1n || token >= 1n << 64n) {
    throw new InvalidError(
      `token must be a bigint in 1..2^64-1 (got ${typeof token === "bigint" ? token.toString() : typeof token})`,
      { key },
    );
  }
  return token;
}

export function durationMs(
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

export function keyLabel(key: string | Uint8Array): string {
  return typeof key === "string"
    ? JSON.stringify(key)
    : `0x${Buffer.from(key).toString("hex")}`;
}

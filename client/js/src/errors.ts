import { codeName } from "./codes.js";

/** The kind of a TicketingError. */
export type ErrorCode =
  | "TIMEOUT"
  | "BUSY"
  | "INDETERMINATE"
  | "NOT_HOLDER"
  | "AUTH"
  | "TLS"
  | "CONNECT"
  | "INVALID"
  | "PROTOCOL"
  | "CANCELLED"
  | "CLOSED"
  | "INSUFFICIENT_LEASE"
  | "UNSUPPORTED";

export interface TicketingErrorOptions {
  cause?: unknown;
  /** The protocol.md §4 code the server sent, when it sent one. */
  protocolCode?: number;
  /** The key of the lock operation, when there is one. */
  key?: string | Uint8Array;
}

/**
 * Every error the client throws (or rejects with) is a TicketingError:
 * branch on `code` (or `instanceof` a subclass).
 */
export class TicketingError extends Error {
  readonly code: ErrorCode;
  /** The protocol.md §4 code the server sent (BUSY, INVALID, AUTH), if any. */
  readonly protocolCode: number | undefined;
  readonly key: string | Uint8Array | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options: TicketingErrorOptions = {},
  ) {
    super(
      message,
      options.cause === undefined ? undefined : { cause: options.cause },
    );
    this.name = "TicketingError";
    this.code = code;
    this.protocolCode = options.protocolCode;
    this.key = options.key;
  }

  /** The §4 name of protocolCode ("QUEUE_FULL"), if any. */
  get protocolCodeName(): string | undefined {
    return this.protocolCode === undefined
      ? undefined
      : codeName(this.protocolCode);
  }
}

/** `T`: not acquired within the wait (or wait 0 on a held key). */
export class LockTimeoutError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("TIMEOUT", message, options);
    this.name = "LockTimeoutError";
  }
}

/** `B`: definitely not acquired and not queued; `protocolCode` says why. */
export class BusyError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("BUSY", message, options);
    this.name = "BusyError";
  }
}

/**
 * The request was sent and no definite answer came (connection lost, or a
 * cluster answered `U`). For an acquire the lock MAY have been granted: do
 * not enter the critical section (the lease ends it at the latest). For a
 * release: not confirmed; the lock may stay held until its lease ends.
 */
export class IndeterminateError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("INDETERMINATE", message, options);
    this.name = "IndeterminateError";
  }
}

/** `N` on release: the key is free or held under another token. */
export class NotHolderError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("NOT_HOLDER", message, options);
    this.name = "NotHolderError";
  }
}

/** REJECT AUTH_FAILED/BAD_HANDSHAKE, or the server failed its proof. */
export class AuthError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("AUTH", message, options);
    this.name = "AuthError";
  }
}

/** The TLS handshake or certificate verification failed. */
export class TlsError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("TLS", message, options);
    this.name = "TlsError";
  }
}

/** No connection within the connect budget; nothing was executed. */
export class ConnectError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("CONNECT", message, options);
    this.name = "ConnectError";
  }
}

/** A cluster kept answering `M` (no leader) within the budget; nothing was executed. */
export class NoLeaderError extends ConnectError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super(message, options);
    this.name = "NoLeaderError";
  }
}

/** A bad argument (checked before anything is sent) or the server's `E`. */
export class InvalidError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("INVALID", message, options);
    this.name = "InvalidError";
  }
}

/** The peer broke the protocol. */
export class ProtocolError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("PROTOCOL", message, options);
    this.name = "ProtocolError";
  }
}

/**
 * The caller's AbortSignal ended the operation. For an acquire: not
 * acquired (a queued acquire was withdrawn, a grant that won the race is
 * released by the client). Its `name` is `"AbortError"`, as the platform's
 * (`fetch`, `timers/promises`, `events.once`) so the usual
 * `e.name === "AbortError"` check holds; `cause` is the signal's reason.
 * Still a TicketingError with code `CANCELLED`.
 */
export class CancelledError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("CANCELLED", message, options);
    this.name = "AbortError";
  }
}

/** The client was closed. */
export class ClosedError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("CLOSED", message, options);
    this.name = "ClosedError";
  }
}

/**
 * Acquired, but less of the lease was left after the grant than the
 * acquire's `minRemainingMs` (a long queue ate it): the client released the
 * lock before reporting this (issue 31 R14). Not acquired.
 */
export class InsufficientLeaseError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("INSUFFICIENT_LEASE", message, options);
    this.name = "InsufficientLeaseError";
  }
}

/** The server does not announce the feature the call needs (protocol.md §12.1); nothing was sent. */
export class UnsupportedError extends TicketingError {
  constructor(message: string, options?: TicketingErrorOptions) {
    super("UNSUPPORTED", message, options);
    this.name = "UnsupportedError";
  }
}

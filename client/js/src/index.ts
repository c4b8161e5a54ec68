/**
 * Official Node.js client of the Ticketing lock server.
 *
 * ```ts
 * import { Client } from "ticketing-client";
 * const client = await Client.connect({ addrs: ["127.0.0.1:7470"] });
 * await using lease = await client.acquire("orders/42", { leaseMs: 30_000, waitMs: 5_000 });
 * await writeWithFencing(lease.token);
 * ```
 */
import "./polyfill.js";

export { Client, VERSION } from "./client.js";
export type {
  AcquireOptions,
  ConnectOptions,
  Logger,
  ReleaseOptions,
} from "./options.js";
export { Lease, type LeaseJSON } from "./lease.js";
export {
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
  NotHolderError,
  ProtocolError,
  TicketingError,
  TlsError,
  UnsupportedError,
  type ErrorCode,
  type TicketingErrorOptions,
} from "./errors.js";
export { Code, codeName } from "./codes.js";

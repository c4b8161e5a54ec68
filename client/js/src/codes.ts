// The protocol.md §4 reason codes (public: errors carry them).

/** Reason codes (§4). */
export const Code = {
  NONE: 0,
  QUEUE_FULL: 1,
  OVERLOADED: 2,
  CLOCK_UNHEALTHY: 3,
  SHUTTING_DOWN: 4,
  NO_QUORUM: 5,
  BAD_HANDSHAKE: 10,
  AUTH_FAILED: 11,
  TLS_REQUIRED: 12,
  BAD_OP: 20,
  BAD_KEY: 21,
  BAD_LEASE: 22,
  BAD_WAIT: 23,
  BAD_FLAGS: 24,
  DUPLICATE_REQ_ID: 25,
  BAD_ADMIN: 26,
  NOT_PERMITTED: 27,
  INTERNAL: 28,
  BAD_KEYSET: 29,
  BAD_LABEL: 30,
} as const;

const codeNames = new Map<number, string>(
  Object.entries(Code).map(([k, v]) => [v, k]),
);

/** The §4 name of a code ("QUEUE_FULL"), or "CODE_n" for an unknown one. */
export function codeName(code: number): string {
  return codeNames.get(code) ?? `CODE_${code}`;
}

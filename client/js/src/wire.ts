// The v1 wire codec (docs/protocol.md): fixed-offset frames, big-endian.
// Pure functions over Uint8Array/Buffer; no I/O.

import { createHmac, timingSafeEqual } from "node:crypto";

export const HEADER_LEN = 16;
export const HELLO_LEN = 40;
export const AUTH_LEN = 72;
export const WELCOME_LEN = 40;
export const NONCE_LEN = 32;
export const PROOF_LEN = 32;
export const MAX_KEY_LEN = 250;
export const MAX_MOVED_PAYLOAD = 255;
export const MAX_ERROR_PAYLOAD = 1024;
export const MAX_ADMIN_REPLY = 16 << 20;
export const MAX_ADMIN_BODY = 65536;
export const QUEUED_UNIT_MS = 16;
export const VERSION = 1;
export const HELLO_FLAG_TOKENS = 1;

export const HELLO_MAGIC = Buffer.from("TKTS", "ascii");
export const AUTH_MAGIC = Buffer.from("TKTC", "ascii");

/** Request ops (§2). */
export const Op = {
  Acquire: 0x41,
  Release: 0x52,
  Cancel: 0x43,
  Ping: 0x50,
  Query: 0x51,
  /** 1.1 (§12.2): acquire a key set. */
  AcquireSet: 0x53,
  /** 1.1 (§12.2): release a key set. */
  ReleaseSet: 0x58,
  /** 1.1 (§12.3): set the connection label. */
  Label: 0x4c,
} as const;

/** Feature bits of the 1.1 feature pong (§12.1), in its queued field. */
export const Feature = {
  KeySets: 0x0001,
  Labels: 0x0002,
  TlsHint: 0x0004,
} as const;
/** The ping arg that asks a 1.1 server for its features (§12.1). */
export const PING_FEATURES = 1n;
export const MIN_SET_KEYS = 2;
export const MAX_SET_KEYS = 16;
export const MAX_SET_BODY = MAX_SET_KEYS * (1 + MAX_KEY_LEN);
export const MAX_LABEL_LEN = 64;
export type OpByte = (typeof Op)[keyof typeof Op];

/** Response statuses (§3). */
export const Status = {
  Granted: 0x47,
  Timeout: 0x54,
  Busy: 0x42,
  Released: 0x4f,
  NotHolder: 0x4e,
  Moved: 0x4d,
  Unknown: 0x55,
  Error: 0x45,
  Pong: 0x50,
  Admin: 0x4a,
} as const;

/** Roles (§1). */
export const Role = { Client: 1, Admin: 2, Peer: 3 } as const;

export { Code, codeName } from "./codes.js";

/** Thrown by the decoders for bytes that break the protocol. */
export class WireError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WireError";
  }
}

const validStatuses = new Set<number>(Object.values(Status));

export function statusHasPayload(st: number): boolean {
  return st === Status.Moved || st === Status.Error || st === Status.Admin;
}

export function statusMaxPayload(st: number): number {
  switch (st) {
    case Status.Moved:
      return MAX_MOVED_PAYLOAD;
    case Status.Error:
      return MAX_ERROR_PAYLOAD;
    case Status.Admin:
      return MAX_ADMIN_REPLY;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Requests

function requestHeader(
  out: Buffer,
  op: number,
  keyLen: number,
  reqId: number,
  argHi: number,
  argLo: number,
): void {
  out[0] = op;
  out[1] = keyLen;
  out.writeUInt16BE(0, 2);
  out.writeUInt32BE(reqId >>> 0, 4);
  out.writeUInt32BE(argHi >>> 0, 8);
  out.writeUInt32BE(argLo >>> 0, 12);
}

/** An acquire frame: lease and wait in ms (u32 each). */
export function encodeAcquire(
  reqId: number,
  key: Uint8Array,
  leaseMs: number,
  waitMs: number,
): Buffer {
  const b = Buffer.allocUnsafe(HEADER_LEN + key.length);
  requestHeader(b, Op.Acquire, key.length, reqId, leaseMs, waitMs);
  b.set(key, HEADER_LEN);
  return b;
}

/** A release frame with the u64 fencing token. */
export function encodeRelease(
  reqId: number,
  key: Uint8Array,
  token: bigint,
): Buffer {
  const b = Buffer.allocUnsafe(HEADER_LEN + key.length);
  requestHeader(b, Op.Release, key.length, reqId, 0, 0);
  b.writeBigUInt64BE(BigInt.asUintN(64, token), 8);
  b.set(key, HEADER_LEN);
  return b;
}

/** A cancel frame withdrawing this connection's queued acquire `target`. */
export function encodeCancel(
  reqId: number,
  key: Uint8Array,
  target: number,
): Buffer {
  const b = Buffer.allocUnsafe(HEADER_LEN + key.length);
  requestHeader(b, Op.Cancel, key.length, reqId, target, 0);
  b.set(key, HEADER_LEN);
  return b;
}

export function encodePing(reqId: number, arg = 0n): Buffer {
  const b = Buffer.allocUnsafe(HEADER_LEN);
  requestHeader(b, Op.Ping, 0, reqId, 0, 0);
  b.writeBigUInt64BE(BigInt.asUintN(64, arg), 8);
  return b;
}

/**
 * The body of an S or X frame (§12.2): key_len ‖ key for each key, in the
 * caller's order. The caller has checked each key and the count.
 */
export function encodeKeySetBody(keys: readonly Uint8Array[]): Buffer {
  let n = 0;
  for (const k of keys) n += 1 + k.length;
  const b = Buffer.allocUnsafe(n);
  let o = 0;
  for (const k of keys) {
    b[o++] = k.length;
    b.set(k, o);
    o += k.length;
  }
  return b;
}

function setHeader(
  out: Buffer,
  op: number,
  count: number,
  bodyLen: number,
  reqId: number,
): void {
  out[0] = op;
  out[1] = count;
  out.writeUInt16BE(bodyLen, 2);
  out.writeUInt32BE(reqId >>> 0, 4);
}

/** An S frame (§12.2): acquire `count` keys (body from encodeKeySetBody). */
export function encodeAcquireSet(
  reqId: number,
  count: number,
  body: Uint8Array,
  leaseMs: number,
  waitMs: number,
): Buffer {
  const b = Buffer.allocUnsafe(HEADER_LEN + body.length);
  setHeader(b, Op.AcquireSet, count, body.length, reqId);
  b.writeUInt32BE(leaseMs >>> 0, 8);
  b.writeUInt32BE(waitMs >>> 0, 12);
  b.set(body, HEADER_LEN);
  return b;
}

/** An X frame (§12.2): release the set held with token. */
export function encodeReleaseSet(
  reqId: number,
  count: number,
  body: Uint8Array,
  token: bigint,
): Buffer {
  const b = Buffer.allocUnsafe(HEADER_LEN + body.length);
  setHeader(b, Op.ReleaseSet, count, body.length, reqId);
  b.writeBigUInt64BE(BigInt.asUintN(64, token), 8);
  b.set(body, HEADER_LEN);
  return b;
}

/** An L frame (§12.3): the connection label (0–64 bytes of UTF-8). */
export function encodeLabel(reqId: number, label: Uint8Array): Buffer {
  const b = Buffer.alloc(HEADER_LEN + label.length);
  b[0] = Op.Label;
  b[1] = label.length;
  b.writeUInt32BE(reqId >>> 0, 4);
  b.set(label, HEADER_LEN);
  return b;
}

/**
 * label cut at a character boundary to at most 64 bytes of UTF-8, control
 * characters replaced by spaces (§12.3: a label is never sent too long).
 */
export function cutLabel(label: string): Buffer {
  let clean = "";
  for (const ch of label.toWellFormed()) {
    const cp = ch.codePointAt(0)!;
    clean += cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) ? " " : ch;
  }
  let out = Buffer.from(clean, "utf8");
  if (out.length <= MAX_LABEL_LEN) return out;
  let n = MAX_LABEL_LEN;
  while (n > 0 && (out[n]! & 0xc0) === 0x80) n--; // not inside a character
  out = out.subarray(0, n);
  return Buffer.from(out);
}

export function encodeQuery(reqId: number, body: Uint8Array): Buffer {
  const b = Buffer.allocUnsafe(HEADER_LEN + body.length);
  requestHeader(b, Op.Query, 0, reqId, body.length, 0);
  b.set(body, HEADER_LEN);
  return b;
}

/** A decoded request (used by tests and fake servers). */
export interface Request {
  op: number;
  keyLen: number;
  flags: number;
  reqId: number;
  arg: bigint;
  argHi: number;
  argLo: number;
  key: Buffer;
  body: Buffer;
}

/**
 * Decodes one request from the start of b; null when incomplete. Throws
 * WireError for an unknown op or an oversized admin body.
 */
export function decodeRequest(
  b: Buffer,
): { req: Request; size: number } | null {
  if (b.length < HEADER_LEN) return null;
  const op = b[0]!;
  if (!(Object.values(Op) as number[]).includes(op)) {
    throw new WireError(`unknown op 0x${op.toString(16)}`);
  }
  const argHi = b.readUInt32BE(8);
  let size: number;
  const bodyOp =
    op === Op.Query || op === Op.AcquireSet || op === Op.ReleaseSet;
  if (op === Op.Query) {
    if (argHi > MAX_ADMIN_BODY) throw new WireError("admin body too large");
    size = HEADER_LEN + argHi;
  } else if (op === Op.AcquireSet || op === Op.ReleaseSet) {
    size = HEADER_LEN + b.readUInt16BE(2); // §12.2: body_len
  } else {
    size = HEADER_LEN + b[1]!;
  }
  if (b.length < size) return null;
  const tail = Buffer.from(b.subarray(HEADER_LEN, size));
  return {
    size,
    req: {
      op,
      keyLen: b[1]!,
      flags: b.readUInt16BE(2),
      reqId: b.readUInt32BE(4),
      arg: b.readBigUInt64BE(8),
      argHi,
      argLo: b.readUInt32BE(12),
      key: bodyOp ? Buffer.alloc(0) : tail,
      body: bodyOp ? tail : Buffer.alloc(0),
    },
  };
}

// ---------------------------------------------------------------------------
// Responses

/** A decoded response (§3). */
export interface Response {
  status: number;
  code: number;
  /** G: the time waited in the queue, in 16 ms units. */
  queued: number;
  reqId: number;
  /** G: the fencing token; P: server time in µs; M E J: payload length. */
  value: bigint;
  /** M: leader address; E: message; J: JSON. Empty otherwise. */
  payload: Buffer;
}

/**
 * The full length of the response whose header starts b (16 + payload for
 * M E J). Throws WireError for an unknown status or an oversized payload:
 * both are fatal to the stream.
 */
export function responseFrameLen(b: Uint8Array): number {
  const st = b[0]!;
  if (!validStatuses.has(st)) {
    throw new WireError(`unknown response status 0x${st.toString(16)}`);
  }
  if (!statusHasPayload(st)) return HEADER_LEN;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const hi = dv.getUint32(8);
  const lo = dv.getUint32(12);
  if (hi !== 0 || lo > statusMaxPayload(st)) {
    throw new WireError(
      `response payload of ${hi * 2 ** 32 + lo} bytes above the limit for status ${String.fromCharCode(st)}`,
    );
  }
  return HEADER_LEN + lo;
}

/**
 * Decodes one response from the start of b; null when b holds an incomplete
 * frame. Throws WireError (fatal: the stream cannot be resynchronized).
 * The payload is copied, so b may be reused.
 */
export function decodeResponse(
  b: Buffer,
): { resp: Response; size: number } | null {
  if (b.length < HEADER_LEN) return null;
  const size = responseFrameLen(b);
  if (b.length < size) return null;
  return {
    size,
    resp: {
      status: b[0]!,
      code: b[1]!,
      queued: b.readUInt16BE(2),
      reqId: b.readUInt32BE(4),
      value: b.readBigUInt64BE(8),
      payload:
        size > HEADER_LEN
          ? Buffer.from(b.subarray(HEADER_LEN, size))
          : Buffer.alloc(0),
    },
  };
}

/** Encodes a response (tests, fake servers). */
export function encodeResponse(r: {
  status: number;
  code?: number;
  queued?: number;
  reqId: number;
  value?: bigint;
  payload?: Uint8Array;
}): Buffer {
  const payload = r.payload ?? new Uint8Array(0);
  const b = Buffer.alloc(HEADER_LEN + payload.length);
  b[0] = r.status;
  b[1] = r.code ?? 0;
  b.writeUInt16BE(r.queued ?? 0, 2);
  b.writeUInt32BE(r.reqId >>> 0, 4);
  const value = statusHasPayload(r.status)
    ? BigInt(payload.length)
    : (r.value ?? 0n);
  b.writeBigUInt64BE(value, 8);
  b.set(payload, HEADER_LEN);
  return b;
}

/**
 * A streaming response decoder: push chunks, take complete responses. Its
 * buffer never holds more than one partial frame (≤ 16 + 16 MiB), so the
 * network cannot grow it without bound.
 */
export class ResponseDecoder {
  private buf: Buffer = Buffer.alloc(0);

  /**
   * Appends a chunk and pushes every complete response onto out; throws
   * WireError (after pushing the responses before the bad frame).
   */
  push(chunk: Buffer, out: Response[]): void {
    let b = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    try {
      for (;;) {
        const r = decodeResponse(b);
        if (r === null) break;
        out.push(r.resp);
        b = b.subarray(r.size);
      }
    } catch (e) {
      this.buf = Buffer.alloc(0);
      throw e;
    }
    // Keep only the partial frame (copied, so a large chunk is not retained).
    this.buf = b.length === 0 ? Buffer.alloc(0) : Buffer.from(b);
  }

  /** Bytes of an incomplete frame held. */
  get buffered(): number {
    return this.buf.length;
  }
}

// ---------------------------------------------------------------------------
// Handshake (§1)

export interface Hello {
  flags: number;
  nonce: Buffer;
}

export function decodeHello(b: Buffer): Hello {
  if (b.length < HELLO_LEN) throw new WireError("short HELLO");
  if (!b.subarray(0, 4).equals(HELLO_MAGIC)) {
    throw new WireError("not a ticketing v1 server: bad HELLO magic");
  }
  if (b[4] !== VERSION) {
    throw new WireError(`unknown protocol version ${b[4]}`);
  }
  if ((b[5]! & ~HELLO_FLAG_TOKENS) !== 0 || b[6] !== 0 || b[7] !== 0) {
    throw new WireError("nonzero reserved bytes in HELLO");
  }
  return { flags: b[5]!, nonce: Buffer.from(b.subarray(8, 40)) };
}

export function encodeHello(h: Hello): Buffer {
  const b = Buffer.alloc(HELLO_LEN);
  HELLO_MAGIC.copy(b, 0);
  b[4] = VERSION;
  b[5] = h.flags;
  h.nonce.copy(b, 8);
  return b;
}

export interface Auth {
  role: number;
  nonce: Buffer;
  proof: Buffer;
}

export function encodeAuth(a: Auth): Buffer {
  const b = Buffer.alloc(AUTH_LEN);
  AUTH_MAGIC.copy(b, 0);
  b[4] = VERSION;
  b[5] = a.role;
  a.nonce.copy(b, 8);
  a.proof.copy(b, 40);
  return b;
}

export function decodeAuth(b: Buffer): Auth {
  if (b.length < AUTH_LEN) throw new WireError("short AUTH");
  if (!b.subarray(0, 4).equals(AUTH_MAGIC)) throw new WireError("bad magic");
  if (b[4] !== VERSION) throw new WireError("bad version");
  if (b[5]! < 1 || b[5]! > 3) throw new WireError("bad role");
  if (b[6] !== 0 || b[7] !== 0) throw new WireError("bad reserved");
  return {
    role: b[5]!,
    nonce: Buffer.from(b.subarray(8, 40)),
    proof: Buffer.from(b.subarray(40, 72)),
  };
}

export const WELCOME_ACCEPTED = 0x4b;
export const WELCOME_REJECTED = 0x45;

export interface Welcome {
  status: number;
  code: number;
  maxInflight: number;
  proof: Buffer;
}

export function decodeWelcome(b: Buffer): Welcome {
  if (b.length < WELCOME_LEN) throw new WireError("short WELCOME");
  if (b[0] !== WELCOME_ACCEPTED && b[0] !== WELCOME_REJECTED) {
    throw new WireError(`bad WELCOME status 0x${b[0]!.toString(16)}`);
  }
  if (b[2] !== 0 || b[3] !== 0) {
    throw new WireError("nonzero reserved bytes in WELCOME");
  }
  return {
    status: b[0]!,
    code: b[1]!,
    maxInflight: b.readUInt32BE(4),
    proof: Buffer.from(b.subarray(8, 40)),
  };
}

export function encodeWelcome(w: Welcome): Buffer {
  const b = Buffer.alloc(WELCOME_LEN);
  b[0] = w.status;
  b[1] = w.code;
  b.writeUInt32BE(w.maxInflight >>> 0, 4);
  w.proof.copy(b, 8);
  return b;
}

function proof(
  token: Uint8Array,
  label: string,
  role: number,
  first: Uint8Array,
  second: Uint8Array,
): Buffer {
  const m = createHmac("sha256", token);
  m.update(label);
  m.update(Uint8Array.of(role));
  m.update(first);
  m.update(second);
  return m.digest();
}

/** HMAC-SHA256(token, "ticketing-v1-client" ‖ role ‖ server_nonce ‖ client_nonce). */
export function clientProof(
  token: Uint8Array,
  role: number,
  serverNonce: Uint8Array,
  clientNonce: Uint8Array,
): Buffer {
  return proof(token, "ticketing-v1-client", role, serverNonce, clientNonce);
}

/** HMAC-SHA256(token, "ticketing-v1-server" ‖ role ‖ client_nonce ‖ server_nonce). */
export function serverProof(
  token: Uint8Array,
  role: number,
  clientNonce: Uint8Array,
  serverNonce: Uint8Array,
): Buffer {
  return proof(token, "ticketing-v1-server", role, clientNonce, serverNonce);
}

/** Constant-time comparison of two proofs. */
export function proofEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

// ---------------------------------------------------------------------------
// Keys (§2.1 check 5)

/**
 * Whether k is a valid key: 1..250 bytes of valid UTF-8 (RFC 3629: no
 * surrogates, no overlong forms, at most U+10FFFF) without control
 * characters (U+0000–U+001F, U+007F–U+009F).
 */
export function validKey(k: Uint8Array): boolean {
  const n = k.length;
  if (n === 0 || n > MAX_KEY_LEN) return false;
  let i = 0;
  while (i < n) {
    const c0 = k[i]!;
    if (c0 < 0x80) {
      if (c0 < 0x20 || c0 === 0x7f) return false;
      i++;
      continue;
    }
    const cont = (j: number): boolean =>
      i + j < n && (k[i + j]! & 0xc0) === 0x80;
    if (c0 >= 0xc2 && c0 <= 0xdf) {
      if (!cont(1)) return false;
      const r = ((c0 & 0x1f) << 6) | (k[i + 1]! & 0x3f);
      if (r <= 0x9f) return false; // U+0080–U+009F
      i += 2;
    } else if (c0 >= 0xe0 && c0 <= 0xef) {
      if (!cont(1) || !cont(2)) return false;
      if (c0 === 0xe0 && k[i + 1]! < 0xa0) return false;
      if (c0 === 0xed && k[i + 1]! > 0x9f) return false;
      i += 3;
    } else if (c0 >= 0xf0 && c0 <= 0xf4) {
      if (!cont(1) || !cont(2) || !cont(3)) return false;
      if (c0 === 0xf0 && k[i + 1]! < 0x90) return false;
      if (c0 === 0xf4 && k[i + 1]! > 0x8f) return false;
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

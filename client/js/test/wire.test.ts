import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import * as wire from "../src/wire.js";
import { goldenDir, readGolden } from "./helpers.js";

const serverNonce = Buffer.from(Array.from({ length: 32 }, (_, i) => i));
const clientNonce = Buffer.from(Array.from({ length: 32 }, (_, i) => 0x20 + i));
const s3cret = Buffer.from("s3cret");
const noToken = Buffer.alloc(0);
const T = (lo: number): bigint => (1700000000000n << 20n) + BigInt(lo);

type Resp = {
  status: number;
  code?: number;
  queued?: number;
  reqId: number;
  value?: bigint;
  payload?: string;
};
const responses: Record<string, Resp> = {
  "resp_admin.hex": {
    status: wire.Status.Admin,
    reqId: 6,
    payload: '{"unix_us":1700000000123456}',
  },
  "resp_busy_clock_unhealthy.hex": {
    status: wire.Status.Busy,
    code: 3,
    reqId: 9,
  },
  "resp_busy_no_quorum.hex": { status: wire.Status.Busy, code: 5, reqId: 11 },
  "resp_busy_overloaded.hex": { status: wire.Status.Busy, code: 2, reqId: 8 },
  "resp_busy_queue_full.hex": { status: wire.Status.Busy, code: 1, reqId: 7 },
  "resp_busy_shutting_down.hex": {
    status: wire.Status.Busy,
    code: 4,
    reqId: 10,
  },
  "resp_error.hex": {
    status: wire.Status.Error,
    code: 21,
    reqId: 0x0e,
    payload: "key is not valid UTF-8",
  },
  "resp_error_empty.hex": {
    status: wire.Status.Error,
    code: 27,
    reqId: 6,
    payload: "",
  },
  "resp_granted.hex": {
    status: wire.Status.Granted,
    reqId: 1,
    value: 0x18bcfe5680000001n,
  },
  "resp_granted_queued.hex": {
    status: wire.Status.Granted,
    queued: 625,
    reqId: 0xcafebabe,
    value: 0x18bcfe5680000007n,
  },
  "resp_moved.hex": {
    status: wire.Status.Moved,
    reqId: 1,
    payload: "10.0.0.2:7001",
  },
  "resp_moved_empty.hex": { status: wire.Status.Moved, reqId: 2, payload: "" },
  "resp_not_holder.hex": { status: wire.Status.NotHolder, reqId: 4 },
  "resp_pong.hex": {
    status: wire.Status.Pong,
    reqId: 5,
    value: 1700000000123456n,
  },
  "resp_released.hex": { status: wire.Status.Released, reqId: 3 },
  "resp_timeout.hex": { status: wire.Status.Timeout, reqId: 2 },
  "resp_unknown.hex": { status: wire.Status.Unknown, reqId: 12 },
  "resp_unknown_no_quorum.hex": {
    status: wire.Status.Unknown,
    code: 5,
    reqId: 13,
  },
};

test("golden responses decode to their values and re-encode byte for byte", () => {
  for (const [name, want] of Object.entries(responses)) {
    const b = readGolden(name);
    const r = wire.decodeResponse(b);
    assert.ok(r, name);
    assert.equal(r.size, b.length, name);
    const payload = Buffer.from(want.payload ?? "", "utf8");
    assert.equal(r.resp.status, want.status, name);
    assert.equal(r.resp.code, want.code ?? 0, name);
    assert.equal(r.resp.queued, want.queued ?? 0, name);
    assert.equal(r.resp.reqId, want.reqId, name);
    assert.deepEqual(r.resp.payload, payload, name);
    if (!wire.statusHasPayload(want.status))
      assert.equal(r.resp.value, want.value ?? 0n, name);
    else assert.equal(r.resp.value, BigInt(payload.length), name);
    const enc = wire.encodeResponse({ ...want, payload });
    assert.deepEqual(enc, b, name);
    // The streaming decoder, one byte at a time.
    const d = new wire.ResponseDecoder();
    const out: wire.Response[] = [];
    for (const byte of b) d.push(Buffer.of(byte), out);
    assert.equal(out.length, 1, name);
    assert.equal(d.buffered, 0);
  }
});

test("golden requests re-encode byte for byte", () => {
  const key = Buffer.from("orders/42");
  const cases: [string, Buffer][] = [
    ["req_acquire.hex", wire.encodeAcquire(1, key, 30000, 5000)],
    [
      "req_acquire_try.hex",
      wire.encodeAcquire(2, Buffer.from("job"), 3600000, 0),
    ],
    [
      "req_acquire_utf8.hex",
      wire.encodeAcquire(0xcafebabe, Buffer.from("clé/🔒"), 1000, 900000),
    ],
    ["req_cancel.hex", wire.encodeCancel(4, key, 1)],
    ["req_ping.hex", wire.encodePing(5)],
    ["req_query.hex", wire.encodeQuery(6, Buffer.from('{"cmd":"status"}'))],
    ["req_release.hex", wire.encodeRelease(3, key, T(5))],
  ];
  for (const [name, enc] of cases) {
    const b = readGolden(name);
    assert.deepEqual(enc, b, name);
    const r = wire.decodeRequest(b);
    assert.ok(r, name);
    assert.equal(r.size, b.length);
  }
  const rel = wire.decodeRequest(readGolden("req_release.hex"))!.req;
  assert.equal(rel.arg, 0x18bcfe5680000005n);
  assert.equal(rel.reqId, 3);
  const acq = wire.decodeRequest(readGolden("req_acquire_utf8.hex"))!.req;
  assert.equal(acq.argHi, 1000);
  assert.equal(acq.argLo, 900000);
  assert.equal(acq.key.toString("utf8"), "clé/🔒");
  assert.equal(acq.keyLen, 9);
});

test("golden handshake frames: HELLO, AUTH proofs, WELCOME proofs, REJECT", () => {
  for (const [name, flags] of [
    ["hello_flags0.hex", 0],
    ["hello_flags1.hex", 1],
  ] as const) {
    const b = readGolden(name);
    const h = wire.decodeHello(b);
    assert.equal(h.flags, flags);
    assert.deepEqual(h.nonce, serverNonce);
    assert.deepEqual(wire.encodeHello(h), b);
  }
  for (const [name, role, token] of [
    ["auth_client.hex", 1, s3cret],
    ["auth_admin.hex", 2, s3cret],
    ["auth_peer.hex", 3, s3cret],
    ["auth_client_notoken.hex", 1, noToken],
  ] as const) {
    const b = readGolden(name);
    const a = wire.decodeAuth(b);
    assert.equal(a.role, role, name);
    assert.deepEqual(a.nonce, clientNonce);
    const proof = wire.clientProof(token, role, serverNonce, clientNonce);
    assert.ok(wire.proofEqual(proof, a.proof), name);
    assert.deepEqual(
      wire.encodeAuth({ role, nonce: clientNonce, proof }),
      b,
      name,
    );
  }
  for (const [name, role, token, maxInflight] of [
    ["welcome_client.hex", 1, s3cret, 1024],
    ["welcome_admin.hex", 2, s3cret, 1024],
    ["welcome_peer.hex", 3, s3cret, 1],
    ["welcome_client_notoken.hex", 1, noToken, 1024],
  ] as const) {
    const b = readGolden(name);
    const w = wire.decodeWelcome(b);
    assert.equal(w.status, wire.WELCOME_ACCEPTED);
    assert.equal(w.code, 0);
    assert.equal(w.maxInflight, maxInflight);
    const proof = wire.serverProof(token, role, clientNonce, serverNonce);
    assert.ok(wire.proofEqual(proof, w.proof), name);
    assert.ok(
      !wire.proofEqual(
        wire.serverProof(Buffer.from("other"), role, clientNonce, serverNonce),
        w.proof,
      ),
    );
    assert.deepEqual(
      wire.encodeWelcome({
        status: wire.WELCOME_ACCEPTED,
        code: 0,
        maxInflight,
        proof,
      }),
      b,
    );
  }
  for (const [name, code] of [
    ["reject_auth_failed.hex", 11],
    ["reject_bad_handshake.hex", 10],
    ["reject_overloaded.hex", 2],
    ["reject_shutting_down.hex", 4],
  ] as const) {
    const b = readGolden(name);
    const w = wire.decodeWelcome(b);
    assert.equal(w.status, wire.WELCOME_REJECTED);
    assert.equal(w.code, code);
    assert.equal(w.maxInflight, 0);
    assert.deepEqual(
      wire.encodeWelcome({
        status: wire.WELCOME_REJECTED,
        code,
        maxInflight: 0,
        proof: Buffer.alloc(32),
      }),
      b,
    );
  }
});

test("every golden file is covered", () => {
  const files = readdirSync(goldenDir).filter((f) => f.endsWith(".hex"));
  const covered = new Set([
    ...Object.keys(responses),
    ...[
      "req_acquire",
      "req_acquire_try",
      "req_acquire_utf8",
      "req_cancel",
      "req_ping",
      "req_query",
      "req_release",
    ].map((n) => n + ".hex"),
    ...[
      "hello_flags0",
      "hello_flags1",
      "auth_client",
      "auth_admin",
      "auth_peer",
      "auth_client_notoken",
    ].map((n) => n + ".hex"),
    ...[
      "welcome_client",
      "welcome_admin",
      "welcome_peer",
      "welcome_client_notoken",
    ].map((n) => n + ".hex"),
    ...[
      "reject_auth_failed",
      "reject_bad_handshake",
      "reject_overloaded",
      "reject_shutting_down",
    ].map((n) => n + ".hex"),
  ]);
  assert.ok(files.length >= 39);
  for (const f of files)
    assert.ok(covered.has(f), `golden file ${f} not checked`);
});

test("validKey follows §2.1 check 5", () => {
  const ok = [
    "a",
    "orders/42",
    "clé/🔒",
    "x".repeat(250),
    "\u00a0",
    "\u{10ffff}",
  ];
  for (const k of ok) assert.ok(wire.validKey(Buffer.from(k)), k);
  const bad: Buffer[] = [
    Buffer.alloc(0),
    Buffer.from("x".repeat(251)),
    Buffer.from("a\nb"),
    Buffer.from("\u007f"),
    Buffer.from("\u0085"),
    Buffer.from("\u009f"),
    Buffer.of(0xc0, 0x80), // overlong
    Buffer.of(0xe0, 0x80, 0x80), // overlong
    Buffer.of(0xed, 0xa0, 0x80), // surrogate
    Buffer.of(0xf4, 0x90, 0x80, 0x80), // above U+10FFFF
    Buffer.of(0xff),
    Buffer.of(0xc3), // truncated
  ];
  for (const k of bad) assert.ok(!wire.validKey(k), k.toString("hex"));
});

test("decoder rejects unknown statuses and oversized payloads", () => {
  assert.throws(
    () => wire.decodeResponse(Buffer.alloc(16, 0x5a)),
    wire.WireError,
  );
  const big = wire.encodeResponse({ status: wire.Status.Error, reqId: 1 });
  big.writeBigUInt64BE(1025n, 8);
  assert.throws(() => wire.decodeResponse(big), wire.WireError);
  const moved = wire.encodeResponse({ status: wire.Status.Moved, reqId: 1 });
  moved.writeBigUInt64BE(256n, 8);
  assert.throws(() => wire.decodeResponse(moved), wire.WireError);
  moved.writeBigUInt64BE(1n << 40n, 8);
  assert.throws(() => wire.decodeResponse(moved), wire.WireError);
});

// ---------------------------------------------------------------------------
// Protocol 1.1 (§12.6): golden/v1_1 through this codec.

const v11 = (name: string): Buffer => readGolden(join("v1_1", name));
const keys = (...ks: string[]): Uint8Array[] => ks.map((k) => Buffer.from(k));

test("golden v1_1 requests: feature ping, S, X, C of a set, L encode byte for byte", () => {
  assert.deepEqual(
    wire.encodePing(9, wire.PING_FEATURES),
    v11("req_ping_features.hex"),
  );
  const acct = wire.encodeKeySetBody(keys("acct/17", "acct/42"));
  assert.deepEqual(
    wire.encodeAcquireSet(0x0a, 2, acct, 30000, 5000),
    v11("req_acquire_set.hex"),
  );
  assert.deepEqual(
    wire.encodeAcquireSet(
      0x10,
      3,
      wire.encodeKeySetBody(keys("jobs", "tables", "queue1")),
      10000,
      0,
    ),
    v11("req_acquire_set_try.hex"),
  );
  assert.deepEqual(
    wire.encodeReleaseSet(0x0b, 2, acct, 0x18bcfe5680000009n),
    v11("req_release_set.hex"),
  );
  assert.deepEqual(
    wire.encodeCancel(0x0c, Buffer.from("acct/17"), 0x0a),
    v11("req_cancel_set.hex"),
  );
  assert.deepEqual(
    wire.encodeLabel(0x0d, wire.cutLabel("web-1/4242 go/1.1.0")),
    v11("req_label.hex"),
  );
  // The fake server's decoder frames S/X by body_len.
  const d = wire.decodeRequest(v11("req_acquire_set.hex"))!;
  assert.equal(d.size, 32);
  assert.deepEqual(d.req.body, acct);
});

test("golden v1_1 responses and the TLS_REQUIRED reject decode", () => {
  const pong = wire.decodeResponse(v11("resp_pong_features.hex"))!.resp;
  assert.equal(pong.status, wire.Status.Pong);
  assert.equal(pong.queued, 0x0007); // the feature bits
  assert.equal(
    pong.queued,
    wire.Feature.KeySets | wire.Feature.Labels | wire.Feature.TlsHint,
  );
  assert.equal(pong.reqId, 9);
  const ok = wire.decodeResponse(v11("resp_label_ok.hex"))!.resp;
  assert.equal(ok.status, wire.Status.Released);
  assert.equal(ok.reqId, 0x0d);
  const ks = wire.decodeResponse(v11("resp_error_bad_keyset.hex"))!.resp;
  assert.equal(ks.code, wire.Code.BAD_KEYSET);
  assert.equal(ks.payload.toString(), "duplicate key in set");
  const bl = wire.decodeResponse(v11("resp_error_bad_label.hex"))!.resp;
  assert.equal(bl.code, wire.Code.BAD_LABEL);
  const rj = v11("reject_tls_required.hex");
  assert.equal(rj.length, 40);
  assert.equal(rj[0], wire.WELCOME_REJECTED);
  assert.equal(rj[1], wire.Code.TLS_REQUIRED);
  assert.equal(wire.codeName(12), "TLS_REQUIRED");
});

test("every golden v1_1 file is covered", () => {
  const files = readdirSync(join(goldenDir, "v1_1")).filter((f) =>
    f.endsWith(".hex"),
  );
  const covered = new Set(
    [
      "req_ping_features",
      "resp_pong_features",
      "req_acquire_set",
      "req_acquire_set_try",
      "req_release_set",
      "req_cancel_set",
      "req_label",
      "resp_label_ok",
      "resp_error_bad_keyset",
      "resp_error_bad_label",
      "reject_tls_required",
    ].map((n) => n + ".hex"),
  );
  assert.ok(files.length >= 11);
  for (const f of files) assert.ok(covered.has(f), `v1_1/${f} not checked`);
});

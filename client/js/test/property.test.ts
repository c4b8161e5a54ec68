import assert from "node:assert/strict";
import { test } from "node:test";

import fc from "fast-check";

import * as wire from "../src/wire.js";

const statuses = Object.values(wire.Status);

const arbResponse = fc
  .record({
    status: fc.constantFrom(...statuses),
    code: fc.integer({ min: 0, max: 255 }),
    queued: fc.integer({ min: 0, max: 0xffff }),
    reqId: fc.integer({ min: 0, max: 0xffffffff }),
    value: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
    payload: fc.uint8Array({ maxLength: 300 }),
  })
  .map((r) => ({
    ...r,
    payload: wire.statusHasPayload(r.status)
      ? r.payload.subarray(0, wire.statusMaxPayload(r.status))
      : new Uint8Array(0),
  }));

/** Splits b into chunks at the given cut points. */
function chunks(b: Buffer, cuts: number[]): Buffer[] {
  const pts = [...new Set(cuts.map((c) => c % (b.length + 1)))].sort(
    (x, y) => x - y,
  );
  const out: Buffer[] = [];
  let prev = 0;
  for (const p of pts) {
    out.push(b.subarray(prev, p));
    prev = p;
  }
  out.push(b.subarray(prev));
  return out;
}

test("property: valid response streams decode to their frames under any chunking", () => {
  fc.assert(
    fc.property(
      fc.array(arbResponse, { maxLength: 20 }),
      fc.array(fc.nat(), { maxLength: 10 }),
      (rs, cuts) => {
        const stream = Buffer.concat(rs.map((r) => wire.encodeResponse(r)));
        const d = new wire.ResponseDecoder();
        const out: wire.Response[] = [];
        for (const c of chunks(stream, cuts)) d.push(c, out);
        assert.equal(out.length, rs.length);
        assert.equal(d.buffered, 0);
        rs.forEach((r, i) => {
          const got = out[i]!;
          assert.equal(got.status, r.status);
          assert.equal(got.code, r.code);
          assert.equal(got.queued, r.queued);
          assert.equal(got.reqId, r.reqId);
          assert.deepEqual(new Uint8Array(got.payload), r.payload);
          if (!wire.statusHasPayload(r.status))
            assert.equal(got.value, r.value);
          assert.deepEqual(
            wire.encodeResponse({ ...got }),
            wire.encodeResponse(r),
          );
        });
      },
    ),
    { numRuns: 500 },
  );
});

test("property: arbitrary bytes never crash the decoder nor grow its buffer unboundedly", () => {
  fc.assert(
    fc.property(
      fc.array(fc.uint8Array({ maxLength: 64 }), { maxLength: 20 }),
      (parts) => {
        const d = new wire.ResponseDecoder();
        const out: wire.Response[] = [];
        for (const p of parts) {
          try {
            d.push(Buffer.from(p), out);
          } catch (e) {
            assert.ok(e instanceof wire.WireError, String(e));
            return; // fatal to the stream: the connection is closed
          }
          // A partial frame is at most one header plus the largest payload.
          assert.ok(d.buffered < wire.HEADER_LEN + wire.MAX_ADMIN_REPLY);
        }
        for (const r of out) {
          assert.ok(statuses.includes(r.status as never));
          assert.ok(r.payload.length <= wire.statusMaxPayload(r.status));
        }
      },
    ),
    { numRuns: 2000 },
  );
});

test("property: mutated valid frames either decode or raise WireError", () => {
  fc.assert(
    fc.property(
      arbResponse,
      fc.nat(),
      fc.integer({ min: 0, max: 255 }),
      (r, pos, byte) => {
        const b = Buffer.from(wire.encodeResponse(r));
        b[pos % b.length] = byte;
        try {
          wire.decodeResponse(b);
        } catch (e) {
          assert.ok(e instanceof wire.WireError);
        }
      },
    ),
    { numRuns: 2000 },
  );
});

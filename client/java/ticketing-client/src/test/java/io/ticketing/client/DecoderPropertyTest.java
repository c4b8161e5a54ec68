package io.ticketing.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.RepeatedTest;
import org.junit.jupiter.api.Test;

/** Randomized property tests of the response decoder (no third-party property library). */
class DecoderPropertyTest {
    static final byte[] STATUSES = {'G', 'T', 'B', 'O', 'N', 'M', 'U', 'E', 'P', 'J'};

    static Wire.Response randomValid(Random r) {
        byte st = STATUSES[r.nextInt(STATUSES.length)];
        byte[] payload = new byte[0];
        if (Wire.hasPayload(st)) {
            payload = new byte[r.nextInt(st == 'J' ? 3000 : (int) Wire.payloadLimit(st) + 1)];
            r.nextBytes(payload);
        }
        int queued = st == 'G' ? r.nextInt(65536) : 0;
        long value = Wire.hasPayload(st) ? payload.length : r.nextLong();
        return new Wire.Response(st, r.nextInt(256), queued, r.nextInt(), value, payload);
    }

    /** Any stream of valid frames, cut anywhere, decodes to the same frames. */
    @RepeatedTest(20)
    void roundTripInPieces() throws Exception {
        Random r = new Random();
        long seed = r.nextLong();
        r.setSeed(seed);
        int n = 1 + r.nextInt(50);
        Wire.Response[] frames = new Wire.Response[n];
        java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
        for (int i = 0; i < n; i++) {
            frames[i] = randomValid(r);
            all.writeBytes(Wire.encodeResponse(frames[i]));
        }
        byte[] b = all.toByteArray();
        int off = 0;
        int got = 0;
        int avail = 0;
        while (got < n) {
            avail = Math.min(b.length, avail + 1 + r.nextInt(64));
            while (true) {
                Wire.Response x = Wire.parseResponse(b, off, avail - off);
                if (x == null) {
                    break;
                }
                Wire.Response want = frames[got++];
                assertEquals(want.status(), x.status(), "seed " + seed);
                assertEquals(want.code(), x.code());
                assertEquals(want.queued(), x.queued());
                assertEquals(want.reqId(), x.reqId());
                assertEquals(want.value(), x.value());
                assertArrayEquals(want.payload(), x.payload());
                off += Wire.HEADER_LEN + x.payload().length;
            }
        }
        assertEquals(b.length, off);
    }

    /** Random bytes never crash the decoder: a frame, incomplete (bounded), or a DecodeException. */
    @Test
    void garbageNeverCrashes() {
        Random r = new Random(42);
        for (int iter = 0; iter < 200_000; iter++) {
            byte[] b = new byte[r.nextInt(64)];
            r.nextBytes(b);
            if (b.length > 0 && r.nextBoolean()) {
                b[0] = STATUSES[r.nextInt(STATUSES.length)];
            }
            try {
                Wire.Response x = Wire.parseResponse(b, 0, b.length);
                if (x == null) {
                    if (b.length >= Wire.HEADER_LEN) {
                        // Incomplete only when a payload is announced, and never beyond its limit.
                        long v = Wire.u64(b, 8);
                        assertTrue(Wire.hasPayload(b[0]) && v <= Wire.payloadLimit(b[0]) && v > b.length - 16);
                    }
                } else {
                    assertNotNull(x.payload());
                    assertTrue(x.payload().length <= Wire.MAX_ADMIN_REPLY);
                }
            } catch (Wire.DecodeException e) {
                assertNotNull(e.getMessage());
            }
        }
    }

    @Test
    void oversizedPayloadIsRefusedBeforeBuffering() {
        byte[] b = new byte[16];
        b[0] = 'E';
        Wire.put64(b, 8, 1025);
        try {
            Wire.parseResponse(b, 0, 16);
            throw new AssertionError("accepted");
        } catch (Wire.DecodeException e) {
            assertTrue(e.getMessage().contains("over the limit"));
        }
        b[0] = 'M';
        Wire.put64(b, 8, -1L);
        try {
            Wire.parseResponse(b, 0, 16);
            throw new AssertionError("accepted");
        } catch (Wire.DecodeException e) {
            assertTrue(e.getMessage().contains("over the limit"));
        }
    }

    @Test
    void keyValidation() {
        assertTrue(Wire.validKey("a".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        assertTrue(!Wire.validKey(new byte[0]));
        assertTrue(!Wire.validKey(new byte[251]));
        assertTrue(!Wire.validKey(new byte[] {'a', 0x01}));
        assertTrue(!Wire.validKey(new byte[] {(byte) 0xc2, (byte) 0x85})); // U+0085
        assertTrue(!Wire.validKey(new byte[] {(byte) 0xc0, (byte) 0xaf})); // overlong
        assertTrue(!Wire.validKey(new byte[] {(byte) 0xed, (byte) 0xa0, (byte) 0x80})); // surrogate
        assertTrue(!Wire.validKey(new byte[] {(byte) 0xff}));
        assertTrue(Wire.validKey("x".repeat(250).getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    }
}

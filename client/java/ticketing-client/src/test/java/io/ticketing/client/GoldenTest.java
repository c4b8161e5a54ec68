package io.ticketing.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** The golden vectors of client/wire/testdata/golden, read from the repository. */
class GoldenTest {
    static final Path DIR = Path.of(System.getProperty("ticketing.golden", "../../wire/testdata/golden"));
    static final byte[] SN = range(0x00);
    static final byte[] CN = range(0x20);
    static final byte[] TOKEN = "s3cret".getBytes(StandardCharsets.US_ASCII);

    static byte[] range(int start) {
        byte[] b = new byte[32];
        for (int i = 0; i < 32; i++) {
            b[i] = (byte) (start + i);
        }
        return b;
    }

    static byte[] load(String name) throws IOException {
        StringBuilder hex = new StringBuilder();
        for (String line : Files.readAllLines(DIR.resolve(name))) {
            int i = line.indexOf('#');
            hex.append((i >= 0 ? line.substring(0, i) : line).replaceAll("\\s", ""));
        }
        return HexFormat.of().parseHex(hex.toString());
    }

    static final long T0 = 1700000000000L << 20;

    record Resp(byte st, int code, int queued, int reqId, long value, String payload) {}

    static final Map<String, Resp> RESPONSES = Map.ofEntries(
            Map.entry("resp_admin.hex", new Resp(Wire.ST_ADMIN, 0, 0, 6, 28, "{\"unix_us\":1700000000123456}")),
            Map.entry("resp_busy_clock_unhealthy.hex", new Resp(Wire.ST_BUSY, 3, 0, 9, 0, "")),
            Map.entry("resp_busy_no_quorum.hex", new Resp(Wire.ST_BUSY, 5, 0, 11, 0, "")),
            Map.entry("resp_busy_overloaded.hex", new Resp(Wire.ST_BUSY, 2, 0, 8, 0, "")),
            Map.entry("resp_busy_queue_full.hex", new Resp(Wire.ST_BUSY, 1, 0, 7, 0, "")),
            Map.entry("resp_busy_shutting_down.hex", new Resp(Wire.ST_BUSY, 4, 0, 10, 0, "")),
            Map.entry("resp_error.hex", new Resp(Wire.ST_ERROR, 21, 0, 14, 22, "key is not valid UTF-8")),
            Map.entry("resp_error_empty.hex", new Resp(Wire.ST_ERROR, 27, 0, 6, 0, "")),
            Map.entry("resp_granted.hex", new Resp(Wire.ST_GRANTED, 0, 0, 1, T0 + 1, "")),
            Map.entry("resp_granted_queued.hex", new Resp(Wire.ST_GRANTED, 0, 625, 0xcafebabe, 0x18bcfe5680000007L, "")),
            Map.entry("resp_moved.hex", new Resp(Wire.ST_MOVED, 0, 0, 1, 13, "10.0.0.2:7001")),
            Map.entry("resp_moved_empty.hex", new Resp(Wire.ST_MOVED, 0, 0, 2, 0, "")),
            Map.entry("resp_not_holder.hex", new Resp(Wire.ST_NOT_HOLDER, 0, 0, 4, 0, "")),
            Map.entry("resp_pong.hex", new Resp(Wire.ST_PONG, 0, 0, 5, 1700000000123456L, "")),
            Map.entry("resp_released.hex", new Resp(Wire.ST_RELEASED, 0, 0, 3, 0, "")),
            Map.entry("resp_timeout.hex", new Resp(Wire.ST_TIMEOUT, 0, 0, 2, 0, "")),
            Map.entry("resp_unknown.hex", new Resp(Wire.ST_UNKNOWN, 0, 0, 12, 0, "")),
            Map.entry("resp_unknown_no_quorum.hex", new Resp(Wire.ST_UNKNOWN, 5, 0, 13, 0, "")));

    @Test
    void everyFileIsCovered() throws IOException {
        Set<String> files;
        try (Stream<Path> s = Files.list(DIR)) {
            files = s.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".hex")).collect(Collectors.toCollection(TreeSet::new));
        }
        Set<String> covered = new TreeSet<>(RESPONSES.keySet());
        covered.addAll(Set.of("req_acquire.hex", "req_acquire_try.hex", "req_acquire_utf8.hex", "req_cancel.hex", "req_ping.hex",
                "req_query.hex", "req_release.hex", "hello_flags0.hex", "hello_flags1.hex", "auth_client.hex", "auth_admin.hex",
                "auth_peer.hex", "auth_client_notoken.hex", "welcome_client.hex", "welcome_admin.hex", "welcome_peer.hex",
                "welcome_client_notoken.hex", "reject_auth_failed.hex", "reject_bad_handshake.hex", "reject_overloaded.hex",
                "reject_shutting_down.hex"));
        assertTrue(files.size() >= 39, "golden files found in " + DIR.toAbsolutePath());
        assertEquals(files, covered);
    }

    @Test
    void responses() throws Exception {
        for (Map.Entry<String, Resp> e : RESPONSES.entrySet()) {
            byte[] b = load(e.getKey());
            Resp want = e.getValue();
            Wire.Response r = Wire.parseResponse(b, 0, b.length);
            String n = e.getKey();
            assertEquals(want.st(), r.status(), n);
            assertEquals(want.code(), r.code(), n);
            assertEquals(want.queued(), r.queued(), n);
            assertEquals(want.reqId(), r.reqId(), n);
            assertEquals(want.value(), r.value(), n);
            assertEquals(want.payload(), new String(r.payload(), StandardCharsets.UTF_8), n);
            assertArrayEquals(b, Wire.encodeResponse(new Wire.Response(want.st(), want.code(), want.queued(), want.reqId(), want.value(),
                    want.payload().getBytes(StandardCharsets.UTF_8))), n);
            // Every strict prefix is incomplete, never an error.
            for (int i = 0; i < b.length; i++) {
                assertEquals(null, Wire.parseResponse(b, 0, i), n + " prefix " + i);
            }
        }
    }

    @Test
    void tokensAboveTwoTo53AreExact() throws Exception {
        byte[] b = load("resp_granted_queued.hex");
        Wire.Response r = Wire.parseResponse(b, 0, b.length);
        assertEquals("1782579200000000007", Long.toUnsignedString(r.value()));
        assertEquals(625 * 16, r.queued() * 16); // 10 s of queue wait
    }

    @Test
    void requests() throws Exception {
        assertArrayEquals(load("req_acquire.hex"), Wire.acquire(1, "orders/42".getBytes(StandardCharsets.UTF_8), 30000, 5000));
        assertArrayEquals(load("req_acquire_try.hex"), Wire.acquire(2, "job".getBytes(StandardCharsets.UTF_8), 3600000, 0));
        assertArrayEquals(load("req_acquire_utf8.hex"), Wire.acquire(0xcafebabe, "clé/🔒".getBytes(StandardCharsets.UTF_8), 1000, 900000));
        assertArrayEquals(load("req_cancel.hex"), Wire.cancel(4, "orders/42".getBytes(StandardCharsets.UTF_8), 1));
        assertArrayEquals(load("req_ping.hex"), Wire.ping(5));
        assertArrayEquals(load("req_query.hex"), Wire.query(6, "{\"cmd\":\"status\"}".getBytes(StandardCharsets.UTF_8)));
        assertArrayEquals(load("req_release.hex"), Wire.release(3, "orders/42".getBytes(StandardCharsets.UTF_8), T0 + 5));
        assertTrue(Wire.validKey("clé/🔒".getBytes(StandardCharsets.UTF_8)));
    }

    @Test
    void handshake() throws Exception {
        for (int flags : new int[] {0, 1}) {
            byte[] b = load("hello_flags" + flags + ".hex");
            Wire.Hello h = Wire.parseHello(b);
            assertEquals(flags == 1, h.tokensConfigured());
            assertArrayEquals(SN, h.nonce());
            assertArrayEquals(b, Wire.encodeHello(flags, SN));
        }
        String[][] auths = {{"auth_client.hex", "1", "s3cret"}, {"auth_admin.hex", "2", "s3cret"}, {"auth_peer.hex", "3", "s3cret"},
            {"auth_client_notoken.hex", "1", ""}};
        for (String[] a : auths) {
            byte[] b = load(a[0]);
            int role = Integer.parseInt(a[1]);
            byte[] tok = a[2].getBytes(StandardCharsets.US_ASCII);
            Wire.Auth au = Wire.parseAuth(b);
            assertEquals(role, au.role(), a[0]);
            assertArrayEquals(CN, au.nonce(), a[0]);
            byte[] proof = Wire.clientProof(tok, role, SN, CN);
            assertTrue(Wire.proofEqual(proof, au.proof()), a[0]);
            assertArrayEquals(b, Wire.encodeAuth(role, CN, proof), a[0]);
        }
        String[][] welcomes = {{"welcome_client.hex", "1", "s3cret", "1024"}, {"welcome_admin.hex", "2", "s3cret", "1024"},
            {"welcome_peer.hex", "3", "s3cret", "1"}, {"welcome_client_notoken.hex", "1", "", "1024"}};
        for (String[] a : welcomes) {
            byte[] b = load(a[0]);
            int role = Integer.parseInt(a[1]);
            Wire.Welcome w = Wire.parseWelcome(b);
            assertTrue(w.accepted(), a[0]);
            assertEquals(0, w.code());
            long mi = Long.parseLong(a[3]);
            assertEquals(mi, w.maxInflight(), a[0]);
            byte[] proof = Wire.serverProof(a[2].getBytes(StandardCharsets.US_ASCII), role, CN, SN);
            assertTrue(Wire.proofEqual(proof, w.proof()), a[0]);
            assertFalse(Wire.proofEqual(Wire.serverProof(TOKEN, role == 1 ? 2 : 1, CN, SN), w.proof()), a[0]);
            assertArrayEquals(b, Wire.encodeWelcome(true, 0, mi, proof), a[0]);
        }
        Map<String, Integer> rejects = Map.of("reject_auth_failed.hex", 11, "reject_bad_handshake.hex", 10, "reject_overloaded.hex", 2,
                "reject_shutting_down.hex", 4);
        for (Map.Entry<String, Integer> e : rejects.entrySet()) {
            byte[] b = load(e.getKey());
            Wire.Welcome w = Wire.parseWelcome(b);
            assertFalse(w.accepted());
            assertEquals(e.getValue(), w.code());
            assertEquals(0, w.maxInflight());
            assertArrayEquals(b, Wire.encodeWelcome(false, e.getValue(), 0, new byte[32]), e.getKey());
        }
    }
}

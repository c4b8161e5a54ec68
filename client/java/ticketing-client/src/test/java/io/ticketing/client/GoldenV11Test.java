package io.ticketing.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** The protocol 1.1 golden vectors (client/wire/testdata/golden/v1_1, protocol.md §12) through the codec. */
class GoldenV11Test {
    static final Path DIR = GoldenTest.DIR.resolve("v1_1");

    static byte[] load(String name) throws IOException {
        StringBuilder hex = new StringBuilder();
        for (String line : Files.readAllLines(DIR.resolve(name))) {
            int i = line.indexOf('#');
            hex.append((i >= 0 ? line.substring(0, i) : line).replaceAll("\\s", ""));
        }
        return java.util.HexFormat.of().parseHex(hex.toString());
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void everyFileIsCovered() throws IOException {
        Set<String> files;
        try (Stream<Path> s = Files.list(DIR)) {
            files = s.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".hex")).collect(Collectors.toCollection(TreeSet::new));
        }
        assertEquals(new TreeSet<>(Set.of("reject_tls_required.hex", "req_acquire_set.hex", "req_acquire_set_try.hex", "req_cancel_set.hex",
                "req_label.hex", "req_ping_features.hex", "req_release_set.hex", "resp_error_bad_keyset.hex", "resp_error_bad_label.hex",
                "resp_label_ok.hex", "resp_pong_features.hex")), files);
    }

    @Test
    void requests() throws Exception {
        assertArrayEquals(load("req_ping_features.hex"), Wire.pingFeatures(9));
        byte[][] set = {b("acct/17"), b("acct/42")};
        assertArrayEquals(load("req_acquire_set.hex"), Wire.acquireSet(0x0a, set, 30000, 5000));
        assertArrayEquals(load("req_acquire_set_try.hex"), Wire.acquireSet(0x10, new byte[][] {b("jobs"), b("tables"), b("queue1")}, 10000, 0));
        assertArrayEquals(load("req_release_set.hex"), Wire.releaseSet(0x0b, set, 0x18bcfe5680000009L));
        // A set is cancelled with C naming its first key (§12.2), as Conn#withdraw sends it.
        assertArrayEquals(load("req_cancel_set.hex"), Wire.cancel(0x0c, set[0], 0x0a));
        assertArrayEquals(load("req_label.hex"), Wire.label(0x0d, b("web-1/4242 go/1.1.0")));
        Call c = new Call(Wire.OP_ACQUIRE_SET, set[0], (30000L << 32) | 5000, true, x -> {});
        c.keys = set;
        assertArrayEquals(load("req_acquire_set.hex"), c.encode(0x0a));
        assertEquals(Wire.FEATURE_KEY_SETS, c.need());
    }

    @Test
    void responses() throws Exception {
        byte[] p = load("resp_pong_features.hex");
        Wire.Response r = Wire.parseResponse(p, 0, p.length);
        assertEquals(Wire.ST_PONG, r.status());
        assertEquals(Wire.FEATURE_KEY_SETS | Wire.FEATURE_LABELS | Wire.FEATURE_TLS_HINT, r.queued());
        assertEquals(9, r.reqId());
        assertEquals(1700000000123456L, r.value());
        byte[] k = load("resp_error_bad_keyset.hex");
        r = Wire.parseResponse(k, 0, k.length);
        assertEquals(Wire.ST_ERROR, r.status());
        assertEquals(29, r.code());
        assertEquals("duplicate key in set", new String(r.payload(), StandardCharsets.UTF_8));
        byte[] l = load("resp_error_bad_label.hex");
        r = Wire.parseResponse(l, 0, l.length);
        assertEquals(30, r.code());
        assertEquals(0, r.payload().length);
        byte[] o = load("resp_label_ok.hex");
        r = Wire.parseResponse(o, 0, o.length);
        assertEquals(Wire.ST_RELEASED, r.status());
        assertEquals(0x0d, r.reqId());
        assertTrue(Call.fits(Wire.OP_ACQUIRE_SET, Wire.ST_GRANTED));
        assertTrue(Call.fits(Wire.OP_RELEASE_SET, Wire.ST_NOT_HOLDER));
        assertFalse(Call.fits(Wire.OP_RELEASE_SET, Wire.ST_GRANTED));
    }

    @Test
    void tlsRequiredRejectIsWhereHelloWasExpected() throws Exception {
        byte[] r = load("reject_tls_required.hex");
        assertEquals(Wire.HELLO_LEN, r.length);
        assertEquals(Wire.ST_ERROR, r[0]);
        assertEquals(Wire.CODE_TLS_REQUIRED, Wire.u8(r, 1));
        assertThrows(Wire.DecodeException.class, () -> Wire.parseHello(r));
    }

    @Test
    void labelsAreCutAtACharacterBoundary() {
        String l = "é".repeat(40); // 80 bytes
        String cut = Wire.cutLabel(l);
        assertEquals(32, cut.length());
        assertEquals(64, cut.getBytes(StandardCharsets.UTF_8).length);
        String odd = "a" + "é".repeat(40); // 81 bytes: the 33rd é would end at byte 65
        assertEquals(63, Wire.cutLabel(odd).getBytes(StandardCharsets.UTF_8).length);
        String emoji = "x".repeat(62) + "🔒"; // 66 bytes: the 4-byte lock does not fit
        assertEquals("x".repeat(62), Wire.cutLabel(emoji));
        assertTrue(Wire.validLabel(new byte[0]));
        assertFalse(Wire.validLabel(b("a\tb")));
        String d = TicketingClient.defaultLabel("billing");
        assertTrue(d.matches("billing .+/" + ProcessHandle.current().pid() + " java/" + TicketingClient.VERSION), d);
        assertTrue(TicketingClient.defaultLabel(null).matches("[^ ]+/\\d+ java/.+"));
    }

    @Test
    void setKeysAreCheckedBeforeSending() {
        InvalidArgumentException one = assertThrows(InvalidArgumentException.class, () -> TicketingClient.setKeys(List.of("a")));
        assertTrue(one.getMessage().contains("keys") && one.getMessage().contains("2..16"), one.getMessage());
        List<String> seventeen = new java.util.ArrayList<>();
        for (int i = 0; i < 17; i++) {
            seventeen.add("k" + i);
        }
        assertThrows(InvalidArgumentException.class, () -> TicketingClient.setKeys(seventeen));
        InvalidArgumentException dup = assertThrows(InvalidArgumentException.class, () -> TicketingClient.setKeys(List.of("a", "b", "a")));
        assertTrue(dup.getMessage().contains("twice"), dup.getMessage());
        assertThrows(InvalidArgumentException.class, () -> TicketingClient.setKeys(List.of("a", "")));
        assertThrows(InvalidArgumentException.class, () -> TicketingClient.setKeys(List.of("a", "b\ud800")));
        assertEquals(2, TicketingClient.setKeys(List.of("a", "b")).length);
    }
}

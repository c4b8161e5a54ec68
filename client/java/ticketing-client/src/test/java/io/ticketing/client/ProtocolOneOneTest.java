package io.ticketing.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The client's own protocol 1.1 logic (protocol.md §12) that no testkit cell reaches (the testkit
 * runs 1.1 servers): feature gating per connection, and the label sent only when announced.
 */
@Timeout(60)
class ProtocolOneOneTest {
    static TicketingClient client(FakeServer s, String label) {
        TicketingClient.Builder b = TicketingClient.builder().addresses(s.addr).connectTimeout(Duration.ofSeconds(5));
        if (label != null) {
            b.label(label);
        }
        return b.build();
    }

    @Test
    void aSetOnAOnePointZeroServerFailsUnsupportedSendingNothing() throws Exception {
        try (FakeServer s = new FakeServer()) {
            s.features = 0; // a 1.0 server: a plain pong
            s.script(r -> {
                if (r.op() == Wire.OP_RELEASE) {
                    r.conn().send(Wire.ST_NOT_HOLDER, r.reqId(), 0);
                }
            });
            try (TicketingClient c = client(s, "unit")) {
                UnsupportedFeatureException e = assertThrows(UnsupportedFeatureException.class,
                        () -> c.acquireSet(List.of("a", "b"), Duration.ofSeconds(1), Duration.ZERO));
                assertTrue(e.getMessage().contains("not supported"), e.getMessage());
                assertThrows(UnsupportedFeatureException.class, () -> c.releaseSet(List.of("a", "b"), 7));
                // A version 1 request still goes: the connection is alive.
                assertThrows(NotHolderException.class, () -> c.release("k", 5));
                FakeServer.Req r = s.requests.poll(10, TimeUnit.SECONDS);
                assertEquals('R', (char) r.op(), "the first request the fake saw");
                assertNull(s.label, "a label sent to a server that did not announce LABELS");
            }
        }
    }

    @Test
    void setsAndTheLabelGoWhereAnnounced() throws Exception {
        try (FakeServer s = new FakeServer()) {
            s.features = Wire.FEATURE_KEY_SETS | Wire.FEATURE_LABELS;
            s.script(r -> {
                if (r.op() == Wire.OP_ACQUIRE_SET) {
                    r.conn().send(Wire.ST_GRANTED, r.reqId(), 77);
                } else if (r.op() == Wire.OP_RELEASE_SET) {
                    r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
                }
            });
            try (TicketingClient c = client(s, "billing-1 " + "x".repeat(80))) {
                try (Lease l = c.acquireSet(List.of("acct/17", "acct/42"), Duration.ofSeconds(30), Duration.ofSeconds(5))) {
                    assertEquals(List.of("acct/17", "acct/42"), l.keys());
                    assertEquals(77, l.token());
                }
                FakeServer.Req a = s.next('S');
                FakeServer.Req x = s.next('X');
                assertArrayEquals(a.key(), x.key(), "X names the set's keys as S did");
                assertEquals(77, x.arg());
                assertEquals(30000L, a.arg() >>> 32);
                assertEquals(64, s.label.length(), "the label is cut to 64 bytes: " + s.label);
                assertTrue(s.label.startsWith("billing-1 xx"));
            }
        }
    }
}

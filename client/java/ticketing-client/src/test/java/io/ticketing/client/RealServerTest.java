package io.ticketing.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Integration tests against the real server ($TICKETING_BIN serve). */
@Timeout(60)
class RealServerTest {
    static RealServer server;
    static TicketingClient client;
    static final Duration LEASE = Duration.ofSeconds(10);
    static final Duration WAIT = Duration.ofSeconds(5);

    @BeforeAll
    static void start() throws Exception {
        server = new RealServer();
        client = server.client();
    }

    @AfterAll
    static void stop() throws Exception {
        client.close();
        server.close();
    }

    @Test
    void acquireReleaseAndTokensIncrease() throws Exception {
        long prev = 0;
        for (int i = 0; i < 5; i++) {
            try (Lease l = client.acquire("it/basic", LEASE, WAIT)) {
                assertTrue(Long.compareUnsigned(l.token(), prev) > 0);
                assertTrue(Long.compareUnsigned(l.token(), 1L << 53) > 0, "tokens exceed 2^53: " + l.tokenString());
                assertEquals(l.tokenString(), Long.toUnsignedString(l.token()));
                prev = l.token();
                assertTrue(l.remaining().compareTo(Duration.ofSeconds(9)) > 0);
            }
        }
    }

    @Test
    void tryAcquireOnAHeldKey() throws Exception {
        try (Lease l = client.acquire("it/try", LEASE, WAIT)) {
            assertEquals("it/try", l.key());
            assertEquals(Optional.empty(), client.tryAcquire("it/try", LEASE));
        }
        Optional<Lease> l = client.tryAcquire("it/try", LEASE);
        assertTrue(l.isPresent());
        l.get().close();
    }

    @Test
    void fifoHandoffAndQueuedDeadline() throws Exception {
        Lease first = client.acquire("it/fifo", LEASE, WAIT);
        List<CompletableFuture<Lease>> waiters = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            waiters.add(client.acquireAsync("it/fifo", Duration.ofMillis(1000), WAIT));
            Thread.sleep(100); // arrival order
        }
        Thread.sleep(300);
        first.close();
        long prev = first.token();
        for (CompletableFuture<Lease> w : waiters) {
            Lease l = w.get(10, TimeUnit.SECONDS);
            assertTrue(Long.compareUnsigned(l.token(), prev) > 0);
            prev = l.token();
            l.close();
        }
        long last = prev;
        assertThrows(NotHolderException.class, () -> client.release("it/fifo", last));
    }

    @Test
    void leaseExpiryHandsOff() throws Exception {
        Lease l = client.acquire("it/expiry", Duration.ofMillis(300), WAIT);
        Lease next = client.acquire("it/expiry", LEASE, WAIT);
        assertTrue(Long.compareUnsigned(next.token(), l.token()) > 0);
        assertThrows(NotHolderException.class, l::close);
        next.close();
    }

    @Test
    void cancelWithdrawsTheQueuedAcquire() throws Exception {
        Lease held = client.acquire("it/cancel", LEASE, WAIT);
        CompletableFuture<Lease> w = client.acquireAsync("it/cancel", LEASE, Duration.ofSeconds(30));
        Thread.sleep(200);
        assertTrue(w.cancel(true));
        Thread.sleep(200);
        // A later waiter is granted at once on release: the cancelled one left the queue.
        CompletableFuture<Lease> w2 = client.acquireAsync("it/cancel", LEASE, WAIT);
        Thread.sleep(100);
        held.close();
        Lease l2 = w2.get(5, TimeUnit.SECONDS);
        assertEquals(Optional.empty(), client.tryAcquire("it/cancel", LEASE));
        l2.close();
        assertTrue(client.tryAcquire("it/cancel", LEASE).isPresent());
    }

    @Test
    void hundredAcquiresInFlight() throws Exception {
        List<CompletableFuture<Lease>> fs = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            fs.add(client.acquireAsync("it/many/" + (i % 10), Duration.ofSeconds(5), Duration.ofSeconds(20)));
        }
        List<CompletableFuture<Void>> rel = new ArrayList<>();
        for (CompletableFuture<Lease> f : fs) {
            rel.add(f.thenCompose(Lease::releaseAsync));
        }
        CompletableFuture.allOf(rel.toArray(new CompletableFuture<?>[0])).get(30, TimeUnit.SECONDS);
    }

    @Test
    void releaseFromAnotherClient() throws Exception {
        Lease l = client.acquire("it/other", LEASE, WAIT);
        try (TicketingClient other = server.client()) {
            other.release("it/other", l.token());
        }
        assertThrows(NotHolderException.class, l::close);
    }

    @Test
    void serverLimitsComeBackTyped() throws Exception {
        // max_lease_ms is 1 h by default: the server's E BAD_LEASE.
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> client.acquire("it/limits", Duration.ofHours(2), WAIT));
        assertEquals(22, e.code());
    }

    @Test
    void tokenAndImpostor(@TempDir Path dir) throws Exception {
        Path tf = dir.resolve("token");
        Files.writeString(tf, "s3cret\n");
        try (RealServer s = new RealServer("--token-file", tf.toString())) {
            try (TicketingClient c = TicketingClient.builder().addresses(s.addr).token("s3cret").build()) {
                c.acquire("it/auth", LEASE, WAIT).close();
            }
            assertThrows(AuthenticationException.class, () -> TicketingClient.builder().addresses(s.addr).token("nope").build());
            assertThrows(AuthenticationException.class, () -> TicketingClient.builder().addresses(s.addr).build());
        }
        // A server without the token cannot prove it: refused.
        assertThrows(AuthenticationException.class, () -> TicketingClient.builder().addresses(server.addr).token("s3cret").build());
    }

    @Test
    void serverRestartReconnects() throws Exception {
        RealServer s = new RealServer();
        try (TicketingClient c = s.client()) {
            c.acquire("it/restart", LEASE, WAIT).close();
            s.close();
            assertThrows(TicketingException.class, () -> c.acquire("it/restart", LEASE, Duration.ofMillis(200)));
            assertFalse(c.isClosed());
        }
    }
}

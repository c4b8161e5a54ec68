package io.ticketing.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The client's own failure-path logic against a scripted fake server (deadline arithmetic, U, E,
 * derived-stage cancellation, release retries, the callback pool, max_inflight). The scenarios
 * that every language shares (busy, M, cancel, R2, R8, R15, backoff, ...) run in the testkit
 * (client/testkit) through the Java drivers, not here (issue 36 item 10).
 */
@Timeout(60)
class FakeServerTest {
    static final Duration LEASE = Duration.ofSeconds(10);
    static final Duration WAIT = Duration.ofSeconds(5);

    static TicketingClient client(FakeServer s) {
        return TicketingClient.builder().addresses(s.addr).token(new String(s.token, StandardCharsets.UTF_8))
                .connectTimeout(Duration.ofSeconds(2)).build();
    }

    @Test
    void grantsAndTokensAreUnsignedAndExact() throws Exception {
        try (FakeServer s = new FakeServer().token("s3cret")) {
            s.script(r -> {
                if (r.op() == 'A') {
                    r.conn().send(Wire.ST_GRANTED, 0, 625, r.reqId(), 0xf000000000000001L, new byte[0]);
                }
            });
            try (TicketingClient c = client(s)) {
                Lease l = c.acquire("k", Duration.ofSeconds(1), WAIT);
                assertEquals("17293822569102704641", l.tokenString());
                // The deadline counts the 625 × 16 ms the server said the acquire waited.
                assertTrue(l.remaining().compareTo(Duration.ofSeconds(10)) > 0, l.remaining().toString());
                assertTrue(l.remaining().compareTo(Duration.ofSeconds(12)) < 0);
                FakeServer.Req a = s.next('A');
                assertEquals(1000L, a.arg() >>> 32);
                assertEquals(5000L, a.arg() & 0xffffffffL);
                assertEquals("k", a.keyString());
            }
        }
    }

    @Test
    void noServerIsConnectError() throws Exception {
        FakeServer s = new FakeServer();
        String addr = s.addr;
        s.close();
        assertThrows(ConnectionException.class,
                () -> TicketingClient.builder().addresses(addr).connectTimeout(Duration.ofMillis(500)).build());
    }

    @Test
    void unknownOutcomeIsIndeterminate() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_UNKNOWN, 5, 0, r.reqId(), 0, new byte[0]));
                TicketingClient c = client(s)) {
            assertThrows(IndeterminateException.class, () -> c.acquire("k", LEASE, WAIT));
        }
    }

    @Test
    void serverErrorIsInvalidWithCode() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_ERROR, 22, 0, r.reqId(), 0, "bad lease".getBytes(StandardCharsets.UTF_8)));
                TicketingClient c = client(s)) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> c.acquire("k", LEASE, WAIT));
            assertEquals(22, e.code());
            assertTrue(e.getMessage().contains("bad lease"));
        }
    }

    @Test
    void cancellingADerivedStageWithdrawsTheAcquire() throws Exception {
        // issue 34 item 9: thenApply(...).cancel(true) withdraws like cancelling the future itself,
        // also two stages down and through orTimeout.
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) {
            s.script(r -> {
                if (r.op() == 'C') {
                    r.conn().send(Wire.ST_TIMEOUT, (int) (r.arg() >>> 32), 0);
                    r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
                }
            });
            CompletableFuture<Long> derived = c.acquireAsync("k", LEASE, WAIT).thenApply(Lease::token).thenApply(t -> t + 1);
            FakeServer.Req a = s.next('A');
            assertTrue(derived.cancel(true));
            FakeServer.Req cc = s.next('C');
            assertEquals(a.reqId(), (int) (cc.arg() >>> 32));
            assertThrows(CancellationException.class, derived::join);

            CompletableFuture<Lease> timed = c.acquireAsync("k2", LEASE, WAIT).whenComplete((l, e) -> { }).orTimeout(50, TimeUnit.MILLISECONDS);
            FakeServer.Req a2 = s.next('A');
            FakeServer.Req cc2 = s.next('C');
            assertEquals(a2.reqId(), (int) (cc2.arg() >>> 32));
            ExecutionException e = assertThrows(ExecutionException.class, () -> timed.get(5, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof java.util.concurrent.TimeoutException, e.toString());
        }
    }

    @Test
    void notHolderAfterALostAttemptIsIndeterminate() throws Exception {
        AtomicInteger n = new AtomicInteger();
        try (FakeServer s = new FakeServer().script(r -> {
            if (n.incrementAndGet() == 1) {
                r.conn().close();
            } else {
                r.conn().send(Wire.ST_NOT_HOLDER, r.reqId(), 0);
            }
        }); TicketingClient c = client(s)) {
            assertThrows(IndeterminateException.class, () -> c.release("k", 5));
        }
    }

    @Test
    void releaseNeverSucceedsWithoutO() throws Exception {
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) { // never answers
            long t0 = System.nanoTime();
            Lease l = new Lease(c, "k".getBytes(StandardCharsets.UTF_8), 9, System.nanoTime());
            assertThrows(IndeterminateException.class, l::close);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= 4500 && ms < 15000, "took " + ms);
            assertFalse(l.isReleased(), "state cleared without O");
        }
    }

    static FakeServer grantingServer() throws java.io.IOException {
        return new FakeServer().script(r -> {
            if (r.op() == 'A') {
                r.conn().send(Wire.ST_GRANTED, r.reqId(), r.reqId());
            } else if (r.op() == 'R') {
                r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
            }
        });
    }

    /** virtualThreadReaders(true) works on every JDK: virtual readers on 21+, platform ones before. */
    @Test
    void virtualThreadReadersServeAnswers() throws Exception {
        try (FakeServer s = grantingServer();
                TicketingClient c = TicketingClient.builder().addresses(s.addr).virtualThreadReaders(true).build()) {
            for (int i = 0; i < 3; i++) {
                try (Lease l = c.acquire("k" + i, LEASE, WAIT)) {
                    assertTrue(l.token() > 0);
                }
            }
            boolean jdk21 = Runtime.version().feature() >= 21;
            boolean platformReader = Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().equals("ticketing-read-" + s.addr));
            assertEquals(!jdk21, platformReader, "a platform reader thread on JDK " + Runtime.version().feature());
        }
    }

    /** Reconnect delays are full jitter, uniform in [0, step] (R16): some fall in the step's lower half. */
    @Test
    void reconnectDelaysAreFullJitter() throws Exception {
        try (FakeServer s = grantingServer();
                TicketingClient c = TicketingClient.builder().addresses(s.addr).build()) {
            long step = TimeUnit.MILLISECONDS.toNanos(400); // attempt 3: 100 ms doubled twice
            int low = 0;
            for (int i = 0; i < 2000; i++) {
                long d = c.backoffNanos(3);
                assertTrue(d >= 0 && d <= step, "delay " + d + " ns outside [0, " + step + "]");
                if (d < step / 4) {
                    low++;
                }
            }
            // uniform: about 500 of 2000 below a quarter; the upper-half jitter gave none
            assertTrue(low > 300, low + " of 2000 delays below a quarter of the step");
        }
    }

    /** drain() returns once a grant that won the race with a cancel is released (R10). */
    @Test
    void drainWaitsForTheCompensationOfACancelledAcquire() throws Exception {
        java.util.concurrent.CountDownLatch answer = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.atomic.AtomicBoolean released = new java.util.concurrent.atomic.AtomicBoolean();
        try (FakeServer s = new FakeServer()) {
            s.script(r -> {
                if (r.op() == 'A') {
                    Thread t = new Thread(() -> {
                        try {
                            answer.await(10, TimeUnit.SECONDS);
                            Thread.sleep(100); // the grant arrives after the cancel's C
                            r.conn().send(Wire.ST_GRANTED, r.reqId(), 42);
                        } catch (Exception e) {
                            // connection over
                        }
                    });
                    t.setDaemon(true);
                    t.start();
                } else if (r.op() == 'R') {
                    released.set(r.arg() == 42);
                    r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
                }
            });
            try (TicketingClient c = client(s)) {
                CompletableFuture<Lease> f = c.acquireAsync("k", LEASE, WAIT);
                s.next('A');
                f.cancel(true);
                answer.countDown();
                assertTrue(c.drain(Duration.ofSeconds(10)), "drain timed out");
                assertTrue(released.get(), "drain returned before the compensating release was answered");
            }
        }
    }

    /** Acquire and release chained in callbacks (the callback pool writes their frames). */
    @Test
    void chainedAsyncAcquireReleaseInCallbacks() throws Exception {
        try (FakeServer s = grantingServer(); TicketingClient c = client(s)) {
            AtomicInteger pairs = new AtomicInteger();
            CompletableFuture<?>[] chains = new CompletableFuture<?>[32];
            for (int i = 0; i < chains.length; i++) {
                CompletableFuture<Void> f = CompletableFuture.completedFuture(null);
                for (int j = 0; j < 30; j++) {
                    String k = "k" + i;
                    f = f.thenCompose(v -> c.acquireAsync(k, LEASE, WAIT)).thenCompose(Lease::releaseAsync)
                            .thenRun(pairs::incrementAndGet);
                }
                chains[i] = f;
            }
            CompletableFuture.allOf(chains).get(30, TimeUnit.SECONDS);
            assertEquals(32 * 30, pairs.get());
        }
    }

    /**
     * A callback that waits for another acquire of its own client: that frame is queued on the
     * callback's worker, which cannot write it while it waits; the client's sweeper hands it to
     * the supervisor, and the answer is delivered on another worker.
     */
    @Test
    void callbackWaitingForItsOwnClientStillCompletes() throws Exception {
        try (FakeServer s = grantingServer(); TicketingClient c = client(s)) {
            CompletableFuture<Long> f = c.acquireAsync("a", LEASE, WAIT)
                    .thenApply(a -> c.acquireAsync("b", LEASE, WAIT).join().token() + a.token());
            assertTrue(f.get(30, TimeUnit.SECONDS) > 0);
        }
    }

    @Test
    void maxInflightIsRespected() throws Exception {
        try (FakeServer s = new FakeServer()) {
            s.maxInflight = 1;
            try (TicketingClient c = TicketingClient.builder().addresses(s.addr).connectTimeout(Duration.ofSeconds(2)).build()) {
                // Both connections allow one queued acquire each; the third waits for a slot and times out.
                CompletableFuture<Lease> a = c.acquireAsync("k", LEASE, WAIT);
                CompletableFuture<Lease> b = c.acquireAsync("k", LEASE, WAIT);
                s.next('A');
                s.next('A');
                ExecutionException e = assertThrows(ExecutionException.class,
                        () -> c.acquireAsync("k", LEASE, Duration.ofMillis(300)).get(5, TimeUnit.SECONDS));
                assertTrue(e.getCause() instanceof AcquireTimeoutException, e.toString());
                assertTrue(s.requests.isEmpty(), "a third acquire was sent beyond max_inflight");
                a.cancel(true);
                b.cancel(true);
            }
        }
    }
}

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

/** Failure paths against a scripted fake server. */
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
    void twoConnectionsForASingleAddress() throws Exception {
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) {
            assertFalse(c.isClosed());
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (s.conns.size() < 2 && System.nanoTime() < end) {
                Thread.sleep(10);
            }
            assertEquals(2, s.conns.size());
        }
    }

    @Test
    void impostorServerIsRefused() throws Exception {
        try (FakeServer s = new FakeServer().token("s3cret")) {
            s.badProof = true;
            AuthenticationException e = assertThrows(AuthenticationException.class, () -> client(s));
            assertTrue(e.getMessage().contains("prove"), e.getMessage());
        }
    }

    @Test
    void wrongTokenIsAuthError() throws Exception {
        try (FakeServer s = new FakeServer().token("s3cret")) {
            assertThrows(AuthenticationException.class,
                    () -> TicketingClient.builder().addresses(s.addr).token("wrong").connectTimeout(Duration.ofSeconds(2)).build());
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
    void busyIsReturnedAtOnceAndNeverRetried() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_BUSY, 1, 0, r.reqId(), 0, new byte[0]));
                TicketingClient c = client(s)) {
            BusyException e = assertThrows(BusyException.class, () -> c.acquire("k", LEASE, WAIT));
            assertEquals(1, e.code());
            s.next('A');
            Thread.sleep(200);
            assertTrue(s.requests.isEmpty(), "retried: " + s.requests);
        }
    }

    @Test
    void errorsNameTheCallTheKeyAndTheServer() throws Exception {
        // issue 34 item 11, R15: the key and the address in every message, no code twice.
        try (FakeServer s = new FakeServer().script(r -> {
            if (r.keyString().equals("busy/key")) {
                r.conn().send(Wire.ST_BUSY, 1, 0, r.reqId(), 0, new byte[0]);
            } else if (r.op() == 'A') {
                r.conn().send(Wire.ST_TIMEOUT, r.reqId(), 0);
            } else {
                r.conn().send(Wire.ST_NOT_HOLDER, r.reqId(), 0);
            }
        }); TicketingClient c = client(s)) {
            BusyException b = assertThrows(BusyException.class, () -> c.acquire("busy/key", LEASE, WAIT));
            assertEquals("acquire \"busy/key\" at " + s.addr + ": busy (QUEUE_FULL), not acquired", b.getMessage());
            AcquireTimeoutException t = assertThrows(AcquireTimeoutException.class, () -> c.acquire("t/key", LEASE, Duration.ZERO));
            assertTrue(t.getMessage().startsWith("acquire \"t/key\" at " + s.addr + ": "), t.getMessage());
            NotHolderException n = assertThrows(NotHolderException.class, () -> c.release("n/key", 7));
            assertTrue(n.getMessage().startsWith("release \"n/key\" at " + s.addr + ": "), n.getMessage());
        }
    }

    @Test
    void loneSurrogatesAndTokenZeroAreRefusedBeforeSending() throws Exception {
        // R8: "a\uD800" would be sent as "a?" (the same key as the string "a?").
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> c.acquire("a\uD800", LEASE, Duration.ZERO));
            assertTrue(e.getMessage().contains("surrogate"), e.getMessage());
            assertThrows(InvalidArgumentException.class, () -> c.release("\uDC00", 5));
            InvalidArgumentException t = assertThrows(InvalidArgumentException.class, () -> c.release("k", 0));
            assertTrue(t.getMessage().contains("token 0"), t.getMessage());
            ExecutionException a = assertThrows(ExecutionException.class, () -> c.releaseAsync("k", 0).get(5, TimeUnit.SECONDS));
            assertTrue(a.getCause() instanceof InvalidArgumentException, a.toString());
            assertEquals(4, TicketingClient.keyBytes("\uD83D\uDE00").length); // a valid pair is one code point
            assertTrue(s.requests.stream().noneMatch(r -> r.op() == 'R'), "a refused release was sent: " + s.requests);
        }
    }

    @Test
    void aClosedClientsReleaseIsClosedNotIndeterminate() throws Exception {
        // R7: nothing was sent, so Closed (ClientClosedException), not Indeterminate.
        try (FakeServer s = new FakeServer()) {
            TicketingClient c = client(s);
            c.close();
            assertThrows(ClientClosedException.class, () -> c.release("k", 5));
            ExecutionException e = assertThrows(ExecutionException.class, () -> c.releaseAsync("k", 5).get(5, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof ClientClosedException, e.toString());
            assertThrows(ClientClosedException.class, () -> c.acquire("k", LEASE, WAIT));
        }
    }

    @Test
    void aTimedTryReturnsEmptyOnTimeout() throws Exception {
        // R13: "not acquired within the wait" as a value; the wait is sent as asked.
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_TIMEOUT, r.reqId(), 0)); TicketingClient c = client(s)) {
            assertFalse(c.tryAcquire("k", LEASE, Duration.ofMillis(300)).isPresent());
            long sent = s.next('A').arg() & 0xffffffffL;
            assertTrue(sent > 0 && sent <= 300, "wait sent: " + sent);
        }
    }

    @Test
    void aSilentServerEndsTheAcquireIndeterminateAndWithdrawsIt() throws Exception {
        // R2: written, unanswered past wait + the answer allowance (counted from the write):
        // Indeterminate, withdrawn with C. The fake never answers acquires.
        try (FakeServer s = new FakeServer();
                TicketingClient c = TicketingClient.builder().addresses(s.addr).token(new String(s.token, StandardCharsets.UTF_8))
                        .connectTimeout(Duration.ofSeconds(2)).answerAllowance(Duration.ofMillis(300)).build()) {
            long t0 = System.nanoTime();
            IndeterminateException e = assertThrows(IndeterminateException.class, () -> c.acquire("silent", LEASE, Duration.ofMillis(200)));
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= 450 && ms < 10_000, "ended after " + ms + " ms");
            assertTrue(e.getMessage().contains("answer allowance") && e.getMessage().contains("\"silent\""), e.getMessage());
            FakeServer.Req a = s.next('A');
            FakeServer.Req cc = s.next('C');
            assertEquals(a.reqId(), (int) (cc.arg() >>> 32));
        }
    }

    @Test
    void timeoutAndTryAcquire() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_TIMEOUT, r.reqId(), 0)); TicketingClient c = client(s)) {
            assertThrows(AcquireTimeoutException.class, () -> c.acquire("k", LEASE, WAIT));
            assertEquals(Optional.empty(), c.tryAcquire("k", LEASE));
            s.next('A');
            FakeServer.Req t = s.next('A');
            assertEquals(0L, t.arg() & 0xffffffffL, "tryAcquire sends wait 0");
        }
    }

    @Test
    void droppedReplyIsIndeterminateNeverRetried() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().close()); TicketingClient c = client(s)) {
            assertThrows(IndeterminateException.class, () -> c.acquire("k", LEASE, WAIT));
            s.next('A');
            Thread.sleep(300);
            assertTrue(s.requests.isEmpty(), "retried: " + s.requests);
        }
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
    void protocolViolationKillsTheConnectionNotTheClient() throws Exception {
        AtomicInteger n = new AtomicInteger();
        try (FakeServer s = new FakeServer().script(r -> {
            if (n.incrementAndGet() == 1) {
                r.conn().raw(new byte[] {'Z', 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0});
            } else {
                r.conn().send(Wire.ST_GRANTED, r.reqId(), 7);
            }
        }); TicketingClient c = client(s)) {
            assertThrows(IndeterminateException.class, () -> c.acquire("k", LEASE, WAIT));
            assertEquals(7, c.acquire("k", LEASE, WAIT).token());
        }
    }

    @Test
    void movedIsFollowedToTheLeader() throws Exception {
        try (FakeServer leader = new FakeServer().script(r -> r.conn().send(Wire.ST_GRANTED, r.reqId(), 99));
                FakeServer follower = new FakeServer()) {
            follower.script(r -> r.conn().send(Wire.ST_MOVED, 0, 0, r.reqId(), 0, leader.addr.getBytes(StandardCharsets.UTF_8)));
            try (TicketingClient c = client(follower)) {
                assertEquals(99, c.acquire("k", LEASE, WAIT).token());
                follower.next('A');
                leader.next('A');
                // The leader is remembered: the next acquire goes there directly.
                assertEquals(99, c.acquire("k", LEASE, WAIT).token());
                leader.next('A');
                assertTrue(follower.requests.isEmpty());
            }
        }
    }

    @Test
    void movedHopLimitBacksOffWithinTheWait() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_MOVED, r.reqId(), 0)); TicketingClient c = client(s)) {
            long t0 = System.nanoTime();
            assertThrows(TicketingException.class, () -> c.acquire("k", LEASE, Duration.ofMillis(500)));
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms < 5000, "took " + ms);
            int count = s.requests.size();
            assertTrue(count >= 4 && count < 200, "attempts " + count);
            // wait 0: at most 1 + 3 hops
            s.requests.clear();
            assertThrows(ConnectionException.class, () -> c.acquire("k", LEASE, Duration.ZERO));
            assertEquals(4, s.requests.size());
        }
    }

    @Test
    void cancelledFutureWithdrawsWithC() throws Exception {
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) {
            s.script(r -> {
                if (r.op() == 'C') {
                    r.conn().send(Wire.ST_TIMEOUT, (int) (r.arg() >>> 32), 0);
                    r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
                }
            });
            CompletableFuture<Lease> f = c.acquireAsync("k", LEASE, WAIT);
            FakeServer.Req a = s.next('A');
            assertTrue(f.cancel(true));
            FakeServer.Req cc = s.next('C');
            assertEquals(a.reqId(), (int) (cc.arg() >>> 32));
            assertEquals("k", cc.keyString());
            assertEquals(a.conn(), cc.conn());
            assertThrows(CancellationException.class, f::join);
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
    void grantThatWonTheRaceIsCompensated() throws Exception {
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) {
            s.script(r -> {
                if (r.op() == 'C') {
                    r.conn().send(Wire.ST_GRANTED, (int) (r.arg() >>> 32), 4242);
                    r.conn().send(Wire.ST_NOT_HOLDER, r.reqId(), 0);
                } else if (r.op() == 'R') {
                    r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
                }
            });
            CompletableFuture<Lease> f = c.acquireAsync("k", LEASE, WAIT);
            s.next('A');
            f.cancel(true);
            s.next('C');
            FakeServer.Req rel = s.next('R');
            assertEquals(4242L, rel.arg());
            assertEquals("k", rel.keyString());
        }
    }

    @Test
    void interruptWithdrawsABlockingAcquire() throws Exception {
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) {
            s.script(r -> {
                if (r.op() == 'C') {
                    r.conn().send(Wire.ST_TIMEOUT, (int) (r.arg() >>> 32), 0);
                    r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
                }
            });
            CompletableFuture<Throwable> out = new CompletableFuture<>();
            Thread t = new Thread(() -> {
                try {
                    c.acquire("k", LEASE, WAIT);
                    out.complete(null);
                } catch (Throwable e) {
                    out.complete(e);
                }
            });
            t.start();
            s.next('A');
            t.interrupt();
            assertTrue(out.get(5, TimeUnit.SECONDS) instanceof InterruptedException);
            s.next('C');
        }
    }

    @Test
    void releaseRetriedAfterALostReply() throws Exception {
        AtomicInteger n = new AtomicInteger();
        try (FakeServer s = new FakeServer().script(r -> {
            if (n.incrementAndGet() == 1) {
                r.conn().close();
            } else {
                r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
            }
        }); TicketingClient c = client(s)) {
            c.release("k", 5);
            assertEquals(2, n.get());
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
    void notHolder() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_NOT_HOLDER, r.reqId(), 0)); TicketingClient c = client(s)) {
            assertThrows(NotHolderException.class, () -> c.release("k", 5));
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

    @Test
    void leaseCloseIsIdempotent() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> {
            if (r.op() == 'A') {
                r.conn().send(Wire.ST_GRANTED, r.reqId(), 3);
            } else {
                r.conn().send(Wire.ST_RELEASED, r.reqId(), 0);
            }
        }); TicketingClient c = client(s)) {
            Lease l = c.acquire("k", LEASE, WAIT);
            // Released from another thread: ownership is the handle.
            Thread t = new Thread(l::close);
            t.start();
            t.join();
            assertTrue(l.isReleased());
            l.close();
            s.next('A');
            s.next('R');
            Thread.sleep(100);
            assertTrue(s.requests.isEmpty());
        }
    }

    @Test
    void badInputIsRefusedBeforeSending() throws Exception {
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) {
            assertThrows(InvalidArgumentException.class, () -> c.acquire("", LEASE, WAIT));
            assertThrows(InvalidArgumentException.class, () -> c.acquire("x".repeat(251), LEASE, WAIT));
            assertThrows(InvalidArgumentException.class, () -> c.acquire("a\nb", LEASE, WAIT));
            assertThrows(InvalidArgumentException.class, () -> c.acquire(new byte[] {(byte) 0xff}, LEASE, WAIT));
            assertThrows(InvalidArgumentException.class, () -> c.acquire("k", Duration.ZERO, WAIT));
            assertThrows(InvalidArgumentException.class, () -> c.acquire("k", Duration.ofMillis(-1), WAIT));
            assertThrows(InvalidArgumentException.class, () -> c.acquire("k", LEASE, Duration.ofMillis(-1)));
            assertThrows(InvalidArgumentException.class, () -> c.acquire("k", Duration.ofMillis(0x1_0000_0000L), WAIT));
            assertThrows(InvalidArgumentException.class, () -> c.acquire("k", LEASE, Duration.ofDays(365 * 1000)));
            assertThrows(InvalidArgumentException.class, () -> c.release("", 1));
            ExecutionException e = assertThrows(ExecutionException.class, () -> c.acquireAsync("", LEASE, WAIT).get());
            assertTrue(e.getCause() instanceof InvalidArgumentException);
            Thread.sleep(100);
            assertTrue(s.requests.isEmpty());
        }
    }

    @Test
    void reconnectsAfterTheServerDropsEveryConnection() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_GRANTED, r.reqId(), 1)); TicketingClient c = client(s)) {
            assertEquals(1, c.acquire("k", LEASE, WAIT).token());
            while (s.conns.size() < 2) {
                Thread.sleep(10);
            }
            s.dropAll();
            Thread.sleep(50);
            // Never sent while down: waits for a reconnect (0.1 s backoff) within the budget.
            assertEquals(1, c.acquire("k", LEASE, WAIT).token());
            assertTrue(s.accepted.get() >= 3);
        }
    }

    @Test
    void closeFailsPendingAcquires() throws Exception {
        FakeServer s = new FakeServer();
        try (s) {
            TicketingClient c = client(s);
            CompletableFuture<Lease> f = c.acquireAsync("k", LEASE, WAIT);
            s.next('A');
            c.close();
            ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof IndeterminateException || e.getCause() instanceof ClientClosedException, e.toString());
            assertThrows(ClientClosedException.class, () -> c.acquire("k", LEASE, WAIT));
            c.close();
        }
    }

    @Test
    void pipelinesManyAcquiresOnOneClient() throws Exception {
        try (FakeServer s = new FakeServer().script(r -> r.conn().send(Wire.ST_GRANTED, r.reqId(), r.reqId())); TicketingClient c = client(s)) {
            CompletableFuture<?>[] fs = new CompletableFuture<?>[100];
            for (int i = 0; i < fs.length; i++) {
                fs[i] = c.acquireAsync("k" + i, LEASE, WAIT);
            }
            CompletableFuture.allOf(fs).get(10, TimeUnit.SECONDS);
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
    void reconnectBackoffDoublesFromPoint1ToThreePoint2Seconds() throws Exception {
        try (FakeServer s = new FakeServer(); TicketingClient c = client(s)) {
            long[] lo = {50, 100, 200, 400, 800, 1600, 1600, 1600};
            long[] hi = {100, 200, 400, 800, 1600, 3200, 3200, 3200};
            for (int attempt = 1; attempt <= 8; attempt++) {
                for (int i = 0; i < 50; i++) {
                    long ms = c.backoffNanos(attempt) / 1_000_000;
                    assertTrue(ms >= lo[attempt - 1] && ms <= hi[attempt - 1], "attempt " + attempt + ": " + ms + " ms");
                }
            }
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

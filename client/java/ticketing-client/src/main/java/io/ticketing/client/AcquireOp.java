package io.ticketing.client;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One acquire (A, or S for a key set), retried only when never sent or answered M, within the
 * remaining wait; completes {@link #result} with the lease or the error. The acquire seam of the
 * client, as Lettuce keeps its commands apart from the connection (issue 34 finding 7/12).
 * Internal.
 */
final class AcquireOp {
    final TicketingClient cl;
    final byte[] key; // a set's: its first key (the key of its C)
    byte[][] keys; // a key set's keys (protocol.md §12.2), else null
    long minRemainingNanos; // R14, 0 = none
    final long leaseMs;
    long waitMs;
    final long budgetEnd;
    final long grace; // R1: a connection opened for the first time may be waited for until here
    int moves;
    int rounds;
    final CompletableFuture<Lease> result = new CompletableFuture<>();
    private Call call;
    private boolean finished;

    // A lock, not a monitor: a virtual caller may park in it (JDK 21-23 pin a virtual
    // thread's carrier while it parks holding a monitor).
    private final ReentrantLock lock = new ReentrantLock();
    private boolean waitedForConnection; // guarded by lock
    private String lastAddr; // the server of the last attempt, for messages
    private final boolean queues; // asked with a wait > 0

    Thread caller; // a blocking caller's thread (its calls let the writer wait for others)
    Call toFlush; // the caller's call that it writes itself, off this operation's lock

    AcquireOp(TicketingClient cl, byte[] key, long leaseMs, long waitMs) {
        this.cl = cl;
        this.key = key;
        this.leaseMs = leaseMs;
        this.waitMs = waitMs;
        this.queues = waitMs > 0;
        long now = System.nanoTime();
        budgetEnd = now + TimeUnit.MILLISECONDS.toNanos(waitMs);
        grace = now + TicketingClient.FIRST_CONNECT_GRACE_NANOS;
    }

    void attempt() {
        lock.lock();
        try {
            attemptLocked();
        } finally {
            lock.unlock();
        }
    }

    private void attemptLocked() {
        if (finished) {
            return;
        }
        if (cl.isClosed()) {
            fail(new ClientClosedException("client closed"));
            return;
        }
        if (waitedForConnection && waitMs > 0) {
            // Time spent waiting for a connection or a slot comes out of the
            // wait the request carries: wait bounds the whole call.
            long rem = Math.max(0, (budgetEnd - System.nanoTime()) / 1_000_000);
            if (rem < waitMs) {
                waitMs = rem;
            }
        }
        // Counts against max_inflight by the wait it was asked with, even once
        // shortened to 0 (a slot is what it has been waiting for).
        Call c = new Call(keys == null ? Wire.OP_ACQUIRE : Wire.OP_ACQUIRE_SET, key, (leaseMs << 32) | waitMs,
                waitMs > 0 || waitedForConnection && queues, this::onAnswer);
        c.keys = keys;
        c.acquire = this;
        c.blocking = caller == Thread.currentThread();
        c.virtual = c.blocking && Conn.isVirtual(caller);
        int r = cl.tryEnqueue(c);
        if (r == Conn.ENQ_OK) {
            call = c;
            lastAddr = c.conn.addr;
            if (c.flush) {
                toFlush = c;
            }
            return;
        }
        if (r == Conn.ENQ_UNSUPPORTED) {
            fail(new UnsupportedFeatureException("key sets are not supported by this server (protocol 1.1 KEY_SETS, docs/protocol.md §12.1); nothing sent"));
            return;
        }
        long limit = budgetEnd;
        if (r != Conn.ENQ_FULL) {
            Throwable ce = cl.configErr();
            if (ce != null) {
                // Every connection failed auth or TLS: retrying will not help (R4, R5).
                fail(TicketingClient.connectError(ce));
                return;
            }
            if (limit - grace < 0 && cl.firstConnecting()) {
                limit = grace; // a connection is being opened for the first time (R1)
            }
        }
        if (System.nanoTime() - limit >= 0) {
            fail(r == Conn.ENQ_FULL ? new AcquireTimeoutException("no free max_inflight slot within the wait") : cl.connectError());
            return;
        }
        waitedForConnection = true;
        cl.schedule(this::attempt, TicketingClient.POLL_NANOS);
    }

    private void fail(TicketingException e) {
        finished = true;
        result.completeExceptionally(e.at(cl.where(keys == null ? "acquire" : "acquire set", key, lastAddr)));
    }

    /**
     * The sweeper found c written and unanswered past its wait plus the answer allowance
     * (R2): withdraws it (a grant that arrives later is released) and ends Indeterminate.
     */
    void overdue(Call c) {
        lock.lock();
        try {
            if (finished || call != c) {
                return;
            }
            long waited = c.arg & 0xffffffffL;
            cl.abandoned.incrementAndGet(); // until onAnswer has seen its answer (drain)
            c.conn.withdraw(c); // when answered meanwhile, onAnswer compensates a grant
            fail(new IndeterminateException("no answer within " + (waited + cl.answerAllowanceNanos / 1_000_000L)
                    + " ms of the request's write (its wait " + waited + " ms + the answer allowance "
                    + cl.answerAllowanceNanos / 1_000_000L + " ms); withdrawn"));
        } finally {
            lock.unlock();
        }
    }

    /** Withdraws; false when the result is already decided. */
    boolean cancel() {
        lock.lock();
        try {
            return cancelLocked();
        } finally {
            lock.unlock();
        }
    }

    private boolean cancelLocked() {
        if (finished) {
            return false;
        }
        finished = true;
        Call c = call;
        if (c != null) {
            cl.abandoned.incrementAndGet(); // until onAnswer has seen its answer (drain)
            c.conn.withdraw(c); // when already answered, onAnswer compensates a grant
        }
        result.completeExceptionally(new CancellationException("acquire cancelled"));
        return true;
    }

    void onAnswer(Call c) {
        lock.lock();
        try {
            onAnswerLocked(c);
        } finally {
            lock.unlock();
        }
    }

    private void onAnswerLocked(Call c) {
        if (c != call) {
            return;
        }
        call = null;
        Wire.Response r = c.resp;
        if (finished) {
            if (c.fail == Call.FAIL_NONE && r.status() == Wire.ST_GRANTED) {
                cl.compensate(key, keys, r.value());
            }
            cl.abandoned.decrementAndGet(); // the compensation (if any) is queued: counted in releasing
            return;
        }
        if (c.fail != Call.FAIL_NONE) {
            if (c.fail == Call.FAIL_LOST) {
                if (c.failCause instanceof ClientClosedException) {
                    fail(new IndeterminateException("client closed after the acquire was sent", -1, c.failCause));
                } else {
                    fail(new IndeterminateException("connection lost after the request was written: " + c.failCause, -1, c.failCause));
                }
                return;
            }
            if (cl.isClosed()) {
                fail(new ClientClosedException("client closed"));
                return;
            }
            retry(0);
            return;
        }
        switch (r.status()) {
            case Wire.ST_GRANTED:
                long deadline = c.sentNanos + r.queued() * 16_000_000L + TimeUnit.MILLISECONDS.toNanos(leaseMs);
                Lease l = new Lease(cl, key, keys, r.value(), deadline);
                long left = deadline - System.nanoTime();
                if (minRemainingNanos > 0 && left < minRemainingNanos) {
                    l.releaseInBackground(); // R14: the grant is released at once
                    fail(new InsufficientLeaseException("granted with " + Math.max(0, left / 1_000_000) + " ms of the lease left, below min_remaining "
                            + TimeUnit.NANOSECONDS.toMillis(minRemainingNanos) + " ms; released"));
                    return;
                }
                finished = true;
                result.complete(l);
                return;
            case Wire.ST_TIMEOUT:
                fail(new AcquireTimeoutException("timed out, not acquired"));
                return;
            case Wire.ST_BUSY:
                fail(new BusyException("busy (" + TicketingClient.busyName(r.code()) + "), not acquired", r.code(), null));
                return;
            case Wire.ST_UNKNOWN:
                fail(new IndeterminateException("the cluster could not confirm the commit", r.code() == 0 ? -1 : r.code(), null));
                return;
            case Wire.ST_ERROR:
                fail(TicketingClient.serverError(r));
                return;
            case Wire.ST_MOVED:
            default:
                String addr = new String(r.payload(), StandardCharsets.UTF_8);
                cl.follow(addr);
                moves++;
                if (moves > TicketingClient.MAX_MOVES) {
                    rounds++;
                    long d = cl.redirectNanos(rounds);
                    if (waitMs == 0 || budgetEnd - System.nanoTime() <= d) {
                        fail(new ConnectionException("no leader: " + moves + " consecutive redirects (last to \"" + addr + "\")"));
                        return;
                    }
                    moves = 0;
                    retry(d);
                    return;
                }
                retry(0);
        }
    }

    private void retry(long delay) {
        if (waitMs > 0) {
            long rem = budgetEnd - System.nanoTime() - delay;
            if (rem < 1_000_000) {
                fail(new AcquireTimeoutException("timed out, not acquired"));
                return;
            }
            waitMs = rem / 1_000_000;
        }
        if (delay > 0) {
            cl.schedule(this::attempt, delay);
        } else {
            cl.schedule(this::attempt, 0); // off the reader thread
        }
    }
}

package io.ticketing.client;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One release (R, or X for a key set) until the server's {@code O} or {@code N}, or its 5 s window
 * ends (the client's sweeper gives up on it: {@link IndeterminateException}): retried when never
 * sent, after a lost connection (then "maybe": a later {@code N} is indeterminate), {@code M}
 * (followed, 3 hops then a short backoff) and {@code U}. The release seam of the client, as
 * Lettuce and Jedis keep command retry apart from the connection. Internal.
 */
final class ReleaseOp {
private static final System.Logger LOG = System.getLogger("io.ticketing.client");
private final TicketingClient cl;
    final byte[] key;
    byte[][] keys; // a key set's (X), else null
    final long token;
    final boolean compensation;
    final long deadline = System.nanoTime() + TicketingClient.RELEASE_WINDOW_NANOS;
    boolean maybe;
    int moves;
    int retries;
    Throwable cause;
    private final ReentrantLock lock = new ReentrantLock(); // not a monitor (virtual threads)
    String lastAddr; // the server of the last attempt, for messages
    volatile boolean finished;
    final CompletableFuture<Void> result = new CompletableFuture<>();
    Thread caller; // a blocking caller's thread (its calls let the writer wait for others)
    Call toFlush; // the caller's call that it writes itself, off this operation's lock

    ReleaseOp(TicketingClient cl, byte[] key, long token, boolean compensation) {
        this.cl = cl;
        this.key = key;
        this.token = token;
        this.compensation = compensation;
    }

    /** Sends the first attempt; the client's sweeper gives up on it after the window. */
    void start() {
        attempt();
    }

    void giveUpNow() {
        lock.lock();
        try {
            giveUpNowLocked();
        } finally {
            lock.unlock();
        }
    }

    private void giveUpNowLocked() {
        if (!finished) {
            finish(giveUp());
        }
    }

    private IndeterminateException giveUp() {
        return new IndeterminateException("release not confirmed within 5 s" + (cause != null ? ": " + cause : ""), -1, cause);
    }

    private void finish(TicketingException e) {
        finished = true;
        cl.releasing.decrementAndGet();
        if (e != null) {
            e.at(cl.where((compensation ? "background release of" : "release") + (keys == null ? "" : " set"), key, lastAddr));
        }
        if (e == null) {
            result.complete(null);
            if (compensation) {
                LOG.log(System.Logger.Level.DEBUG, "ticketing: released a grant that arrived after its acquire was cancelled");
            }
        } else {
            result.completeExceptionally(e);
            if (compensation) {
                LOG.log(System.Logger.Level.WARNING, "ticketing: background release failed: " + e.getMessage());
            }
        }
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
            finish(new IndeterminateException("client closed before the release was confirmed", -1, new ClientClosedException("client closed")));
            return;
        }
        if (System.nanoTime() >= deadline) {
            finish(giveUp());
            return;
        }
        Call c = new Call(keys == null ? Wire.OP_RELEASE : Wire.OP_RELEASE_SET, key, token, false, this::onAnswer);
        c.keys = keys;
        c.blocking = caller == Thread.currentThread();
        c.virtual = c.blocking && Conn.isVirtual(caller);
        c.release = this;
        int r = cl.tryEnqueue(c);
        if (r == Conn.ENQ_UNSUPPORTED) {
            finish(new UnsupportedFeatureException("key sets are not supported by this server (protocol 1.1 KEY_SETS); nothing sent"));
            return;
        }
        if (r != Conn.ENQ_OK) {
            cl.schedule(this::attempt, TicketingClient.POLL_NANOS * 2);
            return;
        }
        lastAddr = c.conn.addr;
        if (c.flush) {
            toFlush = c;
        }
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
        if (finished) {
            return;
        }
        if (c.fail != Call.FAIL_NONE) {
            cause = c.failCause;
            if (c.failCause instanceof ClientClosedException || cl.isClosed()) {
                finish(new IndeterminateException("client closed before the release was confirmed", -1, c.failCause));
                return;
            }
            if (c.fail == Call.FAIL_UNSENT) {
                cl.schedule(this::attempt, 0);
                return;
            }
            maybe = true;
            retries++;
            cl.schedule(this::attempt, cl.redirectNanos(retries));
            return;
        }
        Wire.Response r = c.resp;
        switch (r.status()) {
            case Wire.ST_RELEASED:
                finish(null);
                return;
            case Wire.ST_NOT_HOLDER:
                if (maybe) {
                    finish(new IndeterminateException("the token no longer holds the key; an earlier unconfirmed attempt may have released it"));
                } else {
                    finish(new NotHolderException("not the holder: the key is free or held with another token"));
                }
                return;
            case Wire.ST_MOVED:
                cl.follow(new String(r.payload(), StandardCharsets.UTF_8));
                moves++;
                if (moves > TicketingClient.MAX_MOVES) {
                    moves = 0;
                    retries++;
                    cl.schedule(this::attempt, cl.redirectNanos(retries));
                } else {
                    cl.schedule(this::attempt, 0);
                }
                return;
            case Wire.ST_UNKNOWN:
                maybe = true;
                retries++;
                cl.schedule(this::attempt, cl.redirectNanos(retries));
                return;
            default:
                finish(TicketingClient.serverError(r));
        }
    }
}

package io.ticketing.client;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;

/**
 * A held lock: the key, the fencing token and a conservative local deadline. Ownership is the
 * handle (its token), never a thread: any thread may close it, and another process may release
 * with {@link TicketingClient#release(String, long)} given the key and token.
 *
 * <p>{@link #close()} releases (try-with-resources). It is idempotent once the server confirmed
 * the release; the handle's state is cleared only after that confirmation, so a close that
 * failed with {@link IndeterminateException} may be retried.
 *
 * <p><b>Fencing.</b> Pass {@link #token()} with every write to the protected resource, and have
 * the resource reject a token lower than the highest it has seen, the check and the write in one
 * transaction.
 */
public final class Lease implements AutoCloseable {
    private final TicketingClient client;
    private final byte[] key;
    private final byte[][] keys; // a key set's keys (protocol.md §12.2), else null
    private final long token;
    private final long deadlineNanos;
    // No monitors (virtual-thread friendly: a virtual thread never blocks on one here).
    private final java.util.concurrent.atomic.AtomicBoolean released = new java.util.concurrent.atomic.AtomicBoolean();
    private final CompletableFuture<Void> releasedSignal = new CompletableFuture<>();

    Lease(TicketingClient client, byte[] key, long token, long deadlineNanos) {
        this(client, key, null, token, deadlineNanos);
    }

    Lease(TicketingClient client, byte[] key, byte[][] keys, long token, long deadlineNanos) {
        this.client = client;
        this.key = key;
        this.keys = keys;
        this.token = token;
        this.deadlineNanos = deadlineNanos;
    }

    /**
     * The key as a string (decoded as UTF-8).
     *
     * @return the key
     */
    public String key() {
        return new String(key, StandardCharsets.UTF_8);
    }

    /**
     * The keys this lease holds: the one key, or every key of a key set in the order asked
     * ({@link TicketingClient#acquireSet}).
     *
     * @return the keys (decoded as UTF-8)
     */
    public java.util.List<String> keys() {
        if (keys == null) {
            return java.util.List.of(key());
        }
        java.util.List<String> out = new java.util.ArrayList<>(keys.length);
        for (byte[] k : keys) {
            out.add(new String(k, StandardCharsets.UTF_8));
        }
        return java.util.List.copyOf(out);
    }

    /**
     * Whether this is the lease of a key set.
     *
     * @return true for a set
     */
    public boolean isSet() {
        return keys != null;
    }

    /**
     * The lease's end as a future (R12): completes normally at {@link #deadline()} minus
     * {@code margin} (at once when that has passed), or at once when the lease is released
     * through this handle; never exceptionally. Completes on the client's callback executor.
     * Cancel it to stop waiting (that does not touch the lease).
     *
     * <pre>{@code
     * lease.ending(Duration.ofSeconds(2)).thenRun(worker::stopWriting);
     * }</pre>
     *
     * @param margin how long before the conservative deadline it fires
     * @return completes when the lease is about to end or has been released
     */
    public CompletableFuture<Void> ending(Duration margin) {
        java.util.Objects.requireNonNull(margin, "margin");
        CompletableFuture<Void> f = new CompletableFuture<>();
        long d = deadlineNanos - margin.toNanos() - System.nanoTime();
        if (released.get() || d <= 0) {
            f.complete(null);
            return f;
        }
        java.util.concurrent.ScheduledFuture<?> t = client.completeLater(f, d);
        releasedSignal.thenRun(() -> f.complete(null));
        f.whenComplete((v, e) -> {
            if (t != null) {
                t.cancel(false);
            }
        });
        return f;
    }

    /**
     * The key's bytes.
     *
     * @return a copy of the key
     */
    public byte[] keyBytes() {
        return key.clone();
    }

    /**
     * The fencing token, a u64: read it as unsigned ({@link Long#toUnsignedString(long)},
     * {@link Long#compareUnsigned(long, long)}), or use {@link #tokenString()}.
     *
     * @return the token bits
     */
    public long token() {
        return token;
    }

    /**
     * The fencing token in decimal, exact. Tokens are u64 (docs/protocol.md): today's servers
     * start them near 1.9e18 (above 2^53, so never put one in a double or a JSON number; below
     * 2^63 ≈ 9.2e18 for now, but a {@code long} reads any token above 2^63 as negative), hence a
     * string, or {@link #token()} read as unsigned.
     *
     * @return the decimal token
     */
    public String tokenString() {
        return Long.toUnsignedString(token);
    }

    /**
     * The conservative local deadline: send time + the time the server says the acquire waited
     * in the queue + lease, measured on the monotonic clock and expressed as an {@code Instant}
     * of now's wall clock.
     *
     * @return the deadline
     */
    public Instant deadline() {
        return Instant.now().plusNanos(deadlineNanos - System.nanoTime());
    }

    /**
     * The time left before {@link #deadline()}; zero or negative when passed.
     *
     * @return the remaining time
     */
    public Duration remaining() {
        return Duration.ofNanos(deadlineNanos - System.nanoTime());
    }

    /**
     * Whether the lease ends within {@code margin} (keep a safety margin: clocks drift).
     *
     * @param margin the margin
     * @return true when less than {@code margin} is left
     */
    public boolean expiresWithin(Duration margin) {
        return remaining().compareTo(margin) < 0;
    }

    /**
     * Whether the server confirmed a release through this handle.
     *
     * @return true once released
     */
    public boolean isReleased() {
        return released.get();
    }

    /**
     * Releases the lock (retried for at most 5 s; success only on the server's {@code O}).
     * Idempotent after a confirmed release.
     *
     * @throws NotHolderException the lease had already ended (the handle is then cleared too)
     * @throws IndeterminateException no confirmation; may be retried
     */
    public void release() {
        if (released.get()) {
            return;
        }
        try {
            client.releaseBlocking(key, keys, token);
        } catch (NotHolderException e) {
            markReleased();
            throw e;
        }
        markReleased();
    }

    private void markReleased() {
        released.set(true);
        releasedSignal.complete(null);
    }

    /**
     * Releases asynchronously (completes on the client's callback executor); idempotent after a
     * confirmed release.
     *
     * @return completes on the server's {@code O}; fails like {@link #release()}
     */
    public CompletableFuture<Void> releaseAsync() {
        return releaseAsync(null);
    }

    /**
     * {@link #releaseAsync()} completing on {@code executor} (null: the client's callback
     * executor).
     *
     * @param executor where the future completes, or null
     * @return completes on the server's {@code O}
     */
    public CompletableFuture<Void> releaseAsync(java.util.concurrent.Executor executor) {
        if (released.get()) {
            return CompletableFuture.completedFuture(null);
        }
        CompletableFuture<Void> f = client.releaseAsync(key, keys, token, executor == null ? client.callbackExecutor() : executor);
        return f.whenComplete((v, e) -> {
            Throwable c = e instanceof java.util.concurrent.CompletionException && e.getCause() != null ? e.getCause() : e;
            if (c == null || c instanceof NotHolderException) {
                markReleased();
            }
        });
    }

    /** Same as {@link #release()}. */
    @Override
    public void close() {
        release();
    }

    /** Releases in the background (used when a lease is delivered to nobody). */
    CompletableFuture<Void> releaseInBackground() {
        if (!released.compareAndSet(false, true)) {
            return CompletableFuture.completedFuture(null);
        }
        releasedSignal.complete(null);
        return client.releaseBackground(key, keys, token, true);
    }

    @Override
    public String toString() {
        return "Lease[" + (keys == null ? "key=" + key() : "keys=" + keys()) + ", token=" + tokenString() + ", remaining=" + remaining() + "]";
    }
}

package io.ticketing.testkit;

import io.ticketing.client.Lease;
import io.ticketing.client.TicketingClient;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;

/**
 * The testkit driver for the Java API: blocking calls, one thread per command, cancel = interrupt.
 * With {@code TESTKIT_VARIANT=async} (the testkit language {@code java-async}) it drives the
 * {@code CompletableFuture} API instead: acquireAsync / releaseAsync, cancel = future.cancel.
 */
public final class JavaDriver {
    private static final boolean ASYNC = "async".equals(System.getenv("TESTKIT_VARIANT"));
    private final Map<Object, Thread> running = new ConcurrentHashMap<>();
    private final Map<Object, CompletableFuture<?>> futures = new ConcurrentHashMap<>();
    private final Map<String, Lease> leases = new ConcurrentHashMap<>(); // by token, for release_lease
    private final Map<Object, Boolean> cancelled = new ConcurrentHashMap<>();
    private volatile TicketingClient client;

    private JavaDriver() {}

    /**
     * Entry point.
     *
     * @param args none
     * @throws Exception on I/O failure of stdin
     */
    public static void main(String[] args) throws Exception {
        new JavaDriver().loop();
    }

    private void loop() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<?, ?> cmd;
            try {
                cmd = (Map<?, ?>) Json.parse(line);
            } catch (RuntimeException e) {
                System.err.println("driver: bad line: " + e);
                continue;
            }
            dispatch(cmd);
        }
        // EOF ends the program: scopes still open end first (their leases are released, R10),
        // as every pending command is cancelled and waited for; then the client closes.
        for (Object id : running.keySet()) {
            cancelled.put(id, true);
        }
        for (CompletableFuture<?> f : futures.values()) {
            f.cancel(true);
        }
        if (!ASYNC) {
            // (java-async: cancelling the futures ends every command; an interrupt could cut the
            // scope's wait for its release, and close() would then drop the release.)
            for (Thread t : running.values()) {
                t.interrupt();
            }
        }
        long end = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
        for (Thread t : running.values()) {
            long left = (end - System.nanoTime()) / 1_000_000;
            if (left > 0) {
                t.join(left);
            }
        }
        TicketingClient c = client;
        if (c != null) {
            c.drain(Duration.ofSeconds(6)); // a grant that won the race with the cancel is released
            c.close();
        }
        System.out.flush();
        System.exit(0);
    }

    private void dispatch(Map<?, ?> cmd) {
        Object id = cmd.get("id");
        String name = String.valueOf(cmd.get("cmd"));
        switch (name) {
            case "connect":
                run(id, () -> {
                    TicketingClient old = client;
                    client = null;
                    if (old != null) {
                        old.close();
                    }
                    client = DriverSupport.connect(cmd);
                    return DriverSupport.ok(id);
                });
                return;
            case "cancel": {
                Object target = cmd.get("target");
                cancelled.put(target, true);
                if (ASYNC) {
                    CompletableFuture<?> f = futures.get(target);
                    if (f != null) {
                        f.cancel(true);
                    }
                } else {
                    Thread t = running.get(target);
                    if (t != null) {
                        t.interrupt();
                    }
                }
                DriverSupport.emit(DriverSupport.ok(id));
                return;
            }
            case "close":
                run(id, () -> {
                    TicketingClient c = client;
                    if (c != null) {
                        c.close();
                    }
                    return DriverSupport.ok(id);
                });
                return;
            case "info":
                DriverSupport.emit(DriverSupport.info(id, ASYNC ? "java-async" : "java"));
                return;
            case "acquire":
                run(id, () -> granted(id, acquire(id, cmd)));
                return;
            case "try_acquire":
                run(id, () -> {
                    Map<String, Object> m = DriverSupport.ok(id);
                    java.util.Optional<Lease> o;
                    if (ASYNC) {
                        try {
                            o = java.util.Optional.of(acquire(id, cmd));
                        } catch (io.ticketing.client.AcquireTimeoutException e) {
                            o = java.util.Optional.empty();
                        }
                    } else if (DriverSupport.keyString(cmd) != null) {
                        o = cl().tryAcquire(DriverSupport.keyString(cmd), DriverSupport.ms(cmd, "lease_ms"), DriverSupport.ms(cmd, "wait_ms"));
                    } else {
                        o = cl().tryAcquire(DriverSupport.key(cmd), DriverSupport.ms(cmd, "lease_ms"), DriverSupport.ms(cmd, "wait_ms"));
                    }
                    m.put("acquired", o.isPresent());
                    if (o.isPresent()) {
                        leases.put(o.get().tokenString(), o.get());
                        m.put("token", o.get().tokenString());
                    }
                    return m;
                });
                return;
            case "release_lease":
                run(id, () -> {
                    Lease l = leases.get(String.valueOf(cmd.get("token")));
                    if (l == null) {
                        return DriverSupport.err(id, "internal", -1, "no lease with that token in this driver");
                    }
                    boolean already = l.isReleased();
                    if (ASYNC) {
                        await(id, l.releaseAsync());
                    } else {
                        l.release();
                    }
                    Map<String, Object> m = DriverSupport.ok(id);
                    m.put("already", already);
                    return m;
                });
                return;
            case "release":
                run(id, () -> {
                    String ks = DriverSupport.keyString(cmd);
                    long tok = DriverSupport.token(cmd);
                    if (ASYNC) {
                        await(id, ks != null ? cl().releaseAsync(ks, tok) : cl().releaseAsync(DriverSupport.key(cmd), tok));
                    } else if (ks != null) {
                        cl().release(ks, tok);
                    } else {
                        cl().release(DriverSupport.key(cmd), tok);
                    }
                    return DriverSupport.ok(id);
                });
                return;
            case "acquire_set":
                run(id, () -> {
                    java.util.List<String> ks = DriverSupport.keys(cmd);
                    Duration lease = DriverSupport.ms(cmd, "lease_ms");
                    Duration wait = DriverSupport.ms(cmd, "wait_ms");
                    return granted(id, ASYNC ? await(id, cl().acquireSetAsync(ks, lease, wait)) : cl().acquireSet(ks, lease, wait));
                });
                return;
            case "release_set":
                run(id, () -> {
                    if (ASYNC) {
                        await(id, cl().releaseSetAsync(DriverSupport.keys(cmd), DriverSupport.token(cmd)));
                    } else {
                        cl().releaseSet(DriverSupport.keys(cmd), DriverSupport.token(cmd));
                    }
                    return DriverSupport.ok(id);
                });
                return;
            case "lease_ending":
                run(id, () -> {
                    Lease l = leases.get(String.valueOf(cmd.get("token")));
                    if (l == null) {
                        return DriverSupport.err(id, "internal", -1, "no lease with that token in this driver");
                    }
                    await(id, l.ending(DriverSupport.ms(cmd, "margin_ms")));
                    Map<String, Object> m = DriverSupport.ok(id);
                    m.put("remaining_ms", l.remaining().toMillis());
                    return m;
                });
                return;
            case "with_lock":
                run(id, () -> {
                    String[] token = new String[1];
                    boolean fail = Boolean.TRUE.equals(cmd.get("fail"));
                    if (ASYNC) {
                        // The async scope: the release chained after the work, failing, cancelled
                        // (the program's exit, R10) or not.
                        Lease l = acquire(id, cmd);
                        token[0] = l.tokenString();
                        long hold = DriverSupport.ms(cmd, "hold_ms").toMillis();
                        CompletableFuture<Void> work = new CompletableFuture<>();
                        CompletableFuture.delayedExecutor(hold, java.util.concurrent.TimeUnit.MILLISECONDS).execute(() -> {
                            if (fail) {
                                work.completeExceptionally(new ScopeFailure());
                            } else {
                                work.complete(null);
                            }
                        });
                        CompletableFuture<Void> done = work.handle((v, e) -> null).thenCompose(v -> l.releaseAsync());
                        try {
                            await(id, work);
                        } catch (ScopeFailure e) {
                            // raised inside the scope as asked
                        } finally {
                            done.get(); // the scope's release, whatever ended the work
                        }
                    } else {
                        try (Lease l = acquire(id, cmd)) {
                            token[0] = l.tokenString();
                            Thread.sleep(DriverSupport.ms(cmd, "hold_ms").toMillis());
                            if (fail) {
                                throw new ScopeFailure();
                            }
                        } catch (ScopeFailure e) {
                            // raised inside the scope as asked; the scope released the lease
                        }
                    }
                    Map<String, Object> m = DriverSupport.ok(id);
                    m.put("token", token[0]);
                    return m;
                });
                return;
            default:
                DriverSupport.emit(DriverSupport.err(id, "unsupported", -1, "unknown cmd " + name));
        }
    }

    /** The answer to a grant (kept by token for release_lease and lease_ending). */
    private Map<String, Object> granted(Object id, Lease l) {
        leases.put(l.tokenString(), l);
        Map<String, Object> m = DriverSupport.ok(id);
        m.put("token", l.tokenString());
        m.put("deadline_in_ms", l.remaining().toMillis());
        return m;
    }

    /** acquire / with_lock: the String API for a key given as a string (R8), min_remaining_ms (R14). */
    private Lease acquire(Object id, Map<?, ?> cmd) throws Exception {
        String ks = DriverSupport.keyString(cmd);
        Duration lease = DriverSupport.ms(cmd, "lease_ms");
        Duration wait = DriverSupport.ms(cmd, "wait_ms");
        Object mr = cmd.get("min_remaining_ms");
        Duration min = mr instanceof Number ? Duration.ofMillis(((Number) mr).longValue()) : null;
        if (!ASYNC) {
            if (ks == null) {
                return cl().acquire(DriverSupport.key(cmd), lease, wait);
            }
            return min == null ? cl().acquire(ks, lease, wait) : cl().acquire(ks, lease, wait, min);
        }
        if (ks == null) {
            return await(id, cl().acquireAsync(DriverSupport.key(cmd), lease, wait));
        }
        return await(id, min == null ? cl().acquireAsync(ks, lease, wait) : cl().acquireAsync(ks, lease, wait, min));
    }

    /** Waits for an async call's future; a cancel command cancels it (java-async). */
    private <T> T await(Object id, CompletableFuture<T> f) throws Exception {
        futures.put(id, f);
        try {
            if (Boolean.TRUE.equals(cancelled.get(id))) {
                f.cancel(true);
            }
            return f.get();
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof Exception) {
                throw (Exception) c;
            }
            throw e;
        } finally {
            futures.remove(id, f);
        }
    }

    private TicketingClient cl() {
        TicketingClient c = client;
        if (c == null) {
            throw new io.ticketing.client.ClientClosedException("no client: connect first");
        }
        return c;
    }

    interface Body {
        Map<String, Object> run() throws Exception;
    }

    private void run(Object id, Body body) {
        Thread t = new Thread(() -> {
            Map<String, Object> res;
            try {
                res = body.run();
            } catch (Throwable e) {
                res = DriverSupport.error(id, e);
            }
            running.remove(id);
            DriverSupport.emit(res);
        }, "cmd-" + id);
        t.setDaemon(true);
        running.put(id, t);
        if (Boolean.TRUE.equals(cancelled.get(id))) {
            t.interrupt();
        }
        t.start();
    }

    private static final class ScopeFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        ScopeFailure() {
            super("failing inside with_lock, as asked");
        }
    }
}

package io.ticketing.client;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;

/**
 * A client of a Ticketing lock server or cluster: thread-safe, {@link AutoCloseable}, one per
 * application. It keeps one persistent connection per address in the background (two for a
 * single address), reconnects with backoff (0.1 s doubling to 3.2 s, forever) and pipelines
 * every request.
 *
 * <pre>{@code
 * try (TicketingClient client = TicketingClient.builder().addresses("127.0.0.1:7001").build();
 *      Lease lease = client.acquire("orders/42", Duration.ofSeconds(30), Duration.ofSeconds(5))) {
 *     write(order, lease.token()); // the resource checks the fencing token
 * }
 * }</pre>
 */
public final class TicketingClient implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.ticketing.client");
    private String configured = ""; // the addresses given, for messages (R15)
    /** The client's version. */
    public static final String VERSION = "0.1.0";

    static final long MAX_U32 = 0xffffffffL;
    static final int MAX_MOVES = 3;
    private static final int MAX_EXTRA_ENDPOINTS = 32;
    private static final int RELEASE_QUEUE_LEN = 4096;
    static final long RELEASE_WINDOW_NANOS = TimeUnit.SECONDS.toNanos(5);
    static final long POLL_NANOS = TimeUnit.MILLISECONDS.toNanos(5);
    private static final long SWEEP_NANOS = TimeUnit.MILLISECONDS.toNanos(50);
    /** R1: how long past a shorter wait a call waits for a connection that is opened for the first time. */
    static final long FIRST_CONNECT_GRACE_NANOS = TimeUnit.SECONDS.toNanos(1);

    final byte[] token;
    final SSLContext ssl;
    final String serverName;
    final long connectTimeoutNanos;
    final long answerAllowanceNanos;
    final byte[] label; // the connection label (protocol.md §12.3), empty for none
    final boolean virtualReaders; // Builder.virtualThreadReaders
    private final long backoffBaseNanos;
    private final long backoffCapNanos;
    private final Executor callbacks;
    private final CallbackPool ownCallbacks;
    private final ScheduledExecutorService scheduler;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final Object poolLock = new Object();
    private volatile Pool pool;
    private volatile Endpoint leader;
    private final AtomicInteger rr = new AtomicInteger();
    final AtomicInteger releasing = new AtomicInteger(); // releases in flight (ReleaseOp)
    final AtomicInteger abandoned = new AtomicInteger(); // acquires given up while their answer is outstanding
    private final AtomicLong compensations = new AtomicLong();
    private volatile Throwable lastError;

    private static final class Endpoint {
        final String addr;
        final List<Conn> conns;

        Endpoint(String addr, List<Conn> conns) {
            this.addr = addr;
            this.conns = conns;
        }
    }

    private static final class Pool {
        final List<Endpoint> eps;
        final List<Conn> conns;
        final Map<String, Endpoint> byAddr;
        final int extra;

        Pool(List<Endpoint> eps, int extra) {
            this.eps = eps;
            this.extra = extra;
            List<Conn> cs = new ArrayList<>();
            Map<String, Endpoint> m = new HashMap<>();
            for (Endpoint e : eps) {
                cs.addAll(e.conns);
                m.put(e.addr, e);
            }
            this.conns = List.copyOf(cs);
            this.byAddr = Map.copyOf(m);
        }
    }

    /**
     * A new builder.
     *
     * @return the builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /** Configures and connects a {@link TicketingClient}. */
    public static final class Builder {
        private final List<String> addrs = new ArrayList<>();
        private String token = "";
        private SSLContext ssl;
        private String serverName;
        private Duration connectTimeout = Duration.ofSeconds(5);
        private Duration answerAllowance = Duration.ofSeconds(3);
        private Duration backoffBase = Duration.ofMillis(100);
        private Duration backoffCap = Duration.ofMillis(3200);
        private Executor executor;
        private String label;
        private String appName;
        private boolean virtualReaders;

        private Builder() {}

        /**
         * The whole connection label (protocol.md §12.3) that admin {@code locks} shows for this
         * client's locks and waiters; cut to 64 bytes at a character boundary. Default
         * {@code <host>/<pid> java/<version>} (with {@link #appName} in front when set); an empty
         * label sends none.
         *
         * @param label the label (UTF-8, no control characters)
         * @return this builder
         */
        public Builder label(String label) {
            this.label = label;
            return this;
        }

        /**
         * Read each connection's answers on a virtual thread (JDK 21+; ignored before): for
         * applications whose callers are virtual threads, where it saves a carrier wake-up per
         * answer (64 virtual callers on JDK 25: more pairs/s in every alternating round and about
         * half the client CPU per pair; README "Which API"). Default false (a platform thread), which suits
         * platform threads, the async API and coroutines.
         *
         * @param virtual true for virtual reader threads
         * @return this builder
         */
        public Builder virtualThreadReaders(boolean virtual) {
            this.virtualReaders = virtual;
            return this;
        }

        /**
         * The application name put in front of the default label:
         * {@code <app> <host>/<pid> java/<version>}.
         *
         * @param appName the application's name
         * @return this builder
         */
        public Builder appName(String appName) {
            this.appName = appName;
            return this;
        }

        /**
         * The servers' client addresses, {@code host:port} (a cluster: every node).
         *
         * @param addresses the addresses
         * @return this builder
         */
        public Builder addresses(String... addresses) {
            addrs.addAll(Arrays.asList(addresses));
            return this;
        }

        /**
         * The servers' client addresses, {@code host:port}.
         *
         * @param addresses the addresses
         * @return this builder
         */
        public Builder addresses(List<String> addresses) {
            addrs.addAll(addresses);
            return this;
        }

        /**
         * The client token (never sent; used for the mutual HMAC proof). Null or empty: none.
         *
         * @param token the token
         * @return this builder
         */
        public Builder token(String token) {
            this.token = token == null ? "" : token;
            return this;
        }

        /**
         * Connect with TLS (1.2 or later) using this context; the certificate is checked against
         * the dialled host.
         *
         * @param context the TLS context (trust store, and a key for mutual TLS)
         * @return this builder
         */
        public Builder tls(SSLContext context) {
            this.ssl = context;
            return this;
        }

        /**
         * Connect with TLS, verifying the server's certificate against {@code serverName}.
         *
         * @param context the TLS context
         * @param serverName the name the server's certificate must carry (null: the dialled host)
         * @return this builder
         */
        public Builder tls(SSLContext context, String serverName) {
            this.ssl = context;
            this.serverName = serverName;
            return this;
        }

        /**
         * Connect with TLS using PEM files: the CA bundle to trust (null: the JDK's trust store),
         * and for mutual TLS the client certificate chain and its key (PKCS#8, or SEC1 P-256).
         *
         * @param caPem the CA certificates, or null
         * @param certPem the client certificate chain, or null
         * @param keyPem the client key, or null
         * @param serverName the name the server's certificate must carry (null: the dialled host)
         * @return this builder
         * @throws InvalidArgumentException a file cannot be read or parsed
         */
        public Builder tls(java.nio.file.Path caPem, java.nio.file.Path certPem, java.nio.file.Path keyPem, String serverName) {
            try {
                this.ssl = Pem.context(caPem, certPem, keyPem);
            } catch (java.io.IOException | java.security.GeneralSecurityException e) {
                throw new InvalidArgumentException("TLS files: " + e.getMessage(), -1, e);
            }
            this.serverName = serverName;
            return this;
        }

        /**
         * How long past its wait an acquire that was written may stay unanswered (a silent
         * server: stopped, partitioned) before it ends with {@link IndeterminateException} and
         * is withdrawn with {@code C} (docs/architecture.md, R2); counted from the request's
         * write. Default 3 s, as in every official client.
         *
         * @param allowance the allowance
         * @return this builder
         */
        public Builder answerAllowance(Duration allowance) {
            if (allowance.isNegative() || allowance.isZero()) {
                throw new InvalidArgumentException("answer allowance must be positive");
            }
            this.answerAllowance = allowance;
            return this;
        }

        /**
         * How long {@link #build()} (and any call, when no connection is up) waits for a
         * connection; default 5 s.
         *
         * @param timeout the budget
         * @return this builder
         */
        public Builder connectTimeout(Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new InvalidArgumentException("connect timeout must be positive");
            }
            this.connectTimeout = timeout;
            return this;
        }

        /**
         * Reconnect backoff: first step and ceiling (default 0.1 s and 3.2 s).
         *
         * @param base the first delay
         * @param cap the largest delay
         * @return this builder
         */
        public Builder reconnectBackoff(Duration base, Duration cap) {
            this.backoffBase = base;
            this.backoffCap = cap;
            return this;
        }

        /**
         * Where the futures of {@link #acquireAsync} complete (and so where dependent stages run);
         * default a small pool of daemon threads owned by the client (one per core, more while
         * callbacks block), never the common pool and never the client's I/O threads. The default
         * pool writes the requests its callbacks send in one batch after them, so chained async
         * calls cost no extra thread wake-up.
         *
         * @param executor the executor
         * @return this builder
         */
        public Builder callbackExecutor(Executor executor) {
            this.executor = executor;
            return this;
        }

        /**
         * Starts the connections and waits until one is up (within the connect timeout).
         *
         * @return the connected client
         * @throws ConnectionException no connection within the timeout
         * @throws AuthenticationException the server refused the token or failed its proof
         * @throws InvalidArgumentException no address, or a malformed one
         */
        public TicketingClient build() {
            if (addrs.isEmpty()) {
                throw new InvalidArgumentException("no server address");
            }
            LinkedHashSet<String> uniq = new LinkedHashSet<>();
            for (String a : addrs) {
                int i = a == null ? -1 : a.lastIndexOf(':');
                if (i <= 0 || i == a.length() - 1) {
                    throw new InvalidArgumentException("address " + a + ": want host:port");
                }
                try {
                    int p = Integer.parseInt(a.substring(i + 1));
                    if (p < 0 || p > 65535) {
                        throw new NumberFormatException();
                    }
                } catch (NumberFormatException e) {
                    throw new InvalidArgumentException("address " + a + ": bad port");
                }
                uniq.add(a);
            }
            TicketingClient cl = new TicketingClient(this);
            cl.start(new ArrayList<>(uniq));
            return cl;
        }
    }

    private TicketingClient(Builder b) {
        token = b.token.getBytes(StandardCharsets.UTF_8);
        ssl = b.ssl;
        serverName = b.serverName;
        connectTimeoutNanos = b.connectTimeout.toNanos();
        answerAllowanceNanos = b.answerAllowance.toNanos();
        label = connLabel(b.label, b.appName);
        virtualReaders = b.virtualReaders;
        backoffBaseNanos = b.backoffBase.toNanos();
        backoffCapNanos = b.backoffCap.toNanos();
        ScheduledThreadPoolExecutor s = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "ticketing-scheduler");
            t.setDaemon(true);
            return t;
        });
        s.setRemoveOnCancelPolicy(true);
        scheduler = s;
        if (b.executor != null) {
            callbacks = b.executor;
            ownCallbacks = null;
        } else {
            ownCallbacks = new CallbackPool(Math.max(2, Runtime.getRuntime().availableProcessors()));
            callbacks = ownCallbacks;
        }
        // One periodic sweeper instead of a timer per call: gives up releases past their 5 s
        // window and lets the callback pool grow when its work stalls.
        s.scheduleWithFixedDelay(this::sweep, SWEEP_NANOS, SWEEP_NANOS, TimeUnit.NANOSECONDS);
    }

    private void sweep() {
        if (ownCallbacks != null) {
            ownCallbacks.tick();
        }
        Pool p = pool;
        if (p == null) {
            return;
        }
        long now = System.nanoTime();
        if (ownCallbacks != null) {
            for (Conn c : p.conns) {
                c.kickStale(now, SWEEP_NANOS / 5);
            }
        }
        List<Call> overdue = null;
        for (Conn c : p.conns) {
            overdue = c.overdueAcquires(now, answerAllowanceNanos, overdue);
        }
        if (overdue != null) {
            for (Call c : overdue) {
                c.acquire.overdue(c);
            }
        }
        if (releasing.get() == 0) {
            return;
        }
        List<ReleaseOp> expired = null;
        for (Conn c : p.conns) {
            expired = c.expiredReleases(now, expired);
        }
        if (expired != null) {
            for (ReleaseOp op : expired) {
                op.giveUpNow();
            }
        }
    }

    private void start(List<String> addrs) {
        configured = String.join(", ", addrs);
        int per = addrs.size() == 1 ? 2 : 1;
        List<Endpoint> eps = new ArrayList<>();
        for (String a : addrs) {
            eps.add(newEndpoint(a, per));
        }
        pool = new Pool(eps, 0);
        for (Conn c : pool.conns) {
            c.start();
        }
        long end = System.nanoTime() + connectTimeoutNanos;
        try {
            while (true) {
                boolean allFatal = true;
                Throwable authErr = null;
                for (Conn c : pool.conns) {
                    c.mu.lock();
                    try {
                        if (c.isUpLocked()) {
                            return;
                        }
                        if (c.failures > 0 && isFatal(c.lastError)) {
                            authErr = c.lastError;
                        } else {
                            allFatal = false;
                        }
                    } finally {
                        c.mu.unlock();
                    }
                }
                boolean allFailed = allFatal;
                if (allFailed && authErr != null) {
                    close();
                    throw connectError(authErr);
                }
                if (System.nanoTime() >= end) {
                    close();
                    throw connectError(lastError);
                }
                Thread.sleep(2);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            close();
            throw new ConnectionException("interrupted while connecting", -1, e);
        }
    }

    /** A connection failure that retrying will not cure: auth or TLS (R4, R5). */
    static boolean isFatal(Throwable e) {
        return e instanceof AuthenticationException || e instanceof TlsException || e instanceof SSLException;
    }

    /**
     * The default connection label, {@code <host>/<pid> java/<version>}, with {@code app} in front
     * when given (protocol.md §12.3), cut to 64 bytes.
     *
     * @param app the application name, or null
     * @return the label
     */
    public static String defaultLabel(String app) {
        String l = hostName() + "/" + ProcessHandle.current().pid() + " java/" + VERSION;
        if (app != null && !app.isEmpty()) {
            l = app + " " + l;
        }
        return Wire.cutLabel(l);
    }

    private static byte[] connLabel(String whole, String app) {
        String l = whole != null ? Wire.cutLabel(whole) : defaultLabel(app);
        byte[] b = l.getBytes(StandardCharsets.UTF_8);
        if (!Wire.validLabel(b)) {
            LOG.log(System.Logger.Level.WARNING, "ticketing: connection label \"" + l + "\" is not valid (UTF-8 without control characters): none sent");
            return new byte[0];
        }
        return b;
    }

    /** The host's name as gethostname(2) has it, without a DNS lookup where the OS tells it. */
    private static String hostName() {
        try {
            java.nio.file.Path p = java.nio.file.Path.of("/proc/sys/kernel/hostname");
            if (java.nio.file.Files.isReadable(p)) {
                String h = java.nio.file.Files.readString(p).trim();
                if (!h.isEmpty()) {
                    return h;
                }
            }
        } catch (java.io.IOException | RuntimeException e) {
            // fall through
        }
        for (String v : new String[] {"HOSTNAME", "COMPUTERNAME"}) {
            String h = System.getenv(v);
            if (h != null && !h.isEmpty()) {
                return h;
            }
        }
        try {
            return java.net.InetAddress.getLocalHost().getHostName();
        } catch (java.io.IOException | RuntimeException e) {
            return "unknown";
        }
    }

    /**
     * The configuration error (auth, TLS) when no connection is up and every connection's last
     * attempt failed with one (R4, R5), else null.
     */
    Throwable configErr() {
        Throwable e = null;
        for (Conn c : pool.conns) {
            Throwable x = c.configError();
            if (x == null) {
                return null;
            }
            e = x;
        }
        return e;
    }

    /** Whether a connection is making its first attempt (R1's grace). */
    boolean firstConnecting() {
        for (Conn c : pool.conns) {
            if (c.connecting()) {
                return true;
            }
        }
        return false;
    }

    private Endpoint newEndpoint(String addr, int n) {
        List<Conn> cs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            cs.add(new Conn(this, addr));
        }
        return new Endpoint(addr, List.copyOf(cs));
    }

    boolean isClosed() {
        return closed.get();
    }

    void setLastError(Throwable e) {
        lastError = e;
    }

    /** The error for "no connection within the budget", typed by its cause. */
    static TicketingException connectError(Throwable last) {
        if (last instanceof AuthenticationException) {
            AuthenticationException a = (AuthenticationException) last;
            return new AuthenticationException(a.getMessage(), a.code(), a);
        }
        if (last instanceof TlsException) {
            TlsException a = (TlsException) last;
            return new TlsException(a.getMessage(), a.code(), a);
        }
        for (Throwable t = last; t != null; t = t.getCause()) {
            if (t instanceof SSLException) {
                return new TlsException("TLS handshake failed: " + t.getMessage(), -1, last);
            }
        }
        if (last == null) {
            return new ConnectionException("no connection to any server within the connect timeout");
        }
        return new ConnectionException("no connection to any server: " + last, -1, last);
    }

    TicketingException connectError() {
        return connectError(lastError);
    }

    /** Reconnect delay: full jitter, uniform in [0, step] (architecture.md R16). */
    long backoffNanos(int attempt) {
        return ThreadLocalRandom.current().nextLong(step(backoffBaseNanos, backoffCapNanos, attempt) + 1);
    }

    long redirectNanos(int n) {
        return jitter(step(Math.min(backoffBaseNanos, TimeUnit.MILLISECONDS.toNanos(25)), TimeUnit.MILLISECONDS.toNanos(200), n));
    }

    private static long step(long base, long cap, int n) {
        long d = base;
        for (int i = 1; i < n && d < cap; i++) {
            d *= 2;
        }
        return Math.min(d, cap);
    }

    private static long jitter(long step) {
        if (step <= 1) {
            return step;
        }
        long half = step / 2;
        return half + ThreadLocalRandom.current().nextLong(step - half + 1);
    }

    java.util.concurrent.ScheduledFuture<?> schedule(Runnable r, long nanos) {
        try {
            return scheduler.schedule(r, nanos, TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            r.run(); // closed: the task sees it and ends
            return null;
        }
    }

    Executor callbackExecutor() {
        return callbacks;
    }

    /** Completes f on the callback executor after nanos (Lease#ending). */
    java.util.concurrent.ScheduledFuture<?> completeLater(CompletableFuture<Void> f, long nanos) {
        return schedule(() -> {
            try {
                callbacks.execute(() -> f.complete(null));
            } catch (java.util.concurrent.RejectedExecutionException e) {
                f.complete(null);
            }
        }, nanos);
    }

    /** Leader first, then round robin over every connection. */
    int tryEnqueue(Call c) {
        int r = rr.getAndIncrement() & Integer.MAX_VALUE;
        int res = Conn.ENQ_DOWN;
        Endpoint ep = leader;
        if (ep != null) {
            int n = ep.conns.size();
            boolean connecting = false;
            for (int i = 0; i < n; i++) {
                Conn cn = ep.conns.get((r + i) % n);
                int x = cn.enqueue(c);
                if (x == Conn.ENQ_OK) {
                    return x;
                }
                if (x == Conn.ENQ_FULL || x == Conn.ENQ_UNSUPPORTED && res == Conn.ENQ_DOWN) {
                    res = x;
                }
                connecting |= cn.connecting();
            }
            if (res != Conn.ENQ_DOWN || connecting) {
                return res;
            }
        }
        List<Conn> conns = pool.conns;
        int n = conns.size();
        for (int i = 0; i < n; i++) {
            int x = conns.get((r + i) % n).enqueue(c);
            if (x == Conn.ENQ_OK) {
                return x;
            }
            if (x == Conn.ENQ_FULL || x == Conn.ENQ_UNSUPPORTED && res == Conn.ENQ_DOWN) {
                res = x;
            }
        }
        return res;
    }

    /** Remembers the leader an M answer named (adding its address when new). */
    void follow(String addr) {
        if (addr.isEmpty()) {
            leader = null;
            return;
        }
        Endpoint ep = pool.byAddr.get(addr);
        if (ep != null) {
            leader = ep;
            return;
        }
        int i = addr.lastIndexOf(':');
        if (i <= 0) {
            leader = null;
            return;
        }
        try {
            Integer.parseInt(addr.substring(i + 1));
        } catch (NumberFormatException e) {
            leader = null;
            return;
        }
        synchronized (poolLock) {
            Pool old = pool;
            ep = old.byAddr.get(addr);
            if (ep != null) {
                leader = ep;
                return;
            }
            if (isClosed() || old.extra >= MAX_EXTRA_ENDPOINTS) {
                leader = null;
                return;
            }
            ep = newEndpoint(addr, 1);
            List<Endpoint> eps = new ArrayList<>(old.eps);
            eps.add(ep);
            pool = new Pool(eps, old.extra + 1);
            LOG.log(System.Logger.Level.INFO, "ticketing: following the leader to a new address " + addr);
            for (Conn c : ep.conns) {
                c.start();
            }
            leader = ep;
        }
    }

    /** True when the calling thread is one of the default callback pool's (see Conn#enqueue). */
    boolean deferFlush(Conn c) {
        return ownCallbacks != null && ownCallbacks.defer(c);
    }

    /**
     * Writes the queued frames on the caller's own thread when its call was queued without waking
     * the connection's writer (a blocking caller's; one thread wake-up less per request). Never
     * under an operation's lock: the reader may need it to deliver an answer while this writes.
     */
    private static void flush(Call c) {
        if (c != null) {
            if (c.virtual) {
                // Holding the writer role, let the other virtual callers the reader has just
                // woken append their frames first (a virtual thread's yield is a cheap
                // reschedule; they only park): then one write carries them all, as the Go
                // client's writer batches, and one caller per batch yields, not every one.
                Thread.yield();
            }
            c.conn.flush(c);
        }
    }

    void complete(Call c) {
        try {
            c.handler.accept(c);
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "ticketing: internal handler failed: " + e);
        }
    }

    // ---- arguments ----

    static byte[] keyBytes(String key) {
        Objects.requireNonNull(key, "key");
        // A lone UTF-16 surrogate has no UTF-8 form: getBytes would send '?' instead, so two
        // different strings would lock one key (R8). Refused before sending.
        for (int i = 0; i < key.length(); i++) {
            char ch = key.charAt(i);
            if (Character.isHighSurrogate(ch) && i + 1 < key.length() && Character.isLowSurrogate(key.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(ch)) {
                throw new InvalidArgumentException("key has a lone UTF-16 surrogate at index " + i
                        + ": not valid UTF-8 (keys are 1..250 bytes of UTF-8)", 21, null);
            }
        }
        return key.getBytes(StandardCharsets.UTF_8);
    }

    static void checkToken(long token) {
        if (token == 0) {
            throw new InvalidArgumentException("token 0 is never issued (tokens are 1..2^64-1)");
        }
    }

    static void checkKey(byte[] key) {
        if (!Wire.validKey(key)) {
            throw new InvalidArgumentException("key must be 1..250 bytes of UTF-8 without control characters", 21, null);
        }
    }

    static long millis(Duration d, String what, boolean zeroOk) {
        Objects.requireNonNull(d, what);
        if (d.isNegative()) {
            throw new InvalidArgumentException(what + " " + d + " is negative");
        }
        long ms;
        try {
            ms = d.toMillis();
            if (d.minusMillis(ms).getNano() > 0) {
                ms++; // round up, as the Go client does
            }
        } catch (ArithmeticException e) {
            ms = Long.MAX_VALUE;
        }
        if (ms > MAX_U32) {
            throw new InvalidArgumentException(what + " " + d + " exceeds the protocol's u32 milliseconds");
        }
        if (ms == 0 && !zeroOk) {
            throw new InvalidArgumentException(what + " must be at least 1 ms");
        }
        return ms;
    }

    // ---- acquire ----

    /**
     * Acquires {@code key}, waiting in the key's FIFO queue up to {@code wait} (which bounds the
     * whole call, connecting included). Interrupting the thread withdraws the queued acquire (a
     * grant that won the race is released by the client).
     *
     * @param key the key (1..250 bytes of UTF-8, no control characters)
     * @param lease how long the server keeps the lock without a release (1 ms .. u32 ms)
     * @param wait how long to wait in the queue; zero: try once
     * @return the lease
     * @throws InterruptedException the thread was interrupted (nothing is held)
     * @throws AcquireTimeoutException not acquired within the wait
     * @throws BusyException the server refused at once (never retried)
     * @throws IndeterminateException sent without a definite answer: do not enter the section
     */
    public Lease acquire(String key, Duration lease, Duration wait) throws InterruptedException {
        return acquire(keyBytes(key), lease, wait);
    }

    /**
     * {@link #acquire(String, Duration, Duration)} with a raw byte key.
     *
     * @param key the key bytes
     * @param lease the lease
     * @param wait the wait
     * @return the lease
     * @throws InterruptedException the thread was interrupted (nothing is held)
     */
    public Lease acquire(byte[] key, Duration lease, Duration wait) throws InterruptedException {
        return await(newAcquire(key, null, lease, wait, null, true));
    }

    /**
     * {@link #acquire(String, Duration, Duration)} with a minimum working time (R14): when the
     * conservative remaining lease after the grant (see {@link Lease#remaining()}) is below
     * {@code minRemaining}, the client releases the grant at once and throws
     * {@link InsufficientLeaseException}.
     *
     * @param key the key
     * @param lease the lease
     * @param wait the wait
     * @param minRemaining the least time the caller needs the lock for
     * @return the lease, with at least {@code minRemaining} left
     * @throws InterruptedException the thread was interrupted (nothing is held)
     * @throws InsufficientLeaseException granted with less than {@code minRemaining} left (released)
     */
    public Lease acquire(String key, Duration lease, Duration wait, Duration minRemaining) throws InterruptedException {
        return await(newAcquire(keyBytes(key), null, lease, wait, minRemaining, true));
    }

    /**
     * Acquires every key of a <b>key set</b> atomically (protocol 1.1, docs/protocol.md §12.2):
     * 2..16 distinct keys, one lease, one wait, one fencing token; the set queues in every key's
     * FIFO queue at one instant, so sets never deadlock. {@link Lease#close()} releases the whole
     * set. Needs a server that announces key sets ({@link UnsupportedFeatureException} otherwise,
     * nothing sent).
     *
     * @param keys the keys (2..16, distinct, each as for {@link #acquire(String, Duration, Duration)})
     * @param lease the lease of the whole set
     * @param wait how long to wait; zero: try once
     * @return the lease of the set
     * @throws InterruptedException the thread was interrupted (the set is withdrawn)
     * @throws AcquireTimeoutException not acquired within the wait
     */
    public Lease acquireSet(java.util.Collection<String> keys, Duration lease, Duration wait) throws InterruptedException {
        byte[][] ks = setKeys(keys);
        return await(newAcquire(ks[0], ks, lease, wait, null, true));
    }

    /**
     * {@link #acquireSet} asynchronously (the future behaves as {@link #acquireAsync}'s).
     *
     * @param keys the keys
     * @param lease the lease
     * @param wait the wait
     * @return the future lease of the set
     */
    public CompletableFuture<Lease> acquireSetAsync(java.util.Collection<String> keys, Duration lease, Duration wait) {
        return acquireSetAsync(keys, lease, wait, callbacks);
    }

    /**
     * {@link #acquireSetAsync(java.util.Collection, Duration, Duration)} completing on {@code executor}.
     *
     * @param keys the keys
     * @param lease the lease
     * @param wait the wait
     * @param executor where the future completes
     * @return the future lease of the set
     */
    public CompletableFuture<Lease> acquireSetAsync(java.util.Collection<String> keys, Duration lease, Duration wait, Executor executor) {
        byte[][] ks;
        try {
            ks = setKeys(keys);
        } catch (TicketingException e) {
            return CompletableFuture.failedFuture(e);
        }
        return startAsync(ks[0], ks, lease, wait, null, executor);
    }

    /**
     * {@link #acquireAsync(String, Duration, Duration)} with a minimum working time (see
     * {@link #acquire(String, Duration, Duration, Duration)}).
     *
     * @param key the key
     * @param lease the lease
     * @param wait the wait
     * @param minRemaining the least time the caller needs the lock for
     * @return the future lease; fails with {@link InsufficientLeaseException}
     */
    public CompletableFuture<Lease> acquireAsync(String key, Duration lease, Duration wait, Duration minRemaining) {
        byte[] k;
        try {
            k = keyBytes(key);
        } catch (TicketingException e) {
            return CompletableFuture.failedFuture(e);
        }
        return startAsync(k, null, lease, wait, minRemaining, callbacks);
    }

    /**
     * {@link #acquireAsync(String, Duration, Duration, Duration)} completing on {@code executor}
     * (see {@link #acquireAsync(byte[], Duration, Duration, Executor)}).
     *
     * @param key the key
     * @param lease the lease
     * @param wait the wait
     * @param minRemaining the least time the caller needs the lock for, or null for none
     * @param executor where the future completes, or null for the client's callback executor
     * @return the future lease
     */
    public CompletableFuture<Lease> acquireAsync(String key, Duration lease, Duration wait, Duration minRemaining, Executor executor) {
        byte[] k;
        try {
            k = keyBytes(key);
        } catch (TicketingException e) {
            return CompletableFuture.failedFuture(e);
        }
        return startAsync(k, null, lease, wait, minRemaining, executor == null ? callbacks : executor);
    }

    /** The keys of a set, checked (2..16, each valid, distinct) before anything is sent (R8). */
    static byte[][] setKeys(java.util.Collection<String> keys) {
        Objects.requireNonNull(keys, "keys");
        if (keys.size() < Wire.MIN_SET_KEYS || keys.size() > Wire.MAX_SET_KEYS) {
            throw new InvalidArgumentException("keys: a key set has 2..16 keys, got " + keys.size(), 29, null);
        }
        byte[][] out = new byte[keys.size()][];
        java.util.Set<String> seen = new java.util.HashSet<>();
        int i = 0;
        for (String k : keys) {
            byte[] b = keyBytes(k);
            checkKey(b);
            if (!seen.add(k)) {
                throw new InvalidArgumentException("keys: " + describe(b) + " appears twice (the 2..16 keys of a set are distinct)", 29, null);
            }
            out[i++] = b;
        }
        return out;
    }

    private Lease await(AcquireOp op) throws InterruptedException {
        try {
            return op.result.get();
        } catch (InterruptedException e) {
            op.cancel();
            throw e;
        } catch (ExecutionException e) {
            throw rethrow(e.getCause());
        }
    }

    /**
     * Tries {@code key} once (wait 0).
     *
     * @param key the key
     * @param lease the lease
     * @return the lease, or empty when the key is held
     * @throws BusyException the server refused
     * @throws IndeterminateException sent without a definite answer
     */
    public Optional<Lease> tryAcquire(String key, Duration lease) {
        return tryAcquire(keyBytes(key), lease);
    }

    /**
     * A timed try (R13): waits up to {@code wait} like {@link #acquire(String, Duration, Duration)},
     * but "not acquired within the wait" is an empty {@code Optional}, not an exception.
     *
     * @param key the key
     * @param lease the lease
     * @param wait how long to wait in the queue; zero: try once
     * @return the lease, or empty when not acquired within the wait
     * @throws InterruptedException the thread was interrupted (the acquire is withdrawn)
     * @throws BusyException the server refused
     * @throws IndeterminateException sent without a definite answer
     */
    public Optional<Lease> tryAcquire(String key, Duration lease, Duration wait) throws InterruptedException {
        return tryAcquire(keyBytes(key), lease, wait);
    }

    /**
     * {@link #tryAcquire(String, Duration, Duration)} with a raw byte key.
     *
     * @param key the key bytes
     * @param lease the lease
     * @param wait the wait
     * @return the lease, or empty when not acquired within the wait
     * @throws InterruptedException the thread was interrupted (the acquire is withdrawn)
     */
    public Optional<Lease> tryAcquire(byte[] key, Duration lease, Duration wait) throws InterruptedException {
        try {
            return Optional.of(acquire(key, lease, wait));
        } catch (AcquireTimeoutException e) {
            return Optional.empty();
        }
    }

    /**
     * {@link #tryAcquire(String, Duration)} with a raw byte key.
     *
     * @param key the key bytes
     * @param lease the lease
     * @return the lease, or empty when the key is held
     */
    public Optional<Lease> tryAcquire(byte[] key, Duration lease) {
        AcquireOp op = newAcquire(key, null, lease, Duration.ZERO, null, true);
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return Optional.of(op.result.get());
                } catch (InterruptedException e) {
                    interrupted = true; // a try is short (bounded by the connect timeout)
                } catch (ExecutionException e) {
                    if (e.getCause() instanceof AcquireTimeoutException) {
                        return Optional.empty();
                    }
                    throw rethrow(e.getCause());
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Acquires asynchronously. The future completes on the client's callback executor (never on
     * an I/O thread nor the common pool). Cancelling it withdraws the queued acquire and
     * releases a grant that won the race. Stages derived from it ({@code thenApply},
     * {@code thenCompose}, {@code whenComplete}, ..., and stages derived from those) propagate:
     * cancelling one of them, or its {@code orTimeout} firing, while the acquire is still pending
     * withdraws the acquire the same way (and so fails every other stage of it). Once the acquire
     * completed, the lease is the caller's: cancelling a later stage releases nothing.
     *
     * @param key the key
     * @param lease the lease
     * @param wait the wait
     * @return the future lease
     */
    public CompletableFuture<Lease> acquireAsync(String key, Duration lease, Duration wait) {
        return acquireAsync(keyBytes(key), lease, wait);
    }

    /**
     * {@link #acquireAsync(String, Duration, Duration)} with a raw byte key.
     *
     * @param key the key bytes
     * @param lease the lease
     * @param wait the wait
     * @return the future lease
     */
    public CompletableFuture<Lease> acquireAsync(byte[] key, Duration lease, Duration wait) {
        return acquireAsync(key, lease, wait, callbacks);
    }

    /**
     * {@link #acquireAsync(byte[], Duration, Duration)} completing on {@code executor}. A direct
     * executor ({@code Runnable::run}) completes on the client's I/O thread: only for
     * continuations that never block (such as a coroutine resumption that is dispatched anyway).
     *
     * @param key the key bytes
     * @param lease the lease
     * @param wait the wait
     * @param executor where the future completes
     * @return the future lease
     */
    public CompletableFuture<Lease> acquireAsync(byte[] key, Duration lease, Duration wait, Executor executor) {
        return startAsync(key, null, lease, wait, null, executor);
    }

    private CompletableFuture<Lease> startAsync(byte[] key, byte[][] keys, Duration lease, Duration wait, Duration minRemaining, Executor executor) {
        AcquireFuture f;
        try {
            f = new AcquireFuture(newAcquire(key, keys, lease, wait, minRemaining, false));
        } catch (TicketingException e) {
            return CompletableFuture.failedFuture(e);
        }
        f.op.result.whenComplete((l, e) -> {
            try {
                executor.execute(() -> f.deliver(l, e));
            } catch (java.util.concurrent.RejectedExecutionException r) {
                f.deliver(l, e);
            }
        });
        return f;
    }

    /**
     * Starts an acquire; {@code blocking}: the calling thread waits for it (see
     * {@link Call#blocking}).
     */
    private AcquireOp newAcquire(byte[] key, byte[][] keys, Duration lease, Duration wait, Duration minRemaining, boolean blocking) {
        if (isClosed()) {
            throw new ClientClosedException("client closed");
        }
        byte[] k = key.clone();
        checkKey(k);
        long leaseMs = millis(lease, "lease", false);
        long waitMs = millis(wait, "wait", true);
        long minNanos = 0;
        if (minRemaining != null) {
            if (minRemaining.isNegative()) {
                throw new InvalidArgumentException("min_remaining " + minRemaining + " is negative (0 .. the lease)");
            }
            minNanos = minRemaining.toNanos();
        }
        AcquireOp op = new AcquireOp(this, k, leaseMs, waitMs);
        op.keys = keys;
        op.minRemainingNanos = minNanos;
        if (blocking) {
            op.caller = Thread.currentThread();
        }
        op.attempt();
        flush(op.toFlush);
        return op;
    }

    static RuntimeException rethrow(Throwable e) {
        if (e instanceof TicketingException) {
            TicketingException t = (TicketingException) e;
            // A copy with the caller's stack, the original as cause.
            return t;
        }
        if (e instanceof CancellationException) {
            return (CancellationException) e;
        }
        return new TicketingException("internal error: " + e, -1, e);
    }

    /** A key for messages: quoted, at most 40 bytes of it. */
    static String describe(byte[] key) {
        if (key.length <= 40) {
            return "\"" + new String(key, StandardCharsets.UTF_8) + "\"";
        }
        return "\"" + new String(key, 0, 40, StandardCharsets.UTF_8) + "…\" (" + key.length + " bytes)";
    }

    /** "acquire "k" at host:port" (the last server tried), or the configured servers. */
    String where(String op, byte[] key, String addr) {
        return op + " " + describe(key) + (addr != null ? " at " + addr : " (servers " + configured + ")");
    }

    static String busyName(int code) {
        switch (code) {
            case 1: return "QUEUE_FULL";
            case 2: return "OVERLOADED";
            case 3: return "CLOCK_UNHEALTHY";
            case 4: return "SHUTTING_DOWN";
            case 5: return "NO_QUORUM";
            default: return "code " + code;
        }
    }

    static InvalidArgumentException serverError(Wire.Response r) {
        return new InvalidArgumentException("server error " + r.code() + ": " + new String(r.payload(), StandardCharsets.UTF_8), r.code(), null);
    }

    // ---- release ----

    /**
     * Releases {@code key} held with {@code token} (from any thread or process that knows the
     * token). Retried for at most 5 s; success only on the server's {@code O}.
     *
     * @param key the key
     * @param token the fencing token of the grant
     * @throws NotHolderException the token no longer holds the key
     * @throws IndeterminateException no confirmation within 5 s (the lease is the safety net)
     */
    public void release(String key, long token) {
        release(keyBytes(key), token);
    }

    /**
     * {@link #release(String, long)} with a raw byte key.
     *
     * @param key the key bytes
     * @param token the token
     */
    public void release(byte[] key, long token) {
        byte[] k = key.clone();
        checkKey(k);
        releaseBlocking(k, null, token);
    }

    /**
     * Releases the key set {@code keys} held with {@code token} (protocol.md §12.2: the keys of
     * the set, in any order); retried for at most 5 s like {@link #release(String, long)}.
     *
     * @param keys the set's keys
     * @param token the set's fencing token
     * @throws NotHolderException the token does not hold exactly these keys (any more)
     * @throws IndeterminateException no confirmation within 5 s
     */
    public void releaseSet(java.util.Collection<String> keys, long token) {
        byte[][] ks = setKeys(keys);
        releaseBlocking(ks[0], ks, token);
    }

    /**
     * {@link #releaseSet} asynchronously; the future completes on the callback executor.
     *
     * @param keys the set's keys
     * @param token the set's token
     * @return completes on {@code O}
     */
    public CompletableFuture<Void> releaseSetAsync(java.util.Collection<String> keys, long token) {
        return releaseSetAsync(keys, token, callbacks);
    }

    /**
     * {@link #releaseSetAsync(java.util.Collection, long)} completing on {@code executor}.
     *
     * @param keys the set's keys
     * @param token the set's token
     * @param executor where the future completes
     * @return completes on {@code O}
     */
    public CompletableFuture<Void> releaseSetAsync(java.util.Collection<String> keys, long token, Executor executor) {
        byte[][] ks;
        try {
            ks = setKeys(keys);
        } catch (TicketingException e) {
            return CompletableFuture.failedFuture(e);
        }
        return releaseAsync(ks[0], ks, token, executor);
    }

    void releaseBlocking(byte[] k, byte[][] keys, long token) {
        checkToken(token);
        if (isClosed()) {
            // Nothing was sent: Closed, not Indeterminate (R7).
            throw new ClientClosedException((keys == null ? "release " : "release set ") + describe(k) + ": client closed, nothing sent");
        }
        ReleaseOp op = new ReleaseOp(this, k, token, false);
        op.keys = keys;
        op.caller = Thread.currentThread();
        releasing.incrementAndGet();
        op.start();
        flush(op.toFlush);
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    op.result.get();
                    return;
                } catch (InterruptedException e) {
                    interrupted = true; // bounded by the 5 s window
                } catch (ExecutionException e) {
                    throw rethrow(e.getCause());
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Releases asynchronously; the future completes on the callback executor.
     *
     * @param key the key
     * @param token the token
     * @return completes on {@code O}; fails with the same exceptions as {@link #release}
     */
    public CompletableFuture<Void> releaseAsync(String key, long token) {
        return releaseAsync(keyBytes(key), token);
    }

    /**
     * {@link #releaseAsync(String, long)} with a raw byte key.
     *
     * @param key the key bytes
     * @param token the token
     * @return completes on {@code O}
     */
    public CompletableFuture<Void> releaseAsync(byte[] key, long token) {
        return releaseAsync(key, token, callbacks);
    }

    /**
     * {@link #releaseAsync(String, long)} completing on {@code executor}.
     *
     * @param key the key
     * @param token the token
     * @param executor where the future completes, or null for the client's callback executor
     * @return completes on {@code O}
     */
    public CompletableFuture<Void> releaseAsync(String key, long token, Executor executor) {
        byte[] k;
        try {
            k = keyBytes(key);
        } catch (TicketingException e) {
            return CompletableFuture.failedFuture(e);
        }
        return releaseAsync(k, token, executor == null ? callbacks : executor);
    }

    /**
     * {@link #releaseAsync(byte[], long)} completing on {@code executor} (see
     * {@link #acquireAsync(byte[], Duration, Duration, Executor)}).
     *
     * @param key the key bytes
     * @param token the token
     * @param executor where the future completes
     * @return completes on {@code O}
     */
    public CompletableFuture<Void> releaseAsync(byte[] key, long token, Executor executor) {
        byte[] k = key.clone();
        try {
            checkKey(k);
        } catch (TicketingException e) {
            return CompletableFuture.failedFuture(e);
        }
        return releaseAsync(k, null, token, executor);
    }

    CompletableFuture<Void> releaseAsync(byte[] k, byte[][] keys, long token, Executor executor) {
        try {
            checkToken(token);
        } catch (TicketingException e) {
            return CompletableFuture.failedFuture(e);
        }
        if (isClosed()) {
            // Nothing was sent: Closed, not Indeterminate (R7).
            return CompletableFuture.failedFuture(new ClientClosedException((keys == null ? "release " : "release set ") + describe(k)
                    + ": client closed, nothing sent"));
        }
        ReleaseOp op = new ReleaseOp(this, k, token, false);
        op.keys = keys;
        releasing.incrementAndGet();
        op.start();
        CompletableFuture<Void> f = new CompletableFuture<>();
        op.result.whenComplete((v, e) -> {
            Runnable r = () -> {
                if (e != null) {
                    f.completeExceptionally(e);
                } else {
                    f.complete(null);
                }
            };
            try {
                executor.execute(r);
            } catch (java.util.concurrent.RejectedExecutionException x) {
                r.run();
            }
        });
        return f;
    }

    /** Queues a background release (compensation, or a lease closed from a cancelled path). */
    void compensate(byte[] key, byte[][] keys, long token) {
        compensations.incrementAndGet();
        releaseBackground(key, keys, token, true);
    }

    CompletableFuture<Void> releaseBackground(byte[] key, byte[][] keys, long token, boolean compensation) {
        if (isClosed() || releasing.incrementAndGet() > RELEASE_QUEUE_LEN) {
            if (!isClosed()) {
                releasing.decrementAndGet();
            }
            LOG.log(System.Logger.Level.WARNING, "ticketing: release queue full or client closed; a grant stays held until its lease ends");
            return CompletableFuture.failedFuture(new IndeterminateException("release queue full"));
        }
        ReleaseOp op = new ReleaseOp(this, key, token, compensation);
        op.keys = keys;
        op.start();
        return op.result;
    }

    /** The number of grants released because their acquire was abandoned (tests, metrics). */
    long compensations() {
        return compensations.get();
    }

    /**
     * Waits until the client's background work is done: acquires that were cancelled, interrupted
     * or timed out while their answer was outstanding have been answered (a grant that won the
     * race is released), and every release in flight (background ones included) is confirmed or
     * given up (5 s after it started). A short-lived program calls it before {@link #close()} so
     * that nothing it gave up on stays held until its lease ends (R10, as the Go client's
     * {@code Drain}).
     *
     * @param timeout how long to wait at most
     * @return true when idle, false when the timeout passed first
     * @throws InterruptedException the thread was interrupted
     */
    public boolean drain(Duration timeout) throws InterruptedException {
        long end = System.nanoTime() + timeout.toNanos();
        while (abandoned.get() > 0 || releasing.get() > 0) {
            if (isClosed() || System.nanoTime() - end >= 0) {
                return abandoned.get() == 0 && releasing.get() == 0;
            }
            Thread.sleep(2);
        }
        return true;
    }

    /**
     * Closes every connection. Pending acquires fail ({@link ClientClosedException}, or
     * {@link IndeterminateException} when one may have been granted as its connection closed).
     * Idempotent.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        if (Conn.STATS) {
            System.err.printf("ticketing stats: frames=%d writes=%d reads=%d%n", Conn.FRAMES.sum(), Conn.WRITES.sum(), Conn.READS.sum());
        }
        Pool p = pool;
        if (p != null) {
            for (Conn c : p.conns) {
                c.shutdown();
            }
            for (Conn c : p.conns) {
                try {
                    c.join();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        // Run what is scheduled now so that waiting operations see the close and end.
        for (Runnable r : scheduler.shutdownNow()) {
            try {
                r.run();
            } catch (RuntimeException e) {
                // ignore
            }
        }
        if (ownCallbacks != null) {
            ownCallbacks.shutdown();
        }
    }
}

package io.ticketing.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One persistent connection to one address, kept by one supervisor thread (dial, handshake,
 * write batches; after a loss back off and dial again, until close) and, while up, one reader
 * thread. Senders append their frame to the write buffer under {@link #mu} and kick the supervisor,
 * the writer, unless it is writing already; it swaps the buffer out and writes everything queued
 * meanwhile with one write; {@code taken} tells which calls may have reached the socket.
 * The reader decodes every answer of one read, matches them under one lock acquisition and runs
 * the handlers after the lock is released. Internal.
 */
final class Conn {
    private static final System.Logger LOG = System.getLogger("io.ticketing.client");
    static final int ENQ_OK = 0, ENQ_DOWN = 1, ENQ_FULL = 2, ENQ_UNSUPPORTED = 3;
    private static final int MAX_WRITE_BUFFER = 4 << 20;

    final TicketingClient cl;
    final String addr;
    private final String host;
    private final int port;

    final ReentrantLock mu = new ReentrantLock();
    private final Condition kick = mu.newCondition();
    private boolean up;
    private Socket sock;
    boolean everUp;
    int failures;
    Throwable lastError;
    private long maxInflight = 1;
    private int features; // from the feature pong of the current connection (protocol.md §12.1)
    private int inflight;
    private final Map<Integer, Call> pending = new HashMap<>();
    private int nextId;
    private byte[] wbuf = new byte[8192];
    private int wlen;
    private long seq;
    private long deferredAt; // when a frame was first queued for a callback worker to write, or 0
    private long taken;
    private int blockingPending; // pending calls of blocking callers (each a thread that waits)

    /** Thread.isVirtual (JDK 21+), found once; always false on Java 17-20. */
    private static final java.lang.invoke.MethodHandle IS_VIRTUAL = isVirtualHandle();

    private static java.lang.invoke.MethodHandle isVirtualHandle() {
        try {
            return java.lang.invoke.MethodHandles.publicLookup().findVirtual(Thread.class, "isVirtual",
                    java.lang.invoke.MethodType.methodType(boolean.class));
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    /**
     * A connection's reader: a virtual thread when asked and the JDK has them (21+; issue 34 item
     * 8: with callers on virtual threads its answers unpark them from a carrier, one carrier
     * wake-up per burst of answers instead of an external submission per answer), else a platform
     * daemon thread.
     */
    static Thread newReader(Runnable r, String name, boolean virtual) {
        if (virtual) {
            try {
                Object b = Thread.class.getMethod("ofVirtual").invoke(null);
                Class<?> bc = Class.forName("java.lang.Thread$Builder");
                b = bc.getMethod("name", String.class).invoke(b, name);
                return (Thread) bc.getMethod("unstarted", Runnable.class).invoke(b, r);
            } catch (ReflectiveOperationException e) {
                // before JDK 21: a platform thread
            }
        }
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    /** Whether t is a virtual thread (false before JDK 21). */
    static boolean isVirtual(Thread t) {
        if (IS_VIRTUAL == null || t == null) {
            return false;
        }
        try {
            return (boolean) IS_VIRTUAL.invokeExact(t);
        } catch (Throwable e) {
            return false;
        }
    }
    private Socket writer; // the socket whose output a thread (a sender or the supervisor) owns now
    private Call claim; // the call whose caller took the writer role at enqueue and will flush (Conn#flush)
    private Thread supervisor;

    Conn(TicketingClient cl, String addr) {
        this.cl = cl;
        this.addr = addr;
        int i = addr.lastIndexOf(':');
        String h = addr.substring(0, i);
        if (h.startsWith("[") && h.endsWith("]")) {
            h = h.substring(1, h.length() - 1);
        }
        this.host = h;
        this.port = Integer.parseInt(addr.substring(i + 1));
    }

    void start() {
        supervisor = new Thread(this::run, "ticketing-conn-" + addr);
        supervisor.setDaemon(true);
        supervisor.start();
    }

    void join() throws InterruptedException {
        if (supervisor != null) {
            supervisor.join(5000);
        }
    }

    void interrupt() {
        if (supervisor != null) {
            supervisor.interrupt();
        }
    }

    private void run() {
        int attempt = 0;
        while (!cl.isClosed()) {
            if (attempt > 0) {
                long d = cl.backoffNanos(attempt);
                try {
                    Thread.sleep(d / 1_000_000, (int) (d % 1_000_000));
                } catch (InterruptedException e) {
                    if (cl.isClosed()) {
                        return;
                    }
                }
            }
            Dialer.Dialed d;
            try {
                d = Dialer.dial(cl, host, port, addr);
            } catch (Throwable e) {
                if (cl.isClosed()) {
                    return;
                }
                failed(e);
                attempt++;
                continue;
            }
            if (!install(d)) {
                closeQuietly(d.socket());
                return;
            }
            serve(d.socket());
            if (cl.isClosed()) {
                return;
            }
            attempt = 1;
        }
    }

    private void failed(Throwable e) {
        mu.lock();
        int n;
        try {
            failures++;
            n = failures;
            lastError = e;
        } finally {
            mu.unlock();
        }
        cl.setLastError(e);
        LOG.log(n == 1 || e instanceof AuthenticationException ? System.Logger.Level.WARNING : System.Logger.Level.DEBUG,
                "ticketing: connect to " + addr + " failed (attempt " + n + "): " + e);
    }

    private boolean install(Dialer.Dialed d) {
        Socket s = d.socket();
        mu.lock();
        try {
            if (cl.isClosed()) {
                return false;
            }
            up = true;
            sock = s;
            features = d.features();
            maxInflight = d.maxInflight();
            everUp = true;
            failures = 0;
            lastError = null;
            inflight = 0;
            nextId = 0;
            seq = 0;
            taken = 0;
            wlen = 0;
            deferredAt = 0;
            writer = null;
            claim = null;
            blockingPending = 0;
        } finally {
            mu.unlock();
        }
        LOG.log(System.Logger.Level.DEBUG, () -> "ticketing: connected to " + addr);
        return true;
    }

    private void serve(Socket s) {
        Thread reader = newReader(() -> readLoop(s), "ticketing-read-" + addr, cl.virtualReaders);
        reader.start();
        Throwable cause = null;
        try {
            OutputStream o = s.getOutputStream();
            while (true) {
                byte[] buf;
                int n;
                mu.lock();
                try {
                    while (sock == s && (wlen == 0 || writer == s)) {
                        kick.await();
                    }
                    if (sock != s) {
                        break;
                    }
                    if (blockingPending > 1) {
                        // Other blocking callers' threads are probably about to append (the
                        // reader has just woken them): let them run first, as the Go client's
                        // writer does, so that one write carries many frames and the server
                        // reads many per read. Not for async callers: their dispatcher threads
                        // may wait for nothing else, and a yield on a loaded machine is long.
                        mu.unlock();
                        try {
                            Thread.yield();
                        } finally {
                            mu.lock();
                        }
                        if (sock != s) {
                            break;
                        }
                        if (wlen == 0 || writer == s) {
                            continue;
                        }
                    }
                    writer = s;
                    n = wlen;
                    buf = takeLocked();
                } finally {
                    mu.unlock();
                }
                try {
                    o.write(buf, 0, n);
                    o.flush();
                } finally {
                    mu.lock();
                    try {
                        if (writer == s) {
                            writer = null;
                        }
                        giveBackLocked(buf);
                    } finally {
                        mu.unlock();
                    }
                }
            }
        } catch (InterruptedException e) {
            cause = new ClientClosedException("client closed");
        } catch (Throwable e) {
            cause = e;
        }
        kill(s, cause == null ? new IOException("connection closed") : cause);
        try {
            reader.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private byte[] spare = new byte[8192];

    /** Swaps the write buffer out (the caller owns the writer role). */
    private byte[] takeLocked() {
        byte[] buf = wbuf;
        wbuf = spare != null ? spare : new byte[8192];
        spare = null;
        wlen = 0;
        taken = seq;
        deferredAt = 0;
        if (STATS) {
            WRITES.increment();
        }
        return buf;
    }

    private void giveBackLocked(byte[] buf) {
        if (spare == null && buf.length <= (1 << 20)) {
            spare = buf;
        }
    }

    /** Counts frames, writes and reads (-Dio.ticketing.client.stats=true: printed on close). */
    static final boolean STATS = Boolean.getBoolean("io.ticketing.client.stats");
    static final java.util.concurrent.atomic.LongAdder WRITES = new java.util.concurrent.atomic.LongAdder();
    static final java.util.concurrent.atomic.LongAdder FRAMES = new java.util.concurrent.atomic.LongAdder();
    static final java.util.concurrent.atomic.LongAdder READS = new java.util.concurrent.atomic.LongAdder();

    /** Queues c's frame under a fresh req_id. */
    int enqueue(Call c) {
        mu.lock();
        try {
            if (!up || wlen > MAX_WRITE_BUFFER) {
                return ENQ_DOWN;
            }
            if (c.counts && inflight >= maxInflight) {
                return ENQ_FULL;
            }
            if ((features & c.need()) != c.need()) {
                return ENQ_UNSUPPORTED;
            }
            enqueueLocked(c);
            if (writer != sock) {
                if (c.virtual || c.blocking && blockingPending <= 1) {
                    // The caller takes the writer role now and writes this frame and every one
                    // queued until it takes the buffer (flush, after leaving its operation's
                    // lock); callers enqueuing meanwhile find the role taken and only park.
                    // A virtual thread: waking the supervisor (a platform thread) per batch costs
                    // far more than parking and unparking virtual threads (issue 34 item 8). The
                    // only blocking caller waiting here (nothing to batch with): its own thread
                    // saves the supervisor's wake-up. With more, the supervisor batches them.
                    writer = sock;
                    claim = c;
                    c.flush = true;
                } else if (!c.blocking && cl.deferFlush(this)) {
                    // On a callback worker: it writes after the callback, with the frames of the
                    // other callbacks it runs meanwhile (no supervisor wake-up per frame).
                    if (deferredAt == 0) {
                        deferredAt = c.sentNanos | 1;
                    }
                } else {
                    kick.signal(); // else the writer takes it with its next batch
                }
            }
            return ENQ_OK;
        } finally {
            mu.unlock();
        }
    }

    private void enqueueLocked(Call c) {
        int id = allocId();
        c.conn = this;
        c.reqId = id;
        c.seq = seq++;
        c.pending = true;
        pending.put(id, c);
        if (c.blocking) {
            blockingPending++;
        }
        if (c.counts) {
            inflight++;
        }
        c.sentNanos = System.nanoTime(); // t_send (protocol.md §5): before the frame can be written
        byte[] f = c.encode(id);
        if (STATS) {
            FRAMES.increment();
        }
        if (wlen + f.length > wbuf.length) {
            byte[] nb = new byte[Math.max(wbuf.length * 2, wlen + f.length)];
            System.arraycopy(wbuf, 0, nb, 0, wlen);
            wbuf = nb;
        }
        System.arraycopy(f, 0, wbuf, wlen, f.length);
        wlen += f.length;
    }

    private int allocId() {
        while (true) {
            nextId++;
            if (nextId != 0 && !pending.containsKey(nextId)) {
                return nextId;
            }
        }
    }

    /**
     * The caller gave up on c: true when it was still pending (its handler will still run; a
     * queued acquire is withdrawn with C on this connection), false when already answered.
     */
    boolean withdraw(Call c) {
        mu.lock();
        try {
            if (!c.pending) {
                return false;
            }
            if ((c.op == Wire.OP_ACQUIRE || c.op == Wire.OP_ACQUIRE_SET) && c.counts && up) {
                Call cc = new Call(Wire.OP_CANCEL, c.key, (c.reqId & 0xffffffffL) << 32, false, x -> {});
                enqueueLocked(cc);
                if (writer != sock) {
                    kick.signal();
                }
            }
            return true;
        } finally {
            mu.unlock();
        }
    }

    /** The most batches a caller's flush writes before it hands the rest to the supervisor. */
    private static final int FLUSH_ROUNDS = 4;

    /**
     * Writes what is queued on the calling thread, unless a writer (another caller or the
     * supervisor) owns the socket's output: that one writes everything queued before it lets go.
     */
    void flush() {
        flush(null);
    }

    /**
     * {@link #flush()} for the caller that took the writer role when it queued {@code claimed}
     * (enqueue): it writes unless the connection went down or was replaced since. Null: take the
     * role only when it is free.
     */
    void flush(Call claimed) {
        Socket s;
        byte[] buf;
        int n;
        mu.lock();
        try {
            s = sock;
            if (claimed != null) {
                if (claim != claimed) {
                    return; // the connection went down since (kill, install)
                }
                claim = null;
            } else if (s == null || writer == s || wlen == 0) {
                return;
            }
            writer = s;
            n = wlen;
            buf = takeLocked();
        } finally {
            mu.unlock();
        }
        int rounds = 0;
        try {
            OutputStream o = s.getOutputStream();
            while (true) {
                o.write(buf, 0, n);
                o.flush();
                rounds++;
                mu.lock();
                try {
                    giveBackLocked(buf);
                    if (sock != s) {
                        return;
                    }
                    if (wlen == 0 || rounds >= FLUSH_ROUNDS) {
                        writer = null;
                        if (wlen > 0) {
                            kick.signal();
                        }
                        return;
                    }
                    n = wlen;
                    buf = takeLocked();
                } finally {
                    mu.unlock();
                }
            }
        } catch (Throwable e) {
            mu.lock();
            try {
                if (writer == s) {
                    writer = null;
                }
            } finally {
                mu.unlock();
            }
            kill(s, e);
        }
    }

    /**
     * The sweeper's safety net for frames queued by a callback whose worker has not written them
     * yet (a later callback of its burst blocks): hands them to the supervisor.
     */
    void kickStale(long now, long age) {
        mu.lock();
        try {
            if (deferredAt != 0 && now - deferredAt >= age && wlen > 0 && writer != sock) {
                kick.signal();
            }
        } finally {
            mu.unlock();
        }
    }

    /**
     * Adds the acquires written and unanswered past their wait plus the answer allowance (R2),
     * counted from their write, to out (a new list when null).
     */
    List<Call> overdueAcquires(long now, long allowanceNanos, List<Call> out) {
        mu.lock();
        try {
            for (Call c : pending.values()) {
                if (c.acquire != null && now - (c.sentNanos + (c.arg & 0xffffffffL) * 1_000_000L + allowanceNanos) >= 0) {
                    if (out == null) {
                        out = new ArrayList<>();
                    }
                    out.add(c);
                }
            }
        } finally {
            mu.unlock();
        }
        return out;
    }

    /** Adds the operations of pending releases past their window to out (a new list when null). */
    List<ReleaseOp> expiredReleases(long now, List<ReleaseOp> out) {
        mu.lock();
        try {
            for (Call c : pending.values()) {
                ReleaseOp op = c.release;
                if (op != null && !op.finished && now - op.deadline >= 0) {
                    if (out == null) {
                        out = new ArrayList<>();
                    }
                    out.add(op);
                }
            }
        } finally {
            mu.unlock();
        }
        return out;
    }

    /** Takes s down (once) and fails every pending call as unsent or lost. */
    void kill(Socket s, Throwable cause) {
        List<Call> calls;
        mu.lock();
        try {
            if (sock != s || !up) {
                return;
            }
            up = false;
            sock = null;
            calls = new ArrayList<>(pending.values());
            pending.clear();
            for (Call c : calls) {
                c.pending = false;
                c.fail = c.seq < taken ? Call.FAIL_LOST : Call.FAIL_UNSENT;
                c.failCause = cause;
            }
            inflight = 0;
            blockingPending = 0;
            wlen = 0;
            claim = null;
            kick.signalAll();
        } finally {
            mu.unlock();
        }
        closeQuietly(s);
        if (!(cause instanceof ClientClosedException)) {
            cl.setLastError(cause);
            LOG.log(System.Logger.Level.WARNING, "ticketing: connection to " + addr + " lost (" + calls.size() + " pending): " + cause);
        }
        for (Call c : calls) {
            cl.complete(c);
        }
    }

    void shutdown() {
        Socket s;
        mu.lock();
        try {
            s = sock;
        } finally {
            mu.unlock();
        }
        if (s != null) {
            kill(s, new ClientClosedException("client closed"));
        }
        interrupt();
    }

    boolean isUpLocked() {
        return up;
    }

    /** The feature bits of the connection's server (0 while down). */
    int features() {
        mu.lock();
        try {
            return up ? features : 0;
        } finally {
            mu.unlock();
        }
    }

    /**
     * The configuration error (auth, TLS) of a connection that is down and whose last attempt
     * failed with one, else null (R4, R5: retrying will not cure it).
     */
    Throwable configError() {
        mu.lock();
        try {
            return !up && failures > 0 && TicketingClient.isFatal(lastError) ? lastError : null;
        } finally {
            mu.unlock();
        }
    }

    boolean isUp() {
        mu.lock();
        try {
            return up;
        } finally {
            mu.unlock();
        }
    }

    /** Still on its first attempt: never connected and never failed. */
    boolean connecting() {
        mu.lock();
        try {
            return !up && !everUp && failures == 0;
        } finally {
            mu.unlock();
        }
    }

    private void readLoop(Socket s) {
        byte[] buf = new byte[64 << 10];
        int start = 0;
        int end = 0;
        List<Call> batch = new ArrayList<>();
        List<Wire.Response> resps = new ArrayList<>();
        Throwable cause;
        try {
            InputStream in = s.getInputStream();
            while (true) {
                if (end == buf.length) {
                    if (start > 0) {
                        System.arraycopy(buf, start, buf, 0, end - start);
                        end -= start;
                        start = 0;
                    } else {
                        byte[] nb = new byte[buf.length * 2];
                        System.arraycopy(buf, 0, nb, 0, end);
                        buf = nb;
                    }
                }
                int n = in.read(buf, end, buf.length - end);
                if (n < 0) {
                    cause = new IOException("connection closed by the server");
                    break;
                }
                end += n;
                if (STATS) {
                    READS.increment();
                }
                String perr = null;
                // Decode every complete answer of this read without the lock, then match them
                // under one acquisition.
                while (true) {
                    Wire.Response r;
                    try {
                        r = Wire.parseResponse(buf, start, end - start);
                    } catch (Wire.DecodeException e) {
                        perr = e.getMessage();
                        break;
                    }
                    if (r == null) {
                        break;
                    }
                    start += Wire.HEADER_LEN + r.payload().length;
                    resps.add(r);
                }
                if (!resps.isEmpty()) {
                    mu.lock();
                    try {
                        for (int i = 0; i < resps.size(); i++) {
                            Wire.Response r = resps.get(i);
                            Call c = pending.get(r.reqId());
                            if (c == null) {
                                continue;
                            }
                            if (r.status() == Wire.ST_ERROR && r.code() == Wire.CODE_DUPLICATE_REQ_ID) {
                                continue; // never complete an outstanding request with a code-25 E (§2.1)
                            }
                            if (!Call.fits(c.op, r.status())) {
                                perr = "'" + (char) c.op + "' answered with '" + (char) r.status() + "'";
                                break;
                            }
                            pending.remove(r.reqId());
                            c.pending = false;
                            if (c.blocking) {
                                blockingPending--;
                            }
                            if (c.counts) {
                                inflight--;
                            }
                            c.resp = r;
                            batch.add(c);
                        }
                    } finally {
                        mu.unlock();
                    }
                    resps.clear();
                }
                for (Call c : batch) {
                    cl.complete(c);
                }
                batch.clear();
                if (perr != null) {
                    cause = new ProtocolException("protocol violation by the server: " + perr);
                    break;
                }
                if (start == end) {
                    start = 0;
                    end = 0;
                    if (buf.length > (256 << 10)) {
                        buf = new byte[64 << 10];
                    }
                }
            }
        } catch (Throwable e) {
            cause = e;
        }
        kill(s, cause);
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // nothing to do
        }
    }
}

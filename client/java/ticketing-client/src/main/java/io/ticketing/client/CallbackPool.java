package io.ticketing.client;

import java.util.ArrayList;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

/**
 * The client's default callback executor: a few daemon threads that drain one shared queue, so
 * that a burst of answers (one read of the connection) costs one thread wake-up, not one hand-off
 * per answer. A worker parks only when the queue is empty; {@link #execute} wakes an idle worker
 * only when no other worker is looking for work (awake and between callbacks), and a worker that
 * takes a task while more wait and nobody else looks wakes one more. The pool grows (a thread per
 * {@link #tick} of the client's sweeper, up to {@link #MAX}) while queued work makes no progress
 * because every worker is busy, so that callbacks which block do not stall the others; threads
 * beyond the core exit after {@link #KEEP_ALIVE_NANOS} idle. A callback's requests are written
 * by its worker after the callback (see {@link #defer}). Internal.
 */
final class CallbackPool implements Executor {
    private static final System.Logger LOG = System.getLogger("io.ticketing.client");
    static final int MAX = 256;
    private static final long KEEP_ALIVE_NANOS = TimeUnit.SECONDS.toNanos(30);

    private final int core;
    private final ConcurrentLinkedQueue<Runnable> queue = new ConcurrentLinkedQueue<>();
    /** Idle (parked or about to park) workers. */
    private final ConcurrentLinkedQueue<Worker> idle = new ConcurrentLinkedQueue<>();
    private final AtomicInteger threads = new AtomicInteger();
    /** Workers awake and not in a callback: each takes queued work before it parks. */
    private final AtomicInteger awake = new AtomicInteger();
    private final AtomicLong done = new AtomicLong();
    private final AtomicInteger names = new AtomicInteger();
    private volatile boolean shutdown;
    private long lastDone = -1;

    CallbackPool(int core) {
        this.core = Math.max(1, core);
    }

    /** The most callbacks a worker runs before it writes the frames they queued. */
    private static final int FLUSH_EVERY = 64;

    private final class Worker implements Runnable {
        final Thread thread;
        volatile boolean parked;
        /** Connections with frames queued by this worker's callbacks, not yet written. */
        final ArrayList<Conn> dirty = new ArrayList<>(2);

        Worker() {
            thread = new WorkerThread(this, "ticketing-callback-" + names.incrementAndGet());
            thread.setDaemon(true);
        }

        private void flushDirty() {
            for (int i = 0; i < dirty.size(); i++) {
                dirty.get(i).flush();
            }
            dirty.clear();
        }

        @Override
        public void run() {
            try {
                loop();
            } finally {
                threads.decrementAndGet();
            }
        }

        private void loop() {
            int ran = 0;
            while (true) {
                Runnable r = queue.poll();
                if (r != null) {
                    if (awake.decrementAndGet() == 0 && !queue.isEmpty()) {
                        wakeOne(); // more work and nobody else looking: a callback may block
                    }
                    try {
                        r.run();
                    } catch (Throwable e) {
                        LOG.log(System.Logger.Level.WARNING, "ticketing: a callback failed", e);
                    }
                    awake.incrementAndGet();
                    done.incrementAndGet();
                    if (!dirty.isEmpty() && (++ran >= FLUSH_EVERY || queue.isEmpty())) {
                        ran = 0;
                        flushDirty(); // one write for the frames of a burst of callbacks
                    }
                    continue;
                }
                if (!dirty.isEmpty()) {
                    flushDirty();
                }
                // Going idle: publish, then look once more (an execute may have missed us).
                parked = true;
                idle.offer(this);
                awake.decrementAndGet();
                if (!queue.isEmpty() || shutdown) {
                    if (unidle()) {
                        if (shutdown && queue.isEmpty()) {
                            awake.decrementAndGet();
                            return;
                        }
                        continue;
                    }
                    // Someone woke us (and took us off the stack) meanwhile: fall through to run.
                }
                long deadline = System.nanoTime() + KEEP_ALIVE_NANOS;
                while (parked) {
                    if (shutdown) {
                        if (unidle() && queue.isEmpty()) {
                            awake.decrementAndGet();
                            return;
                        }
                        continue;
                    }
                    long left = deadline - System.nanoTime();
                    if (left <= 0 && threads.get() > core) {
                        if (unidle() && queue.isEmpty()) {
                            awake.decrementAndGet();
                            if (queue.isEmpty()) {
                                return;
                            }
                            awake.incrementAndGet(); // an execute saw us awake: run its task
                        }
                        continue;
                    }
                    LockSupport.parkNanos(this, Math.max(left, KEEP_ALIVE_NANOS / 4));
                }
            }
        }

        CallbackPool pool() {
            return CallbackPool.this;
        }

        /** Takes this worker off the idle stack itself; false when a waker did already. */
        private boolean unidle() {
            if (idle.remove(this)) {
                parked = false;
                awake.incrementAndGet();
                return true;
            }
            while (parked) {
                Thread.onSpinWait(); // the waker is between removing and unparking us
            }
            return false;
        }
    }

    private static final class WorkerThread extends Thread {
        final Worker worker;

        WorkerThread(Worker w, String name) {
            super(w, name);
            worker = w;
        }

        CallbackPool pool() {
            return worker.pool();
        }
    }

    /**
     * On one of this pool's workers (inside a callback): remembers c, whose frame that callback
     * has just queued, so that the worker writes it after the callback (with the frames of the
     * burst's other callbacks), and returns true. Elsewhere false.
     */
    boolean defer(Conn c) {
        Thread t = Thread.currentThread();
        if (!(t instanceof WorkerThread) || ((WorkerThread) t).pool() != this) {
            return false;
        }
        ArrayList<Conn> d = ((WorkerThread) t).worker.dirty;
        if (!d.contains(c)) {
            d.add(c);
        }
        return true;
    }

    /** Wakes one idle worker; false when there is none. */
    private boolean wakeOne() {
        Worker w = idle.poll();
        if (w == null) {
            return false;
        }
        awake.incrementAndGet();
        w.parked = false;
        LockSupport.unpark(w.thread);
        return true;
    }

    private void spawn() {
        threads.incrementAndGet();
        awake.incrementAndGet();
        Worker w = new Worker();
        try {
            w.thread.start();
        } catch (Throwable e) {
            threads.decrementAndGet();
            awake.decrementAndGet();
            throw e;
        }
    }

    @Override
    public void execute(Runnable r) {
        if (shutdown) {
            throw new RejectedExecutionException("client closed");
        }
        queue.offer(r);
        if (awake.get() > 0) {
            return; // an awake worker takes it before it parks
        }
        if (!wakeOne()) {
            synchronized (this) {
                if (threads.get() < core) {
                    spawn();
                }
            }
        }
    }

    /**
     * Called periodically (the client's sweeper): adds a worker when queued work made no progress
     * since the last tick, because every worker is busy (or blocked in a callback).
     */
    void tick() {
        long d = done.get();
        synchronized (this) {
            if (!queue.isEmpty() && d == lastDone && !shutdown) {
                if (!wakeOne() && threads.get() < MAX) {
                    spawn();
                }
            }
            lastDone = d;
        }
    }

    /** Stops accepting work; workers run what is queued and exit. */
    void shutdown() {
        shutdown = true;
        Worker w;
        while ((w = idle.poll()) != null) {
            awake.incrementAndGet();
            w.parked = false;
            LockSupport.unpark(w.thread);
        }
    }
}

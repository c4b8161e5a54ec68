package io.ticketing.client;

import java.util.function.Consumer;

/** One request on one connection; its handler runs once, off every lock. Internal. */
final class Call {
    static final int FAIL_NONE = 0;
    /** Never handed to the socket: definitely not executed, safe to retry. */
    static final int FAIL_UNSENT = 1;
    /** Handed to the socket, no answer: maybe executed. */
    static final int FAIL_LOST = 2;

    final byte op;
    final byte[] key; // a set's: its first key (the key of its C, protocol.md §12.2)
    byte[][] keys; // S and X: every key of the set, in order
    final long arg; // A: lease<<32|wait; R: token; C: target<<32
    final boolean counts; // a queueing acquire: holds one of max_inflight while outstanding
    volatile Consumer<Call> handler;

    // Set under the connection's lock.
    Conn conn;
    int reqId;
    long seq;
    long sentNanos;
    boolean pending;
    ReleaseOp release; // a release attempt's operation (the sweeper's give-up)
    AcquireOp acquire; // an acquire attempt's operation (the sweeper's answer allowance, R2)
    boolean blocking; // enqueued by a blocking caller's own thread (which waits for the answer)
    boolean virtual; // ... and that thread is a virtual thread (JDK 21+): it writes its own frames
    boolean flush; // queued without waking the writer: the enqueuing thread writes it (Conn#flush)

    // The outcome, written before the handler runs.
    Wire.Response resp;
    int fail;
    Throwable failCause;

    /** The protocol 1.1 feature the connection's server must announce for this call, or 0. */
    int need() {
        return op == Wire.OP_ACQUIRE_SET || op == Wire.OP_RELEASE_SET ? Wire.FEATURE_KEY_SETS : 0;
    }

    Call(byte op, byte[] key, long arg, boolean counts, Consumer<Call> handler) {
        this.op = op;
        this.key = key;
        this.arg = arg;
        this.counts = counts;
        this.handler = handler;
    }

    byte[] encode(int id) {
        switch (op) {
            case Wire.OP_ACQUIRE:
                return Wire.acquire(id, key, arg >>> 32, arg & 0xffffffffL);
            case Wire.OP_RELEASE:
                return Wire.release(id, key, arg);
            case Wire.OP_CANCEL:
                return Wire.cancel(id, key, (int) (arg >>> 32));
            case Wire.OP_ACQUIRE_SET:
                return Wire.acquireSet(id, keys, arg >>> 32, arg & 0xffffffffL);
            case Wire.OP_RELEASE_SET:
                return Wire.releaseSet(id, keys, arg);
            default:
                return Wire.ping(id);
        }
    }

    static boolean fits(byte op, byte st) {
        if (st == Wire.ST_ERROR) {
            return true;
        }
        switch (op) {
            case Wire.OP_ACQUIRE:
            case Wire.OP_ACQUIRE_SET:
                return st == Wire.ST_GRANTED || st == Wire.ST_TIMEOUT || st == Wire.ST_BUSY || st == Wire.ST_MOVED
                        || st == Wire.ST_UNKNOWN;
            case Wire.OP_RELEASE:
            case Wire.OP_RELEASE_SET:
            case Wire.OP_CANCEL:
                return st == Wire.ST_RELEASED || st == Wire.ST_NOT_HOLDER || st == Wire.ST_MOVED || st == Wire.ST_UNKNOWN;
            case Wire.OP_PING:
                return st == Wire.ST_PONG;
            default:
                return false;
        }
    }
}

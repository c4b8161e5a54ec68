package io.ticketing.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/** A scripted fake Ticketing server for failure-path unit tests. */
final class FakeServer implements AutoCloseable {
    record Req(FakeConn conn, byte op, int reqId, long arg, byte[] key) {
        String keyString() {
            return new String(key, StandardCharsets.UTF_8);
        }
    }

    interface Script {
        void on(Req r) throws IOException;
    }

    final class FakeConn {
        final Socket s;
        final OutputStream out;
        final int index;

        FakeConn(Socket s, int index) throws IOException {
            this.s = s;
            this.out = s.getOutputStream();
            this.index = index;
        }

        synchronized void send(byte st, int code, int queued, int reqId, long value, byte[] payload) throws IOException {
            out.write(Wire.encodeResponse(new Wire.Response(st, code, queued, reqId, value, payload)));
            out.flush();
        }

        void send(byte st, int reqId, long value) throws IOException {
            send(st, 0, 0, reqId, value, new byte[0]);
        }

        void raw(byte[] b) throws IOException {
            synchronized (this) {
                out.write(b);
                out.flush();
            }
        }

        void close() {
            try {
                s.close();
            } catch (IOException e) {
                // ignore
            }
        }
    }

    final ServerSocket ss;
    final String addr;
    volatile byte[] token = new byte[0];
    volatile boolean badProof;
    volatile int rejectCode;
    volatile int maxInflight = 1024;
    volatile int features; // announced in the feature pong (0: a 1.0 server)
    volatile String label; // the last connection label received
    volatile Script script = r -> {};
    final LinkedBlockingQueue<Req> requests = new LinkedBlockingQueue<>();
    final List<FakeConn> conns = new CopyOnWriteArrayList<>();
    final AtomicInteger accepted = new AtomicInteger();
    private final Thread acceptor;

    FakeServer() throws IOException {
        ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        addr = "127.0.0.1:" + ss.getLocalPort();
        acceptor = new Thread(this::acceptLoop, "fake-accept");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    FakeServer token(String t) {
        token = t.getBytes(StandardCharsets.UTF_8);
        return this;
    }

    FakeServer script(Script s) {
        script = s;
        return this;
    }

    Req next() throws InterruptedException {
        Req r = requests.poll(10, TimeUnit.SECONDS);
        if (r == null) {
            throw new AssertionError("no request within 10 s");
        }
        return r;
    }

    Req next(char op) throws InterruptedException {
        while (true) {
            Req r = next();
            if (r.op() == op) {
                return r;
            }
        }
    }

    void dropAll() {
        for (FakeConn c : conns) {
            c.close();
        }
        conns.clear();
    }

    private void acceptLoop() {
        while (!ss.isClosed()) {
            try {
                Socket s = ss.accept();
                int i = accepted.incrementAndGet();
                Thread t = new Thread(() -> serve(s, i), "fake-conn-" + i);
                t.setDaemon(true);
                t.start();
            } catch (IOException e) {
                return;
            }
        }
    }

    private void serve(Socket s, int index) {
        try (s) {
            FakeConn c = new FakeConn(s, index);
            InputStream in = s.getInputStream();
            byte[] sn = new byte[32];
            new java.security.SecureRandom().nextBytes(sn);
            c.raw(Wire.encodeHello(token.length > 0 ? 1 : 0, sn));
            byte[] ab = in.readNBytes(Wire.AUTH_LEN);
            Wire.Auth a = Wire.parseAuth(ab);
            if (rejectCode != 0) {
                c.raw(Wire.encodeWelcome(false, rejectCode, 0, new byte[32]));
                return;
            }
            if (token.length > 0 && !Wire.proofEqual(Wire.clientProof(token, a.role(), sn, a.nonce()), a.proof())) {
                c.raw(Wire.encodeWelcome(false, Wire.CODE_AUTH_FAILED, 0, new byte[32]));
                return;
            }
            byte[] proof = badProof ? new byte[32] : Wire.serverProof(token, a.role(), a.nonce(), sn);
            c.raw(Wire.encodeWelcome(true, 0, maxInflight, proof));
            conns.add(c);
            while (true) {
                byte[] h = in.readNBytes(16);
                if (h.length < 16) {
                    return;
                }
                int kl = h[0] == Wire.OP_ACQUIRE_SET || h[0] == Wire.OP_RELEASE_SET ? Wire.u16(h, 2) : h[1] & 0xff; // S, X: body_len
                byte[] key = in.readNBytes(kl);
                Req r = new Req(c, h[0], Wire.u32(h, 4), Wire.u64(h, 8), key);
                if (r.op() == Wire.OP_PING && r.arg() == 1) {
                    // The client's feature ping (protocol.md §12.1): answered here, not scripted.
                    c.send(Wire.ST_PONG, 0, features, r.reqId(), 0, new byte[0]);
                    continue;
                }
                if (r.op() == Wire.OP_LABEL) {
                    label = r.keyString();
                    c.send(Wire.ST_RELEASED, r.reqId(), 0);
                    continue;
                }
                requests.add(r);
                script.on(r);
            }
        } catch (IOException | Wire.DecodeException e) {
            // connection over
        }
    }

    @Override
    public void close() throws IOException {
        ss.close();
        dropAll();
    }
}

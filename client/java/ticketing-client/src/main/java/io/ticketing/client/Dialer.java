package io.ticketing.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.security.SecureRandom;
import java.util.List;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * Opening one connection (the connection seam of {@link Conn}, as Lettuce's and Jedis's connection
 * factories are apart from their command dispatch): TCP connect, TLS, the v1 handshake
 * (protocol.md §1) and the protocol 1.1 feature ping and label (§12.1, §12.3), all within the
 * connect timeout. Errors: {@link TlsException} (requires / does not speak TLS, certificates),
 * {@link AuthenticationException}, {@link ProtocolException}, {@link ConnectionException},
 * {@link IOException}. Internal.
 */
final class Dialer {
    private static final System.Logger LOG = System.getLogger("io.ticketing.client");
    private static final SecureRandom RANDOM = new SecureRandom();

    private Dialer() {}

    /** A connection that passed the handshake: its socket, WELCOME's max_inflight, the feature bits. */
    record Dialed(Socket socket, long maxInflight, int features) {}

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // nothing to do
        }
    }

    static Dialed dial(TicketingClient cl, String host, int port, String addr) throws IOException {
        long budget = cl.connectTimeoutNanos;
        long end = System.nanoTime() + budget;
        Socket raw = new Socket();
        try {
            raw.setTcpNoDelay(true);
            raw.setKeepAlive(true);
            raw.connect(new InetSocketAddress(host, port), (int) Math.max(1, budget / 1_000_000));
            Socket s = raw;
            if (cl.ssl != null) {
                String peer = cl.serverName != null && !cl.serverName.isEmpty() ? cl.serverName : host;
                SSLSocket ts = (SSLSocket) cl.ssl.getSocketFactory().createSocket(raw, peer, port, true);
                ts.setUseClientMode(true);
                SSLParameters p = ts.getSSLParameters();
                p.setEndpointIdentificationAlgorithm("HTTPS");
                if (!peer.matches("[0-9.]+") && !peer.contains(":")) {
                    p.setServerNames(List.of(new SNIHostName(peer)));
                }
                p.setProtocols(new String[] {"TLSv1.3", "TLSv1.2"});
                ts.setSSLParameters(p);
                ts.setSoTimeout(remainingMs(end));
                try {
                    ts.startHandshake();
                } catch (javax.net.ssl.SSLException e) {
                    throw tlsError(e);
                }
                s = ts;
            }
            s.setSoTimeout(remainingMs(end));
            Dialed d = handshake(cl, s, addr);
            s.setSoTimeout(0);
            return d;
        } catch (SocketTimeoutException e) {
            closeQuietly(raw);
            throw new IOException("handshake timed out", e);
        } catch (IOException | RuntimeException e) {
            closeQuietly(raw);
            throw e;
        }
    }

    /**
     * A failed TLS handshake as the client reports it (R5, protocol.md §12.4): the server's first
     * bytes were not a TLS record (a plaintext listener's HELLO) → "does not speak TLS"; anything
     * else (a certificate, a protocol version) → the handshake's own reason. Both are
     * configuration errors: waiting calls fail at once (R4).
     */
    static TlsException tlsError(javax.net.ssl.SSLException e) {
        String m = String.valueOf(e.getMessage());
        if (m.contains("Unsupported or unrecognized SSL message") || m.contains("plaintext connection")) {
            return new TlsException("the server does not speak TLS (its first bytes are not a TLS record; is it a plaintext listener?): " + m, -1, e);
        }
        return new TlsException("TLS handshake failed: " + m, -1, e);
    }

    private static int remainingMs(long end) throws SocketTimeoutException {
        long ms = (end - System.nanoTime()) / 1_000_000;
        if (ms <= 0) {
            throw new SocketTimeoutException("connect budget spent");
        }
        return (int) Math.min(ms, Integer.MAX_VALUE);
    }

    private static Dialed handshake(TicketingClient cl, Socket s, String addr) throws IOException {
        InputStream in = s.getInputStream();
        OutputStream out = s.getOutputStream();
        byte[] hb = in.readNBytes(Wire.HELLO_LEN);
        if (hb.length != Wire.HELLO_LEN) {
            throw new IOException("connection closed before HELLO");
        }
        if (cl.ssl == null && hb[0] == Wire.ST_ERROR && Wire.u8(hb, 1) == Wire.CODE_TLS_REQUIRED) {
            // A TLS listener's plaintext REJECT TLS_REQUIRED where HELLO was expected (§12.4).
            throw new TlsException("the server requires TLS (REJECT TLS_REQUIRED; configure the client with TLS)", Wire.CODE_TLS_REQUIRED, null);
        }
        Wire.Hello h;
        try {
            h = Wire.parseHello(hb);
        } catch (Wire.DecodeException e) {
            throw new ProtocolException("not a ticketing v1 server: " + e.getMessage());
        }
        byte[] nonce = new byte[32];
        RANDOM.nextBytes(nonce);
        byte[] proof = Wire.clientProof(cl.token, Wire.ROLE_CLIENT, h.nonce(), nonce);
        out.write(Wire.encodeAuth(Wire.ROLE_CLIENT, nonce, proof));
        out.flush();
        byte[] wb = in.readNBytes(Wire.WELCOME_LEN);
        if (wb.length != Wire.WELCOME_LEN) {
            throw new IOException("connection closed before WELCOME");
        }
        Wire.Welcome w;
        try {
            w = Wire.parseWelcome(wb);
        } catch (Wire.DecodeException e) {
            throw new ProtocolException("bad WELCOME: " + e.getMessage());
        }
        if (!w.accepted()) {
            if (w.code() == Wire.CODE_AUTH_FAILED) {
                String hint = cl.token.length == 0 && h.tokensConfigured() ? " (the server requires a token and none is configured)" : "";
                throw new AuthenticationException("the server rejected the token" + hint, w.code(), null);
            }
            throw new ConnectionException("the server refused the connection (code " + w.code() + ")", w.code(), null);
        }
        if (cl.token.length > 0) {
            byte[] want = Wire.serverProof(cl.token, Wire.ROLE_CLIENT, nonce, h.nonce());
            if (!Wire.proofEqual(want, w.proof())) {
                throw new AuthenticationException("the server did not prove the token (an impostor, or a server without this token)");
            }
        }
        long maxInflight = Math.max(1, Math.min(w.maxInflight(), 1 << 30));
        return new Dialed(s, maxInflight, negotiate(cl, in, out, addr));
    }

    /**
     * Protocol 1.1 (protocol.md §12.1, §12.3): asks for the feature bits with a ping (req_id 1)
     * and, when the server takes labels, sends the connection label (req_id 2). A 1.0 server
     * answers a plain pong: features 0. A refused label is informational: the connection stays.
     */
    private static int negotiate(TicketingClient cl, InputStream in, OutputStream out, String addr) throws IOException {
        out.write(Wire.pingFeatures(1));
        out.flush();
        Wire.Response r = readOne(in);
        if (r.status() != Wire.ST_PONG || r.reqId() != 1) {
            throw new ProtocolException("the feature ping was answered '" + (char) r.status() + "'");
        }
        int f = r.queued();
        byte[] label = cl.label;
        if ((f & Wire.FEATURE_LABELS) == 0 || label.length == 0) {
            return f;
        }
        out.write(Wire.label(2, label));
        out.flush();
        r = readOne(in);
        if (r.status() != Wire.ST_RELEASED || r.reqId() != 2) {
            LOG.log(System.Logger.Level.WARNING, "ticketing: the server at " + addr + " refused the connection label \""
                    + new String(label, java.nio.charset.StandardCharsets.UTF_8) + "\" (code " + r.code() + ")");
        }
        return f;
    }

    /** Reads one response frame during the handshake. */
    private static Wire.Response readOne(InputStream in) throws IOException {
        byte[] h = in.readNBytes(Wire.HEADER_LEN);
        if (h.length != Wire.HEADER_LEN) {
            throw new IOException("connection closed during the feature negotiation");
        }
        try {
            int n = Wire.frameLength(h, 0, h.length);
            byte[] f = h;
            if (n > Wire.HEADER_LEN) {
                byte[] rest = in.readNBytes(n - Wire.HEADER_LEN);
                if (rest.length != n - Wire.HEADER_LEN) {
                    throw new IOException("connection closed during the feature negotiation");
                }
                f = new byte[n];
                System.arraycopy(h, 0, f, 0, h.length);
                System.arraycopy(rest, 0, f, h.length, rest.length);
            }
            return Wire.parseResponse(f, 0, f.length);
        } catch (Wire.DecodeException e) {
            throw new ProtocolException("protocol violation by the server: " + e.getMessage());
        }
    }
}

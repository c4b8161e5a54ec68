package io.ticketing.client;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/** The v1 wire codec (docs/protocol.md): fixed offsets, big-endian. Internal. */
final class Wire {
    private Wire() {}

    static final int HEADER_LEN = 16;
    static final int HELLO_LEN = 40;
    static final int AUTH_LEN = 72;
    static final int WELCOME_LEN = 40;
    static final int MAX_KEY = 250;
    static final long MAX_ADMIN_REPLY = 16L << 20;
    static final int MAX_MOVED = 255;
    static final int MAX_ERROR = 1024;
    static final int MAX_ADMIN_BODY = 65536;

    static final byte OP_ACQUIRE = 'A', OP_RELEASE = 'R', OP_CANCEL = 'C', OP_PING = 'P', OP_QUERY = 'Q';
    /** Protocol 1.1 (protocol.md §12): acquire a key set, release a key set, connection label. */
    static final byte OP_ACQUIRE_SET = 'S', OP_RELEASE_SET = 'X', OP_LABEL = 'L';
    /** Feature bits of the feature pong (protocol.md §12.1). */
    static final int FEATURE_KEY_SETS = 1, FEATURE_LABELS = 2, FEATURE_TLS_HINT = 4;
    static final int MAX_SET_KEYS = 16, MIN_SET_KEYS = 2, MAX_LABEL = 64;
    static final byte ST_GRANTED = 'G', ST_TIMEOUT = 'T', ST_BUSY = 'B', ST_RELEASED = 'O', ST_NOT_HOLDER = 'N',
            ST_MOVED = 'M', ST_UNKNOWN = 'U', ST_ERROR = 'E', ST_PONG = 'P', ST_ADMIN = 'J';
    static final int CODE_AUTH_FAILED = 11, CODE_TLS_REQUIRED = 12, CODE_DUPLICATE_REQ_ID = 25;
    static final byte ROLE_CLIENT = 1, ROLE_ADMIN = 2, ROLE_PEER = 3;

    /** A decoded response frame. */
    record Response(byte status, int code, int queued, int reqId, long value, byte[] payload) {}

    /** A decoded HELLO. */
    record Hello(int flags, byte[] nonce) {
        boolean tokensConfigured() {
            return (flags & 1) != 0;
        }
    }

    /** A decoded WELCOME or REJECT. */
    record Welcome(boolean accepted, int code, long maxInflight, byte[] proof) {}

    /** A decoded AUTH (tests and fakes). */
    record Auth(int role, byte[] nonce, byte[] proof) {}

    static final class DecodeException extends Exception {
        private static final long serialVersionUID = 1L;

        DecodeException(String msg) {
            super(msg);
        }
    }

    static int u8(byte[] b, int off) {
        return b[off] & 0xff;
    }

    static int u16(byte[] b, int off) {
        return ((b[off] & 0xff) << 8) | (b[off + 1] & 0xff);
    }

    static int u32(byte[] b, int off) {
        return ((b[off] & 0xff) << 24) | ((b[off + 1] & 0xff) << 16) | ((b[off + 2] & 0xff) << 8) | (b[off + 3] & 0xff);
    }

    static long u64(byte[] b, int off) {
        return ((long) u32(b, off) << 32) | (u32(b, off + 4) & 0xffffffffL);
    }

    static void put16(byte[] b, int off, int v) {
        b[off] = (byte) (v >>> 8);
        b[off + 1] = (byte) v;
    }

    static void put32(byte[] b, int off, int v) {
        b[off] = (byte) (v >>> 24);
        b[off + 1] = (byte) (v >>> 16);
        b[off + 2] = (byte) (v >>> 8);
        b[off + 3] = (byte) v;
    }

    static void put64(byte[] b, int off, long v) {
        put32(b, off, (int) (v >>> 32));
        put32(b, off + 4, (int) v);
    }

    /** Encodes a request frame: header then key (A R C) or body (Q). */
    static byte[] request(byte op, int reqId, long arg, byte[] tail) {
        byte[] f = new byte[HEADER_LEN + tail.length];
        f[0] = op;
        f[1] = (byte) (op == OP_QUERY ? 0 : tail.length);
        put32(f, 4, reqId);
        put64(f, 8, arg);
        System.arraycopy(tail, 0, f, HEADER_LEN, tail.length);
        return f;
    }

    static byte[] acquire(int reqId, byte[] key, long leaseMs, long waitMs) {
        return request(OP_ACQUIRE, reqId, (leaseMs << 32) | (waitMs & 0xffffffffL), key);
    }

    static byte[] release(int reqId, byte[] key, long token) {
        return request(OP_RELEASE, reqId, token, key);
    }

    static byte[] cancel(int reqId, byte[] key, int target) {
        return request(OP_CANCEL, reqId, (target & 0xffffffffL) << 32, key);
    }

    static byte[] ping(int reqId) {
        return request(OP_PING, reqId, 0, new byte[0]);
    }

    /** The feature ping (protocol.md §12.1): a P with arg 1. */
    static byte[] pingFeatures(int reqId) {
        return request(OP_PING, reqId, 1, new byte[0]);
    }

    /** S (acquire a set, §12.2): count, body_len, req_id, lease_ms, wait_ms, then the keys. */
    static byte[] acquireSet(int reqId, byte[][] keys, long leaseMs, long waitMs) {
        return set(OP_ACQUIRE_SET, reqId, (leaseMs << 32) | (waitMs & 0xffffffffL), keys);
    }

    /** X (release a set, §12.2): count, body_len, req_id, token, then the keys. */
    static byte[] releaseSet(int reqId, byte[][] keys, long token) {
        return set(OP_RELEASE_SET, reqId, token, keys);
    }

    private static byte[] set(byte op, int reqId, long arg, byte[][] keys) {
        int body = 0;
        for (byte[] k : keys) {
            body += 1 + k.length;
        }
        byte[] f = new byte[HEADER_LEN + body];
        f[0] = op;
        f[1] = (byte) keys.length;
        put16(f, 2, body);
        put32(f, 4, reqId);
        put64(f, 8, arg);
        int off = HEADER_LEN;
        for (byte[] k : keys) {
            f[off++] = (byte) k.length;
            System.arraycopy(k, 0, f, off, k.length);
            off += k.length;
        }
        return f;
    }

    /** L (connection label, §12.3). */
    static byte[] label(int reqId, byte[] label) {
        return request(OP_LABEL, reqId, 0, label);
    }

    /** A label cut at a character boundary to at most 64 bytes of UTF-8 (§12.3). */
    static String cutLabel(String l) {
        if (l.getBytes(StandardCharsets.UTF_8).length <= MAX_LABEL) {
            return l;
        }
        int n = 0;
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < l.length(); ) {
            int cp = l.codePointAt(i);
            int w = new String(Character.toChars(cp)).getBytes(StandardCharsets.UTF_8).length;
            if (n + w > MAX_LABEL) {
                break;
            }
            b.appendCodePoint(cp);
            n += w;
            i += Character.charCount(cp);
        }
        return b.toString();
    }

    /** §12.3: 0..64 bytes of strict UTF-8 without control characters. */
    static boolean validLabel(byte[] label) {
        return label.length == 0 || label.length <= MAX_LABEL && validKey(label);
    }

    static byte[] query(int reqId, byte[] body) {
        return request(OP_QUERY, reqId, (body.length & 0xffffffffL) << 32, body);
    }

    static boolean hasPayload(byte status) {
        return status == ST_MOVED || status == ST_ERROR || status == ST_ADMIN;
    }

    static boolean knownStatus(byte s) {
        switch (s) {
            case ST_GRANTED: case ST_TIMEOUT: case ST_BUSY: case ST_RELEASED: case ST_NOT_HOLDER:
            case ST_MOVED: case ST_UNKNOWN: case ST_ERROR: case ST_PONG: case ST_ADMIN:
                return true;
            default:
                return false;
        }
    }

    static long payloadLimit(byte status) {
        switch (status) {
            case ST_MOVED: return MAX_MOVED;
            case ST_ERROR: return MAX_ERROR;
            case ST_ADMIN: return MAX_ADMIN_REPLY;
            default: return 0;
        }
    }

    /**
     * The length of the frame starting at {@code off} when its header is complete: -1 when fewer
     * than 16 bytes are there. Throws on a header no valid server sends (so memory stays bounded).
     */
    static int frameLength(byte[] b, int off, int len) throws DecodeException {
        if (len < HEADER_LEN) {
            return -1;
        }
        byte st = b[off];
        if (!knownStatus(st)) {
            throw new DecodeException(String.format("unknown response status 0x%02x", st & 0xff));
        }
        if (!hasPayload(st)) {
            return HEADER_LEN;
        }
        long v = u64(b, off + 8);
        if (v < 0 || v > payloadLimit(st)) {
            throw new DecodeException("payload length " + Long.toUnsignedString(v) + " over the limit for status " + (char) st);
        }
        return HEADER_LEN + (int) v;
    }

    /**
     * Decodes one response from {@code b[off, off+len)}; null when incomplete.
     */
    static Response parseResponse(byte[] b, int off, int len) throws DecodeException {
        int n = frameLength(b, off, len);
        if (n < 0 || n > len) {
            return null;
        }
        byte st = b[off];
        int code = u8(b, off + 1);
        int queued = u16(b, off + 2);
        if (st != ST_GRANTED && st != ST_PONG && queued != 0) { // a pong's queued field: the features (§12.1)
            throw new DecodeException("queued set on status " + (char) st);
        }
        int reqId = u32(b, off + 4);
        long value = u64(b, off + 8);
        byte[] payload = new byte[n - HEADER_LEN];
        System.arraycopy(b, off + HEADER_LEN, payload, 0, payload.length);
        return new Response(st, code, queued, reqId, value, payload);
    }

    static byte[] encodeResponse(Response r) {
        byte[] f = new byte[HEADER_LEN + r.payload().length];
        f[0] = r.status();
        f[1] = (byte) r.code();
        put16(f, 2, r.queued());
        put32(f, 4, r.reqId());
        put64(f, 8, hasPayload(r.status()) ? r.payload().length : r.value());
        System.arraycopy(r.payload(), 0, f, HEADER_LEN, r.payload().length);
        return f;
    }

    static Hello parseHello(byte[] b) throws DecodeException {
        if (b.length != HELLO_LEN || b[0] != 'T' || b[1] != 'K' || b[2] != 'T' || b[3] != 'S') {
            throw new DecodeException("bad HELLO magic (not a ticketing server)");
        }
        if (b[4] != 1) {
            throw new DecodeException("unsupported protocol version " + u8(b, 4));
        }
        byte[] nonce = new byte[32];
        System.arraycopy(b, 8, nonce, 0, 32);
        return new Hello(u8(b, 5), nonce);
    }

    static byte[] encodeHello(int flags, byte[] nonce) {
        byte[] b = new byte[HELLO_LEN];
        b[0] = 'T';
        b[1] = 'K';
        b[2] = 'T';
        b[3] = 'S';
        b[4] = 1;
        b[5] = (byte) flags;
        System.arraycopy(nonce, 0, b, 8, 32);
        return b;
    }

    static byte[] encodeAuth(int role, byte[] clientNonce, byte[] proof) {
        byte[] b = new byte[AUTH_LEN];
        b[0] = 'T';
        b[1] = 'K';
        b[2] = 'T';
        b[3] = 'C';
        b[4] = 1;
        b[5] = (byte) role;
        System.arraycopy(clientNonce, 0, b, 8, 32);
        System.arraycopy(proof, 0, b, 40, 32);
        return b;
    }

    static Auth parseAuth(byte[] b) throws DecodeException {
        if (b.length != AUTH_LEN || b[0] != 'T' || b[1] != 'K' || b[2] != 'T' || b[3] != 'C' || b[4] != 1) {
            throw new DecodeException("bad AUTH");
        }
        byte[] nonce = new byte[32];
        byte[] proof = new byte[32];
        System.arraycopy(b, 8, nonce, 0, 32);
        System.arraycopy(b, 40, proof, 0, 32);
        return new Auth(u8(b, 5), nonce, proof);
    }

    static Welcome parseWelcome(byte[] b) throws DecodeException {
        if (b.length != WELCOME_LEN || (b[0] != 'K' && b[0] != 'E')) {
            throw new DecodeException("bad WELCOME status");
        }
        byte[] proof = new byte[32];
        System.arraycopy(b, 8, proof, 0, 32);
        return new Welcome(b[0] == 'K', u8(b, 1), u32(b, 4) & 0xffffffffL, proof);
    }

    static byte[] encodeWelcome(boolean accepted, int code, long maxInflight, byte[] proof) {
        byte[] b = new byte[WELCOME_LEN];
        b[0] = (byte) (accepted ? 'K' : 'E');
        b[1] = (byte) code;
        put32(b, 4, (int) maxInflight);
        System.arraycopy(proof, 0, b, 8, 32);
        return b;
    }

    private static byte[] hmac(byte[] key, String label, int role, byte[] n1, byte[] n2) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            // An empty key is valid HMAC (padded with zeros); SecretKeySpec refuses length 0.
            mac.init(new SecretKeySpec(key.length == 0 ? new byte[1] : key, "HmacSHA256"));
            mac.update(label.getBytes(StandardCharsets.US_ASCII));
            mac.update((byte) role);
            mac.update(n1);
            mac.update(n2);
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    static byte[] clientProof(byte[] token, int role, byte[] serverNonce, byte[] clientNonce) {
        return hmac(token, "ticketing-v1-client", role, serverNonce, clientNonce);
    }

    static byte[] serverProof(byte[] token, int role, byte[] clientNonce, byte[] serverNonce) {
        return hmac(token, "ticketing-v1-server", role, clientNonce, serverNonce);
    }

    /** Constant-time comparison of two proofs. */
    static boolean proofEqual(byte[] a, byte[] b) {
        return MessageDigest.isEqual(a, b);
    }

    /** protocol.md §2.1 check 5: 1..250 bytes of strict UTF-8 without control characters. */
    static boolean validKey(byte[] key) {
        if (key.length < 1 || key.length > MAX_KEY) {
            return false;
        }
        CharBuffer cb;
        try {
            cb = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(key));
        } catch (CharacterCodingException e) {
            return false;
        }
        for (int i = 0; i < cb.length(); i++) {
            char c = cb.charAt(i);
            if (c <= 0x1f || (c >= 0x7f && c <= 0x9f)) {
                return false;
            }
        }
        return true;
    }
}

using System;
using System.Security.Cryptography;
using System.Text;

namespace Ticketing
{
    /// <summary>Response status bytes (protocol.md §3).</summary>
    public enum Status : byte
    {
        /// <summary>G: granted; Value is the fencing token.</summary>
        Granted = 0x47,
        /// <summary>T: not acquired within the wait.</summary>
        Timeout = 0x54,
        /// <summary>B: refused at once; Code says why.</summary>
        Busy = 0x42,
        /// <summary>O: released (or a cancel withdrew the acquire).</summary>
        Released = 0x4F,
        /// <summary>N: not the holder.</summary>
        NotHolder = 0x4E,
        /// <summary>M: not the leader; payload = the leader's address.</summary>
        Moved = 0x4D,
        /// <summary>U: the commit could not be confirmed.</summary>
        Unknown = 0x55,
        /// <summary>E: error in the request; payload = message.</summary>
        Error = 0x45,
        /// <summary>P: pong; Value = server µs since the epoch; Queued = the feature bits (1.1, §12.1) of a feature ping's answer.</summary>
        Pong = 0x50,
        /// <summary>J: admin reply (JSON).</summary>
        Admin = 0x4A
    }

    /// <summary>Codes of protocol.md §4.</summary>
    public enum Code : byte
    {
        /// <summary>No reason given.</summary>
        None = 0x00,
        /// <summary>B: the key's queue is full.</summary>
        QueueFull = 0x01,
        /// <summary>B/REJECT: a server-wide limit or max_inflight.</summary>
        Overloaded = 0x02,
        /// <summary>B: cluster clock skew unverified or too large.</summary>
        ClockUnhealthy = 0x03,
        /// <summary>B/REJECT: the server is draining.</summary>
        ShuttingDown = 0x04,
        /// <summary>B/U: the cluster cannot commit.</summary>
        NoQuorum = 0x05,
        /// <summary>REJECT (plaintext, from a TLS listener): the server requires TLS (1.1, §12.4).</summary>
        TlsRequired = 0x0C,
        /// <summary>REJECT: malformed AUTH.</summary>
        BadHandshake = 0x0A,
        /// <summary>REJECT: wrong proof.</summary>
        AuthFailed = 0x0B,
        /// <summary>E: unknown op.</summary>
        BadOp = 0x14,
        /// <summary>E: invalid key.</summary>
        BadKey = 0x15,
        /// <summary>E: lease out of range.</summary>
        BadLease = 0x16,
        /// <summary>E: wait out of range.</summary>
        BadWait = 0x17,
        /// <summary>E: flags not 0.</summary>
        BadFlags = 0x18,
        /// <summary>E: req_id in use.</summary>
        DuplicateReqId = 0x19,
        /// <summary>E: bad admin query.</summary>
        BadAdmin = 0x1A,
        /// <summary>E: the role may not do this.</summary>
        NotPermitted = 0x1B,
        /// <summary>E: server error.</summary>
        Internal = 0x1C,
        /// <summary>E to S/X: count, body framing, body_len or a duplicate key (1.1, §12.2).</summary>
        BadKeyset = 0x1D,
        /// <summary>E to L: too long, not UTF-8, or a control character (1.1, §12.3).</summary>
        BadLabel = 0x1E
    }

    /// <summary>A decoded response frame.</summary>
    public sealed class Response
    {
        /// <summary>Status byte.</summary>
        public Status Status;
        /// <summary>§4 code.</summary>
        public Code Code;
        /// <summary>G only: time queued in 16 ms units.</summary>
        public ushort Queued;
        /// <summary>The request's req_id.</summary>
        public uint ReqId;
        /// <summary>Token (G), server µs (P), payload length (M E J).</summary>
        public ulong Value;
        /// <summary>Payload of M, E, J; null otherwise.</summary>
        public byte[] Payload;
    }

    /// <summary>A decoded request frame (used by tests' fake servers).</summary>
    public sealed class Request
    {
        /// <summary>Op byte.</summary>
        public byte Op;
        /// <summary>Flags.</summary>
        public ushort Flags;
        /// <summary>req_id.</summary>
        public uint ReqId;
        /// <summary>The 8-byte argument.</summary>
        public ulong Arg;
        /// <summary>Key (A R C P), body (Q), label (L), or the S/X body.</summary>
        public byte[] Key;
        /// <summary>S and X: the keys of the body (null when the body is malformed).</summary>
        public byte[][] Keys;
    }

    /// <summary>Protocol 1.1 feature bits (§12.1), announced in a feature ping's pong.</summary>
    [Flags]
    public enum Features : ushort
    {
        /// <summary>No 1.1 feature (a 1.0 server).</summary>
        None = 0,
        /// <summary>The server accepts S and X (§12.2).</summary>
        KeySets = 1,
        /// <summary>The server accepts L and shows labels in locks (§12.3).</summary>
        Labels = 2,
        /// <summary>Informational: the server's TLS listener sends REJECT TLS_REQUIRED (§12.4).</summary>
        TlsHint = 4
    }

    /// <summary>Thrown by the decoders: the peer broke the protocol.</summary>
    public sealed class WireException : Exception
    {
        /// <summary>Creates it.</summary>
        public WireException(string msg) : base(msg) { }
    }

    /// <summary>The v1 wire codec: fixed-width big-endian frames, no I/O.</summary>
    public static class Wire
    {
        /// <summary>HELLO length, bytes.</summary>
        public const int HelloLen = 40;
        /// <summary>AUTH length, bytes.</summary>
        public const int AuthLen = 72;
        /// <summary>WELCOME/REJECT length, bytes.</summary>
        public const int WelcomeLen = 40;
        /// <summary>Request and response header length, bytes.</summary>
        public const int HeaderLen = 16;
        /// <summary>Nonce length, bytes.</summary>
        public const int NonceLen = 32;
        /// <summary>Longest key, bytes.</summary>
        public const int MaxKeyLen = 250;
        /// <summary>Op A (acquire).</summary>
        public const byte OpAcquire = 0x41;
        /// <summary>Op R (release).</summary>
        public const byte OpRelease = 0x52;
        /// <summary>Op C (cancel a queued acquire).</summary>
        public const byte OpCancel = 0x43;
        /// <summary>Op P (ping).</summary>
        public const byte OpPing = 0x50;
        /// <summary>Op Q (admin query).</summary>
        public const byte OpQuery = 0x51;
        /// <summary>Op S (acquire a key set, 1.1).</summary>
        public const byte OpAcquireSet = 0x53;
        /// <summary>Op X (release a key set, 1.1).</summary>
        public const byte OpReleaseSet = 0x58;
        /// <summary>Op L (connection label, 1.1).</summary>
        public const byte OpLabel = 0x4C;
        /// <summary>The arg of a feature ping (§12.1).</summary>
        public const ulong PingArgFeatures = 1;
        /// <summary>Fewest keys of a set.</summary>
        public const int MinSetKeys = 2;
        /// <summary>Most keys of a set.</summary>
        public const int MaxSetKeys = 16;
        /// <summary>Longest label, bytes.</summary>
        public const int MaxLabelLen = 64;
        /// <summary>Role client.</summary>
        public const byte RoleClient = 1;
        /// <summary>Role admin.</summary>
        public const byte RoleAdmin = 2;
        /// <summary>Role peer.</summary>
        public const byte RolePeer = 3;
        /// <summary>Unit of the G header's queued field, in ms (§3).</summary>
        public const int QueuedUnitMs = 16;

        static readonly byte[] ClientLabel = Encoding.ASCII.GetBytes("ticketing-v1-client");
        static readonly byte[] ServerLabel = Encoding.ASCII.GetBytes("ticketing-v1-server");

        /// <summary>The largest payload a status may carry; -1 when it carries none.</summary>
        public static long PayloadLimit(byte status)
        {
            switch (status)
            {
                case (byte)Status.Moved: return 255;
                case (byte)Status.Error: return 1024;
                case (byte)Status.Admin: return 16 << 20;
                default: return -1;
            }
        }

        /// <summary>Whether the byte is a v1 status.</summary>
        public static bool KnownStatus(byte b)
        {
            return Enum.IsDefined(typeof(Status), b);
        }

        /// <summary>Whether status may answer op (anything else breaks the protocol).</summary>
        public static bool Fits(byte op, Status st)
        {
            if (st == Status.Error) return true;
            switch (op)
            {
                case OpAcquire:
                case OpAcquireSet: return st == Status.Granted || st == Status.Timeout || st == Status.Busy || st == Status.Moved || st == Status.Unknown;
                case OpRelease:
                case OpCancel:
                case OpReleaseSet: return st == Status.Released || st == Status.NotHolder || st == Status.Moved || st == Status.Unknown;
                case OpPing: return st == Status.Pong;
                case OpQuery: return st == Status.Admin || st == Status.Moved;
                case OpLabel: return st == Status.Released;
            }
            return false;
        }

        /// <summary>§12.3: a label is 0..64 bytes of UTF-8 without control characters.</summary>
        public static bool ValidLabel(byte[] l)
        {
            if (l == null || l.Length > MaxLabelLen) return false;
            if (l.Length == 0) return true;
            return ValidText(l);
        }

        /// <summary>
        /// The label cut at a character boundary to at most 64 bytes of UTF-8 (§12.3: the client
        /// never sends one too long).
        /// </summary>
        public static byte[] CutLabel(string label)
        {
            var b = Encoding.UTF8.GetBytes(label ?? "");
            if (b.Length <= MaxLabelLen) return b;
            int n = MaxLabelLen;
            while (n > 0 && (b[n] & 0xC0) == 0x80) n--; // b[n] is the first byte cut off
            var r = new byte[n];
            Buffer.BlockCopy(b, 0, r, 0, n);
            return r;
        }

        /// <summary>protocol.md §2.1 step 5: 1..250 bytes of RFC 3629 UTF-8, no control characters.</summary>
        public static bool ValidKey(byte[] k)
        {
            if (k == null || k.Length == 0 || k.Length > MaxKeyLen) return false;
            return ValidText(k);
        }

        static bool ValidText(byte[] k)
        {
            int i = 0;
            while (i < k.Length)
            {
                byte c = k[i];
                if (c < 0x80)
                {
                    if (c < 0x20 || c == 0x7f) return false;
                    i++;
                    continue;
                }
                int need, cp;
                if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; }
                else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; }
                else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; }
                else return false;
                if (i + need > k.Length - 1) return false;
                for (int j = 1; j <= need; j++)
                {
                    byte cc = k[i + j];
                    if ((cc & 0xC0) != 0x80) return false;
                    cp = (cp << 6) | (cc & 0x3F);
                }
                if (need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return false;
                if (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return false;
                if (cp >= 0x80 && cp <= 0x9F) return false;
                i += need + 1;
            }
            return true;
        }

        static void PutU16(byte[] b, int off, ushort v) { b[off] = (byte)(v >> 8); b[off + 1] = (byte)v; }
        static void PutU32(byte[] b, int off, uint v) { b[off] = (byte)(v >> 24); b[off + 1] = (byte)(v >> 16); b[off + 2] = (byte)(v >> 8); b[off + 3] = (byte)v; }
        static void PutU64(byte[] b, int off, ulong v) { PutU32(b, off, (uint)(v >> 32)); PutU32(b, off + 4, (uint)v); }
        /// <summary>Big-endian u16 at off.</summary>
        public static ushort U16(byte[] b, int off) { return (ushort)((b[off] << 8) | b[off + 1]); }
        /// <summary>Big-endian u32 at off.</summary>
        public static uint U32(byte[] b, int off) { return ((uint)b[off] << 24) | ((uint)b[off + 1] << 16) | ((uint)b[off + 2] << 8) | b[off + 3]; }
        /// <summary>Big-endian u64 at off.</summary>
        public static ulong U64(byte[] b, int off) { return ((ulong)U32(b, off) << 32) | U32(b, off + 4); }

        /// <summary>HELLO: flags and the server nonce.</summary>
        public static byte[] EncodeHello(byte flags, byte[] nonce)
        {
            var b = new byte[HelloLen];
            b[0] = 0x54; b[1] = 0x4B; b[2] = 0x54; b[3] = 0x53; b[4] = 1; b[5] = flags;
            Buffer.BlockCopy(nonce, 0, b, 8, NonceLen);
            return b;
        }

        /// <summary>Parses HELLO; returns the flags, the nonce in nonce.</summary>
        public static byte ParseHello(byte[] b, out byte[] nonce)
        {
            if (b.Length != HelloLen) throw new WireException("HELLO is 40 bytes");
            if (b[0] != 0x54 || b[1] != 0x4B || b[2] != 0x54 || b[3] != 0x53) throw new WireException("not a ticketing v1 server (bad magic)");
            if (b[4] != 1) throw new WireException("unsupported protocol version " + b[4]);
            if ((b[5] & ~1) != 0) throw new WireException("unknown HELLO flags " + b[5]);
            nonce = new byte[NonceLen];
            Buffer.BlockCopy(b, 8, nonce, 0, NonceLen);
            return b[5];
        }

        /// <summary>AUTH frame.</summary>
        public static byte[] EncodeAuth(byte role, byte[] nonce, byte[] proof)
        {
            var b = new byte[AuthLen];
            b[0] = 0x54; b[1] = 0x4B; b[2] = 0x54; b[3] = 0x43; b[4] = 1; b[5] = role;
            Buffer.BlockCopy(nonce, 0, b, 8, NonceLen);
            Buffer.BlockCopy(proof, 0, b, 40, 32);
            return b;
        }

        /// <summary>WELCOME or REJECT frame.</summary>
        public static byte[] EncodeWelcome(byte status, byte code, uint maxInflight, byte[] proof)
        {
            var b = new byte[WelcomeLen];
            b[0] = status; b[1] = code; PutU32(b, 4, maxInflight);
            Buffer.BlockCopy(proof, 0, b, 8, 32);
            return b;
        }

        /// <summary>HMAC-SHA256(token, "ticketing-v1-client" ‖ role ‖ server_nonce ‖ client_nonce).</summary>
        public static byte[] ClientProof(byte[] token, byte role, byte[] serverNonce, byte[] clientNonce)
        {
            return Proof(token, ClientLabel, role, serverNonce, clientNonce);
        }

        /// <summary>HMAC-SHA256(token, "ticketing-v1-server" ‖ role ‖ client_nonce ‖ server_nonce).</summary>
        public static byte[] ServerProof(byte[] token, byte role, byte[] clientNonce, byte[] serverNonce)
        {
            return Proof(token, ServerLabel, role, clientNonce, serverNonce);
        }

        static byte[] Proof(byte[] token, byte[] label, byte role, byte[] n1, byte[] n2)
        {
            var msg = new byte[label.Length + 1 + NonceLen * 2];
            Buffer.BlockCopy(label, 0, msg, 0, label.Length);
            msg[label.Length] = role;
            Buffer.BlockCopy(n1, 0, msg, label.Length + 1, NonceLen);
            Buffer.BlockCopy(n2, 0, msg, label.Length + 1 + NonceLen, NonceLen);
            using (var h = new HMACSHA256(token ?? new byte[0]))
            {
                return h.ComputeHash(msg);
            }
        }

        /// <summary>Constant-time comparison of two proofs.</summary>
        [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining | System.Runtime.CompilerServices.MethodImplOptions.NoOptimization)]
        public static bool ProofEqual(byte[] a, byte[] b)
        {
            if (a == null || b == null || a.Length != b.Length) return false;
            int diff = 0;
            for (int i = 0; i < a.Length; i++) diff |= a[i] ^ b[i];
            return diff == 0;
        }

        static byte[] Header(byte op, int keyLen, uint reqId, ulong arg, int extra)
        {
            var b = new byte[HeaderLen + extra];
            b[0] = op; b[1] = (byte)keyLen; PutU32(b, 4, reqId); PutU64(b, 8, arg);
            return b;
        }

        /// <summary>A: lease_ms at offset 8, wait_ms at 12.</summary>
        public static byte[] EncodeAcquire(uint reqId, byte[] key, uint leaseMs, uint waitMs)
        {
            var b = Header(OpAcquire, key.Length, reqId, ((ulong)leaseMs << 32) | waitMs, key.Length);
            Buffer.BlockCopy(key, 0, b, HeaderLen, key.Length);
            return b;
        }

        /// <summary>R: the token at offset 8.</summary>
        public static byte[] EncodeRelease(uint reqId, byte[] key, ulong token)
        {
            var b = Header(OpRelease, key.Length, reqId, token, key.Length);
            Buffer.BlockCopy(key, 0, b, HeaderLen, key.Length);
            return b;
        }

        /// <summary>C: the target req_id at offset 8.</summary>
        public static byte[] EncodeCancel(uint reqId, byte[] key, uint target)
        {
            var b = Header(OpCancel, key.Length, reqId, (ulong)target << 32, key.Length);
            Buffer.BlockCopy(key, 0, b, HeaderLen, key.Length);
            return b;
        }

        /// <summary>
        /// Encodes a request header (op, key length, req_id, the 8-byte argument) and the key into
        /// b at off; returns the frame's length. The caller makes room.
        /// </summary>
        public static int WriteRequest(byte[] b, int off, byte op, uint reqId, ulong arg, byte[] key)
        {
            int kl = key == null ? 0 : key.Length;
            b[off] = op; b[off + 1] = (byte)kl; b[off + 2] = 0; b[off + 3] = 0;
            PutU32(b, off + 4, reqId); PutU64(b, off + 8, arg);
            if (kl > 0) Buffer.BlockCopy(key, 0, b, off + HeaderLen, kl);
            return HeaderLen + kl;
        }

        /// <summary>P.</summary>
        public static byte[] EncodePing(uint reqId) { return Header(OpPing, 0, reqId, 0, 0); }

        /// <summary>P with arg 1: "report features" (§12.1).</summary>
        public static byte[] EncodePingFeatures(uint reqId) { return Header(OpPing, 0, reqId, PingArgFeatures, 0); }

        /// <summary>The body of S and X: key_len (u8) ‖ key, per key (§12.2).</summary>
        public static int SetBodyLen(byte[][] keys)
        {
            int n = 0;
            foreach (var k in keys) n += 1 + k.Length;
            return n;
        }

        /// <summary>
        /// Encodes S (arg: lease_ms ‖ wait_ms) or X (arg: the token) with keys into b at off; the
        /// frame's length. The caller makes room (HeaderLen + SetBodyLen).
        /// </summary>
        public static int WriteSet(byte[] b, int off, byte op, uint reqId, ulong arg, byte[][] keys)
        {
            int body = SetBodyLen(keys);
            b[off] = op; b[off + 1] = (byte)keys.Length; PutU16(b, off + 2, (ushort)body);
            PutU32(b, off + 4, reqId); PutU64(b, off + 8, arg);
            int i = off + HeaderLen;
            foreach (var k in keys)
            {
                b[i++] = (byte)k.Length;
                Buffer.BlockCopy(k, 0, b, i, k.Length);
                i += k.Length;
            }
            return HeaderLen + body;
        }

        /// <summary>S: acquire the set keys (lease_ms at offset 8, wait_ms at 12).</summary>
        public static byte[] EncodeAcquireSet(uint reqId, byte[][] keys, uint leaseMs, uint waitMs)
        {
            var b = new byte[HeaderLen + SetBodyLen(keys)];
            WriteSet(b, 0, OpAcquireSet, reqId, ((ulong)leaseMs << 32) | waitMs, keys);
            return b;
        }

        /// <summary>X: release the set keys held with token.</summary>
        public static byte[] EncodeReleaseSet(uint reqId, byte[][] keys, ulong token)
        {
            var b = new byte[HeaderLen + SetBodyLen(keys)];
            WriteSet(b, 0, OpReleaseSet, reqId, token, keys);
            return b;
        }

        /// <summary>L: the connection label (§12.3).</summary>
        public static byte[] EncodeLabel(uint reqId, byte[] label)
        {
            var b = Header(OpLabel, label.Length, reqId, 0, label.Length);
            Buffer.BlockCopy(label, 0, b, HeaderLen, label.Length);
            return b;
        }

        /// <summary>Q with a JSON body.</summary>
        public static byte[] EncodeQuery(uint reqId, byte[] body)
        {
            var b = Header(OpQuery, 0, reqId, (ulong)body.Length << 32, body.Length);
            Buffer.BlockCopy(body, 0, b, HeaderLen, body.Length);
            return b;
        }

        /// <summary>A response frame.</summary>
        public static byte[] EncodeResponse(Status st, Code code, ushort queued, uint reqId, ulong value, byte[] payload)
        {
            int n = payload == null ? 0 : payload.Length;
            var b = new byte[HeaderLen + n];
            b[0] = (byte)st; b[1] = (byte)code; PutU16(b, 2, queued); PutU32(b, 4, reqId);
            PutU64(b, 8, payload == null ? value : (ulong)n);
            if (payload != null) Buffer.BlockCopy(payload, 0, b, HeaderLen, n);
            return b;
        }

        /// <summary>
        /// Decodes one response at b[off..end): the frame's length, 0 while incomplete.
        /// Throws WireException on an unknown status or a payload over its limit.
        /// </summary>
        public static int ParseResponse(byte[] b, int off, int end, out Response r)
        {
            r = null;
            if (end - off < HeaderLen) return 0;
            byte st = b[off];
            if (!KnownStatus(st)) throw new WireException(string.Format("unknown response status 0x{0:x2}", st));
            ulong value = U64(b, off + 8);
            long limit = PayloadLimit(st);
            int len = HeaderLen;
            if (limit >= 0)
            {
                if (value > (ulong)limit) throw new WireException("payload of " + value + " bytes over the " + limit + "-byte limit of " + (char)st);
                len += (int)value;
                if (end - off < len) return 0;
            }
            r = new Response { Status = (Status)st, Code = (Code)b[off + 1], Queued = U16(b, off + 2), ReqId = U32(b, off + 4), Value = value };
            if (limit >= 0)
            {
                r.Payload = new byte[len - HeaderLen];
                Buffer.BlockCopy(b, off + HeaderLen, r.Payload, 0, r.Payload.Length);
            }
            return len;
        }

        /// <summary>The length of the response at b[off..end) as far as its header tells.</summary>
        public static int ResponseFrameLen(byte[] b, int off, int end)
        {
            if (end - off < HeaderLen) return HeaderLen;
            long limit = PayloadLimit(b[off]);
            if (limit < 0) return HeaderLen;
            ulong v = U64(b, off + 8);
            return v > (ulong)limit ? HeaderLen : HeaderLen + (int)v;
        }

        /// <summary>Decodes one request (tests): its length, 0 while incomplete.</summary>
        public static int ParseRequest(byte[] b, int off, int end, out Request r)
        {
            r = null;
            if (end - off < HeaderLen) return 0;
            byte op = b[off];
            ulong arg = U64(b, off + 8);
            bool set = op == OpAcquireSet || op == OpReleaseSet;
            int len = HeaderLen + (op == OpQuery ? (int)(arg >> 32) : set ? U16(b, off + 2) : b[off + 1]);
            if (end - off < len) return 0;
            r = new Request { Op = op, Flags = set ? (ushort)0 : U16(b, off + 2), ReqId = U32(b, off + 4), Arg = arg, Key = new byte[len - HeaderLen] };
            Buffer.BlockCopy(b, off + HeaderLen, r.Key, 0, r.Key.Length);
            if (set) r.Keys = SplitSetBody(r.Key, b[off + 1]);
            return len;
        }

        /// <summary>The keys of an S/X body of count entries; null when it is not exactly that.</summary>
        public static byte[][] SplitSetBody(byte[] body, int count)
        {
            var keys = new byte[count][];
            int i = 0;
            for (int n = 0; n < count; n++)
            {
                if (i >= body.Length) return null;
                int kl = body[i++];
                if (kl == 0 || i + kl > body.Length) return null;
                keys[n] = new byte[kl];
                Buffer.BlockCopy(body, i, keys[n], 0, kl);
                i += kl;
            }
            return i == body.Length ? keys : null;
        }
    }
}

using System;
using System.Collections.Generic;
using System.IO;
using System.Net.Security;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using System.Threading;
using System.Threading.Tasks;

namespace Ticketing
{
    enum Fail { None, Unsent, Lost }
    enum Owner { Caller, Abandoned, Releaser, Dropped }
    enum Enq { Ok, Down, Full, Unsupported }

    /// <summary>
    /// One request in flight. Owned by its sender until enqueued, then by its connection's
    /// pending table until answered or lost, then by its owner.
    /// </summary>
    sealed class Call
    {
        public byte Op;
        public byte[] Key;       // S, X: the first key of Keys (cancel, messages)
        public byte[][] Keys;    // S, X
        public uint A1, A2;      // A, S: lease, wait; C: target
        public ulong TokenArg;   // R, X
        public bool Counts;      // an acquire that may queue (uses a max_inflight slot)
        public Connection Conn;
        public uint ReqId;
        public long Seq;
        public long SentTicks;   // Stopwatch ticks just before the frame was queued (A)
        public bool Pending;     // Conn's lock
        public Owner Owner = Owner.Caller;
        public Releaser.Job Job;
        public Response Resp;
        public Fail Fail;
        public int Claim;        // 1: the caller took the answer; 2: a canceller did (compensation)
        public long WatchUntil;  // the release window's end, for the Watchdog
        public volatile bool TimedOut; // the Watchdog dropped it: no answer within the window
        public Exception FailErr;
        public bool AnswerDue;   // an acquire watched for its answer allowance (R2)
        public bool Sync;        // the caller blocks in Task.Wait (no continuation to keep off our threads)
        // Completed only through Completions.Post: inline for Sync, else by a thread-pool drainer.
        public readonly TaskCompletionSource<bool> Done = new TaskCompletionSource<bool>();

        /// <summary>Encodes the frame into b at off (room checked by the caller); its length.</summary>
        public int WriteFrame(byte[] b, int off)
        {
            switch (Op)
            {
                case Wire.OpAcquire: return Wire.WriteRequest(b, off, Op, ReqId, ((ulong)A1 << 32) | A2, Key);
                case Wire.OpRelease: return Wire.WriteRequest(b, off, Op, ReqId, TokenArg, Key);
                case Wire.OpCancel: return Wire.WriteRequest(b, off, Op, ReqId, (ulong)A1 << 32, Key);
                case Wire.OpAcquireSet: return Wire.WriteSet(b, off, Op, ReqId, ((ulong)A1 << 32) | A2, Keys);
                case Wire.OpReleaseSet: return Wire.WriteSet(b, off, Op, ReqId, TokenArg, Keys);
                default: return Wire.WriteRequest(b, off, Wire.OpPing, ReqId, 0, null);
            }
        }

        public int FrameLen
        {
            get
            {
                if (Keys != null) return Wire.HeaderLen + Wire.SetBodyLen(Keys);
                return Wire.HeaderLen + (Key == null || Op == Wire.OpPing ? 0 : Key.Length);
            }
        }

        /// <summary>An acquire (A or S): answered G T B M U or E.</summary>
        public bool IsAcquire { get { return Op == Wire.OpAcquire || Op == Wire.OpAcquireSet; } }
    }

    /// <summary>
    /// One persistent connection to one address. A supervisor thread connects, runs the
    /// handshake and then reads; a writer thread writes every frame queued so far in one write
    /// (frames are encoded straight into a buffer swapped with the writer's, so a burst of calls
    /// costs one write and one wake-up, and none when the writer is already busy).
    /// Both are dedicated threads, so a caller blocked in a synchronous Acquire never waits for a
    /// thread-pool thread. A call whose frame the writer took (Seq &lt; taken) may have reached the
    /// server ("lost" when the connection dies); any other was never sent ("unsent").
    /// </summary>
    sealed class Connection
    {
        const int ReadSize = 64 * 1024;
        const int MaxWriteBuffer = 4 << 20;
        const int WriteSize = 16 * 1024;

        readonly TicketingClient client;
        public readonly string Addr;
        readonly string host;
        readonly int port;
        readonly object mu = new object();
        Thread thread;

        bool up;
        Socket sock;
        bool everUp;
        int failures;
        int maxInflight = 1;
        int inflight;
        readonly Dictionary<uint, Call> pending = new Dictionary<uint, Call>();
        uint nextId;
        byte[] wbuf = new byte[WriteSize]; // frames not yet taken by the writer (mu)
        int wlen;
        bool writerIdle;                   // the writer waits on mu for frames
        long seq, taken;
        Features features;                 // announced by the server of the live connection (§12.1)
        Exception configErr;               // the last attempt failed auth or TLS (R4, R5): retrying will not cure it

        public Connection(TicketingClient client, string addr)
        {
            this.client = client;
            Addr = addr;
            TicketingClient.SplitAddr(addr, out host, out port);
            System.Net.IPAddress.TryParse(host, out ip);
        }

        readonly System.Net.IPAddress ip; // an IP literal: dialled without a DNS lookup (a thread-pool hop on Mono)

        public void Start()
        {
            thread = new Thread(Run) { IsBackground = true, Name = "ticketing " + Addr };
            thread.Start();
        }

        public void Join(int ms) { if (thread != null) thread.Join(ms); }

        public bool IsUp { get { lock (mu) return up; } }
        public int Failures { get { lock (mu) return failures; } }
        public bool Connecting { get { lock (mu) return !up && !everUp && failures == 0; } }
        /// <summary>The configuration error of the last attempt (auth, TLS), or null.</summary>
        public Exception ConfigError { get { lock (mu) return up ? null : configErr; } }
        /// <summary>The 1.1 features of the live connection's server.</summary>
        public Features Features { get { lock (mu) return features; } }

        public Enq Enqueue(Call c)
        {
            lock (mu)
            {
                if (!up || wlen > MaxWriteBuffer) return Enq.Down;
                if (c.Keys != null && (features & Features.KeySets) == 0) return Enq.Unsupported;
                if (c.Counts && inflight >= maxInflight) return Enq.Full;
                EnqueueLocked(c);
            }
            return Enq.Ok;
        }

        void EnqueueLocked(Call c)
        {
            uint id = AllocId();
            c.Conn = this;
            c.ReqId = id;
            c.Seq = seq++;
            c.Pending = true;
            pending[id] = c;
            if (c.Counts) inflight++;
            if (c.IsAcquire) c.SentTicks = Clock.Now; // t_send (protocol.md §5)
            int need = wlen + c.FrameLen;
            if (need > wbuf.Length)
            {
                var nb = new byte[Math.Max(need, wbuf.Length * 2)];
                Buffer.BlockCopy(wbuf, 0, nb, 0, wlen);
                wbuf = nb;
            }
            wlen += c.WriteFrame(wbuf, wlen);
            if (writerIdle)
            {
                writerIdle = false;
                Monitor.Pulse(mu);
            }
        }

        uint AllocId()
        {
            while (true)
            {
                nextId++;
                if (nextId == 0) continue;
                if (!pending.ContainsKey(nextId)) return nextId;
            }
        }

        /// <summary>
        /// Leaves a pending call to the connection: a queued acquire is withdrawn with C, a grant
        /// that wins the race is compensated. False when already answered.
        /// </summary>
        public bool Abandon(Call c)
        {
            lock (mu)
            {
                if (!c.Pending) return false;
                c.Owner = Owner.Abandoned;
                if (c.IsAcquire && c.Counts) // a set is cancelled by its first key (§12.2)
                    EnqueueLocked(new Call { Op = Wire.OpCancel, Key = c.Key, A1 = c.ReqId, Owner = Owner.Dropped });
            }
            return true;
        }

        /// <summary>
        /// Gives a pending call of owner from to owner o; false when already answered (or another
        /// owner took it first).
        /// </summary>
        public bool Reown(Call c, Owner from, Owner o, Releaser.Job job)
        {
            lock (mu)
            {
                if (!c.Pending || c.Owner != from) return false;
                c.Owner = o;
                c.Job = job;
                return true;
            }
        }

        public void Shutdown()
        {
            Socket s;
            lock (mu) s = sock;
            if (s != null) Kill(s, new ObjectDisposedException("TicketingClient", "the client was closed"));
            lock (mu) Monitor.PulseAll(mu);
        }

        void Run()
        {
            int attempt = 0;
            while (!client.IsClosed)
            {
                if (attempt > 0)
                {
                    var d = client.BackoffDelay(attempt);
                    var hook = client.OnReconnect;
                    if (hook != null) hook(Addr, attempt, d);
                    if (!client.SleepUnlessClosed(d)) break;
                }
                Socket s;
                Stream st;
                uint mi;
                Features f;
                try
                {
                    Connect(out s, out st, out mi, out f);
                }
                catch (Exception e)
                {
                    if (client.IsClosed) break;
                    int n;
                    lock (mu)
                    {
                        n = ++failures;
                        configErr = IsConfigError(e) ? e : null;
                    }
                    client.ConnectionFailed(this, e, n);
                    attempt++;
                    continue;
                }
                if (!Up(s, st, mi, f))
                {
                    Close(s);
                    break;
                }
                var writer = new Thread(() => WriteLoop(s, st)) { IsBackground = true, Name = "ticketing writer " + Addr };
                writer.Start();
                ReadLoop(s, st);
                lock (mu) Monitor.PulseAll(mu);
                writer.Join();
                attempt = 1;
            }
        }

        /// <summary>A failure retrying will not cure: a wrong token, a TLS mismatch or certificate (R4, R5).</summary>
        internal static bool IsConfigError(Exception e)
        {
            var t = e as TicketingTlsException;
            return e is TicketingAuthenticationException || (t != null && t.Config);
        }

        void Connect(out Socket s, out Stream st, out uint maxInf, out Features f)
        {
            var budget = client.ConnectTimeout;
            long deadline = Clock.Now + Clock.Ticks(budget);
            s = new Socket(SocketType.Stream, ProtocolType.Tcp);
            try
            {
                s.NoDelay = true;
                s.SetSocketOption(SocketOptionLevel.Socket, SocketOptionName.KeepAlive, true);
                var ar = ip != null ? s.BeginConnect(ip, port, null, null) : s.BeginConnect(host, port, null, null);
                if (!ar.AsyncWaitHandle.WaitOne(budget))
                    throw new TicketingConnectionException("connect " + Addr + ": no answer within " + budget.TotalSeconds + "s");
                try { s.EndConnect(ar); }
                catch (SocketException e) { throw new TicketingConnectionException("connect " + Addr + ": " + e.Message, e); }
                int ms = (int)Math.Max(1, Clock.Ms(deadline - Clock.Now));
                s.ReceiveTimeout = ms;
                s.SendTimeout = ms;
                Stream ns = new NetworkStream(s, false);
                if (client.Tls != null) ns = TlsConnect(ns);
                maxInf = Handshake(ns, client.Tls == null);
                f = Negotiate(ns);
                s.ReceiveTimeout = 0;
                s.SendTimeout = 0;
                st = ns;
            }
            catch
            {
                Close(s);
                throw;
            }
        }

        Stream TlsConnect(Stream ns)
        {
            var tls = client.Tls;
            var name = tls.ServerName ?? host;
            bool refused = false;
            var first = new FirstBytesStream(ns);
            var ssl = new SslStream(first, false, (sender, c, chain, errors) =>
            {
                bool ok = client.ValidateServerCertificate(name, c, chain, errors);
                if (!ok) refused = true;
                return ok;
            }, null);
            try
            {
                var certs = new X509CertificateCollection();
                if (client.ClientCertificate != null) certs.Add(client.ClientCertificate);
                ssl.AuthenticateAsClient(name, certs, System.Security.Authentication.SslProtocols.Tls12, false);
            }
            catch (Exception e) when (first.TlsRequiredHint)
            {
                // The TLS listener's REJECT TLS_REQUIRED (§12.4): it got no ClientHello within
                // its 1 s window (a slow first handshake on a loaded machine). A TLS server all
                // the same: retried like any failed attempt, not a configuration error.
                throw new TicketingTlsException("TLS handshake with " + Addr + ": the server's TLS listener answered REJECT TLS_REQUIRED: no ClientHello reached it within its 1 s window (retrying)", e, false);
            }
            catch (Exception e) when (first.NotTls)
            {
                // A plaintext HELLO ("TKTS") where a TLS record (16 03) belongs (§12.4).
                throw new TicketingTlsException("TLS handshake with " + Addr + ": the server does not speak TLS (its first bytes are not a TLS record; is it a plaintext listener?)", e, true);
            }
            catch (Exception e) when (IsEcdsaUnsupported(e))
            {
                throw new TicketingTlsException(EcdsaMessage(Addr, e), e, true);
            }
            catch (Exception e) when (e is IOException || e is System.Security.Authentication.AuthenticationException
                                      || e is NotSupportedException || e is System.Security.Cryptography.CryptographicException)
            {
                throw new TicketingTlsException("TLS handshake with " + Addr + ": " + e.Message + (e.InnerException != null ? ": " + e.InnerException.Message : ""), e, refused);
            }
            return ssl;
        }

        /// <summary>The id-ecPublicKey OID: Mono's TLS cannot decode such a certificate's key.</summary>
        internal const string EcdsaOid = "1.2.840.10045.2.1";

        internal static bool IsEcdsaUnsupported(Exception e)
        {
            for (var x = e; x != null; x = x.InnerException)
                if ((x is NotSupportedException || x is System.Security.Cryptography.CryptographicException) && x.Message.Contains(EcdsaOid)) return true;
            return false;
        }

        /// <summary>What Mono's ECDSA failure means and what to do (issue 34 C# 6).</summary>
        internal static string EcdsaMessage(string addr, Exception e)
        {
            return "TLS handshake with " + addr + ": the server's certificate or its CA has an ECDSA key, which Mono's TLS cannot use (" + e.Message.TrimEnd('.')
                + "). Give the server an RSA certificate (ticketing deploy --tls-key-type rsa; or openssl req -newkey rsa:2048), or run the client on .NET 8, which takes both";
        }

        static void ReadFull(Stream s, byte[] b, string what, string addr)
        {
            int got = 0;
            while (got < b.Length)
            {
                int n;
                try { n = s.Read(b, got, b.Length - got); }
                catch (IOException e) { throw new TicketingConnectionException(what + " from " + addr + ": " + (e.InnerException ?? e).Message, e); }
                if (n == 0) throw new TicketingConnectionException(what + " from " + addr + ": connection closed");
                got += n;
            }
        }

        const string TlsRequired = "the server requires TLS (REJECT TLS_REQUIRED; configure the client with TLS: TicketingOptions.Tls)";

        uint Handshake(Stream s, bool plain)
        {
            var hb = new byte[Wire.HelloLen];
            ReadFull(s, hb, "reading HELLO", Addr);
            // A TLS listener's REJECT TLS_REQUIRED where HELLO belongs (§12.4).
            if (plain && hb[0] == (byte)Status.Error && hb[1] == (byte)Code.TlsRequired)
                throw new TicketingTlsException("connect " + Addr + ": " + TlsRequired, null, true);
            byte[] snonce;
            byte flags;
            try { flags = Wire.ParseHello(hb, out snonce); }
            catch (WireException e) { throw new TicketingProtocolException(Addr + " is not a ticketing v1 server: " + e.Message); }
            var token = client.TokenBytes;
            var cnonce = new byte[Wire.NonceLen];
            using (var rng = RandomNumberGenerator.Create()) rng.GetBytes(cnonce);
            var role = Wire.RoleClient;
            var auth = Wire.EncodeAuth(role, cnonce, Wire.ClientProof(token, role, snonce, cnonce));
            try { s.Write(auth, 0, auth.Length); }
            catch (IOException e) { throw new TicketingConnectionException("sending AUTH to " + Addr + ": " + e.Message, e); }
            var wb = new byte[Wire.WelcomeLen];
            ReadFull(s, wb, "reading WELCOME", Addr);
            if (wb[0] != 0x4B)
            {
                if (wb[0] != 0x45) throw new TicketingProtocolException("bad WELCOME from " + Addr);
                var code = (Code)wb[1];
                if (code == Code.TlsRequired) throw new TicketingTlsException("connect " + Addr + ": " + TlsRequired, null, true);
                if (code == Code.AuthFailed || code == Code.BadHandshake)
                {
                    var hint = code == Code.AuthFailed && token.Length == 0 && (flags & 1) != 0 ? " (the server requires a token and none is configured)" : "";
                    throw new TicketingAuthenticationException(Addr + " rejected the handshake: " + code + hint, null, code);
                }
                throw new TicketingConnectionException(Addr + " rejected the connection: " + code);
            }
            var proof = new byte[32];
            Buffer.BlockCopy(wb, 8, proof, 0, 32);
            if (token.Length > 0 && !Wire.ProofEqual(Wire.ServerProof(token, role, cnonce, snonce), proof))
                throw new TicketingAuthenticationException(Addr + " did not prove the token (an impostor, or a server without this token)");
            uint mi = Wire.U32(wb, 4);
            return mi == 0 ? 1 : mi;
        }

        /// <summary>
        /// Protocol 1.1 (§12.1, §12.3): asks the server of the fresh connection for its features
        /// with a ping (arg 1; a 1.0 server answers a plain pong, features 0) and sends the
        /// label when the server takes one. Nothing else is outstanding yet.
        /// </summary>
        Features Negotiate(Stream s)
        {
            var ping = Wire.EncodePingFeatures(1);
            WriteHandshake(s, ping, "the feature ping");
            var r = ReadResponse(s, "reading the feature pong");
            if (r.Status != Status.Pong || r.ReqId != 1)
                throw new TicketingProtocolException(Addr + " answered the feature ping with " + (char)r.Status);
            var f = (Features)r.Queued;
            var label = client.LabelBytes;
            if ((f & Features.Labels) == 0 || label == null || label.Length == 0) return f;
            WriteHandshake(s, Wire.EncodeLabel(2, label), "the connection label");
            r = ReadResponse(s, "reading the label's answer");
            if (r.Status != Status.Released || r.ReqId != 2) // informational only (§12.3): keep the connection
                client.Log(TicketingLogLevel.Warning, "ticketing: " + Addr + " refused the connection label (" + r.Code + ")");
            return f;
        }

        void WriteHandshake(Stream s, byte[] b, string what)
        {
            try { s.Write(b, 0, b.Length); s.Flush(); }
            catch (IOException e) { throw new TicketingConnectionException("sending " + what + " to " + Addr + ": " + e.Message, e); }
        }

        Response ReadResponse(Stream s, string what)
        {
            var h = new byte[Wire.HeaderLen];
            ReadFull(s, h, what, Addr);
            int n = Wire.ResponseFrameLen(h, 0, h.Length);
            var b = h;
            if (n > Wire.HeaderLen)
            {
                b = new byte[n];
                Buffer.BlockCopy(h, 0, b, 0, h.Length);
                var rest = new byte[n - Wire.HeaderLen];
                ReadFull(s, rest, what, Addr);
                Buffer.BlockCopy(rest, 0, b, Wire.HeaderLen, rest.Length);
            }
            Response r;
            try { Wire.ParseResponse(b, 0, b.Length, out r); }
            catch (WireException e) { throw new TicketingProtocolException(Addr + " broke the protocol: " + e.Message); }
            return r;
        }

        bool Up(Socket s, Stream st, uint mi, Features f)
        {
            lock (mu)
            {
                if (client.IsClosed) return false;
                up = true;
                sock = s;
                everUp = true;
                failures = 0;
                configErr = null;
                features = f;
                maxInflight = (int)Math.Min(mi, 1u << 30);
                inflight = 0;
                nextId = 0;
                seq = taken = 0;
                wlen = 0;
            }
            client.Changed();
            return true;
        }

        void WriteLoop(Socket s, Stream st)
        {
            var mine = new byte[WriteSize];
            while (true)
            {
                int n;
                lock (mu)
                {
                    while (up && ReferenceEquals(sock, s) && wlen == 0)
                    {
                        writerIdle = true;
                        Monitor.Wait(mu);
                    }
                    writerIdle = false;
                    if (!up || !ReferenceEquals(sock, s)) return;
                    // Swap buffers: callers go on encoding into the writer's old one.
                    var t = wbuf;
                    wbuf = mine.Length >= WriteSize * 64 ? new byte[WriteSize] : mine;
                    mine = t;
                    n = wlen;
                    wlen = 0;
                    taken = seq;
                }
                try { st.Write(mine, 0, n); st.Flush(); }
                catch (Exception e) { Kill(s, e); return; }
            }
        }

        void ReadLoop(Socket s, Stream st)
        {
            var buf = new byte[ReadSize];
            int start = 0, end = 0;
            try
            {
                while (true)
                {
                    int n = st.Read(buf, end, buf.Length - end);
                    if (n == 0) throw new IOException("connection closed by " + Addr);
                    end += n;
                    start = Dispatch(buf, start, end);
                    if (start == end) { start = end = 0; if (buf.Length > 4 * ReadSize) buf = new byte[ReadSize]; continue; }
                    int need = Wire.ResponseFrameLen(buf, start, end);
                    if (need > buf.Length)
                    {
                        var nb = new byte[need];
                        Buffer.BlockCopy(buf, start, nb, 0, end - start);
                        end -= start; start = 0; buf = nb;
                    }
                    else if (start + need > buf.Length || end == buf.Length)
                    {
                        Buffer.BlockCopy(buf, start, buf, 0, end - start);
                        end -= start; start = 0;
                    }
                }
            }
            catch (WireException e) { Kill(s, new TicketingProtocolException(Addr + " broke the protocol: " + e.Message)); }
            catch (Exception e) { Kill(s, e); }
        }

        readonly List<Call> done = new List<Call>(); // the reader's, reused per read

        int Dispatch(byte[] buf, int start, int end)
        {
            done.Clear();
            bool freed = false;
            Exception err = null;
            lock (mu)
            {
                while (true)
                {
                    Response r;
                    int n = Wire.ParseResponse(buf, start, end, out r);
                    if (n == 0) break;
                    start += n;
                    Call c;
                    if (!pending.TryGetValue(r.ReqId, out c)) continue;
                    if (r.Status == Status.Error && r.Code == Code.DuplicateReqId) continue; // §2.1
                    if (!Wire.Fits(c.Op, r.Status)) { err = new TicketingProtocolException(Addr + " answered " + (char)c.Op + " with " + (char)r.Status); break; }
                    pending.Remove(r.ReqId);
                    c.Pending = false;
                    if (c.Counts) { inflight--; freed = true; }
                    c.Resp = r;
                    done.Add(c);
                }
            }
            foreach (var c in done) client.Complete(c);
            done.Clear();
            if (freed) client.Changed();
            if (err != null) throw err;
            return start;
        }

        /// <summary>Takes s down (once) and completes every pending call as unsent or lost.</summary>
        void Kill(Socket s, Exception cause)
        {
            List<Call> calls;
            lock (mu)
            {
                if (!up || !ReferenceEquals(sock, s)) return;
                up = false;
                sock = null;
                calls = new List<Call>(pending.Values);
                pending.Clear();
                foreach (var c in calls)
                {
                    c.Pending = false;
                    c.Fail = c.Seq < taken ? Fail.Lost : Fail.Unsent;
                    c.FailErr = cause;
                }
                inflight = 0;
                wlen = 0;
                Monitor.PulseAll(mu);
            }
            Close(s);
            if (!(cause is ObjectDisposedException)) client.ConnectionLost(this, cause, calls.Count);
            foreach (var c in calls) client.Complete(c);
            client.Changed();
        }

        static void Close(Socket s)
        {
            try { s.Shutdown(SocketShutdown.Both); } catch (Exception) { }
            try { s.Close(); } catch (Exception) { }
        }
    }

    /// <summary>
    /// The stream under a client's SslStream: remembers the first two bytes read, so that a failed
    /// handshake with a plaintext server (its HELLO begins "TK", a TLS record 16 03) is named
    /// "does not speak TLS" (§12.4). Everything else passes through.
    /// </summary>
    sealed class FirstBytesStream : Stream
    {
        readonly Stream inner;
        readonly byte[] first = new byte[2];
        int n;

        public FirstBytesStream(Stream inner) { this.inner = inner; }

        /// <summary>The first bytes read are not the start of a TLS record.</summary>
        public bool NotTls { get { return n > 0 && (first[0] != 0x16 && first[0] != 0x15 || n > 1 && first[1] != 0x03); } }

        /// <summary>The first bytes are a REJECT TLS_REQUIRED ('E', 12): a TLS listener that waited in vain for the ClientHello.</summary>
        public bool TlsRequiredHint { get { return n == 2 && first[0] == (byte)Status.Error && first[1] == (byte)Code.TlsRequired; } }

        void Seen(byte[] b, int off, int k)
        {
            for (int i = 0; i < k && n < first.Length; i++) first[n++] = b[off + i];
        }

        public override int Read(byte[] buffer, int offset, int count)
        {
            int k = inner.Read(buffer, offset, count);
            if (n < first.Length) Seen(buffer, offset, k);
            return k;
        }

        public override async Task<int> ReadAsync(byte[] buffer, int offset, int count, CancellationToken ct)
        {
            int k = await inner.ReadAsync(buffer, offset, count, ct).ConfigureAwait(false);
            if (n < first.Length) Seen(buffer, offset, k);
            return k;
        }

        public override void Write(byte[] buffer, int offset, int count) { inner.Write(buffer, offset, count); }
        public override Task WriteAsync(byte[] buffer, int offset, int count, CancellationToken ct) { return inner.WriteAsync(buffer, offset, count, ct); }
        public override void Flush() { inner.Flush(); }
        public override Task FlushAsync(CancellationToken ct) { return inner.FlushAsync(ct); }
        public override bool CanRead { get { return true; } }
        public override bool CanWrite { get { return true; } }
        public override bool CanSeek { get { return false; } }
        public override long Length { get { throw new NotSupportedException(); } }
        public override long Position { get { throw new NotSupportedException(); } set { throw new NotSupportedException(); } }
        public override long Seek(long offset, SeekOrigin origin) { throw new NotSupportedException(); }
        public override void SetLength(long value) { throw new NotSupportedException(); }

        protected override void Dispose(bool disposing)
        {
            if (disposing) inner.Dispose();
            base.Dispose(disposing);
        }
    }

    /// <summary>The monotonic clock (Stopwatch ticks).</summary>
    static class Clock
    {
        public static long Now { get { return System.Diagnostics.Stopwatch.GetTimestamp(); } }
        public static long Ticks(TimeSpan d) { return (long)(d.TotalSeconds * System.Diagnostics.Stopwatch.Frequency); }
        public static double Ms(long ticks) { return ticks * 1000.0 / System.Diagnostics.Stopwatch.Frequency; }
        public static TimeSpan Span(long ticks) { return TimeSpan.FromMilliseconds(Ms(ticks)); }
    }
}

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
    enum Enq { Ok, Down, Full }

    /// <summary>
    /// One request in flight. Owned by its sender until enqueued, then by its connection's
    /// pending table until answered or lost, then by its owner.
    /// </summary>
    sealed class Call
    {
        public byte Op;
        public byte[] Key;
        public uint A1, A2;      // A: lease, wait; C: target
        public ulong TokenArg;   // R
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
                default: return Wire.WriteRequest(b, off, Wire.OpPing, ReqId, 0, null);
            }
        }

        public int FrameLen { get { return Wire.HeaderLen + (Key == null || Op == Wire.OpPing ? 0 : Key.Length); } }
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

        public Connection(TicketingClient client, string addr)
        {
            this.client = client;
            Addr = addr;
            TicketingClient.SplitAddr(addr, out host, out port);
        }

        public void Start()
        {
            thread = new Thread(Run) { IsBackground = true, Name = "ticketing " + Addr };
            thread.Start();
        }

        public void Join(int ms) { if (thread != null) thread.Join(ms); }

        public bool IsUp { get { lock (mu) return up; } }
        public int Failures { get { lock (mu) return failures; } }
        public bool Connecting { get { lock (mu) return !up && !everUp && failures == 0; } }

        public Enq Enqueue(Call c)
        {
            lock (mu)
            {
                if (!up || wlen > MaxWriteBuffer) return Enq.Down;
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
            if (c.Op == Wire.OpAcquire) c.SentTicks = Clock.Now; // t_send (protocol.md §5)
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
                if (c.Op == Wire.OpAcquire && c.Counts)
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
                try
                {
                    Connect(out s, out st, out mi);
                }
                catch (Exception e)
                {
                    if (client.IsClosed) break;
                    int n;
                    lock (mu) n = ++failures;
                    client.ConnectionFailed(this, e, n);
                    attempt++;
                    continue;
                }
                if (!Up(s, st, mi))
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

        void Connect(out Socket s, out Stream st, out uint maxInf)
        {
            var budget = client.ConnectTimeout;
            long deadline = Clock.Now + Clock.Ticks(budget);
            s = new Socket(SocketType.Stream, ProtocolType.Tcp);
            try
            {
                s.NoDelay = true;
                s.SetSocketOption(SocketOptionLevel.Socket, SocketOptionName.KeepAlive, true);
                var ar = s.BeginConnect(host, port, null, null);
                if (!ar.AsyncWaitHandle.WaitOne(budget))
                    throw new TicketingConnectionException("connect " + Addr + ": no answer within " + budget.TotalSeconds + "s");
                try { s.EndConnect(ar); }
                catch (SocketException e) { throw new TicketingConnectionException("connect " + Addr + ": " + e.Message, e); }
                int ms = (int)Math.Max(1, Clock.Ms(deadline - Clock.Now));
                s.ReceiveTimeout = ms;
                s.SendTimeout = ms;
                Stream ns = new NetworkStream(s, false);
                if (client.Tls != null) ns = TlsConnect(ns);
                maxInf = Handshake(ns);
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
            var ssl = new SslStream(ns, false, (sender, c, chain, errors) => client.ValidateServerCertificate(name, c, chain, errors), null);
            try
            {
                var certs = new X509CertificateCollection();
                if (client.ClientCertificate != null) certs.Add(client.ClientCertificate);
                ssl.AuthenticateAsClient(name, certs, System.Security.Authentication.SslProtocols.Tls12, false);
            }
            catch (Exception e) when (IsEcdsaUnsupported(e))
            {
                throw new TicketingTlsException(EcdsaMessage(Addr, e), e);
            }
            catch (Exception e) when (e is IOException || e is System.Security.Authentication.AuthenticationException
                                      || e is NotSupportedException || e is System.Security.Cryptography.CryptographicException)
            {
                throw new TicketingTlsException("TLS handshake with " + Addr + ": " + e.Message + (e.InnerException != null ? ": " + e.InnerException.Message : ""), e);
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

        uint Handshake(Stream s)
        {
            var hb = new byte[Wire.HelloLen];
            ReadFull(s, hb, "reading HELLO", Addr);
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

        bool Up(Socket s, Stream st, uint mi)
        {
            lock (mu)
            {
                if (client.IsClosed) return false;
                up = true;
                sock = s;
                everUp = true;
                failures = 0;
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

    /// <summary>The monotonic clock (Stopwatch ticks).</summary>
    static class Clock
    {
        public static long Now { get { return System.Diagnostics.Stopwatch.GetTimestamp(); } }
        public static long Ticks(TimeSpan d) { return (long)(d.TotalSeconds * System.Diagnostics.Stopwatch.Frequency); }
        public static double Ms(long ticks) { return ticks * 1000.0 / System.Diagnostics.Stopwatch.Frequency; }
        public static TimeSpan Span(long ticks) { return TimeSpan.FromMilliseconds(Ms(ticks)); }
    }
}

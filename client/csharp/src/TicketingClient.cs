using System;
using System.Collections.Generic;
using System.Linq;
using System.Net.Security;
using System.Security.Cryptography.X509Certificates;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace Ticketing
{
    /// <summary>
    /// A connection pool to one Ticketing server or cluster. Thread-safe; create one per
    /// application and share it. It keeps one connection per address in the background (two
    /// for a single address), reconnects with backoff (0.1 s doubling to 3.2 s, jittered)
    /// forever, pipelines every request and matches answers by req_id. Connections run on
    /// dedicated threads, so the synchronous methods never wait for a thread-pool thread.
    /// </summary>
    public sealed partial class TicketingClient : IDisposable
#if NET8_0_OR_GREATER
        , IAsyncDisposable
#endif
    {
        const uint MaxU32 = uint.MaxValue;

        readonly object mu = new object();
        readonly List<string> addresses;
        readonly Action<string> log;
        readonly ITicketingLogger logger;
        internal readonly byte[] TokenBytes;
        internal readonly TimeSpan ConnectTimeout;
        internal readonly TimeSpan AnswerAllowance;
        internal readonly byte[] LabelBytes;
        readonly Releaser releaser;
        readonly Watchdog watchdog;
        readonly Completions completions;
        readonly Action<object> wakeCall;
        readonly ManualResetEventSlim closedEvent = new ManualResetEventSlim(false);
        volatile bool closed;

        /// <summary>
        /// Starts connecting in the background and returns at once; the first call waits for a
        /// connection within its budget. Use ConnectAsync/Connect to wait for the first
        /// connection explicitly (and learn about a wrong token at start-up).
        /// </summary>
        public TicketingClient(TicketingOptions options)
        {
            if (options == null) throw new ArgumentNullException("options");
            if (options.Addresses == null || options.Addresses.Count == 0) throw new TicketingArgumentException("no server address", "Addresses");
            addresses = options.Addresses.Distinct().ToList();
            foreach (var a in addresses) { string h; int p; SplitAddr(a, out h, out p); }
            if (options.ConnectTimeout <= TimeSpan.Zero) throw new TicketingArgumentException("ConnectTimeout must be positive", "ConnectTimeout");
            ConnectTimeout = options.ConnectTimeout;
            if (options.AnswerAllowance <= TimeSpan.Zero) throw new TicketingArgumentException("AnswerAllowance " + options.AnswerAllowance + " must be positive (default 3 s)", "AnswerAllowance");
            AnswerAllowance = options.AnswerAllowance;
            if (options.Label != null)
            {
                LabelBytes = Wire.CutLabel(options.Label);
                if (!Wire.ValidLabel(LabelBytes)) throw new TicketingArgumentException("Label must be UTF-8 without control characters (at most " + Wire.MaxLabelLen + " bytes are sent)", "Label");
            }
            else LabelBytes = Wire.CutLabel(DefaultLabel(options.AppName));
            TokenBytes = Encoding.UTF8.GetBytes(options.Token ?? "");
            log = options.Log;
            logger = options.Logger ?? TraceLogger.Instance;
            Tls = options.Tls;
            if (Tls != null)
            {
                try
                {
                    if (Tls.CaFile != null) caCert = new X509Certificate2(Tls.CaFile);
                    if (Tls.ClientCertificatePfx != null) ClientCertificate = new X509Certificate2(Tls.ClientCertificatePfx, Tls.ClientCertificatePassword ?? "");
                }
                catch (System.Security.Cryptography.CryptographicException e)
                {
                    throw new TicketingArgumentException("TLS files: " + e.Message, "Tls");
                }
            }
            releaser = new Releaser(this);
            completions = new Completions(this);
            watchdog = new Watchdog(completions);
            completions.Watchdog = watchdog;
            wakeCall = o => completions.Post((Call)o, false);
            int per = addresses.Count == 1 ? 2 : 1;
            var eps = addresses.Select(a => new Endpoint { Addr = a, Conns = Enumerable.Range(0, per).Select(_ => new Connection(this, a)).ToArray() }).ToArray();
            pool = new Pool { Eps = eps, Conns = eps.SelectMany(e => e.Conns).ToArray(), ByAddr = eps.ToDictionary(e => e.Addr), Extra = 0 };
            foreach (var c in pool.Conns) c.Start();
        }

        internal bool IsClosed { get { return closed; } }

        /// <summary>This client's version (in the default connection label).</summary>
        public static string Version { get { return typeof(TicketingClient).Assembly.GetName().Version.ToString(3); } }

        /// <summary>
        /// The connection label sent without TicketingOptions.Label (protocol.md §12.3):
        /// "&lt;host&gt;/&lt;pid&gt; csharp/&lt;version&gt;", with "&lt;appName&gt; " in front when appName is
        /// not empty; cut to 64 bytes.
        /// </summary>
        public static string DefaultLabel(string appName = null)
        {
            string host;
            try { host = System.Net.Dns.GetHostName(); }
            catch (System.Net.Sockets.SocketException) { host = null; }
            if (string.IsNullOrEmpty(host)) host = "unknown";
            int pid;
            using (var me = System.Diagnostics.Process.GetCurrentProcess()) pid = me.Id;
            var l = host + "/" + pid + " csharp/" + Version;
            if (!string.IsNullOrEmpty(appName)) l = appName + " " + l;
            return Encoding.UTF8.GetString(Wire.CutLabel(l));
        }

        /// <summary>
        /// Waits until a connection is up. Throws TicketingConnectionException when none comes
        /// within ConnectTimeout, TicketingAuthenticationException / TicketingTlsException when every
        /// address failed that way.
        /// </summary>
        public void Connect(CancellationToken ct = default(CancellationToken))
        {
            if (closed) throw new ObjectDisposedException("TicketingClient"); // R7: at once, not after the timeout
            long limit = Clock.Now + Clock.Ticks(ConnectTimeout);
            while (true)
            {
                long g = Interlocked.Read(ref gen);
                if (pool.Conns.Any(c => c.IsUp)) return;
                var cfg = ConfigError();
                if (cfg != null) throw Rethrowable(cfg);
                var err = LastError();
                if (pool.Conns.All(c => c.Failures > 0) && err is TicketingProtocolException)
                    throw Rethrowable(err);
                long left = limit - Clock.Now;
                if (left <= 0) throw ConnectError();
                WaitChange(g, Clock.Span(left), ct);
            }
        }

        /// <summary>Connect for async code (waits on a pool thread; the connections have their own).</summary>
        public Task ConnectAsync(CancellationToken ct = default(CancellationToken))
        {
            return Task.Factory.StartNew(() => Connect(ct), ct, TaskCreationOptions.LongRunning, TaskScheduler.Default);
        }

        // ------------------------------------------------------------------
        // Acquire

        /// <summary>
        /// Waits up to wait for the lock on key and returns a Lease of lease (both rounded up to
        /// whole ms; wait zero tries once). The wait bounds the whole call, waiting for a
        /// connection included (R1). Throws LockTimeoutException, LockBusyException (refused at
        /// once, never retried), IndeterminateException (sent, no definite answer, also when the
        /// server stays silent past the wait plus TicketingOptions.AnswerAllowance: do NOT enter
        /// the critical section), TicketingConnectionException, TicketingAuthenticationException
        /// and TicketingTlsException (at once when every connection failed that way),
        /// TicketingArgumentException, ObjectDisposedException. Cancelling ct withdraws a queued
        /// acquire (C) and releases a grant that won the race, then throws
        /// OperationCanceledException. Messages name the key and the server.
        /// </summary>
        public Task<Lease> AcquireAsync(string key, TimeSpan lease, TimeSpan wait, CancellationToken ct = default(CancellationToken))
        {
            return AcquireCoreAsync(new AcquireOp(this, KeyBytes(key), null, lease, wait, null), ct);
        }

        /// <summary>AcquireAsync with a raw byte key.</summary>
        public Task<Lease> AcquireAsync(byte[] key, TimeSpan lease, TimeSpan wait, CancellationToken ct = default(CancellationToken))
        {
            return AcquireCoreAsync(new AcquireOp(this, key, null, lease, wait, null), ct);
        }

        /// <summary>
        /// AcquireAsync with options: AcquireOptions.MinRemaining fails the call with
        /// InsufficientLeaseException (the grant released) when less of the lease is left (R14).
        /// </summary>
        public Task<Lease> AcquireAsync(string key, TimeSpan lease, TimeSpan wait, AcquireOptions options, CancellationToken ct = default(CancellationToken))
        {
            return AcquireCoreAsync(new AcquireOp(this, KeyBytes(key), null, lease, wait, options), ct);
        }

        /// <summary>
        /// Acquires the 2–16 distinct keys as one set (protocol 1.1, §12.2): one lease, one wait,
        /// one fencing token for all of them; queued on every key at once, granted when it heads
        /// every queue. The Lease's Keys lists them; its release (or ReleaseSetAsync) frees all at
        /// once. TicketingUnsupportedException when the server is 1.0 (nothing sent). Otherwise as
        /// AcquireAsync.
        /// </summary>
        public Task<Lease> AcquireSetAsync(IEnumerable<string> keys, TimeSpan lease, TimeSpan wait, CancellationToken ct = default(CancellationToken))
        {
            return AcquireCoreAsync(new AcquireOp(this, null, SetKeys(keys), lease, wait, null), ct);
        }

        /// <summary>Synchronous AcquireSetAsync (blocks the calling thread only).</summary>
        public Lease AcquireSet(IEnumerable<string> keys, TimeSpan lease, TimeSpan wait, CancellationToken ct = default(CancellationToken))
        {
            return AcquireCore(new AcquireOp(this, null, SetKeys(keys), lease, wait, null), ct);
        }

        async Task<Lease> AcquireCoreAsync(AcquireOp op, CancellationToken ct)
        {
            while (true)
            {
                ct.ThrowIfCancellationRequested();
                var c = op.NewCall();
                try
                {
                    if (!SendAsyncReady(c, ct)) await SendSlowAsync(c, op.BudgetEnd, op.BudgetEnd, ct).ConfigureAwait(false);
                }
                catch (Exception e) when (e is TicketingException || e is LockTimeoutException) { throw op.Unsent(e); }
                WatchAnswer(c);
                var reg = ct.CanBeCanceled ? ct.Register(() => CancelCall(c)) : default(CancellationTokenRegistration);
                try
                {
                    await c.Done.Task.ConfigureAwait(false);
                }
                finally
                {
                    reg.Dispose();
                }
                if (c.TimedOut) throw op.Unanswered(c);
                // The canceller and this caller race for an answered call: one claim wins.
                if (c.Owner == Owner.Abandoned || Interlocked.CompareExchange(ref c.Claim, 1, 0) != 0)
                    throw new OperationCanceledException(ct);
                var l = op.Outcome(c);
                if (l != null) return op.Checked(l, c);
                var d = op.BeforeRetry(c);
                if (d > TimeSpan.Zero) await SleepRedirectAsync(d, op, ct).ConfigureAwait(false);
            }
        }

        /// <summary>Synchronous Acquire: blocks the calling thread only (no thread-pool work).</summary>
        public Lease Acquire(string key, TimeSpan lease, TimeSpan wait, CancellationToken ct = default(CancellationToken))
        {
            return AcquireCore(new AcquireOp(this, KeyBytes(key), null, lease, wait, null), ct);
        }

        /// <summary>Acquire with a raw byte key.</summary>
        public Lease Acquire(byte[] key, TimeSpan lease, TimeSpan wait, CancellationToken ct = default(CancellationToken))
        {
            return AcquireCore(new AcquireOp(this, key, null, lease, wait, null), ct);
        }

        /// <summary>Synchronous Acquire with options (AcquireOptions.MinRemaining, R14).</summary>
        public Lease Acquire(string key, TimeSpan lease, TimeSpan wait, AcquireOptions options, CancellationToken ct = default(CancellationToken))
        {
            return AcquireCore(new AcquireOp(this, KeyBytes(key), null, lease, wait, options), ct);
        }

        Lease AcquireCore(AcquireOp op, CancellationToken ct)
        {
            while (true)
            {
                ct.ThrowIfCancellationRequested();
                var c = op.NewCall();
                c.Sync = true;
                try { Send(c, op.BudgetEnd, op.BudgetEnd, ct); }
                catch (Exception e) when (e is TicketingException || e is LockTimeoutException) { throw op.Unsent(e); }
                WatchAnswer(c);
                try
                {
                    c.Done.Task.Wait(ct);
                }
                catch (Exception e) when (e is OperationCanceledException || e is ThreadInterruptedException)
                {
                    // ct cancelled or Thread.Interrupt (R11): withdraws it, or (answered
                    // meanwhile) compensates a grant.
                    CancelCall(c);
                    throw;
                }
                if (c.TimedOut) throw op.Unanswered(c);
                if (Interlocked.CompareExchange(ref c.Claim, 1, 0) != 0) throw new OperationCanceledException(ct);
                var l = op.Outcome(c);
                if (l != null) return op.Checked(l, c);
                var d = op.BeforeRetry(c);
                if (d > TimeSpan.Zero) SleepRedirect(d, op, ct);
            }
        }

        /// <summary>
        /// R2: a written acquire is answered within the wait it carries plus the answer allowance,
        /// counted from its write; the watchdog withdraws it (C) otherwise and the caller gets
        /// Indeterminate (a late grant is released).
        /// </summary>
        void WatchAnswer(Call c)
        {
            c.WatchUntil = c.SentTicks + Clock.Ticks(TimeSpan.FromMilliseconds(c.A2) + AnswerAllowance);
            c.AnswerDue = true;
            watchdog.Watch(c);
        }

        /// <summary>One attempt (wait 0): the Lease, or null when the key is held.</summary>
        public async Task<Lease> TryAcquireAsync(string key, TimeSpan lease, CancellationToken ct = default(CancellationToken))
        {
            try { return await AcquireAsync(key, lease, TimeSpan.Zero, ct).ConfigureAwait(false); }
            catch (LockTimeoutException) { return null; }
        }

        /// <summary>TryAcquireAsync with a raw byte key.</summary>
        public async Task<Lease> TryAcquireAsync(byte[] key, TimeSpan lease, CancellationToken ct = default(CancellationToken))
        {
            try { return await AcquireAsync(key, lease, TimeSpan.Zero, ct).ConfigureAwait(false); }
            catch (LockTimeoutException) { return null; }
        }

        /// <summary>
        /// A timed try (R13): waits up to wait like AcquireAsync, but "not acquired within the
        /// wait" is null, not LockTimeoutException.
        /// </summary>
        public async Task<Lease> TryAcquireAsync(string key, TimeSpan lease, TimeSpan wait, CancellationToken ct = default(CancellationToken))
        {
            try { return await AcquireAsync(key, lease, wait, ct).ConfigureAwait(false); }
            catch (LockTimeoutException) { return null; }
        }

        /// <summary>Synchronous timed try: the Lease, or null when not acquired within wait.</summary>
        public Lease TryAcquire(string key, TimeSpan lease, TimeSpan wait, CancellationToken ct = default(CancellationToken))
        {
            try { return Acquire(key, lease, wait, ct); }
            catch (LockTimeoutException) { return null; }
        }

        /// <summary>Synchronous TryAcquire: the Lease, or null when the key is held.</summary>
        public Lease TryAcquire(string key, TimeSpan lease, CancellationToken ct = default(CancellationToken))
        {
            try { return Acquire(key, lease, TimeSpan.Zero, ct); }
            catch (LockTimeoutException) { return null; }
        }

        /// <summary>
        /// The caller gave up: withdraw the acquire (C) and leave any grant to compensation.
        /// True when the call was still pending.
        /// </summary>
        bool CancelCall(Call c)
        {
            var cn = c.Conn;
            if (cn != null && cn.Abandon(c))
            {
                completions.Post(c, false); // wake the waiting caller; the reader still owns the call
                return true;
            }
            // Answered already: unless the caller took the answer first, a grant is released.
            if (Interlocked.CompareExchange(ref c.Claim, 2, 0) == 0 && c.Fail == Fail.None && c.Resp != null && c.Resp.Status == Status.Granted)
                Compensate(c.Key, c.Keys, c.Resp.Value);
            return false;
        }

        /// <summary>The keys of a set, checked before anything is sent (R8): 2–16 distinct valid keys.</summary>
        static byte[][] SetKeys(IEnumerable<string> keys)
        {
            if (keys == null) throw new TicketingArgumentException("keys must not be null", "keys");
            var l = keys.Select(k => CheckKey(KeyBytes(k))).ToArray();
            if (l.Length < Wire.MinSetKeys || l.Length > Wire.MaxSetKeys)
                throw new TicketingArgumentException("keys: a set has " + Wire.MinSetKeys + " to " + Wire.MaxSetKeys + " keys, not " + l.Length, "keys");
            var seen = new HashSet<string>();
            foreach (var k in l)
                if (!seen.Add(Convert.ToBase64String(k))) throw new TicketingArgumentException("keys: " + Describe(k) + " appears twice (a set's keys are distinct)", "keys");
            return l;
        }

        /// <summary>A set's keys for messages.</summary>
        internal static string DescribeSet(byte[][] keys)
        {
            return "{" + string.Join(", ", keys.Select(Describe)) + "}";
        }

        sealed class AcquireOp
        {
            readonly TicketingClient cl;
            public readonly byte[] Key;
            public readonly byte[][] Keys;
            public readonly uint LeaseMs;
            public uint WaitMs;
            public readonly long BudgetEnd;
            readonly TimeSpan minRemaining;
            int moves, rounds;
            public bool Woken;
            public Endpoint KnownLeader;

            public AcquireOp(TicketingClient cl, byte[] key, byte[][] keys, TimeSpan lease, TimeSpan wait, AcquireOptions options)
            {
                this.cl = cl;
                Keys = keys;
                Key = keys != null ? keys[0] : CheckKey(key);
                LeaseMs = Millis(lease, "lease", 1);
                WaitMs = Millis(wait, "wait", 0);
                if (options != null && options.MinRemaining.HasValue)
                {
                    minRemaining = options.MinRemaining.Value;
                    if (minRemaining < TimeSpan.Zero || minRemaining > lease)
                        throw new TicketingArgumentException("MinRemaining " + minRemaining + " must be between 0 and the lease " + lease, "MinRemaining");
                }
                if (cl.closed) throw new ObjectDisposedException("TicketingClient");
                BudgetEnd = Clock.Now + Clock.Ticks(TimeSpan.FromMilliseconds(WaitMs));
            }

            public Call NewCall()
            {
                return new Call { Op = Keys != null ? Wire.OpAcquireSet : Wire.OpAcquire, Key = Key, Keys = Keys, A1 = LeaseMs, A2 = WaitMs, Counts = WaitMs > 0 };
            }

            string K { get { return Keys != null ? "set " + DescribeSet(Keys) : Describe(Key); } }

            /// <summary>"acquire "k" at addr" (R15): the call and the server that answered it.</summary>
            string At(Call c) { return "acquire " + K + " at " + (c.Conn != null ? c.Conn.Addr : cl.AddrList()); }

            /// <summary>A failure before anything was sent, with the key and the addresses (R15).</summary>
            public Exception Unsent(Exception e)
            {
                var what = "acquire " + K + " at " + cl.AddrList() + ": ";
                if (e is LockTimeoutException) return new LockTimeoutException(what + e.Message);
                if (e is TicketingUnsupportedException) return new TicketingUnsupportedException(what + e.Message);
                if (e is TicketingAuthenticationException) return new TicketingAuthenticationException(what + e.Message, e);
                if (e is TicketingTlsException) return new TicketingTlsException(what + e.Message, e);
                if (e is NoLeaderException) return new NoLeaderException(what + e.Message);
                if (e is TicketingConnectionException) return new TicketingConnectionException(what + e.Message, e);
                return e;
            }

            /// <summary>R2: written, and no answer within its wait plus the allowance (withdrawn).</summary>
            public Exception Unanswered(Call c)
            {
                return new IndeterminateException(At(c) + ": no answer within " + (c.A2 / 1000.0) + " s (its wait) + " + cl.AnswerAllowance.TotalSeconds
                    + " s (the answer allowance) of the request's write; withdrawn, a late grant is released");
            }

            /// <summary>R14: a grant with less than the minimum working time left is released.</summary>
            public Lease Checked(Lease l, Call c)
            {
                if (minRemaining <= TimeSpan.Zero) return l;
                var rem = l.Remaining;
                if (rem >= minRemaining) return l;
                cl.Compensate(Key, Keys, l.Token);
                throw new InsufficientLeaseException(At(c) + ": " + Math.Round(rem.TotalMilliseconds) + " ms of the lease left after the grant, below the minimum " + minRemaining.TotalMilliseconds + " ms; released");
            }

            /// <summary>A Lease, null to retry, or throws.</summary>
            public Lease Outcome(Call c)
            {
                if (c.Fail == Fail.Lost)
                {
                    if (c.FailErr is ObjectDisposedException) throw new IndeterminateException(At(c) + ": the client was closed after the request was written");
                    throw new IndeterminateException(At(c) + ": connection lost after the request was written: " + c.FailErr.Message, c.FailErr);
                }
                if (c.Fail == Fail.Unsent)
                {
                    if (cl.closed) throw new ObjectDisposedException("TicketingClient");
                    return null;
                }
                var r = c.Resp;
                switch (r.Status)
                {
                    case Status.Granted:
                        long deadline = c.SentTicks + Clock.Ticks(TimeSpan.FromMilliseconds(r.Queued * (double)Wire.QueuedUnitMs + LeaseMs));
                        return new Lease(cl, Key, Keys, r.Value, deadline);
                    case Status.Timeout: throw new LockTimeoutException(At(c) + ": timed out, not acquired");
                    case Status.Busy: throw new LockBusyException(r.Code, At(c) + ": busy (" + r.Code + "), not acquired");
                    case Status.Unknown: throw new IndeterminateException(At(c) + ": the cluster could not confirm the commit");
                    case Status.Moved: return null;
                    default: throw ServerError(r, At(c));
                }
            }

            /// <summary>Bookkeeping before a retry; the pause to take first (or zero).</summary>
            public TimeSpan BeforeRetry(Call c)
            {
                var pause = TimeSpan.Zero;
                if (c.Fail == Fail.None && c.Resp.Status == Status.Moved)
                {
                    var addr = Encoding.ASCII.GetString(c.Resp.Payload ?? new byte[0]);
                    cl.Follow(addr);
                    moves++;
                    if (moves > MaxMoves)
                    {
                        rounds++;
                        pause = cl.RedirectDelay(rounds);
                        if (WaitMs == 0 || Clock.Span(BudgetEnd - Clock.Now) <= pause)
                            throw new NoLeaderException(At(c) + ": no leader: " + moves + " consecutive redirects" + (addr.Length == 0 ? " (no leader elected)" : " (last to " + addr + ")"));
                        KnownLeader = cl.leader;
                        moves = 0;
                    }
                }
                if (WaitMs > 0)
                {
                    double rem = Clock.Ms(BudgetEnd - Clock.Now);
                    if (rem < 1) throw new LockTimeoutException(At(c) + ": timed out, not acquired");
                    WaitMs = (uint)Math.Floor(rem);
                }
                return pause;
            }
        }
        // ------------------------------------------------------------------
        // Release

        /// <summary>Hands a finished call to its owner (no connection lock held).</summary>
        internal void Complete(Call c)
        {
            switch (c.Owner)
            {
                case Owner.Caller: completions.Post(c, true); break;
                case Owner.Abandoned:
                    if (c.Fail == Fail.None && c.Resp.Status == Status.Granted) Compensate(c.Key, c.Keys, c.Resp.Value);
                    break;
                case Owner.Releaser: releaser.Completed(c); break;
            }
        }

        internal void Log(TicketingLogLevel level, string msg, Exception cause = null)
        {
            var l = log;
            if (l != null) l(msg);
            try { if (logger.IsEnabled(level)) logger.Log(level, msg, cause); }
            catch (Exception) { } // a logger must not break the client's threads
        }

        // ------------------------------------------------------------------
        // Arguments

        internal static byte[] KeyBytes(string key)
        {
            if (key == null) throw new TicketingArgumentException("key must not be null", "key");
            // A lone UTF-16 surrogate has no UTF-8 form: Encoding.UTF8 would send U+FFFD instead,
            // so two different strings would lock one key (R8). Refused before sending.
            try { return StrictUtf8.GetBytes(key); }
            catch (EncoderFallbackException e)
            {
                throw new TicketingArgumentException("key has a lone UTF-16 surrogate at index " + e.Index + ": not valid UTF-8 (keys are 1..250 bytes of UTF-8)", "key");
            }
        }

        static readonly UTF8Encoding StrictUtf8 = new UTF8Encoding(false, true);

        internal static void CheckToken(ulong token)
        {
            if (token == 0) throw new TicketingArgumentException("token 0 is never issued (tokens are 1..2^64-1)", "token");
        }

        internal static byte[] CheckKey(byte[] key)
        {
            if (!Wire.ValidKey(key))
                throw new TicketingArgumentException("key " + Describe(key) + " must be 1..250 bytes of UTF-8 without control characters", "key");
            return key;
        }

        /// <summary>A key for messages: never more than 40 bytes of it.</summary>
        internal static string Describe(byte[] key)
        {
            if (key == null) return "(null)";
            var s = Encoding.UTF8.GetString(key, 0, Math.Min(key.Length, 40));
            return key.Length > 40 ? "\"" + s + "…\" (" + key.Length + " bytes)" : "\"" + s + "\"";
        }

        internal static uint Millis(TimeSpan d, string name, uint min)
        {
            if (d == Timeout.InfiniteTimeSpan)
                throw new TicketingArgumentException(name + " Timeout.InfiniteTimeSpan is not supported: every " + name + " is bounded (the server refuses more than its max_" + name + ", " + (name == "wait" ? "15 min" : "1 h") + " by default); pass the longest " + name + " you accept", name);
            if (d < TimeSpan.Zero) throw new TicketingArgumentException(name + " " + d + " must not be negative", name);
            double ms = Math.Ceiling(d.TotalMilliseconds);
            if (ms > MaxU32) throw new TicketingArgumentException(name + " " + d + " is over the protocol's " + MaxU32 + " ms", name);
            if (ms < min) throw new TicketingArgumentException(name + " must be at least " + min + " ms", name);
            return (uint)ms;
        }

        static Exception ServerError(Response r, string what)
        {
            var msg = Encoding.UTF8.GetString(r.Payload ?? new byte[0]);
            switch (r.Code)
            {
                case Code.BadKey:
                case Code.BadLease:
                case Code.BadWait:
                case Code.BadFlags:
                    return new TicketingArgumentException(what + ": server refused: " + r.Code + ": " + msg, null, r.Code);
                default:
                    return new TicketingServerException(r.Code, what + ": server error " + r.Code + (msg.Length > 0 ? ": " + msg : ""));
            }
        }

        /// <summary>
        /// Closes every connection and stops the background threads. Calls in progress throw
        /// ObjectDisposedException (IndeterminateException for a request already written).
        /// </summary>
        public void Dispose()
        {
            Connection[] conns;
            lock (mu)
            {
                if (closed) return;
                closed = true;
                conns = pool.Conns;
            }
            closedEvent.Set();
            Changed();
            foreach (var c in conns) c.Shutdown();
            releaser.Stop();
            watchdog.Stop();
            // Background threads: wait briefly for them, never long (a TLS read may not
            // notice its socket closing at once on every runtime).
            var until = Clock.Now + Clock.Ticks(TimeSpan.FromSeconds(1));
            foreach (var c in conns) c.Join((int)Math.Max(0, Clock.Ms(until - Clock.Now)));
        }

#if NET8_0_OR_GREATER
        /// <summary>Dispose for await using.</summary>
        public ValueTask DisposeAsync()
        {
            Dispose();
            return default(ValueTask);
        }
#endif
    }
}

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
    // The connection side of the client (as StackExchange.Redis splits ConnectionMultiplexer
    // into partial files): the pool of connections per address, the choice of a connection
    // (the known leader first, then round robin), queueing a call and waiting for a connection
    // or a free max_inflight slot (R1, R4/R5's configuration errors), leader following (M),
    // reconnect backoff (R16) and the connections' reports. The connections themselves are
    // Connection.cs.
    public sealed partial class TicketingClient
    {
        internal const double BackoffBase = 0.1, BackoffCap = 3.2, RedirectBase = 0.025, RedirectCap = 0.2;
        internal const int MaxMoves = 3, MaxExtra = 32;
        /// <summary>A connection opened for the first time may be waited for this long past a shorter wait (R1).</summary>
        internal static readonly TimeSpan FirstConnectGrace = TimeSpan.FromSeconds(1);
        internal Action<string, int, TimeSpan> OnReconnect;
        volatile Pool pool;
        volatile Endpoint leader;
        int rr;
        long gen;
        Exception lastErr;
        [ThreadStatic] static Random rng;

        sealed class Endpoint
        {
            public string Addr;
            public Connection[] Conns;
        }

        sealed class Pool
        {
            public Endpoint[] Eps;
            public Connection[] Conns;
            public Dictionary<string, Endpoint> ByAddr;
            public int Extra;
        }

        /// <summary>Connections currently up (diagnostics).</summary>
        public int ConnectedCount { get { return pool.Conns.Count(c => c.IsUp); } }

        /// <summary>Connections kept (diagnostics): two for a single address.</summary>
        public int ConnectionCount { get { return pool.Conns.Length; } }

        internal Enq TryEnqueue(Call c)
        {
            var p = pool;
            int r = Interlocked.Increment(ref rr) & int.MaxValue;
            var res = Enq.Down;
            var ep = leader;
            if (ep != null)
            {
                int n = ep.Conns.Length;
                for (int i = 0; i < n; i++)
                {
                    var e = ep.Conns[(r + i) % n].Enqueue(c);
                    if (e == Enq.Ok) return Enq.Ok;
                    if (e == Enq.Full || (e == Enq.Unsupported && res == Enq.Down)) res = e;
                }
                if (res == Enq.Full || ep.Conns.Any(x => x.Connecting)) return res;
            }
            int m = p.Conns.Length;
            for (int i = 0; i < m; i++)
            {
                var e = p.Conns[(r + i) % m].Enqueue(c);
                if (e == Enq.Ok) return Enq.Ok;
                if (e == Enq.Full || (e == Enq.Unsupported && res == Enq.Down)) res = e;
            }
            return res;
        }

        /// <summary>Queues c, waiting for a connection until giveUp or a free slot until slotGiveUp.</summary>
        void Send(Call c, long giveUp, long slotGiveUp, CancellationToken ct)
        {
            bool waited = false;
            long grace = Clock.Now + Clock.Ticks(FirstConnectGrace);
            while (true)
            {
                long g = Interlocked.Read(ref gen);
                if (closed) throw new ObjectDisposedException("TicketingClient");
                if (waited) ShortenWait(c, slotGiveUp);
                var r = TryEnqueue(c);
                if (r == Enq.Ok) return;
                long left = SendLimit(r, giveUp, slotGiveUp, grace) - Clock.Now;
                if (left <= 0) throw NotSent(r);
                WaitChange(g, Clock.Span(left), ct);
                waited = true;
            }
        }

        /// <summary>
        /// Until when a call that could not be queued (r) waits: a free slot until slotGiveUp, a
        /// connection until giveUp, or up to the first-connect grace while a connection is being
        /// opened for the first time (R1). Throws at once when there is nothing to wait for: the
        /// server lacks the feature, or every connection failed auth or TLS (R4, R5).
        /// </summary>
        long SendLimit(Enq r, long giveUp, long slotGiveUp, long grace)
        {
            if (r == Enq.Full) return slotGiveUp;
            if (r == Enq.Unsupported) throw new TicketingUnsupportedException("not supported by this server (protocol 1.1 key sets; the server speaks 1.0); nothing was sent");
            var cfg = ConfigError();
            if (cfg != null) throw Rethrowable(cfg);
            if (giveUp < grace && pool.Conns.Any(x => x.Connecting)) return grace;
            return giveUp;
        }

        Exception NotSent(Enq r)
        {
            if (r == Enq.Full) return new LockTimeoutException("timed out waiting for a free max_inflight slot, not acquired");
            return ConnectError();
        }

        /// <summary>The configuration error (auth, TLS) when no connection is up and every connection's last attempt failed with one.</summary>
        Exception ConfigError()
        {
            Exception e = null;
            foreach (var c in pool.Conns)
            {
                if (c.IsUp) return null;
                var x = c.ConfigError;
                if (x == null) return null;
                e = x;
            }
            return e;
        }

        /// <summary>The client's addresses, for messages about a call no one server answered.</summary>
        internal string AddrList() { return string.Join(",", addresses); }

        /// <summary>
        /// Time spent waiting for a connection or a slot comes out of the wait the acquire
        /// carries: wait bounds the whole call, connecting included.
        /// </summary>
        static void ShortenWait(Call c, long slotGiveUp)
        {
            if (!c.IsAcquire || !c.Counts) return;
            double rem = Math.Max(0, Math.Floor(Clock.Ms(slotGiveUp - Clock.Now)));
            if (rem < c.A2) c.A2 = (uint)rem;
        }

        bool SendAsyncReady(Call c, CancellationToken ct)
        {
            if (closed) throw new ObjectDisposedException("TicketingClient");
            ct.ThrowIfCancellationRequested();
            return TryEnqueue(c) == Enq.Ok;
        }

        async Task SendSlowAsync(Call c, long giveUp, long slotGiveUp, CancellationToken ct)
        {
            long grace = Clock.Now + Clock.Ticks(FirstConnectGrace);
            while (true)
            {
                Task changed;
                lock (mu) changed = ChangeTask();
                if (closed) throw new ObjectDisposedException("TicketingClient");
                ShortenWait(c, slotGiveUp); // the fast path already failed once: time has passed
                var r = TryEnqueue(c);
                if (r == Enq.Ok) return;
                long left = SendLimit(r, giveUp, slotGiveUp, grace) - Clock.Now;
                if (left <= 0) throw NotSent(r);
                await Task.WhenAny(changed, Task.Delay(Clock.Span(left), ct)).ConfigureAwait(false);
                ct.ThrowIfCancellationRequested();
            }
        }

        TaskCompletionSource<bool> changeTcs;

        Task ChangeTask()
        {
            if (changeTcs == null) changeTcs = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
            return changeTcs.Task;
        }

        /// <summary>Something changed (a connection came up or failed, a slot freed, a leader).</summary>
        internal void Changed()
        {
            TaskCompletionSource<bool> t;
            lock (mu)
            {
                gen++;
                Monitor.PulseAll(mu);
                t = changeTcs;
                changeTcs = null;
            }
            if (t != null) t.TrySetResult(true);
        }

        void WaitChange(long g, TimeSpan d, CancellationToken ct)
        {
            if (!ct.CanBeCanceled)
            {
                lock (mu) if (gen == g && !closed) Monitor.Wait(mu, d);
                return;
            }
            using (ct.Register(() => { lock (mu) Monitor.PulseAll(mu); }))
            {
                lock (mu) if (gen == g && !closed && !ct.IsCancellationRequested) Monitor.Wait(mu, d);
            }
            ct.ThrowIfCancellationRequested();
        }

        void SleepRedirect(TimeSpan d, AcquireOp op, CancellationToken ct)
        {
            long limit = Clock.Now + Clock.Ticks(d);
            while (true)
            {
                long g = Interlocked.Read(ref gen);
                if (closed) throw new ObjectDisposedException("TicketingClient");
                if (!op.Woken && leader != null && !ReferenceEquals(leader, op.KnownLeader)) { op.Woken = true; return; }
                long left = limit - Clock.Now;
                if (left <= 0) return;
                WaitChange(g, Clock.Span(left), ct);
            }
        }

        async Task SleepRedirectAsync(TimeSpan d, AcquireOp op, CancellationToken ct)
        {
            long limit = Clock.Now + Clock.Ticks(d);
            while (true)
            {
                Task changed;
                lock (mu) changed = ChangeTask();
                if (closed) throw new ObjectDisposedException("TicketingClient");
                if (!op.Woken && leader != null && !ReferenceEquals(leader, op.KnownLeader)) { op.Woken = true; return; }
                long left = limit - Clock.Now;
                if (left <= 0) return;
                await Task.WhenAny(changed, Task.Delay(Clock.Span(left), ct)).ConfigureAwait(false);
                ct.ThrowIfCancellationRequested();
            }
        }

        /// <summary>Remembers the leader named by M; an unknown address gets a connection of its own.</summary>
        internal void Follow(string addr)
        {
            if (addr.Length == 0) { leader = null; return; }
            Endpoint ep;
            if (!pool.ByAddr.TryGetValue(addr, out ep))
            {
                string h; int p;
                try { SplitAddr(addr, out h, out p); }
                catch (ArgumentException) { Log(TicketingLogLevel.Warning, "ticketing: ignoring malformed leader address"); leader = null; return; }
                lock (mu)
                {
                    var old = pool;
                    if (!old.ByAddr.TryGetValue(addr, out ep))
                    {
                        if (closed || old.Extra >= MaxExtra) { leader = null; return; }
                        ep = new Endpoint { Addr = addr, Conns = new[] { new Connection(this, addr) } };
                        var by = new Dictionary<string, Endpoint>(old.ByAddr);
                        by[addr] = ep;
                        pool = new Pool { Eps = old.Eps.Concat(new[] { ep }).ToArray(), Conns = old.Conns.Concat(ep.Conns).ToArray(), ByAddr = by, Extra = old.Extra + 1 };
                        ep.Conns[0].Start();
                    }
                }
            }
            if (!ReferenceEquals(leader, ep))
            {
                leader = ep;
                Changed();
                releaser.Poke();
            }
        }

        internal void ConnectionFailed(Connection cn, Exception e, int attempt)
        {
            lock (mu) lastErr = e;
            if (attempt == 1 || e is TicketingAuthenticationException) Log(TicketingLogLevel.Warning, "ticketing: connect " + cn.Addr + " failed (attempt " + attempt + "): " + e.Message, e);
            Changed();
        }

        internal void ConnectionLost(Connection cn, Exception e, int pending)
        {
            lock (mu) lastErr = e;
            Log(TicketingLogLevel.Warning, "ticketing: connection to " + cn.Addr + " lost (" + pending + " pending): " + e.Message, e);
        }

        Exception LastError() { lock (mu) return lastErr; }

        Exception ConnectError()
        {
            var e = LastError();
            if (e == null) return new TicketingConnectionException("no connection to any server within " + ConnectTimeout.TotalSeconds + "s");
            if (e is TicketingAuthenticationException) return new TicketingAuthenticationException("no connection to any server: " + e.Message, e);
            if (e is TicketingTlsException) return new TicketingTlsException("no connection to any server: " + e.Message, e);
            return new TicketingConnectionException("no connection to any server: " + e.Message, e);
        }

        static Exception Rethrowable(Exception e)
        {
            var t = e as TicketingTlsException;
            if (t != null) return new TicketingTlsException(e.Message, e, t.Config);
            if (e is TicketingAuthenticationException) return new TicketingAuthenticationException(e.Message, e);
            return new TicketingProtocolException(e.Message, e);
        }

        internal TimeSpan BackoffDelay(int attempt) { return Jitter(Step(BackoffBase, BackoffCap, attempt)); }
        internal TimeSpan RedirectDelay(int n) { return Jitter(Step(RedirectBase, RedirectCap, n)); }

        static double Step(double b, double cap, int n)
        {
            double d = b;
            for (int i = 1; i < n && d < cap; i++) d *= 2;
            return Math.Min(d, cap);
        }

        static TimeSpan Jitter(double s)
        {
            if (rng == null) rng = new Random(Guid.NewGuid().GetHashCode());
            return TimeSpan.FromSeconds(rng.NextDouble() * s); // full jitter (R16): uniform in [0, step]
        }

        internal bool SleepUnlessClosed(TimeSpan d)
        {
            return !closedEvent.Wait(d);
        }

        internal static void SplitAddr(string addr, out string host, out int port)
        {
            host = null;
            port = 0;
            int i = addr == null ? -1 : addr.LastIndexOf(':');
            if (i <= 0 || !int.TryParse(addr.Substring(i + 1), out port) || port < 1 || port > 65535)
                throw new TicketingArgumentException("address \"" + addr + "\" must be host:port (port 1..65535)", "Addresses");
            host = addr.Substring(0, i);
            if (host.StartsWith("[") && host.EndsWith("]")) host = host.Substring(1, host.Length - 2);
            else if (host.Contains(":")) throw new TicketingArgumentException("address \"" + addr + "\" must be host:port", "Addresses");
        }

        // ------------------------------------------------------------------
        // Close
    }
}

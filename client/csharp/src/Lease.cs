using System;
using System.Collections.Generic;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace Ticketing
{
    /// <summary>
    /// A granted lock. Ownership lives in the token, never in a thread: any thread (or any
    /// process that knows key and token) may release it. <c>using var lease = ...</c> releases
    /// it on Dispose, which never throws; ReleaseAsync reports failures.
    /// </summary>
    public sealed class Lease : IDisposable
#if NET8_0_OR_GREATER
        , IAsyncDisposable
#endif
    {
        readonly TicketingClient client;
        readonly long deadlineTicks;
        readonly object endingMu = new object();
        CancellationTokenSource ending; // created on first use of LeaseEndingToken (a timer is not free)
        int released; // 1 once the server confirmed (O)

        readonly byte[][] keySet;
        CancellationTokenSource done; // cancelled at the release (Ending)

        internal Lease(TicketingClient client, byte[] key, byte[][] keys, ulong token, long deadlineTicks)
        {
            this.client = client;
            KeyBytes = key;
            keySet = keys;
            Token = token;
            this.deadlineTicks = deadlineTicks;
            var left = Remaining;
            Deadline = DateTime.UtcNow + left;
            // Cancelled shortly before the local deadline: 10 % of the lease, at most 1 s.
            endMarginTicks = Clock.Ticks(TimeSpan.FromTicks(Math.Min(left.Ticks / 10, TimeSpan.FromSeconds(1).Ticks)));
        }

        readonly long endMarginTicks;

        /// <summary>The key (UTF-8 decoded).</summary>
        public string Key { get { return Encoding.UTF8.GetString(KeyBytes); } }

        /// <summary>The key's bytes (of a set: its first key).</summary>
        public byte[] KeyBytes { get; private set; }

        /// <summary>The keys: the one key, or every key of a set in the order acquired.</summary>
        public IReadOnlyList<string> Keys
        {
            get { return keySet == null ? new[] { Key } : keySet.Select(k => Encoding.UTF8.GetString(k)).ToArray(); }
        }

        /// <summary>True for a key set (AcquireSetAsync): its release frees every key at once.</summary>
        public bool IsSet { get { return keySet != null; } }

        /// <summary>The fencing token: strictly greater than every token issued before it.</summary>
        public ulong Token { get; private set; }

        /// <summary>
        /// The conservative local end of the lease as UTC wall time, computed once at the grant
        /// from the monotonic deadline (send time + queued time + lease, protocol.md §5).
        /// </summary>
        public DateTime Deadline { get; private set; }

        /// <summary>Time left before the local deadline (monotonic clock); zero once passed.</summary>
        public TimeSpan Remaining
        {
            get
            {
                var left = Clock.Span(deadlineTicks - Clock.Now);
                return left > TimeSpan.Zero ? left : TimeSpan.Zero;
            }
        }

        /// <summary>Cancelled shortly before the local deadline: stop the work it protects.</summary>
        public CancellationToken LeaseEndingToken
        {
            get
            {
                lock (endingMu)
                {
                    if (ending == null)
                    {
                        if (IsReleased) return new CancellationToken(true);
                        ending = new CancellationTokenSource();
                        var when = Clock.Span(deadlineTicks - endMarginTicks - Clock.Now);
                        if (when <= TimeSpan.Zero) ending.Cancel();
                        else ending.CancelAfter(when);
                    }
                    return ending.Token;
                }
            }
        }

        /// <summary>
        /// R12: a token cancelled margin before the conservative local deadline (Remaining is
        /// then about margin), or at the release, whichever comes first; already cancelled after
        /// the release. Never throws, also after the release. margin zero: at the deadline.
        /// </summary>
        public CancellationToken Ending(TimeSpan margin)
        {
            if (margin < TimeSpan.Zero) throw new TicketingArgumentException("margin " + margin + " must not be negative", "margin");
            CancellationTokenSource d;
            lock (endingMu)
            {
                if (IsReleased) return new CancellationToken(true);
                if (done == null) done = new CancellationTokenSource();
                d = done;
            }
            var cts = CancellationTokenSource.CreateLinkedTokenSource(d.Token);
            var when = Clock.Span(deadlineTicks - Clock.Ticks(margin) - Clock.Now);
            if (when <= TimeSpan.Zero) cts.Cancel();
            else cts.CancelAfter(when);
            return cts.Token;
        }

        /// <summary>
        /// After a confirmed release the token stays readable and is cancelled (R12): never
        /// disposed, so a thread reading LeaseEndingToken while another releases sees a
        /// cancelled token, not ObjectDisposedException. Callbacks registered on it run inside
        /// the release (as CancellationTokenSource.Cancel runs them); one that throws is logged.
        /// </summary>
        void EndOnRelease()
        {
            CancellationTokenSource e, d;
            lock (endingMu) { e = ending; d = done; }
            foreach (var s in new[] { e, d })
            {
                if (s == null || s.IsCancellationRequested) continue;
                try { s.Cancel(); }
                catch (AggregateException x) { client.Log(TicketingLogLevel.Warning, "ticketing: a LeaseEndingToken callback failed: " + x.InnerException.Message, x.InnerException); }
            }
        }

        /// <summary>True once the server confirmed the release.</summary>
        public bool IsReleased { get { return Volatile.Read(ref released) == 1; } }

        /// <summary>
        /// Releases the lock; completes when the server answered O (idempotent: a released lease
        /// returns at once). Throws NotHolderException or IndeterminateException; the handle then
        /// stays unreleased.
        /// </summary>
        public async Task ReleaseAsync(CancellationToken ct = default(CancellationToken))
        {
            if (IsReleased) return;
            if (keySet != null) await client.ReleaseSetAsync(Keys, Token, ct).ConfigureAwait(false);
            else await client.ReleaseAsync(KeyBytes, Token, ct).ConfigureAwait(false);
            Volatile.Write(ref released, 1);
            EndOnRelease();
        }

        /// <summary>Synchronous Release (blocks the calling thread only).</summary>
        public void Release()
        {
            if (IsReleased) return;
            if (keySet != null) client.ReleaseSet(Keys, Token);
            else client.Release(KeyBytes, Token);
            Volatile.Write(ref released, 1);
            EndOnRelease();
        }

        /// <summary>Releases; never throws (a failed release ends with the lease, and is logged).</summary>
        public void Dispose()
        {
            try { Release(); }
            catch (Exception e) { client.Log(TicketingLogLevel.Warning, "ticketing: release of " + TicketingClient.Describe(KeyBytes) + " on Dispose failed: " + e.Message, e); }
        }

#if NET8_0_OR_GREATER
        /// <summary>Releases for await using; never throws.</summary>
        public async ValueTask DisposeAsync()
        {
            try { await ReleaseAsync().ConfigureAwait(false); }
            catch (Exception e) { client.Log(TicketingLogLevel.Warning, "ticketing: release of " + TicketingClient.Describe(KeyBytes) + " on DisposeAsync failed: " + e.Message, e); }
        }
#endif

        /// <summary>Key, token and time left (never more).</summary>
        public override string ToString()
        {
            return "Lease(" + TicketingClient.Describe(KeyBytes) + ", token " + Token + ", " + Remaining.TotalMilliseconds.ToString("F0") + " ms left)";
        }
    }
}

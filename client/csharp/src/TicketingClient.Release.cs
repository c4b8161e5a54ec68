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
    // The release side of the client: Release/ReleaseSet (R and X), the 5 s release window,
    // the interpretation of each attempt (shared with the background Releaser) and
    // compensation of grants nobody took.
    public sealed partial class TicketingClient
    {
        internal static readonly TimeSpan ReleaseWindow = TimeSpan.FromSeconds(5);
        internal const int ReleaseQueueLen = 4096;
        /// <summary>
        /// Releases the lock on key held with token (any process that knows the token may).
        /// Completes only when the server answered O. Throws NotHolderException (the key is
        /// free or held under another token), IndeterminateException (not confirmed within
        /// 5 s; attempts that may have reached the server are repeated meanwhile; when ct is
        /// cancelled first they go on in the background).
        /// </summary>
        public async Task ReleaseAsync(string key, ulong token, CancellationToken ct = default(CancellationToken))
        {
            await ReleaseAsync(KeyBytes(key), token, ct).ConfigureAwait(false);
        }

        /// <summary>ReleaseAsync with a raw byte key.</summary>
        public Task ReleaseAsync(byte[] key, ulong token, CancellationToken ct = default(CancellationToken))
        {
            CheckToken(token);
            return ReleaseCoreAsync(NewRelease(CheckKey(key), null, token), ct);
        }

        /// <summary>
        /// Releases the set of keys held with token (protocol 1.1 X, §12.2): O only when token
        /// holds exactly these keys (in any order), else NotHolderException. As ReleaseAsync.
        /// </summary>
        public Task ReleaseSetAsync(IEnumerable<string> keys, ulong token, CancellationToken ct = default(CancellationToken))
        {
            var k = SetKeys(keys);
            CheckToken(token);
            return ReleaseCoreAsync(NewRelease(k[0], k, token), ct);
        }

        /// <summary>Synchronous ReleaseSetAsync (blocks the calling thread only).</summary>
        public void ReleaseSet(IEnumerable<string> keys, ulong token, CancellationToken ct = default(CancellationToken))
        {
            var k = SetKeys(keys);
            CheckToken(token);
            ReleaseCore(NewRelease(k[0], k, token), ct);
        }

        RelState NewRelease(byte[] key, byte[][] keys, ulong token)
        {
            var st = new RelState(key, keys, token, Clock.Now + Clock.Ticks(ReleaseWindow));
            // R7: closed before anything was sent: Closed (ObjectDisposedException), not Indeterminate.
            if (closed) throw new ObjectDisposedException("TicketingClient", "release " + st.Name + ": the client was closed; nothing was sent");
            return st;
        }

        internal async Task ReleaseCoreAsync(RelState st, CancellationToken ct)
        {
            Exception cause = null;
            while (true)
            {
                var c = NextReleaseAttempt(st, cause);
                try
                {
                    if (!SendAsyncReady(c, ct)) await SendSlowAsync(c, st.Deadline, st.Deadline, ct).ConfigureAwait(false);
                }
                catch (TicketingConnectionException e) { throw new IndeterminateException(st.GiveUp(e), e); }
                catch (TicketingUnsupportedException e) { throw new TicketingUnsupportedException("release " + st.Name + " at " + AddrList() + ": " + e.Message); }
                catch (OperationCanceledException) { releaser.Submit(st); throw; }
                // The window's end comes from the watchdog, cancellation from ct: no timer per call.
                c.WatchUntil = st.Deadline;
                watchdog.Watch(c);
                bool answered;
                var reg = ct.CanBeCanceled ? ct.Register(wakeCall, c) : default(CancellationTokenRegistration);
                try { answered = await c.Done.Task.ConfigureAwait(false); }
                finally { reg.Dispose(); }
                if (!answered)
                {
                    if (c.TimedOut) throw new IndeterminateException(st.GiveUp(cause));
                    if (releaser.Adopt(c, st)) throw new OperationCanceledException(ct);
                    // Answered meanwhile (settled below), or the window closed first.
                    if (c.Owner == Owner.Dropped) throw new IndeterminateException(st.GiveUp(cause));
                }
                TimeSpan pause;
                if (Settle(st, c, ref cause, out pause)) return;
                if (pause <= TimeSpan.Zero) continue;
                try { await Task.Delay(pause, ct).ConfigureAwait(false); }
                catch (OperationCanceledException) { releaser.Submit(st); throw; }
            }
        }

        /// <summary>Synchronous Release (blocks the calling thread only).</summary>
        public void Release(string key, ulong token, CancellationToken ct = default(CancellationToken))
        {
            Release(KeyBytes(key), token, ct);
        }

        /// <summary>Release with a raw byte key.</summary>
        public void Release(byte[] key, ulong token, CancellationToken ct = default(CancellationToken))
        {
            CheckToken(token);
            ReleaseCore(NewRelease(CheckKey(key), null, token), ct);
        }

        internal void ReleaseCore(RelState st, CancellationToken ct)
        {
            Exception cause = null;
            while (true)
            {
                var c = NextReleaseAttempt(st, cause);
                c.Sync = true;
                try { Send(c, st.Deadline, st.Deadline, ct); }
                catch (TicketingConnectionException e) { throw new IndeterminateException(st.GiveUp(e), e); }
                catch (TicketingUnsupportedException e) { throw new TicketingUnsupportedException("release " + st.Name + " at " + AddrList() + ": " + e.Message); }
                catch (OperationCanceledException) { releaser.Submit(st); throw; }
                bool answered;
                try { answered = c.Done.Task.Wait((int)Math.Ceiling(Clock.Ms(Math.Max(0, st.Deadline - Clock.Now))), ct); }
                catch (Exception e) when (e is OperationCanceledException || e is ThreadInterruptedException) { releaser.Adopt(c, st); throw; }
                if (!answered)
                {
                    if (c.Conn.Reown(c, Owner.Caller, Owner.Dropped, null)) throw new IndeterminateException(st.GiveUp(cause));
                    c.Done.Task.Wait();
                }
                TimeSpan pause;
                if (Settle(st, c, ref cause, out pause)) return;
                if (pause > TimeSpan.Zero && ct.WaitHandle.WaitOne(pause)) { releaser.Submit(st); ct.ThrowIfCancellationRequested(); }
            }
        }

        /// <summary>The next attempt of a caller's release, or why there is none (closed, window over).</summary>
        Call NextReleaseAttempt(RelState st, Exception cause)
        {
            if (closed) throw new IndeterminateException("release " + st.Name + ": the client was closed");
            if (Clock.Now >= st.Deadline) throw new IndeterminateException(st.GiveUp(cause));
            return st.NewCall(Owner.Caller, null);
        }

        /// <summary>
        /// Interprets an answered attempt of a caller's release: true when released (O), throws a
        /// definite failure, else false with the pause before the next try (ending 10 ms before the
        /// window does). cause keeps the last connection error for the give-up message.
        /// </summary>
        bool Settle(RelState st, Call c, ref Exception cause, out TimeSpan pause)
        {
            if (c.Fail != Fail.None) cause = c.FailErr;
            Exception err;
            if (ReleaseOutcome(st, c, out pause, out err))
            {
                if (err != null) throw err;
                return true;
            }
            var remaining = Clock.Span(st.Deadline - Clock.Now) - TimeSpan.FromMilliseconds(10);
            if (remaining < pause) pause = remaining;
            return false;
        }

        internal sealed class RelState
        {
            public readonly byte[] Key;
            public readonly byte[][] Keys; // a set (X), or null (R)
            public readonly ulong Token;
            public readonly long Deadline;
            public bool Maybe;
            public int Moves, Retries;
            public bool Woken;
            public string LastAddr;

            public RelState(byte[] key, byte[][] keys, ulong token, long deadline) { Key = key; Keys = keys; Token = token; Deadline = deadline; }

            /// <summary>The key, or the set, for messages.</summary>
            public string Name { get { return Keys != null ? "set " + DescribeSet(Keys) : Describe(Key); } }

            /// <summary>"release "k" at addr" (R15).</summary>
            public string At(Call c) { return "release " + Name + " at " + (c != null && c.Conn != null ? c.Conn.Addr : LastAddr ?? "?"); }

            public Call NewCall(Owner owner, Releaser.Job job)
            {
                return new Call { Op = Keys != null ? Wire.OpReleaseSet : Wire.OpRelease, Key = Key, Keys = Keys, TokenArg = Token, Owner = owner, Job = job };
            }

            public string GiveUp(Exception cause)
            {
                return At(null) + ": not confirmed within " + ReleaseWindow.TotalSeconds + "s" + (cause != null ? ": " + cause.Message : "");
            }
        }

        /// <summary>Interprets one release attempt: true when final (err null for O).</summary>
        internal bool ReleaseOutcome(RelState st, Call c, out TimeSpan pause, out Exception err)
        {
            pause = TimeSpan.Zero;
            err = null;
            if (c.Conn != null) st.LastAddr = c.Conn.Addr;
            if (c.Fail != Fail.None)
            {
                if (closed) { err = new IndeterminateException(st.At(c) + ": the client was closed"); return true; }
                if (c.Fail == Fail.Unsent) return false;
                st.Maybe = true;
                pause = RedirectDelay(++st.Retries);
                return false;
            }
            var r = c.Resp;
            switch (r.Status)
            {
                case Status.Released: return true;
                case Status.NotHolder:
                    err = st.Maybe
                        ? (Exception)new IndeterminateException(st.At(c) + ": the token no longer holds the key; an earlier unconfirmed attempt may have released it")
                        : new NotHolderException(st.At(c) + ": not the holder (" + (st.Keys != null ? "the set is not held under this token with exactly these keys" : "the key is free or held under another token") + ")");
                    return true;
                case Status.Moved:
                    Follow(Encoding.ASCII.GetString(r.Payload ?? new byte[0]));
                    if (++st.Moves > MaxMoves) { st.Moves = 0; pause = RedirectDelay(++st.Retries); }
                    return false;
                case Status.Unknown:
                    st.Maybe = true;
                    pause = RedirectDelay(++st.Retries);
                    return false;
                default:
                    err = ServerError(r, st.At(c));
                    return true;
            }
        }

        internal void Compensate(byte[] key, byte[][] keys, ulong token)
        {
            var st = new RelState(key, keys, token, Clock.Now + Clock.Ticks(ReleaseWindow));
            if (!releaser.Submit(st))
                Log(TicketingLogLevel.Warning, "ticketing: release queue full; an abandoned grant of " + st.Name + " stays held until its lease ends");
        }

        // ------------------------------------------------------------------
        // Sending and connection choice
    }
}

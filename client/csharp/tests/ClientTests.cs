using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using NUnit.Framework;
using Ticketing;

namespace Ticketing.Tests
{
    /// <summary>Failure paths against a scripted server.</summary>
    [TestFixture]
    public class FakeServerTests
    {
        static TicketingClient Client(FakeServer f, string token = null)
        {
            var c = new TicketingClient(new TicketingOptions { Addresses = new[] { f.Addr }, Token = token, ConnectTimeout = TimeSpan.FromSeconds(2) });
            c.Connect();
            return c;
        }

        static int Acquires(FakeServer f) { return f.Drain().Count(r => r.Op == Wire.OpAcquire); }

        [Test]
        public void ImpostorIsRefused()
        {
            using (var f = new FakeServer(null, "other", prove: false))
            {
                var e = Assert.Throws<TicketingAuthenticationException>(() => Client(f, "s3cret"));
                StringAssert.Contains("did not prove the token", e.Message);
                StringAssert.DoesNotContain("s3cret", e.Message);
            }
        }

        [Test]
        public void ABlockingContinuationDoesNotStallOtherCallers()
        {
            // Two grants arrive in one write, so one drainer completes both; the first caller's
            // continuation blocks until the second caller has its lease (sync-over-async).
            Request first = null;
            using (var f = new FakeServer((s, r) =>
            {
                if (r.Op != Wire.OpAcquire) { FakeServer.Respond(s, Status.Released, r); return; }
                if (first == null) { first = r; return; }
                var a = Wire.EncodeResponse(Status.Granted, Code.None, 0, first.ReqId, 1, null);
                var b = Wire.EncodeResponse(Status.Granted, Code.None, 0, r.ReqId, 2, null);
                var both = a.Concat(b).ToArray();
                s.Write(both, 0, both.Length);
            }))
            using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { f.Addr, "127.0.0.1:1" }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
            {
                Until.True(() => c.ConnectedCount == 1);
                var a1 = c.AcquireAsync("k1", TimeSpan.FromSeconds(10), TimeSpan.Zero);
                var a2 = c.AcquireAsync("k2", TimeSpan.FromSeconds(10), TimeSpan.Zero);
                var w1 = a1.ContinueWith(t => a2.Wait(TimeSpan.FromSeconds(5)), TaskContinuationOptions.ExecuteSynchronously);
                var w2 = a2.ContinueWith(t => a1.Wait(TimeSpan.FromSeconds(5)), TaskContinuationOptions.ExecuteSynchronously);
                Assert.IsTrue(w1.Wait(TimeSpan.FromSeconds(10)) && w2.Wait(TimeSpan.FromSeconds(10)), "continuations finished");
                Assert.IsTrue(w1.Result && w2.Result, "each caller got its lease while the other's continuation blocked");
            }
        }

        [Test]
        public void DroppedReplyIsIndeterminateAndNeverResent()
        {
            using (var f = new FakeServer((s, r) => { if (r.Op == Wire.OpAcquire) s.Close(); }))
            using (var c = Client(f))
            {
                Assert.Throws<IndeterminateException>(() => c.Acquire("k", TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(2)));
                Thread.Sleep(300);
                Assert.AreEqual(1, Acquires(f));
            }
        }

        [Test]
        public void BusyIsReturnedAtOnceNeverRetried()
        {
            using (var f = new FakeServer((s, r) => FakeServer.Respond(s, Status.Busy, r, code: Code.QueueFull)))
            using (var c = Client(f))
            {
                var e = Assert.Throws<LockBusyException>(() => c.Acquire("k", TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(10)));
                Assert.AreEqual(Code.QueueFull, e.Code);
                Assert.AreEqual(1, Acquires(f));
            }
        }

        [Test]
        public void UnknownIsIndeterminate()
        {
            using (var f = new FakeServer((s, r) => FakeServer.Respond(s, Status.Unknown, r, code: Code.NoQuorum)))
            using (var c = Client(f))
                Assert.Throws<IndeterminateException>(() => c.Acquire("k", TimeSpan.FromSeconds(5), TimeSpan.Zero));
        }

        [Test]
        public void EndlessMovedHasAHopLimit()
        {
            using (var f = new FakeServer((s, r) => FakeServer.Respond(s, Status.Moved, r, payload: new byte[0])))
            using (var c = Client(f))
            {
                Assert.Throws<NoLeaderException>(() => c.Acquire("k", TimeSpan.FromSeconds(5), TimeSpan.Zero));
                Assert.LessOrEqual(Acquires(f), TicketingClient.MaxMoves + 1);
            }
        }

        [Test]
        public void MovedIsFollowed()
        {
            using (var leader = new FakeServer((s, r) => FakeServer.Respond(s, Status.Granted, r, value: 42)))
            using (var follower = new FakeServer((s, r) => FakeServer.Respond(s, Status.Moved, r, payload: Encoding.ASCII.GetBytes(leader.Addr))))
            using (var c = Client(follower))
                Assert.AreEqual(42ul, c.Acquire("k", TimeSpan.FromSeconds(5), TimeSpan.Zero).Token);
        }

        [Test]
        public void ReleaseNeverSucceedsWithoutO()
        {
            using (var f = new FakeServer((s, r) => FakeServer.Respond(s, Status.NotHolder, r)))
            using (var c = Client(f))
                Assert.Throws<NotHolderException>(() => c.Release("k", 7));
        }

        [Test]
        public void ReleaseAfterUnknownIsIndeterminate()
        {
            int n = 0;
            using (var f = new FakeServer((s, r) => FakeServer.Respond(s, Interlocked.Increment(ref n) == 1 ? Status.Unknown : Status.NotHolder, r)))
            using (var c = Client(f))
            {
                var e = Assert.Throws<IndeterminateException>(() => c.Release("k", 7));
                StringAssert.Contains("earlier unconfirmed attempt", e.Message);
            }
        }

        [Test]
        public void ReleaseGivenUpAfterTheWindow()
        {
            using (var f = new FakeServer(null))
            using (var c = Client(f))
            {
                var sw = Stopwatch.StartNew();
                Assert.Throws<IndeterminateException>(() => c.Release("k", 7));
                Assert.GreaterOrEqual(sw.Elapsed.TotalSeconds, 4.5);
                Assert.Less(sw.Elapsed.TotalSeconds, 15);
            }
        }

        [Test]
        public void TwoConnectionsForASingleAddress()
        {
            using (var f = new FakeServer(null))
            using (var c = Client(f))
            {
                Assert.AreEqual(2, c.ConnectionCount);
                Until.True(() => f.Accepts.Count >= 2);
            }
        }

        [Test]
        public void CancellationWithdrawsWithCancel()
        {
            var cancels = new BlockingCollection<Request>();
            Request acq = null;
            using (var f = new FakeServer((s, r) =>
            {
                if (r.Op == Wire.OpAcquire) acq = r;
                else if (r.Op == Wire.OpCancel) { cancels.Add(r); FakeServer.Respond(s, Status.Timeout, acq); FakeServer.Respond(s, Status.Released, r); }
            }))
            using (var c = Client(f))
            using (var cts = new CancellationTokenSource())
            {
                var t = c.AcquireAsync("k", TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(30), cts.Token);
                Until.True(() => acq != null);
                cts.Cancel();
                var ex = Assert.Throws<AggregateException>(() => t.Wait(5000));
                Assert.IsInstanceOf<OperationCanceledException>(ex.InnerException);
                Request cr;
                Assert.IsTrue(cancels.TryTake(out cr, 5000));
                Assert.AreEqual(acq.ReqId, (uint)(cr.Arg >> 32));
            }
        }

        [Test]
        public void InterruptWithdrawsABlockedSyncAcquire()
        {
            // issue 34 C# 1, R11: Thread.Interrupt on a thread blocked in the synchronous
            // Acquire withdraws the queued acquire (C) instead of leaving it queued.
            var cancels = new BlockingCollection<Request>();
            Request acq = null;
            using (var f = new FakeServer((s, r) =>
            {
                if (r.Op == Wire.OpAcquire) acq = r;
                else if (r.Op == Wire.OpCancel) { cancels.Add(r); FakeServer.Respond(s, Status.Timeout, acq); FakeServer.Respond(s, Status.Released, r); }
            }))
            using (var c = Client(f))
            {
                Exception got = null;
                var t = new Thread(() =>
                {
                    try { c.Acquire("k", TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(30)); }
                    catch (Exception e) { got = e; }
                });
                t.Start();
                Until.True(() => acq != null);
                t.Interrupt();
                Assert.IsTrue(t.Join(5000), "the interrupted caller returned");
                Assert.IsInstanceOf<ThreadInterruptedException>(got);
                Request cr;
                Assert.IsTrue(cancels.TryTake(out cr, 5000), "the interrupted acquire was withdrawn with C");
                Assert.AreEqual(acq.ReqId, (uint)(cr.Arg >> 32));
            }
        }

        [Test]
        public void LeaseEndingTokenStaysReadableAndCancelledAfterRelease()
        {
            // issue 34 C# 2, R12: after a release the token is cancelled and reading it never
            // throws ObjectDisposedException, also for a thread reading while another releases.
            long next = 0;
            using (var f = new FakeServer((s, r) =>
            {
                if (r.Op == Wire.OpAcquire) FakeServer.Respond(s, Status.Granted, r, value: (ulong)Interlocked.Increment(ref next));
                else if (r.Op == Wire.OpRelease) FakeServer.Respond(s, Status.Released, r);
            }))
            using (var c = Client(f))
            {
                var l = c.Acquire("k", TimeSpan.FromSeconds(30), TimeSpan.Zero);
                var before = l.LeaseEndingToken;
                Assert.IsFalse(before.IsCancellationRequested);
                l.Release();
                Assert.IsTrue(before.IsCancellationRequested, "the token handed out before the release is cancelled");
                var after = l.LeaseEndingToken;
                Assert.IsTrue(after.IsCancellationRequested);
                Assert.IsTrue(after.WaitHandle.WaitOne(0));
                after.Register(() => { }).Dispose();
                l.Dispose(); // a second release is a no-op
                Assert.IsTrue(l.LeaseEndingToken.IsCancellationRequested);

                // A reader racing the release: every read works, and it ends cancelled.
                var l2 = c.Acquire("k2", TimeSpan.FromSeconds(30), TimeSpan.Zero);
                Exception err = null;
                int seenCancelled = 0;
                var reader = new Thread(() =>
                {
                    var sw = Stopwatch.StartNew();
                    try
                    {
                        while (seenCancelled < 1000 && sw.Elapsed < TimeSpan.FromSeconds(10))
                        {
                            var t = l2.LeaseEndingToken;
                            t.Register(() => { }).Dispose();
                            if (t.WaitHandle.WaitOne(0)) seenCancelled++;
                        }
                    }
                    catch (Exception e) { err = e; }
                });
                reader.Start();
                l2.Release();
                Assert.IsTrue(reader.Join(15000));
                Assert.IsNull(err, "reading LeaseEndingToken during a release threw: " + err);
                Assert.AreEqual(1000, seenCancelled);
            }
        }

        [Test]
        public void GrantThatWonTheRaceIsCompensated()
        {
            var releases = new BlockingCollection<ulong>();
            Request acq = null;
            using (var f = new FakeServer((s, r) =>
            {
                if (r.Op == Wire.OpAcquire) acq = r;
                else if (r.Op == Wire.OpCancel) { FakeServer.Respond(s, Status.Granted, acq, value: 77); FakeServer.Respond(s, Status.NotHolder, r); }
                else if (r.Op == Wire.OpRelease) { releases.Add(r.Arg); FakeServer.Respond(s, Status.Released, r); }
            }))
            using (var c = Client(f))
            using (var cts = new CancellationTokenSource())
            {
                var t = Task.Run(() => c.Acquire("k", TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(30), cts.Token));
                Until.True(() => acq != null);
                cts.Cancel();
                Assert.Throws<AggregateException>(() => t.Wait(5000));
                ulong tok;
                Assert.IsTrue(releases.TryTake(out tok, 5000));
                Assert.AreEqual(77ul, tok);
            }
        }

        [Test]
        public void ReconnectDelaysAreFullJitterWithinTheDoublingStep()
        {
            // R16: attempt n waits uniformly in [0, 0.1 s * 2^(n-1)], capped at 3.2 s. The
            // timing against a refusing server is the testkit's backoff_schedule and
            // r16_reconnect_jitter; this checks the draw itself.
            using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { "127.0.0.1:1" } }))
            {
                var steps = new[] { 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 3.2, 3.2 };
                for (int n = 1; n <= steps.Length; n++)
                {
                    double lo = double.MaxValue, hi = 0;
                    for (int i = 0; i < 400; i++)
                    {
                        var d = c.BackoffDelay(n).TotalSeconds;
                        Assert.GreaterOrEqual(d, 0, "attempt " + n);
                        Assert.LessOrEqual(d, steps[n - 1] + 1e-9, "attempt " + n);
                        lo = Math.Min(lo, d);
                        hi = Math.Max(hi, d);
                    }
                    // full jitter: the draws cover the whole step, not only its upper half
                    Assert.Less(lo, steps[n - 1] * 0.2, "attempt " + n + ": lowest draw");
                    Assert.Greater(hi, steps[n - 1] * 0.8, "attempt " + n + ": highest draw");
                }
            }
        }

        [Test]
        public void BadInputBeforeAnythingIsSent()
        {
            using (var f = new FakeServer(null))
            using (var c = Client(f))
            {
                var s = TimeSpan.FromSeconds(1);
                Assert.Throws<TicketingArgumentException>(() => c.Acquire("", s, TimeSpan.Zero));
                Assert.Throws<TicketingArgumentException>(() => c.Acquire(new string('a', 251), s, TimeSpan.Zero));
                Assert.Throws<TicketingArgumentException>(() => c.Acquire("a\tb", s, TimeSpan.Zero));
                Assert.Throws<TicketingArgumentException>(() => c.Acquire("k", TimeSpan.Zero, TimeSpan.Zero));
                Assert.Throws<TicketingArgumentException>(() => c.Acquire("k", TimeSpan.FromSeconds(-1), TimeSpan.Zero));
                Assert.Throws<TicketingArgumentException>(() => c.Acquire("k", TimeSpan.FromDays(60), TimeSpan.Zero));
                Assert.Throws<TicketingArgumentException>(() => c.Acquire("k", s, TimeSpan.FromSeconds(-1)));
                Assert.Throws<TicketingArgumentException>(() => c.Release("", 1));
                Assert.Throws<TicketingArgumentException>(() => c.Acquire((string)null, s, TimeSpan.Zero));
                Thread.Sleep(100);
                Assert.AreEqual(0, f.Drain().Count);
            }
        }
    }

    /// <summary>Against the real `ticketing serve` ($TICKETING_BIN).</summary>
    [TestFixture]
    public class IntegrationTests
    {
        RealServer srv;
        TicketingClient c;

        [TestFixtureSetUp]
        public void Start() { srv = new RealServer("cs-" + Guid.NewGuid().ToString("N")); }

        [TestFixtureTearDown]
        public void Stop() { srv.Dispose(); }

        [SetUp]
        public void Open()
        {
            c = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = srv.Token });
            c.Connect();
        }

        [TearDown]
        public void Close() { c.Dispose(); }

        static string Key() { return "cs/" + TestContext.CurrentContext.Test.Name + "/" + Guid.NewGuid().ToString("N").Substring(0, 8); }
        static readonly TimeSpan Ten = TimeSpan.FromSeconds(10);

        [Test]
        public async Task AcquireReleaseTokensIncrease()
        {
            var k = Key();
            var l1 = await c.AcquireAsync(k, Ten, TimeSpan.Zero);
            Assert.Greater(l1.Token, 1ul << 53, "tokens exceed 2^53 and stay exact");
            Assert.That(l1.Remaining.TotalSeconds, Is.InRange(8.5, 10.0));
            await l1.ReleaseAsync();
            Assert.IsTrue(l1.IsReleased);
            await l1.ReleaseAsync(); // idempotent
            using (var l2 = c.Acquire(k, Ten, TimeSpan.Zero)) Assert.Greater(l2.Token, l1.Token);
            Assert.IsNotNull(c.TryAcquire(k, Ten), "using released it");
        }

        [Test]
        public void TryAcquireReturnsNullWhenHeld()
        {
            var k = Key();
            using (c.Acquire(k, Ten, TimeSpan.Zero))
            {
                Assert.IsNull(c.TryAcquire(k, Ten));
                Assert.IsNull(c.TryAcquireAsync(k, Ten).Result);
                Assert.Throws<LockTimeoutException>(() => c.Acquire(k, Ten, TimeSpan.Zero));
            }
        }

        [Test]
        public void FifoHandoffBetweenWaiters()
        {
            var k = Key();
            var holder = c.Acquire(k, TimeSpan.FromSeconds(30), TimeSpan.Zero);
            var order = new ConcurrentQueue<Tuple<int, ulong>>();
            var tasks = new List<Task>();
            for (int i = 0; i < 5; i++)
            {
                int n = i;
                tasks.Add(Task.Run(async () =>
                {
                    var l = await c.AcquireAsync(k, TimeSpan.FromSeconds(30), TimeSpan.FromSeconds(20));
                    order.Enqueue(Tuple.Create(n, l.Token));
                    await l.ReleaseAsync();
                }));
                Thread.Sleep(150); // queued in this order
            }
            holder.Release();
            Assert.IsTrue(Task.WaitAll(tasks.ToArray(), 20000));
            var got = order.ToArray();
            CollectionAssert.AreEqual(new[] { 0, 1, 2, 3, 4 }, got.Select(g => g.Item1).ToArray());
            var toks = new[] { holder.Token }.Concat(got.Select(g => g.Item2)).ToArray();
            CollectionAssert.IsOrdered(toks);
            Assert.AreEqual(toks.Length, toks.Distinct().Count());
        }

        [Test]
        public void LeaseExpiryHandsOffAndLeaseEndingTokenFires()
        {
            var k = Key();
            var l = c.Acquire(k, TimeSpan.FromMilliseconds(400), TimeSpan.Zero);
            Assert.IsTrue(l.LeaseEndingToken.WaitHandle.WaitOne(2000));
            Assert.Greater(l.Remaining, TimeSpan.Zero - TimeSpan.FromMilliseconds(1));
            using (var l2 = c.Acquire(k, TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(10))) Assert.Greater(l2.Token, l.Token);
        }

        [Test]
        public void CancelWithdrawsServerSide()
        {
            var k = Key();
            var holder = c.Acquire(k, TimeSpan.FromSeconds(30), TimeSpan.Zero);
            var cts = new CancellationTokenSource(TimeSpan.FromMilliseconds(300));
            Assert.Throws<OperationCanceledException>(() => c.Acquire(k, TimeSpan.FromSeconds(30), TimeSpan.FromSeconds(20), cts.Token));
            holder.Release();
            // The withdrawal (C) may still be on its way on the other connection when the
            // release lands, and a grant that won that race is released by the client at once:
            // either way the key is free again well inside the withdrawn acquire's 30 s lease.
            using (var next = c.Acquire(k, TimeSpan.FromSeconds(5), TimeSpan.FromSeconds(10)))
                Assert.IsNotNull(next, "the withdrawn waiter kept the lock");
        }

        [Test]
        public void ReleaseFromAnotherClient()
        {
            var k = Key();
            var l = c.Acquire(k, Ten, TimeSpan.Zero);
            using (var other = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = srv.Token }))
                Task.Run(() => other.Release(k, l.Token)).Wait();
            Assert.Throws<NotHolderException>(() => l.Release());
            l.Dispose(); // never throws
        }

        [Test]
        public void HundredInFlightThroughOneClient()
        {
            var tasks = Enumerable.Range(0, 100).Select(i => c.AcquireAsync("cs/many/" + i + "/" + Guid.NewGuid().ToString("N").Substring(0, 6), Ten, TimeSpan.FromSeconds(5))).ToArray();
            Assert.IsTrue(Task.WaitAll(tasks, 20000));
            Assert.AreEqual(100, tasks.Select(t => t.Result.Token).Distinct().Count());
            foreach (var t in tasks) t.Result.Dispose();
        }

        [Test]
        public void SyncCallsDoNotNeedThreadPoolThreads()
        {
            // 64 threads block in the synchronous API at once; every completion comes from the
            // connections' own threads, so none of them waits for the pool.
            var k = Key();
            var holder = c.Acquire(k, TimeSpan.FromSeconds(30), TimeSpan.Zero);
            int done = 0;
            var threads = Enumerable.Range(0, 64).Select(i => new Thread(() =>
            {
                using (c.Acquire(k, TimeSpan.FromSeconds(30), TimeSpan.FromSeconds(30))) { }
                Interlocked.Increment(ref done);
            })).ToList();
            foreach (var t in threads) t.Start();
            Thread.Sleep(300);
            holder.Release();
            foreach (var t in threads) Assert.IsTrue(t.Join(30000));
            Assert.AreEqual(64, done);
        }

        [Test]
        public void ServerLimitsComeBackTypedWithTheirCode()
        {
            var e = Assert.Throws<TicketingArgumentException>(() => c.Acquire(Key(), TimeSpan.FromHours(2), TimeSpan.Zero));
            Assert.AreEqual(Code.BadLease, e.Code);
            e = Assert.Throws<TicketingArgumentException>(() => c.Acquire(Key(), Ten, TimeSpan.FromHours(1)));
            Assert.AreEqual(Code.BadWait, e.Code);
        }

        [Test]
        public void WrongTokenIsAuthenticationError()
        {
            using (var bad = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = "wrong", ConnectTimeout = TimeSpan.FromSeconds(2) }))
                Assert.Throws<TicketingAuthenticationException>(() => bad.Connect());
            using (var none = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
                StringAssert.Contains("requires a token", Assert.Throws<TicketingAuthenticationException>(() => none.Connect()).Message);
        }

        [Test]
        public void DisposedClientThrows()
        {
            var x = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = srv.Token });
            x.Dispose();
            Assert.Throws<ObjectDisposedException>(() => x.Acquire(Key(), Ten, TimeSpan.Zero));
        }
    }

    /// <summary>TLS and mutual TLS, certificates made with the openssl CLI.</summary>
    [TestFixture]
    public class TlsTests
    {
        static string dir;

        static void Openssl(string args)
        {
            var p = Process.Start(new ProcessStartInfo("openssl", args) { UseShellExecute = false, RedirectStandardError = true, RedirectStandardOutput = true, WorkingDirectory = dir });
            var err = p.StandardError.ReadToEnd();
            p.WaitForExit();
            if (p.ExitCode != 0) Assert.Fail("openssl " + args + ": " + err);
        }

        [TestFixtureSetUp]
        public void Pki()
        {
            dir = Path.Combine(Path.GetTempPath(), "ticketing-cs-tls-" + Guid.NewGuid().ToString("N"));
            Directory.CreateDirectory(dir);
            Openssl("req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca");
            File.WriteAllText(Path.Combine(dir, "san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
            Openssl("req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost");
            Openssl("x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile san.ext");
            Openssl("req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=client");
            Openssl("x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 1");
            Openssl("pkcs12 -export -certpbe PBE-SHA1-3DES -keypbe PBE-SHA1-3DES -macalg sha1 -passout pass: -in client.pem -inkey client.key -out client.pfx");
            // ECDSA CA and server certificate, as `ticketing deploy` makes by default (Mono's
            // btls handshakes with an ECDSA leaf, but cannot decode an ECDSA key in the chain).
            Openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ec-ca.key -out ec-ca.pem -days 1 -subj /CN=test-ec-ca");
            Openssl("req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ec.key -out ec.csr -subj /CN=localhost");
            Openssl("x509 -req -in ec.csr -CA ec-ca.pem -CAkey ec-ca.key -CAcreateserial -out ec.pem -days 1 -extfile san.ext");
        }

        [Test]
        public void AnEcdsaServerCertificateIsNamedWithWhatToDo()
        {
            // issue 34 C# 6: Mono cannot use ECDSA certificates; the error says so at once
            // (a TLS error, not a generic "no connection" after the connect timeout).
            using (var srv = new RealServer("tls", "--tls-cert " + F("ec.pem") + " --tls-key " + F("ec.key")))
            using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = "tls", Tls = new TicketingTlsOptions { CaFile = F("ec-ca.pem") }, ConnectTimeout = TimeSpan.FromSeconds(20) }))
            {
                var sw = Stopwatch.StartNew();
                Exception e = null;
                try { c.Connect(); } catch (Exception x) { e = x; }
                if (e == null) Assert.Pass("this runtime takes ECDSA certificates");
                Assert.IsInstanceOf<TicketingTlsException>(e, e.ToString());
                StringAssert.Contains("ECDSA", e.Message);
                StringAssert.Contains("--tls-key-type rsa", e.Message);
                Assert.Less(sw.Elapsed.TotalSeconds, 15, "named at once, not after the connect timeout");
            }
        }

        [TestFixtureTearDown]
        public void Clean() { try { Directory.Delete(dir, true); } catch (Exception) { } }

        static string F(string n) { return Path.Combine(dir, n); }

        [Test]
        public void TlsAndMutualTls()
        {
            using (var srv = new RealServer("tls", "--tls-cert " + F("server.pem") + " --tls-key " + F("server.key")))
            {
                using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = "tls", Tls = new TicketingTlsOptions { CaFile = F("ca.pem") } }))
                {
                    c.Connect(); // a TLS handshake on Mono may take longer than an acquire's wait 0 (R1)
                    c.Acquire("cs/tls", TimeSpan.FromSeconds(5), TimeSpan.Zero).Release();
                }
                using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = "tls", Tls = new TicketingTlsOptions { CaFile = F("client.pem") }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
                    Assert.Throws<TicketingTlsException>(() => c.Connect());
                using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = "tls", Tls = new TicketingTlsOptions { CaFile = F("ca.pem"), ServerName = "wrong.example" }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
                    Assert.Throws<TicketingTlsException>(() => c.Connect(), "a certificate for another name is refused");
            }
            using (var srv = new RealServer("tls", "--tls-cert " + F("server.pem") + " --tls-key " + F("server.key") + " --tls-client-ca " + F("ca.pem")))
            {
                using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = "tls", Tls = new TicketingTlsOptions { CaFile = F("ca.pem"), ClientCertificatePfx = F("client.pfx") } }))
                {
                    c.Connect(); // a TLS handshake on Mono may take longer than an acquire's wait 0 (R1)
                    c.Acquire("cs/mtls", TimeSpan.FromSeconds(5), TimeSpan.Zero).Release();
                }
                using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { srv.Addr }, Token = "tls", Tls = new TicketingTlsOptions { CaFile = F("ca.pem") }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
                    Assert.Throws(Is.InstanceOf<TicketingConnectionException>(), () => c.Connect());
            }
        }
    }
}

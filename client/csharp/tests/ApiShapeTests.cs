using System;
using System.Linq;
using System.Security.Authentication; // beside Ticketing: no CS0104 clash (issue 34 C# 3)
using System.Threading;
using NUnit.Framework;
using Ticketing;

namespace Ticketing.Tests
{
    /// <summary>The shapes of the public API (issue 34 C# 3).</summary>
    [TestFixture]
    public class ApiShapeTests
    {
        [Test]
        public void BothAuthenticationExceptionsAreUsableInOneFile()
        {
            // This file imports System.Security.Authentication and Ticketing: it compiles only
            // because the client's error is TicketingAuthenticationException.
            Exception system = new AuthenticationException("tls");
            Exception ours = new TicketingAuthenticationException("token");
            Assert.IsInstanceOf<SystemException>(system);
            Assert.IsInstanceOf<TicketingException>(ours);
        }

        [Test]
        public void LockTimeoutIsATimeoutException()
        {
            Exception e = new LockTimeoutException("acquire \"k\": timed out");
            Assert.IsInstanceOf<TimeoutException>(e);
        }

        [Test]
        public void LoneSurrogatesAndTokenZeroAreRefusedBeforeSending()
        {
            // R8: "a\uD800" would be sent as "a\uFFFD" (the same key as another string).
            using (var f = new FakeServer(null))
            using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { f.Addr }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
            {
                c.Connect();
                var e = Assert.Throws<TicketingArgumentException>(() => c.Acquire("a\uD800", TimeSpan.FromSeconds(5), TimeSpan.Zero));
                StringAssert.Contains("surrogate", e.Message);
                Assert.AreEqual("key", e.ParamName);
                Assert.Throws<TicketingArgumentException>(() => c.Release("a\uDC00b", 5));
                var t = Assert.Throws<TicketingArgumentException>(() => c.Release("k", 0));
                Assert.AreEqual("token", t.ParamName);
                Assert.Throws<TicketingArgumentException>(() => c.ReleaseAsync("k", 0).GetAwaiter().GetResult());
                Assert.AreEqual(0, f.Drain().Count, "nothing was sent");
            }
        }

        [Test]
        public void AClosedClientFailsAtOnceWithClosed()
        {
            // R7: release and connect on a disposed client: ObjectDisposedException at once
            // (nothing was sent, so not Indeterminate; not a connection error after the timeout).
            using (var f = new FakeServer(null))
            {
                var c = new TicketingClient(new TicketingOptions { Addresses = new[] { f.Addr }, ConnectTimeout = TimeSpan.FromSeconds(5) });
                c.Dispose();
                var sw = System.Diagnostics.Stopwatch.StartNew();
                Assert.Throws<ObjectDisposedException>(() => c.Release("k", 5));
                Assert.Throws<ObjectDisposedException>(() => c.ReleaseAsync("k", 5).GetAwaiter().GetResult());
                Assert.Throws<ObjectDisposedException>(() => c.Connect());
                Assert.Throws<ObjectDisposedException>(() => c.Acquire("k", TimeSpan.FromSeconds(5), TimeSpan.Zero));
                Assert.Less(sw.Elapsed.TotalSeconds, 2);
            }
        }

        [Test]
        public void ATimedTryReturnsNullOnTimeout()
        {
            // R13: "not acquired within the wait" as a value, sync and async.
            using (var f = new FakeServer((s, r) => { if (r.Op == Wire.OpAcquire) FakeServer.Respond(s, Status.Timeout, r); }))
            using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { f.Addr }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
            {
                c.Connect(); // else the 300 ms may go on connecting (R1: the wait bounds connecting too)
                Assert.IsNull(c.TryAcquire("k", TimeSpan.FromSeconds(5), TimeSpan.FromMilliseconds(300)));
                Assert.IsNull(c.TryAcquireAsync("k", TimeSpan.FromSeconds(5), TimeSpan.FromMilliseconds(300)).Result);
                var sent = (uint)(f.Drain().First(r => r.Op == Wire.OpAcquire).Arg & 0xffffffff);
                Assert.That(sent, Is.InRange(1u, 300u), "the wait is sent");
            }
        }

        [Test]
        public void InfiniteTimeSpanIsRefusedByName()
        {
            using (var f = new FakeServer(null))
            using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { f.Addr }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
            {
                var e = Assert.Throws<TicketingArgumentException>(() => c.Acquire("k", TimeSpan.FromSeconds(5), Timeout.InfiniteTimeSpan));
                StringAssert.Contains("InfiniteTimeSpan", e.Message);
                Assert.AreEqual("wait", e.ParamName);
                var l = Assert.Throws<TicketingArgumentException>(() => c.Acquire("k", Timeout.InfiniteTimeSpan, TimeSpan.Zero));
                StringAssert.Contains("InfiniteTimeSpan", l.Message);
                Assert.AreEqual(0, f.Drain().Count, "nothing was sent");
            }
        }
    }
}

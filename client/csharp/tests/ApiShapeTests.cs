using System;
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

using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Linq;
using NUnit.Framework;
using Ticketing;

namespace Ticketing.Tests
{
    /// <summary>Failed background releases are logged, by default to Trace (issue 34 C# 5).</summary>
    [TestFixture]
    public class LoggingTests
    {
        sealed class Capture : ITicketingLogger
        {
            public readonly ConcurrentQueue<Tuple<TicketingLogLevel, string>> Got = new ConcurrentQueue<Tuple<TicketingLogLevel, string>>();
            public bool IsEnabled(TicketingLogLevel level) { return true; }
            public void Log(TicketingLogLevel level, string message, Exception exception) { Got.Enqueue(Tuple.Create(level, message)); }
        }

        sealed class TraceCapture : TraceListener
        {
            public readonly ConcurrentQueue<string> Got = new ConcurrentQueue<string>();
            public override void Write(string message) { Got.Enqueue(message); }
            public override void WriteLine(string message) { Got.Enqueue(message); }
        }

        // Grants every acquire; answers every release N (not the holder): Dispose's release fails.
        static FakeServer NotHolderServer()
        {
            return new FakeServer((s, r) =>
            {
                if (r.Op == Wire.OpAcquire) FakeServer.Respond(s, Status.Granted, r, value: 9);
                else if (r.Op == Wire.OpRelease) FakeServer.Respond(s, Status.NotHolder, r);
            });
        }

        [Test]
        public void AFailedReleaseOnDisposeGoesToTheLogger()
        {
            var cap = new Capture();
            using (var f = NotHolderServer())
            using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { f.Addr }, Logger = cap, ConnectTimeout = TimeSpan.FromSeconds(2) }))
            {
                c.Connect();
                c.Acquire("logged/key", TimeSpan.FromSeconds(5), TimeSpan.Zero).Dispose();
                var w = cap.Got.Where(g => g.Item1 == TicketingLogLevel.Warning && g.Item2.Contains("Dispose failed")).ToList();
                Assert.AreEqual(1, w.Count, string.Join("\n", cap.Got.Select(g => g.Item2)));
                StringAssert.Contains("\"logged/key\"", w[0].Item2);
            }
        }

        [Test]
        public void ByDefaultAFailedReleaseGoesToTrace()
        {
            var tl = new TraceCapture();
            Trace.Listeners.Add(tl);
            try
            {
                using (var f = NotHolderServer())
                using (var c = new TicketingClient(new TicketingOptions { Addresses = new[] { f.Addr }, ConnectTimeout = TimeSpan.FromSeconds(2) }))
                {
                    c.Connect();
                    c.Acquire("traced/key", TimeSpan.FromSeconds(5), TimeSpan.Zero).Dispose();
                }
            }
            finally { Trace.Listeners.Remove(tl); }
            Assert.IsTrue(tl.Got.Any(m => m.Contains("Dispose failed") && m.Contains("\"traced/key\"")), string.Join("\n", tl.Got));
        }
    }
}

using System;
using System.IO;
using System.Linq;
using System.Text;
using NUnit.Framework;
using Ticketing;

namespace Ticketing.Tests
{
    [TestFixture]
    public class WireGoldenTests
    {
        static readonly byte[] SNonce = Enumerable.Range(0, 32).Select(i => (byte)i).ToArray();
        static readonly byte[] CNonce = Enumerable.Range(0x20, 32).Select(i => (byte)i).ToArray();
        static readonly byte[] Secret = Encoding.ASCII.GetBytes("s3cret");

        [Test]
        public void Hello()
        {
            byte[] n;
            Assert.AreEqual(0, Wire.ParseHello(Golden.Read("hello_flags0"), out n));
            CollectionAssert.AreEqual(SNonce, n);
            Assert.AreEqual(1, Wire.ParseHello(Golden.Read("hello_flags1"), out n));
            CollectionAssert.AreEqual(Golden.Read("hello_flags0"), Wire.EncodeHello(0, SNonce));
            CollectionAssert.AreEqual(Golden.Read("hello_flags1"), Wire.EncodeHello(1, SNonce));
        }

        [TestCase("auth_client", 1)]
        [TestCase("auth_admin", 2)]
        [TestCase("auth_peer", 3)]
        public void Auth(string file, int role)
        {
            var proof = Wire.ClientProof(Secret, (byte)role, SNonce, CNonce);
            CollectionAssert.AreEqual(Golden.Read(file), Wire.EncodeAuth((byte)role, CNonce, proof));
        }

        [Test]
        public void AuthWithoutToken()
        {
            CollectionAssert.AreEqual(Golden.Read("auth_client_notoken"), Wire.EncodeAuth(1, CNonce, Wire.ClientProof(new byte[0], 1, SNonce, CNonce)));
        }

        [TestCase("welcome_client", 1, 1024u)]
        [TestCase("welcome_admin", 2, 1024u)]
        [TestCase("welcome_peer", 3, 1u)]
        public void Welcome(string file, int role, uint maxInflight)
        {
            var proof = Wire.ServerProof(Secret, (byte)role, CNonce, SNonce);
            var g = Golden.Read(file);
            CollectionAssert.AreEqual(g, Wire.EncodeWelcome(0x4B, 0, maxInflight, proof));
            Assert.AreEqual(maxInflight, Wire.U32(g, 4));
            Assert.IsTrue(Wire.ProofEqual(proof, g.Skip(8).ToArray()));
            Assert.IsFalse(Wire.ProofEqual(proof, new byte[32]));
        }

        [Test]
        public void WelcomeWithoutToken()
        {
            var g = Golden.Read("welcome_client_notoken");
            CollectionAssert.AreEqual(g, Wire.EncodeWelcome(0x4B, 0, 1024, Wire.ServerProof(new byte[0], 1, CNonce, SNonce)));
        }

        [TestCase("reject_overloaded", 2)]
        [TestCase("reject_shutting_down", 4)]
        [TestCase("reject_bad_handshake", 10)]
        [TestCase("reject_auth_failed", 11)]
        public void Reject(string file, int code)
        {
            CollectionAssert.AreEqual(Golden.Read(file), Wire.EncodeWelcome(0x45, (byte)code, 0, new byte[32]));
        }

        [Test]
        public void Requests()
        {
            var k = Encoding.UTF8.GetBytes("orders/42");
            CollectionAssert.AreEqual(Golden.Read("req_acquire"), Wire.EncodeAcquire(1, k, 30000, 5000));
            CollectionAssert.AreEqual(Golden.Read("req_acquire_try"), Wire.EncodeAcquire(2, Encoding.UTF8.GetBytes("job"), 3600000, 0));
            CollectionAssert.AreEqual(Golden.Read("req_acquire_utf8"), Wire.EncodeAcquire(0xcafebabe, Encoding.UTF8.GetBytes("clé/\U0001F512"), 1000, 900000));
            CollectionAssert.AreEqual(Golden.Read("req_release"), Wire.EncodeRelease(3, k, 0x18bcfe5680000005));
            CollectionAssert.AreEqual(Golden.Read("req_cancel"), Wire.EncodeCancel(4, k, 1));
            CollectionAssert.AreEqual(Golden.Read("req_ping"), Wire.EncodePing(5));
            CollectionAssert.AreEqual(Golden.Read("req_query"), Wire.EncodeQuery(6, Encoding.ASCII.GetBytes("{\"cmd\":\"status\"}")));
        }

        [TestCase("resp_granted", Status.Granted, Code.None, 0, 1u, 0x18bcfe5680000001ul, null)]
        [TestCase("resp_granted_queued", Status.Granted, Code.None, 625, 0xcafebabeu, 0x18bcfe5680000007ul, null)]
        [TestCase("resp_timeout", Status.Timeout, Code.None, 0, 2u, 0ul, null)]
        [TestCase("resp_released", Status.Released, Code.None, 0, 3u, 0ul, null)]
        [TestCase("resp_not_holder", Status.NotHolder, Code.None, 0, 4u, 0ul, null)]
        [TestCase("resp_busy_queue_full", Status.Busy, Code.QueueFull, 0, 7u, 0ul, null)]
        [TestCase("resp_moved", Status.Moved, Code.None, 0, 1u, 13ul, "10.0.0.2:7001")]
        [TestCase("resp_moved_empty", Status.Moved, Code.None, 0, 2u, 0ul, "")]
        [TestCase("resp_error", Status.Error, Code.BadKey, 0, 14u, 22ul, "key is not valid UTF-8")]
        [TestCase("resp_error_empty", Status.Error, Code.NotPermitted, 0, 6u, 0ul, "")]
        [TestCase("resp_pong", Status.Pong, Code.None, 0, 5u, 1700000000123456ul, null)]
        [TestCase("resp_admin", Status.Admin, Code.None, 0, 6u, 28ul, "{\"unix_us\":1700000000123456}")]
        public void Responses(string file, Status st, Code code, int queued, uint id, ulong value, string payload)
        {
            var g = Golden.Read(file);
            Response r;
            Assert.AreEqual(g.Length, Wire.ParseResponse(g, 0, g.Length, out r));
            Assert.AreEqual(st, r.Status);
            Assert.AreEqual(code, r.Code);
            Assert.AreEqual(queued, r.Queued);
            Assert.AreEqual(id, r.ReqId);
            Assert.AreEqual(value, r.Value);
            if (payload == null) Assert.IsNull(r.Payload);
            else CollectionAssert.AreEqual(Encoding.UTF8.GetBytes(payload), r.Payload);
            CollectionAssert.AreEqual(g, Wire.EncodeResponse(st, code, (ushort)queued, id, value, payload == null ? null : Encoding.UTF8.GetBytes(payload)));
        }

        [Test]
        public void BusyAndUnknownCodes()
        {
            var names = new[] { "queue_full", "overloaded", "clock_unhealthy", "shutting_down", "no_quorum" };
            for (int i = 0; i < names.Length; i++)
            {
                var g = Golden.Read("resp_busy_" + names[i]);
                Response r;
                Wire.ParseResponse(g, 0, g.Length, out r);
                Assert.AreEqual(Status.Busy, r.Status);
                Assert.AreEqual((Code)(i + 1), r.Code);
            }
            var u = Golden.Read("resp_unknown_no_quorum");
            Response ur;
            Wire.ParseResponse(u, 0, u.Length, out ur);
            Assert.AreEqual(Status.Unknown, ur.Status);
            Assert.AreEqual(Code.NoQuorum, ur.Code);
        }

        [Test]
        public void StreamOneByteAtATime()
        {
            var files = Directory.GetFiles(Golden.Dir, "resp_*.hex").Select(Path.GetFileNameWithoutExtension).OrderBy(x => x).ToList();
            var all = files.SelectMany(Golden.Read).ToArray();
            var buf = new byte[all.Length];
            int end = 0, off = 0, got = 0;
            foreach (var b in all)
            {
                buf[end++] = b;
                while (true)
                {
                    Response r;
                    int n = Wire.ParseResponse(buf, off, end, out r);
                    if (n == 0) break;
                    off += n;
                    got++;
                }
            }
            Assert.AreEqual(files.Count, got);
            Assert.AreEqual(end, off);
        }

        [Test]
        public void ValidKeys()
        {
            Assert.IsTrue(Wire.ValidKey(Encoding.UTF8.GetBytes("orders/42")));
            Assert.IsTrue(Wire.ValidKey(Encoding.UTF8.GetBytes("clé/\U0001F512")));
            Assert.IsTrue(Wire.ValidKey(new byte[250].Select(_ => (byte)'a').ToArray()));
            Assert.IsFalse(Wire.ValidKey(new byte[0]));
            Assert.IsFalse(Wire.ValidKey(new byte[251].Select(_ => (byte)'a').ToArray()));
            foreach (var bad in new[] { "610a62", "617f62", "61c28562", "ff", "eda080", "c0af", "e080af", "f4908080", "e282" })
                Assert.IsFalse(Wire.ValidKey(Golden.Hex(bad)), bad);
        }
    }

    /// <summary>Randomized decoder test: only WireException, never beyond the input, round trips.</summary>
    [TestFixture]
    public class WireRandomTests
    {
        [Test]
        public void RandomBytes()
        {
            var rng = new Random(1234);
            var statuses = (byte[])Enum.GetValues(typeof(Status)).Cast<Status>().Select(s => (byte)s).ToArray();
            for (int it = 0; it < 20000; it++)
            {
                var b = new byte[rng.Next(0, 64)];
                rng.NextBytes(b);
                if (b.Length > 0 && rng.NextDouble() < 0.7) b[0] = statuses[rng.Next(statuses.Length)];
                if (b.Length > 15 && rng.NextDouble() < 0.5) { for (int i = 8; i < 15; i++) b[i] = 0; }
                Response r;
                int n;
                try { n = Wire.ParseResponse(b, 0, b.Length, out r); }
                catch (WireException) { continue; }
                Assert.LessOrEqual(n, b.Length);
                if (n == 0) continue;
                CollectionAssert.AreEqual(b.Take(n).ToArray(), Wire.EncodeResponse(r.Status, r.Code, r.Queued, r.ReqId, r.Value, r.Payload));
            }
        }

        [Test]
        public void HugePayloadRefusedWithoutBuffering()
        {
            var b = Wire.EncodeResponse(Status.Admin, Code.None, 0, 1, (16ul << 20) + 1, null);
            Response r;
            Assert.Throws<WireException>(() => Wire.ParseResponse(b, 0, b.Length, out r));
            Assert.Throws<WireException>(() => Wire.ParseResponse(Wire.EncodeResponse(Status.Moved, Code.None, 0, 1, 256, null), 0, 16, out r));
            var z = new byte[16];
            z[0] = (byte)'Z';
            Assert.Throws<WireException>(() => Wire.ParseResponse(z, 0, 16, out r));
        }
    }
}

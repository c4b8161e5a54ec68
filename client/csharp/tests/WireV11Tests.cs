using System;
using System.Linq;
using System.Text;
using System.Text.RegularExpressions;
using NUnit.Framework;
using Ticketing;

namespace Ticketing.Tests
{
    /// <summary>Protocol 1.1 (protocol.md §12) through the C# codec: client/wire/testdata/golden/v1_1/.</summary>
    [TestFixture]
    public class WireV11GoldenTests
    {
        static byte[] G(string name) { return Golden.Read("v1_1/" + name); }
        static byte[] B(string s) { return Encoding.UTF8.GetBytes(s); }
        static readonly byte[][] Acct = { B("acct/17"), B("acct/42") };

        [Test]
        public void Requests()
        {
            CollectionAssert.AreEqual(G("req_ping_features"), Wire.EncodePingFeatures(9));
            CollectionAssert.AreEqual(G("req_acquire_set"), Wire.EncodeAcquireSet(0x0a, Acct, 30000, 5000));
            CollectionAssert.AreEqual(G("req_acquire_set_try"), Wire.EncodeAcquireSet(0x10, new[] { B("jobs"), B("tables"), B("queue1") }, 10000, 0));
            CollectionAssert.AreEqual(G("req_release_set"), Wire.EncodeReleaseSet(0x0b, Acct, 0x18bcfe5680000009));
            CollectionAssert.AreEqual(G("req_cancel_set"), Wire.EncodeCancel(0x0c, Acct[0], 0x0a));
            CollectionAssert.AreEqual(G("req_label"), Wire.EncodeLabel(0x0d, B("web-1/4242 go/1.1.0")));
        }

        /// <summary>The frames the client's connections write (Call.WriteFrame), not only the encoders.</summary>
        [Test]
        public void TheClientsFramesMatchTheVectors()
        {
            Action<string, Call> check = (name, c) =>
            {
                var b = new byte[c.FrameLen + 3];
                int n = c.WriteFrame(b, 3);
                Assert.AreEqual(c.FrameLen, n, name);
                CollectionAssert.AreEqual(G(name), b.Skip(3).Take(n).ToArray(), name);
            };
            check("req_acquire_set", new Call { Op = Wire.OpAcquireSet, Key = Acct[0], Keys = Acct, A1 = 30000, A2 = 5000, ReqId = 0x0a });
            check("req_release_set", new Call { Op = Wire.OpReleaseSet, Key = Acct[0], Keys = Acct, TokenArg = 0x18bcfe5680000009, ReqId = 0x0b });
            // a set is withdrawn by its first key (§12.2)
            check("req_cancel_set", new Call { Op = Wire.OpCancel, Key = Acct[0], A1 = 0x0a, ReqId = 0x0c });
        }

        [Test]
        public void SetRequestsDecode()
        {
            var g = G("req_acquire_set_try");
            Request r;
            Assert.AreEqual(g.Length, Wire.ParseRequest(g, 0, g.Length, out r));
            Assert.AreEqual(Wire.OpAcquireSet, r.Op);
            Assert.AreEqual(new[] { "jobs", "tables", "queue1" }, r.Keys.Select(k => Encoding.UTF8.GetString(k)).ToArray());
            Assert.AreEqual(((ulong)10000 << 32) | 0, r.Arg);
            Assert.AreEqual(0, Wire.ParseRequest(g, 0, g.Length - 1, out r), "incomplete body");
            Assert.IsNull(Wire.SplitSetBody(new byte[] { 3, 0x61, 0x62 }, 1), "a key running past the body");
            Assert.IsNull(Wire.SplitSetBody(new byte[] { 1, 0x61, 0x62 }, 1), "a byte left over");
        }

        [Test]
        public void RandomSetBodiesNeverThrow()
        {
            // The S/X body decoder (used on requests by the tests' fakes) on random input: the
            // keys or null, never an exception, never a key past the body.
            var rnd = new Random(34);
            for (int i = 0; i < 20000; i++)
            {
                var body = new byte[rnd.Next(0, 40)];
                rnd.NextBytes(body);
                if (body.Length > 0 && rnd.Next(2) == 0) body[0] = (byte)rnd.Next(1, 8);
                int count = rnd.Next(0, 18);
                var keys = Wire.SplitSetBody(body, count);
                if (keys == null) continue;
                Assert.AreEqual(count, keys.Length);
                Assert.AreEqual(body.Length, keys.Sum(k => 1 + k.Length), "the keys cover the body exactly");
            }
        }

        [Test]
        public void Responses()
        {
            Response r;
            var g = G("resp_pong_features");
            Assert.AreEqual(16, Wire.ParseResponse(g, 0, g.Length, out r));
            Assert.AreEqual(Status.Pong, r.Status);
            Assert.AreEqual(9u, r.ReqId);
            Assert.AreEqual(Features.KeySets | Features.Labels | Features.TlsHint, (Features)r.Queued);
            Assert.AreEqual(1700000000123456ul, r.Value);

            g = G("resp_label_ok");
            Wire.ParseResponse(g, 0, g.Length, out r);
            Assert.AreEqual(Status.Released, r.Status);
            Assert.AreEqual(0x0du, r.ReqId);
            Assert.IsTrue(Wire.Fits(Wire.OpLabel, r.Status));

            g = G("resp_error_bad_keyset");
            Assert.AreEqual(g.Length, Wire.ParseResponse(g, 0, g.Length, out r));
            Assert.AreEqual(Code.BadKeyset, r.Code);
            Assert.AreEqual("duplicate key in set", Encoding.UTF8.GetString(r.Payload));

            g = G("resp_error_bad_label");
            Wire.ParseResponse(g, 0, g.Length, out r);
            Assert.AreEqual(Status.Error, r.Status);
            Assert.AreEqual(Code.BadLabel, r.Code);

            foreach (var st in new[] { Status.Granted, Status.Timeout, Status.Busy, Status.Moved, Status.Unknown })
                Assert.IsTrue(Wire.Fits(Wire.OpAcquireSet, st), "S answered " + st);
            Assert.IsFalse(Wire.Fits(Wire.OpAcquireSet, Status.Released));
            Assert.IsTrue(Wire.Fits(Wire.OpReleaseSet, Status.NotHolder));
            Assert.IsFalse(Wire.Fits(Wire.OpReleaseSet, Status.Granted));
        }

        [Test]
        public void TlsRequiredReject()
        {
            var g = G("reject_tls_required");
            Assert.AreEqual(Wire.WelcomeLen, g.Length);
            Assert.AreEqual((byte)Status.Error, g[0]);
            Assert.AreEqual((byte)Code.TlsRequired, g[1]);
        }

        [Test]
        public void LabelsAreCutAtACharacterBoundary()
        {
            // 63 ASCII bytes then "é" (2 bytes): 65 bytes, cut before the é, never inside it.
            var l = new string('a', 63) + "é";
            var cut = Wire.CutLabel(l);
            Assert.AreEqual(63, cut.Length);
            Assert.IsTrue(Wire.ValidLabel(cut));
            Assert.AreEqual(64, Wire.CutLabel(new string('b', 80)).Length);
            Assert.AreEqual(0, Wire.CutLabel("").Length);
            Assert.IsTrue(Wire.ValidLabel(new byte[0]), "an empty label clears it");
            Assert.IsFalse(Wire.ValidLabel(B("a\nb")), "control character");
            Assert.IsFalse(Wire.ValidLabel(new byte[] { 0x61, 0xff }), "not UTF-8");
        }

        [Test]
        public void TheDefaultLabelNamesHostPidLanguageAndVersion()
        {
            var l = TicketingClient.DefaultLabel();
            StringAssert.IsMatch(@"^\S+/" + System.Diagnostics.Process.GetCurrentProcess().Id + @" csharp/\d+\.\d+\.\d+$", l);
            Assert.AreEqual("billing " + l, TicketingClient.DefaultLabel("billing"));
            Assert.LessOrEqual(Encoding.UTF8.GetByteCount(TicketingClient.DefaultLabel(new string('x', 100))), 64);
        }
    }
}

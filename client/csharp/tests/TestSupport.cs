using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Text.RegularExpressions;
using System.Threading;
using NUnit.Framework;
using Ticketing;

namespace Ticketing.Tests
{
    static class Golden
    {
        public static string Dir
        {
            get { return Path.GetFullPath(Path.Combine(Root, "client", "wire", "testdata", "golden")); }
        }

        public static string Root
        {
            get
            {
                var d = Path.GetDirectoryName(typeof(Golden).Assembly.Location);
                while (d != null && !Directory.Exists(Path.Combine(d, "client", "wire", "testdata", "golden"))) d = Path.GetDirectoryName(d);
                if (d == null) Assert.Fail("repo root (with client/wire/testdata/golden) not found above the test assembly");
                return d;
            }
        }

        public static byte[] Read(string name)
        {
            var hex = new StringBuilder();
            foreach (var line in File.ReadAllLines(Path.Combine(Dir, name + ".hex")))
            {
                var l = line;
                int i = l.IndexOf('#');
                if (i >= 0) l = l.Substring(0, i);
                foreach (var c in l) if (!char.IsWhiteSpace(c)) hex.Append(c);
            }
            var s = hex.ToString();
            var b = new byte[s.Length / 2];
            for (int i = 0; i < b.Length; i++) b[i] = Convert.ToByte(s.Substring(2 * i, 2), 16);
            return b;
        }

        public static byte[] Hex(string s)
        {
            var b = new byte[s.Length / 2];
            for (int i = 0; i < b.Length; i++) b[i] = Convert.ToByte(s.Substring(2 * i, 2), 16);
            return b;
        }
    }

    /// <summary>A real `ticketing serve` on an OS-chosen port.</summary>
    sealed class RealServer : IDisposable
    {
        Process p;
        readonly string dir;
        public string Addr;
        public string Token;

        public static string Bin
        {
            get
            {
                var b = Environment.GetEnvironmentVariable("TICKETING_BIN");
                if (string.IsNullOrEmpty(b)) b = Path.Combine(Golden.Root, "bin", "ticketing");
                if (!File.Exists(b)) Assert.Fail("TICKETING_BIN " + b + " not found: make build at the repo root");
                return b;
            }
        }

        public RealServer(string token = null, string extra = "")
        {
            Token = token;
            dir = Path.Combine(Path.GetTempPath(), "ticketing-cs-" + Guid.NewGuid().ToString("N"));
            Directory.CreateDirectory(dir);
            var args = "serve --listen 127.0.0.1:0 " + extra;
            if (token != null)
            {
                File.WriteAllText(Path.Combine(dir, "token"), token);
                args += " --token-file " + Path.Combine(dir, "token");
            }
            var psi = new ProcessStartInfo(Bin, args) { UseShellExecute = false, RedirectStandardError = true, RedirectStandardOutput = true };
            p = Process.Start(psi);
            var re = new Regex(@"msg=serving addr=(\S+)");
            var sw = Stopwatch.StartNew();
            while (Addr == null)
            {
                var line = p.StandardError.ReadLine();
                if (line == null) Assert.Fail("server exited before serving");
                var m = re.Match(line);
                if (m.Success) Addr = m.Groups[1].Value;
                if (sw.Elapsed > TimeSpan.FromSeconds(15)) Assert.Fail("server did not start");
            }
            var pr = p;
            new Thread(() => { try { while (pr.StandardError.ReadLine() != null) { } } catch (Exception) { } }) { IsBackground = true }.Start();
        }

        public void Dispose()
        {
            if (p != null)
            {
                try { p.Kill(); } catch (Exception) { }
                p.WaitForExit(5000);
                p.Dispose();
                p = null;
            }
            try { Directory.Delete(dir, true); } catch (Exception) { }
        }
    }

    /// <summary>A scripted server speaking the v1 handshake.</summary>
    sealed class FakeServer : IDisposable
    {
        readonly TcpListener ln;
        public readonly string Addr;
        public readonly BlockingCollection<Request> Requests = new BlockingCollection<Request>();
        public readonly BlockingCollection<DateTime> Accepts = new BlockingCollection<DateTime>();
        readonly Action<Stream, Request> handler;
        readonly string token;
        readonly bool prove;
        readonly List<TcpClient> conns = new List<TcpClient>();
        /// <summary>The 1.1 features the fake announces (none: a 1.0 server).</summary>
        public Features Features { get; set; }

        public FakeServer(Action<Stream, Request> handler, string token = "", bool prove = true)
        {
            this.handler = handler;
            this.token = token;
            this.prove = prove;
            ln = new TcpListener(IPAddress.Loopback, 0);
            ln.Start();
            Addr = "127.0.0.1:" + ((IPEndPoint)ln.LocalEndpoint).Port;
            new Thread(AcceptLoop) { IsBackground = true }.Start();
        }

        void AcceptLoop()
        {
            try
            {
                while (true)
                {
                    var c = ln.AcceptTcpClient();
                    Accepts.Add(DateTime.UtcNow);
                    lock (conns) conns.Add(c);
                    new Thread(() => Serve(c)) { IsBackground = true }.Start();
                }
            }
            catch (Exception) { }
        }

        void Serve(TcpClient c)
        {
            try
            {
                var s = c.GetStream();
                var sn = new byte[32];
                new Random().NextBytes(sn);
                var h = Wire.EncodeHello((byte)(token.Length > 0 ? 1 : 0), sn);
                s.Write(h, 0, h.Length);
                var auth = new byte[72];
                int got = 0;
                while (got < 72) { int n = s.Read(auth, got, 72 - got); if (n == 0) return; got += n; }
                var cn = new byte[32];
                Buffer.BlockCopy(auth, 8, cn, 0, 32);
                var proof = prove ? Wire.ServerProof(Encoding.UTF8.GetBytes(token), auth[5], cn, sn) : new byte[32];
                var w = Wire.EncodeWelcome(0x4B, 0, 1024, proof);
                s.Write(w, 0, w.Length);
                var buf = new byte[1 << 16];
                int end = 0;
                while (true)
                {
                    int n = s.Read(buf, end, buf.Length - end);
                    if (n == 0) return;
                    end += n;
                    int off = 0;
                    while (true)
                    {
                        Request r;
                        int m = Wire.ParseRequest(buf, off, end, out r);
                        if (m == 0) break;
                        off += m;
                        if (r.Op == Wire.OpPing && r.Arg == Wire.PingArgFeatures)
                        {
                            // protocol 1.1 feature ping (§12.1): the fake speaks 1.0 unless told
                            var pong = Wire.EncodeResponse(Status.Pong, Code.None, (ushort)Features, r.ReqId, 0, null);
                            lock (s) s.Write(pong, 0, pong.Length);
                            continue;
                        }
                        Requests.Add(r);
                        if (handler != null) handler(s, r);
                    }
                    Buffer.BlockCopy(buf, off, buf, 0, end - off);
                    end -= off;
                }
            }
            catch (Exception) { }
            finally { try { c.Close(); } catch (Exception) { } }
        }

        public static void Respond(Stream s, Status st, Request r, ulong value = 0, Code code = Code.None, byte[] payload = null)
        {
            var b = Wire.EncodeResponse(st, code, 0, r.ReqId, value, payload);
            lock (s) s.Write(b, 0, b.Length);
        }

        public List<Request> Drain()
        {
            var l = new List<Request>();
            Request r;
            while (Requests.TryTake(out r)) l.Add(r);
            return l;
        }

        public void Dispose()
        {
            ln.Stop();
            lock (conns) foreach (var c in conns) try { c.Close(); } catch (Exception) { }
        }
    }

    /// <summary>
    /// The one fake for a queued acquire: it never answers an acquire (as if queued behind a
    /// holder); a C is answered T + O (withdrawn), or, with GrantOnCancel, G + N (the grant won
    /// the race); Silent answers nothing at all (R2); releases are answered O and recorded.
    /// </summary>
    sealed class QueuingFake : IDisposable
    {
        public readonly FakeServer Server;
        public ulong GrantOnCancel;
        public bool Silent;
        readonly BlockingCollection<Request> queued = new BlockingCollection<Request>();
        readonly BlockingCollection<Request> cancels = new BlockingCollection<Request>();
        readonly BlockingCollection<ulong> releases = new BlockingCollection<ulong>();
        Request acq;

        public QueuingFake()
        {
            Server = new FakeServer((s, r) =>
            {
                if (r.Op == Wire.OpAcquire) { acq = r; queued.Add(r); }
                else if (r.Op == Wire.OpCancel)
                {
                    cancels.Add(r);
                    if (Silent) return;
                    if (GrantOnCancel != 0) { FakeServer.Respond(s, Status.Granted, acq, value: GrantOnCancel); FakeServer.Respond(s, Status.NotHolder, r); }
                    else { FakeServer.Respond(s, Status.Timeout, acq); FakeServer.Respond(s, Status.Released, r); }
                }
                else if (r.Op == Wire.OpRelease) { releases.Add(r.Arg); FakeServer.Respond(s, Status.Released, r); }
            });
        }

        /// <summary>The first acquire that reached the fake (waits up to 10 s).</summary>
        public Request Queued()
        {
            Request r;
            if (!queued.TryTake(out r, 10000)) Assert.Fail("no acquire reached the fake within 10 s");
            queued.Add(r);
            return r;
        }

        /// <summary>The target req_id of the first C (waits up to 5 s).</summary>
        public uint CancelTarget()
        {
            Request r;
            if (!cancels.TryTake(out r, 5000)) Assert.Fail("no C within 5 s");
            return (uint)(r.Arg >> 32);
        }

        /// <summary>The token of the first R (waits up to 5 s).</summary>
        public ulong Released()
        {
            ulong t;
            if (!releases.TryTake(out t, 5000)) Assert.Fail("no release within 5 s");
            return t;
        }

        public void Dispose() { Server.Dispose(); }
    }

    static class Until
    {
        public static void True(Func<bool> f, double seconds = 10)
        {
            var sw = Stopwatch.StartNew();
            while (!f())
            {
                if (sw.Elapsed.TotalSeconds > seconds) Assert.Fail("condition not met within " + seconds + "s");
                Thread.Sleep(10);
            }
        }
    }
}

// The C# driver of the client testkit (shared/design/testkit.md): JSON lines on stdin, one
// result line per command on stdout, commands run concurrently on one TicketingClient, through
// the async API (Task-based, CancellationToken for cancel). Public API only.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Ticketing;

static class Driver
{
    static readonly object outLock = new object();
    static readonly ConcurrentDictionary<long, CancellationTokenSource> pending = new ConcurrentDictionary<long, CancellationTokenSource>();
    static volatile TicketingClient client;
    static readonly List<Task> tasks = new List<Task>();

    static int Main()
    {
        string line;
        var stdin = new StreamReader(Console.OpenStandardInput(), new UTF8Encoding(false));
        while ((line = stdin.ReadLine()) != null)
        {
            line = line.Trim();
            if (line.Length == 0) continue;
            Dictionary<string, object> msg;
            try { msg = (Dictionary<string, object>)Json.Parse(line); }
            catch (Exception e) { Console.Error.WriteLine("driver: bad line: " + e.Message); continue; }
            Dispatch(msg);
        }
        // EOF ends the program: scopes still open end (their using releases the lease, R10),
        // every pending command ends, then the client closes.
        var sw = Stopwatch.StartNew();
        foreach (var cts in pending.Values) cts.Cancel();
        Task[] all;
        lock (tasks) all = tasks.ToArray();
        if (!Task.WaitAll(all, 6000)) Console.Error.WriteLine("driver: commands still pending after 6 s; exiting");
        var c = client;
        if (c != null) c.Dispose();
        Console.Error.WriteLine("driver: stdin closed; scopes ended and client closed in " + sw.ElapsedMilliseconds + " ms");
        Console.Error.WriteLine("driver: exit after " + sw.ElapsedMilliseconds + " ms");
        Console.Error.Flush();
        Environment.Exit(0);
        return 0;
    }

    static void Dispatch(Dictionary<string, object> m)
    {
        long id = Convert.ToInt64(m["id"]);
        var cmd = (string)m["cmd"];
        if (cmd == "cancel")
        {
            CancellationTokenSource cts;
            if (pending.TryGetValue(Convert.ToInt64(m["target"]), out cts)) cts.Cancel();
            Reply(id, null);
            return;
        }
        if (cmd == "info")
        {
            Reply(id, new Dictionary<string, object> { { "language", "csharp" }, { "client_version", typeof(TicketingClient).Assembly.GetName().Version.ToString(3) }, { "runtime", "mono " + Environment.Version } });
            return;
        }
        var src = new CancellationTokenSource();
        pending[id] = src;
        lock (tasks) tasks.Add(Task.Run(() => Execute(id, cmd, m, src.Token)));
    }

    static async Task Execute(long id, string cmd, Dictionary<string, object> m, CancellationToken ct)
    {
        try
        {
            Reply(id, await Perform(cmd, m, ct));
        }
        catch (Exception e)
        {
            Error(id, e);
        }
        finally
        {
            CancellationTokenSource x;
            pending.TryRemove(id, out x);
        }
    }

    static TicketingClient Client
    {
        get
        {
            var c = client;
            if (c == null) throw new ObjectDisposedException("TicketingClient", "no client: connect first");
            return c;
        }
    }

    static readonly System.Collections.Concurrent.ConcurrentDictionary<string, Lease> Leases = new System.Collections.Concurrent.ConcurrentDictionary<string, Lease>();

    static async Task<Dictionary<string, object>> Perform(string cmd, Dictionary<string, object> m, CancellationToken ct)
    {
        switch (cmd)
        {
            case "connect": return await Connect(m);
            case "acquire":
                {
                    Lease lease;
                    if (m.ContainsKey("min_remaining_ms") && m["min_remaining_ms"] != null)
                        lease = await Client.AcquireAsync(StrKey(m), Ms(m, "lease_ms"), Ms(m, "wait_ms"), new AcquireOptions { MinRemaining = Ms(m, "min_remaining_ms") }, ct);
                    else if (IsHexKey(m)) lease = await Client.AcquireAsync(Key(m), Ms(m, "lease_ms"), Ms(m, "wait_ms"), ct);
                    else lease = await Client.AcquireAsync(StrKey(m), Ms(m, "lease_ms"), Ms(m, "wait_ms"), ct); // strict UTF-8 (R8)
                    return Granted(lease);
                }
            case "acquire_set":
                return Granted(await Client.AcquireSetAsync(((List<object>)m["keys"]).Cast<string>(), Ms(m, "lease_ms"), Ms(m, "wait_ms"), ct));
            case "release_set":
                await Client.ReleaseSetAsync(((List<object>)m["keys"]).Cast<string>(), ulong.Parse((string)m["token"], CultureInfo.InvariantCulture), ct);
                return null;
            case "lease_ending":
                {
                    Lease lease;
                    if (!Leases.TryGetValue((string)m["token"], out lease)) throw new InvalidOperationException("no lease with that token in this driver");
                    var ending = lease.Ending(Ms(m, "margin_ms"));
                    var fired = new TaskCompletionSource<bool>();
                    using (ending.Register(() => fired.TrySetResult(true)))
                    using (ct.Register(() => fired.TrySetCanceled()))
                        await fired.Task;
                    return new Dictionary<string, object> { { "remaining_ms", (long)Math.Floor(lease.Remaining.TotalMilliseconds) } };
                }
            case "try_acquire":
                {
                    var lease = await Client.TryAcquireAsync(StrKey(m), Ms(m, "lease_ms"), Ms(m, "wait_ms"), ct);
                    if (lease == null) return new Dictionary<string, object> { { "acquired", false } };
                    Leases[lease.Token.ToString(CultureInfo.InvariantCulture)] = lease;
                    return new Dictionary<string, object> { { "acquired", true }, { "token", lease.Token.ToString(CultureInfo.InvariantCulture) } };
                }
            case "release_lease":
                {
                    Lease lease;
                    if (!Leases.TryGetValue((string)m["token"], out lease)) throw new InvalidOperationException("no lease with that token in this driver");
                    bool already = lease.IsReleased;
                    await lease.ReleaseAsync(ct);
                    return new Dictionary<string, object> { { "already", already } };
                }
            case "release":
                if (IsHexKey(m)) await Client.ReleaseAsync(Key(m), ulong.Parse((string)m["token"], CultureInfo.InvariantCulture), ct);
                else await Client.ReleaseAsync(StrKey(m), ulong.Parse((string)m["token"], CultureInfo.InvariantCulture), ct);
                return null;
            case "with_lock":
                {
                    ulong token = 0;
                    bool fail = m.ContainsKey("fail") && m["fail"] is bool && (bool)m["fail"];
                    try
                    {
                        using (var lease = await Client.AcquireAsync(StrKey(m), Ms(m, "lease_ms"), Ms(m, "wait_ms"), ct))
                        {
                            token = lease.Token;
                            // The hold ends early when the program exits (stdin EOF): the scope ends (R10).
                            try { await Task.Delay(Ms(m, "hold_ms"), ct); }
                            catch (OperationCanceledException) { }
                            if (fail) throw new DriverFailure();
                        }
                    }
                    catch (DriverFailure) { }
                    return new Dictionary<string, object> { { "token", token.ToString(CultureInfo.InvariantCulture) } };
                }
            case "close":
                {
                    var c = client;
                    if (c != null) c.Dispose();
                    return null;
                }
            default:
                throw new NotSupportedException("unknown command " + cmd);
        }
    }

    sealed class DriverFailure : Exception { }

    static async Task<Dictionary<string, object>> Connect(Dictionary<string, object> m)
    {
        var old = client;
        if (old != null) old.Dispose();
        var opts = new TicketingOptions
        {
            Addresses = ((List<object>)m["addrs"]).Cast<string>().ToList(),
            Token = m.ContainsKey("token") ? m["token"] as string : null,
            Log = s => Console.Error.WriteLine(s),
        };
        if (m.ContainsKey("label") && m["label"] != null) opts.Label = (string)m["label"];
        if (m.ContainsKey("answer_allowance_ms") && m["answer_allowance_ms"] != null) opts.AnswerAllowance = Ms(m, "answer_allowance_ms");
        if (m.ContainsKey("connect_timeout_ms") && m["connect_timeout_ms"] != null) opts.ConnectTimeout = TimeSpan.FromMilliseconds(Convert.ToDouble(m["connect_timeout_ms"]));
        var tls = m.ContainsKey("tls") ? m["tls"] as Dictionary<string, object> : null;
        if (tls != null)
        {
            opts.Tls = new TicketingTlsOptions { CaFile = tls.ContainsKey("ca") ? tls["ca"] as string : null, ServerName = tls.ContainsKey("server_name") ? tls["server_name"] as string : null };
            var cert = tls.ContainsKey("cert") ? tls["cert"] as string : null;
            var key = tls.ContainsKey("key") ? tls["key"] as string : null;
            if (cert != null && key != null) opts.Tls.ClientCertificatePfx = ToPfx(cert, key);
        }
        var c = new TicketingClient(opts);
        try { await c.ConnectAsync(); }
        catch { c.Dispose(); throw; }
        client = c;
        return null;
    }

    // Mono cannot read a PEM private key: convert cert+key to PKCS#12 with the openssl CLI.
    static string ToPfx(string cert, string key)
    {
        var pfx = Path.Combine(Path.GetTempPath(), "ticketing-cs-" + Guid.NewGuid().ToString("N") + ".pfx");
        var psi = new ProcessStartInfo("openssl", "pkcs12 -export -certpbe PBE-SHA1-3DES -keypbe PBE-SHA1-3DES -macalg sha1 -passout pass: -in \"" + cert + "\" -inkey \"" + key + "\" -out \"" + pfx + "\"") { UseShellExecute = false, RedirectStandardError = true };
        using (var p = Process.Start(psi))
        {
            var err = p.StandardError.ReadToEnd();
            p.WaitForExit();
            if (p.ExitCode != 0) throw new TicketingArgumentException("openssl pkcs12: " + err.Trim(), "tls");
        }
        return pfx;
    }

    static Dictionary<string, object> Granted(Lease lease)
    {
        Leases[lease.Token.ToString(CultureInfo.InvariantCulture)] = lease;
        return new Dictionary<string, object> { { "token", lease.Token.ToString(CultureInfo.InvariantCulture) }, { "deadline_in_ms", (long)Math.Floor(lease.Remaining.TotalMilliseconds) } };
    }

    static bool IsHexKey(Dictionary<string, object> m) { return m.ContainsKey("key_hex") && m["key_hex"] != null; }

    /// <summary>The key as the JSON string it was (lone surrogates kept: the client refuses them, R8).</summary>
    static string StrKey(Dictionary<string, object> m)
    {
        if (IsHexKey(m)) return Encoding.UTF8.GetString(Key(m));
        return (string)m["key"];
    }

    static byte[] Key(Dictionary<string, object> m)
    {
        if (m.ContainsKey("key_hex") && m["key_hex"] != null)
        {
            var h = (string)m["key_hex"];
            var b = new byte[h.Length / 2];
            for (int i = 0; i < b.Length; i++) b[i] = Convert.ToByte(h.Substring(2 * i, 2), 16);
            return b;
        }
        return Encoding.UTF8.GetBytes((string)m["key"]);
    }

    static TimeSpan Ms(Dictionary<string, object> m, string k)
    {
        return m.ContainsKey(k) && m[k] != null ? TimeSpan.FromMilliseconds(Convert.ToDouble(m[k], CultureInfo.InvariantCulture)) : TimeSpan.Zero;
    }

    static void Reply(long id, Dictionary<string, object> fields)
    {
        var d = new Dictionary<string, object> { { "id", id }, { "ok", true } };
        if (fields != null) foreach (var kv in fields) d[kv.Key] = kv.Value;
        Write(d);
    }

    static void Error(long id, Exception e)
    {
        string kind;
        object code = null;
        if (e is OperationCanceledException) kind = "cancelled";
        else if (e is LockTimeoutException) kind = "timeout";
        else if (e is InsufficientLeaseException) kind = "insufficient_lease";
        else if (e is TicketingUnsupportedException || e is NotSupportedException) kind = "unsupported";
        else if (e is LockBusyException) { kind = "busy"; code = (int)((LockBusyException)e).Code; }
        else if (e is IndeterminateException) kind = "indeterminate";
        else if (e is NotHolderException) kind = "not_holder";
        else if (e is TicketingArgumentException) { kind = "invalid"; var c = ((TicketingArgumentException)e).Code; if (c.HasValue) code = (int)c.Value; }
        else if (e is TicketingServerException) { kind = "invalid"; code = (int)((TicketingServerException)e).Code; }
        else if (e is TicketingAuthenticationException) { kind = "auth"; var ac = ((TicketingAuthenticationException)e).Code; if (ac.HasValue) code = (int)ac.Value; }
        else if (e is TicketingTlsException) kind = "tls";
        else if (e is TicketingConnectionException) kind = "connect";
        else if (e is ObjectDisposedException) kind = "closed";
        else if (e is TicketingProtocolException) kind = "protocol";
        else kind = "internal";
        var d = new Dictionary<string, object> { { "id", id }, { "ok", false }, { "error", kind }, { "message", e.GetType().Name + ": " + e.Message } };
        if (code != null) d["code"] = code;
        Write(d);
    }

    static void Write(Dictionary<string, object> d)
    {
        var s = Json.Encode(d);
        lock (outLock)
        {
            Console.Out.Write(s + "\n");
            Console.Out.Flush();
        }
    }
}

/// <summary>A minimal JSON reader/writer for the driver's flat lines (no dependency).</summary>
static class Json
{
    public static object Parse(string s)
    {
        int i = 0;
        var v = Value(s, ref i);
        Ws(s, ref i);
        if (i != s.Length) throw new FormatException("trailing characters");
        return v;
    }

    static void Ws(string s, ref int i) { while (i < s.Length && char.IsWhiteSpace(s[i])) i++; }

    static object Value(string s, ref int i)
    {
        Ws(s, ref i);
        if (i >= s.Length) throw new FormatException("unexpected end");
        char c = s[i];
        if (c == '{')
        {
            var d = new Dictionary<string, object>();
            i++; Ws(s, ref i);
            if (s[i] == '}') { i++; return d; }
            while (true)
            {
                Ws(s, ref i);
                var k = Str(s, ref i);
                Ws(s, ref i);
                if (s[i++] != ':') throw new FormatException("expected :");
                d[k] = Value(s, ref i);
                Ws(s, ref i);
                if (s[i] == ',') { i++; continue; }
                if (s[i] == '}') { i++; return d; }
                throw new FormatException("expected , or }");
            }
        }
        if (c == '[')
        {
            var l = new List<object>();
            i++; Ws(s, ref i);
            if (s[i] == ']') { i++; return l; }
            while (true)
            {
                l.Add(Value(s, ref i));
                Ws(s, ref i);
                if (s[i] == ',') { i++; continue; }
                if (s[i] == ']') { i++; return l; }
                throw new FormatException("expected , or ]");
            }
        }
        if (c == '"') return Str(s, ref i);
        if (s.Substring(i).StartsWith("true")) { i += 4; return true; }
        if (s.Substring(i).StartsWith("false")) { i += 5; return false; }
        if (s.Substring(i).StartsWith("null")) { i += 4; return null; }
        int st = i;
        while (i < s.Length && "+-0123456789.eE".IndexOf(s[i]) >= 0) i++;
        var num = s.Substring(st, i - st);
        long lv;
        if (long.TryParse(num, NumberStyles.Integer, CultureInfo.InvariantCulture, out lv)) return lv;
        return double.Parse(num, CultureInfo.InvariantCulture);
    }

    static string Str(string s, ref int i)
    {
        if (s[i++] != '"') throw new FormatException("expected string");
        var b = new StringBuilder();
        while (s[i] != '"')
        {
            char c = s[i++];
            if (c != '\\') { b.Append(c); continue; }
            char e = s[i++];
            switch (e)
            {
                case 'n': b.Append('\n'); break;
                case 't': b.Append('\t'); break;
                case 'r': b.Append('\r'); break;
                case 'b': b.Append('\b'); break;
                case 'f': b.Append('\f'); break;
                case 'u': b.Append((char)Convert.ToInt32(s.Substring(i, 4), 16)); i += 4; break;
                default: b.Append(e); break;
            }
        }
        i++;
        return b.ToString();
    }

    public static string Encode(object v)
    {
        if (v == null) return "null";
        if (v is bool) return (bool)v ? "true" : "false";
        if (v is string)
        {
            var b = new StringBuilder("\"");
            foreach (char c in (string)v)
            {
                if (c == '"' || c == '\\') b.Append('\\').Append(c);
                else if (c < 0x20) b.AppendFormat("\\u{0:x4}", (int)c);
                else b.Append(c);
            }
            return b.Append('"').ToString();
        }
        var d = v as Dictionary<string, object>;
        if (d != null) return "{" + string.Join(",", d.Select(kv => Encode(kv.Key) + ":" + Encode(kv.Value))) + "}";
        return Convert.ToString(v, CultureInfo.InvariantCulture);
    }
}

// acquire+release pairs through one TicketingClient: 64 concurrent tasks, then 1.
// Env: TICKETING_ADDR, TICKETING_TOKEN (may be empty), BENCH_SECONDS (default 5), BENCH_CALLERS (default 64,1).
using System;
using System.Diagnostics;
using System.Globalization;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Ticketing;

static class Bench
{
    static int Main()
    {
        var addr = Environment.GetEnvironmentVariable("TICKETING_ADDR");
        var token = Environment.GetEnvironmentVariable("TICKETING_TOKEN");
        var secs = double.Parse(Environment.GetEnvironmentVariable("BENCH_SECONDS") ?? "5", CultureInfo.InvariantCulture);
        ThreadPool.SetMinThreads(64, 64);
        using (var c = new TicketingClient(new TicketingOptions { Addresses = addr.Split(','), Token = string.IsNullOrEmpty(token) ? null : token }))
        {
            c.Connect();
            // BENCH_CALLERS: a comma-separated list of caller counts (default 64,1).
            var which = (Environment.GetEnvironmentVariable("BENCH_CALLERS") ?? "64,1").Split(',').Select(int.Parse).ToArray();
            foreach (var callers in which)
            {
                var sw = Stopwatch.StartNew();
                var until = TimeSpan.FromSeconds(secs);
                var counts = new long[callers];
                var tasks = Enumerable.Range(0, callers).Select(i => Task.Run(async () =>
                {
                    var key = "bench/csharp/" + i;
                    while (sw.Elapsed < until)
                    {
                        var l = await c.AcquireAsync(key, TimeSpan.FromSeconds(10), TimeSpan.Zero).ConfigureAwait(false);
                        await l.ReleaseAsync().ConfigureAwait(false);
                        counts[i]++;
                    }
                })).ToArray();
                Task.WaitAll(tasks);
                var took = sw.Elapsed.TotalSeconds;
                long pairs = counts.Sum();
                Console.WriteLine("BENCH {\"lang\":\"csharp\",\"api\":\"async\",\"callers\":" + callers + ",\"pairs\":" + pairs +
                    ",\"seconds\":" + took.ToString("F3", CultureInfo.InvariantCulture) +
                    ",\"pairs_per_sec\":" + (pairs / took).ToString("F1", CultureInfo.InvariantCulture) + "}");
            }
        }
        Console.Out.Flush();
        Environment.Exit(0); // do not wait for background I/O threads winding down
        return 0;
    }
}

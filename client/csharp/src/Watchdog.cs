using System;
using System.Collections.Generic;
using System.Threading;

namespace Ticketing
{
    /// <summary>
    /// Completes the calls of async callers off the connection threads without one thread-pool
    /// work item per answer: answers are queued here and a drainer on the thread pool completes
    /// them one by one (each caller's continuation runs inline in the drainer, never on a reader
    /// or writer thread). A drainer stuck in a caller's code (a continuation that blocks) is
    /// noticed by the watchdog's tick (no progress for 20 ms with work queued), which starts
    /// another, so one blocking caller delays the others by a tick at most and can never
    /// deadlock them. Calls of synchronous callers (Task.Wait) complete inline: no user code
    /// runs in them.
    /// </summary>
    sealed class Completions
    {
        struct Entry
        {
            public Call Call;
            public bool Value;
        }

        readonly object mu = new object();
        readonly Queue<Entry> ready = new Queue<Entry>();
        readonly TicketingClient cl;
        readonly WaitCallback drain;
        volatile int drainers;
        int progress, lastProgress;
        internal Watchdog Watchdog;

        public Completions(TicketingClient cl)
        {
            this.cl = cl;
            drain = _ => Drain();
        }

        public bool Busy { get { return drainers > 0; } }

        /// <summary>Completes c's task with v (the first completion wins).</summary>
        public void Post(Call c, bool v)
        {
            if (c.Sync)
            {
                c.Done.TrySetResult(v);
                return;
            }
            bool start;
            lock (mu)
            {
                ready.Enqueue(new Entry { Call = c, Value = v });
                start = drainers == 0;
                if (start) drainers++;
            }
            if (start) StartDrainer(true);
        }

        void StartDrainer(bool nudge)
        {
            ThreadPool.UnsafeQueueUserWorkItem(drain, null);
            if (nudge && Watchdog != null) Watchdog.Nudge();
        }

        void Drain()
        {
            while (true)
            {
                Entry e;
                lock (mu)
                {
                    if (ready.Count == 0)
                    {
                        drainers--;
                        return;
                    }
                    e = ready.Dequeue();
                    progress++;
                }
                try { e.Call.Done.TrySetResult(e.Value); }
                catch (Exception ex) { cl.Log(TicketingLogLevel.Warning, "ticketing: a continuation failed: " + ex.Message, ex); }
            }
        }

        /// <summary>The watchdog's tick: a drainer that made no progress with work queued gets company.</summary>
        public void CheckProgress()
        {
            bool start = false;
            lock (mu)
            {
                if (ready.Count > 0 && progress == lastProgress)
                {
                    drainers++;
                    start = true;
                }
                lastProgress = progress;
            }
            if (start) StartDrainer(false);
        }
    }

    /// <summary>
    /// Ends the 5 s window of a caller's release attempt, and the answer allowance of an acquire
    /// (R2), without a timer per call: one thread
    /// scans the attempts in flight every 20 ms while there are any and wakes the caller of an
    /// unanswered one whose window is over (TimedOut, the attempt dropped). On the same tick it
    /// lets Completions add a drainer when the running one is stuck in a caller's code.
    /// </summary>
    sealed class Watchdog
    {
        const int TickMs = 20;
        readonly object mu = new object();
        List<Call> incoming = new List<Call>();
        readonly Thread thread;
        bool stopped, idle;

        readonly Completions completions;

        public Watchdog(Completions completions)
        {
            this.completions = completions;
            thread = new Thread(Run) { IsBackground = true, Name = "ticketing watchdog" };
            thread.Start();
        }

        /// <summary>Watches c (sent, owned by its caller) until c.WatchUntil.</summary>
        public void Watch(Call c)
        {
            lock (mu)
            {
                if (stopped) return;
                incoming.Add(c);
                WakeLocked();
            }
        }

        /// <summary>Completions has work: tick until it has none.</summary>
        public void Nudge()
        {
            lock (mu) WakeLocked();
        }

        void WakeLocked()
        {
            if (idle)
            {
                idle = false;
                Monitor.Pulse(mu);
            }
        }

        public void Stop()
        {
            lock (mu) { stopped = true; Monitor.Pulse(mu); }
            thread.Join(1000);
        }

        void Run()
        {
            var active = new List<Call>();
            var spare = new List<Call>();
            while (true)
            {
                lock (mu)
                {
                    if (stopped) return;
                    if (active.Count == 0 && incoming.Count == 0 && !completions.Busy)
                    {
                        idle = true;
                        Monitor.Wait(mu);
                        idle = false;
                        continue;
                    }
                    var t = incoming;
                    incoming = spare;
                    spare = t;
                }
                active.AddRange(spare);
                spare.Clear();
                long now = Clock.Now;
                int keep = 0;
                for (int i = 0; i < active.Count; i++)
                {
                    var c = active[i];
                    if (c.Done.Task.IsCompleted) continue;
                    if (now < c.WatchUntil) { active[keep++] = c; continue; }
                    if (c.AnswerDue)
                    {
                        // R2: an acquire unanswered past its wait + the answer allowance is
                        // withdrawn (C); a late grant is compensated by its connection.
                        if (c.Conn.Abandon(c))
                        {
                            c.TimedOut = true;
                            completions.Post(c, false);
                        }
                        continue;
                    }
                    if (c.Conn.Reown(c, Owner.Caller, Owner.Dropped, null))
                    {
                        c.TimedOut = true;
                        completions.Post(c, false);
                    }
                }
                active.RemoveRange(keep, active.Count - keep);
                completions.CheckProgress();
                lock (mu)
                {
                    if (stopped) return;
                    Monitor.Wait(mu, TickMs);
                }
            }
        }
    }
}

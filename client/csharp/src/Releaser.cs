using System;
using System.Collections.Generic;
using System.Threading;

namespace Ticketing
{
    /// <summary>
    /// Retries releases in the background: compensations (grants that won the race against a
    /// withdrawn acquire) and releases whose caller stopped waiting. A bounded queue; each job
    /// retried until 5 s after it was requested, never longer; attempts pipelined over the
    /// client's connections. Runs on its own thread.
    /// </summary>
    sealed class Releaser
    {
        internal sealed class Job
        {
            public TicketingClient.RelState St;
            public Call Call;
            public long NextAt;
            public bool Done;
        }

        readonly TicketingClient cl;
        readonly object mu = new object();
        readonly List<Job> incoming = new List<Job>();
        readonly List<Call> completed = new List<Call>();
        readonly Thread thread;
        int count;
        bool stopped, poked;

        public Releaser(TicketingClient cl)
        {
            this.cl = cl;
            thread = new Thread(Run) { IsBackground = true, Name = "ticketing releaser" };
            thread.Start();
        }

        public bool Submit(TicketingClient.RelState st)
        {
            lock (mu)
            {
                if (stopped || count >= TicketingClient.ReleaseQueueLen) return false;
                count++;
                incoming.Add(new Job { St = st, NextAt = Clock.Now });
                Monitor.Pulse(mu);
                return true;
            }
        }

        /// <summary>
        /// Takes over a caller's pending release attempt (dropped when the queue is full or the
        /// releaser stopped). False when the attempt was answered or timed out first.
        /// </summary>
        public bool Adopt(Call c, TicketingClient.RelState st)
        {
            var j = new Job { St = st, Call = c };
            lock (mu)
            {
                if (stopped || count >= TicketingClient.ReleaseQueueLen) return c.Conn.Reown(c, Owner.Caller, Owner.Dropped, null);
                if (!c.Conn.Reown(c, Owner.Caller, Owner.Releaser, j)) return false;
                count++;
                incoming.Add(j);
                Monitor.Pulse(mu);
                return true;
            }
        }

        public void Completed(Call c)
        {
            lock (mu) { completed.Add(c); Monitor.Pulse(mu); }
        }

        public void Poke()
        {
            lock (mu) { poked = true; Monitor.Pulse(mu); }
        }

        public void Stop()
        {
            lock (mu) { stopped = true; Monitor.Pulse(mu); }
            thread.Join(1000);
        }

        void Run()
        {
            var active = new List<Job>();
            while (true)
            {
                List<Call> done;
                bool wasPoked;
                lock (mu)
                {
                    if (stopped) return;
                    active.AddRange(incoming);
                    incoming.Clear();
                    done = new List<Call>(completed);
                    completed.Clear();
                    wasPoked = poked;
                    poked = false;
                }
                long now = Clock.Now;
                if (wasPoked)
                    foreach (var j in active)
                        if (j.Call == null && !j.St.Woken) { j.St.Woken = true; j.NextAt = now; }
                foreach (var c in done)
                {
                    var j = c.Job;
                    j.Call = null;
                    if (j.Done) continue;
                    TimeSpan pause;
                    Exception err;
                    if (cl.ReleaseOutcome(j.St, c, out pause, out err)) Finish(j, err);
                    else j.NextAt = now + Math.Min(Clock.Ticks(pause), j.St.Deadline - now - Clock.Ticks(TimeSpan.FromMilliseconds(10)));
                }
                long wakeAt = long.MaxValue;
                foreach (var j in active)
                {
                    if (j.Done) continue;
                    if (now >= j.St.Deadline)
                    {
                        if (j.Call != null) j.Call.Conn.Reown(j.Call, Owner.Releaser, Owner.Dropped, null);
                        Finish(j, new IndeterminateException(j.St.GiveUp(null)));
                        continue;
                    }
                    if (j.Call == null && now >= j.NextAt)
                    {
                        var c = j.St.NewCall(Owner.Releaser, j);
                        j.Call = c;
                        if (cl.TryEnqueue(c) != Enq.Ok) { j.Call = null; j.NextAt = now + Clock.Ticks(TimeSpan.FromMilliseconds(50)); }
                    }
                    long t = j.Call == null && j.NextAt < j.St.Deadline ? j.NextAt : j.St.Deadline;
                    if (t < wakeAt) wakeAt = t;
                }
                active.RemoveAll(x => x.Done);
                lock (mu)
                {
                    if (stopped || incoming.Count > 0 || completed.Count > 0 || poked) continue;
                    if (wakeAt == long.MaxValue) Monitor.Wait(mu);
                    else
                    {
                        var left = Clock.Span(wakeAt - Clock.Now);
                        if (left > TimeSpan.Zero) Monitor.Wait(mu, left);
                    }
                }
            }
        }

        void Finish(Job j, Exception err)
        {
            j.Done = true;
            lock (mu) count--;
            if (err == null) cl.Log(TicketingLogLevel.Debug, "ticketing: released " + j.St.Name + " in the background");
            else cl.Log(TicketingLogLevel.Warning, "ticketing: background release of " + j.St.Name + " failed: " + err.Message, err);
        }
    }
}

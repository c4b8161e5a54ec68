package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ticketing/ticketing/client/wire"
)

// drainGrace is how long the run waits for answers in flight after the stop
// (beyond the acquires' wait, which cancels cut short).
const drainGrace = 10 * time.Second

// Run executes one benchmark against cfg.Addr and returns its report. It
// returns an error when the server cannot be reached or breaks the protocol;
// E answers are counted, not fatal.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: &cfg, res: newResult(&cfg)}
	defer r.close()
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	elapsed, cpu0, cpu1, err := r.measure(ctx)
	if err != nil {
		return nil, err
	}
	acq, gaps := r.merge(elapsed, cpu0, cpu1)
	r.finish(ctx, acq, gaps)
	return r.res, nil
}

// run is one benchmark's state across its phases: prepare (server memory
// and counters, the keys a try storm needs held), connect (every connection
// before the clock starts), measure (the workers, until the duration, the
// op count or ctx ends), merge (the workers' counts into the result) and
// finish (the server's side: memory, counters, releasing held keys).
type run struct {
	cfg     *Config
	res     *Result
	notes   []string
	before  *wire.StatusReply // the server's counters before (nil: none)
	sh      *shared
	held    []uint64 // try: the tokens of the keys held for the storm
	workers []*worker
	conns   []net.Conn
	movedTo string    // the leader an M named (redirects: this node was not, or no longer, the leader)
	lost    *lostConn // the first connection that failed mid-run (nil: none)
}

func newResult(cfg *Config) *Result {
	r := &Result{
		Label: cfg.Label, Addr: cfg.Addr, Mode: cfg.Mode, Conns: cfg.Conns, Pipeline: cfg.Pipeline,
		Keys: cfg.Keys, HotKeys: cfg.HotKeys, Contention: cfg.Contention,
		LeaseMS: cfg.Lease.Milliseconds(), WaitMS: cfg.Wait.Milliseconds(), HoldUS: cfg.Hold.Microseconds(),
		Started:  time.Now().UTC().Format(time.RFC3339),
		Outcomes: map[string]uint64{},
	}
	if cfg.SetSize > 1 {
		r.SetSize = cfg.SetSize
	}
	return r
}

// close closes the connections and gives back the keys a try storm held
// (when the run ended before finish did).
func (r *run) close() {
	for _, c := range r.conns {
		c.Close()
	}
	if r.held != nil {
		_ = releaseKeys(context.Background(), r.cfg, 0, r.held)
	}
}

func (r *run) prepare(ctx context.Context) error {
	cfg := r.cfg
	if cfg.ServerPID > 0 {
		m, err := ReadProcMem(cfg.ServerPID)
		if err != nil {
			return fmt.Errorf("bench: --server-pid: %w", err)
		}
		r.res.ServerPID = cfg.ServerPID
		r.res.ServerMemStart = &m
	}
	if cfg.ServerStats {
		st, err := queryStatus(ctx, cfg)
		if err != nil {
			r.notes = append(r.notes, "no server counters: "+err.Error())
		}
		r.before = st
	}
	r.sh = &shared{cfg: cfg, total: uint64(cfg.slotsTotal())}
	r.sh.leaseArg = wire.AcquireArg(uint32(cfg.Lease.Milliseconds()), uint32(cfg.Wait.Milliseconds()))
	r.sh.fifo = fifoWorkload(cfg)
	if cfg.Mode == ModeFill {
		r.sh.tokens = make([]uint64, cfg.Keys)
	}
	if cfg.Mode == ModeTry {
		// try: hold every key first, for longer than the run.
		lease := max(cfg.Lease, cfg.Warmup+cfg.Duration+time.Minute)
		lease = min(lease, time.Hour)
		held, n, err := holdKeys(ctx, cfg, 0, cfg.Keys, lease)
		if err != nil {
			return fmt.Errorf("bench: holding the keys: %w", err)
		}
		r.held = held
		if n < cfg.Keys {
			r.notes = append(r.notes, fmt.Sprintf("only %d of %d keys could be held for the try storm", n, cfg.Keys))
		}
	}
	return nil
}

// connect opens every connection before the clock starts.
func (r *run) connect(ctx context.Context) error {
	cfg := r.cfg
	r.workers = make([]*worker, cfg.Conns)
	r.conns = make([]net.Conn, 0, cfg.Conns)
	for i := range r.workers {
		nc, maxInflight, err := dialLoad(ctx, cfg, cfg.Addr)
		if err != nil {
			return fmt.Errorf("bench: connection %d: %w", i+1, err)
		}
		if cfg.Wait > 0 && int(maxInflight) < cfg.Pipeline {
			r.notes = append(r.notes, fmt.Sprintf("pipeline %d exceeds the server's max_inflight %d: queued acquires beyond it are answered B OVERLOADED", cfg.Pipeline, maxInflight))
		}
		r.conns = append(r.conns, nc)
		r.workers[i] = newWorker(r.sh, nc, i)
	}
	return nil
}

// measure runs the workers (after the warmup) until the duration, the op
// count or ctx ends, then drains what is in flight (bounded by drainGrace).
func (r *run) measure(ctx context.Context) (elapsed time.Duration, cpu0, cpu1 cpuSample, err error) {
	cfg, sh := r.cfg, r.sh
	if cfg.Warmup == 0 {
		sh.phase.Store(1)
	}
	errc := make(chan error, cfg.Conns)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := w.run(); err != nil {
				errc <- err
				sh.stop.Store(true)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	t0 := time.Now()
	cpu0 = readCPU(cfg)
	close(start)
	if cfg.Warmup > 0 {
		select {
		case <-time.After(cfg.Warmup):
		case <-done:
		case <-ctx.Done():
		}
		if r.before != nil {
			// the server's counters from here: the run's deltas (handoffs/s)
			// cover the measured time, not the warmup too
			if st, err := queryStatus(ctx, cfg); err == nil {
				r.before = st
			}
		}
		sh.phase.Store(1)
		sh.ops.Store(0)
		sh.refused.Store(0)
		sh.errs.Store(0)
		t0 = time.Now()
		cpu0 = readCPU(cfg)
	}
	var timer <-chan time.Time
	if cfg.Ops == 0 && cfg.Mode != ModeFill {
		timer = time.After(cfg.Duration)
	}
	var tick <-chan time.Time
	if cfg.Progress != nil {
		tk := time.NewTicker(cfg.ProgressEvery)
		defer tk.Stop()
		tick = tk.C
	}
	stopping := false
	var runErr error
wait:
	for {
		select {
		case <-done:
			break wait
		case <-timer:
			timer = nil
			sh.stop.Store(true)
		case <-ctx.Done():
			if runErr == nil {
				runErr = ctx.Err()
			}
			sh.stop.Store(true)
		case <-tick:
			r.progress(t0, false)
			continue
		}
		if !stopping && sh.stop.Load() {
			stopping, timer = true, nil
			r.drain(done)
		}
	}
	elapsed = time.Since(t0)
	cpu1 = readCPU(cfg)
	r.progress(t0, true)
	close(errc)
	for err := range errc {
		var lost *lostConn
		switch {
		case errors.As(err, &lost):
			if r.lost == nil {
				r.lost = lost
			}
		case runErr == nil:
			runErr = err
		}
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return 0, cpu0, cpu1, runErr
	}
	return elapsed, cpu0, cpu1, nil
}

// drain wakes readers blocked on queued acquires (so they cancel them) and
// closes every connection if the workers are not done within drainGrace.
func (r *run) drain(done <-chan struct{}) {
	if r.cfg.Wait > 0 {
		for _, c := range r.conns {
			_ = c.SetReadDeadline(time.Now())
		}
	}
	go func() {
		select {
		case <-done:
		case <-time.After(drainGrace):
			for _, c := range r.conns {
				c.Close()
			}
		}
	}()
}

// progress writes the live progress line (final: clears it on a terminal).
func (r *run) progress(t0 time.Time, final bool) {
	cfg, sh := r.cfg, r.sh
	if cfg.Progress == nil {
		return
	}
	el := time.Since(t0).Seconds()
	ops := sh.ops.Load()
	line := fmt.Sprintf("%s: %5.1fs  %13s ops  %11s ops/s  errors %d", cfg.Label, el, group(ops), group(uint64(float64(ops)/max(el, 1e-9))), sh.errs.Load())
	if sh.phase.Load() == 0 {
		line = fmt.Sprintf("%s: warming up", cfg.Label)
	}
	switch {
	case cfg.ProgressTTY && final:
		fmt.Fprintf(cfg.Progress, "\r\033[K")
	case cfg.ProgressTTY:
		fmt.Fprintf(cfg.Progress, "\r\033[K%s", line)
	case !final:
		fmt.Fprintln(cfg.Progress, line)
	}
}

// merge adds the workers' counts and histograms into the result; it
// returns the acquire-latency histogram and the gaps between grants (for
// the fairness check).
func (r *run) merge(elapsed time.Duration, cpu0, cpu1 cpuSample) (acq, gaps *hdrhistogram.Histogram) {
	cfg, res := r.cfg, r.res
	hist := newHist()
	acq, gaps = newHist(), newHist()
	var busy, errCodes [32]uint64
	var status [256]uint64
	for _, w := range r.workers {
		hist.Merge(w.hist)
		acq.Merge(w.acqHist)
		if w.gapHist != nil {
			gaps.Merge(w.gapHist)
		}
		res.Ops += w.ops
		res.Refused += w.refused
		res.Redirects += w.redirects
		if w.movedTo != "" {
			r.movedTo = w.movedTo
		}
		res.Acquires += w.acquires
		res.Releases += w.releases
		res.Errors += w.errs
		res.Writes += w.writes
		for i, n := range w.outcomes {
			status[i] += n
		}
		for i := range busy {
			busy[i] += w.busy[i]
			errCodes[i] += w.errCodes[i]
		}
		if w.cancelO > 0 {
			res.Outcomes["C:O"] += w.cancelO
		}
		if w.cancelN > 0 {
			res.Outcomes["C:N"] += w.cancelN
		}
	}
	for st, n := range status {
		if n == 0 {
			continue
		}
		switch wire.Status(st) {
		case wire.StatusBusy:
			addCodes(res.Outcomes, wire.StatusBusy, &busy)
		case wire.StatusError:
			addCodes(res.Outcomes, wire.StatusError, &errCodes)
		default:
			res.Outcomes[outcomeName(wire.Status(st), 0)] = n
		}
	}
	res.Seconds = elapsed.Seconds()
	res.OpsPerS = float64(res.Ops) / res.Seconds
	if res.Ops > 0 {
		res.BenchCPUSeconds = cpu1.self - cpu0.self
		res.BenchCPUPerOpUS = res.BenchCPUSeconds * 1e6 / float64(res.Ops)
		if cfg.ServerPID > 0 && cpu1.server > 0 {
			res.ServerCPUSeconds = cpu1.server - cpu0.server
			res.ServerCPUPerOpUS = res.ServerCPUSeconds * 1e6 / float64(res.Ops)
		}
	}
	res.Latency = Summarize(hist)
	res.AcquireLatency = Summarize(acq)
	return acq, gaps
}

// finish reads the server's side after the run (memory, counters),
// releases the keys fill or try held, and adds the fairness check.
func (r *run) finish(ctx context.Context, acq, gaps *hdrhistogram.Histogram) {
	cfg, res := r.cfg, r.res
	if cfg.ServerPID > 0 {
		if m, err := ReadProcMem(cfg.ServerPID); err == nil {
			res.ServerMem = &m
			if cfg.Mode == ModeFill && res.ServerMemStart != nil {
				if g := res.Outcomes["G"]; g > 0 {
					res.BytesPerKey = float64(m.RSS-res.ServerMemStart.RSS) / float64(g)
				}
			}
		} else {
			r.notes = append(r.notes, "server memory: "+err.Error())
		}
	}
	if cfg.Mode == ModeFill && !cfg.Keep {
		if err := releaseKeys(ctx, cfg, 0, r.sh.tokens); err != nil {
			r.notes = append(r.notes, "releasing the filled keys: "+err.Error())
		}
	}
	if cfg.Mode == ModeTry {
		_ = releaseKeys(ctx, cfg, 0, r.held)
		r.held = nil
	}
	if r.lost != nil {
		res.Lost = fmt.Sprintf("%s: %v; the figures cover the run until then", r.cfg.Addr, r.lost)
	}
	if res.Redirects > 0 || r.lost != nil {
		res.RedirectedTo = r.movedTo
		r.notes = append(r.notes, r.redirected(ctx))
	}
	if r.before != nil {
		if after, err := queryStatus(ctx, cfg); err == nil {
			res.Server = &ServerDelta{AdminCounters: after.Counters.Since(r.before.Counters), KeysAfter: after.Keys}
			if res.Server.Handoffs > 0 {
				// the handoffs happened before the stop (plus the drain)
				res.HandoffsPerS = float64(res.Server.Handoffs) / res.Seconds
			}
		}
	}
	var overtook uint64
	var queued uint16
	for _, w := range r.workers {
		overtook = max(overtook, w.overtook)
		queued = max(queued, w.maxQueued)
	}
	res.Fairness = fairness(cfg, res, acq, gaps, overtook, queued)
	if len(r.notes) > 0 {
		res.Note = joinNotes(r.notes)
	}
}

// redirected releases, on the leader the M answers named (else the one
// found), the locks whose release met M or a lost connection, and says what
// happened.
// strandedRetry bounds how long redirected keeps looking for a leader to
// release the stranded locks on.
const strandedRetry = 15 * time.Second

func (r *run) redirected(ctx context.Context) string {
	var held []stranded
	for _, w := range r.workers {
		held = append(held, w.stranded...)
	}
	msg := fmt.Sprintf("a connection to %s was lost mid-run", r.cfg.Addr)
	if r.res.Redirects > 0 {
		leader := "no leader known then"
		if r.movedTo != "" {
			leader = "the leader is " + r.movedTo
		}
		msg = fmt.Sprintf("%d requests were redirected (M: %s is not the leader; %s): not counted as ops, and each connection slot that got one stopped", r.res.Redirects, r.cfg.Addr, leader)
	}
	if len(held) == 0 {
		return msg
	}
	// Release them on the leader: the one M named, else the one found. An
	// election may still be running (a follower may still name the dead
	// leader until its election timeout, longer on a loaded machine): retry
	// for as long as it is worth it, up to the lease (after it the locks free
	// themselves) and at most strandedRetry.
	deadline := time.Now().Add(min(max(r.cfg.DialTimeout, strandedRetry), r.cfg.Lease))
	var last error
	for addr := r.movedTo; ; {
		if addr == "" && r.cfg.FindLeader != nil {
			addr, last = r.cfg.FindLeader(ctx)
		}
		if addr != "" {
			if last = releaseStranded(ctx, r.cfg, addr, held); last == nil {
				return msg + fmt.Sprintf("; %d locks whose release was redirected or lost were released on %s", len(held), addr)
			}
		}
		if r.cfg.FindLeader == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		addr = ""
		time.Sleep(200 * time.Millisecond)
	}
	why := ""
	if last != nil {
		why = fmt.Sprintf(" (last try: %v)", last)
	}
	return msg + fmt.Sprintf("; %d locks whose release was redirected or lost stay held until their lease (%v) runs out%s", len(held), r.cfg.Lease, why)
}

type cpuSample struct{ self, server float64 }

// readCPU samples the CPU time used by this process and by the server.
func readCPU(cfg *Config) cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if cfg.ServerPID > 0 {
		s.server, _ = ReadProcCPU(cfg.ServerPID)
	}
	return s
}

func addCodes(m map[string]uint64, st wire.Status, codes *[32]uint64) {
	for c, n := range codes {
		if n > 0 {
			m[outcomeName(st, wire.Code(c))] += n
		}
	}
}

func joinNotes(n []string) string {
	s := n[0]
	for _, x := range n[1:] {
		s += "; " + x
	}
	return s
}

// fairness is the FIFO check of the hot-key workload: every acquire on one
// key, waiting.
func fifoWorkload(cfg *Config) bool {
	return cfg.Mode == ModePairs && cfg.Wait > 0 && (cfg.HotKeys == 1 && cfg.Contention >= 1 || cfg.HotKeys == 0 && cfg.Keys == 1)
}

func fairness(cfg *Config, res *Result, acq, gaps *hdrhistogram.Histogram, overtook uint64, queued uint16) *Fairness {
	if !fifoWorkload(cfg) {
		return nil
	}
	grants := res.Outcomes["G"]
	if grants == 0 {
		return nil
	}
	n := cfg.slotsTotal()
	f := &Fairness{
		Contenders: n,
		QueueLen:   n - 1,
		MeanHoldUS: res.Seconds * 1e6 / float64(grants),
		MaxWaitUS:  float64(acq.Max()) / 1e3,
		P50WaitUS:  float64(acq.ValueAtQuantile(50)) / 1e3,
		P99WaitUS:  float64(acq.ValueAtQuantile(99)) / 1e3,
		P999WaitUS: float64(acq.ValueAtQuantile(99.9)) / 1e3,
	}
	if gaps != nil && gaps.TotalCount() > 0 {
		f.Gaps = &GrantGaps{
			Count:  gaps.TotalCount(),
			P50US:  float64(gaps.ValueAtQuantile(50)) / 1e3,
			P99US:  float64(gaps.ValueAtQuantile(99)) / 1e3,
			P999US: float64(gaps.ValueAtQuantile(99.9)) / 1e3,
			MaxUS:  float64(gaps.Max()) / 1e3,
		}
	}
	f.BoundUS = float64(max(f.QueueLen, 1)) * f.MeanHoldUS
	f.Ratio = f.MaxWaitUS / f.BoundUS
	f.MaxOvertaken = overtook
	f.MaxQueuedMS = int64(queued) * wire.QueuedUnit.Milliseconds()
	// Send order: a waiter has at most the other contenders ahead of it,
	// plus one grant the generator may not have seen yet when it sent.
	f.SendOrder = overtook <= uint64(n)
	f.OK = f.Ratio <= 1
	if res.HandoffsPerS == 0 {
		res.HandoffsPerS = float64(grants) / res.Seconds
	}
	return f
}

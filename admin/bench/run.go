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
	res := &Result{
		Label: cfg.Label, Addr: cfg.Addr, Mode: cfg.Mode, Conns: cfg.Conns, Pipeline: cfg.Pipeline,
		Keys: cfg.Keys, HotKeys: cfg.HotKeys, Contention: cfg.Contention,
		LeaseMS: cfg.Lease.Milliseconds(), WaitMS: cfg.Wait.Milliseconds(), HoldUS: cfg.Hold.Microseconds(),
		Started:  time.Now().UTC().Format(time.RFC3339),
		Outcomes: map[string]uint64{},
	}
	var notes []string
	if cfg.ServerPID > 0 {
		m, err := ReadProcMem(cfg.ServerPID)
		if err != nil {
			return nil, fmt.Errorf("bench: --server-pid: %w", err)
		}
		res.ServerPID = cfg.ServerPID
		res.ServerMemStart = &m
	}
	var before *wire.StatusReply
	if cfg.ServerStats {
		st, err := queryStatus(ctx, &cfg)
		if err != nil {
			notes = append(notes, "no server counters: "+err.Error())
		}
		before = st
	}

	sh := &shared{cfg: &cfg, total: uint64(cfg.slotsTotal())}
	sh.leaseArg = wire.AcquireArg(uint32(cfg.Lease.Milliseconds()), uint32(cfg.Wait.Milliseconds()))
	sh.fifo = fifoWorkload(&cfg)
	if cfg.Mode == ModeFill {
		sh.tokens = make([]uint64, cfg.Keys)
	}

	// try: hold every key first, for longer than the run.
	var held []uint64
	if cfg.Mode == ModeTry {
		lease := max(cfg.Lease, cfg.Warmup+cfg.Duration+time.Minute)
		lease = min(lease, time.Hour)
		var n int
		var err error
		held, n, err = holdKeys(ctx, &cfg, 0, cfg.Keys, lease)
		if err != nil {
			return nil, fmt.Errorf("bench: holding the keys: %w", err)
		}
		if n < cfg.Keys {
			notes = append(notes, fmt.Sprintf("only %d of %d keys could be held for the try storm", n, cfg.Keys))
		}
		defer func() {
			if held != nil {
				_ = releaseKeys(context.Background(), &cfg, 0, held)
			}
		}()
	}

	// connect everything before the clock starts
	workers := make([]*worker, cfg.Conns)
	conns := make([]net.Conn, 0, cfg.Conns)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range workers {
		nc, maxInflight, err := dial(ctx, cfg.Addr, cfg.Role, cfg.Token, cfg.DialTimeout)
		if err != nil {
			return nil, fmt.Errorf("bench: connection %d: %w", i+1, err)
		}
		if cfg.Wait > 0 && int(maxInflight) < cfg.Pipeline {
			notes = append(notes, fmt.Sprintf("pipeline %d exceeds the server's max_inflight %d: queued acquires beyond it are answered B OVERLOADED", cfg.Pipeline, maxInflight))
		}
		conns = append(conns, nc)
		workers[i] = newWorker(sh, nc, i)
	}

	if cfg.Warmup == 0 {
		sh.phase.Store(1)
	}
	errc := make(chan error, cfg.Conns)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, w := range workers {
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
	cpu0 := readCPU(&cfg)
	close(start)
	if cfg.Warmup > 0 {
		select {
		case <-time.After(cfg.Warmup):
		case <-done:
		case <-ctx.Done():
		}
		sh.phase.Store(1)
		sh.ops.Store(0)
		sh.errs.Store(0)
		t0 = time.Now()
		cpu0 = readCPU(&cfg)
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
	progress := func(final bool) {
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
	stopAt := time.Time{}
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
			progress(false)
			continue
		}
		if stopAt.IsZero() && sh.stop.Load() {
			stopAt = time.Now()
			if cfg.Wait > 0 {
				// wake readers blocked on queued acquires so they cancel them
				for _, c := range conns {
					_ = c.SetReadDeadline(time.Now())
				}
			}
			timer = nil
			// bound the drain
			go func() {
				select {
				case <-done:
				case <-time.After(drainGrace):
					for _, c := range conns {
						c.Close()
					}
				}
			}()
		}
	}
	elapsed := time.Since(t0)
	cpu1 := readCPU(&cfg)
	progress(true)
	close(errc)
	for err := range errc {
		if runErr == nil {
			runErr = err
		}
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return nil, runErr
	}

	// merge
	hist, acq := newHist(), newHist()
	var busy, errCodes [32]uint64
	var status [256]uint64
	for _, w := range workers {
		hist.Merge(w.hist)
		acq.Merge(w.acqHist)
		res.Ops += w.ops
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

	if cfg.ServerPID > 0 {
		if m, err := ReadProcMem(cfg.ServerPID); err == nil {
			res.ServerMem = &m
			if cfg.Mode == ModeFill && res.ServerMemStart != nil {
				if g := res.Outcomes["G"]; g > 0 {
					res.BytesPerKey = float64(m.RSS-res.ServerMemStart.RSS) / float64(g)
				}
			}
		} else {
			notes = append(notes, "server memory: "+err.Error())
		}
	}
	if cfg.Mode == ModeFill && !cfg.Keep {
		if err := releaseKeys(ctx, &cfg, 0, sh.tokens); err != nil {
			notes = append(notes, "releasing the filled keys: "+err.Error())
		}
	}
	if cfg.Mode == ModeTry {
		_ = releaseKeys(ctx, &cfg, 0, held)
		held = nil
	}
	if before != nil {
		if after, err := queryStatus(ctx, &cfg); err == nil {
			a, b := after.Counters, before.Counters
			res.Server = &ServerDelta{
				Grants: a.Grants - b.Grants, Handoffs: a.Handoffs - b.Handoffs, Timeouts: a.Timeouts - b.Timeouts,
				Releases: a.Releases - b.Releases, NotHolder: a.NotHolder - b.NotHolder, Expiries: a.Expiries - b.Expiries,
				Busy: a.Busy - b.Busy, Errors: a.Errors - b.Errors, KeysAfter: after.Keys,
			}
			if res.Server.Handoffs > 0 {
				// the handoffs happened before the stop (plus the drain)
				res.HandoffsPerS = float64(res.Server.Handoffs) / res.Seconds
			}
		}
	}
	var overtook uint64
	var queued uint16
	for _, w := range workers {
		overtook = max(overtook, w.overtook)
		queued = max(queued, w.maxQueued)
	}
	res.Fairness = fairness(&cfg, res, acq, overtook, queued)
	if len(notes) > 0 {
		res.Note = joinNotes(notes)
	}
	return res, nil
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

func fairness(cfg *Config, res *Result, acq *hdrhistogram.Histogram, overtook uint64, queued uint16) *Fairness {
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
		P999WaitUS: float64(acq.ValueAtQuantile(99.9)) / 1e3,
	}
	f.BoundUS = float64(max(f.QueueLen, 1)) * f.MeanHoldUS
	f.Ratio = f.MaxWaitUS / f.BoundUS
	f.P99WaitUS = float64(acq.ValueAtQuantile(99)) / 1e3
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

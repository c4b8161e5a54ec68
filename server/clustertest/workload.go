package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
)

// Workload runs concurrent lock clients against a cluster: each worker
// acquires one of a few keys (short lease, a wait budget), writes to the
// fenced resource while it holds the lock, and releases it, recording every
// operation in History.
type Workload struct {
	Addrs   []string // client addresses given to client.Dial
	Clients int      // client.Client instances (default 3)
	Workers int      // goroutines per client (default 2)
	Keys    []string // default k0..k2
	// UniqueKeys makes every acquire use a key of its own (measurements:
	// no worker waits on a key whose lease an indeterminate grant holds).
	UniqueKeys bool
	// Sets is the share of acquires (0–1) that take a key set of 2 distinct
	// keys of Keys at once (protocol.md §12.2), mixed with single keys on
	// the same keys; 0: single keys only.
	Sets  float64
	Lease time.Duration
	Wait  time.Duration
	Hold  time.Duration // longest hold (uniform 0..Hold)
	// Pause between operations of a worker (0 = none).
	Pause time.Duration
	// ErrPause is the pause after a failed acquire other than a timeout
	// (default 20–50 ms, jittered; negative = none).
	ErrPause time.Duration
	// Opts are added to every client's options (after a 3 s dial
	// timeout): tokens, TLS.
	Opts []client.Option

	H *History
	F *Fence

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	cls     []*client.Client
	running atomic.Int64
	errMu   sync.Mutex
	errs    map[string]int
}

// Start dials the clients and starts the workers.
func (w *Workload) Start() error {
	if w.Clients == 0 {
		w.Clients = 3
	}
	if w.Workers == 0 {
		w.Workers = 2
	}
	if len(w.Keys) == 0 {
		w.Keys = []string{"k0", "k1", "k2"}
	}
	if w.Lease == 0 {
		w.Lease = 2 * time.Second
	}
	if w.Wait == 0 {
		w.Wait = 2 * time.Second
	}
	if w.Hold == 0 {
		w.Hold = 20 * time.Millisecond
	}
	if w.H == nil {
		w.H = NewHistory()
	}
	if w.F == nil {
		w.F = NewFence()
	}
	w.errs = map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	for i := range w.Clients {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		cl, err := client.Dial(dctx, w.Addrs, append([]client.Option{client.WithDialTimeout(3 * time.Second)}, w.Opts...)...)
		dcancel()
		if err != nil {
			cancel()
			w.closeClients()
			return fmt.Errorf("workload client %d: %w", i, err)
		}
		w.cls = append(w.cls, cl)
		for j := range w.Workers {
			id := i*w.Workers + j
			w.wg.Add(1)
			w.running.Add(1)
			go func() {
				defer w.wg.Done()
				defer w.running.Add(-1)
				w.worker(ctx, cl, id)
			}()
		}
	}
	return nil
}

// Stop stops the workers after their current operation and closes the
// clients. It reports an error if a worker is still blocked after d (a
// request the cluster never answered).
func (w *Workload) Stop(d time.Duration) error {
	w.cancel()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		w.closeClients()
		return nil
	case <-time.After(d):
		return fmt.Errorf("%d workers still blocked %v after stop: a request was never answered", w.running.Load(), d)
	}
}

// Check runs every history check (History.Violations, with porcupine's
// visualization of a failure written to visualize when not empty) and the
// fenced resource's, and reports each violation as a test error; on
// failure it logs every operation that was neither granted nor released.
func (w *Workload) Check(t testing.TB, visualize string) {
	t.Helper()
	t.Logf("history: %s; fenced writes %d; client errors %v", w.H.Summary(), w.F.Writes(), w.Errors())
	v, notes := w.H.Violations(2*time.Minute, visualize)
	for _, n := range notes {
		t.Log(n)
	}
	for _, x := range v {
		t.Error(x)
	}
	for _, r := range w.F.Rejected() {
		t.Errorf("fenced resource: %s", r)
	}
	if t.Failed() {
		for _, o := range w.H.Ops() {
			if o.Outcome != Granted && o.Outcome != Released {
				t.Logf("  %s", o)
			}
		}
	}
}

func (w *Workload) closeClients() {
	for _, cl := range w.cls {
		cl.Close()
	}
}

// Errors tallies the non-success errors seen (by message class).
func (w *Workload) Errors() map[string]int {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	out := make(map[string]int, len(w.errs))
	for k, v := range w.errs {
		out[k] = v
	}
	return out
}

func (w *Workload) noteErr(op string, err error) {
	var be *client.BusyError
	class := op + ": "
	switch {
	case errors.As(err, &be):
		class += "busy " + be.Code.String()
	case errors.Is(err, client.ErrIndeterminate):
		class += "indeterminate"
	case errors.Is(err, client.ErrTimeout):
		class += "timeout"
	case errors.Is(err, client.ErrNotHolder):
		class += "not-holder"
	case errors.Is(err, client.ErrNoLeader):
		class += "no-leader"
	case errors.Is(err, client.ErrConnect):
		class += "connect"
	default:
		class += err.Error()
	}
	w.errMu.Lock()
	w.errs[class]++
	w.errMu.Unlock()
}

// classify maps an Acquire error to an outcome.
func classifyAcquire(err error) Outcome {
	switch {
	case err == nil:
		return Granted
	case errors.Is(err, client.ErrIndeterminate):
		return Unknown
	case errors.Is(err, client.ErrTimeout):
		return TimedOut
	case errors.Is(err, client.ErrBusy), errors.Is(err, client.ErrNoLeader), errors.Is(err, client.ErrConnect), errors.Is(err, client.ErrClosed):
		return Refused
	}
	// Anything else (a protocol error) changed nothing, but is unexpected:
	// keep it out of the model and count it.
	return Refused
}

func classifyRelease(err error) Outcome {
	switch {
	case err == nil:
		return Released
	case errors.Is(err, client.ErrNotHolder):
		return NotHolder
	}
	return Unknown
}

func (w *Workload) worker(ctx context.Context, cl *client.Client, id int) {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for seq := 0; ctx.Err() == nil; seq++ {
		key := w.Keys[rng.IntN(len(w.Keys))]
		var keys []string // a key set's (nil: one key)
		if w.UniqueKeys {
			key = fmt.Sprintf("u%d-%d", id, seq)
		} else if w.Sets > 0 && len(w.Keys) >= 2 && rng.Float64() < w.Sets {
			i, j := rng.IntN(len(w.Keys)), rng.IntN(len(w.Keys)-1)
			if j >= i {
				j++
			}
			keys = []string{w.Keys[i], w.Keys[j]}
			key = keys[0]
		}
		call := w.H.Now()
		// No ctx on the acquire: cancelling one would make the client
		// release a late grant in the background, outside the history.
		var lock *client.Lock
		var err error
		if keys != nil {
			lock, err = cl.AcquireSet(context.Background(), keys, w.Lease, w.Wait)
		} else {
			lock, err = cl.Acquire(context.Background(), key, w.Lease, w.Wait)
		}
		op := Op{Worker: id, Kind: 'A', Key: key, Keys: keys, Lease: w.Lease, Call: call, Return: w.H.Now(), Outcome: classifyAcquire(err)}
		if err != nil {
			op.Err = err.Error()
			w.noteErr("acquire", err)
			w.H.Add(op)
			switch {
			case op.Outcome == TimedOut || w.ErrPause < 0:
			case w.ErrPause > 0:
				sleepCtx(ctx, w.ErrPause)
			default:
				sleepCtx(ctx, 20*time.Millisecond+time.Duration(rng.IntN(30))*time.Millisecond)
			}
			continue
		}
		op.Token = lock.Token()
		op.Deadline = w.H.At(lock.Deadline())
		w.H.Add(op)
		// Use the lock: fenced writes to every key, only before the
		// deadline (with a margin for rate differences of clocks).
		dl := lock.Deadline().Add(-20 * time.Millisecond)
		for _, k := range op.KeyList() {
			w.F.Write(k, lock.Token(), dl)
		}
		if w.Hold > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(w.Hold) + 1)))
		}
		for _, k := range op.KeyList() {
			w.F.Write(k, lock.Token(), dl)
		}
		rcall := w.H.Now()
		var rerr error
		if keys != nil {
			rerr = cl.ReleaseSet(context.Background(), keys, lock.Token())
		} else {
			rerr = cl.Release(context.Background(), key, lock.Token())
		}
		rop := Op{Worker: id, Kind: 'R', Key: key, Keys: keys, Token: lock.Token(), Call: rcall, Return: w.H.Now(), Outcome: classifyRelease(rerr)}
		if rerr != nil {
			rop.Err = rerr.Error()
			w.noteErr("release", rerr)
		}
		w.H.Add(rop)
		if w.Pause > 0 {
			sleepCtx(ctx, w.Pause)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

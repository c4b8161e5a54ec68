package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// Tests against the real single-node server (package server), in process.

func startServer(t testing.TB, mod func(*server.Config)) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	if mod != nil {
		mod(&cfg)
	}
	var srv *server.Server
	var err error
	// A restart on the same port may find it briefly busy.
	eventually(t, "the server to listen on "+cfg.Listen, func() bool {
		srv, err = server.Start(context.Background(), cfg)
		return err == nil
	})
	t.Cleanup(func() { srv.Close() })
	return srv
}

// adminOf dials addr with role admin (the test servers have no tokens).
func adminOf(t testing.TB, addr string) *Client {
	t.Helper()
	return dial(t, []string{addr}, WithAdminToken(""))
}

func locksOf(t testing.TB, adm *Client, prefix string) map[string]wire.LockEntry {
	t.Helper()
	var r wire.LocksReply
	if err := adm.Admin(context.Background(), wire.CmdLocks, map[string]any{"prefix": prefix, "limit": wire.LocksMaxLimit}, &r); err != nil {
		t.Fatalf("admin locks: %v", err)
	}
	m := map[string]wire.LockEntry{}
	for _, e := range r.Locks {
		m[e.Key] = e
	}
	return m
}

func statusOf(t testing.TB, adm *Client) wire.StatusReply {
	t.Helper()
	var r wire.StatusReply
	if err := adm.Admin(context.Background(), wire.CmdStatus, nil, &r); err != nil {
		t.Fatalf("admin status: %v", err)
	}
	return r
}

func TestRealAcquireRelease(t *testing.T) {
	srv := startServer(t, nil)
	cl := dial(t, []string{srv.Addr()})
	ctx := context.Background()
	l, err := cl.Acquire(ctx, "real/k", time.Minute, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.TryAcquire(ctx, "real/k", time.Minute); !errors.Is(err, ErrTimeout) {
		t.Fatalf("second acquire: %v, want ErrTimeout", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// R6: releasing the Lock again is a no-op; Client.Release of the token
	// (a lock not held) answers not-holder.
	if err := l.Release(ctx); err != nil || !l.Released() {
		t.Fatalf("second release: %v (released %v), want nil", err, l.Released())
	}
	if err := cl.Release(ctx, "real/k", l.Token()); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("release of the released token: %v, want ErrNotHolder", err)
	}
	l2, err := cl.TryAcquire(ctx, "real/k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("tokens %d then %d: not increasing", l.Token(), l2.Token())
	}
	if err := cl.Release(ctx, "real/k", l2.Token()); err != nil {
		t.Fatal(err)
	}
	at, rtt, err := cl.Ping(ctx)
	if err != nil || time.Since(at).Abs() > time.Minute || rtt <= 0 {
		t.Fatalf("Ping = %v %v %v", at, rtt, err)
	}
	// A client-role connection may not run admin queries.
	var pe *ProtocolError
	if err := cl.Admin(ctx, wire.CmdStatus, nil, nil); !errors.As(err, &pe) || pe.Code != wire.CodeNotPermitted {
		t.Errorf("admin as client: %v, want NOT_PERMITTED", err)
	}
}

func TestRealTokens(t *testing.T) {
	srv := startServer(t, func(c *server.Config) { c.ClientToken, c.AdminToken = "c-secret", "a-secret" })
	if _, err := Dial(context.Background(), []string{srv.Addr()}); !errors.Is(err, ErrAuth) {
		t.Fatalf("no token: %v, want ErrAuth", err)
	}
	if _, err := Dial(context.Background(), []string{srv.Addr()}, WithToken("wrong")); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong token: %v, want ErrAuth", err)
	}
	cl := dial(t, []string{srv.Addr()}, WithToken("c-secret"))
	if _, err := cl.TryAcquire(context.Background(), "k", time.Second); err != nil {
		t.Fatal(err)
	}
	adm := dial(t, []string{srv.Addr()}, WithAdminToken("a-secret"))
	statusOf(t, adm)
	// A client that has a token refuses a server that cannot prove it.
	open := startServer(t, nil)
	if _, err := Dial(context.Background(), []string{open.Addr()}, WithToken("c-secret")); !errors.Is(err, ErrAuth) {
		t.Fatalf("server without the token: %v, want ErrAuth", err)
	}
}

// Written, then the connection is cut before the answer: ErrIndeterminate,
// although the server did grant the lock — which is why the caller must
// not assume either way.
func TestRealCutAfterWrittenIsIndeterminate(t *testing.T) {
	srv := startServer(t, nil)
	adm := adminOf(t, srv.Addr())
	p := newProxy(t, srv.Addr())
	cl := dial(t, []string{p.addr})
	waitUp(t, cl, 2)
	p.setHold(true)
	ch := goAcquire(cl, context.Background(), "cut/after", time.Minute, 0)
	eventually(t, "the grant on the server", func() bool { return locksOf(t, adm, "cut/")["cut/after"].Token != 0 })
	p.cut()
	r := recv(t, ch)
	if !errors.Is(r.err, ErrIndeterminate) || r.l != nil {
		t.Fatalf("got %v, %v; want ErrIndeterminate and no lock", r.l, r.err)
	}
}

// Cut before the bytes were written: retried on the other connection,
// transparently; the server executed exactly one acquire.
func TestRealCutBeforeWrittenIsTransparent(t *testing.T) {
	srv := startServer(t, nil)
	adm := adminOf(t, srv.Addr())
	gate := make(chan struct{})
	var blocking atomic.Bool
	blocking.Store(true)
	cl := dial(t, []string{srv.Addr()}, withBeforeWrite(func(*conn) {
		if blocking.Load() {
			<-gate
		}
	}))
	waitUp(t, cl, 2)
	before := statusOf(t, adm).Counters.Grants
	ch := goAcquire(cl, context.Background(), "cut/before", time.Minute, time.Second)
	var victim *conn
	eventually(t, "the acquire queued for writing", func() bool {
		for _, cn := range cl.pool.Load().conns {
			cn.mu.Lock()
			queued := len(cn.wbuf) > 0
			cn.mu.Unlock()
			if queued {
				victim = cn
				return true
			}
		}
		return false
	})
	victim.mu.Lock()
	nc := victim.nc
	victim.mu.Unlock()
	victim.kill(nc, errors.New("cut by the test"))
	blocking.Store(false)
	close(gate)
	r := recv(t, ch)
	if r.err != nil {
		t.Fatalf("acquire: %v", r.err)
	}
	if e := locksOf(t, adm, "cut/")["cut/before"]; e.Token != r.l.Token() {
		t.Errorf("server holder token %d, lock token %d", e.Token, r.l.Token())
	}
	if g := statusOf(t, adm).Counters.Grants - before; g != 1 {
		t.Errorf("%d grants on the server, want 1", g)
	}
}

// B → ErrBusy at once, and no second request on the wire.
func TestRealBusyIsNotRetried(t *testing.T) {
	srv := startServer(t, func(c *server.Config) { c.MaxWaitersPerKey = 1 })
	adm := adminOf(t, srv.Addr())
	p := newProxy(t, srv.Addr())
	cl := dial(t, []string{p.addr})
	waitUp(t, cl, 2)
	ctx := context.Background()
	holder, err := adm.TryAcquire(ctx, "busy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w1 := goAcquire(cl, ctx, "busy", time.Minute, time.Minute)
	eventually(t, "one waiter", func() bool { return locksOf(t, adm, "busy")["busy"].QueueDepth == 1 })
	base := p.c2s.Load()
	_, err = cl.Acquire(ctx, "busy", time.Minute, time.Minute)
	var be *BusyError
	if !errors.As(err, &be) || be.Code != wire.CodeQueueFull || !errors.Is(err, ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy QUEUE_FULL", err)
	}
	one := int64(wire.HeaderLen + len("busy"))
	eventually(t, "the busy acquire's frame through the proxy", func() bool { return p.c2s.Load()-base >= one })
	never(t, 200*time.Millisecond, "a second request after B (more than one frame sent)", func() bool { return p.c2s.Load()-base != one })
	holder.Release(ctx)
	r := recv(t, w1)
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.l.Release(ctx)
}

// Cancel while queued: the waiter leaves the server's queue at once.
func TestRealCancelWhileQueuedDropsTheWaiter(t *testing.T) {
	srv := startServer(t, nil)
	adm := adminOf(t, srv.Addr())
	cl := dial(t, []string{srv.Addr()})
	ctx := context.Background()
	holder, err := adm.TryAcquire(ctx, "q", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch := goAcquire(cl, wctx, "q", time.Minute, time.Minute)
	eventually(t, "the waiter queued", func() bool { return locksOf(t, adm, "q")["q"].QueueDepth == 1 })
	cancel()
	if r := recv(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled", r.err)
	}
	start := time.Now()
	eventually(t, "queue depth 0", func() bool { return locksOf(t, adm, "q")["q"].QueueDepth == 0 })
	if d := time.Since(start); d > time.Second {
		t.Errorf("the waiter left the queue only after %v", d)
	}
	eventually(t, "the client idle", func() bool { return idle(cl) })
	holder.Release(ctx)
}

// 5,000 cancellations of queued acquires do not use up max_inflight (16
// here): the server's waiter count returns to 0, every cancel withdrew its
// waiter, and a full burst of queued acquires still reaches the server.
func TestRealManyCancellationsKeepMaxInflight(t *testing.T) {
	const goroutines, perG, maxInflight = 50, 100, 16
	srv := startServer(t, func(c *server.Config) { c.MaxInflight = maxInflight })
	adm := adminOf(t, srv.Addr())
	ctx := context.Background()
	for g := range goroutines {
		if _, err := adm.TryAcquire(ctx, fmt.Sprint("c/", g), 10*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// Cancel each acquire right after it is queued on a connection, so
	// every one is withdrawn with C.
	var cancels sync.Map
	cl := dial(t, []string{srv.Addr()}, withAfterEnqueue(func(c *call) {
		if f, ok := cancels.Load(c.key); ok && c.op == wire.OpAcquire {
			f.(context.CancelFunc)()
		}
	}))
	before := statusOf(t, adm).Counters
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("c/", g)
			for range perG {
				cctx, cancel := context.WithCancel(ctx)
				cancels.Store(key, cancel)
				_, err := cl.Acquire(cctx, key, time.Minute, time.Minute)
				cancel()
				if !errors.Is(err, context.Canceled) {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("acquire: %v", err)
	}
	eventually(t, "the client idle", func() bool { return idle(cl) })
	eventually(t, "5000 cancels on the server, no waiter left", func() bool {
		s := statusOf(t, adm)
		return s.Waiters == 0 && s.Counters.Cancels-before.Cancels == goroutines*perG
	})
	// All 2 × 16 slots are free: 32 queued acquires all reach the server.
	cancels.Range(func(k, _ any) bool { cancels.Delete(k); return true })
	var chans []chan result
	for i := range 2 * maxInflight {
		chans = append(chans, goAcquire(cl, ctx, fmt.Sprint("c/", i%goroutines), time.Minute, 2*time.Second))
	}
	eventually(t, "32 waiters on the server", func() bool { return statusOf(t, adm).Waiters == 2*maxInflight })
	for _, ch := range chans {
		if r := recv(t, ch); !errors.Is(r.err, ErrTimeout) {
			t.Errorf("err = %v, want ErrTimeout", r.err)
		}
	}
	if b := statusOf(t, adm).Counters.Busy - before.Busy; b != 0 {
		t.Errorf("%d busy answers, want 0", b)
	}
}

// The cancel loses the race: the grant is already on its way (held by the
// proxy) when the caller gives up; the client releases the granted lock.
func TestRealCancelLosingTheRaceIsCompensated(t *testing.T) {
	srv := startServer(t, nil)
	adm := adminOf(t, srv.Addr())
	p := newProxy(t, srv.Addr())
	cl := dial(t, []string{p.addr})
	waitUp(t, cl, 2)
	ctx := context.Background()
	holder, err := adm.TryAcquire(ctx, "race", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch := goAcquire(cl, wctx, "race", time.Minute, time.Minute)
	eventually(t, "the waiter queued", func() bool { return locksOf(t, adm, "race")["race"].QueueDepth == 1 })
	base := p.c2s.Load()
	p.setHold(true)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var granted uint64
	eventually(t, "the handoff", func() bool {
		e := locksOf(t, adm, "race")["race"]
		granted = e.Token
		return e.Token != 0 && e.Token != holder.Token() && e.QueueDepth == 0
	})
	cancel()
	if r := recv(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled", r.err)
	}
	eventually(t, "the C forwarded", func() bool { return p.c2s.Load() >= base+int64(wire.HeaderLen+len("race")) })
	p.setHold(false) // the client now sees G, then N for its C
	eventually(t, "the grant released", func() bool {
		_, held := locksOf(t, adm, "race")["race"]
		return !held
	})
	if n := cl.stats.compensations.Load(); n != 1 {
		t.Errorf("%d compensations, want 1 (token %d)", n, granted)
	}
}

// The server restarts: the client reconnects on the backoff schedule and
// serves new acquires.
func TestRealServerRestart(t *testing.T) {
	var rec recorder
	srv := startServer(t, nil)
	addr := srv.Addr()
	cl := dial(t, []string{addr}, withReconnectHook(rec.hook))
	waitUp(t, cl, 2)
	srv.Close()
	eventually(t, "connections down", func() bool { return upCount(cl) == 0 })
	eventually(t, "3 reconnect attempts", func() bool { return rec.maxAttempt() >= 3 })
	startServer(t, func(c *server.Config) { c.Listen = addr })
	waitUp(t, cl, 2)
	if _, err := cl.TryAcquire(context.Background(), "after-restart", time.Second); err != nil {
		t.Fatalf("acquire after restart: %v", err)
	}
	for _, recs := range rec.byConn() {
		for i, x := range recs {
			step := backoffStep(backoffBase, backoffCap, x.attempt)
			if x.attempt != i+1 || x.delay < 0 || x.delay > step {
				t.Errorf("attempt %d (#%d): delay %v, want in [0, %v]", x.attempt, i+1, x.delay, step)
			}
			if i > 0 {
				if gap := x.at.Sub(recs[i-1].at); gap < recs[i-1].delay || gap > recs[i-1].delay+time.Second {
					t.Errorf("attempt %d came %v after the previous, which chose %v", x.attempt, gap, recs[i-1].delay)
				}
			}
		}
	}
}

// Release during an outage: retried, then given up by 5 s.
func TestRealReleaseDuringOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 5 s")
	}
	srv := startServer(t, nil)
	cl := dial(t, []string{srv.Addr()})
	l, err := cl.TryAcquire(context.Background(), "outage", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	eventually(t, "connections down", func() bool { return upCount(cl) == 0 })
	start := time.Now()
	err = l.Release(context.Background())
	if d := time.Since(start); !errors.Is(err, ErrIndeterminate) || d < 4*time.Second || d > 6*time.Second {
		t.Fatalf("Release = %v after %v; want ErrIndeterminate after about 5s", err, d)
	}
}

// Granted after waiting 3 s behind a holder, with a 2 s lease: Deadline
// is in the future, within 100 ms of the server's lease end, never after.
func TestRealDeadlineAfterWaitingLongerThanTheLease(t *testing.T) {
	srv := startServer(t, nil)
	adm := adminOf(t, srv.Addr())
	cl := dial(t, []string{srv.Addr()})
	ctx := context.Background()
	if _, err := adm.TryAcquire(ctx, "dl", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := cl.Acquire(ctx, "dl", 2*time.Second, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	tq0 := time.Now()
	e := locksOf(t, adm, "dl")["dl"]
	tq1 := time.Now()
	if e.Token != l.Token() {
		t.Fatalf("server holder %d, lock %d", e.Token, l.Token())
	}
	if waited := granted.Sub(start); waited < 2900*time.Millisecond {
		t.Fatalf("granted after %v, want about 3s", waited)
	}
	if !l.Deadline().After(granted) {
		t.Errorf("deadline %v is not in the future at the grant (%v)", l.Deadline(), granted)
	}
	remaining := time.Duration(e.LeaseRemainingMS) * time.Millisecond
	endLo, endHi := tq0.Add(remaining), tq1.Add(remaining+time.Millisecond) // remaining is rounded down
	if l.Deadline().After(endHi) {
		t.Errorf("deadline %v is after the server's lease end (≤ %v)", l.Deadline(), endHi)
	}
	if l.Deadline().Before(endLo.Add(-100 * time.Millisecond)) {
		t.Errorf("deadline %v is more than 100ms before the server's lease end (≥ %v)", l.Deadline(), endLo)
	}
	t.Logf("deadline %v before the server's lease end", endLo.Sub(l.Deadline()))
	l.Release(ctx)
}

// Stress: goroutines × cycles acquire/release over 50 keys through one
// Client, with a fenced resource that records every holder interval and
// token. Full size (1,000 × 100) unless -short (100 × 20). Full size:
// go test -run TestRealStress ./client/
func TestRealStress(t *testing.T) {
	goroutines, cycles := 1000, 100
	if testing.Short() {
		goroutines, cycles = 100, 20
	}
	const keys = 50
	srv := startServer(t, nil)
	cl := dial(t, []string{srv.Addr()})
	res := newFencedResource(keys)
	var wg sync.WaitGroup
	var timeouts atomic.Int64
	errc := make(chan error, goroutines)
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range cycles {
				k := (g*7 + i) % keys
				key := fmt.Sprint("stress/", k)
				l, err := cl.Acquire(ctx, key, time.Minute, time.Minute)
				if errors.Is(err, ErrTimeout) {
					timeouts.Add(1)
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				if err := res.use(k, g, l); err != nil {
					errc <- err
					return
				}
				if err := l.Release(ctx); err != nil {
					errc <- fmt.Errorf("release %s: %w", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	total := 0
	for k := range res.keys {
		total += len(res.keys[k].intervals)
		if err := res.keys[k].check(); err != nil {
			t.Errorf("key %d: %v", k, err)
		}
	}
	t.Logf("%d × %d cycles over %d keys: %d holds, %d timeouts, %v", goroutines, cycles, keys, total, timeouts.Load(), time.Since(start))
	if total+int(timeouts.Load()) != goroutines*cycles {
		t.Errorf("%d holds + %d timeouts, want %d", total, timeouts.Load(), goroutines*cycles)
	}
}

// fencedResource stands for what a lock protects: it checks the fencing
// rule and records every holder interval.
type fencedResource struct {
	keys []fencedKey
}

type fencedKey struct {
	mu        sync.Mutex
	holder    int // goroutine+1, 0 when free
	highToken uint64
	intervals []interval
}

type interval struct {
	token      uint64
	start, end time.Time
}

func newFencedResource(n int) *fencedResource { return &fencedResource{keys: make([]fencedKey, n)} }

func (r *fencedResource) use(k, g int, l *Lock) error {
	fk := &r.keys[k]
	fk.mu.Lock()
	if time.Now().After(l.Deadline()) {
		fk.mu.Unlock()
		return fmt.Errorf("key %d: lock used after its deadline", k)
	}
	if fk.holder != 0 {
		fk.mu.Unlock()
		return fmt.Errorf("key %d: goroutine %d entered while %d holds it", k, g, fk.holder-1)
	}
	if l.Token() <= fk.highToken {
		fk.mu.Unlock()
		return fmt.Errorf("key %d: token %d not above %d", k, l.Token(), fk.highToken)
	}
	fk.holder, fk.highToken = g+1, l.Token()
	iv := interval{token: l.Token(), start: time.Now()}
	fk.mu.Unlock()

	fk.mu.Lock()
	iv.end = time.Now()
	fk.holder = 0
	fk.intervals = append(fk.intervals, iv)
	fk.mu.Unlock()
	return nil
}

// check verifies, over the recorded intervals, that holders never overlap
// and tokens strictly increase.
func (fk *fencedKey) check() error {
	for i := 1; i < len(fk.intervals); i++ {
		a, b := fk.intervals[i-1], fk.intervals[i]
		if b.token <= a.token {
			return fmt.Errorf("token %d after %d", b.token, a.token)
		}
		if b.start.Before(a.end) {
			return fmt.Errorf("interval of token %d starts before the one of %d ends", b.token, a.token)
		}
	}
	return nil
}

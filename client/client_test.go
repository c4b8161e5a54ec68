package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Behaviour tests against the scripted fake server (fake_test.go). The
// numbers refer to the behaviour list of issue 3.

func dial(t testing.TB, addrs []string, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Dial(ctx, addrs, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// never is the package's "nothing happened" check, one observation with a
// bound: it watches cond every 5 ms for d and fails the test as soon as it
// holds (issue #36 item 8: not a sleep followed by one look).
func never(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			t.Fatalf("%s within %v", what, d)
		}
	}
}

// eventually is the package's wait on an observation: it polls cond every
// 5 ms and fails after 20 s (a generous bound for a loaded CI machine).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func upCount(cl *Client) int {
	n := 0
	for _, cn := range cl.pool.Load().conns {
		if cn.isUp() {
			n++
		}
	}
	return n
}

func waitUp(t testing.TB, cl *Client, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d connections up", n), func() bool { return upCount(cl) >= n })
}

// idle reports whether no connection has a request outstanding.
func idle(cl *Client) bool {
	for _, cn := range cl.pool.Load().conns {
		cn.mu.Lock()
		n, in := len(cn.pending), cn.inflight
		cn.mu.Unlock()
		if n != 0 || in != 0 {
			return false
		}
	}
	return true
}

type result struct {
	l   *Lock
	err error
}

func goAcquire(cl *Client, ctx context.Context, key string, lease, wait time.Duration) chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := cl.Acquire(ctx, key, lease, wait)
		ch <- result{l, err}
	}()
	return ch
}

func recv(t testing.TB, ch chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no result within 10s")
	}
	return result{}
}

// ---------------------------------------------------------------------------
// Dial and handshake

// Behaviour 1: a single address gets two connections.
func TestDialTwoConnectionsToASingleAddress(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	for _, fc := range fs.waitConns(t, 2) {
		if fc.role != wire.RoleClient {
			t.Errorf("role %v, want client", fc.role)
		}
	}
	waitUp(t, cl, 2)
	never(t, 200*time.Millisecond, "a third handshake", func() bool { return fs.hsCount.Load() != 2 })
}

// Behaviour 1: one connection per address when there are several.
func TestDialOneConnectionPerAddress(t *testing.T) {
	var fss []*fakeServer
	var addrs []string
	for range 3 {
		fs := newFake(t, fakeOpts{})
		fss = append(fss, fs)
		addrs = append(addrs, fs.addr)
	}
	cl := dial(t, addrs)
	waitUp(t, cl, 3)
	never(t, 200*time.Millisecond, "a second handshake to one address", func() bool {
		for _, fs := range fss {
			if fs.hsCount.Load() != 1 {
				return true
			}
		}
		return false
	})
}

func TestDialWithTokenVerifiesServerProof(t *testing.T) {
	fs := newFake(t, fakeOpts{flags: wire.HelloFlagTokens, clientToken: "s3cret"})
	cl := dial(t, []string{fs.addr}, WithToken("s3cret"))
	waitUp(t, cl, 2)
}

func TestDialRefusesImpostor(t *testing.T) {
	// The fake accepts any client but cannot prove the token.
	fs := newFake(t, fakeOpts{clientToken: "s3cret", badProof: true})
	start := time.Now()
	_, err := Dial(context.Background(), []string{fs.addr}, WithToken("s3cret"))
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("err = %v, want ErrAuth", err)
	}
	if errors.Is(err, ErrConnect) {
		t.Errorf("err = %v: an auth failure should not read as 'cannot connect'", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v; an auth failure should fail fast", d)
	}
}

func TestDialWithoutTokenToTokenServerIsRejected(t *testing.T) {
	fs := newFake(t, fakeOpts{flags: wire.HelloFlagTokens, clientToken: "s3cret"})
	_, err := Dial(context.Background(), []string{fs.addr})
	var rej *RejectError
	if !errors.Is(err, ErrAuth) || !errors.As(err, &rej) || rej.Code != wire.CodeAuthFailed {
		t.Fatalf("err = %v, want ErrAuth with REJECT AUTH_FAILED", err)
	}
}

func TestDialWrongTokenIsRejected(t *testing.T) {
	fs := newFake(t, fakeOpts{flags: wire.HelloFlagTokens, clientToken: "s3cret"})
	_, err := Dial(context.Background(), []string{fs.addr}, WithToken("guess"))
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("err = %v, want ErrAuth", err)
	}
}

func TestDialBadHandshakeIsAuthError(t *testing.T) {
	fs := newFake(t, fakeOpts{reject: wire.CodeBadHandshake})
	_, err := Dial(context.Background(), []string{fs.addr})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("err = %v, want ErrAuth", err)
	}
}

func TestDialAdminRole(t *testing.T) {
	fs := newFake(t, fakeOpts{flags: wire.HelloFlagTokens, clientToken: "c", adminToken: "adm"})
	cl := dial(t, []string{fs.addr}, WithAdminToken("adm"))
	for _, fc := range fs.waitConns(t, 2) {
		if fc.role != wire.RoleAdmin {
			t.Errorf("role %v, want admin", fc.role)
		}
	}
	_ = cl
}

func TestDialNothingListening(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	addr := fs.addr
	fs.stop()
	start := time.Now()
	_, err := Dial(context.Background(), []string{addr}, WithDialTimeout(300*time.Millisecond))
	if !errors.Is(err, ErrConnect) {
		t.Fatalf("err = %v, want ErrConnect", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("Dial gave up after %v, want about the 300ms dial timeout", d)
	}
}

func TestDialContextCancelled(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	addr := fs.addr
	fs.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, []string{addr})
	if !errors.Is(err, ErrConnect) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrConnect and DeadlineExceeded", err)
	}
}

func TestDialReturnsWhenOneAddressIsUp(t *testing.T) {
	down := newFake(t, fakeOpts{})
	downAddr := down.addr
	down.stop()
	fs := newFake(t, fakeOpts{handler: newFakeLocks().handle})
	cl := dial(t, []string{downAddr, fs.addr})
	if _, err := cl.TryAcquire(context.Background(), "k", time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestDialInvalidArguments(t *testing.T) {
	for _, addrs := range [][]string{nil, {"no-port"}} {
		if _, err := Dial(context.Background(), addrs); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Dial(%q) = %v, want ErrInvalidArgument", addrs, err)
		}
	}
}

// ---------------------------------------------------------------------------
// Connection choice (behaviour 2)

func TestRoundRobin(t *testing.T) {
	var locks []*fakeLocks
	var addrs []string
	for range 3 {
		l := newFakeLocks()
		fs := newFake(t, fakeOpts{handler: l.handle})
		locks, addrs = append(locks, l), append(addrs, fs.addr)
	}
	cl := dial(t, addrs)
	waitUp(t, cl, 3)
	for range 30 {
		if _, _, err := cl.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range locks {
		if n := l.count(wire.OpPing); n != 10 {
			t.Errorf("server %d got %d of 30 pings, want 10", i, n)
		}
	}
}

// Behaviour 2 and "M naming another address → the request lands there":
// the leader is not among the Dial addresses; the client connects to it,
// sends the acquire there, and sends later requests there first.
func TestMovedRequestLandsOnLeader(t *testing.T) {
	leaderLocks := newFakeLocks()
	leader := newFake(t, fakeOpts{handler: leaderLocks.handle})
	var followerCount atomic.Int64
	follower := newFake(t, fakeOpts{handler: func(r fakeReq) {
		followerCount.Add(1)
		r.moved(leader.addr)
	}})
	cl := dial(t, []string{follower.addr})
	l, err := cl.Acquire(context.Background(), "k", time.Minute, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := leaderLocks.count(wire.OpAcquire); n != 1 {
		t.Fatalf("leader got %d acquires, want 1", n)
	}
	if n := followerCount.Load(); n != 1 {
		t.Fatalf("follower got %d requests, want 1", n)
	}
	// The leader is remembered: the release and further requests go there.
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := cl.TryAcquire(context.Background(), "k2", time.Minute); err != nil && !errors.Is(err, ErrTimeout) {
			t.Fatal(err)
		}
	}
	if n := followerCount.Load(); n != 1 {
		t.Errorf("follower got %d requests after the leader was known, want 1", n)
	}
	if n := leaderLocks.count(wire.OpAcquire) + leaderLocks.count(wire.OpRelease); n != 7 {
		t.Errorf("leader got %d requests, want 7", n)
	}
}

func TestMovedAmongKnownAddresses(t *testing.T) {
	leaderLocks := newFakeLocks()
	leader := newFake(t, fakeOpts{handler: leaderLocks.handle})
	var followerCount atomic.Int64
	follower := newFake(t, fakeOpts{handler: func(r fakeReq) {
		followerCount.Add(1)
		r.moved(leader.addr)
	}})
	cl := dial(t, []string{follower.addr, leader.addr})
	waitUp(t, cl, 2)
	for i := range 10 {
		if _, err := cl.TryAcquire(context.Background(), fmt.Sprint("k", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := followerCount.Load(); n > 1 {
		t.Errorf("follower got %d requests, want at most 1 (the leader is remembered)", n)
	}
	if n := leaderLocks.count(wire.OpAcquire); n != 10 {
		t.Errorf("leader got %d acquires, want 10", n)
	}
	if got := len(cl.pool.Load().conns); got != 2 {
		t.Errorf("%d connections, want 2 (no new endpoint for a known address)", got)
	}
}

// protocol.md §7: at most 3 consecutive M answers are followed.
func TestMovedFollowedAtMostThreeTimes(t *testing.T) {
	var count atomic.Int64
	var a, b *fakeServer
	a = newFake(t, fakeOpts{handler: func(r fakeReq) { count.Add(1); r.moved(b.addr) }})
	b = newFake(t, fakeOpts{handler: func(r fakeReq) { count.Add(1); r.moved(a.addr) }})
	cl := dial(t, []string{a.addr, b.addr})
	waitUp(t, cl, 2)
	_, err := cl.TryAcquire(context.Background(), "k", time.Second)
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("err = %v, want ErrNoLeader", err)
	}
	if n := count.Load(); n != 4 {
		t.Errorf("%d requests sent, want 4 (the first and 3 redirects)", n)
	}
}

// The redirect schedule (after maxMoves M answers, and between release
// tries): 25 ms doubling to 200 ms, each delay in [step/2, step].
func TestRedirectDelaySchedule(t *testing.T) {
	cl := &Client{cfg: newConfig(nil)}
	want := []time.Duration{25, 50, 100, 200, 200, 200}
	for i, w := range want {
		w *= time.Millisecond
		for range 200 {
			if d := cl.redirectDelay(i + 1); d < w/2 || d > w {
				t.Fatalf("redirectDelay(%d) = %v, want within [%v, %v]", i+1, d, w/2, w)
			}
		}
	}
}

// A caller backing off after redirects wakes as soon as the client learns
// a new leader (from any request's M answer), not when its delay ends —
// once per call: a second sleep of the same call waits its whole delay.
func TestRedirectSleepWakesOnNewLeader(t *testing.T) {
	a := newFake(t, fakeOpts{})
	b := newFake(t, fakeOpts{})
	cl := dial(t, []string{a.addr, b.addr})
	cl.follow(a.addr)
	known := cl.leader.Load()
	woken := false
	res := make(chan error, 1)
	go func() { res <- cl.sleepRedirect(context.Background(), time.Hour, known, &woken) }()
	eventually(t, "the caller sleeping", func() bool { return cl.newLeader.waiting.Load() == 1 })
	cl.follow(a.addr) // the same leader again: no news, keeps sleeping
	select {
	case err := <-res:
		t.Fatalf("woke on the leader it already knew (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	cl.follow(b.addr)
	select {
	case err := <-res:
		if err != nil || !woken {
			t.Fatalf("sleepRedirect: %v, woken %v", err, woken)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still sleeping 10 s after a new leader was learned (delay 1 h)")
	}
	// The same call again: no second early wake, however the leader moves.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { res <- cl.sleepRedirect(ctx, time.Hour, cl.leader.Load(), &woken) }()
	time.Sleep(20 * time.Millisecond)
	cl.follow(a.addr)
	select {
	case err := <-res:
		t.Fatalf("woke early a second time in one call (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v", err)
	}
	// A new call that knew no leader when it decided to back off, one
	// learned before its sleep began: no sleep at all.
	fresh := false
	done := make(chan error, 1)
	go func() { done <- cl.sleepRedirect(context.Background(), time.Hour, nil, &fresh) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("slept although the leader had changed before the sleep began")
	}
}

// ---------------------------------------------------------------------------
// Outcomes (behaviours 5–7)

// Behaviour 6: B goes back at once, and nothing else is sent.
func TestBusyReturnsAtOnceWithoutRetry(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ch := goAcquire(cl, context.Background(), "k", time.Second, time.Minute)
	fs.nextOp(t, wire.OpAcquire).status(wire.StatusBusy, wire.CodeQueueFull)
	r := recv(t, ch)
	var be *BusyError
	if !errors.Is(r.err, ErrBusy) || !errors.As(r.err, &be) || be.Code != wire.CodeQueueFull {
		t.Fatalf("err = %v, want ErrBusy QUEUE_FULL", r.err)
	}
	fs.quiet(t, 300*time.Millisecond)
}

// Behaviour 7: the connection is cut after the acquire was written.
func TestCutAfterWrittenIsIndeterminate(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	waitUp(t, cl, 2)
	ch := goAcquire(cl, context.Background(), "k", time.Second, time.Minute)
	fs.nextOp(t, wire.OpAcquire).fc.close()
	r := recv(t, ch)
	if !errors.Is(r.err, ErrIndeterminate) || r.l != nil {
		t.Fatalf("got %v, %v; want ErrIndeterminate and no lock", r.l, r.err)
	}
	fs.quiet(t, 300*time.Millisecond) // not retried
}

// Behaviour 5: the connection is cut before the acquire was written: it is
// retried on the other connection and succeeds; the server sees it once.
func TestCutBeforeWrittenIsRetriedTransparently(t *testing.T) {
	gate := make(chan struct{})
	var blocking atomic.Bool
	blocking.Store(true)
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr}, withBeforeWrite(func(*conn) {
		if blocking.Load() {
			<-gate
		}
	}))
	waitUp(t, cl, 2)
	ch := goAcquire(cl, context.Background(), "k", time.Second, time.Minute)
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
	a := fs.nextOp(t, wire.OpAcquire)
	a.grant(42, 0)
	r := recv(t, ch)
	if r.err != nil || r.l.Token() != 42 {
		t.Fatalf("got %v, %v; want token 42", r.l, r.err)
	}
	fs.quiet(t, 300*time.Millisecond)
}

// Behaviour 4/5: during an outage an acquire waits for a connection and
// succeeds once the server is back; a dead connection never breaks the Client.
func TestOutageThenTransparentSuccess(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	addr := fs.addr
	cl := dial(t, []string{addr})
	waitUp(t, cl, 2)
	fs.stop()
	eventually(t, "connections down", func() bool { return upCount(cl) == 0 })
	// A wait that outlasts the outage (R3); wait 0 would fail ErrConnect at once (R1).
	ch := goAcquire(cl, context.Background(), "k", time.Second, 5*time.Second)
	eventually(t, "the acquire waiting for a connection", func() bool { return cl.notify.waiting.Load() >= 1 })
	fs2 := newFake(t, fakeOpts{addr: addr, handler: newFakeLocks().handle})
	_ = fs2
	r := recv(t, ch)
	if r.err != nil {
		t.Fatalf("acquire across the outage: %v", r.err)
	}
}

func TestUnknownOutcomeIsIndeterminate(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ch := goAcquire(cl, context.Background(), "k", time.Second, time.Minute)
	fs.nextOp(t, wire.OpAcquire).status(wire.StatusUnknown, wire.CodeNoQuorum)
	if r := recv(t, ch); !errors.Is(r.err, ErrIndeterminate) {
		t.Fatalf("err = %v, want ErrIndeterminate", r.err)
	}
}

func TestTimeoutAndProtocolError(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ch := goAcquire(cl, context.Background(), "k", time.Second, 0)
	fs.nextOp(t, wire.OpAcquire).status(wire.StatusTimeout, 0)
	if r := recv(t, ch); !errors.Is(r.err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", r.err)
	}
	ch = goAcquire(cl, context.Background(), "k", time.Second, 0)
	fs.nextOp(t, wire.OpAcquire).errorResp(wire.CodeBadLease, "lease_ms out of range")
	r := recv(t, ch)
	var pe *ProtocolError
	if !errors.As(r.err, &pe) || pe.Code != wire.CodeBadLease || pe.Msg != "lease_ms out of range" {
		t.Fatalf("err = %v, want ProtocolError BAD_LEASE", r.err)
	}
	var oe *OpError
	if !errors.As(r.err, &oe) || oe.Op != "acquire" || oe.Key != "k" {
		t.Errorf("err = %v, want an OpError naming acquire and the key", r.err)
	}
}

// A code-25 E never completes an outstanding request (protocol.md §2.1).
func TestDuplicateReqIDErrorDoesNotCompleteTheRequest(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ch := goAcquire(cl, context.Background(), "k", time.Second, time.Minute)
	a := fs.nextOp(t, wire.OpAcquire)
	a.errorResp(wire.CodeDuplicateReqID, "dup")
	a.grant(7, 0)
	if r := recv(t, ch); r.err != nil || r.l.Token() != 7 {
		t.Fatalf("got %v, %v; want token 7", r.l, r.err)
	}
}

func TestProtocolViolationEndsTheConnection(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ch := goAcquire(cl, context.Background(), "k", time.Second, time.Minute)
	a := fs.nextOp(t, wire.OpAcquire)
	a.pong(1) // P is no answer to A
	if r := recv(t, ch); !errors.Is(r.err, ErrIndeterminate) {
		t.Fatalf("err = %v, want ErrIndeterminate", r.err)
	}
}

// ---------------------------------------------------------------------------
// Cancel while queued (behaviour 8)

func TestCancelWhileQueuedSendsCAndReturnsAtOnce(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ctx, cancel := context.WithCancel(context.Background())
	ch := goAcquire(cl, ctx, "orders/1", time.Second, time.Minute)
	a := fs.nextOp(t, wire.OpAcquire)
	cancel()
	r := recv(t, ch) // before the server answered anything
	if !errors.Is(r.err, context.Canceled) || r.l != nil {
		t.Fatalf("got %v, %v; want context.Canceled", r.l, r.err)
	}
	c := fs.nextOp(t, wire.OpCancel)
	if c.fc != a.fc || c.Target() != a.ReqID || c.key != "orders/1" {
		t.Fatalf("C target %d key %q on conn %p; want target %d key orders/1 on conn %p", c.Target(), c.key, c.fc, a.ReqID, a.fc)
	}
	a.status(wire.StatusTimeout, 0)
	c.status(wire.StatusReleased, 0)
	eventually(t, "no outstanding request and no inflight slot used", func() bool { return idle(cl) })
	if n := cl.stats.compensations.Load(); n != 0 {
		t.Errorf("%d compensations, want 0", n)
	}
}

// Behaviour 8: the grant wins the race against the cancel (G, then N for
// the C): the client releases that token itself.
func TestCancelLosingTheRaceReleasesTheGrant(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ctx, cancel := context.WithCancel(context.Background())
	ch := goAcquire(cl, ctx, "k", time.Minute, time.Minute)
	a := fs.nextOp(t, wire.OpAcquire)
	cancel()
	if r := recv(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", r.err)
	}
	c := fs.nextOp(t, wire.OpCancel)
	a.grant(77, 3)
	c.status(wire.StatusNotHolder, 0)
	rel := fs.nextOp(t, wire.OpRelease)
	if rel.Token() != 77 || rel.key != "k" {
		t.Fatalf("compensation released %q token %d, want k 77", rel.key, rel.Token())
	}
	rel.status(wire.StatusReleased, 0)
	eventually(t, "the compensation to finish", func() bool {
		cl.rel.mu.Lock()
		defer cl.rel.mu.Unlock()
		return cl.rel.count == 0
	})
	if n := cl.stats.compensations.Load(); n != 1 {
		t.Errorf("%d compensations, want 1", n)
	}
}

// A try-once acquire abandoned while in flight sends no C (it is answered
// at once) but still compensates a grant.
func TestAbandonedTryAcquireCompensates(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ctx, cancel := context.WithCancel(context.Background())
	ch := goAcquire(cl, ctx, "k", time.Minute, 0)
	a := fs.nextOp(t, wire.OpAcquire)
	cancel()
	recv(t, ch)
	a.grant(5, 0)
	rel := fs.nextOp(t, wire.OpRelease)
	if rel.Token() != 5 {
		t.Fatalf("released token %d, want 5", rel.Token())
	}
	rel.status(wire.StatusReleased, 0)
}

func TestAcquireWithDoneContextSendsNothing(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cl.Acquire(ctx, "k", time.Second, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	fs.quiet(t, 200*time.Millisecond)
}

// ---------------------------------------------------------------------------
// Pipelining (behaviour 3)

func TestPipelinedAnswersMatchedByReqID(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	waitUp(t, cl, 2)
	const n = 100
	chans := make([]chan result, n)
	for i := range n {
		chans[i] = goAcquire(cl, context.Background(), fmt.Sprint("key-", i), time.Minute, time.Minute)
	}
	reqs := make([]fakeReq, 0, n)
	seen := map[*fakeConn]map[uint32]bool{}
	for range n {
		r := fs.nextOp(t, wire.OpAcquire)
		if seen[r.fc] == nil {
			seen[r.fc] = map[uint32]bool{}
		}
		if seen[r.fc][r.ReqID] {
			t.Fatalf("req_id %d reused on one connection while outstanding", r.ReqID)
		}
		seen[r.fc][r.ReqID] = true
		reqs = append(reqs, r)
	}
	if len(seen) != 2 {
		t.Errorf("requests used %d connections, want both", len(seen))
	}
	// Answer in reverse order; each caller must get the token meant for its key.
	for i := len(reqs) - 1; i >= 0; i-- {
		var k int
		fmt.Sscanf(reqs[i].key, "key-%d", &k)
		reqs[i].grant(uint64(1000+k), 0)
	}
	for i, ch := range chans {
		r := recv(t, ch)
		if r.err != nil || r.l.Token() != uint64(1000+i) || r.l.Key() != fmt.Sprint("key-", i) {
			t.Fatalf("caller %d got %+v, %v", i, r.l, r.err)
		}
	}
}

func TestAllocIDSkipsOutstandingAndZero(t *testing.T) {
	cn := newConn(nil, "x", nil)
	cn.pending[5] = &call{}
	cn.nextID = 4
	if id := cn.allocID(); id != 6 {
		t.Errorf("allocID = %d, want 6 (5 is outstanding)", id)
	}
	cn.pending[math.MaxUint32] = &call{}
	cn.pending[1] = &call{}
	cn.nextID = math.MaxUint32 - 1
	if id := cn.allocID(); id != 2 {
		t.Errorf("allocID = %d, want 2 (MaxUint32 and 1 outstanding, 0 skipped)", id)
	}
}

// Concurrency smoke test through the fake lock table, for the race detector.
func TestConcurrentUseAgainstFake(t *testing.T) {
	fs := newFake(t, fakeOpts{handler: newFakeLocks().handle})
	cl := dial(t, []string{fs.addr})
	var wg sync.WaitGroup
	var holders [5]atomic.Int32
	errc := make(chan error, 100)
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				k := (g + i) % 5
				l, err := cl.Acquire(context.Background(), fmt.Sprint("k", k), time.Minute, time.Minute)
				if err != nil {
					errc <- err
					return
				}
				if holders[k].Add(1) != 1 {
					errc <- fmt.Errorf("two holders of k%d", k)
				}
				holders[k].Add(-1)
				if err := l.Release(context.Background()); err != nil {
					errc <- err
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
}

// ---------------------------------------------------------------------------
// max_inflight (protocol.md §3.3)

func TestMaxInflightRespected(t *testing.T) {
	fs := newFake(t, fakeOpts{maxInflight: 2})
	cl := dial(t, []string{fs.addr})
	waitUp(t, cl, 2) // 2 connections × 2 slots
	var chans []chan result
	for i := range 6 {
		chans = append(chans, goAcquire(cl, context.Background(), fmt.Sprint("q", i), time.Second, time.Minute))
	}
	var queued []fakeReq
	for range 4 {
		queued = append(queued, fs.nextOp(t, wire.OpAcquire))
	}
	fs.quiet(t, 300*time.Millisecond) // the other two wait client-side
	// Try-once acquires never queue, so they are not limited.
	tc := goAcquire(cl, context.Background(), "free", time.Second, 0)
	fs.nextOp(t, wire.OpAcquire).grant(1, 0)
	if r := recv(t, tc); r.err != nil {
		t.Fatal(r.err)
	}
	// Freeing one slot lets one waiting acquire out.
	queued[0].status(wire.StatusTimeout, 0)
	fifth := fs.nextOp(t, wire.OpAcquire)
	if fifth.fc != queued[0].fc {
		t.Errorf("the waiting acquire went to another connection than the freed slot's")
	}
	fs.quiet(t, 200*time.Millisecond)
	queued = append(queued[1:], fifth)
	queued[0].status(wire.StatusTimeout, 0)
	queued = append(queued, fs.nextOp(t, wire.OpAcquire))
	for _, q := range queued[1:] {
		q.status(wire.StatusTimeout, 0)
	}
	for _, ch := range chans {
		if r := recv(t, ch); !errors.Is(r.err, ErrTimeout) {
			t.Errorf("err = %v, want ErrTimeout", r.err)
		}
	}
}

func TestMaxInflightWaitBoundedByWaitBudget(t *testing.T) {
	fs := newFake(t, fakeOpts{maxInflight: 1})
	cl := dial(t, []string{fs.addr})
	waitUp(t, cl, 2)
	a := goAcquire(cl, context.Background(), "a", time.Second, time.Minute)
	b := goAcquire(cl, context.Background(), "b", time.Second, time.Minute)
	ra, rb := fs.nextOp(t, wire.OpAcquire), fs.nextOp(t, wire.OpAcquire)
	start := time.Now()
	_, err := cl.Acquire(context.Background(), "c", time.Second, 200*time.Millisecond)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Errorf("gave up after %v, before the 200ms wait", d)
	}
	fs.quiet(t, 100*time.Millisecond)
	ra.status(wire.StatusTimeout, 0)
	rb.status(wire.StatusTimeout, 0)
	recv(t, a)
	recv(t, b)
}

// ---------------------------------------------------------------------------
// Reconnect (behaviour 4)

func TestBackoffScheduleAndJitter(t *testing.T) {
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 3200, 3200}
	for i, w := range want {
		if got := backoffStep(backoffBase, backoffCap, i+1); got != w*time.Millisecond {
			t.Errorf("step %d = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := backoffStep(backoffBase, backoffCap, 1000); got != backoffCap {
		t.Errorf("step 1000 = %v, want the cap", got)
	}
	for _, step := range []time.Duration{100 * time.Millisecond, 3200 * time.Millisecond} {
		lo, hi := step, time.Duration(0)
		for range 2000 {
			d := jitter(step)
			if d < step/2 || d > step {
				t.Fatalf("jitter(%v) = %v, outside [step/2, step]", step, d)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if hi-lo < step/4 {
			t.Errorf("jitter(%v) spread only %v..%v", step, lo, hi)
		}
	}
}

// TestReconnectFullJitter: each reconnect delay is drawn uniformly from
// [0, step] (architecture.md R16, issue #29 item 5), so clients that lost a
// server at one instant spread over the whole step; before, the delays were
// drawn from [step/2, step] and the lower half of every step stayed empty.
// A seeded source: the figures are the same at every run.
func TestReconnectFullJitter(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 5))
	cl := &Client{cfg: newConfig([]Option{func(c *config) { c.randN = r.Int64N }})}
	const draws, bins = 10000, 10
	for attempt := 1; attempt <= 7; attempt++ {
		step := backoffStep(backoffBase, backoffCap, attempt)
		var hist [bins]int
		for range draws {
			d := cl.backoffDelay(attempt)
			if d < 0 || d > step {
				t.Fatalf("attempt %d: delay %v outside [0, %v]", attempt, d, step)
			}
			hist[min(bins-1, int(int64(d)*bins/int64(step)))]++
		}
		for i, n := range hist { // uniform: 1,000 each; 4.5 sigma is ±135
			if n < draws/bins*85/100 || n > draws/bins*115/100 {
				t.Errorf("attempt %d (step %v): %d of %d delays in [%v, %v), want about %d (histogram %v)",
					attempt, step, n, draws, step*time.Duration(i)/bins, step*time.Duration(i+1)/bins, draws/bins, hist)
			}
		}
	}
	// The herd: 20 clients of one restarted server, first attempt
	// (step 0.1 s), bucketed by 10 ms: no bucket holds more than 5 (before:
	// all 20 in the upper five buckets, 6 in one).
	var buckets [11]int
	for range 20 {
		buckets[cl.backoffDelay(1)/(10*time.Millisecond)]++
	}
	for i, n := range buckets {
		if n > 5 {
			t.Errorf("%d of 20 first reconnects in [%d, %d) ms (buckets %v)", n, 10*i, 10*i+10, buckets)
		}
	}
	// Both ends of the step are reachable.
	if d := fullJitter(time.Second, func(int64) int64 { return 0 }); d != 0 {
		t.Errorf("fullJitter with a source at 0 = %v, want 0", d)
	}
	if d := fullJitter(time.Second, func(k int64) int64 { return k - 1 }); d != time.Second {
		t.Errorf("fullJitter with a source at its top = %v, want the step", d)
	}
}

type reconnectRec struct {
	cn      *conn
	attempt int
	delay   time.Duration
	at      time.Time
}

type recorder struct {
	mu   sync.Mutex
	recs []reconnectRec
}

func (r *recorder) hook(cn *conn, attempt int, d time.Duration) {
	r.mu.Lock()
	r.recs = append(r.recs, reconnectRec{cn, attempt, d, time.Now()})
	r.mu.Unlock()
}

func (r *recorder) maxAttempt() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := 0
	for _, x := range r.recs {
		m = max(m, x.attempt)
	}
	return m
}

func (r *recorder) byConn() map[*conn][]reconnectRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[*conn][]reconnectRec{}
	for _, x := range r.recs {
		m[x.cn] = append(m[x.cn], x)
	}
	return m
}

// Server restarted: the client reconnects on the backoff schedule (each
// delay drawn from [0, step], steps 0.1 s, 0.2, 0.4, 0.8 …) and
// serves new acquires.
func TestServerRestartReconnectsOnSchedule(t *testing.T) {
	var rec recorder
	fs := newFake(t, fakeOpts{})
	addr := fs.addr
	cl := dial(t, []string{addr}, withReconnectHook(rec.hook))
	waitUp(t, cl, 2)
	fs.stop()
	eventually(t, "4 reconnect attempts", func() bool { return rec.maxAttempt() >= 4 })
	fs2 := newFake(t, fakeOpts{addr: addr, handler: newFakeLocks().handle})
	_ = fs2
	waitUp(t, cl, 2)
	if _, err := cl.TryAcquire(context.Background(), "k", time.Second); err != nil {
		t.Fatalf("acquire after restart: %v", err)
	}
	for cn, recs := range rec.byConn() {
		for i, x := range recs {
			if x.attempt != i+1 {
				t.Fatalf("conn %p: attempt %d at position %d", cn, x.attempt, i)
			}
			step := backoffStep(backoffBase, backoffCap, x.attempt)
			if x.delay < 0 || x.delay > step {
				t.Errorf("attempt %d: delay %v outside [0, %v]", x.attempt, x.delay, step)
			}
			if i > 0 {
				gap := x.at.Sub(recs[i-1].at)
				if gap < recs[i-1].delay || gap > recs[i-1].delay+time.Second {
					t.Errorf("attempt %d came %v after the previous one, which chose a %v delay", x.attempt, gap, recs[i-1].delay)
				}
			}
		}
	}
}

// Reconnecting goes on forever (here with a fast schedule), capped.
func TestReconnectForeverCapped(t *testing.T) {
	var rec recorder
	fs := newFake(t, fakeOpts{})
	addr := fs.addr
	cl := dial(t, []string{addr}, withBackoff(time.Millisecond, 4*time.Millisecond), withReconnectHook(rec.hook))
	waitUp(t, cl, 2)
	fs.stop()
	eventually(t, "40 reconnect attempts", func() bool { return rec.maxAttempt() >= 40 })
	newFake(t, fakeOpts{addr: addr, handler: newFakeLocks().handle})
	if _, _, err := cl.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, recs := range rec.byConn() {
		for _, x := range recs {
			if x.delay > 4*time.Millisecond {
				t.Fatalf("delay %v above the cap", x.delay)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Releases (behaviour 9)

func TestReleaseAnswers(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	cases := []struct {
		answer func(fakeReq)
		check  func(error) bool
	}{
		{func(r fakeReq) { r.status(wire.StatusReleased, 0) }, func(err error) bool { return err == nil }},
		{func(r fakeReq) { r.status(wire.StatusNotHolder, 0) }, func(err error) bool { return errors.Is(err, ErrNotHolder) }},
		{func(r fakeReq) { r.errorResp(wire.CodeInternal, "oops") }, func(err error) bool {
			var pe *ProtocolError
			return errors.As(err, &pe) && pe.Code == wire.CodeInternal
		}},
	}
	for i, c := range cases {
		errc := make(chan error, 1)
		go func() { errc <- cl.Release(context.Background(), "k", 9) }()
		r := fs.nextOp(t, wire.OpRelease)
		if r.Token() != 9 || r.key != "k" {
			t.Fatalf("R %q %d", r.key, r.Token())
		}
		c.answer(r)
		if err := <-errc; !c.check(err) {
			t.Errorf("case %d: err = %v", i, err)
		}
	}
}

// Written, connection lost, retried: N then means "maybe released by the
// first attempt" — never success, and not a plain ErrNotHolder either.
func TestReleaseLostThenNotHolderIsIndeterminate(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	errc := make(chan error, 1)
	go func() { errc <- cl.Release(context.Background(), "k", 9) }()
	fs.nextOp(t, wire.OpRelease).fc.close()
	fs.nextOp(t, wire.OpRelease).status(wire.StatusNotHolder, 0)
	if err := <-errc; !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("err = %v, want ErrIndeterminate", err)
	}
}

func TestReleaseLostThenReleased(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	errc := make(chan error, 1)
	go func() { errc <- cl.Release(context.Background(), "k", 9) }()
	fs.nextOp(t, wire.OpRelease).fc.close()
	fs.nextOp(t, wire.OpRelease).status(wire.StatusReleased, 0)
	if err := <-errc; err != nil {
		t.Fatalf("err = %v, want nil", err)
	}
}

// Release during an outage: every attempt is written and cut; the client
// retries, then gives up 5 s after the call with ErrIndeterminate.
func TestReleaseDuringOutageGivesUpBy5s(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 5 s")
	}
	var attempts atomic.Int64
	fs := newFake(t, fakeOpts{handler: func(r fakeReq) {
		if r.Op == wire.OpRelease {
			attempts.Add(1)
			r.fc.close()
		}
	}})
	cl := dial(t, []string{fs.addr})
	start := time.Now()
	err := cl.Release(context.Background(), "k", 9)
	d := time.Since(start)
	if !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("err = %v, want ErrIndeterminate", err)
	}
	if d < 4*time.Second || d > 6*time.Second {
		t.Errorf("gave up after %v, want about 5s", d)
	}
	if n := attempts.Load(); n < 3 {
		t.Errorf("%d attempts, want retries", n)
	}
}

// With no server at all the release is never sent and still ends with
// ErrIndeterminate at the end of its window (shortened here).
func TestReleaseWithServerDownGivesUpAtWindow(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr}, withReleaseWindow(400*time.Millisecond))
	fs.stop()
	eventually(t, "connections down", func() bool { return upCount(cl) == 0 })
	start := time.Now()
	err := cl.Release(context.Background(), "k", 9)
	if !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("err = %v, want ErrIndeterminate", err)
	}
	if d := time.Since(start); d < 350*time.Millisecond || d > 3*time.Second {
		t.Errorf("gave up after %v, want about 400ms", d)
	}
}

// A release whose caller stops waiting goes on in the background.
func TestReleaseContinuesInBackgroundAfterCancel(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- cl.Release(ctx, "k", 9) }()
	r := fs.nextOp(t, wire.OpRelease)
	cancel()
	if err := <-errc; !errors.Is(err, ErrIndeterminate) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrIndeterminate and Canceled", err)
	}
	r.fc.close() // the attempt is lost: the background releaser retries
	fs.nextOp(t, wire.OpRelease).status(wire.StatusReleased, 0)
	eventually(t, "the background job to finish", func() bool {
		cl.rel.mu.Lock()
		defer cl.rel.mu.Unlock()
		return cl.rel.count == 0
	})
}

// ---------------------------------------------------------------------------
// The lock handle

func TestDeadlineIncludesQueuedTime(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	for _, queued := range []uint16{0, 125} {
		before := time.Now()
		ch := goAcquire(cl, context.Background(), "k", 1500*time.Millisecond, time.Minute)
		fs.nextOp(t, wire.OpAcquire).grant(11, queued)
		r := recv(t, ch)
		after := time.Now()
		if r.err != nil {
			t.Fatal(r.err)
		}
		extra := time.Duration(queued)*16*time.Millisecond + 1500*time.Millisecond
		if d := r.l.Deadline(); d.Before(before.Add(extra)) || d.After(after.Add(extra)) {
			t.Errorf("queued %d: deadline %v not in [%v, %v]", queued, d, before.Add(extra), after.Add(extra))
		}
	}
}

func TestLockDoneAtDeadlineAndOnRelease(t *testing.T) {
	fs := newFake(t, fakeOpts{handler: newFakeLocks().handle})
	cl := dial(t, []string{fs.addr})
	l, err := cl.Acquire(context.Background(), "short", 30*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		if time.Now().Before(l.Deadline()) {
			t.Error("Done closed before the deadline")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the deadline")
	}
	l2, err := cl.Acquire(context.Background(), "long", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := l2.Done()
	if err := l2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	default:
		t.Fatal("Done not closed by Release")
	}
	// Done first called after Release: already closed.
	l3, _ := cl.Acquire(context.Background(), "long", time.Minute, 0)
	l3.Release(context.Background())
	<-l3.Done()
}

// ---------------------------------------------------------------------------
// Ping, Admin, validation, Close

func TestPing(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	type pr struct {
		at  time.Time
		rtt time.Duration
		err error
	}
	ch := make(chan pr, 1)
	go func() { at, rtt, err := cl.Ping(context.Background()); ch <- pr{at, rtt, err} }()
	fs.nextOp(t, wire.OpPing).pong(1_700_000_000_123_456)
	r := <-ch
	if r.err != nil || !r.at.Equal(time.UnixMicro(1_700_000_000_123_456)) || r.rtt <= 0 {
		t.Fatalf("Ping = %v, %v, %v", r.at, r.rtt, r.err)
	}
}

func TestAdmin(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr}, WithAdminToken(""))
	errc := make(chan error, 1)
	var out wire.LocksReply
	go func() {
		errc <- cl.Admin(context.Background(), wire.CmdLocks, map[string]any{"prefix": "a/", "limit": 5}, &out)
	}()
	q := fs.nextOp(t, wire.OpQuery)
	var body map[string]any
	if err := json.Unmarshal(q.Body, &body); err != nil || body["cmd"] != "locks" || body["prefix"] != "a/" || body["limit"] != 5.0 {
		t.Fatalf("body %s (%v)", q.Body, err)
	}
	q.admin(wire.LocksReply{Total: 1, Locks: []wire.LockEntry{{Key: "a/1", Token: 3, QueueDepth: 2}}})
	if err := <-errc; err != nil || out.Total != 1 || out.Locks[0].Key != "a/1" || out.Locks[0].QueueDepth != 2 {
		t.Fatalf("Admin = %v, %+v", err, out)
	}
	go func() { errc <- cl.Admin(context.Background(), wire.CmdStatus, nil, nil) }()
	q = fs.nextOp(t, wire.OpQuery)
	if string(q.Body) != `{"cmd":"status"}` {
		t.Errorf("body %s", q.Body)
	}
	q.errorResp(wire.CodeNotPermitted, "not permitted for this role")
	var pe *ProtocolError
	if err := <-errc; !errors.As(err, &pe) || pe.Code != wire.CodeNotPermitted {
		t.Fatalf("err = %v, want ProtocolError NOT_PERMITTED", err)
	}
	if err := cl.Admin(context.Background(), "status", []int{1}, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("array args: %v", err)
	}
}

func TestValidationBeforeSending(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ctx := context.Background()
	cases := []struct {
		key         string
		lease, wait time.Duration
	}{
		{"", time.Second, 0},
		{strings.Repeat("x", 251), time.Second, 0},
		{"a\nb", time.Second, 0},
		{"\xff", time.Second, 0},
		{"k", 0, 0},
		{"k", -time.Second, 0},
		{"k", time.Duration(math.MaxUint32+1) * time.Millisecond, 0},
		{"k", time.Second, -1},
	}
	for _, c := range cases {
		if _, err := cl.Acquire(ctx, c.key, c.lease, c.wait); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Acquire(%q, %v, %v) = %v, want ErrInvalidArgument", c.key, c.lease, c.wait, err)
		}
	}
	if err := cl.Release(ctx, "", 1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Release with empty key: %v", err)
	}
	fs.quiet(t, 100*time.Millisecond)
	// Sub-millisecond durations round up.
	if ms, ok := millis(1500 * time.Microsecond); !ok || ms != 2 {
		t.Errorf("millis(1.5ms) = %d", ms)
	}
	if ms, _ := millis(time.Duration(math.MaxUint32) * time.Millisecond); ms != math.MaxUint32 {
		t.Errorf("max lease not accepted")
	}
}

func TestCloseFailsCallsInFlight(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ch := goAcquire(cl, context.Background(), "k", time.Second, time.Minute)
	fs.nextOp(t, wire.OpAcquire)
	cl.Close()
	r := recv(t, ch)
	if !errors.Is(r.err, ErrIndeterminate) || !errors.Is(r.err, ErrClosed) {
		t.Fatalf("err = %v, want ErrIndeterminate and ErrClosed", r.err)
	}
	if _, err := cl.TryAcquire(context.Background(), "k", time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := cl.Release(context.Background(), "k", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if _, _, err := cl.Ping(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := cl.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// An operation waiting for a connection gives up with ErrConnect.
func TestOperationsWithoutConnection(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr}, WithDialTimeout(300*time.Millisecond))
	fs.stop()
	eventually(t, "connections down", func() bool { return upCount(cl) == 0 })
	if _, err := cl.TryAcquire(context.Background(), "k", time.Second); !errors.Is(err, ErrConnect) {
		t.Errorf("TryAcquire: %v, want ErrConnect", err)
	}
	if _, _, err := cl.Ping(context.Background()); !errors.Is(err, ErrConnect) {
		t.Errorf("Ping: %v, want ErrConnect", err)
	}
}

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestLoggerReportsConnectionEvents(t *testing.T) {
	var buf logBuf
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr}, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	waitUp(t, cl, 2)
	fs.dropConns()
	eventually(t, "the loss logged", func() bool { return strings.Contains(buf.String(), "connection lost") })
	waitUp(t, cl, 2)
	if !strings.Contains(buf.String(), "connected") {
		t.Errorf("log: %s", buf.String())
	}
}

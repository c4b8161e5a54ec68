package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Client is a connection pool to one Ticketing server or cluster. It is safe
// for concurrent use by any number of goroutines; they share its
// connections, pipelining requests. Create it with Dial, end it with Close.
type Client struct {
	cfg   config
	log   *slog.Logger
	role  wire.Role
	token []byte

	ctx     context.Context // cancelled by Close: interrupts dials
	cancel  context.CancelFunc
	closing chan struct{}
	closed  atomic.Bool
	wg      sync.WaitGroup // connection supervisors and the releaser

	mu     sync.Mutex               // serializes changes of pool
	pool   atomic.Pointer[pool]     // immutable snapshot
	leader atomic.Pointer[endpoint] // the leader named by the last M answer; nil when unknown
	rr     atomic.Uint32            // round-robin cursor

	notify    notifier // a connection came up or failed, or an inflight slot was freed
	newLeader notifier // follow learned a leader other than the one it knew
	rel       releaser

	errMu   sync.Mutex
	lastErr error // the most recent connection error, for ErrConnect messages

	stats struct {
		compensations atomic.Int64 // grants released because their acquire was abandoned
		writes        atomic.Int64 // batches written
		frames        atomic.Int64 // frames in those batches
	}
	abandoned atomic.Int64 // pending calls with ownerAbandoned (see Drain)
}

// pool is the set of addresses and their connections.
type pool struct {
	eps    []*endpoint
	conns  []*conn
	byAddr map[string]*endpoint
	extra  int // endpoints learned from M answers
}

// endpoint is one server address and its connections (two when the client
// was given a single address, else one).
type endpoint struct {
	addr  string
	conns []*conn
}

// Dial connects to the servers at addrs ("host:port"; for a cluster, any
// subset of its nodes) and returns once at least one connection is up. It
// keeps one connection per address in the background (two when given a
// single address) and reconnects them with backoff until Close.
//
// Dial fails with an error wrapping ErrConnect when no connection is up
// within the dial timeout (WithDialTimeout, default 5 s) or before ctx ends,
// and with ErrAuth when every address rejected the credentials or failed to
// prove the token.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	cfg := newConfig(opts)
	if len(addrs) == 0 {
		return nil, opErr("dial", "", fmt.Errorf("%w: no server address", ErrInvalidArgument))
	}
	var uniq []string
	seen := map[string]bool{}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, opErr("dial", "", fmt.Errorf("%w: address %q: %v", ErrInvalidArgument, a, err))
		}
		if !seen[a] {
			seen[a] = true
			uniq = append(uniq, a)
		}
	}
	cl := &Client{
		cfg:     cfg,
		log:     cfg.logger,
		role:    wire.RoleClient,
		token:   []byte(cfg.token),
		closing: make(chan struct{}),
	}
	if cfg.admin {
		cl.role, cl.token = wire.RoleAdmin, []byte(cfg.adminToken)
	}
	cl.ctx, cl.cancel = context.WithCancel(context.Background())
	cl.rel.init(cl)
	p := &pool{byAddr: map[string]*endpoint{}}
	per := 1
	if len(uniq) == 1 {
		per = 2
	}
	for _, a := range uniq {
		ep := cl.newEndpoint(a, per)
		p.eps = append(p.eps, ep)
		p.conns = append(p.conns, ep.conns...)
		p.byAddr[a] = ep
	}
	cl.pool.Store(p)
	cl.wg.Add(1 + len(p.conns))
	go cl.rel.run()
	for _, cn := range p.conns {
		go cn.run()
	}
	if err := cl.waitFirst(ctx); err != nil {
		cl.Close()
		return nil, opErr("dial", "", err)
	}
	return cl, nil
}

func (cl *Client) newEndpoint(addr string, n int) *endpoint {
	var tcfg *tls.Config
	if cl.cfg.tls != nil {
		tcfg = cl.cfg.tls.Clone()
		if tcfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			tcfg.ServerName = host
		}
		if tcfg.MinVersion < tls.VersionTLS12 {
			tcfg.MinVersion = tls.VersionTLS12
		}
	}
	ep := &endpoint{addr: addr}
	for range n {
		ep.conns = append(ep.conns, newConn(cl, addr, tcfg))
	}
	return ep
}

// waitFirst waits until a connection is up (nil), every connection's last
// attempt failed authentication (ErrAuth), or the dial timeout or ctx ends
// (ErrConnect).
func (cl *Client) waitFirst(ctx context.Context) error {
	timer := time.NewTimer(cl.cfg.dialTimeout)
	defer timer.Stop()
	for {
		ch := cl.notify.subscribe()
		up, authErr := cl.firstState()
		if up {
			cl.notify.unsubscribe()
			return nil
		}
		if authErr != nil {
			cl.notify.unsubscribe()
			return authErr
		}
		select {
		case <-ch:
			cl.notify.unsubscribe()
		case <-timer.C:
			cl.notify.unsubscribe()
			return cl.connectErr()
		case <-ctx.Done():
			cl.notify.unsubscribe()
			return both(cl.connectErr(), ctx.Err())
		}
	}
}

// firstState reports whether any connection is up, or else the
// configuration error (auth, TLS) when every connection's last attempt
// failed with one.
func (cl *Client) firstState() (bool, error) {
	var cfg error
	all := true
	for _, cn := range cl.pool.Load().conns {
		cn.mu.Lock()
		up, ce := cn.state == stateUp, cn.cfgErr
		cn.mu.Unlock()
		if up {
			return true, nil
		}
		if ce == nil {
			all = false
		} else {
			cfg = ce
		}
	}
	if !all || cfg == nil {
		return false, nil
	}
	if errors.Is(cfg, ErrAuth) {
		return false, cfg
	}
	return false, fmt.Errorf("%w: %w", ErrConnect, cfg) // TLS: no connection can be made
}

// configErr is the configuration error (auth, TLS) when no connection is up
// and every connection's last attempt failed with one (R4, R5), else nil.
func (cl *Client) configErr() error {
	_, err := cl.firstState()
	return err
}

// firstConnecting reports whether a connection is making its first attempt.
func (cl *Client) firstConnecting() bool {
	for _, cn := range cl.pool.Load().conns {
		if cn.connecting() {
			return true
		}
	}
	return false
}

// addrs is the client's addresses, for errors that no one server answered.
func (cl *Client) addrs() string {
	eps := cl.pool.Load().eps
	if len(eps) == 1 {
		return eps[0].addr
	}
	s := make([]string, len(eps))
	for i, ep := range eps {
		s[i] = ep.addr
	}
	return strings.Join(s, ", ")
}

func (cl *Client) setLastErr(err error) {
	cl.errMu.Lock()
	cl.lastErr = err
	cl.errMu.Unlock()
}

func (cl *Client) getLastErr() error {
	cl.errMu.Lock()
	defer cl.errMu.Unlock()
	return cl.lastErr
}

func (cl *Client) connectErr() error {
	if err := cl.getLastErr(); err != nil {
		return fmt.Errorf("%w: no connection to any server: %w", ErrConnect, err)
	}
	return fmt.Errorf("%w: no connection to any server within %v", ErrConnect, cl.cfg.dialTimeout)
}

// Close closes every connection and stops every background goroutine. Calls
// in progress return ErrClosed (an acquire or release that was already
// written: ErrIndeterminate as well). Releases still being retried in the
// background are abandoned: those locks end with their leases. Close is
// idempotent; the Client must not be used afterwards.
func (cl *Client) Close() error {
	cl.mu.Lock()
	if cl.closed.Load() {
		cl.mu.Unlock()
		return nil
	}
	cl.closed.Store(true)
	p := cl.pool.Load()
	cl.mu.Unlock()
	close(cl.closing)
	cl.cancel()
	for _, cn := range p.conns {
		cn.shutdown()
	}
	cl.wg.Wait()
	return nil
}

// ---------------------------------------------------------------------------
// Connection choice

// tryEnqueue queues c on a connection without waiting: on the known leader
// first, else round robin over all connections that are up.
func (cl *Client) tryEnqueue(c *call) enqResult {
	r := int(cl.rr.Add(1))
	res := enqDown
	if ep := cl.leader.Load(); ep != nil {
		n := len(ep.conns)
		for i := range n {
			switch ep.conns[(r+i)%n].enqueue(c) {
			case enqOK:
				return enqOK
			case enqFull:
				res = enqFull
			case enqUnsupported:
				return enqUnsupported // the leader's server lacks the feature (§12.1)
			}
		}
		// The leader is up but full, or still connecting for the first time:
		// wait for it rather than asking a follower, which would answer M.
		if res == enqFull || ep.connecting() {
			return res
		}
	}
	conns := cl.pool.Load().conns
	n := len(conns)
	unsupported := false
	for i := range n {
		switch conns[(r+i)%n].enqueue(c) {
		case enqOK:
			return enqOK
		case enqFull:
			res = enqFull
		case enqUnsupported:
			unsupported = true
		}
	}
	if unsupported && res == enqDown {
		return enqUnsupported
	}
	return res
}

func (ep *endpoint) connecting() bool {
	for _, cn := range ep.conns {
		if cn.connecting() {
			return true
		}
	}
	return false
}

var errNoSlot = errors.New("no free max_inflight slot")

// send queues c, waiting for a connection (until giveUp) or for a free
// max_inflight slot (until slotGiveUp) when there is none. Errors: ErrClosed,
// a context error, ErrConnect (none up in time), errNoSlot.
func (cl *Client) send(ctx context.Context, c *call, giveUp, slotGiveUp time.Time) error {
	if cl.closed.Load() {
		return ErrClosed
	}
	switch cl.tryEnqueue(c) {
	case enqOK:
		if h := cl.cfg.afterEnqueue; h != nil {
			h(c)
		}
		return nil
	case enqUnsupported:
		return ErrUnsupported
	}
	return cl.sendSlow(ctx, c, giveUp, slotGiveUp)
}

func (cl *Client) sendSlow(ctx context.Context, c *call, giveUp, slotGiveUp time.Time) error {
	grace := time.Now().Add(firstConnectGrace)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch := cl.notify.subscribe()
		if (c.op == wire.OpAcquire || c.op == wire.OpAcquireSet) && c.counts {
			// The time spent waiting for a connection or a slot comes out of
			// the wait the request carries: wait bounds the whole call
			// (slotGiveUp is the end of the acquire's wait budget).
			rem := max(time.Until(slotGiveUp)/time.Millisecond, 0)
			if w := wire.ArgWaitMS(c.arg); int64(rem) < int64(w) {
				c.arg = wire.AcquireArg(wire.ArgLeaseMS(c.arg), uint32(rem))
			}
		}
		r := cl.tryEnqueue(c)
		if r == enqOK {
			cl.notify.unsubscribe()
			if h := cl.cfg.afterEnqueue; h != nil {
				h(c)
			}
			return nil
		}
		if r == enqUnsupported {
			cl.notify.unsubscribe()
			return ErrUnsupported
		}
		if cl.closed.Load() {
			cl.notify.unsubscribe()
			return ErrClosed
		}
		limit := giveUp
		if r == enqFull {
			limit = slotGiveUp
		} else {
			if err := cl.configErr(); err != nil {
				// Every connection failed auth or TLS: retrying will not
				// help, fail at once (R4, R5).
				cl.notify.unsubscribe()
				return err
			}
			if limit.Before(grace) && cl.firstConnecting() {
				limit = grace // a connection is being opened for the first time
			}
		}
		d := time.Until(limit)
		if d <= 0 {
			cl.notify.unsubscribe()
			if r == enqFull {
				return errNoSlot
			}
			return cl.connectErr()
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			cl.notify.unsubscribe()
			return ctx.Err()
		case <-cl.closing:
		}
		cl.notify.unsubscribe()
	}
}

// follow remembers the leader named by an M answer (protocol.md §7); an
// empty address forgets it. An address the client does not know yet gets a
// persistent connection of its own (bounded).
func (cl *Client) follow(addr string) {
	if addr == "" {
		cl.leader.Store(nil)
		return
	}
	if ep := cl.pool.Load().byAddr[addr]; ep != nil {
		cl.setLeader(ep)
		return
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		cl.log.Warn("ticketing: ignoring malformed leader address", "addr", addr)
		cl.leader.Store(nil)
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	old := cl.pool.Load()
	if ep := old.byAddr[addr]; ep != nil {
		cl.setLeader(ep)
		return
	}
	if cl.closed.Load() || old.extra >= maxExtraEndpoints {
		cl.leader.Store(nil)
		return
	}
	ep := cl.newEndpoint(addr, 1)
	p := &pool{
		eps:    append(append([]*endpoint(nil), old.eps...), ep),
		conns:  append(append([]*conn(nil), old.conns...), ep.conns...),
		byAddr: make(map[string]*endpoint, len(old.byAddr)+1),
		extra:  old.extra + 1,
	}
	for k, v := range old.byAddr {
		p.byAddr[k] = v
	}
	p.byAddr[addr] = ep
	cl.pool.Store(p)
	cl.log.Info("ticketing: following leader to a new address", "addr", addr)
	cl.wg.Add(len(ep.conns))
	for _, cn := range ep.conns {
		go cn.run()
	}
	cl.setLeader(ep)
}

// setLeader makes ep the known leader; when that is news, callers backing
// off after redirects (sleepRedirect) and the releaser try again at once.
func (cl *Client) setLeader(ep *endpoint) {
	if cl.leader.Swap(ep) != ep {
		cl.newLeader.broadcast()
		cl.rel.poke()
	}
}

// complete hands a finished call to its owner. Called without cn.mu.
func (cl *Client) complete(c *call) {
	switch c.owner {
	case ownerCaller:
		c.done <- struct{}{}
	case ownerAbandoned:
		if (c.op == wire.OpAcquire || c.op == wire.OpAcquireSet) && c.fail == failNone && c.status == wire.StatusGranted {
			// The caller gave up, but the grant won the race (protocol.md §5
			// "Cancel"): release that known token ourselves.
			cl.compensateGrant(c)
		}
		putCall(c)
		cl.abandoned.Add(-1) // after compensate queued its release (Drain)
	case ownerReleaser:
		cl.rel.completed(c)
	case ownerDropped:
		putCall(c)
	}
}

// ---------------------------------------------------------------------------
// Backoff

// backoffStep is the reconnect step before attempt n ≥ 1: 0.1 s, 0.2 s,
// 0.4 s … capped at 3.2 s.
func backoffStep(base, ceiling time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// jitter draws a delay uniformly from [step/2, step] (the redirect schedule).
func jitter(step time.Duration) time.Duration {
	if step <= 1 {
		return step
	}
	half := step / 2
	return half + rand.N(step-half+1)
}

// fullJitter draws a reconnect delay uniformly from [0, step] ("full
// jitter", architecture.md "Client library behaviour" R16): clients that
// lost one server at the same instant spread their reconnects over the
// whole step instead of bunching in its upper half. n draws uniformly from
// [0, k); nil is math/rand/v2's shared source.
func fullJitter(step time.Duration, n func(k int64) int64) time.Duration {
	if step <= 0 {
		return 0
	}
	if n == nil {
		n = rand.N[int64]
	}
	return time.Duration(n(int64(step) + 1))
}

func (cl *Client) backoffDelay(n int) time.Duration {
	return fullJitter(backoffStep(cl.cfg.backoffBase, cl.cfg.backoffCap, n), cl.cfg.randN)
}

// sleep waits d; false when the client closed meanwhile.
func (cl *Client) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-cl.closing:
		return false
	}
}

// redirectDelay is the jittered pause before the n-th (n ≥ 1) retry of a
// request that found no leader: 25 ms doubling to 200 ms (options.go).
func (cl *Client) redirectDelay(n int) time.Duration {
	return jitter(backoffStep(min(cl.cfg.backoffBase, redirectBackoffBase), redirectBackoffCap, n))
}

// sleepRedirect waits d, but returns early (nil) as soon as the client
// learns a leader other than known, the one it knew when the caller decided
// to back off — once per call: *woken records that it did, and later sleeps
// of the same call wait their whole delay. So a failover costs each caller
// one early retry, and M answers that point in a loop (stale leaders during
// a change) cannot keep every caller awake. The error is ctx's or
// ErrClosed.
func (cl *Client) sleepRedirect(ctx context.Context, d time.Duration, known *endpoint, woken *bool) error {
	if d <= 0 {
		return nil
	}
	var ch <-chan struct{}
	if !*woken {
		ch = cl.newLeader.subscribe()
		defer cl.newLeader.unsubscribe()
		if l := cl.leader.Load(); l != nil && l != known {
			*woken = true
			return nil // learned meanwhile
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ch:
		*woken = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-cl.closing:
		return ErrClosed
	}
}

// ---------------------------------------------------------------------------
// notifier: a broadcast for "something changed, look again", cheap when
// nobody waits.

type notifier struct {
	waiting atomic.Int32
	mu      sync.Mutex
	ch      chan struct{}
}

// subscribe returns a channel closed by the next broadcast. The caller
// re-checks its condition after subscribing, then waits, then unsubscribes.
func (n *notifier) subscribe() <-chan struct{} {
	n.waiting.Add(1)
	n.mu.Lock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	ch := n.ch
	n.mu.Unlock()
	return ch
}

func (n *notifier) unsubscribe() { n.waiting.Add(-1) }

func (n *notifier) broadcast() {
	if n.waiting.Load() == 0 {
		return
	}
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}

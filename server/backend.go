package server

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// backend is the lock state behind the connections: the sharded tables of
// a single node (*tables) or the raft node of a cluster member
// (*raftBackend, raftnode.go). A connection calls it once it has run the
// checks of protocol.md §2.1 (flags, duplicate req_id, role, key; for A the
// lease and wait). A backend appends the answers it knows at once to c.wbuf;
// a queued acquire (a replicated request: every request) is answered later
// through Server.Deliver, the one locktable.Sink of the server.
type backend interface {
	acquire(c *conn, now int64, req *wire.Request)
	release(c *conn, now int64, req *wire.Request)
	cancel(c *conn, now int64, req *wire.Request)
	// acquireSet and releaseSet serve S and X (protocol.md §12.2); ks is
	// the request's checked key set.
	acquireSet(c *conn, now int64, req *wire.Request, ks *wire.KeySet)
	releaseSet(c *conn, now int64, req *wire.Request, ks *wire.KeySet)
	// connGone: c closed; its waiters leave their queues silently, its
	// locks stay held until their leases end (§5).
	connGone(c *conn)

	// run starts the backend's goroutines (counted in Server.wg).
	run()
	// handOver is Shutdown's first step, while requests are still served:
	// a raft leader hands leadership to a caught-up voter and waits for its
	// clients to follow M.
	handOver()
	// drain runs once Server.draining is set: every queued acquire is
	// answered B SHUTTING_DOWN.
	drain()
	// stop is Shutdown's last step (bounded by ctx).
	stop(ctx context.Context)

	// eachTable calls fn with every lock table locked and the instant to
	// read it at (admin status and locks).
	eachTable(fn func(t *locktable.Table, now int64))
	// replicatedLabel is the label and remote address of a connection that
	// is not open here, as the cluster replicated them (protocol.md §12.3;
	// ok false: none known, always on a single node). Called from within
	// eachTable's fn.
	replicatedLabel(conn uint64) (label, addr string, ok bool)
	// counts are the active keys and waiters (admin status, metrics).
	counts() (keys, waiters int64)

	// The admin queries' parts that depend on the mode (protocol.md §8).
	// status fills the members of `status` the backend knows (role, raft
	// indexes, clock); cantGrant is why it cannot grant now ("" when it
	// can), asked once the server's own reasons (draining, limits) passed.
	status(st *wire.StatusReply)
	cantGrant(st *wire.StatusReply) string
	// members is the `members` reply's list.
	members() ([]wire.Member, error)
	// leaseRemainingMS is a held lock's remaining lease as the backend
	// enforces it (a cluster: the InheritedDeadline rule, issue #13).
	leaseRemainingMS(t *locktable.Table, li *locktable.LockInfo, now int64) int64
	// clockUnverified: `locks` cannot vouch for the leases (cluster clock
	// not verified).
	clockUnverified() bool
	// change checks a changing admin command (add-node, remove-node,
	// transfer-leader) can run here. It returns run, which makes the change
	// (it may block until ctx ends) and returns the reply; or a
	// *movedError (not the leader: answer M) or another error (answer E
	// BAD_ADMIN).
	change(cmd string, q *adminQuery) (run func(ctx context.Context) (any, error), err error)
	// leaderAddr is the client address an M answer names ("" unknown).
	leaderAddr() string
	// handOff takes a raft stream accepted on the peer port (true), or
	// leaves it a protocol connection (false).
	handOff(pc net.Conn) bool
}

// errNotCluster answers a changing admin command on a single node (the
// admin package matches the text, admin/members.go).
var errNotCluster = errors.New("not a cluster")

// movedError: a changing admin command reached a node that is not the
// leader; the answer is M naming leader (protocol.md §7).
type movedError struct{ leader string }

func (e *movedError) Error() string { return "not the leader" }

// tables is the single node's backend: keys sharded over Config.Shards lock
// tables, each behind its own mutex with its own timer goroutine.
type tables struct {
	s      *Server
	shards []*shard
	seed   maphash.Seed // shard choice
	// shared is written by every grant and release on any core: alone on
	// its cache lines, so that reading the fields around it (shards) does
	// not miss (docs/benchmarks.md).
	_        [64]byte
	shared   locktable.SharedCounts
	_        [64]byte
	shardCnt []*shardCounts // each shard's (counts.go), the set shard's last

	// Key sets (protocol.md §12.2) need all their keys in one table: the
	// keys of sets live in setSh while sets use them (backend_sets.go).
	// setKeys (on setMu) names them, each with whether it was idle at the
	// last tidy pass; nSetKeys is its size, read without the lock: while it
	// is 0 no key has moved and every request goes straight to its shard.
	// setTidyAt is the size beyond which an acquire first returns every
	// idle key; setIdleCap the idle keys kept moved (the set table's idle
	// cache). Lock order: setMu, then a shard's mu, then setSh.mu.
	nSetKeys   atomic.Int64
	setMu      sync.RWMutex
	setKeys    map[string]bool
	setTidyAt  int64
	setIdleCap int
	setSh      *shard
	tidyNs     atomic.Int64 // the set table's tidy period (setTidyPeriod)
}

type shard struct {
	mu    sync.Mutex
	t     *locktable.Table
	armed int64 // deadline the timer goroutine sleeps until (ns); MaxInt64 = none
	kick  chan struct{}
	cnt   shardCounts    // its active keys (counts.go): written under mu, on mu's line
	_     [128 - 88]byte // one shard per pair of cache lines: no false sharing of mu
}

func newTables(s *Server, n int, limits locktable.Limits, tokens locktable.TokenSource) *tables {
	b := &tables{s: s, seed: maphash.MakeSeed(), shards: make([]*shard, n)}
	for i := range b.shards {
		b.shards[i] = &shard{armed: math.MaxInt64, kick: make(chan struct{}, 1)}
		b.shardCnt = append(b.shardCnt, &b.shards[i].cnt)
	}
	b.setSh = &shard{armed: math.MaxInt64, kick: make(chan struct{}, 1)}
	b.shardCnt = append(b.shardCnt, &b.setSh.cnt)
	initShardCounts(&b.shared, b.shardCnt, limits.MaxKeys)
	for i, sh := range b.shards {
		sh.t = locktable.New(limits, tokens, b.shardCnt[i], s)
	}
	// The set table's idle cache is every shard's (the keys of sets stay
	// there while idle, backend_sets.go), and so is the bound on the idle
	// keys kept moved.
	setLimits := limits
	if setLimits.IdleCache == 0 {
		setLimits.IdleCache = locktable.DefaultIdleCache
	}
	setLimits.IdleCache = max(setLimits.IdleCache, 1) * n
	b.setIdleCap = setLimits.IdleCache
	b.setTidyAt = int64(b.setIdleCap)
	b.setSh.t = locktable.New(setLimits, tokens, b.shardCnt[n], s)
	b.setKeys = make(map[string]bool)
	b.tidyNs.Store(int64(setTidyPeriod))
	return b
}

func (b *tables) shardFor(key []byte) *shard {
	// maphash (AES-based, allocation-free) and a multiply-shift range
	// reduction instead of a byte-at-a-time hash and a division.
	h := maphash.Bytes(b.seed, key)
	return b.shards[(h>>32)*uint64(len(b.shards))>>32]
}

func (b *tables) acquire(c *conn, now int64, req *wire.Request) {
	b.route(c, now, req, (*tables).acquireLocked)
}

// lockedOp serves one request on sh, whose lock it holds and releases.
type lockedOp func(b *tables, sh *shard, c *conn, now int64, req *wire.Request)

// route runs op on the shard that holds req.Key: its own shard, or the set
// table while key sets have moved keys there (checked under the shard lock:
// a key moves only under it). Keys left idle in the set table go back in
// the set table's tidy passes (backend_sets.go).
func (b *tables) route(c *conn, now int64, req *wire.Request, op lockedOp) {
	sh := b.shardFor(req.Key)
	sh.mu.Lock()
	if b.nSetKeys.Load() != 0 {
		sh.mu.Unlock()
		b.setMu.RLock()
		sh = b.routeLocked(req.Key)
		sh.mu.Lock()
		op(b, sh, c, now, req)
		b.setMu.RUnlock()
		return
	}
	op(b, sh, c, now, req)
}

// acquireLocked serves A on sh, whose lock it releases.
func (b *tables) acquireLocked(sh *shard, c *conn, now int64, req *wire.Request) {
	owner := locktable.Owner{Conn: c.id, ReqID: req.ReqID}
	if b.s.draining.Load() {
		// Checked under the shard lock: Shutdown sets draining, then drains
		// each shard under its lock, so no waiter can slip in after.
		sh.mu.Unlock()
		c.busy(req.ReqID, wire.CodeShuttingDown)
		return
	}
	if req.WaitMS() > 0 && c.inflight.Load() >= c.maxInflight {
		// Queueing would exceed max_inflight (§3.3): B OVERLOADED instead,
		// but a free key is still granted at once.
		if _, _, held := sh.t.Holder(string(req.Key)); held {
			sh.mu.Unlock()
			c.busy(req.ReqID, wire.CodeOverloaded)
			return
		}
	}
	e := sh.t.Acquire(now, owner, req.Key, req.LeaseMS(), req.WaitMS())
	if e.Status == locktable.Queued {
		// Still under the shard lock, so no answer can be delivered before
		// the request is recorded as outstanding.
		c.addPending(req.ReqID)
	}
	sh.rearm()
	sh.mu.Unlock()
	switch e.Status {
	case locktable.Queued:
	case wire.StatusGranted:
		c.wbuf = wire.AppendGranted(c.wbuf, req.ReqID, e.Token, e.Queued)
	default:
		c.wbuf = wire.AppendStatus(c.wbuf, e.Status, e.Code, req.ReqID)
	}
}

func (b *tables) release(c *conn, now int64, req *wire.Request) {
	b.route(c, now, req, (*tables).releaseLocked)
}

func (b *tables) releaseLocked(sh *shard, c *conn, now int64, req *wire.Request) {
	e := sh.t.Release(now, locktable.Owner{Conn: c.id, ReqID: req.ReqID}, req.Key, req.Token())
	sh.rearm()
	sh.mu.Unlock()
	c.wbuf = wire.AppendStatus(c.wbuf, e.Status, e.Code, req.ReqID)
}

func (b *tables) cancel(c *conn, now int64, req *wire.Request) {
	b.route(c, now, req, (*tables).cancelLocked)
}

func (b *tables) cancelLocked(sh *shard, c *conn, now int64, req *wire.Request) {
	e := sh.t.Cancel(now, locktable.Owner{Conn: c.id, ReqID: req.ReqID}, req.Key, req.Target())
	sh.rearm()
	sh.mu.Unlock()
	c.wbuf = wire.AppendStatus(c.wbuf, e.Status, e.Code, req.ReqID)
}

func (b *tables) connGone(c *conn) {
	for _, sh := range b.all() {
		sh.mu.Lock()
		sh.t.DropConn(c.id)
		sh.rearm()
		sh.mu.Unlock()
	}
}

// all is every shard, the set shard last.
func (b *tables) all() []*shard { return append(b.shards[:len(b.shards):len(b.shards)], b.setSh) }

func (b *tables) run() {
	for _, sh := range b.all() {
		b.s.wg.Add(1)
		go b.runTimers(sh)
	}
}

func (b *tables) handOver() {}

func (b *tables) drain() {
	for _, sh := range b.all() {
		sh.mu.Lock()
		sh.t.DrainWaiters()
		sh.mu.Unlock()
	}
}

func (b *tables) stop(context.Context) {}

func (b *tables) eachTable(fn func(t *locktable.Table, now int64)) {
	now := b.s.nanotime()
	for _, sh := range b.all() {
		sh.mu.Lock()
		fn(sh.t, now)
		sh.mu.Unlock()
	}
}

func (b *tables) counts() (keys, waiters int64) {
	return exactKeys(&b.shared, b.shardCnt), b.shared.Waiters()
}

func (b *tables) replicatedLabel(uint64) (string, string, bool) { return "", "", false }

func (b *tables) status(*wire.StatusReply) {}

func (b *tables) cantGrant(*wire.StatusReply) string { return "" }

func (b *tables) members() ([]wire.Member, error) {
	return []wire.Member{{ID: b.s.cfg.NodeID, ClientAddr: b.s.Addr(), Role: wire.NodeSingle, Voter: true}}, nil
}

func (b *tables) leaseRemainingMS(_ *locktable.Table, li *locktable.LockInfo, _ int64) int64 {
	return li.LeaseRemainingMS
}

func (b *tables) clockUnverified() bool { return false }

func (b *tables) change(string, *adminQuery) (func(context.Context) (any, error), error) {
	return nil, errNotCluster
}

func (b *tables) leaderAddr() string { return "" }

func (b *tables) handOff(net.Conn) bool { return false }

// rearm wakes the shard's timer goroutine when the table's earliest deadline
// moved before the one it sleeps until: only a deadline armed since can have
// (EarliestArmed). Call with sh.mu held.
func (sh *shard) rearm() {
	if sh.t.EarliestArmed() >= sh.armed {
		return
	}
	if d, ok := sh.t.NextDeadline(); ok && d < sh.armed {
		sh.armed = d
		select {
		case sh.kick <- struct{}{}:
		default:
		}
	}
}

func (b *tables) runTimers(sh *shard) {
	s := b.s
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var tidyAt int64 // the set table's next tidy pass (0: none due)
	for {
		sh.mu.Lock()
		sh.t.Advance(s.nanotime())
		next, ok := sh.t.NextDeadline()
		if ok {
			sh.armed = next
		} else {
			sh.armed = math.MaxInt64
		}
		sh.mu.Unlock()
		wait := time.Hour
		if ok {
			wait = time.Duration(next - s.nanotime())
		}
		if sh == b.setSh {
			// keys idle in the set table since the last pass go back
			if now := s.nanotime(); tidyAt != 0 && now >= tidyAt {
				b.tidySetKeys()
				tidyAt = 0
			}
			if b.nSetKeys.Load() == 0 {
				tidyAt = 0
			} else if tidyAt == 0 {
				tidyAt = s.nanotime() + b.tidyNs.Load()
			}
			if tidyAt != 0 {
				wait = min(wait, time.Duration(tidyAt-s.nanotime()))
			}
		}
		t.Reset(max(wait, 0))
		select {
		case <-t.C:
		case <-sh.kick:
		case <-s.closed:
			return
		}
	}
}

var _ backend = (*tables)(nil)

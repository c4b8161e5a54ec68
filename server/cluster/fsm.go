package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// LeaderMeta is what the current leader announced in its OpLeaderStart.
type LeaderMeta struct {
	ID          string `json:"id"`
	ClientAddr  string `json:"client_addr"`
	Incarnation uint32 `json:"incarnation"`
	Start       int64  `json:"start"` // leader's wall clock at its start, ns
	// Shift moves every held lease's deadline into this leader's clock
	// (ns, added on every node when the LeaderStart is applied): the
	// offset between the previous leader's clock and this one's, as
	// this leader measured it with its monotonic clock (FSM.InheritShift).
	Shift int64 `json:"shift,omitempty"`
}

// NodeMeta is a member's replicated metadata.
type NodeMeta struct {
	ID          string `json:"id"`
	ClientAddr  string `json:"client_addr"`
	PeerAddr    string `json:"peer_addr"`
	Incarnation uint32 `json:"incarnation"`       // the process that joined under this id
	Durable     bool   `json:"durable"`           // has a data dir: may restart under its id
	Removed     bool   `json:"removed,omitempty"` // a tombstone: the id left the cluster and is never reused
}

// FSM is the replicated state machine: one locktable.Table, the fencing
// token counter (seeded once per cluster, protocol.md §6), the leader's
// announcement and member metadata.
type FSM struct {
	mu      sync.Mutex
	table   *locktable.Table
	tokens  *locktable.Counter
	counts  locktable.SharedCounts
	limits  locktable.Limits
	leader  LeaderMeta
	nodes   map[string]NodeMeta
	applied uint64
	out     locktable.Sink // called with mu held; must not block
	ks      wire.KeySet    // mu: the key set being applied
	labels  labelTable     // mu: the connections' replicated labels (labels.go)

	decodeMu sync.Mutex
	decoded  []Command // decodeMu: Apply's commands, reused entry after entry

	// The clock the lease deadlines in the table are in is the current
	// leader's wall clock (each LeaderStart shifts them into it). base is
	// this node's estimate of that clock against its own monotonic one:
	// the least (mono at apply − batch time) over the batches applied
	// since that LeaderStart; it is late by at most the quickest apply's
	// delay, so deadlines mapped through it are never early.
	mono     func() int64 // monotonic ns (tests replace it)
	lastTime int64        // the last applied batch's time, ns (snapshotted)
	base     int64
	baseOK   bool

	// Bytes of log applied since the last snapshot (entry data plus
	// logEntryOverhead each) and the size of that snapshot: what the
	// node's snapshot trigger sizes the in-memory log by (node.go
	// snapshotLoop).
	logBytes  atomic.Int64
	snapBytes atomic.Int64
}

// logEntryOverhead approximates what one raft log entry costs in memory
// besides its data (the raft.Log struct and the store's map slot), bytes.
const logEntryOverhead = 128

// NewFSM returns an empty state machine delivering answers to out (the
// table's sink, called with the FSM lock held: it must not block).
func NewFSM(limits locktable.Limits, out locktable.Sink) *FSM {
	f := &FSM{limits: limits, out: out, nodes: map[string]NodeMeta{}}
	origin := time.Now()
	f.mono = func() int64 { return int64(time.Since(origin)) }
	f.tokens = locktable.NewCounter(1)
	f.tokens.Restore(0)
	f.table = locktable.New(limits, f.tokens, &f.counts, out)
	return f
}

// Apply implements raft.FSM: one batch, applied in order at the batch's time.
func (f *FSM) Apply(l *raft.Log) any {
	f.logBytes.Add(int64(len(l.Data)) + logEntryOverhead)
	if l.Type != raft.LogCommand {
		return nil
	}
	// raft applies from one goroutine (runFSM); decodeMu only keeps
	// direct callers (tests) from sharing the slice.
	f.decodeMu.Lock()
	defer f.decodeMu.Unlock()
	b, err := decodeBatchInto(f.decoded, l.Data)
	f.decoded = b.Cmds[:0]
	if err != nil {
		// Skipping a committed entry would leave this node's table apart
		// from every other node's (an entry from a newer version, or a
		// corrupt log): stop instead.
		panic(fmt.Sprintf("cluster: cannot apply log entry %d: %v", l.Index, err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = l.Index
	f.lastTime = b.Time
	if off := f.mono() - b.Time; !f.baseOK || off < f.base {
		f.base, f.baseOK = off, true
	}
	for i := range b.Cmds {
		f.apply(b.Time, &b.Cmds[i])
	}
	clear(b.Cmds) // the keys alias the entry: do not keep it alive
	return nil
}

// InheritShift is what a new leader whose wall clock reads wallNow (ns)
// adds to every held lease's deadline to move it into its own clock: the
// offset from the previous leader's clock, measured against this node's
// monotonic clock when it applied that leader's batches (docs/architecture.md
// "Leases across leader changes"). Whatever this node's wall clock says, an
// inherited lease then ends when it would have by the granting leader's
// clock, late by at most the quickest of those applies' delay — never early.
// 0 when nothing was applied yet (then no lease is held).
func (f *FSM) InheritShift(wallNow int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.baseOK {
		return 0
	}
	return f.base - (f.mono() - wallNow)
}

// LastBatchTime is the time stamped on the last applied batch (ns, the
// leader's wall clock when that leader stamped it); 0 before any.
func (f *FSM) LastBatchTime() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastTime
}

func (f *FSM) apply(now int64, c *Command) {
	owner := locktable.Owner{Conn: c.Conn, ReqID: c.ReqID}
	if c.Op <= OpDropConn || c.Op == OpAcquireSet || c.Op == OpReleaseSet {
		f.labels.counted(f.table)
	}
	switch c.Op {
	case OpAcquire:
		if f.tokens.Last() == 0 {
			return // no leader started the domain yet: cannot happen in a well-formed log
		}
		e := f.table.Acquire(now, owner, c.Key, wire.ArgLeaseMS(c.Arg), wire.ArgWaitMS(c.Arg))
		if e.Status != locktable.Queued {
			f.out.Deliver(e)
		}
	case OpRelease:
		f.out.Deliver(f.table.Release(now, owner, c.Key, c.Arg))
	case OpAcquireSet, OpReleaseSet:
		// one replicated command per set operation, applied atomically (§12.2)
		if len(c.Key) == 0 || f.tokens.Last() == 0 {
			return
		}
		if code, _ := wire.ParseKeySet(&f.ks, c.Key[0], c.Key[1:]); code != wire.CodeNone {
			return // the leader checked it: cannot happen in a well-formed log
		}
		keys := f.ks.Keys[:f.ks.N]
		if c.Op == OpReleaseSet {
			f.out.Deliver(f.table.ReleaseSet(now, owner, keys, c.Arg))
			return
		}
		e := f.table.AcquireSet(now, owner, keys, wire.ArgLeaseMS(c.Arg), wire.ArgWaitMS(c.Arg))
		if e.Status != locktable.Queued {
			f.out.Deliver(e)
		}
	case OpCancel:
		f.out.Deliver(f.table.Cancel(now, owner, c.Key, wire.ArgTarget(c.Arg)))
	case OpExpire:
		f.table.Expire(now, c.Key, c.Arg)
	case OpWaitTimeout:
		f.table.WaitTimeout(owner)
	case OpDropConn:
		f.table.DropConn(c.Conn)
		f.labels.orphan(f.table, c.Conn)
	case OpLabel:
		if label, addr, ok := decodeLabel(c.Key); ok {
			f.labels.set(c.Conn, label, addr)
		}
	case OpLeaderStart:
		var m LeaderMeta
		if json.Unmarshal(c.Key, &m) != nil {
			return
		}
		m.Start = now
		f.leader = m
		// Deadlines move into the new leader's clock, and this node's
		// estimate of the clock follows: the LeaderStart's batch is the
		// first sample of it.
		if m.Shift != 0 {
			f.table.ShiftLeases(m.Shift)
		}
		f.base = f.mono() - now
		// Waiters queued on other nodes' connections are gone with their
		// leader (protocol.md §7): drop them silently. So are this node's
		// own, from an earlier term of its leadership: when it stopped
		// serving, their requests were answered U or (after a clean
		// hand-over) M, "not executed" — a later grant to one of them would
		// break that answer. A leader starting to serve has no waiter yet.
		for _, conn := range f.table.WaitingConns() {
			f.table.DropConn(conn)
		}
		// Every connection sends its label again to the new leader: the
		// entries of those that hold nothing now go (labels.go).
		f.labels.orphanAll(f.table)
		if f.tokens.Last() == 0 {
			f.tokens.Restore(locktable.FirstToken(now/1e6) - 1)
		}
	case OpNodeMeta:
		var m NodeMeta
		if json.Unmarshal(c.Key, &m) != nil || m.ID == "" {
			return
		}
		if m.Removed {
			// Keep a tombstone (one per removal: bounded by the operator's
			// membership changes), so the id is never added again.
			old := f.nodes[m.ID]
			f.nodes[m.ID] = NodeMeta{ID: m.ID, Incarnation: old.Incarnation, Durable: old.Durable, Removed: true}
			return
		}
		if m.PeerAddr == "" && m.ClientAddr == "" {
			delete(f.nodes, m.ID) // written by earlier versions for a removal
			return
		}
		f.nodes[m.ID] = m
	default:
		panic(fmt.Sprintf("cluster: unknown command op %d", c.Op)) // DecodeBatch lets none through
	}
}

// fsmState is the snapshot encoding.
type fsmState struct {
	Table     locktable.State     `json:"table"`
	LastToken uint64              `json:"last_token"`
	Leader    LeaderMeta          `json:"leader"`
	Nodes     map[string]NodeMeta `json:"nodes"`
	Time      int64               `json:"time,omitempty"` // the last applied batch's time, ns
	// Labels are the replicated connection labels (labels.go), sorted by
	// connection; encoded after the keys (snapcodec.go, version 3).
	Labels   []LabelEntry `json:"-"`
	LabelOps int          `json:"label_ops,omitempty"` // lock commands since the last sweep of orphans
}

// state captures the FSM's state (keys in no particular order); the caller
// holds f.mu.
func (f *FSM) state() fsmState {
	nodes := make(map[string]NodeMeta, len(f.nodes))
	for k, v := range f.nodes {
		nodes[k] = v
	}
	return fsmState{Table: f.table.SnapshotUnordered(), LastToken: f.tokens.Last(), Leader: f.leader, Nodes: nodes, Time: f.lastTime,
		Labels: f.labels.entries(), LabelOps: f.labels.ops}
}

// Snapshot implements raft.FSM.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Only the capture holds the lock (Apply waits for it); raft calls
	// Persist afterwards, concurrently with Apply, and that sorts and
	// encodes. Everything applied so far is in this snapshot.
	f.logBytes.Store(0)
	return &fsmSnapshot{st: f.state(), size: &f.snapBytes}, nil
}

// LogBytes reports the bytes of log applied since the last snapshot and
// that snapshot's size, bytes.
func (f *FSM) LogBytes() (sinceSnapshot, snapshot int64) {
	return f.logBytes.Load(), f.snapBytes.Load()
}

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := decodeSnapshot(rc)
	if err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tokens := locktable.NewCounter(1)
	tokens.Restore(s.LastToken)
	f.tokens = tokens
	f.counts = locktable.SharedCounts{}
	f.table = locktable.New(f.limits, f.tokens, &f.counts, f.out)
	if err := f.table.Restore(s.Table); err != nil {
		return err
	}
	f.labels = restoreLabels(s.Labels, s.LabelOps)
	f.leader = s.Leader
	f.nodes = s.Nodes
	if f.nodes == nil {
		f.nodes = map[string]NodeMeta{}
	}
	// The snapshot's deadlines are in the clock of the leader that wrote
	// its last batch, which was at or before s.Time by that clock (a
	// snapshot from an earlier version: its latest grant): mapped from
	// now, they are late by the snapshot's age, never early.
	f.lastTime, f.baseOK = s.Time, false
	ref := s.Time
	for _, ks := range s.Table.Keys {
		ref = max(ref, ks.Grant)
	}
	if ref != 0 {
		f.base, f.baseOK = f.mono()-ref, true
	}
	return nil
}

// fsmSnapshot is a captured state, encoded by Persist (snapcodec.go, keys
// sorted) straight into raft's sink: no second copy of the encoding.
type fsmSnapshot struct {
	st   fsmState
	size *atomic.Int64 // receives the encoding's size, bytes
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	s.st.Table.Sort()
	cw := &countingWriter{w: sink}
	bw := bufio.NewWriterSize(cw, 64<<10)
	err := encodeSnapshot(bw, &s.st)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("cluster: persist snapshot: %w", err)
	}
	s.size.Store(cw.n)
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// With runs fn with the FSM locked (reads of the table for admin queries and
// the leader's timers).
func (f *FSM) With(fn func(t *locktable.Table)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.table)
}

// Leader returns the last leader announcement applied.
func (f *FSM) Leader() LeaderMeta {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader
}

// Nodes returns the replicated member metadata.
func (f *FSM) Nodes() map[string]NodeMeta {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]NodeMeta, len(f.nodes))
	for k, v := range f.nodes {
		out[k] = v
	}
	return out
}

// Applied returns the index of the last applied entry.
func (f *FSM) Applied() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// StateDigest returns the lock table state (for "all nodes report the same
// lock table" checks) and the last token.
func (f *FSM) StateDigest() (locktable.State, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.table.Snapshot(), f.tokens.Last()
}

// LastToken returns the last fencing token granted.
func (f *FSM) LastToken() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens.Last()
}

// Counts returns active keys and waiters.
func (f *FSM) Counts() (keys, waiters int64) { return f.counts.Keys(), f.counts.Waiters() }

package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// Errors callers branch on.
var (
	// ErrNotLeader: this node is not the serving leader; answer M.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrMembership: a membership change failed or another is in progress.
	ErrMembership = errors.New("cluster: membership change refused")
	// ErrClockSkew: leadership was not handed to a node whose clock this
	// leader has not verified within MaxClockSkew.
	ErrClockSkew = errors.New("cluster: leadership transfer refused")
)

// Peer is an initial voter: id and peer (raft) address.
type Peer struct {
	ID   string
	Addr string
}

// Settings are a cluster member's raft settings as the operator gives them
// (server.ClusterConfig embeds them). Zero timings take the defaults below.
type Settings struct {
	Peers     []Peer // initial voters id=peer_host:port: 3 or 5 (this node among them)
	Bootstrap bool   // first start of a new cluster only

	MaxClockSkew time.Duration // default 500 ms
	// Raft timings; zero values take DefaultTimings.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// TransferTimeout bounds a leadership hand-over (SIGTERM,
	// transfer-leader); default 3 s.
	TransferTimeout time.Duration
	// SnapshotBytes: a node snapshots its state machine and compacts its
	// log once this many bytes of log were applied since the last snapshot
	// (or twice that snapshot's size, if larger); default 2 MiB.
	SnapshotBytes int64
}

// Config configures one cluster node: the operator's Settings and what the
// server derives (addresses, token, TLS, limits). DefaultTimings gives the
// raft timing defaults (failover under 1 s on a LAN).
type Config struct {
	Settings
	NodeID     string
	ClientAddr string // advertised client address, named by M answers
	PeerAddr   string // advertised peer address, dialed by other nodes
	PeerToken  string
	TLSClient  *tls.Config // for dialing peers; nil = plaintext
	DataDir    string      // durable raft log and snapshots; "" = in memory

	Limits      locktable.Limits
	Logger      *slog.Logger
	Now         func() time.Time // wall clock; tests skew it
	Incarnation uint32           // 24-bit id of this process; 0 = random
}

// Default raft timings. Failover takes about 2.5× the heartbeat timeout
// (a follower notices in 1–2×, and one that still knows the dead leader
// refuses the first pre-vote), so 200 ms gives p99 under 1 s where 300 ms
// did not (docs/benchmarks.md "Cluster failover"). The leader lease equals
// the heartbeat timeout, the most raft allows: a leader steps down only
// after 200 ms without an answer from a quorum (docs/testing.md).
const (
	DefaultHeartbeatTimeout   = 200 * time.Millisecond
	DefaultElectionTimeout    = 200 * time.Millisecond
	DefaultLeaderLeaseTimeout = 200 * time.Millisecond
	DefaultTransferTimeout    = 3 * time.Second
	DefaultSnapshotBytes      = 2 << 20
	DefaultMaxClockSkew       = 500 * time.Millisecond
)

// Node is one running cluster member.
type Node struct {
	cfg         Config
	log         *slog.Logger
	now         func() time.Time
	incarnation uint32
	fsm         *FSM
	raft        *raft.Raft
	trans       *raft.NetworkTransport
	stream      *StreamLayer
	out         locktable.Sink
	onLost      func(clean bool)
	prop        *proposer
	clock       *clockHealth
	serving     atomic.Bool
	handover    atomic.Bool   // stop taking commands: leadership is being handed over
	cleanLoss   atomic.Bool   // every command of ours was applied before leadership went
	lostGen     atomic.Uint64 // counts completed onLost calls (Handover waits for one)
	inherited   atomic.Uint64 // the last token granted before this node started leading
	beatUntil   atomic.Int64  // leader: clock beats until then (unix ns, this clock; ClockBeat)
	memberMu    sync.Mutex    // one membership change at a time
	removed     atomic.Bool   // learned it was removed from the configuration (removed.go)
	removedWhy  atomic.Value  // string: how it learned
	wasMember   atomic.Bool   // its own configuration listed it at some point
	selfAbsent  atomic.Bool   // its own latest configuration leaves it out, after listing it
	peerLeader  atomic.Value  // string: the serving leader's client address, as its peers last said
	closeOnce   sync.Once
	done        chan struct{}
	wg          sync.WaitGroup
	stores      []io.Closer
}

// New starts a node: raft with its stores, the stream layer (the server
// hands it inbound raft streams with HandOff), and the leadership loop.
// out receives answers for this node's connections; onLost is called when
// this node stops being the serving leader: the server answers every request
// in flight U, or M when clean (a hand-over that first saw every command of
// ours applied: the new leader drops our waiters, nothing of ours is left
// undecided in the log).
func New(cfg Config, out locktable.Sink, onLost func(clean bool)) (*Node, error) {
	cfg.setDefaults()
	inc := cfg.Incarnation
	for inc == 0 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		inc = binary.BigEndian.Uint32(b[:]) & (1<<IncarnationBits - 1)
	}
	n := &Node{
		cfg: cfg, log: cfg.Logger.With("node", cfg.NodeID), now: cfg.Now, incarnation: inc,
		out: out, onLost: onLost, done: make(chan struct{}),
	}
	n.fsm = NewFSM(cfg.Limits, leaderSink{n})
	n.clock = newClockHealth(n)

	addr, err := net.ResolveTCPAddr("tcp", cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: peer address %q: %w", cfg.PeerAddr, err)
	}
	n.stream = NewStreamLayer(addr, cfg.PeerToken, cfg.TLSClient)
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.stream,
		MaxPool: 4,
		Timeout: 2 * time.Second,
		Logger:  newHCLogger(n.log, "raft-net"),
	})
	logs, stable, snaps, err := n.openStores()
	if err != nil {
		return nil, err
	}
	r, err := raft.NewRaft(n.raftConfig(), n.fsm, logs, stable, snaps, n.trans)
	if err != nil {
		n.closeStores()
		return nil, fmt.Errorf("cluster: raft: %w", err)
	}
	n.raft = r
	n.prop = newProposer(n)
	if cfg.Bootstrap {
		if err := n.bootstrap(); err != nil {
			n.Shutdown(context.Background())
			return nil, err
		}
	}
	n.wg.Add(4)
	go n.removalLoop()
	go n.leadershipLoop()
	go n.prop.run()
	go n.snapshotLoop()
	return n, nil
}

// setDefaults fills the zero settings with the defaults.
func (cfg *Config) setDefaults() {
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = DefaultElectionTimeout
	}
	if cfg.LeaderLeaseTimeout == 0 {
		cfg.LeaderLeaseTimeout = DefaultLeaderLeaseTimeout
	}
	if cfg.TransferTimeout == 0 {
		cfg.TransferTimeout = DefaultTransferTimeout
	}
	if cfg.MaxClockSkew == 0 {
		cfg.MaxClockSkew = DefaultMaxClockSkew
	}
	if cfg.SnapshotBytes == 0 {
		cfg.SnapshotBytes = DefaultSnapshotBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// raftConfig is raft's configuration for this node.
func (n *Node) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.NodeID)
	rc.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	rc.ElectionTimeout = n.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = n.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	// At most maxInflight entries (and a few of the leader's own) are
	// ever waiting to be sent, and raft allocates a slice of
	// MaxAppendEntries pointers for every AppendEntries it sends and every
	// commit it applies: 256 made that most of a leader's allocation
	// (docs/benchmarks.md "Cluster"). A follower catching up from the log
	// gets 32 batched entries (up to ~1 MB) per RPC.
	rc.MaxAppendEntries = 32
	rc.BatchApplyCh = true
	// Batched entries are 10–30 KB, so the log is sized by bytes, not
	// entries, or it alone holds hundreds of MB (issue #7 notes):
	// snapshotLoop snapshots once SnapshotBytes of log (or twice the last
	// snapshot, which holds only the held keys) were applied, about every
	// 250 ms at 200 k ops/s. raft's own entry-count trigger stays as a
	// backstop for many tiny entries. 64 trailing entries let a follower a
	// few hundred ms behind catch up from the log, not a snapshot.
	rc.TrailingLogs = 64
	rc.SnapshotThreshold = 8192
	rc.SnapshotInterval = 2 * time.Second
	rc.Logger = newHCLogger(n.log, "raft")
	return rc
}

// openStores opens the durable raft log and snapshots in DataDir, or
// in-memory stores without one.
func (n *Node) openStores() (raft.LogStore, raft.StableStore, raft.SnapshotStore, error) {
	dir := n.cfg.DataDir
	if dir == "" {
		ms := raft.NewInmemStore()
		return ms, ms, newMemSnapshotStore(), nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	bs, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cluster: raft store: %w", err)
	}
	n.stores = append(n.stores, bs)
	fs, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		n.closeStores()
		return nil, nil, nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	return bs, bs, fs, nil
}

// bootstrap makes the initial voters the configuration of a new cluster; a
// node with raft state already skips it.
func (n *Node) bootstrap() error {
	var servers []raft.Server
	for _, p := range n.cfg.Peers {
		servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr), Suffrage: raft.Voter})
	}
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		n.log.Info("bootstrap skipped: this node already has raft state")
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	return nil
}

// snapshotInterval is how often snapshotLoop looks at the log's size.
const snapshotInterval = 50 * time.Millisecond

// snapshotLoop snapshots the state machine (and so compacts the in-memory
// log to TrailingLogs entries) once the log applied since the last
// snapshot reaches max(SnapshotBytes, 2 × that snapshot's size): the log's
// memory stays bounded by bytes whatever the batch size, and a large table
// is not re-serialized more often than its size justifies.
func (n *Node) snapshotLoop() {
	defer n.wg.Done()
	t := time.NewTicker(snapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		since, last := n.fsm.LogBytes()
		if since < max(n.cfg.SnapshotBytes, 2*last) {
			continue
		}
		// raft answers the future on shutdown too (ErrRaftShutdown), and
		// Server.Shutdown bounds the whole shutdown by its budget.
		err := n.raft.Snapshot().Error()
		if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !errors.Is(err, raft.ErrRaftShutdown) {
			// A failing store (a full disk) is retried once a second, not
			// at every tick.
			n.log.Warn("snapshot failed; retrying in 1 s", "err", err)
			select {
			case <-n.done:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// leaderSink is the state machine's sink: it forwards an answer to the
// server only while this node serves as leader and the connection is one of
// ours (every node applies every command; only the leader answers).
type leaderSink struct{ n *Node }

func (l leaderSink) Deliver(e locktable.Effect) {
	if l.n.serving.Load() && IncarnationOf(e.Owner.Conn) == l.n.incarnation {
		l.n.out.Deliver(e)
	}
}

// Incarnation is this process's 24-bit id; connection ids carry it.
func (n *Node) Incarnation() uint32 { return n.incarnation }

// HandOff gives an authenticated inbound raft stream to the transport.
func (n *Node) HandOff(c net.Conn) { n.stream.HandOff(c) }

// Serving reports whether this node is the leader and has started serving
// (its LeaderStart committed): only then may it execute A, R, C.
func (n *Node) Serving() bool { return n.serving.Load() }

// LeaderClientAddr returns the current leader's client address, "" when
// unknown (protocol.md §7: never its raft address).
func (n *Node) LeaderClientAddr() string {
	_, id := n.raft.LeaderWithID()
	if id == "" && n.outside() {
		// Removed: raft hears from no leader any more, but the cluster
		// goes on; name the leader its peers named (removed.go), so that
		// `health` and clients asking here reach the cluster's
		// configuration, not this node's stale one.
		a, _ := n.peerLeader.Load().(string)
		return a
	}
	if id == "" || string(id) == n.cfg.NodeID && (n.handover.Load() || !n.serving.Load()) {
		// No leader, or ourselves while not (or no longer) serving: naming
		// ourselves would send clients in a loop.
		return ""
	}
	m := n.fsm.Leader()
	if m.ID == string(id) {
		return m.ClientAddr
	}
	// A new leader whose LeaderStart is not applied here yet (an old
	// leader right after handing over, a lagging follower): name it from
	// the member metadata, so clients of this node learn the new leader's
	// address, even one they were never given (a node added later).
	return n.fsm.Nodes()[string(id)].ClientAddr
}

// ServeEpoch changes whenever this node stops serving as leader: what a
// connection replicated in one serving term (its label, labels.go) must be
// sent again in the next.
func (n *Node) ServeEpoch() uint64 { return n.lostGen.Load() }

// Submit queues commands for the next batch (encoded at once: the caller
// may reuse their keys' memory when it returns). It fails with
// ErrNotLeader when this node is not serving.
func (n *Node) Submit(cmds ...Command) error {
	if !n.serving.Load() || n.handover.Load() {
		return ErrNotLeader
	}
	n.prop.add(cmds)
	return nil
}

// FSM exposes the state machine (admin reads, tests).
func (n *Node) FSM() *FSM { return n.fsm }

// Raft exposes the raft instance (admin reads, tests).
func (n *Node) Raft() *raft.Raft { return n.raft }

// leadershipLoop follows raft's leader notifications: on gaining
// leadership, wait until every earlier entry is applied (Barrier), commit a
// LeaderStart (which drops other nodes' waiters and seeds the token counter
// of a new cluster), then serve and run the leader's timers and clock
// sampler; on losing it, stop serving and fail every request in flight.
func (n *Node) leadershipLoop() {
	defer n.wg.Done()
	var stop context.CancelFunc
	var loops sync.WaitGroup
	lose := func() {
		if stop != nil {
			stop()
			loops.Wait()
			stop = nil
		}
		if n.serving.Swap(false) {
			n.prop.dropPending()
			clean := n.cleanLoss.Swap(false)
			n.log.Warn("stopped serving as leader", "clean_handover", clean)
			if n.onLost != nil {
				n.onLost(clean)
			}
			n.lostGen.Add(1)
		}
		n.handover.Store(false)
	}
	for {
		select {
		case <-n.done:
			lose()
			return
		case isLeader := <-n.raft.LeaderCh():
			if !isLeader {
				lose()
				continue
			}
			lose()
			ctx, cancel := context.WithCancel(context.Background())
			stop = cancel
			loops.Add(1)
			go func() {
				defer loops.Done()
				n.lead(ctx, &loops)
			}()
		}
	}
}

func (n *Node) lead(ctx context.Context, loops *sync.WaitGroup) {
	if err := n.raft.Barrier(5 * time.Second).Error(); err != nil {
		n.log.Warn("leader barrier failed", "err", err)
		return
	}
	// Every earlier entry is applied: move the inherited leases into this
	// node's clock (docs/architecture.md "Leases across leader changes").
	now := n.now().UnixNano()
	shift := n.fsm.InheritShift(now)
	// The shift is the previous leader's clock offset from this node's,
	// plus how late this node applied the freshest of that leader's batches
	// (issue #29 item 3: after a restart that was seconds, and it was
	// reported as a clock fault). The leader's clock beat bounds the
	// lateness of a caught-up node to about ClockBeat; a shift beyond
	// max_clock_skew plus that is reported, without calling it a clock
	// fault: the clock check (status.clock) decides that.
	if time.Duration(shift).Abs() > n.cfg.MaxClockSkew+ClockBeat {
		n.log.Warn("inherited leases moved by more than max_clock_skew: the previous leader's clock differed from this node's, or this node applied its last entries late",
			"shift", time.Duration(shift).Round(time.Millisecond))
	} else {
		n.log.Info("inherited leases moved into this node's clock", "shift", time.Duration(shift).Round(time.Millisecond))
	}
	meta, _ := json.Marshal(LeaderMeta{ID: n.cfg.NodeID, ClientAddr: n.cfg.ClientAddr, Incarnation: n.incarnation, Shift: shift})
	node, _ := json.Marshal(NodeMeta{ID: n.cfg.NodeID, ClientAddr: n.cfg.ClientAddr, PeerAddr: n.cfg.PeerAddr, Incarnation: n.incarnation, Durable: n.cfg.DataDir != ""})
	b := Batch{Time: now, Cmds: []Command{
		{Op: OpLeaderStart, Key: meta, Arg: uint64(n.incarnation)},
		{Op: OpNodeMeta, Key: node},
	}}
	if err := n.raft.Apply(AppendBatch(nil, &b), 5*time.Second).Error(); err != nil {
		n.log.Warn("leader start failed", "err", err)
		return
	}
	// Applied here, and nothing else can be until this node serves: the
	// leases held now are the inherited ones.
	n.inherited.Store(n.fsm.LastToken())
	n.beatUntil.Store(n.now().UnixNano() + int64(beatWindow))
	select {
	case <-ctx.Done():
		return
	default:
	}
	// Sample the clocks before serving (bounded by firstVerdictWait): a
	// leader that served at once would answer its first acquires
	// B CLOCK_UNHEALTHY ("not sampled yet") after every election and
	// hand-over; not serving yet, it answers M with no address and clients
	// retry within their budget. A measured skew beyond the bound is a
	// verdict too: then it serves and acquires fail closed.
	verdict := n.clock.start()
	loops.Add(1)
	go func() { defer loops.Done(); n.clock.run(ctx) }()
	select {
	case <-verdict:
	case <-time.After(firstVerdictWait):
		n.log.Warn("clock health not verified before serving; acquires fail closed until it is", "waited", firstVerdictWait)
	case <-ctx.Done():
		return
	}
	n.serving.Store(true)
	n.log.Info("serving as leader", "term", n.raft.CurrentTerm())
	// The samples taken before serving identified the peers' processes;
	// record them now (checkIncarnation needs a serving leader), not a
	// round later: a member that restarts without its state in between
	// would otherwise be recorded as the first process under its id.
	loops.Add(1)
	go func() { defer loops.Done(); n.runTimers(ctx) }()
	for _, s := range n.clock.Samples() {
		if s.Incarn != 0 {
			n.checkIncarnation(s.ID, peerStatus{NodeID: s.ID, Incarnation: s.Incarn, Durable: s.Durable, Advertise: s.ClientAd})
		}
	}
}

// firstVerdictWait bounds how long a new leader waits for its first clock
// verdict before serving.
const firstVerdictWait = time.Second

// runTimers proposes the expiries and wait timeouts that the leader's clock
// says are due. Inherited leases were moved into its clock by its
// LeaderStart and end max_clock_skew after their deadline
// (docs/architecture.md "Leases across leader changes").
func (n *Node) runTimers(ctx context.Context) {
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	proposed := map[locktable.Due]time.Time{}
	var beatAt int64 // when the last clock beat was proposed (ns, this clock)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := n.now()
		nowNs := now.UnixNano()
		inherited := n.inherited.Load()
		skew := int64(n.cfg.MaxClockSkew)
		var cmds []Command
		n.fsm.With(func(tb *locktable.Table) {
			tb.Due(nowNs, func(d locktable.Due) bool {
				if d.Kind == locktable.DueLease && d.Token <= inherited && nowNs < InheritedDeadline(d.At, skew) {
					return true
				}
				if at, ok := proposed[d]; ok && now.Sub(at) < time.Second {
					return true
				}
				proposed[d] = now
				switch d.Kind {
				case locktable.DueLease:
					cmds = append(cmds, Command{Op: OpExpire, Key: []byte(d.Key), Arg: d.Token})
				case locktable.DueWait:
					cmds = append(cmds, Command{Op: OpWaitTimeout, Conn: d.Owner.Conn, ReqID: d.Owner.ReqID})
				}
				return len(cmds) < 4096
			})
		})
		for d, at := range proposed {
			if now.Sub(at) > 2*time.Second {
				delete(proposed, d)
			}
		}
		if len(cmds) > 0 {
			_ = n.Submit(cmds...)
		} else if keys, _ := n.fsm.Counts(); keys > 0 && nowNs < n.beatUntil.Load() && nowNs-max(n.fsm.LastBatchTime(), beatAt) >= int64(ClockBeat) {
			beatAt = nowNs
			n.clockBeat(nowNs)
		}
	}
}

// ClockBeat: while locks are held (a lease may have to be inherited), no
// batch was committed for this long, and a node may be catching up (for
// beatWindow after this leader started, and after its clock sampler saw a
// peer come back: a sample that succeeds after failures, or a new
// incarnation), the leader commits an empty batch stamped with its clock.
// Every node's estimate of the leader's clock (FSM.InheritShift) is the
// least apply delay over that leader's batches; without a beat, a node that
// restarted (or was cut off, or paused) and caught up applied the last
// batches seconds after they were stamped and kept that lateness until the
// next write, and elected next it moved every lease later by it (issue #29
// item 3). With the beat, a caught-up node's estimate is late by at most
// about ClockBeat: an inherited lease ends at most about that much later
// per leader change. A cluster without locks, or with every node in
// contact, writes nothing.
const ClockBeat = 100 * time.Millisecond

// beatWindow is how long the clock beats go on after their trigger: time
// for a node that came back to catch up.
const beatWindow = 5 * time.Second

// clockBeat proposes the empty batch without waiting for it (the timers
// go on); a failed one is simply retried a beat later.
func (n *Node) clockBeat(now int64) {
	b := Batch{Time: now}
	_ = n.raft.Apply(AppendBatch(nil, &b), time.Second)
}

// EnforcedDeadline is when this node, as the serving leader, expires the
// lease with token and recorded deadline at (ns): InheritedDeadline for a
// lease granted before it started leading, otherwise at. On a node that
// does not serve it is at (the leader enforces).
func (n *Node) EnforcedDeadline(token uint64, at int64) int64 {
	if n.serving.Load() && token <= n.inherited.Load() {
		return InheritedDeadline(at, int64(n.cfg.MaxClockSkew))
	}
	return at
}

// InheritedDeadline is when a new leader expires a lease granted before it
// started leading, whose recorded deadline is at (ns, already moved into
// this leader's clock by its LeaderStart: FSM.InheritShift): max_clock_skew
// later, a margin for a granting leader's clock that stepped within the
// bound during its term. The margin is added to the deadline as granted
// (moved, never extended, by each LeaderStart), so however many leader
// changes happen, a lease ends within grant + lease + max_clock_skew (+ the
// milliseconds each take-over's measurement may be late), whatever the new
// leader's own clock says; and never before its holder's deadline.
func InheritedDeadline(at, maxSkew int64) int64 {
	if at > math.MaxInt64-maxSkew {
		return math.MaxInt64
	}
	return at + maxSkew
}

// Shutdown hands leadership to a caught-up voter when this node leads
// (bounded by TransferTimeout), then stops raft and closes the stores.
func (n *Node) Shutdown(ctx context.Context) error {
	var err error
	n.closeOnce.Do(func() {
		if n.raft != nil && n.raft.State() == raft.Leader {
			if terr := n.Handover(""); terr != nil {
				n.log.Warn("leadership transfer before shutdown failed; stopping anyway", "err", terr)
			}
		}
		close(n.done)
		if n.prop != nil {
			n.prop.close()
		}
		if n.raft != nil {
			err = n.raft.Shutdown().Error()
		}
		n.stream.Close()
		n.trans.Close()
		n.wg.Wait()
		n.closeStores()
	})
	return err
}

func (n *Node) closeStores() {
	for _, s := range n.stores {
		s.Close()
	}
}

// Handover hands leadership to id (any caught-up voter when empty) cleanly:
// stop taking commands (new requests are answered M), wait (bounded) until
// every command already taken is committed and applied, then transfer. It
// answers within about TransferTimeout + 1 s.
func (n *Node) Handover(id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	n.handover.Store(true)
	deadline := time.Now().Add(time.Second)
	for !n.prop.idle() && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if n.prop.idle() && n.raft.Barrier(time.Second).Error() == nil {
		n.cleanLoss.Store(true)
	}
	gen := n.lostGen.Load()
	err := n.transfer(id)
	if err != nil {
		n.cleanLoss.Store(false)
		if n.raft.State() == raft.Leader {
			n.handover.Store(false) // still the leader: keep serving
		}
		return err
	}
	// raft answers the transfer when its leader loop ends, before the
	// leadership loop hears of it: wait (bounded) until every request in
	// flight was answered (onLost), so a caller that closes connections
	// next (Shutdown) does not cut those answers off.
	deadline = time.Now().Add(2 * time.Second)
	for n.lostGen.Load() == gen && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// transferTarget picks the voter to hand leadership to: id itself when its
// clock is verified within MaxClockSkew by this leader's latest sample (an
// error naming the skew otherwise), or, for id "", the verified voter that
// has applied the most. A leader whose clock is off would extend or cut
// leases by its skew (issue #13): leadership never moves to a clock this
// leader measured beyond the bound, nor to one it could not measure.
func (n *Node) transferTarget(id string) (raft.Server, error) {
	samples := map[string]ClockSample{}
	for _, s := range n.clock.Samples() {
		samples[s.ID] = s
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return raft.Server{}, err
	}
	var best raft.Server
	bestApplied := uint64(0)
	for _, sv := range cf.Configuration().Servers {
		sid := string(sv.ID)
		if sid == n.cfg.NodeID || sv.Suffrage != raft.Voter {
			continue
		}
		s, ok := samples[sid]
		verified := ok && s.Err == "" && n.now().Sub(s.At) < clockStale && s.Bound <= n.cfg.MaxClockSkew
		if id != "" && sid == id {
			if !verified {
				return raft.Server{}, fmt.Errorf("%w: refusing to hand leadership to %s: %s", ErrClockSkew, id, clockVerdict(s, ok, n.cfg.MaxClockSkew))
			}
			return sv, nil
		}
		if id == "" && verified && (best.ID == "" || s.Applied > bestApplied) {
			best, bestApplied = sv, s.Applied
		}
	}
	if id != "" {
		return raft.Server{}, fmt.Errorf("%w: no voter %q", ErrMembership, id)
	}
	if best.ID == "" {
		return raft.Server{}, fmt.Errorf("%w: no voter with a clock verified within %v to hand leadership to", ErrClockSkew, n.cfg.MaxClockSkew)
	}
	return best, nil
}

// clockVerdict says why a sample does not verify a clock.
func clockVerdict(s ClockSample, ok bool, bound time.Duration) string {
	switch {
	case !ok:
		return "its clock was never measured"
	case s.Err != "":
		return "its clock could not be measured: " + s.Err
	case s.Bound > bound:
		return fmt.Sprintf("its clock is %v ± %v from this leader's, above the %v bound", s.Offset.Round(time.Millisecond), (s.RTT / 2).Round(time.Microsecond), bound)
	default:
		return fmt.Sprintf("its last clock sample is older than %v", clockStale)
	}
}

// transfer hands leadership to id (any caught-up voter with a verified
// clock when empty), bounded by TransferTimeout.
func (n *Node) transfer(id string) error {
	target, err := n.transferTarget(id)
	if err != nil {
		return err
	}
	f := n.raft.LeadershipTransferToServer(target.ID, target.Address)
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(n.cfg.TransferTimeout):
		return fmt.Errorf("leadership transfer: no answer within %v", n.cfg.TransferTimeout)
	}
}

// nodeRole names this node's raft role for status and members.
func (n *Node) nodeRole() string {
	if n.removed.Load() {
		return wire.NodeRemoved
	}
	switch n.raft.State() {
	case raft.Leader:
		return wire.NodeLeader
	case raft.Follower, raft.Candidate:
		cf := n.raft.GetConfiguration()
		if cf.Error() == nil {
			for _, s := range cf.Configuration().Servers {
				if string(s.ID) == n.cfg.NodeID && s.Suffrage != raft.Voter {
					return wire.NodeLearner
				}
			}
		}
		return wire.NodeFollower
	}
	return wire.NodeFollower
}

// newHCLogger adapts slog to hclog for raft (style.md habit 7).
func newHCLogger(l *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   name,
		Level:  hclog.Warn,
		Output: slogWriter{l},
	})
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Info(string(trimNL(p)), "source", "raft")
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

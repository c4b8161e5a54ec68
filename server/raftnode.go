package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/cluster"
	"github.com/ticketing/ticketing/server/locktable"
)

// ClusterConfig turns a server into a raft cluster member (protocol.md §7).
// Nil Config.Cluster means a single node without raft. The raft settings
// (voters, bootstrap, timings, clock bound, snapshots) are cluster.Settings,
// passed to the node as they are; the rest is how the server listens.
type ClusterConfig struct {
	cluster.Settings
	PeerListen string // peer port listen address; default port 7471
	Advertise  string // client address that M answers name (not a wildcard)
	// Joining: start without bootstrap and not among Peers; an operator adds
	// the node with `ticketing node add` (as a learner, then promoted).
	PeerAdvertise string // this node's peer address as others dial it; default: its Peers entry, else PeerListen
	// ClockOffset shifts this node's wall clock (tests of clock health only).
	ClockOffset time.Duration
	// PeerListener, when set, is used instead of listening on PeerListen
	// (tests open it on port 0 first to know the address).
	PeerListener net.Listener
}

// validateCluster checks the cluster settings (issue #7 item 6): voter count
// 3 or 5, no duplicate ids or addresses, a non-wildcard advertised address.
func (c *Config) validateCluster() error {
	cc := c.Cluster
	if cc == nil {
		return nil
	}
	if c.NodeID == "" || c.NodeID == "single" {
		return cfgErr("a cluster node needs a node id (--node-id)")
	}
	if cc.PeerListener != nil {
		cc.PeerListen = cc.PeerListener.Addr().String()
	}
	if _, _, err := net.SplitHostPort(cc.PeerListen); err != nil {
		return cfgErr("peer listen address %q: %v", cc.PeerListen, err)
	}
	if cc.Advertise == "" {
		return cfgErr("a cluster node needs --advertise, the client address other nodes' M answers name")
	}
	host, _, err := net.SplitHostPort(cc.Advertise)
	if err != nil {
		return cfgErr("advertise address %q: %v", cc.Advertise, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return cfgErr("advertise address %q is a wildcard; name an address clients can reach", cc.Advertise)
	}
	if len(cc.Peers) > 0 || cc.Bootstrap {
		if n := len(cc.Peers); n != 3 && n != 5 {
			return cfgErr("a cluster has 3 or 5 voters, got %d in --peers (1 voter is a single node: omit --peers)", n)
		}
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	self := false
	for _, p := range cc.Peers {
		if p.ID == "" || p.Addr == "" {
			return cfgErr("peer %q: want id=host:port", p.ID+"="+p.Addr)
		}
		if ids[p.ID] {
			return cfgErr("duplicate peer id %q", p.ID)
		}
		if addrs[p.Addr] {
			return cfgErr("duplicate peer address %q", p.Addr)
		}
		if h, _, err := net.SplitHostPort(p.Addr); err != nil {
			return cfgErr("peer %s address %q: %v", p.ID, p.Addr, err)
		} else if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
			return cfgErr("peer %s address %q is a wildcard", p.ID, p.Addr)
		}
		ids[p.ID], addrs[p.Addr] = true, true
		self = self || p.ID == c.NodeID
	}
	if cc.Bootstrap && !self {
		return cfgErr("--bootstrap: this node's id %q is not in --peers", c.NodeID)
	}
	if cc.MaxClockSkew < 0 {
		return cfgErr("max clock skew must not be negative")
	}
	return nil
}

// ParsePeers parses "id=host:port,id=host:port".
func ParsePeers(s string) ([]cluster.Peer, error) {
	var out []cluster.Peer
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" || addr == "" {
			return nil, cfgErr("peers: %q is not id=host:port", part)
		}
		out = append(out, cluster.Peer{ID: id, Addr: addr})
	}
	return out, nil
}

func (s *Server) peerAdvertise() string {
	cc := s.cfg.Cluster
	if cc.PeerAdvertise != "" {
		return cc.PeerAdvertise
	}
	for _, p := range cc.Peers {
		if p.ID == s.cfg.NodeID {
			return p.Addr
		}
	}
	return cc.PeerListen
}

// startCluster opens the peer port and starts the raft node.
func (s *Server) startCluster(ctx context.Context) error {
	cc := s.cfg.Cluster
	var lc net.ListenConfig
	lc.KeepAliveConfig = keepAliveConfig
	ln := cc.PeerListener
	if ln == nil {
		var err error
		ln, err = lc.Listen(ctx, "tcp", cc.PeerListen)
		if err != nil {
			return fmt.Errorf("server: peer listen %s: %w", cc.PeerListen, err)
		}
	}
	s.peerLn = ln
	if _, port, _ := net.SplitHostPort(cc.Advertise); port == "0" {
		cc.Advertise = s.Addr()
	}
	peerAddr := s.peerAdvertise()
	if _, port, _ := net.SplitHostPort(peerAddr); port == "0" {
		peerAddr = ln.Addr().String()
	}
	tlsClient, err := s.peerTLSClient()
	if err != nil {
		ln.Close()
		return err
	}
	now := s.now
	if cc.ClockOffset != 0 {
		off := cc.ClockOffset
		base := s.now
		now = func() time.Time { return base().Add(off) }
		s.now = now
	}
	rb := &raftBackend{s: s}
	node, err := cluster.New(cluster.Config{
		Settings:    cc.Settings,
		NodeID:      s.cfg.NodeID,
		ClientAddr:  cc.Advertise,
		PeerAddr:    peerAddr,
		PeerToken:   s.cfg.tokenFor(wire.RolePeer),
		TLSClient:   tlsClient,
		DataDir:     s.cfg.DataDir,
		Limits:      s.clusterLimits(),
		Logger:      s.log,
		Now:         now,
		Incarnation: s.incarnation,
	}, s, s.failPending)
	if err != nil {
		ln.Close()
		return err
	}
	rb.node = node
	s.lock = rb
	s.wg.Add(2)
	go s.servePeers(ln)
	go s.checkAdvertise(cc.Advertise)
	return nil
}

// clusterLimits are the replicated table's limits: the server's, with the
// whole idle key cache (Config.IdleKeyCache, in all) for the one table. A
// single node splits it over its shards; the cluster's table had one
// shard's share (1,024 of 16,384 by default), so with more distinct keys
// than that in use, nearly every release deleted its key from the table
// and the next acquire of it inserted it again, on all three nodes:
// `Release` cost twice `Acquire` and the lock table was a third of the
// cluster's CPU per op (issue 35, docs/benchmarks.md "Cluster").
func (s *Server) clusterLimits() locktable.Limits {
	l := s.limits
	l.IdleCache = max(1, s.cfg.IdleKeyCache)
	return l
}

// peerTLSClient is the TLS configuration for dialing peers: the server's own
// certificate as the client certificate, peers verified against the client
// CA file (or the system roots).
func (s *Server) peerTLSClient() (*tls.Config, error) {
	if s.certs == nil {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			s.certs.mu.RLock()
			defer s.certs.mu.RUnlock()
			return s.certs.cert, nil
		},
	}
	if s.cfg.TLSClientCAFile != "" {
		pem, err := os.ReadFile(s.cfg.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: tls client CA: %v", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// servePeers accepts on the peer port: role 3 only; after the handshake a
// raft RPC stream (first byte < 0x20) goes to raft, anything else is served
// as a protocol connection with role peer (P and read-only Q: the leader's
// clock samples and status reads).
func (s *Server) servePeers(ln net.Listener) {
	defer s.wg.Done()
	for {
		if !s.hsWaitRoom(&s.peerHS) {
			return
		}
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c := newConn(s, nc)
		c.peerPort = true
		s.hsAdmit(c)
		s.wg.Add(1)
		go c.serve()
	}
}

// handOffIfRaft peeks at the first byte after the peer handshake; a raft
// stream is handed to the transport (true), anything else stays a protocol
// connection reading from the peeked buffer.
func (c *conn) handOffIfRaft() bool {
	br := bufio.NewReaderSize(c.nc, 4096)
	b, err := br.Peek(1)
	pc := &cluster.PeekedConn{Conn: c.nc, R: br}
	if err == nil && cluster.RaftStreamByte(b[0]) && c.s.lock.handOff(pc) {
		return true
	}
	c.nc = pc
	return false
}

func (s *Server) newConnID() uint64 {
	n := s.nextConn.Add(1)
	if s.cfg.Cluster != nil {
		return cluster.ConnID(s.incarnation, n)
	}
	return n
}

// leaderAddr is the client address an M answer names.
func (s *Server) leaderAddr() string { return s.lock.leaderAddr() }

// raftBackend is a cluster member's backend: lock requests go through the
// raft log; the answer comes through Server.Deliver once the entry is
// committed and applied (protocol.md §7), or U / M when that cannot be
// confirmed (failPending). A node that does not serve answers M.
type raftBackend struct {
	s    *Server
	node *cluster.Node
}

func (b *raftBackend) acquire(c *conn, _ int64, req *wire.Request) {
	if b.mayGrant(c, req) {
		b.submit(c, req, cluster.OpAcquire)
	}
}

// mayGrant runs the checks an acquire (A or S) passes before it is
// proposed: this node serves, is not draining, its clock is healthy, and a
// wait would not exceed max_inflight; otherwise it answers and says false.
func (b *raftBackend) mayGrant(c *conn, req *wire.Request) bool {
	if !b.serving(c, req) {
		return false
	}
	if b.s.draining.Load() {
		c.busy(req.ReqID, wire.CodeShuttingDown)
		return false
	}
	if ok, _ := b.node.ClockHealthy(); !ok {
		c.busy(req.ReqID, wire.CodeClockUnhealthy)
		return false
	}
	if req.WaitMS() > 0 && c.inflight.Load() >= c.maxInflight {
		c.busy(req.ReqID, wire.CodeOverloaded)
		return false
	}
	return true
}

// acquireSet submits an S as one replicated command (§12.2): key = count ‖ body.
func (b *raftBackend) acquireSet(c *conn, _ int64, req *wire.Request, _ *wire.KeySet) {
	if b.mayGrant(c, req) {
		b.submitSet(c, req, cluster.OpAcquireSet)
	}
}

func (b *raftBackend) releaseSet(c *conn, _ int64, req *wire.Request, _ *wire.KeySet) {
	if b.serving(c, req) {
		b.submitSet(c, req, cluster.OpReleaseSet)
	}
}

func (b *raftBackend) submitSet(c *conn, req *wire.Request, op cluster.Op) {
	key := make([]byte, 0, 1+len(req.Body))
	key = append(append(key, req.SetCount()), req.Body...)
	b.propose(c, req, cluster.Command{Op: op, Conn: c.id, ReqID: req.ReqID, Key: key, Arg: req.Arg})
}

// propose submits cmd, outstanding until its answer is delivered; an
// acquire goes with its connection's label when that is not replicated in
// this serving term yet (withLabel).
func (b *raftBackend) propose(c *conn, req *wire.Request, cmd cluster.Command) {
	c.addPending(req.ReqID)
	var err error
	if cmd.Op == cluster.OpAcquire || cmd.Op == cluster.OpAcquireSet {
		err = b.withLabel(c, cmd)
	} else {
		err = b.node.Submit(cmd)
	}
	if err != nil {
		c.dropPending(req.ReqID)
		c.wbuf = wire.AppendMoved(c.wbuf, req.ReqID, b.node.LeaderClientAddr())
	}
}

// withLabel submits an acquire, preceded in the log by an OpLabel with the
// connection's label and remote address when the label changed or was not
// sent in this serving term (a new leader's LeaderStart let go of the
// labels of connections that hold nothing: cluster/labels.go). The locks
// that survive a leader change thus keep their holder's label (§12.3).
func (b *raftBackend) withLabel(c *conn, cmd cluster.Command) error {
	p, ep := c.label.Load(), b.node.ServeEpoch()
	if p != nil && *p == "" {
		p = nil // cleared: as none
	}
	due := p != nil && (p != c.sentLabel || ep != c.sentEpoch) ||
		p == nil && c.sentLabel != nil && ep == c.sentEpoch
	if !due {
		return b.node.Submit(cmd)
	}
	var l string
	if p != nil {
		l = *p
	}
	lc := cluster.Command{Op: cluster.OpLabel, Conn: c.id, Key: cluster.EncodeLabel(l, c.raw.RemoteAddr().String())}
	if err := b.node.Submit(lc, cmd); err != nil {
		return err
	}
	c.sentLabel, c.sentEpoch = p, ep
	return nil
}

func (b *raftBackend) release(c *conn, _ int64, req *wire.Request) {
	if b.serving(c, req) {
		b.submit(c, req, cluster.OpRelease)
	}
}

func (b *raftBackend) cancel(c *conn, _ int64, req *wire.Request) {
	if b.serving(c, req) {
		b.submit(c, req, cluster.OpCancel)
	}
}

// serving answers M (naming the leader, if known) when this node is not the
// serving leader. (Even while it drains: the request can go to the leader.)
//
// A node that learned it was removed from the configuration answers
// B NO_QUORUM to A and U NO_QUORUM to R and C instead (issue #13): no
// leader will ever name it again, and M with no address would send clients
// round in circles.
func (b *raftBackend) serving(c *conn, req *wire.Request) bool {
	if b.node.Serving() {
		return true
	}
	if b.node.Removed() {
		st := wire.StatusUnknown
		if req.Op == wire.OpAcquire || req.Op == wire.OpAcquireSet {
			st = wire.StatusBusy
		}
		c.wbuf = wire.AppendStatus(c.wbuf, st, wire.CodeNoQuorum, req.ReqID)
		return false
	}
	b.s.lastMoved.Store(b.s.nanotime())
	c.wbuf = wire.AppendMoved(c.wbuf, req.ReqID, b.node.LeaderClientAddr())
	return false
}

// submit queues the request for the next raft batch, outstanding until its
// answer is delivered. The key stays in the read buffer: Submit encodes
// the command at once.
func (b *raftBackend) submit(c *conn, req *wire.Request, op cluster.Op) {
	b.propose(c, req, cluster.Command{Op: op, Conn: c.id, ReqID: req.ReqID, Key: req.Key, Arg: req.Arg})
}

// connGone replicates that a client connection closed, so its waiters
// leave their queues (its locks stay held) and its replicated label goes
// once it holds nothing.
func (b *raftBackend) connGone(c *conn) {
	labelled := c.sentLabel != nil && c.sentEpoch == b.node.ServeEpoch()
	if c.peerPort || !b.node.Serving() || c.inflight.Load() == 0 && !labelled {
		return
	}
	_ = b.node.Submit(cluster.Command{Op: cluster.OpDropConn, Conn: c.id})
}

func (b *raftBackend) run() {}

// handOver: rolling maintenance: a leader hands leadership to a caught-up
// voter before it closes its connections (bounded by TransferTimeout), so
// clients follow M to the new leader.
func (b *raftBackend) handOver() {
	if err := b.node.TransferLeader(""); err != nil && !errors.Is(err, cluster.ErrNotLeader) {
		b.s.log.Warn("leadership hand-over failed; stopping anyway", "err", err)
	}
	b.s.movedGrace()
}

// drain: the waiters were answered when this node stopped serving
// (failPending); a follower has none.
func (b *raftBackend) drain() {}

// stop shuts raft down: it waits for its goroutines (a snapshot being
// persisted, a hand-over in progress); ctx bounds it all.
func (b *raftBackend) stop(ctx context.Context) {
	stopped := make(chan struct{})
	go func() { _ = b.node.Shutdown(ctx); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		b.s.log.Warn("the cluster node did not stop within the shutdown budget; stopping anyway")
	}
	b.s.peerLn.Close()
}

// eachTable reads the cluster's one replicated table at the wall clock in
// ns (the clock its commands carry).
func (b *raftBackend) eachTable(fn func(t *locktable.Table, now int64)) {
	now := b.s.now().UnixNano()
	b.node.FSM().With(func(t *locktable.Table) { fn(t, now) })
}

func (b *raftBackend) counts() (keys, waiters int64) { return b.node.FSM().Counts() }

// replicatedLabel is the label and address the cluster replicated for a
// connection of any node (called within eachTable: the FSM is locked).
func (b *raftBackend) replicatedLabel(conn uint64) (label, addr string, ok bool) {
	return b.node.FSM().LabelLocked(conn)
}

func (b *raftBackend) status(st *wire.StatusReply) {
	in := b.node.Info()
	st.Role = in.Role
	st.Leader = in.Leader
	st.LeaderID = in.LeaderID
	st.Term = in.Term
	st.CommitIndex = in.CommitIndex
	st.AppliedIndex = in.AppliedIndex
	st.LastIndex = in.LastIndex
	st.LastContactMS = in.LastContact
	st.Incarnation = in.Incarnation
	st.Durable = in.Durable
	st.ClientAddr = in.ClientAddr
	clk := in.Clock
	st.Clock = &clk
}

func (b *raftBackend) cantGrant(st *wire.StatusReply) string {
	switch {
	case b.node.Removed():
		return "removed from the cluster configuration (" + b.node.RemovedReason() + "): rejoin under a new id"
	case b.s.AdvertiseError() != "":
		return b.s.AdvertiseError()
	case st.Leader == "":
		return "no leader"
	case st.Role == wire.NodeLeader && !b.node.Serving():
		return "leader not serving yet"
	case st.Role == wire.NodeLeader && st.Clock != nil && !st.Clock.Healthy:
		return "clock unhealthy: " + st.Clock.Reason
	}
	return ""
}

func (b *raftBackend) members() ([]wire.Member, error) { return b.node.Members() }

func (b *raftBackend) leaseRemainingMS(t *locktable.Table, li *locktable.LockInfo, now int64) int64 {
	// As the cluster enforces it (issue #13): an inherited lease by the
	// InheritedDeadline rule.
	if _, at, ok := t.HolderTimes(li.Key); ok {
		d := b.node.EnforcedDeadline(li.Token, at)
		return max(d-now, 0) / 1e6
	}
	return li.LeaseRemainingMS
}

func (b *raftBackend) clockUnverified() bool {
	if !b.node.Serving() {
		return false
	}
	ok, _ := b.node.ClockHealthy()
	return !ok
}

// change: membership changes on the serving leader, a transfer on the
// leader; any other node answers M (protocol.md §7).
func (b *raftBackend) change(cmd string, q *adminQuery) (func(context.Context) (any, error), error) {
	n := b.node
	if cmd != wire.CmdTransferLeader && !n.Serving() || cmd == wire.CmdTransferLeader && n.Info().Role != wire.NodeLeader {
		return nil, &movedError{leader: n.LeaderClientAddr()}
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	id, peer, client, voter := str(q.ID), str(q.PeerAddr), str(q.ClientAddr), q.Voter != nil && *q.Voter
	return func(ctx context.Context) (any, error) {
		var err error
		switch cmd {
		case wire.CmdAddNode:
			err = n.AddNode(ctx, id, peer, client, voter)
		case wire.CmdRemoveNode:
			err = n.RemoveNode(ctx, id)
		case wire.CmdTransferLeader:
			err = n.TransferLeader(id)
		}
		if err != nil {
			return nil, err
		}
		if cmd == wire.CmdTransferLeader {
			// Wait (bounded) until a new leader is known.
			for i := 0; i < 50 && ctx.Err() == nil && (n.LeaderClientAddr() == "" || n.Info().Role == wire.NodeLeader); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			return &wire.LeaderReply{Leader: n.LeaderClientAddr()}, nil
		}
		ms, err := n.Members()
		if err != nil {
			return nil, err
		}
		return &wire.MembersReply{Members: ms}, nil
	}, nil
}

func (b *raftBackend) leaderAddr() string { return b.node.LeaderClientAddr() }

func (b *raftBackend) handOff(pc net.Conn) bool {
	b.node.HandOff(pc)
	return true
}

var _ backend = (*raftBackend)(nil)

// movedGrace runs at the start of Shutdown, after a leader handed over: the
// node keeps answering M (naming the new leader) until its clients have
// moved on — no lock request for movedQuiet, at most movedGraceMax — before
// it closes their connections. A request that arrives on a connection
// being closed is lost, and the client must report it indeterminate;
// clients send to the leader they know, so once each was answered M they
// stop sending here.
func (s *Server) movedGrace() {
	const (
		movedQuiet    = 200 * time.Millisecond
		movedGraceMax = 1500 * time.Millisecond
	)
	start := s.nanotime()
	for {
		now := s.nanotime()
		if now-start >= int64(movedGraceMax) {
			return
		}
		if now-max(start, s.lastMoved.Load()) >= int64(movedQuiet) && s.leaderAddr() != "" {
			return
		}
		if now-start >= int64(movedQuiet) && s.live.Load() == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failPending answers every request in flight on every connection: this
// node stopped being the serving leader, so their outcome is unknown: U
// (protocol.md §7) — or, after a clean hand-over (every command of ours
// applied before the transfer, so the new leader drops our waiters and
// grants them nothing), M: not acquired, retry on the new leader.
func (s *Server) failPending(clean bool) {
	st := wire.StatusUnknown
	if clean {
		st = wire.StatusMoved
	}
	s.connsMu.RLock()
	cs := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		cs = append(cs, c)
	}
	s.connsMu.RUnlock()
	for _, c := range cs {
		c.mu.Lock()
		ids := make([]uint32, 0, len(c.pending))
		for id := range c.pending {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		for _, id := range ids {
			c.deliver(locktable.Effect{Owner: locktable.Owner{Conn: c.id, ReqID: id}, Status: st})
		}
	}
}

// ClusterNode returns the raft node (nil on a single node).
func (s *Server) ClusterNode() *cluster.Node {
	if rb, ok := s.lock.(*raftBackend); ok {
		return rb.node
	}
	return nil
}

// PeerAddr returns the peer listener's address, "" on a single node.
func (s *Server) PeerAddr() string {
	if s.peerLn == nil {
		return ""
	}
	return s.peerLn.Addr().String()
}

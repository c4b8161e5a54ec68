package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// NodeView is one node of a cluster as this host sees it: its place in the
// configuration (from the leader's `members` reply when a leader answered)
// and its own `status`, read over its client address.
type NodeView struct {
	// ID is the node's raft id: from the configuration, or from its status
	// when it answered at a --addr address but is not a member ("" when it
	// did not answer either).
	ID string
	// ClientAddr is the address queried: the member's advertised client
	// address, or the given address for a node that is not a member.
	ClientAddr string
	// PeerAddr is the member's peer (raft) address ("" when not a member).
	PeerAddr string
	// Member: the node is in the configuration the view is built on.
	Member bool
	// Role is the node's role in that configuration: leader, follower or
	// learner ("single" for a single server, "" when not a member).
	Role string
	// Voter: the member votes (a learner does not).
	Voter bool
	// LastContactMS is how long ago the leader last reached the node over
	// the peer port (its clock samples, about once a second); -1 unknown,
	// 0 for the leader itself.
	LastContactMS int64
	// Status is the node's own status reply; nil when it could not be read.
	Status *wire.StatusReply
	// Err says why Status is nil (connect, authentication, query).
	Err error
	// Lag is the leader's commit index minus the node's applied index
	// (clamped at 0; the two are read moments apart); -1 when either is
	// unknown.
	Lag int64
}

// Reachable reports whether the node answered its status query.
func (n *NodeView) Reachable() bool { return n.Status != nil }

// ClusterView is the cluster as this host sees it. Build it with Discover.
type ClusterView struct {
	// Single: the nodes answered as single servers (no cluster); Nodes are
	// then the given addresses, in order.
	Single bool
	// LeaderID and LeaderAddr name the node that answered as leader ("" when
	// none did; the one with the highest term when several did).
	LeaderID   string
	LeaderAddr string
	// Term and CommitIndex are the leader's (0 without a leader).
	Term        uint64
	CommitIndex uint64
	// ConfigFrom is the id of the node whose `members` reply lists the
	// members: the leader when one answered ("" when none could be read).
	ConfigFrom string
	// Nodes are the members sorted by id, then any given address that is
	// not a member.
	Nodes []NodeView
	// LeaderAdvertiseErr, when set, says why the leader's advertised
	// client address (the one followers name in M answers) does not reach
	// the leader: ClusterHealth dials it and checks that the node answering
	// there is the leader's process (issue #29 item 4).
	LeaderAdvertiseErr string
}

// errNoClientAddr is a member's Err when no client address is known for it.
var errNoClientAddr = errors.New("no client address known for this member")

// Leader returns the leader's view, or nil.
func (v *ClusterView) Leader() *NodeView {
	if v.LeaderID == "" {
		return nil
	}
	for i := range v.Nodes {
		if v.Nodes[i].ID == v.LeaderID && v.Nodes[i].Status != nil {
			return &v.Nodes[i]
		}
	}
	return nil
}

// Node returns the view of the node id, or nil.
func (v *ClusterView) Node(id string) *NodeView {
	for i := range v.Nodes {
		if v.Nodes[i].ID == id {
			return &v.Nodes[i]
		}
	}
	return nil
}

// probe is what one address answered.
type probe struct {
	addr    string
	status  *wire.StatusReply
	members []wire.Member // nil unless asked for
	mErr    error         // the members query's error
	err     error         // connect or status error
}

// probeAddr dials addr and reads its status (and members when asked),
// within perNode; a refused connection fails at once (dialNode).
func probeAddr(ctx context.Context, addr string, withMembers bool, perNode time.Duration, opts []client.Option) probe {
	p := probe{addr: addr}
	ctx, cancel := context.WithTimeout(ctx, perNode)
	defer cancel()
	c, err := dialNode(ctx, addr, opts)
	if err != nil {
		p.err = err
		return p
	}
	defer c.Close()
	st, err := Status(ctx, c)
	if err != nil {
		p.err = statusErr(err)
		return p
	}
	p.status = &st
	if withMembers {
		p.members, p.mErr = Members(ctx, c)
	}
	return p
}

// statusErr explains a refused status query.
func statusErr(err error) error {
	var pe *client.ProtocolError
	if errors.As(err, &pe) && pe.Code == wire.CodeNotPermitted {
		return fmt.Errorf("%w (needs role admin: the admin token)", err)
	}
	return err
}

// membersOf reads the members of an already probed node.
func membersOf(ctx context.Context, p *probe, perNode time.Duration, opts []client.Option) {
	if p.members != nil || p.status == nil {
		return
	}
	q := probeAddr(ctx, p.addr, true, perNode, opts)
	if q.status != nil {
		p.status = q.status // fresher
	}
	p.members, p.mErr = q.members, q.mErr
	if q.err != nil {
		p.mErr = q.err
	}
}

// probeAll probes addrs concurrently.
func probeAll(ctx context.Context, addrs []string, withMembers bool, perNode time.Duration, opts []client.Option) []probe {
	out := make([]probe, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = probeAddr(ctx, a, withMembers, perNode, opts)
		}()
	}
	wg.Wait()
	return out
}

// Discover builds the cluster view from the given addresses (any of the
// cluster's nodes): it reads every address's status, finds the leader (the
// node answering as leader, else the one the followers name), reads the
// members from it, and then every member's status over its client address.
// Nodes that do not answer are part of the view with Err set; each is given
// perNode (dial and queries) and all are read concurrently, so an
// unreachable node costs about perNode (or the dial timeout in opts, when
// shorter), and one that refuses the connection (nothing listens there)
// nothing. opts are the client options (use client.WithAdminToken: status
// needs role admin). It fails (with the first address's error) only when
// no address answered at all.
func Discover(ctx context.Context, addrs []string, perNode time.Duration, opts ...client.Option) (*ClusterView, error) {
	return discover(ctx, probeAll(ctx, addrs, true, perNode, opts), perNode, opts)
}

// DiscoverFrom is Discover for addresses whose status was read already
// (Health's results), so they are not dialed again.
func DiscoverFrom(ctx context.Context, seeds []HealthResult, perNode time.Duration, opts ...client.Option) (*ClusterView, error) {
	ps := make([]probe, len(seeds))
	for i, r := range seeds {
		ps[i] = probe{addr: r.Addr, status: r.Status, err: r.Err}
		if r.Status == nil && r.Err == nil {
			ps[i].err = errors.New(r.Reason)
		}
	}
	return discover(ctx, ps, perNode, opts)
}

func discover(ctx context.Context, seeds []probe, perNode time.Duration, opts []client.Option) (*ClusterView, error) {
	single, err := seedsKind(seeds)
	if err != nil {
		return nil, err
	}
	if single {
		return singleView(seeds), nil
	}
	ps := &probeSet{byAddr: map[string]*probe{}, perNode: perNode, opts: opts}
	for _, p := range seeds {
		ps.add(p)
	}
	leader := ps.findLeader(ctx)
	cfgFrom := ps.configSource(leader)
	membersOf(ctx, cfgFrom, perNode, opts)

	v := &ClusterView{}
	if leader != nil {
		v.LeaderID, v.LeaderAddr = leader.status.NodeID, leader.addr
		if leader.status.ClientAddr != "" {
			v.LeaderAddr = leader.status.ClientAddr
		}
		v.Term, v.CommitIndex = leader.status.Term, leader.status.CommitIndex
	}
	members := cfgFrom.members
	if cfgFrom.mErr == nil && members != nil {
		v.ConfigFrom = cfgFrom.status.NodeID
	} else {
		members = ps.answered() // no configuration could be read
	}
	ps.indexIDs()
	v.Nodes = ps.memberNodes(ctx, members, v.LeaderID)
	v.Nodes = append(v.Nodes, ps.otherNodes(seeds)...)
	v.fillLag()
	return v, nil
}

// seedsKind reports whether the seeds that answered are single servers; it
// fails (with the first address's error) when none answered.
func seedsKind(seeds []probe) (single bool, err error) {
	var firstErr error
	reachable := 0
	single = true
	for _, p := range seeds {
		if p.status == nil {
			if firstErr == nil {
				firstErr = p.err
			}
			continue
		}
		reachable++
		if p.status.Role != wire.NodeSingle && p.status.Role != "" {
			single = false
		}
	}
	if reachable == 0 {
		if firstErr == nil {
			firstErr = fmt.Errorf("%w: no address given", client.ErrInvalidArgument)
		}
		return false, firstErr
	}
	return single, nil
}

// probeSet is the nodes asked so far, by address (and, after indexIDs, by
// node id), and how to ask more.
type probeSet struct {
	probes  []*probe
	byAddr  map[string]*probe
	byID    map[string]*probe
	matched map[*probe]bool // listed in the view already
	perNode time.Duration
	opts    []client.Option
}

// add adds p unless its address was asked already; it returns the probe of
// that address.
func (ps *probeSet) add(p probe) *probe {
	if q := ps.byAddr[p.addr]; q != nil {
		return q
	}
	pp := &p
	ps.probes = append(ps.probes, pp)
	ps.byAddr[p.addr] = pp
	return pp
}

// findLeader is a node answering as leader (highest term), else the one
// the followers name (the claim of the highest term), asked now.
func (ps *probeSet) findLeader(ctx context.Context) *probe {
	if leader := bestLeader(ps.probes); leader != nil {
		return leader
	}
	var claim string
	var claimTerm uint64
	for _, p := range ps.probes {
		if p.status != nil && p.status.Leader != "" && p.status.Term >= claimTerm {
			claim, claimTerm = p.status.Leader, p.status.Term
		}
	}
	if claim != "" && ps.byAddr[claim] == nil {
		ps.add(probeAddr(ctx, claim, true, ps.perNode, ps.opts))
		return bestLeader(ps.probes)
	}
	return nil
}

// configSource is the node whose configuration the view shows: the
// leader, else the most advanced node that answered.
func (ps *probeSet) configSource(leader *probe) *probe {
	if leader != nil {
		return leader
	}
	var cfgFrom *probe
	for _, p := range ps.probes {
		if p.status != nil && (cfgFrom == nil || advanced(p.status, cfgFrom.status)) {
			cfgFrom = p
		}
	}
	return cfgFrom
}

// answered lists the nodes that answered, as members (when no
// configuration could be read).
func (ps *probeSet) answered() []wire.Member {
	var members []wire.Member
	for _, p := range ps.probes {
		if p.status != nil {
			members = append(members, wire.Member{ID: p.status.NodeID, ClientAddr: p.addr, Role: p.status.Role, Voter: p.status.Role != wire.NodeLearner, LastContactMS: -1})
		}
	}
	return members
}

// indexIDs indexes the probes that answered by node id (preferring the
// probe of the node's own client address).
func (ps *probeSet) indexIDs() {
	ps.byID = map[string]*probe{}
	ps.matched = map[*probe]bool{}
	for _, p := range ps.probes {
		if p.status != nil && p.status.NodeID != "" {
			if q := ps.byID[p.status.NodeID]; q == nil || p.status.ClientAddr == p.addr {
				ps.byID[p.status.NodeID] = p
			}
		}
	}
}

// memberNodes matches the members to the probes (by id, then client
// address), reads the members nobody was asked about, and returns their
// views sorted by id.
func (ps *probeSet) memberNodes(ctx context.Context, members []wire.Member, leaderID string) []NodeView {
	found := make([]*probe, len(members))
	var missing []string
	for i, m := range members {
		p := ps.byID[m.ID]
		if p == nil && m.ClientAddr != "" {
			if q := ps.byAddr[m.ClientAddr]; q != nil && q.status == nil {
				p = q // asked already, did not answer
			}
		}
		if p == nil && m.ClientAddr != "" {
			missing = append(missing, m.ClientAddr)
		}
		found[i] = p
	}
	if len(missing) > 0 {
		for _, p := range probeAll(ctx, missing, false, ps.perNode, ps.opts) {
			ps.add(p)
		}
	}
	var nodes []NodeView
	for i, m := range members {
		p := found[i]
		if p == nil && m.ClientAddr != "" {
			p = ps.byAddr[m.ClientAddr]
		}
		n := NodeView{
			ID: m.ID, ClientAddr: m.ClientAddr, PeerAddr: m.PeerAddr, Member: true,
			Role: m.Role, Voter: m.Voter, LastContactMS: m.LastContactMS, Lag: -1,
		}
		if m.ID == leaderID {
			n.LastContactMS = 0
		}
		switch {
		case p == nil:
			n.Err = errNoClientAddr
		case p.status == nil:
			n.Err = p.err
		case p.status.NodeID != "" && p.status.NodeID != m.ID:
			n.Status = p.status
			n.Err = fmt.Errorf("%s answers as node %q", p.addr, p.status.NodeID)
		default:
			n.Status = p.status
		}
		if p != nil {
			ps.matched[p] = true
			if n.ClientAddr == "" {
				n.ClientAddr = p.addr
			}
		}
		nodes = append(nodes, n)
	}
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes
}

// otherNodes are the given addresses that are not members (a removed node
// still running, a wrong address).
func (ps *probeSet) otherNodes(seeds []probe) []NodeView {
	var nodes []NodeView
	for _, s := range seeds {
		p := ps.byAddr[s.addr]
		if ps.matched[p] {
			continue
		}
		ps.matched[p] = true
		n := NodeView{ClientAddr: p.addr, LastContactMS: -1, Lag: -1, Status: p.status, Err: p.err}
		if p.status != nil {
			n.ID = p.status.NodeID
			if mp := ps.byID[n.ID]; mp != nil && ps.matched[mp] && mp != p {
				continue // another address of a member already listed
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// fillLag sets each answering node's replication lag behind the leader.
func (v *ClusterView) fillLag() {
	l := v.Leader()
	if l == nil {
		return
	}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.Status != nil && n.Err == nil {
			n.Lag = max(int64(l.Status.CommitIndex)-int64(n.Status.AppliedIndex), 0)
		}
	}
}

// bestLeader is the probe answering as leader with the highest term.
func bestLeader(ps []*probe) *probe {
	var best *probe
	for _, p := range ps {
		if p.status == nil || p.status.Role != wire.NodeLeader {
			continue
		}
		if best == nil || advanced(p.status, best.status) {
			best = p
		}
	}
	return best
}

// advanced: a has a higher term than b, or the same term and a higher
// commit index.
func advanced(a, b *wire.StatusReply) bool {
	if a.Term != b.Term {
		return a.Term > b.Term
	}
	return a.CommitIndex > b.CommitIndex
}

// singleView is the view of single servers: one node per given address.
func singleView(seeds []probe) *ClusterView {
	v := &ClusterView{Single: true}
	for _, p := range seeds {
		n := NodeView{ClientAddr: p.addr, Status: p.status, Err: p.err, LastContactMS: -1, Lag: -1, Member: true, Voter: true, Role: wire.NodeSingle}
		if p.status != nil {
			n.ID = p.status.NodeID
		}
		v.Nodes = append(v.Nodes, n)
	}
	return v
}

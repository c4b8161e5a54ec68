package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
)

// checkIncarnation enforces that a node which lost its state never comes
// back under its old id (it would vote with an empty log): the first
// process seen under an id is recorded in the replicated metadata; a
// different, non-durable process answering for that id later is removed from
// the configuration. It rejoins under a new id (docs/operations.md).
func (n *Node) checkIncarnation(id string, st peerStatus) {
	if st.Incarnation == 0 || !n.serving.Load() {
		return
	}
	meta, ok := n.fsm.Nodes()[id]
	switch {
	case !ok || meta.Incarnation == 0:
		peer := meta.PeerAddr
		if peer == "" {
			peer = n.peerAddrOf(id)
		}
		n.submitMeta(NodeMeta{ID: id, ClientAddr: st.Advertise, PeerAddr: peer, Incarnation: st.Incarnation, Durable: st.Durable})
	case meta.Incarnation != st.Incarnation && !meta.Durable:
		n.log.Error("refusing a node that restarted without its state under its old id; removing it (rejoin under a new id)", "id", id)
		_ = n.raft.RemoveServer(raft.ServerID(id), 0, 5*time.Second).Error()
		n.submitMeta(NodeMeta{ID: id, Removed: true})
	case meta.Incarnation != st.Incarnation && meta.Durable:
		n.submitMeta(NodeMeta{ID: id, ClientAddr: st.Advertise, PeerAddr: meta.PeerAddr, Incarnation: st.Incarnation, Durable: st.Durable})
	case meta.ClientAddr != st.Advertise && st.Advertise != "":
		meta.ClientAddr = st.Advertise
		n.submitMeta(meta)
	}
}

// submitMeta replicates a member's metadata (OpNodeMeta). Best effort, as
// at every call site: the configuration change it describes is already in
// raft's own log, and checkIncarnation rewrites a member's entry from the
// next clock sample.
func (n *Node) submitMeta(m NodeMeta) {
	b, _ := json.Marshal(m)
	_ = n.Submit(Command{Op: OpNodeMeta, Key: b})
}

func (n *Node) peerAddrOf(id string) string {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return ""
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == id {
			return string(s.Address)
		}
	}
	return ""
}

// Members lists the configuration with replicated metadata and, on the
// leader, the last contact from its clock samples (protocol.md §8).
func (n *Node) Members() ([]wire.Member, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, err
	}
	meta := n.fsm.Nodes()
	samples := map[string]ClockSample{}
	for _, s := range n.clock.Samples() {
		samples[s.ID] = s
	}
	_, leaderID := n.raft.LeaderWithID()
	now := n.now()
	var out []wire.Member
	for _, s := range cf.Configuration().Servers {
		id := string(s.ID)
		m := wire.Member{ID: id, PeerAddr: string(s.Address), ClientAddr: meta[id].ClientAddr, Voter: s.Suffrage == raft.Voter}
		switch {
		case s.ID == leaderID:
			m.Role = wire.NodeLeader
		case s.Suffrage == raft.Voter:
			m.Role = wire.NodeFollower
		default:
			m.Role = wire.NodeLearner
		}
		if id == n.cfg.NodeID {
			m.ClientAddr = n.cfg.ClientAddr
		} else if smp, ok := samples[id]; ok && !smp.At.IsZero() {
			m.LastContactMS = now.Sub(smp.At).Milliseconds()
		} else {
			m.LastContactMS = -1
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// AddNode adds id as a learner (non-voter), waits until it has caught up
// with the leader's commit index and the leader has sampled its clock
// (bounded by ctx), then promotes it to voter when voter is set — unless
// its clock is measured beyond MaxClockSkew (ErrMembership; it stays a
// learner). One change at a time.
func (n *Node) AddNode(ctx context.Context, id, peerAddr, clientAddr string, voter bool) error {
	if !n.memberMu.TryLock() {
		return fmt.Errorf("%w: another membership change is in progress", ErrMembership)
	}
	defer n.memberMu.Unlock()
	if !n.serving.Load() {
		return ErrNotLeader
	}
	if id == "" || peerAddr == "" {
		return fmt.Errorf("%w: id and peer_addr are required", ErrMembership)
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	promote := false // id is a learner at peerAddr, to be made a voter
	for _, s := range cf.Configuration().Servers {
		switch {
		case string(s.ID) == id && voter && s.Suffrage == raft.Nonvoter && string(s.Address) == peerAddr:
			promote = true
		case string(s.ID) == id && s.Suffrage == raft.Nonvoter:
			return fmt.Errorf("%w: id %q is already a learner (at %s); `node add` it again with the same peer address and --voter to promote it", ErrMembership, id, s.Address)
		case string(s.ID) == id:
			return fmt.Errorf("%w: id %q is already a member (a node that lost its state rejoins under a new id)", ErrMembership, id)
		case string(s.Address) == peerAddr:
			return fmt.Errorf("%w: peer address %s is already used by %s", ErrMembership, peerAddr, s.ID)
		}
	}
	if !promote {
		// An id is never reused: not after its process was seen, and not
		// after it was removed (a tombstone stays in the metadata).
		if old, ok := n.fsm.Nodes()[id]; ok && (old.Incarnation != 0 || old.Removed) {
			return fmt.Errorf("%w: id %q was used before; choose a new id", ErrMembership, id)
		}
		if err := n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(peerAddr), 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("%w: add learner: %v", ErrMembership, err)
		}
		n.submitMeta(NodeMeta{ID: id, ClientAddr: clientAddr, PeerAddr: peerAddr})
	}
	if !voter {
		return nil
	}
	// Catch-up: the learner's applied index reaches the leader's commit
	// index as of now.
	target := n.raft.CommitIndex()
	pc := &peerClient{addr: peerAddr, token: n.cfg.PeerToken, tls: n.cfg.TLSClient}
	defer pc.close()
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := pc.status(sctx)
		cancel()
		if err == nil && st.AppliedIndex >= target {
			break
		}
		select {
		case <-ctx.Done():
			why := fmt.Sprintf("applied %d of %d", st.AppliedIndex, target)
			if err != nil {
				why = fmt.Sprintf("its peer port %s does not answer: %v", peerAddr, err)
			}
			return fmt.Errorf("%w: learner %s did not catch up in time (%s); it stays a learner", ErrMembership, id, why)
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Its clock: a voter joins clock health (architecture.md), so it is
	// promoted only once the leader has sampled it — `health` right after
	// the add sees it verified — and never with a clock measured beyond
	// the bound, which would make new grants fail closed.
	s, err := n.clock.waitSample(ctx, id, n.now())
	if err != nil {
		return fmt.Errorf("%w: learner %s: no clock sample over its peer port %s: %v (last: %s)", ErrMembership, id, peerAddr, err, s.Err)
	}
	if s.Offset.Abs()-s.RTT/2 > n.cfg.MaxClockSkew {
		return fmt.Errorf("%w: learner %s: its clock is %v ± %v off the leader's, above the %v bound; it stays a learner: fix its clock, then run this add again to promote it",
			ErrMembership, id, s.Offset.Round(time.Millisecond), (s.RTT / 2).Round(time.Microsecond), n.cfg.MaxClockSkew)
	}
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(peerAddr), 0, 10*time.Second).Error(); err != nil {
		return fmt.Errorf("%w: promote: %v", ErrMembership, err)
	}
	return nil
}

// RemoveNode removes id from the configuration. One change at a time.
func (n *Node) RemoveNode(ctx context.Context, id string) error {
	if !n.memberMu.TryLock() {
		return fmt.Errorf("%w: another membership change is in progress", ErrMembership)
	}
	defer n.memberMu.Unlock()
	if !n.serving.Load() {
		return ErrNotLeader
	}
	if n.peerAddrOf(id) == "" {
		return fmt.Errorf("%w: no member %q", ErrMembership, id)
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
		return fmt.Errorf("%w: remove: %v", ErrMembership, err)
	}
	n.submitMeta(NodeMeta{ID: id, Removed: true})
	return nil
}

// TransferLeader hands leadership to id (any caught-up voter when empty),
// answering within TransferTimeout.
func (n *Node) TransferLeader(id string) error { return n.Handover(id) }

// Info is the cluster part of admin `status` (protocol.md §8 plus issue #7).
type Info struct {
	Role         string           `json:"role"`
	Leader       string           `json:"leader"`
	LeaderID     string           `json:"leader_id"`
	Term         uint64           `json:"term"`
	CommitIndex  uint64           `json:"commit_index"`
	AppliedIndex uint64           `json:"applied_index"`
	LastIndex    uint64           `json:"last_index"`
	Incarnation  uint32           `json:"incarnation"`
	Durable      bool             `json:"durable"`
	ClientAddr   string           `json:"client_addr"`
	Clock        wire.ClockStatus `json:"clock"`
	Serving      bool             `json:"serving"`
	LastContact  int64            `json:"last_contact_ms"`
	Samples      []ClockSample    `json:"-"`
}

// Info returns this node's raft and clock view.
func (n *Node) Info() Info {
	_, leaderID := n.raft.LeaderWithID()
	healthy, reason := n.clock.Healthy()
	in := Info{
		Role:         n.nodeRole(),
		Leader:       n.LeaderClientAddr(),
		LeaderID:     string(leaderID),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.fsm.Applied(),
		LastIndex:    n.raft.LastIndex(),
		Incarnation:  n.incarnation,
		Durable:      n.cfg.DataDir != "",
		ClientAddr:   n.cfg.ClientAddr,
		Serving:      n.serving.Load(),
	}
	if lc := n.raft.LastContact(); !lc.IsZero() {
		in.LastContact = time.Since(lc).Milliseconds()
	}
	now := n.now()
	in.Clock = wire.ClockStatus{Healthy: healthy, Reason: reason, MaxSkewMS: n.cfg.MaxClockSkew.Milliseconds(), Sampled: n.serving.Load(), LocalUnixUS: now.UnixMicro()}
	for _, s := range n.clock.Samples() {
		ci := wire.ClockNode{ID: s.ID, OffsetUS: s.Offset.Microseconds(), BoundUS: s.Bound.Microseconds(), RTTUS: s.RTT.Microseconds(), Healthy: s.Healthy, Err: s.Err}
		if !s.At.IsZero() {
			ci.AgeMS = now.Sub(s.At).Milliseconds()
		}
		in.Clock.Nodes = append(in.Clock.Nodes, ci)
	}
	sort.Slice(in.Clock.Nodes, func(i, j int) bool { return in.Clock.Nodes[i].ID < in.Clock.Nodes[j].ID })
	if !in.Serving {
		in.Clock.Healthy = false
		if in.Clock.Reason == "" {
			in.Clock.Reason = "not the leader"
		}
	}
	return in
}

// ClockHealthy reports whether new grants may be made (leader only).
func (n *Node) ClockHealthy() (bool, string) { return n.clock.Healthy() }

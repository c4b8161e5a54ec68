package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
)

// A node removed from the configuration while it was cut off never hears of
// it from raft: the leader stops replicating to it, and its peers refuse its
// votes without saying why. So a follower that has heard from no leader for
// removalProbeAfter asks its peers over their peer port who leads and what
// their configuration is (issue #13 item 4). It is removed when the serving
// leader's member list names it a tombstone (committed), or leaves it out on
// removalConfirmations probes in a row (an uncommitted removal would be
// undone within one election); its own applied log may say so too.
const (
	removalProbeAfter    = 2 * time.Second
	removalProbeEvery    = time.Second
	removalConfirmations = 3
)

// Removed reports whether this node learned that it was removed from the
// cluster's configuration. It then answers clients B NO_QUORUM and reports
// role "removed" in status; it rejoins only under a new id.
func (n *Node) Removed() bool { return n.removed.Load() }

// RemovedReason says how this node learned it was removed, "" when not.
func (n *Node) RemovedReason() string {
	if s, ok := n.removedWhy.Load().(string); ok {
		return s
	}
	return ""
}

func (n *Node) markRemoved(why string) {
	n.removedWhy.Store(why)
	if !n.removed.Swap(true) {
		n.log.Error("this node was removed from the cluster configuration; it no longer serves (rejoin under a new id with an empty data dir)", "node_id", n.cfg.NodeID, "learned", why)
	}
}

// removalLoop runs on every node until Shutdown.
func (n *Node) removalLoop() {
	defer n.wg.Done()
	t := time.NewTicker(removalProbeEvery)
	defer t.Stop()
	absent := 0
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		selfAbsent := n.checkOwnConfiguration()
		if n.removed.Load() {
			if _, id := n.raft.LeaderWithID(); id == "" {
				n.probeRemoval() // keeps the leader it names fresh (LeaderClientAddr)
			}
			continue
		}
		if n.raft.State() == raft.Leader {
			absent = 0
			continue
		}
		if m, ok := n.fsm.Nodes()[n.cfg.NodeID]; ok && m.Removed {
			n.markRemoved("its own applied log records its removal")
			continue
		}
		if _, id := n.raft.LeaderWithID(); !selfAbsent && id != "" && time.Since(n.raft.LastContact()) < removalProbeAfter {
			absent = 0
			continue
		}
		switch n.probeRemoval() {
		case removalTombstone:
			n.markRemoved("the leader's configuration lists it as removed")
		case removalAbsent:
			absent++
			switch {
			case selfAbsent:
				// Its own configuration and the serving leader's agree:
				// removed while it was connected (raft sent it the change).
				n.markRemoved("its own configuration and the leader's leave it out")
			case absent >= removalConfirmations:
				n.markRemoved(fmt.Sprintf("the leader's configuration left it out on %d probes in a row", absent))
			}
		default:
			absent = 0
		}
	}
}

// checkOwnConfiguration records whether this node's own latest raft
// configuration lists it, and reports whether it leaves it out after having
// listed it (a node still joining has never been listed: not removed).
func (n *Node) checkOwnConfiguration() bool {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return n.selfAbsent.Load()
	}
	servers := cf.Configuration().Servers
	listed := false
	for _, s := range servers {
		listed = listed || string(s.ID) == n.cfg.NodeID
	}
	if listed {
		n.wasMember.Store(true)
	}
	absent := !listed && len(servers) > 0 && n.wasMember.Load()
	n.selfAbsent.Store(absent)
	return absent
}

// outside reports whether this node knows it is out of the configuration:
// removed, or left out of its own latest configuration.
func (n *Node) outside() bool { return n.removed.Load() || n.selfAbsent.Load() }

type removalVerdict int

const (
	removalUnknown removalVerdict = iota
	removalMember
	removalAbsent
	removalTombstone
)

// probeRemoval asks each peer in this node's configuration for its status;
// the first that answers as the serving leader is asked for its members.
func (n *Node) probeRemoval() removalVerdict {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return removalUnknown
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == n.cfg.NodeID {
			continue
		}
		if v := n.askPeer(string(s.Address)); v != removalUnknown {
			return v
		}
	}
	return removalUnknown
}

func (n *Node) askPeer(addr string) removalVerdict {
	pc := &peerClient{addr: addr, token: n.cfg.PeerToken, tls: n.cfg.TLSClient}
	defer pc.close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var st struct {
		Role       string `json:"role"`
		ClientAddr string `json:"client_addr"`
	}
	if err := pc.query(ctx, `{"cmd":"status"}`, &st); err != nil || st.Role != wire.NodeLeader {
		return removalUnknown
	}
	if st.ClientAddr != "" {
		n.peerLeader.Store(st.ClientAddr)
	}
	var mr wire.MembersReply
	if err := pc.query(ctx, `{"cmd":"members"}`, &mr); err != nil {
		return removalUnknown
	}
	for _, m := range mr.Members {
		if m.ID == n.cfg.NodeID {
			if m.Role == wire.NodeRemoved {
				return removalTombstone
			}
			return removalMember
		}
	}
	return removalAbsent
}

// query sends one read-only admin query and decodes its reply.
func (p *peerClient) query(ctx context.Context, body string, out any) error {
	r, err := p.roundTrip(ctx, func(b []byte, id uint32) []byte {
		return wire.AppendQuery(b, id, []byte(body))
	})
	if err != nil {
		return err
	}
	if r.Status != wire.StatusAdmin {
		return fmt.Errorf("peer answered %c to %s", r.Status, body)
	}
	return json.Unmarshal(r.Payload, out)
}

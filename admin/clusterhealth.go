package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// Defaults of ClusterHealthConfig.
const (
	// DefaultMaxLag is how many raft entries a voter's applied index may
	// trail the leader's commit index before it counts as lagging.
	DefaultMaxLag = 1000
	// DefaultMaxContact is how long a follower may go without hearing from
	// the leader (heartbeats come every few tens of ms).
	DefaultMaxContact = 3 * time.Second
	// ClockSampleStale is how old the leader's last clock sample of a node
	// may be (the leader samples about once a second; the server stops
	// counting a sample as verified after 3 s).
	ClockSampleStale = 3 * time.Second
)

// ClusterHealthConfig are the thresholds of ClusterHealth.
type ClusterHealthConfig struct {
	// MaxLag: a voter whose applied index trails the leader's commit index
	// by more entries is lagging (0 = DefaultMaxLag).
	MaxLag uint64
	// MaxContact: a follower that last heard from the leader longer ago is
	// failing (0 = DefaultMaxContact).
	MaxContact time.Duration
}

func (c ClusterHealthConfig) withDefaults() ClusterHealthConfig {
	if c.MaxLag == 0 {
		c.MaxLag = DefaultMaxLag
	}
	if c.MaxContact <= 0 {
		c.MaxContact = DefaultMaxContact
	}
	return c
}

// NodeHealth is one node's health within the cluster.
type NodeHealth struct {
	NodeView
	// Healthy: no problem found (warnings do not count).
	Healthy bool
	// Problems say why the node is not healthy, one phrase each.
	Problems []string
	// Warnings are reported but do not fail the check: a learner's
	// problems (it does not vote and serves nothing), and a voter whose
	// clock the leader has not sampled yet (just added, or just elected:
	// the leader samples every member about once a second, and grants as
	// long as a quorum is verified).
	Warnings []string
	// Clock is the leader's latest sample of this node's clock (offset =
	// this node's clock − the leader's), nil when there is none (and for
	// the leader itself, the reference).
	Clock *wire.ClockNode
}

// ClusterHealthResult is the health of a cluster.
type ClusterHealthResult struct {
	// View is what the check saw.
	View *ClusterView
	// Healthy: a leader serves and can grant a fresh acquire, and every
	// voter is reachable, follows it, is caught up and has a verified clock.
	Healthy bool
	// Problems are the cluster-wide failures (no leader, no quorum).
	Problems []string
	// Nodes are the nodes in View's order.
	Nodes []NodeHealth
	// VotersOK and Voters count the healthy voters and all voters.
	VotersOK, Voters int
	// NotMembers are the given addresses that no member of the
	// configuration has (a replaced node, a wrong address): each fails the
	// check, whatever the voters' health.
	NotMembers []string
}

// ClusterHealth discovers the cluster from seeds (Health's results for the
// given addresses, whose statuses are reused) and judges it with cfg. It
// fails only when no address answered (see Discover).
func ClusterHealth(ctx context.Context, seeds []HealthResult, cfg ClusterHealthConfig, perNode time.Duration, opts ...client.Option) (ClusterHealthResult, error) {
	v, err := DiscoverFrom(ctx, seeds, perNode, opts...)
	if err != nil {
		return ClusterHealthResult{}, err
	}
	if l := v.Leader(); l != nil {
		v.LeaderAdvertiseErr = checkAdvertised(ctx, l, perNode, opts)
	}
	return EvaluateCluster(v, cfg), nil
}

// checkAdvertised dials the leader's advertised client address (the
// member's client address, which followers' M answers name) and checks
// that the leader's own process answers there: the same node id and
// incarnation. The leader's status may have been read at another address
// (the one given in --addr), so a wrong --advertise would pass unseen
// otherwise. "" when it reaches the leader.
func checkAdvertised(ctx context.Context, l *NodeView, perNode time.Duration, opts []client.Option) string {
	addr := l.ClientAddr
	if addr == "" {
		addr = l.Status.ClientAddr
	}
	if addr == "" {
		return ""
	}
	p := probeAddr(ctx, addr, false, perNode, opts)
	switch {
	case p.err != nil:
		return errLine(p.err)
	case p.status.NodeID != l.Status.NodeID:
		return fmt.Sprintf("node %q answers there", p.status.NodeID)
	case p.status.Incarnation != l.Status.Incarnation:
		return fmt.Sprintf("another process of %s answers there (incarnation %d, the leader's is %d)", p.status.NodeID, p.status.Incarnation, l.Status.Incarnation)
	}
	return ""
}

// EvaluateCluster judges a cluster view (see ClusterHealthResult.Healthy).
// Never healthy while a fresh acquire would fail: that needs a leader that
// serves and reports can_grant (clock verified, quorum, not draining, below
// its limits).
func EvaluateCluster(v *ClusterView, cfg ClusterHealthConfig) ClusterHealthResult {
	cfg = cfg.withDefaults()
	r := ClusterHealthResult{View: v}
	leader := v.Leader()
	if leader == nil {
		r.Problems = append(r.Problems, "no leader: no node answers as the cluster's leader")
	} else if v.LeaderAdvertiseErr != "" {
		addr := leader.ClientAddr
		if addr == "" {
			addr = leader.Status.ClientAddr
		}
		r.Problems = append(r.Problems, fmt.Sprintf("leader %s is not reachable at its advertised client address %s: %s (followers send clients there: fix its --advertise)",
			leader.ID, addr, v.LeaderAdvertiseErr))
	}
	var clock *wire.ClockStatus
	if leader != nil {
		clock = leader.Status.Clock
	}
	for _, n := range v.Nodes {
		h := NodeHealth{NodeView: n}
		if clock != nil && n.ID != v.LeaderID {
			for i := range clock.Nodes {
				if clock.Nodes[i].ID == n.ID {
					c := clock.Nodes[i]
					h.Clock = &c
				}
			}
		}
		problems, warnings := nodeProblems(v, &h, clock, cfg)
		if n.Member && !n.Voter && n.Role != wire.NodeSingle {
			h.Warnings = append(problems, warnings...)
		} else {
			h.Problems, h.Warnings = problems, warnings
		}
		h.Healthy = len(h.Problems) == 0
		if !n.Member && v.ConfigFrom != "" && n.Role != wire.NodeSingle {
			r.NotMembers = append(r.NotMembers, n.ClientAddr)
		}
		if n.Member && n.Voter {
			r.Voters++
			if h.Healthy {
				r.VotersOK++
			}
		}
		r.Nodes = append(r.Nodes, h)
	}
	if leader != nil && r.Voters > 0 && r.VotersOK < r.Voters/2+1 {
		r.Problems = append(r.Problems, fmt.Sprintf("only %d of %d voters are healthy: a quorum needs %d", r.VotersOK, r.Voters, r.Voters/2+1))
	}
	r.Healthy = len(r.Problems) == 0
	for _, h := range r.Nodes {
		r.Healthy = r.Healthy && h.Healthy
	}
	return r
}

// nodeProblems lists what is wrong with one node: problems, and warnings
// that do not fail the check.
func nodeProblems(v *ClusterView, h *NodeHealth, clock *wire.ClockStatus, cfg ClusterHealthConfig) (ps, warnings []string) {
	add := func(format string, a ...any) { ps = append(ps, fmt.Sprintf(format, a...)) }
	st := h.Status
	switch {
	case st != nil && st.Role == wire.NodeRemoved:
		add("removed from the cluster configuration: %s", orDefault(st.Reason, "it says so"))
		return ps, nil
	case !h.Member && v.ConfigFrom == "":
		// No configuration could be read: membership is unknown.
		if st == nil {
			add("unreachable: %s", errLine(h.Err))
		} else {
			add("not known to be a member: no configuration could be read")
		}
		return ps, nil
	case !h.Member:
		what := fmt.Sprintf("not a member of the cluster: no member of %s's configuration has this address (take it out of --addr)", v.ConfigFrom)
		if unnamed := membersWithoutAddr(v); len(unnamed) > 0 {
			what = fmt.Sprintf("not matched to a member: no member of %s's configuration has this address (the client address of %s is not known yet)", v.ConfigFrom, strings.Join(unnamed, ", "))
		}
		if st == nil {
			add("%s; unreachable: %s", what, errLine(h.Err))
		} else {
			id := ""
			if st.NodeID != "" {
				id = " " + st.NodeID
			}
			add("%s; it answers as node%s (removed, or of a different cluster)", what, id)
		}
		return ps, nil
	case st == nil:
		add("unreachable: %s", errLine(h.Err))
		return ps, nil
	case h.Err != nil: // answered, but as another node
		add("%s", errLine(h.Err))
		return ps, nil
	}
	if st.Draining {
		add("draining (shutting down)")
	}
	isLeader := h.ID == v.LeaderID && v.LeaderID != ""
	if isLeader {
		if !st.CanGrant && !st.Draining {
			add("cannot grant: %s", orDefault(st.Reason, "the server says so"))
		}
		if h.Lag > int64(cfg.MaxLag) {
			add("applies %d entries behind its commit index (max %d)", h.Lag, cfg.MaxLag)
		}
		return ps, nil
	}
	if v.LeaderID == "" {
		// No leader: say what this node knows.
		if st.LeaderID != "" {
			add("names leader %s, which does not answer as leader", st.LeaderID)
		} else {
			add("knows no leader")
		}
		return ps, nil
	}
	switch {
	case st.Role == wire.NodeLeader:
		add("also claims leadership (term %d; the leader %s has term %d)", st.Term, v.LeaderID, v.Term)
	case st.LeaderID == "":
		add("knows no leader")
	case st.LeaderID != v.LeaderID:
		add("follows %s, not the leader %s", st.LeaderID, v.LeaderID)
	case !st.CanGrant && !st.Draining:
		add("cannot forward acquires: %s", orDefault(st.Reason, "the server says so"))
	}
	if h.Lag > int64(cfg.MaxLag) {
		add("lagging: %d entries behind the leader's commit index (max %d)", h.Lag, cfg.MaxLag)
	}
	if c := time.Duration(st.LastContactMS) * time.Millisecond; c > cfg.MaxContact {
		add("no contact from the leader for %v (max %v)", c.Round(100*time.Millisecond), cfg.MaxContact)
	}
	if clock != nil && clock.Sampled {
		switch c := h.Clock; {
		case c == nil:
			warnings = append(warnings, "clock not sampled by the leader yet")
		case c.Err != "" && time.Duration(c.AgeMS)*time.Millisecond >= ClockSampleStale || c.Err != "" && c.RTTUS == 0:
			add("the leader cannot sample its clock: %s", c.Err)
		case time.Duration(c.AgeMS)*time.Millisecond >= ClockSampleStale:
			add("clock sample is %v old", (time.Duration(c.AgeMS) * time.Millisecond).Round(100*time.Millisecond))
		case clock.MaxSkewMS > 0 && c.BoundUS > clock.MaxSkewMS*1000:
			add("clock offset %s from the leader is above the %dms bound", fmtOffsetUS(c.OffsetUS, c.BoundUS-abs64(c.OffsetUS)), clock.MaxSkewMS)
		}
	}
	return ps, warnings
}

// membersWithoutAddr are the members whose client address is not known.
func membersWithoutAddr(v *ClusterView) []string {
	var ids []string
	for _, n := range v.Nodes {
		if n.Member && n.Status == nil && errors.Is(n.Err, errNoClientAddr) {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// fmtOffsetUS renders an offset and its error in ms: +1.250ms ±0.100ms.
func fmtOffsetUS(off, bound int64) string {
	return fmt.Sprintf("%+.3fms ±%.3fms", float64(off)/1000, float64(bound)/1000)
}

// errLine is err's message on one line, without the "ticketing: "
// prefixes that wrapped client errors repeat.
func errLine(err error) string {
	if err == nil {
		return "no answer"
	}
	msg := strings.ReplaceAll(err.Error(), "ticketing: ", "")
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

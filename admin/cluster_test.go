package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	"github.com/ticketing/ticketing/server/clustertest"
)

// ---------------------------------------------------------------------------
// Pure parts: argument checks, error classification, health rules.

func TestAddNodeArgsValidate(t *testing.T) {
	ok := AddNodeArgs{ID: "n4", PeerAddr: "10.0.0.4:7471", ClientAddr: "n4.example:7470"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []AddNodeArgs{
		{PeerAddr: ok.PeerAddr, ClientAddr: ok.ClientAddr},
		{ID: "n4", PeerAddr: "10.0.0.4", ClientAddr: ok.ClientAddr},
		{ID: "n4", PeerAddr: "0.0.0.0:7471", ClientAddr: ok.ClientAddr},
		{ID: "n4", PeerAddr: ok.PeerAddr, ClientAddr: ":7470"},
		{ID: "n4", PeerAddr: ok.PeerAddr, ClientAddr: "[::]:7470"},
		{ID: "n4", PeerAddr: "h:0", ClientAddr: ok.ClientAddr},
	} {
		if err := bad.Validate(); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestChangeError(t *testing.T) {
	wrap := func(msg string) error {
		return &client.OpError{Op: "admin", Err: &client.ProtocolError{Code: wire.CodeBadAdmin, Msg: msg}}
	}
	for _, tt := range []struct {
		msg  string
		kind error
	}{
		{"not a cluster", ErrNotCluster},
		{"cluster: membership change refused: another membership change is in progress", ErrChangeInProgress},
		{`cluster: membership change refused: id "n4" is already a member (…)`, ErrInvalidChange},
		{"cluster: membership change refused: peer address h:1 is already used by n2", ErrInvalidChange},
		{`cluster: membership change refused: id "n4" was used before; choose a new id`, ErrInvalidChange},
		{`cluster: membership change refused: no member "nX"`, ErrInvalidChange},
		{"cluster: membership change refused: learner n4 did not catch up (applied 3 of 9)", ErrChangeFailed},
		{"leadership transfer: no answer within 3s", ErrChangeFailed},
	} {
		err := changeError(wrap(tt.msg))
		var ce *ChangeError
		var pe *client.ProtocolError
		if !errors.Is(err, tt.kind) || !errors.As(err, &ce) || !errors.As(err, &pe) {
			t.Errorf("%q: %v", tt.msg, err)
			continue
		}
		if strings.Contains(err.Error(), "cluster: membership") || !strings.HasPrefix(err.Error(), "the leader refused: ") {
			t.Errorf("message %q", err)
		}
	}
	other := &client.OpError{Op: "admin", Err: client.ErrNoLeader}
	if got := changeError(other); got != other {
		t.Errorf("non-BAD_ADMIN errors pass unchanged: %v", got)
	}
}

// view builds a healthy 3-voter view led by n1 at commit 100.
func testView() *ClusterView {
	clock := &wire.ClockStatus{Healthy: true, MaxSkewMS: 500, Sampled: true, Nodes: []wire.ClockNode{
		{ID: "n2", OffsetUS: 120, BoundUS: 170, RTTUS: 100, AgeMS: 400, Healthy: true},
		{ID: "n3", OffsetUS: -80, BoundUS: 130, RTTUS: 100, AgeMS: 400, Healthy: true},
	}}
	st := func(id, role string, applied uint64) *wire.StatusReply {
		return &wire.StatusReply{NodeID: id, Role: role, Leader: "h1:7470", LeaderID: "n1", Term: 7, CommitIndex: 100,
			AppliedIndex: applied, CanGrant: true, LastContactMS: 20}
	}
	v := &ClusterView{LeaderID: "n1", LeaderAddr: "h1:7470", Term: 7, CommitIndex: 100, ConfigFrom: "n1", Nodes: []NodeView{
		{ID: "n1", ClientAddr: "h1:7470", Member: true, Role: wire.NodeLeader, Voter: true, Status: st("n1", wire.NodeLeader, 100), Lag: 0},
		{ID: "n2", ClientAddr: "h2:7470", Member: true, Role: wire.NodeFollower, Voter: true, Status: st("n2", wire.NodeFollower, 99), Lag: 1},
		{ID: "n3", ClientAddr: "h3:7470", Member: true, Role: wire.NodeFollower, Voter: true, Status: st("n3", wire.NodeFollower, 100), Lag: 0},
	}}
	v.Nodes[0].Status.Clock = clock
	v.Nodes[0].Status.LastContactMS = 0
	return v
}

func TestEvaluateCluster(t *testing.T) {
	connErr := &client.OpError{Op: "dial", Err: fmt.Errorf("%w: refused", client.ErrConnect)}
	for _, tt := range []struct {
		name    string
		mut     func(v *ClusterView)
		healthy bool
		node    string // the node whose problem is expected ("" = cluster-wide)
		problem string
	}{
		{"healthy", func(*ClusterView) {}, true, "", ""},
		{"no leader", func(v *ClusterView) {
			v.LeaderID, v.Term = "", 0
			for i := range v.Nodes {
				v.Nodes[i].Status.Role, v.Nodes[i].Status.LeaderID = wire.NodeFollower, ""
			}
		}, false, "", "no leader"},
		{"leader cannot grant", func(v *ClusterView) {
			v.Nodes[0].Status.CanGrant, v.Nodes[0].Status.Reason = false, "clock unhealthy: only 1 of 3 voters have a verified clock"
		}, false, "n1", "cannot grant: clock unhealthy"},
		{"leader draining", func(v *ClusterView) { v.Nodes[0].Status.Draining = true }, false, "n1", "draining"},
		{"follower unreachable", func(v *ClusterView) { v.Nodes[2].Status, v.Nodes[2].Err, v.Nodes[2].Lag = nil, connErr, -1 }, false, "n3", "unreachable: dial: cannot connect: refused"},
		{"follower lagging", func(v *ClusterView) { v.Nodes[1].Lag = 1001 }, false, "n2", "lagging: 1001 entries"},
		{"follower at the lag bound", func(v *ClusterView) { v.Nodes[1].Lag = 1000 }, true, "", ""},
		{"follower without contact", func(v *ClusterView) { v.Nodes[1].Status.LastContactMS = 4200 }, false, "n2", "no contact from the leader for 4.2s"},
		{"follower follows another", func(v *ClusterView) { v.Nodes[1].Status.LeaderID = "n3" }, false, "n2", "follows n3, not the leader n1"},
		{"follower knows no leader", func(v *ClusterView) { v.Nodes[1].Status.LeaderID = "" }, false, "n2", "knows no leader"},
		{"stale leader", func(v *ClusterView) { v.Nodes[2].Status.Role, v.Nodes[2].Status.Term = wire.NodeLeader, 6 }, false, "n3", "also claims leadership (term 6"},
		{"skew above bound", func(v *ClusterView) {
			v.Nodes[0].Status.Clock.Nodes[0] = wire.ClockNode{ID: "n2", OffsetUS: 30_000_000, BoundUS: 30_000_050, RTTUS: 100, AgeMS: 300}
		}, false, "n2", "clock offset +30000.000ms ±0.050ms from the leader is above the 500ms bound"},
		{"stale clock sample", func(v *ClusterView) { v.Nodes[0].Status.Clock.Nodes[1].AgeMS = 5000 }, false, "n3", "clock sample is 5s old"},
		{"clock never sampled", func(v *ClusterView) {
			v.Nodes[0].Status.Clock.Nodes[1] = wire.ClockNode{ID: "n3", Err: "dial tcp: connection refused"}
		}, false, "n3", "the leader cannot sample its clock: dial tcp: connection refused"},
		{"clock not sampled yet: a warning", func(v *ClusterView) { v.Nodes[0].Status.Clock.Nodes = v.Nodes[0].Status.Clock.Nodes[:1] }, true, "", ""},
		{"recent sample error is tolerated", func(v *ClusterView) { v.Nodes[0].Status.Clock.Nodes[1].Err = "i/o timeout" }, true, "", ""},
		{"address not a member", func(v *ClusterView) {
			v.Nodes = append(v.Nodes, NodeView{ID: "n9", ClientAddr: "h9:7470", Status: &wire.StatusReply{NodeID: "n9", Role: wire.NodeFollower}, Lag: -1})
		}, false, "n9", "not a member"},
		{"learner problems are warnings", func(v *ClusterView) {
			v.Nodes = append(v.Nodes, NodeView{ID: "n4", ClientAddr: "h4:7470", Member: true, Role: wire.NodeLearner, Err: connErr, Lag: -1})
		}, true, "", ""},
		{"two voters down: no quorum", func(v *ClusterView) {
			v.Nodes[1].Status, v.Nodes[1].Err = nil, connErr
			v.Nodes[2].Status, v.Nodes[2].Err = nil, connErr
		}, false, "", "only 1 of 3 voters are healthy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := testView()
			tt.mut(v)
			r := EvaluateCluster(v, ClusterHealthConfig{})
			if r.Healthy != tt.healthy {
				t.Fatalf("healthy %v, want %v: %+v", r.Healthy, tt.healthy, r)
			}
			if tt.problem == "" {
				for _, n := range r.Nodes {
					if !n.Healthy || len(n.Problems) > 0 {
						t.Errorf("%s: %v", n.ID, n.Problems)
					}
				}
				return
			}
			var got []string
			if tt.node == "" {
				got = r.Problems
			} else {
				for _, n := range r.Nodes {
					if n.ID == tt.node {
						got = n.Problems
						if n.Healthy {
							t.Errorf("%s counted healthy", n.ID)
						}
					} else if len(n.Problems) > 0 && tt.name != "two voters down: no quorum" {
						t.Errorf("unexpected problem on %s: %v", n.ID, n.Problems)
					}
				}
			}
			if !strings.Contains(strings.Join(got, "|"), tt.problem) {
				t.Errorf("problems %q, want one containing %q", got, tt.problem)
			}
		})
	}
	// A learner's problem is a warning, and the voter counts leave it out.
	v := testView()
	v.Nodes = append(v.Nodes, NodeView{ID: "n4", ClientAddr: "h4:7470", Member: true, Role: wire.NodeLearner, Err: errors.New("down"), Lag: -1})
	r := EvaluateCluster(v, ClusterHealthConfig{MaxLag: 5})
	if r.Voters != 3 || r.VotersOK != 3 || len(r.Nodes[3].Warnings) != 1 || !r.Nodes[3].Healthy {
		t.Errorf("learner: %+v", r)
	}
	v = testView()
	v.Nodes[0].Status.Clock.Nodes = v.Nodes[0].Status.Clock.Nodes[:1]
	if r := EvaluateCluster(v, ClusterHealthConfig{}); !r.Healthy || fmt.Sprint(r.Nodes[2].Warnings) != "[clock not sampled by the leader yet]" {
		t.Errorf("unsampled voter: %+v", r.Nodes[2])
	}
	// --max-lag applies.
	v = testView()
	v.Nodes[1].Lag = 6
	if r := EvaluateCluster(v, ClusterHealthConfig{MaxLag: 5}); r.Healthy {
		t.Error("lag 6 > max 5 counted healthy")
	}
}

// ---------------------------------------------------------------------------
// Against an in-process cluster.

// joinNode starts a cluster node that waits to be added (serve --join),
// its wall clock shifted by clockOffset.
func joinNode(t *testing.T, id string, clockOffset time.Duration) (clientAddr, peerAddr string) {
	t.Helper()
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Listener = cl
	cfg.NodeID = id
	cfg.Cluster = &server.ClusterConfig{PeerListener: pl, Advertise: cl.Addr().String(), ClockOffset: clockOffset}
	s, err := server.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return cl.Addr().String(), pl.Addr().String()
}

func TestClusterOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := clustertest.Start(t, 3, clustertest.Options{})
	c.WaitClockHealthy(15 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := []client.Option{client.WithAdminToken(""), client.WithDialTimeout(2 * time.Second)}
	addrs := []string{c.Nodes[0].Client, c.Nodes[1].Client, c.Nodes[2].Client}

	// Discover from one follower finds all three and the leader.
	leader := c.WaitLeader(5 * time.Second)
	var follower *clustertest.Node
	for _, n := range c.Nodes {
		if n != leader {
			follower = n
			break
		}
	}
	// (A member's client address is known once the leader's first clock
	// sample of it is applied: shortly after the clocks are verified.)
	var v *ClusterView
	var err error
	until(15*time.Second, func() bool {
		v, err = Discover(ctx, []string{follower.Client}, 5*time.Second, opts...)
		if err != nil {
			t.Fatal(err)
		}
		complete := len(v.Nodes) == 3 && v.LeaderID != "" // the follower may not know the leader's address yet
		for _, n := range v.Nodes {
			complete = complete && n.Status != nil && n.Err == nil
		}
		return complete
	})
	if v.Single || v.LeaderID != leader.ID || v.LeaderAddr != leader.Client || len(v.Nodes) != 3 || v.ConfigFrom != leader.ID {
		t.Fatalf("view %+v", v)
	}
	for _, n := range v.Nodes {
		if !n.Member || !n.Voter || n.Status == nil || n.Err != nil || n.Lag < 0 || n.PeerAddr == "" || n.ClientAddr != c.Nodes[n.ID[1]-'1'].Client {
			t.Errorf("node %+v", n)
		}
	}

	// Healthy, once every clock was sampled.
	var hr ClusterHealthResult
	until(15*time.Second, func() bool {
		hr, err = ClusterHealth(ctx, Health(ctx, addrs, opts...), ClusterHealthConfig{}, 5*time.Second, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return hr.Healthy
	})
	if !hr.Healthy || hr.Voters != 3 || hr.VotersOK != 3 {
		t.Fatalf("not healthy: %+v", hr)
	}

	// Membership: add a learner promoted to voter, then remove it; one
	// change at a time; transfer leadership.
	cc, err := client.Dial(ctx, []string{follower.Client}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var ms []wire.Member
	var id, idc, idp string
	for attempt := 4; ; attempt++ {
		id = fmt.Sprintf("n%d", attempt)
		idc, idp = joinNode(t, id, 0)
		ms, err = AddNode(ctx, cc, AddNodeArgs{ID: id, PeerAddr: idp, ClientAddr: idc, Voter: true})
		if err == nil || attempt == 5 || !errors.Is(err, ErrChangeFailed) {
			break
		}
		// Leadership moved during the change (a loaded machine): the node
		// stayed a learner. Remove it and try once more with a fresh node.
		t.Logf("add %s: %v; retrying with a new node", id, err)
		if _, err := RemoveNode(ctx, cc, id); err != nil {
			t.Fatal(err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 || ms[3].ID != id || !ms[3].Voter || ms[3].ClientAddr != idc {
		t.Fatalf("members after add %+v", ms)
	}
	// The add returns once the leader has sampled the new voter's clock:
	// health right away counts it verified (no waiting).
	if hr, err := ClusterHealth(ctx, Health(ctx, append(addrs, idc), opts...), ClusterHealthConfig{}, 5*time.Second, opts...); err != nil || !hr.Healthy || hr.Voters != 4 || hr.VotersOK != 4 {
		t.Errorf("health right after adding %s: %+v %v", id, hr, err)
	}
	if _, err := AddNode(ctx, cc, AddNodeArgs{ID: id, PeerAddr: idp, ClientAddr: idc}); !errors.Is(err, ErrInvalidChange) {
		t.Errorf("adding %s twice: %v", id, err)
	}
	if ms, err = RemoveNode(ctx, cc, id); err != nil || len(ms) != 3 {
		t.Fatalf("remove: %+v %v", ms, err)
	}
	if _, err := RemoveNode(ctx, cc, id); !errors.Is(err, ErrInvalidChange) {
		t.Errorf("removing %s twice: %v", id, err)
	}
	// A node whose clock is 30 s off is not promoted: it stays a learner
	// (which clock health leaves out), and the leader says why.
	sid := "skewed"
	sidc, sidp := joinNode(t, sid, 30*time.Second)
	_, err = AddNode(ctx, cc, AddNodeArgs{ID: sid, PeerAddr: sidp, ClientAddr: sidc, Voter: true})
	if !errors.Is(err, ErrChangeFailed) || !strings.Contains(err.Error(), "clock") {
		t.Errorf("adding a voter 30 s off: %v, want ErrChangeFailed about its clock", err)
	}
	if ms, err = Members(ctx, cc); err != nil || len(ms) != 4 {
		t.Fatalf("members after the refused promotion: %+v %v", ms, err)
	}
	for _, m := range ms {
		if m.ID == sid && m.Voter {
			t.Errorf("%s was promoted with its clock 30 s off", sid)
		}
	}
	if ms, err = RemoveNode(ctx, cc, sid); err != nil || len(ms) != 3 {
		t.Fatalf("remove %s: %+v %v", sid, ms, err)
	}
	// Ids are never reused, not even after a remove.
	for _, old := range []struct{ id, peer, client string }{{id, idp, idc}, {sid, sidp, sidc}} {
		if _, err := AddNode(ctx, cc, AddNodeArgs{ID: old.id, PeerAddr: old.peer, ClientAddr: old.client, Voter: true}); !errors.Is(err, ErrInvalidChange) || !strings.Contains(err.Error(), "used before") {
			t.Errorf("adding the removed %s again: %v, want ErrInvalidChange (used before)", old.id, err)
		}
	}
	// A learner is promoted by adding it again with --voter (same peer
	// address); a different peer address is refused.
	lid := "learner1"
	lidc, lidp := joinNode(t, lid, 0)
	voterOf := func(ms []wire.Member, id string) (voter, found bool) {
		for _, m := range ms {
			if m.ID == id {
				return m.Voter, true
			}
		}
		return false, false
	}
	ms, err = AddNode(ctx, cc, AddNodeArgs{ID: lid, PeerAddr: lidp, ClientAddr: lidc})
	if v, ok := voterOf(ms, lid); err != nil || len(ms) != 4 || !ok || v {
		t.Fatalf("add learner: %+v %v", ms, err)
	}
	if _, err := AddNode(ctx, cc, AddNodeArgs{ID: lid, PeerAddr: "127.0.0.1:1", ClientAddr: lidc, Voter: true}); !errors.Is(err, ErrInvalidChange) {
		t.Errorf("promoting %s under another peer address: %v, want ErrInvalidChange", lid, err)
	}
	ms, err = AddNode(ctx, cc, AddNodeArgs{ID: lid, PeerAddr: lidp, ClientAddr: lidc, Voter: true})
	if v, ok := voterOf(ms, lid); err != nil || len(ms) != 4 || !ok || !v {
		t.Fatalf("promote learner: %+v %v", ms, err)
	}
	if ms, err = RemoveNode(ctx, cc, lid); err != nil || len(ms) != 3 {
		t.Fatalf("remove %s: %+v %v", lid, ms, err)
	}
	newLeader, err := TransferLeader(ctx, cc, follower.ID)
	if err != nil {
		t.Fatal(err)
	}
	if newLeader != follower.Client {
		t.Errorf("transfer to %s: leader now %q", follower.ID, newLeader)
	}

	// A follower stops: unhealthy, naming it.
	c.WaitLeader(5 * time.Second)
	var victim *clustertest.Node
	for _, n := range c.Nodes {
		if n.Srv != nil && !n.Srv.ClusterNode().Serving() {
			victim = n
			break
		}
	}
	victim.Stop()
	// Until the survivors settle (the stop may have cost an election):
	// exactly the victim fails.
	settled := func(hr ClusterHealthResult) bool {
		if len(hr.Problems) != 0 || hr.VotersOK != 2 {
			return false
		}
		for _, n := range hr.Nodes {
			if (n.ID == victim.ID) == n.Healthy || !n.Member {
				return false
			}
		}
		return true
	}
	until(20*time.Second, func() bool {
		hr, err = ClusterHealth(ctx, Health(ctx, addrs, opts...), ClusterHealthConfig{}, 3*time.Second, opts...)
		return err == nil && settled(hr)
	})
	if err != nil || !settled(hr) {
		t.Errorf("with %s stopped: %v problems %v", victim.ID, err, hr.Problems)
		for _, n := range hr.Nodes {
			t.Errorf("  %+v healthy=%v problems %v", n.NodeView, n.Healthy, n.Problems)
		}
		t.FailNow()
	}
	for _, n := range hr.Nodes {
		if n.ID == victim.ID && !strings.HasPrefix(strings.Join(n.Problems, ";"), "unreachable: ") {
			t.Errorf("victim's problems %v", n.Problems)
		}
	}
}

func TestDiscoverSingle(t *testing.T) {
	addr := startServer(t, func(c *server.Config) { c.NodeID = "solo" })
	opts := []client.Option{client.WithAdminToken(""), client.WithDialTimeout(500 * time.Millisecond)}
	v, err := Discover(context.Background(), []string{addr, "127.0.0.1:1"}, 2*time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Single || len(v.Nodes) != 2 || v.Nodes[0].ID != "solo" || v.Nodes[0].Status == nil || v.Nodes[1].Err == nil {
		t.Fatalf("%+v", v)
	}
	if _, err := Discover(context.Background(), []string{"127.0.0.1:1"}, 2*time.Second, opts...); !errors.Is(err, client.ErrConnect) {
		t.Errorf("nothing reachable: %v", err)
	}
	c, err := Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := RemoveNode(context.Background(), c, "x"); !errors.Is(err, ErrNotCluster) {
		t.Errorf("remove on a single node: %v", err)
	}
	p, n, err := BestPing(context.Background(), c, 3, time.Millisecond)
	if err != nil || n != 3 || p.RTT <= 0 {
		t.Errorf("best ping %+v %d %v", p, n, err)
	}
}

// A node that refuses the connection (stopped: nothing listens at its
// address), or an unknown host, costs discovery nothing: client.Dial alone retries a refused
// address for the whole dial timeout, so it cost every operator command
// that looks at the cluster (node list, clock-skew, health) --timeout.
func TestDiscoverRefusedCostsNothing(t *testing.T) {
	addr := startServer(t, func(c *server.Config) { c.NodeID = "solo" })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := l.Addr().String()
	l.Close()
	const dialTimeout = 5 * time.Second
	opts := []client.Option{client.WithAdminToken(""), client.WithDialTimeout(dialTimeout)}
	start := time.Now()
	v, err := Discover(context.Background(), []string{refusing, addr}, 2*dialTimeout, opts...)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Nodes) != 2 || v.Nodes[1].Status == nil || !errors.Is(v.Nodes[0].Err, client.ErrConnect) || !strings.Contains(v.Nodes[0].Err.Error(), "connection refused") {
		t.Fatalf("%+v", v)
	}
	if took > dialTimeout/2 {
		t.Errorf("discovery with a refusing address took %v (dial timeout %v)", took, dialTimeout)
	}
	// A host name that does not exist neither.
	start = time.Now()
	v, err = Discover(context.Background(), []string{"no-such-host.invalid:7470", addr}, 2*dialTimeout, opts...)
	if err != nil || len(v.Nodes) != 2 || !errors.Is(v.Nodes[0].Err, client.ErrConnect) || time.Since(start) > dialTimeout/2 {
		t.Errorf("an unknown host: %+v %v after %v", v, err, time.Since(start))
	}
	// And the refusal alone is the error when nothing answers.
	start = time.Now()
	if _, err := Discover(context.Background(), []string{refusing}, 2*dialTimeout, opts...); !errors.Is(err, client.ErrConnect) || time.Since(start) > dialTimeout/2 {
		t.Errorf("only a refusing address: %v after %v", err, time.Since(start))
	}
}

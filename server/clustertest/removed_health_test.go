package clustertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// `health` asked only of a node that was removed from the cluster (while
// connected: raft sent it the configuration that leaves it out) reads the
// cluster's configuration from the leader, not the removed node's stale
// one (issue #13): the view names the serving leader, the other members are
// healthy, and the removed node fails as not a member, named removed.
// Before the fix, once the removed node stopped hearing from the leader,
// health built the view from its configuration and reported "no leader".
func TestHealthOfARemovedNodeReadsTheLeadersConfiguration(t *testing.T) {
	const tok = "removed-health-token-0123456789abcdef"
	adminTok := client.WithAdminToken(tok + "-admin")
	c := Start(t, 3, Options{Token: tok, Mutate: func(_ int, cfg *server.Config) { cfg.AdminToken = tok + "-admin" }})
	l := c.WaitClockHealthy(10 * time.Second)
	var f *Node
	for _, n := range c.Nodes {
		if n != l {
			f = n
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := l.Srv.ClusterNode().RemoveNode(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	// Wait until the removed node no longer hears from a leader (raft
	// stopped replicating to it): from then on only the fix names one.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, id := f.Srv.ClusterNode().Raft().LeaderWithID(); id == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still hears from a leader after its removal", f.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	check := func() (string, bool) {
		hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res := admin.Health(hctx, []string{f.Client}, adminTok)
		ch, err := admin.ClusterHealth(hctx, res, admin.ClusterHealthConfig{}, 3*time.Second, adminTok)
		if err != nil {
			return "cluster health: " + err.Error(), false
		}
		var b strings.Builder
		ok := ch.View.LeaderID == l.ID && ch.View.ConfigFrom == l.ID && !ch.Healthy
		for _, n := range ch.Nodes {
			b.WriteString(n.ID + " member=" + map[bool]string{true: "yes", false: "no"}[n.Member] + " " + strings.Join(n.Problems, "; ") + "\n")
			switch {
			case n.ID == f.ID:
				ok = ok && !n.Member && !n.Healthy && len(n.Problems) > 0 &&
					(strings.Contains(n.Problems[0], "removed") || strings.Contains(n.Problems[0], "not a member"))
			default:
				ok = ok && n.Member && n.Healthy
			}
		}
		return "leader " + ch.View.LeaderID + ", configuration from " + ch.View.ConfigFrom + ", problems " + strings.Join(ch.Problems, "; ") + "\n" + b.String(), ok
	}
	// A probe round (about a second) may pass before the removed node
	// learns whom its peers follow; then every check is right.
	deadline = time.Now().Add(15 * time.Second)
	for {
		got, ok := check()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health asked of the removed %s:\n%s", f.ID, got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := range 3 {
		if got, ok := check(); !ok {
			t.Fatalf("health asked of the removed %s, check %d:\n%s", f.ID, i, got)
		}
	}
	// And the node itself says so.
	deadline = time.Now().Add(15 * time.Second)
	for f.Srv.ClusterNode().Info().Role != wire.NodeRemoved {
		if time.Now().After(deadline) {
			t.Fatalf("%s never reported role removed", f.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := f.Srv.Status()
	if st.CanGrant || !strings.Contains(st.Reason, "removed") || st.Leader != l.Client {
		t.Errorf("status of the removed node: can_grant %v, reason %q, leader %q; want false, the removal named, leader %s", st.CanGrant, st.Reason, st.Leader, l.Client)
	}
}

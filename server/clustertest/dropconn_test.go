package clustertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/servertest"
)

// A connection that closes while its acquire is queued leaves the
// replicated table (protocol.md §5 "closed connections"): on release the key
// goes to the next live waiter, not to the dead one, and the table is the
// same on every node. A leader change in the middle (a loaded machine)
// drops every waiter by design (LeaderStart), so the scenario is tried
// again on a fresh key, at most three times.
func TestClosedConnectionsWaiterLeavesTheReplicatedQueue(t *testing.T) {
	c := Start(t, 3, Options{})
	for attempt := 1; ; attempt++ {
		l := c.WaitClockHealthy(10 * time.Second)
		term := l.Srv.ClusterNode().Raft().CurrentTerm()
		err := closedWaiterScenario(t, c, l, fmt.Sprintf("dc/k%d", attempt))
		if err == nil {
			break
		}
		if now := c.Leader(); now == l && l.Srv.ClusterNode().Raft().CurrentTerm() == term || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; the leadership changed meanwhile: again", attempt, err)
	}
	c.WaitSameDigest(10 * time.Second)
}

func closedWaiterScenario(t *testing.T, c *Cluster, l *Node, key string) error {
	holder := servertest.Dial(t, l.Client, servertest.Options{})
	dead := servertest.Dial(t, l.Client, servertest.Options{})
	live := servertest.Dial(t, l.Client, servertest.Options{})
	defer holder.Close()
	defer live.Close()
	g := holder.Acquire(key, 30000, 0)
	if g.Status != wire.StatusGranted {
		return fmt.Errorf("holder's acquire: %s", servertest.Describe(g))
	}
	tok := g.Value

	dead.Write(wire.AppendAcquire(nil, dead.NextID(), key, 30000, 20000))
	time.Sleep(100 * time.Millisecond) // queued first
	liveID := live.NextID()
	live.Write(wire.AppendAcquire(nil, liveID, key, 30000, 20000))
	if err := queueLen(c, key, 2); err != nil {
		return err
	}

	dead.Close()
	if err := queueLen(c, key, 1); err != nil { // the dead waiter left the queue on every node
		return err
	}

	if r := holder.Release(key, tok); r.Status != wire.StatusReleased {
		return fmt.Errorf("release: %s", servertest.Describe(r))
	}
	r, err := live.ReadResponseErr(10 * time.Second)
	if err != nil {
		return fmt.Errorf("live waiter: %w", err)
	}
	if r.ReqID != liveID || r.Status != wire.StatusGranted || r.Value <= tok {
		return fmt.Errorf("live waiter: %s, want G with a token above %d", servertest.Describe(r), tok)
	}
	return nil
}

// queueLen waits until every running node's table has n waiters on key.
func queueLen(c *Cluster, key string, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		var got []int
		for _, nd := range c.Running() {
			st, _ := nd.Srv.ClusterNode().FSM().StateDigest()
			w := 0
			for _, k := range st.Keys {
				if k.Key == key {
					w = len(k.Waiters)
				}
			}
			got = append(got, w)
			ok = ok && w == n
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: waiters per node %v, want %d on each", key, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

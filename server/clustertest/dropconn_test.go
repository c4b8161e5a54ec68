package clustertest

import (
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/servertest"
)

// A connection that closes while its acquire is queued leaves the
// replicated table (protocol.md §5 "closed connections"): on release the key
// goes to the next live waiter, not to the dead one, and the table is the
// same on every node.
func TestClosedConnectionsWaiterLeavesTheReplicatedQueue(t *testing.T) {
	c := Start(t, 3, Options{})
	l := c.WaitClockHealthy(10 * time.Second)
	holder := servertest.Dial(t, l.Client, servertest.Options{})
	dead := servertest.Dial(t, l.Client, servertest.Options{})
	live := servertest.Dial(t, l.Client, servertest.Options{})
	tok := holder.MustAcquire("dc/k", 30000)

	dead.Write(wire.AppendAcquire(nil, dead.NextID(), "dc/k", 30000, 20000))
	time.Sleep(100 * time.Millisecond) // queued first
	liveID := live.NextID()
	live.Write(wire.AppendAcquire(nil, liveID, "dc/k", 30000, 20000))
	waitQueue(t, c, "dc/k", 2)

	dead.Close()
	waitQueue(t, c, "dc/k", 1) // the dead waiter left the queue on every node

	if r := holder.Release("dc/k", tok); r.Status != wire.StatusReleased {
		t.Fatalf("release: %s", servertest.Describe(r))
	}
	r := live.Read()
	if r.ReqID != liveID || r.Status != wire.StatusGranted || r.Value <= tok {
		t.Fatalf("live waiter: %s, want G with a token above %d", servertest.Describe(r), tok)
	}
	c.WaitSameDigest(10 * time.Second)
}

// waitQueue waits until every running node's table has n waiters on key.
func waitQueue(t *testing.T, c *Cluster, key string, n int) {
	t.Helper()
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
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: waiters per node %v, want %d on each", key, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

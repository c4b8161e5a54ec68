package clustertest

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketing/ticketing/server"
)

// Leadership never moves to a node whose clock the leader measured beyond
// max_clock_skew (issue #13 item 1): transfer-leader to it is refused with
// the skew named, and an unnamed transfer (as on shutdown) picks a voter
// whose clock is verified.
func TestTransferRefusedToASkewedClock(t *testing.T) {
	var skew [3]atomic.Int64 // ns added to each node's wall clock
	c := Start(t, 3, Options{Mutate: func(i int, cfg *server.Config) {
		cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew[i].Load())) }
	}})
	l := c.WaitClockHealthy(10 * time.Second)
	var skewed, good *Node
	for i, n := range c.Nodes {
		if n == l {
			continue
		}
		if skewed == nil {
			skewed = n
			skew[i].Store(int64(-30 * time.Second))
		} else {
			good = n
		}
	}
	// Wait until the leader has measured the skew (it samples about once a
	// second; a generous bound for a loaded machine).
	deadline := time.Now().Add(45 * time.Second)
	for {
		measured := false
		for _, s := range l.Srv.ClusterNode().Info().Clock.Nodes {
			if s.ID == skewed.ID && s.Err == "" && s.OffsetUS < -20e6 {
				measured = true
			}
		}
		if measured {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader never measured %s's skew", skewed.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	err := l.Srv.ClusterNode().TransferLeader(skewed.ID)
	if err == nil {
		t.Fatalf("transfer to %s (30 s behind) succeeded", skewed.ID)
	}
	if !strings.Contains(err.Error(), "above the 500ms bound") || !strings.Contains(err.Error(), skewed.ID) {
		t.Fatalf("refusal does not name the node and its skew: %v", err)
	}
	if got := c.WaitLeader(10 * time.Second); got != l {
		t.Fatalf("leadership moved to %s after a refused transfer", got.ID)
	}
	// Unnamed: the verified voter, never the skewed one.
	if err := l.Srv.ClusterNode().TransferLeader(""); err != nil {
		t.Fatalf("unnamed transfer: %v", err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		nl := c.Leader()
		if nl != nil && nl != l {
			if nl != good {
				t.Fatalf("unnamed transfer went to %s, want the verified %s", nl.ID, good.ID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader after the unnamed transfer")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

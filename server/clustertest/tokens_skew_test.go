package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/server"
)

// Tokens strictly increase across every leader change, including transfers
// within a second to nodes whose clocks run up to max_clock_skew behind the
// first leader's (400 ms of a 500 ms bound): the fencing domain is a
// replicated counter seeded once, never re-seeded from a new leader's clock
// (protocol.md §6).
func TestTokensIncreaseAcrossFastTransfersToSlowClocks(t *testing.T) {
	c := Start(t, 3, Options{Mutate: func(i int, cfg *server.Config) {
		if i > 0 {
			cfg.Now = func() time.Time { return time.Now().Add(-400 * time.Millisecond) }
		}
	}})
	c.WaitClockHealthy(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, c.ClientAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var last uint64
	take := func(round int) {
		t.Helper()
		// Each key is fresh: an acquire or release that a leader change
		// on a loaded machine leaves undecided changes no later answer,
		// and is retried on the next key (tokens are what is checked).
		failed := 0
		for i := 0; i < 5; i++ {
			l, err := cl.Acquire(ctx, fmt.Sprintf("skew/%d/%d", round, i), 10*time.Second, 15*time.Second)
			if err != nil {
				if failed++; failed > 3 {
					t.Fatalf("round %d: acquire: %v", round, err)
				}
				t.Logf("round %d: acquire (retried on a fresh key): %v", round, err)
				continue
			}
			if l.Token() <= last {
				t.Fatalf("round %d: token %d after %d: not strictly increasing", round, l.Token(), last)
			}
			last = l.Token()
			if err := l.Release(ctx); err != nil {
				t.Logf("round %d: release (the lease ends it): %v", round, err)
			}
		}
	}
	take(0)
	moved := 0
	for round := 1; round <= 6; round++ {
		l := c.WaitLeader(10 * time.Second)
		target := c.Nodes[round%3].ID
		if target == l.ID {
			target = c.Nodes[(round+1)%3].ID
		}
		if err := l.Srv.ClusterNode().TransferLeader(target); err != nil {
			t.Logf("round %d: transfer to %s: %v", round, target, err)
		} else {
			moved++
		}
		take(round) // at once: well within a second of the transfer
	}
	if moved < 3 {
		t.Fatalf("only %d of 6 transfers succeeded", moved)
	}
}

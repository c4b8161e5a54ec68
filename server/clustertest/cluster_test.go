package clustertest

import (
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/servertest"
)

func TestClusterAcquireReleaseAndMoved(t *testing.T) {
	c := Start(t, 3, Options{})
	l := c.WaitClockHealthy(10 * time.Second)
	cc := servertest.Dial(t, l.Client, servertest.Options{})
	r := cc.Acquire("k", 10000, 0)
	if r.Status != wire.StatusGranted {
		t.Fatalf("acquire on leader: %s", servertest.Describe(r))
	}
	tok := r.Value
	if r2 := cc.Acquire("k", 10000, 0); r2.Status != wire.StatusTimeout {
		t.Fatalf("second acquire: %s", servertest.Describe(r2))
	}
	for _, n := range c.Nodes {
		if n == l {
			continue
		}
		fc := servertest.Dial(t, n.Client, servertest.Options{})
		r := fc.Acquire("k", 10000, 0)
		if r.Status != wire.StatusMoved || string(r.Payload) != l.Client {
			t.Fatalf("follower %s: %s, want M %s", n.ID, servertest.Describe(r), l.Client)
		}
	}
	if r := cc.Release("k", tok); r.Status != wire.StatusReleased {
		t.Fatalf("release: %s", servertest.Describe(r))
	}
	r = cc.Acquire("k", 10000, 0)
	if r.Status != wire.StatusGranted || r.Value <= tok {
		t.Fatalf("reacquire: %s (prev token %d)", servertest.Describe(r), tok)
	}
}

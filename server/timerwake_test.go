package server_test

import (
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// A lease shorter than every armed one wakes the shard's timer, which
// sleeps until the earliest deadline it read (rearm, issue 35: only a
// deadline armed since can be earlier): the 300 ms lease ends and its
// waiter is granted long before the 60 s lease granted first on that shard.
func TestShorterLeaseWakesTimer(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.Shards = 1 })
	h := dial(t, s)
	h.MustAcquire("wake/long", 60000)
	h.Acquire("wake/other", 1000, 0) // a round trip: the timer has its kick
	sent := time.Now()
	h.MustAcquire("wake/short", 300)
	w := dial(t, s)
	w.Write(wire.AppendAcquire(nil, 1, "wake/short", 1000, 30000))
	r, err := w.ReadResponseErr(long)
	if err != nil {
		t.Fatalf("the 300 ms lease did not end within %v: %v", long, err)
	}
	expect(t, r, wire.StatusGranted, 0, 1)
	if el := time.Since(sent); el < 300*time.Millisecond {
		t.Fatalf("lease of 300 ms ended after %v", el)
	}
}

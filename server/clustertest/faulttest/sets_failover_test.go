package faulttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/server/clustertest"
)

// TestSetsAcrossLeaderChanges (issue 30, key sets in the cluster,
// protocol.md §12.2 and §7): a held key set survives a leadership transfer
// and a SIGKILL of the leader with its token on every key; single-key
// waiters queued behind an inherited set are granted in FIFO order when it
// is released, each with a greater token; a set acquire queued on the
// leader that dies ends ErrIndeterminate and leaves nothing held (the new
// leader drops it); tokens only grow across the leaders; releases free every
// key of a set.
func TestSetsAcrossLeaderChanges(t *testing.T) {
	needBinary(t)
	c := clustertest.StartProcs(t, bin, 3, clustertest.ProcOptions{})
	l1 := c.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dial := func(label string) *client.Client {
		t.Helper()
		cl, err := client.Dial(ctx, c.ClientAddrs(), client.WithLabel(label))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	cl := dial("holder")
	keysA := []string{"fs/a", "fs/b", "fs/c"}
	setA, err := cl.AcquireSet(ctx, keysA, time.Minute, 10*time.Second)
	if err != nil {
		t.Fatalf("acquire set A: %v", err)
	}
	tokens := []uint64{setA.Token()} // every token granted, in grant order

	// heldBy: on p, every key is held under token, listed as one set
	heldBy := func(p *clustertest.Proc, keys []string, token uint64) {
		t.Helper()
		for _, k := range keys {
			eventually(t, 20*time.Second, fmt.Sprintf("%s lists %s held by token %d as the set %v", p.ID, k, token, keys), func() bool {
				r, ok := lockRow(t, p, k)
				return ok && r.Token == token && slices.Equal(r.Set, keys)
			})
		}
	}
	free := func(p *clustertest.Proc, keys ...string) {
		t.Helper()
		for _, k := range keys {
			eventually(t, 20*time.Second, p.ID+" lists "+k+" free", func() bool {
				_, ok := lockRow(t, p, k)
				return !ok
			})
		}
	}
	depth := func(p *clustertest.Proc, key string, n int) {
		t.Helper()
		eventually(t, 20*time.Second, fmt.Sprintf("%d waiters on %s at %s", n, key, p.ID), func() bool {
			r, ok := lockRow(t, p, key)
			return ok && r.QueueDepth == n
		})
	}

	// 1. transfer: the set stays held with its token, on every member
	var lr struct {
		Leader string `json:"leader"`
	}
	if err := c.LeaderQuery(30*time.Second, "transfer-leader", nil, &lr); err != nil {
		t.Fatalf("transfer-leader: %v", err)
	}
	l2 := newLeader(t, c, l1)
	t.Logf("leadership moved %s → %s", l1.ID, l2.ID)
	for _, p := range c.Members() {
		heldBy(p, keysA, setA.Token())
	}

	// 2. three single-key waiters queue on fs/b behind the inherited set,
	// one at a time (each seen queued before the next is sent)
	type grant struct {
		i   int
		tok uint64
		err error
	}
	grants := make(chan grant, 3)
	for i := range 3 {
		w := dial(fmt.Sprintf("w%d", i+1))
		go func() {
			l, err := w.Acquire(ctx, "fs/b", time.Minute, 60*time.Second)
			if err != nil {
				grants <- grant{i, 0, err}
				return
			}
			grants <- grant{i, l.Token(), nil} // before the release that lets the next one in
			_ = l.Release(ctx)                 // checked below: fs/b ends free
		}()
		depth(l2, "fs/b", i+1)
	}
	if r, _ := lockRow(t, l2, "fs/b"); len(r.Waiters) != 3 || r.Waiters[0].Label != "w1" || r.Waiters[2].Label != "w3" {
		t.Errorf("fs/b's waiters on %s: %+v, want w1, w2, w3 in order", l2.ID, r.Waiters)
	}
	if err := setA.Release(ctx); err != nil {
		t.Fatalf("release set A: %v", err)
	}
	for want := range 3 {
		select {
		case g := <-grants:
			if g.err != nil {
				t.Fatalf("waiter w%d: %v", g.i+1, g.err)
			}
			if g.i != want {
				t.Fatalf("fs/b granted to w%d, want w%d (FIFO)", g.i+1, want+1)
			}
			if g.tok <= tokens[len(tokens)-1] {
				t.Fatalf("w%d's token %d not above the last granted %d", g.i+1, g.tok, tokens[len(tokens)-1])
			}
			tokens = append(tokens, g.tok)
		case <-time.After(60 * time.Second):
			t.Fatalf("waiter w%d not granted within 60 s of the set's release", want+1)
		}
	}
	free(l2, keysA...)

	// 3. SIGKILL: a set held on the second leader survives it; a set queued
	// behind it on that leader ends indeterminate and holds nothing
	keysB := []string{"fs/b", "fs/d"}
	setB, err := cl.AcquireSet(ctx, keysB, time.Minute, 10*time.Second)
	if err != nil {
		t.Fatalf("acquire set B: %v", err)
	}
	if setB.Token() <= tokens[len(tokens)-1] {
		t.Fatalf("set B's token %d not above %d", setB.Token(), tokens[len(tokens)-1])
	}
	tokens = append(tokens, setB.Token())
	queued := make(chan error, 1)
	qc := dial("queued-set")
	go func() {
		l, err := qc.AcquireSet(ctx, []string{"fs/d", "fs/z"}, time.Minute, 60*time.Second)
		if err == nil {
			err = fmt.Errorf("granted token %d while set B holds fs/d", l.Token())
		}
		queued <- err
	}()
	depth(l2, "fs/d", 1)
	l2.Kill()
	t.Logf("SIGKILL %s with set B held and a set queued", l2.ID)
	select {
	case err := <-queued:
		if !errors.Is(err, client.ErrIndeterminate) {
			t.Errorf("the set queued on the killed leader: %v, want ErrIndeterminate", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the queued set's acquire did not end within 90 s of the kill")
	}
	l3 := newLeader(t, c, l2)
	t.Logf("%s leads", l3.ID)
	heldBy(l3, keysB, setB.Token())
	if r, ok := lockRow(t, l3, "fs/d"); ok && r.QueueDepth != 0 {
		t.Errorf("fs/d on %s still has %d waiters: the dead leader's queued set was not dropped", l3.ID, r.QueueDepth)
	}
	free(l3, "fs/z")

	// 4. tokens keep growing on the third leader; the set's release frees both keys
	other, err := cl.Acquire(ctx, "fs/new", time.Minute, 10*time.Second)
	if err != nil {
		t.Fatalf("acquire on %s: %v", l3.ID, err)
	}
	if other.Token() <= tokens[len(tokens)-1] {
		t.Errorf("token %d on the third leader not above %d", other.Token(), tokens[len(tokens)-1])
	}
	if err := setB.Release(ctx); err != nil {
		t.Fatalf("release set B: %v", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatalf("release fs/new: %v", err)
	}
	free(l3, "fs/b", "fs/d", "fs/new")
	for _, p := range c.Members() {
		if p != l2 {
			free(p, "fs/a", "fs/b", "fs/c", "fs/d", "fs/z", "fs/new")
		}
	}
}

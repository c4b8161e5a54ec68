package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Key sets and labels against the real server (protocol.md §12.2, §12.3).

func TestAcquireSetReal(t *testing.T) {
	srv := startServer(t, nil)
	ctx := context.Background()
	cl := dial(t, []string{srv.Addr()}, WithAppName("settest"))
	other := dial(t, []string{srv.Addr()}, WithLabel("other"))
	adm := adminOf(t, srv.Addr())
	if f, ok := cl.Features(); !ok || !f.Has(wire.FeatureKeySets|wire.FeatureLabels) {
		t.Fatalf("features %v %v", f, ok)
	}
	keys := []string{"set/a", "set/b", "set/c"}
	l, err := cl.AcquireSet(ctx, keys, 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Keys(), keys) || l.Key() != "set/a" || l.Token() == 0 {
		t.Fatalf("lock keys %v key %q token %d", l.Keys(), l.Key(), l.Token())
	}
	// one holder in locks, with the label
	ls := locksOf(t, adm, "set/")
	for _, k := range keys {
		e := ls[k]
		if e.Token != l.Token() || !slices.Equal(e.Set, keys) || e.Holder == nil || e.Holder.Label != DefaultLabel("settest") {
			t.Fatalf("locks %s: %+v", k, e)
		}
	}
	if _, err := other.Acquire(ctx, "set/b", time.Second, 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("single acquire of a set key: %v", err)
	}
	if err := other.Release(ctx, "set/b", l.Token()); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("R on a set key: %v", err)
	}
	if err := other.ReleaseSet(ctx, keys[:2], l.Token()); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("X of part of the set: %v", err)
	}
	// a set waiting for a held key gets it at the release
	got := make(chan error, 1)
	go func() {
		l2, err := other.AcquireSet(ctx, []string{"set/c", "set/d"}, 30*time.Second, 20*time.Second)
		if err == nil {
			if l2.Token() <= l.Token() {
				err = errors.New("token not above the earlier one")
			} else {
				err = l2.Release(ctx)
			}
		}
		got <- err
	}()
	eventually(t, "the set to queue", func() bool { return locksOf(t, adm, "set/c")["set/c"].QueueDepth == 1 })
	if w := locksOf(t, adm, "set/c")["set/c"].Waiters; len(w) != 1 || w[0].Label != "other" || !slices.Equal(w[0].Set, []string{"set/c", "set/d"}) {
		t.Fatalf("waiters %+v", w)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := len(locksOf(t, adm, "set/")); n != 0 {
		t.Fatalf("%d keys still held", n)
	}
	// arguments are checked before anything is sent
	for _, bad := range [][]string{{"one"}, {"a", "a"}, {"a", "b\x00"}, make([]string, 17)} {
		if _, err := cl.AcquireSet(ctx, bad, time.Second, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("AcquireSet(%q): %v", bad, err)
		}
	}
}

// ctx ending while a set waits withdraws it from every queue.
func TestAcquireSetCancelReal(t *testing.T) {
	srv := startServer(t, nil)
	ctx := context.Background()
	cl := dial(t, []string{srv.Addr()})
	adm := adminOf(t, srv.Addr())
	h, err := cl.Acquire(ctx, "sc/a", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cl.AcquireSet(cctx, []string{"sc/a", "sc/b"}, 30*time.Second, 20*time.Second)
		done <- err
	}()
	eventually(t, "the set to queue", func() bool { return locksOf(t, adm, "sc/a")["sc/a"].QueueDepth == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled AcquireSet: %v", err)
	}
	eventually(t, "the set to leave the queue", func() bool { return locksOf(t, adm, "sc/a")["sc/a"].QueueDepth == 0 })
	if l, err := cl.Acquire(ctx, "sc/b", time.Second, 0); err != nil { // only blocked for the set: free again
		t.Fatalf("sc/b after the cancel: %v", err)
	} else {
		l.Release(ctx)
	}
	h.Release(ctx)
}

// A 1.0 server (the fake announces no feature): AcquireSet and ReleaseSet
// fail at once, and nothing is sent.
func TestAcquireSetUnsupported(t *testing.T) {
	f := newFake(t, fakeOpts{})
	cl := dial(t, []string{f.addr})
	if _, err := cl.AcquireSet(context.Background(), []string{"a", "b"}, time.Second, time.Second); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("AcquireSet: %v, want ErrUnsupported", err)
	}
	if err := cl.ReleaseSet(context.Background(), []string{"a", "b"}, 5); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("ReleaseSet: %v, want ErrUnsupported", err)
	}
	select {
	case r := <-f.reqs:
		t.Fatalf("sent %c", r.Op)
	default:
	}
}

package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	st "github.com/ticketing/ticketing/server/servertest"
)

// The single node's key sets (backend_sets.go, issue 35 set2 row): a set's
// keys stay in the set table after its release and go back to their shards
// only once idle at two tidy passes, or all at once when too many moved.

func startTables(t *testing.T, mod func(*Config)) (*Server, *tables) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Shards = 4
	if mod != nil {
		mod(&cfg)
	}
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	b := s.lock.(*tables)
	b.tidyNs.Store(int64(time.Hour)) // passes only when a test runs them
	return s, b
}

// moved reports whether key is one of setKeys, and whether the set table
// has an entry for it.
func (b *tables) moved(key string) (inSetKeys, known bool) {
	b.setMu.RLock()
	_, inSetKeys = b.setKeys[key]
	b.setMu.RUnlock()
	b.setSh.mu.Lock()
	known = b.setSh.t.Known(key)
	b.setSh.mu.Unlock()
	return inSetKeys, known
}

func TestSetKeysStayMovedUntilIdleTwice(t *testing.T) {
	s, b := startTables(t, nil)
	c := st.Dial(t, s.Addr(), st.Options{Role: wire.RoleClient})
	set := []string{"acct/17", "acct/42"}
	r := c.Do(wire.AppendAcquireSet(nil, 1, set, 30000, 0))
	if r.Status != wire.StatusGranted {
		t.Fatalf("S: %s", st.Describe(r))
	}
	tok := r.Value
	if r = c.Do(wire.AppendReleaseSet(nil, 2, set, tok)); r.Status != wire.StatusReleased {
		t.Fatalf("X: %s", st.Describe(r))
	}
	// released, the keys stay in the set table (before: moved back at once)
	for _, k := range set {
		if in, known := b.moved(k); !in || !known {
			t.Fatalf("%q after X: in setKeys %v, entry in the set table %v; want both", k, in, known)
		}
	}
	// the next set on them is served there; a single acquire too, in order
	r = c.Do(wire.AppendAcquireSet(nil, 3, set, 30000, 0))
	if r.Status != wire.StatusGranted || r.Value <= tok {
		t.Fatalf("second S: %s, want G above %d", st.Describe(r), tok)
	}
	tok = r.Value
	if r = c.Acquire(set[0], 1000, 0); r.Status != wire.StatusTimeout {
		t.Fatalf("A on a key of a held set: %s, want T", st.Describe(r))
	}
	b.tidySetKeys()
	b.tidySetKeys()
	if got := b.nSetKeys.Load(); got != 2 {
		t.Fatalf("held set's keys after two passes: %d moved, want 2", got)
	}
	if r = c.Do(wire.AppendReleaseSet(nil, 4, set, tok)); r.Status != wire.StatusReleased {
		t.Fatalf("X: %s", st.Describe(r))
	}
	if r = c.Acquire(set[0], 30000, 0); r.Status != wire.StatusGranted || r.Value <= tok {
		t.Fatalf("A after X: %s, want G above %d", st.Describe(r), tok)
	}
	single := r.Value
	b.tidySetKeys() // set[0] held, set[1] idle: marked
	b.tidySetKeys() // set[1] idle twice: back
	if in, known := b.moved(set[1]); in || known {
		t.Fatalf("%q idle at two passes: in setKeys %v, entry %v; want neither", set[1], in, known)
	}
	if in, _ := b.moved(set[0]); !in {
		t.Fatalf("%q is held in the set table: it must stay", set[0])
	}
	if r = c.Release(set[0], single); r.Status != wire.StatusReleased {
		t.Fatalf("R: %s", st.Describe(r))
	}
	b.tidySetKeys()
	b.tidySetKeys()
	if got := b.nSetKeys.Load(); got != 0 {
		t.Fatalf("%d keys moved after every key was idle at two passes", got)
	}
	// back in their shards, with the tokens still rising
	if r = c.Acquire(set[0], 1000, 0); r.Status != wire.StatusGranted || r.Value <= single {
		t.Fatalf("A in its shard: %s, want G above %d", st.Describe(r), single)
	}
}

// Moving keys beyond setTidyAt first returns every idle one: the moved keys
// stay bounded however many distinct keys sets name.
func TestSetKeysBounded(t *testing.T) {
	s, b := startTables(t, func(c *Config) { c.IdleKeyCache = 8 }) // 2 per shard: setIdleCap 8
	c := st.Dial(t, s.Addr(), st.Options{Role: wire.RoleClient})
	held := c.Do(wire.AppendAcquireSet(nil, 1, []string{"held/1", "held/2"}, 30000, 0))
	if held.Status != wire.StatusGranted {
		t.Fatalf("S: %s", st.Describe(held))
	}
	for i := range 200 {
		set := []string{fmt.Sprintf("k/%d/a", i), fmt.Sprintf("k/%d/b", i), fmt.Sprintf("k/%d/c", i)}
		r := c.Do(wire.AppendAcquireSet(nil, 2, set, 30000, 0))
		if r.Status != wire.StatusGranted {
			t.Fatalf("S %d: %s", i, st.Describe(r))
		}
		if r = c.Do(wire.AppendReleaseSet(nil, 3, set, r.Value)); r.Status != wire.StatusReleased {
			t.Fatalf("X %d: %s", i, st.Describe(r))
		}
		// 2 active keys: at most 2×2 + 8 before a move, plus the 3 moved
		if n := b.nSetKeys.Load(); n > 2*2+8+3 {
			t.Fatalf("after %d sets %d keys moved, want ≤ 15", i+1, n)
		}
	}
	if in, known := b.moved("held/1"); !in || !known {
		t.Fatal("a held set's key went back")
	}
}

// A single-key request and a set on the same key, from two connections,
// while tidy passes move the keys back and forth: never both held, and the
// key's tokens rise at every grant.
func TestSetAndSingleRaceOnOneKey(t *testing.T) {
	s, b := startTables(t, nil)
	b.tidyNs.Store(int64(time.Millisecond))
	b.setSh.kickTimer()
	var holding atomic.Int32
	var mu sync.Mutex
	var last uint64
	hold := func(who string, tok uint64) error {
		if !holding.CompareAndSwap(0, 1) {
			return fmt.Errorf("%s granted (token %d) while the other holds the key", who, tok)
		}
		mu.Lock()
		defer mu.Unlock()
		if tok <= last {
			return fmt.Errorf("%s token %d not above %d", who, tok, last)
		}
		last = tok
		return nil
	}
	const rounds = 300
	errs := make(chan error, 2)
	run := func(c *st.Conn, who string, acq func(id uint32) []byte, rel func(id uint32, tok uint64) []byte) {
		errs <- func() error {
			for i := range uint32(rounds) {
				if err := c.WriteErr(acq(2 * i)); err != nil {
					return err
				}
				r, err := c.ReadResponseErr(10 * time.Second)
				if err != nil {
					return err
				}
				if r.Status != wire.StatusGranted {
					return fmt.Errorf("%s acquire: %s", who, st.Describe(r))
				}
				if err := hold(who, r.Value); err != nil {
					return err
				}
				holding.Store(0)
				if err := c.WriteErr(rel(2*i+1, r.Value)); err != nil {
					return err
				}
				if r, err = c.ReadResponseErr(10 * time.Second); err != nil {
					return err
				} else if r.Status != wire.StatusReleased {
					return fmt.Errorf("%s release: %s", who, st.Describe(r))
				}
			}
			return nil
		}()
	}
	set := []string{"shared", "other"}
	cs, c1 := st.Dial(t, s.Addr(), st.Options{Role: wire.RoleClient}), st.Dial(t, s.Addr(), st.Options{Role: wire.RoleClient})
	go run(cs, "set", func(id uint32) []byte { return wire.AppendAcquireSet(nil, id, set, 30000, 10000) },
		func(id uint32, tok uint64) []byte { return wire.AppendReleaseSet(nil, id, set, tok) })
	go run(c1, "single", func(id uint32) []byte { return wire.AppendAcquire(nil, id, "shared", 30000, 10000) },
		func(id uint32, tok uint64) []byte { return wire.AppendRelease(nil, id, "shared", tok) })
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

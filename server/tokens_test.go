package server_test

// protocol.md §6: fencing tokens.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
)

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// The first token of a new domain is unix_time_ms × 2^20 at start-up; every
// later one is strictly greater, across keys, connections and handoffs.
func TestFirstTokenAndMonotonic(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_700_000_000_123)
	s := startServer(t, func(c *server.Config) { c.Now = fixedClock(at) })
	cs := []*st.Conn{dial(t, s), dial(t, s), dial(t, s)}
	first := cs[0].MustAcquire("ft/0", 600000)
	if want := uint64(1_700_000_000_123) << 20; first != want {
		t.Fatalf("first token %d, want unix_ms<<20 = %d", first, want)
	}
	last := first
	for i := 1; i < 60; i++ {
		c := cs[i%3]
		var tok uint64
		if i%4 == 0 { // a handoff
			key := fmt.Sprint("ft/", i-1)
			w := cs[(i+1)%3]
			w.Write(wire.AppendAcquire(nil, uint32(i), key, 60000, 60000))
			waitDepth(t, c, key, 1)
			is(t, c.Release(key, last), wire.StatusReleased)
			g := w.Read()
			expect(t, g, wire.StatusGranted, 0, uint32(i))
			tok = g.Value
		} else {
			tok = c.MustAcquire(fmt.Sprint("ft/", i), 600000)
		}
		if tok <= last {
			t.Fatalf("token %d after %d: not strictly increasing", tok, last)
		}
		last = tok
	}
}

// With the real clock the first token is the start-up time × 2^20.
func TestFirstTokenRealClock(t *testing.T) {
	t.Parallel()
	before := time.Now().UnixMilli()
	s := startServer(t, nil)
	after := time.Now().UnixMilli()
	tok := dial(t, s).MustAcquire("rc", 1000)
	if tok < uint64(before)<<20 || tok > uint64(after)<<20 {
		t.Fatalf("first token %d not in [%d, %d] << 20", tok, before, after)
	}
}

// Concurrent grants on many keys from many connections never repeat a token.
func TestTokensUniqueConcurrent(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	const conns, per = 8, 200
	toks := make([][]uint64, conns)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.DialRawErr(s.Addr(), nil)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if err := c.Handshake(st.Options{}); err != nil {
				errs <- err
				return
			}
			var b []byte
			for j := range per {
				key := fmt.Sprintf("u/%d/%d", i, j)
				b = wire.AppendAcquire(b, uint32(2*j), key, 60000, 0)
			}
			if err := c.WriteErr(b); err != nil {
				errs <- err
				return
			}
			for range per {
				r, err := c.ReadResponseErr(long)
				if err != nil || r.Status != wire.StatusGranted {
					errs <- fmt.Errorf("%v %v", st.Describe(r), err)
					return
				}
				toks[i] = append(toks[i], r.Value)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, ts := range toks {
		for j, tok := range ts {
			if seen[tok] {
				t.Fatalf("token %d issued twice", tok)
			}
			seen[tok] = true
			if j > 0 && tok <= ts[j-1] {
				t.Fatal("tokens on one connection not increasing")
			}
		}
	}
}

// With a data directory, a restart continues above every token issued
// before, even when the wall clock stepped back; a clock ahead of the
// ceiling starts the new domain at its own time.
func TestTokensPersistAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := time.UnixMilli(1_800_000_000_000)
	run := func(now time.Time, grants int) (first, last uint64) {
		cfg := server.DefaultConfig()
		cfg.Listen = "127.0.0.1:0"
		cfg.DataDir = dir
		cfg.TokenBlock = 4 // several reservations per run
		cfg.Now = fixedClock(now)
		s, err := server.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		}()
		c := dial(t, s)
		var toks []uint64
		for i := range grants {
			tok := c.MustAcquire(fmt.Sprint("pt/", i), 600000)
			toks = append(toks, tok)
			if i == 0 {
				first = tok
			} else if tok <= last {
				t.Fatalf("token %d after %d", tok, last)
			}
			last = tok
		}
		// Released before the clean shutdown: the next start needs no
		// restart grace (grace.go), so it grants at once.
		for i := range grants {
			if r := c.Release(fmt.Sprint("pt/", i), toks[i]); r.Status != wire.StatusReleased {
				t.Fatalf("release pt/%d: %v", i, r)
			}
		}
		c.Close()
		return first, last
	}
	first, last := run(base, 10)
	if first != uint64(base.UnixMilli())<<20 {
		t.Fatalf("first token %d, want %d", first, uint64(base.UnixMilli())<<20)
	}
	// The clock stepped back an hour.
	f2, l2 := run(base.Add(-time.Hour), 3)
	if f2 <= last {
		t.Fatalf("after a restart with the clock an hour back: token %d ≤ %d issued before", f2, last)
	}
	// A day back, twice in a row.
	f3, l3 := run(base.Add(-24*time.Hour), 7)
	if f3 <= l2 {
		t.Fatalf("token %d ≤ %d issued before", f3, l2)
	}
	f4, _ := run(base.Add(-24*time.Hour), 1)
	if f4 <= l3 {
		t.Fatalf("token %d ≤ %d issued before", f4, l3)
	}
	// The clock an hour ahead: a new domain at its own start time.
	ahead := base.Add(time.Hour)
	if f5, _ := run(ahead, 1); f5 != uint64(ahead.UnixMilli())<<20 {
		t.Fatalf("with the clock ahead: first token %d, want %d", f5, uint64(ahead.UnixMilli())<<20)
	}
}

// A corrupt persisted ceiling refuses to start rather than risk going back.
func TestTokensCorruptDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = s
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) == 0 {
		t.Fatal("nothing persisted in the data directory")
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
			writeFile(t, f, []byte{1, 2, 3})
		}
	}
	if s, err := server.New(cfg); err == nil {
		_ = s
		t.Fatal("started with a corrupt token ceiling")
	}
}

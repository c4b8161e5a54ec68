package server

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// The restart grace's rules without processes (issue #28 item 3): the
// horizon persisted at start covers MaxLease + step ahead; an acquire whose
// lease it does not cover is refused (fail closed when the writer is
// behind); a start after an unclean stop recovers until the horizon; a
// clean close with nothing held records that no grace is needed.
func TestGraceHorizon(t *testing.T) {
	dir := t.TempDir()
	wall := time.UnixMilli(1_800_000_000_000)
	newSrv := func() *Server {
		cfg := DefaultConfig()
		cfg.DataDir, cfg.MaxLease = dir, 10*time.Second
		return &Server{cfg: cfg, start: time.Now(), now: func() time.Time { return wall }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	g, err := openGrace(newSrv())
	if err != nil {
		t.Fatal(err)
	}
	step := horizonStep(10 * time.Second)
	if step != time.Second {
		t.Fatalf("step %v, want 1s (a tenth of 10s, at least 1s)", step)
	}
	if rec, _ := g.recovering(0); rec {
		t.Fatal("a first start recovers")
	}
	if g.refuse(0, 10_000) {
		t.Fatal("a max lease is refused at once after the start")
	}
	// Writer stopped (never started): later acquires are not covered.
	if !g.refuse(int64(2*step), 10_000) {
		t.Fatal("an acquire the persisted horizon does not cover was not refused")
	}
	// An unclean stop: the next start recovers until the horizon.
	g2, err := openGrace(newSrv())
	if err != nil {
		t.Fatal(err)
	}
	rec, until := g2.recovering(0)
	if !rec || !until.Equal(wall.Add(10*time.Second+step)) {
		t.Fatalf("after an unclean stop: recovering %v until %v, want until %v", rec, until, wall.Add(10*time.Second+step))
	}
	if !g2.refuse(0, 1) {
		t.Fatal("an acquire during the recovery was not refused")
	}
	// A clean close with nothing held: no grace next time.
	g2.close(true, time.Time{})
	g3, err := openGrace(newSrv())
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := g3.recovering(0); rec {
		t.Fatal("a start after a clean shutdown recovers")
	}
}

// The grace's check is on the request path: it must not allocate.
func TestGraceRefuseNoAlloc(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	s := &Server{cfg: cfg, start: time.Now(), now: time.Now, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g, err := openGrace(s)
	if err != nil {
		t.Fatal(err)
	}
	var refused bool
	if n := testing.AllocsPerRun(1000, func() { refused = g.refuse(s.nanotime(), 30_000) }); n != 0 || refused {
		t.Fatalf("refuse: %v allocs, refused %v; want 0 and false", n, refused)
	}
}

package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/server/locktable"
)

// The restart grace of a single node with a data dir (issue #28 item 3).
// The lock table lives in memory: a node that restarts has forgotten every
// lock it granted. So that mutual exclusion survives the restart, the node
// persists a lease horizon: a wall-clock instant no lease it granted can
// end after. It is written ahead, in coarse steps, by a goroutine of its
// own (never on the request path): while serving, the persisted horizon
// stays at least MaxLease + step/2 ahead of now, so every grant's deadline
// (now + lease ≤ now + MaxLease) is covered before it is made. After an
// unclean stop, a restarted node answers every acquire B RECOVERING until
// the horizon has passed; a clean shutdown that leaves no lock held writes
// 0 (no grace needed). The lock table knows nothing of this: the
// connection refuses the acquire before it reaches the table.

// horizonFile holds the horizon: 8 bytes big-endian, Unix milliseconds of
// the wall clock; 0 = the last stop was clean with nothing held.
const horizonFile = "lease-horizon"

// horizonStep is how far beyond the minimum the horizon is written each
// time: a tenth of MaxLease, between 1 s and 1 min.
func horizonStep(maxLease time.Duration) time.Duration {
	return min(max(maxLease/10, time.Second), time.Minute)
}

type grace struct {
	s        *Server
	path     string
	maxLease time.Duration
	step     time.Duration
	// until is the end of the recovery, as Server.nanotime; 0 = none.
	until int64
	// untilWall is the same instant on the wall clock (status, logs).
	untilWall time.Time
	// covered is the persisted horizon as Server.nanotime: an acquire
	// whose lease could end after it is refused (the writer is behind).
	covered atomic.Int64
	// persisted is the persisted horizon, wall Unix ms.
	persisted int64
	ended     atomic.Bool // the recovery is over (logged once)
	once      sync.Once   // starts run
	stop      chan struct{}
	done      chan struct{}
}

// openGrace reads the horizon left by the previous run and writes the
// first one of this run, before anything is served.
func openGrace(s *Server) (*grace, error) {
	g := &grace{
		s:        s,
		path:     filepath.Join(s.cfg.DataDir, horizonFile),
		maxLease: s.cfg.MaxLease,
		step:     horizonStep(s.cfg.MaxLease),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	wall, mono := s.now(), s.nanotime()
	b, err := os.ReadFile(g.path)
	switch {
	case err == nil && len(b) == 8:
		if h := int64(binary.BigEndian.Uint64(b)); h > wall.UnixMilli() {
			g.untilWall = time.UnixMilli(h)
			g.until = mono + int64(g.untilWall.Sub(wall))
		}
	case err == nil:
		return nil, fmt.Errorf("data dir: %s is corrupt (%d bytes, want 8)", g.path, len(b))
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if g.until == 0 {
		g.ended.Store(true)
	}
	if err := g.advance(wall, mono); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	return g, nil
}

// Recovering reports whether acquires are refused as RECOVERING now, and
// until when (wall clock).
func (g *grace) recovering(now int64) (bool, time.Time) {
	if g == nil || g.until == 0 || now >= g.until {
		return false, time.Time{}
	}
	return true, g.untilWall
}

// refuse reports whether an acquire at now (Server.nanotime) with lease
// leaseMS must be answered B RECOVERING: during the recovery, or when the
// persisted horizon does not cover its lease (the writer is behind: fail
// closed). Allocation-free: two atomic loads.
func (g *grace) refuse(now int64, leaseMS uint32) bool {
	if now < g.until {
		return true
	}
	return now+int64(leaseMS)*int64(time.Millisecond)+int64(leaseSlack) > g.covered.Load()
}

// advance writes the horizon when it is due: during the recovery (no grant
// until its end) the old horizon stands; from a step before its end on,
// the horizon is kept MaxLease + step/2 ahead of now, rewritten as
// now + MaxLease + step.
func (g *grace) advance(wall time.Time, mono int64) error {
	if mono+int64(g.step) < g.until {
		if g.persisted == 0 {
			g.persisted = g.untilWall.UnixMilli()
		}
		return nil
	}
	need := wall.Add(g.maxLease + g.step/2).UnixMilli()
	if g.persisted >= need {
		return nil
	}
	h := wall.Add(g.maxLease + g.step)
	if err := writeDurable(g.path, uint64(h.UnixMilli())); err != nil {
		return err
	}
	g.persisted = h.UnixMilli()
	g.covered.Store(mono + int64(h.Sub(wall)))
	return nil
}

// start starts the writer once (Serve).
func (g *grace) start() {
	if g != nil {
		g.once.Do(func() { go g.run() })
	}
}

// run keeps the horizon ahead and logs the end of the recovery.
func (g *grace) run() {
	defer close(g.done)
	t := time.NewTicker(max(g.step/4, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		wall, mono := g.s.now(), g.s.nanotime()
		if err := g.advance(wall, mono); err != nil {
			g.s.log.Error("fatal: cannot persist the lease horizon; stopping", "err", err)
			panic(fmt.Sprintf("ticketing: cannot persist the lease horizon: %v", err))
		}
		if !g.ended.Load() && mono >= g.until {
			g.ended.Store(true)
			g.s.log.Info("restart grace over: granting again", "horizon", g.untilWall.UTC().Format(time.RFC3339Nano))
		}
	}
}

// close stops the writer. clean: the shutdown left no lock held, so the
// next start needs no grace (the horizon is written 0); otherwise the
// horizon is lowered to held, the end of the longest remaining lease.
func (g *grace) close(clean bool, held time.Time) {
	select {
	case <-g.stop:
		return
	default:
	}
	close(g.stop)
	g.once.Do(func() { close(g.done) }) // never started
	<-g.done
	v := uint64(0)
	if !clean {
		if held.UnixMilli() >= g.persisted {
			return
		}
		v = uint64(held.UnixMilli())
	}
	if err := writeDurable(g.path, v); err != nil {
		g.s.log.Error("cannot record the shutdown's lease horizon: the next start keeps the longer restart grace", "err", err)
		return
	}
	if clean {
		g.s.log.Info("clean shutdown, no lock held: the next start needs no restart grace")
	} else {
		g.s.log.Info("shutdown with locks held: the next start grants nothing until their leases end", "until", held.UTC().Format(time.RFC3339Nano))
	}
}

// writeDurable writes v (8 bytes big-endian) to path: temp file, fsync,
// rename, fsync of the directory.
func writeDurable(path string, v uint64) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	if _, err := f.Write(b[:]); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// closeGrace ends the horizon writer at shutdown (after the drain: no
// grant can follow). With no lock held the next start needs no grace;
// with locks held the horizon is rewritten to the end of the longest
// remaining lease, which no later grant can pass.
func (s *Server) closeGrace() {
	g := s.grace
	if g == nil {
		return
	}
	var longest int64 // ms
	s.lock.eachTable(func(t *locktable.Table, now int64) {
		t.Locks(now, "", func(li locktable.LockInfo) bool {
			longest = max(longest, li.LeaseRemainingMS)
			return true
		})
	})
	g.close(longest == 0, s.now().Add(time.Duration(longest+1)*time.Millisecond+leaseSlack))
}

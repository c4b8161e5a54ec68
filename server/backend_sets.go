package server

import (
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// Key sets on the single node (protocol.md §12.2). A set needs all its keys
// in one lock table, and the node shards keys over several: the keys of key
// sets are moved, with their whole state (holder, waiters), into one more
// table (setSh) when a set names them. Requests for a moved key find it
// through setKeys; while no key is moved (nSetKeys 0) nothing changes for
// single keys.
//
// Keys go back lazily (issue 35, set2 row): a released set's keys stay in
// the set table, so the next set on them moves nothing and takes setMu only
// shared. They go back in passes under setMu (there is nothing to move: only
// idle keys go back): the set table's timer goroutine runs one every
// setTidyPeriod and returns the keys that were idle at that pass and at the
// one before; and an acquire that would move keys beyond setTidyAt first
// returns every idle key (tidyLocked: the moved keys stay within twice the
// active ones plus setIdleCap, at O(1) amortized per moved key).

// setTidyPeriod is how often the set table's goroutine returns the keys idle
// in the set table since its last pass to their shards.
const setTidyPeriod = time.Second

// features are the protocol 1.1 feature bits this server announces (§12.1).
func (s *Server) features() wire.Features {
	f := wire.FeatureKeySets | wire.FeatureLabels
	if s.tlsCfg.Load() != nil {
		f |= wire.FeatureTLSHint
	}
	return f
}

// routeLocked is the shard that serves key. Call with setMu held.
func (b *tables) routeLocked(key []byte) *shard {
	if _, ok := b.setKeys[string(key)]; ok {
		return b.setSh
	}
	return b.shardFor(key)
}

// moveToSets moves the keys of ks into the set shard. Call with setMu held
// for writing.
func (b *tables) moveToSets(ks *wire.KeySet) {
	for _, k := range ks.Keys[:ks.N] {
		if _, ok := b.setKeys[string(k)]; ok {
			continue
		}
		if b.nSetKeys.Add(1) == 1 { // before the shard lock: requests on the key now route through setMu
			b.setSh.kickTimer() // start the tidy passes
		}
		b.setKeys[string(k)] = false
		sh := b.shardFor(k)
		sh.mu.Lock()
		st, active := sh.t.ExtractKey(k)
		sh.mu.Unlock()
		if active {
			b.setSh.mu.Lock()
			b.setSh.t.InsertKey(st)
			b.setSh.rearm()
			b.setSh.mu.Unlock()
		}
	}
}

// tidyLocked returns keys idle in the set table to their shards (there is
// nothing to move: they are idle): with all every idle key, otherwise only
// those that were idle at the previous pass too (setKeys' value marks
// them). Call with setMu held for writing.
func (b *tables) tidyLocked(all bool) {
	t := b.setSh.t
	b.setSh.mu.Lock()
	for k, idleBefore := range b.setKeys {
		if (all || idleBefore) && t.ForgetIdle(k) {
			// its entry goes too: a key with an entry in the set table is
			// always one of setKeys (acquireSet's fast path relies on it)
			delete(b.setKeys, k)
			b.nSetKeys.Add(-1)
		} else if idle := t.Idle(k); idle != idleBefore {
			b.setKeys[k] = idle
		}
	}
	b.setSh.mu.Unlock()
	// The next full pass once as many keys as are left plus setIdleCap more
	// moved: a pass walks O(those keys), so O(1) per moved key.
	b.setTidyAt = 2*b.nSetKeys.Load() + int64(b.setIdleCap)
}

// tidySetKeys is the set table goroutine's pass (tidyLocked(false)).
func (b *tables) tidySetKeys() {
	if b.nSetKeys.Load() == 0 {
		return
	}
	b.setMu.Lock()
	b.tidyLocked(false)
	b.setMu.Unlock()
}

func (b *tables) acquireSet(c *conn, now int64, req *wire.Request, ks *wire.KeySet) {
	var e locktable.Effect
	var own wire.Code
	known := false
	if b.nSetKeys.Load() >= int64(ks.N) {
		// Every key has an entry in the set table already (then it is one
		// of setKeys): nothing moves, and setMu held shared keeps it there.
		b.setMu.RLock()
		e, own, known = b.acquireSetLocked(c, now, req, ks, true)
		b.setMu.RUnlock()
	}
	if !known {
		b.setMu.Lock()
		if b.nSetKeys.Load()+int64(ks.N) > b.setTidyAt {
			b.tidyLocked(true)
		}
		b.moveToSets(ks)
		e, own, _ = b.acquireSetLocked(c, now, req, ks, false)
		b.setMu.Unlock()
	}
	switch {
	case own != wire.CodeNone:
		c.busy(req.ReqID, own)
	case e.Status == locktable.Queued:
	case e.Status == wire.StatusGranted:
		c.wbuf = wire.AppendGranted(c.wbuf, req.ReqID, e.Token, e.Queued)
	default:
		c.wbuf = wire.AppendStatus(c.wbuf, e.Status, e.Code, req.ReqID)
	}
}

// acquireSetLocked applies S on the set table, where every key of ks is:
// call with setMu held (either way). own is the code of a refusal of the
// server's own (draining, max_inflight), CodeNone when the table answered (e).
// With mustKnow, it does nothing (known false) unless every key has an entry
// in the set table.
func (b *tables) acquireSetLocked(c *conn, now int64, req *wire.Request, ks *wire.KeySet, mustKnow bool) (e locktable.Effect, own wire.Code, known bool) {
	sh := b.setSh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b.s.draining.Load() {
		return e, wire.CodeShuttingDown, true
	}
	if req.WaitMS() > 0 && c.inflight.Load() >= c.maxInflight && !b.allIdle(ks) {
		// a set counts once against max_inflight (§12.2)
		return e, wire.CodeOverloaded, true
	}
	owner := locktable.Owner{Conn: c.id, ReqID: req.ReqID}
	if mustKnow {
		if e, known = sh.t.AcquireSetKnown(now, owner, ks.Keys[:ks.N], req.LeaseMS(), req.WaitMS()); !known {
			return e, wire.CodeNone, false
		}
	} else {
		e = sh.t.AcquireSet(now, owner, ks.Keys[:ks.N], req.LeaseMS(), req.WaitMS())
	}
	if e.Status == locktable.Queued {
		c.addPending(req.ReqID)
	}
	sh.rearm()
	return e, wire.CodeNone, true
}

// allIdle reports whether every key of ks is idle in the set shard (call
// with its lock held).
func (b *tables) allIdle(ks *wire.KeySet) bool {
	for _, k := range ks.Keys[:ks.N] {
		if !b.setSh.t.IdleKey(k) {
			return false
		}
	}
	return true
}

func (b *tables) releaseSet(c *conn, now int64, req *wire.Request, ks *wire.KeySet) {
	// Only the set table holds sets, and only setSh.mu is needed: a held
	// set's keys are active there, so they stay moved (tidy passes return
	// idle keys only), and O needs the token and keys of a held set; a key
	// that is not in the set table is not one of a held set's (N).
	sh := b.setSh
	sh.mu.Lock()
	e := sh.t.ReleaseSet(now, locktable.Owner{Conn: c.id, ReqID: req.ReqID}, ks.Keys[:ks.N], req.Token())
	sh.rearm()
	sh.mu.Unlock()
	c.wbuf = wire.AppendStatus(c.wbuf, e.Status, e.Code, req.ReqID)
}

// kickTimer wakes the shard's timer goroutine.
func (sh *shard) kickTimer() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

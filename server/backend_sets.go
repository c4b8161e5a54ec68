package server

import (
	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// Key sets on the single node (protocol.md §12.2). A set needs all its keys
// in one lock table, and the node shards keys over several: the keys of key
// sets are moved, with their whole state (holder, waiters), into one more
// table (setSh) when a set names them, and go back when they are idle there.
// Requests for a moved key find it through setKeys; while no key is moved
// (nSetKeys 0) nothing changes for single keys.

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
		b.nSetKeys.Add(1) // before the shard lock: requests on the key now route through setMu
		b.setKeys[string(k)] = struct{}{}
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

// tidySetKeys moves the keys idle in the set shard back to their shards
// (there is nothing to move: they are idle). Cheap when no key is moved.
func (b *tables) tidySetKeys() {
	if b.nSetKeys.Load() == 0 {
		return
	}
	b.setMu.Lock()
	b.setSh.mu.Lock()
	for k := range b.setKeys {
		if b.setSh.t.Idle(k) {
			delete(b.setKeys, k)
			b.nSetKeys.Add(-1)
		}
	}
	b.setSh.mu.Unlock()
	b.setMu.Unlock()
}

// tidyKeys is tidySetKeys for the keys of ks only: after a set release or a
// set acquire that was not queued, only its own keys can have become idle in
// the set shard (issue 35: the set path no longer walks every moved key).
func (b *tables) tidyKeys(ks *wire.KeySet) {
	if b.nSetKeys.Load() == 0 {
		return
	}
	b.setMu.Lock()
	b.setSh.mu.Lock()
	for _, k := range ks.Keys[:ks.N] {
		if _, ok := b.setKeys[string(k)]; ok && b.setSh.t.IdleKey(k) {
			delete(b.setKeys, string(k))
			b.nSetKeys.Add(-1)
		}
	}
	b.setSh.mu.Unlock()
	b.setMu.Unlock()
}

func (b *tables) acquireSet(c *conn, now int64, req *wire.Request, ks *wire.KeySet) {
	b.setMu.Lock()
	b.moveToSets(ks)
	sh := b.setSh
	sh.mu.Lock()
	if b.s.draining.Load() {
		sh.mu.Unlock()
		b.setMu.Unlock()
		c.busy(req.ReqID, wire.CodeShuttingDown)
		return
	}
	if req.WaitMS() > 0 && c.inflight.Load() >= c.maxInflight && !b.allIdle(ks) {
		// a set counts once against max_inflight (§12.2)
		sh.mu.Unlock()
		b.setMu.Unlock()
		c.busy(req.ReqID, wire.CodeOverloaded)
		return
	}
	owner := locktable.Owner{Conn: c.id, ReqID: req.ReqID}
	e := sh.t.AcquireSet(now, owner, ks.Keys[:ks.N], req.LeaseMS(), req.WaitMS())
	if e.Status == locktable.Queued {
		c.addPending(req.ReqID)
	}
	sh.rearm()
	sh.mu.Unlock()
	b.setMu.Unlock()
	switch e.Status {
	case locktable.Queued:
	case wire.StatusGranted:
		c.wbuf = wire.AppendGranted(c.wbuf, req.ReqID, e.Token, e.Queued)
	default:
		c.wbuf = wire.AppendStatus(c.wbuf, e.Status, e.Code, req.ReqID)
		b.tidyKeys(ks)
	}
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
	b.setMu.RLock()
	e := locktable.Effect{Status: wire.StatusNotHolder}
	moved := true
	for _, k := range ks.Keys[:ks.N] {
		if _, ok := b.setKeys[string(k)]; !ok {
			moved = false // a key that is not in the set shard is not held by a set
		}
	}
	sh := b.setSh
	sh.mu.Lock()
	if moved {
		e = sh.t.ReleaseSet(now, locktable.Owner{Conn: c.id, ReqID: req.ReqID}, ks.Keys[:ks.N], req.Token())
	} else {
		sh.t.ReleaseSet(now, locktable.Owner{Conn: c.id, ReqID: req.ReqID}, nil, 0) // counts the N
	}
	sh.rearm()
	sh.mu.Unlock()
	b.setMu.RUnlock()
	c.wbuf = wire.AppendStatus(c.wbuf, e.Status, e.Code, req.ReqID)
	b.tidyKeys(ks)
}

package server

import (
	"sync/atomic"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// keyBatch is how far one shard's count of active keys may drift from the
// published total before it adds its drift there (issue 35: a pair of
// acquire and release used to add +1 and -1 to one atomic every core
// writes; 4 % of the pipelined row's server CPU).
const keyBatch = 32

// shardCounts is one shard's locktable.Counts. Its active keys are counted
// in its own word (written under the shard's lock, read by anyone) and
// added to the server's shared total once they drift keyBatch from it, so
// the total the limit checks read is exact only up to the shards' drifts
// (less than slack). Waiters go straight to the shared total.
type shardCounts struct {
	drift  atomic.Int64 // on the shard's mutex's cache line (shard.cnt), which its writer holds
	shared *locktable.SharedCounts
	all    []*shardCounts // every shard's, this one included (exact totals)
	slack  int64          // more than the sum of every drift, plus a key set's keys
	max    int64          // Limits.MaxKeys; 0 = none
}

// initShardCounts makes every one of all (each a shard's cnt) count into shared.
func initShardCounts(shared *locktable.SharedCounts, all []*shardCounts, maxKeys int) {
	for _, c := range all {
		*c = shardCounts{shared: shared, all: all, max: int64(maxKeys),
			slack: int64(len(all))*keyBatch + wire.MaxSetKeys}
	}
}

// AddKeys implements locktable.Counts. It returns this shard's drift, not
// the total (the table does not use it; reading the total here would read
// the shared word at every grant).
func (c *shardCounts) AddKeys(d int64) int64 {
	v := c.drift.Load() + d // one writer: the shard's lock holder
	if v >= keyBatch || v <= -keyBatch {
		c.shared.AddKeys(v)
		v = 0
	}
	c.drift.Store(v)
	return v
}

// Keys implements locktable.Counts for the table's limit checks (B
// OVERLOADED at MaxKeys): while the published total is more than slack below
// the limit, it is that total (off by less than slack, so every comparison
// with the limit, a key set's new keys added, decides as the exact count
// would); nearer the limit, the exact count.
func (c *shardCounts) Keys() int64 {
	if s := c.shared.Keys(); c.max == 0 || s+c.slack < c.max {
		return s
	}
	return exactKeys(c.shared, c.all)
}

// exactKeys is the published total plus every shard's drift.
func exactKeys(shared *locktable.SharedCounts, all []*shardCounts) int64 {
	n := shared.Keys()
	for _, c := range all {
		n += c.drift.Load()
	}
	return n
}

// AddWaiters implements locktable.Counts.
func (c *shardCounts) AddWaiters(d int64) int64 { return c.shared.AddWaiters(d) }

// Waiters implements locktable.Counts.
func (c *shardCounts) Waiters() int64 { return c.shared.Waiters() }

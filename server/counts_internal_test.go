package server

import (
	"testing"
	"unsafe"

	"github.com/ticketing/ticketing/server/locktable"
)

// The shards' key counts reach the shared total in batches (issue 35), yet
// the limit checks and the status count stay exact: far below the limit a
// pair of acquire and release on a shard writes no shared word, and near it
// Keys is the exact sum of the published total and every shard's drift.
func TestShardCountsBatchedAndExact(t *testing.T) {
	var shared locktable.SharedCounts
	const maxKeys = 200
	all := []*shardCounts{new(shardCounts), new(shardCounts), new(shardCounts), new(shardCounts)}
	initShardCounts(&shared, all, maxKeys)
	for range 1000 { // pairs on shard 0: the shared total never moves
		all[0].AddKeys(1)
		all[0].AddKeys(-1)
	}
	if got := shared.Keys(); got != 0 {
		t.Fatalf("pairs wrote the shared total: %d", got)
	}
	n := int64(0)
	for i := range 150 { // fill across the shards towards the limit
		c := all[i%len(all)]
		if c.Keys() >= maxKeys {
			t.Fatalf("at %d keys: Keys says the limit is reached", n)
		}
		c.AddKeys(1)
		n++
		if exact := exactKeys(&shared, all); exact != n {
			t.Fatalf("exact count %d, want %d", exact, n)
		}
		// Within slack of the limit, every shard's Keys is the exact count.
		if shared.Keys()+all[0].slack >= maxKeys {
			for j, o := range all {
				if got := o.Keys(); got != n {
					t.Fatalf("%d keys, near the limit: shard %d's Keys = %d", n, j, got)
				}
			}
		}
	}
	if shared.Keys() == 0 {
		t.Fatal("150 keys: nothing published")
	}
	for i := range 150 {
		all[(i+1)%len(all)].AddKeys(-1) // released on other shards than acquired
	}
	if got := exactKeys(&shared, all); got != 0 {
		t.Fatalf("all released: exact count %d", got)
	}
}

// A shard keeps its mutex and its key count on its own two cache lines.
func TestShardSize(t *testing.T) {
	if n := unsafe.Sizeof(shard{}); n != 128 {
		t.Fatalf("shard is %d bytes, want 128", n)
	}
	if off := unsafe.Offsetof(shard{}.cnt) + unsafe.Offsetof(shardCounts{}.drift); off >= 64 {
		t.Fatalf("the key count is at byte %d: not on the mutex's cache line", off)
	}
}

package locktable

import "sync/atomic"

// TokenShift is the multiplier exponent of a new fencing domain's first token:
// unix_time_ms × 2^20 (protocol.md §6).
const TokenShift = 20

// FirstToken is the first token of a fencing domain started at unixMS.
func FirstToken(unixMS int64) uint64 { return uint64(unixMS) << TokenShift }

// Counter is an in-memory TokenSource: strictly increasing, safe for
// concurrent use by several tables.
type Counter struct {
	last atomic.Uint64
	_    [56]byte // every grant on every core writes last: keep it off others' cache lines
}

// NewCounter returns a Counter whose first Next is first (1 when first is 0:
// a token is never 0, §6, and 0 means "free" inside the table).
func NewCounter(first uint64) *Counter {
	if first == 0 {
		first = 1
	}
	c := &Counter{}
	c.last.Store(first - 1)
	return c
}

// Next returns the next token.
func (c *Counter) Next() uint64 { return c.last.Add(1) }

// Last returns the last token issued (first-1 before any).
func (c *Counter) Last() uint64 { return c.last.Load() }

// SharedCounts is the Counts of one server, safe for concurrent use.
type SharedCounts struct {
	keys, waiters atomic.Int64
}

// AddKeys implements Counts.
func (s *SharedCounts) AddKeys(d int64) int64 { return s.keys.Add(d) }

// AddWaiters implements Counts.
func (s *SharedCounts) AddWaiters(d int64) int64 { return s.waiters.Add(d) }

// Keys implements Counts.
func (s *SharedCounts) Keys() int64 { return s.keys.Load() }

// Waiters implements Counts.
func (s *SharedCounts) Waiters() int64 { return s.waiters.Load() }

// Restore sets the last token issued (a raft snapshot restore, or a new
// fencing domain's seed: first-1).
func (c *Counter) Restore(last uint64) { c.last.Store(last) }

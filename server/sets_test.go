package server_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// Protocol 1.1 over real connections (protocol.md §12): the feature ping,
// key sets across the node's shards, labels in `locks`.

func TestFeaturePing(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	c.Write(wire.AppendPingFeatures(nil, 9))
	r := c.Read()
	if r.Status != wire.StatusPong || r.ReqID != 9 || r.Features() != wire.FeatureKeySets|wire.FeatureLabels || r.Value == 0 {
		t.Fatalf("feature pong %+v", r)
	}
	// any other arg: a plain pong (features 0)
	c.Write(wire.AppendRequestHeader(nil, wire.OpPing, 0, 0, 10, 2))
	if r := c.Read(); r.Status != wire.StatusPong || r.Queued != 0 {
		t.Fatalf("pong to arg 2 %+v", r)
	}
}

// setKeysAcrossShards are keys that (with 4 shards) do not all share one.
var setKeysAcrossShards = []string{"acct/17", "acct/42", "acct/99", "jobs", "tables"}

func TestKeySetsOverTheWire(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a, b, w := dial(t, s), dial(t, s), dial(t, s)
	set := setKeysAcrossShards[:3]

	r := a.Do(wire.AppendAcquireSet(nil, a.NextID(), set, 30000, 0))
	is(t, r, wire.StatusGranted)
	tok := r.Value
	is(t, b.Acquire(set[1], 1000, 0), wire.StatusTimeout)                          // held by the set
	is(t, b.Release(set[1], tok), wire.StatusNotHolder)                            // a set is released whole
	is(t, b.Do(wire.AppendReleaseSet(nil, 5, set[:2], tok)), wire.StatusNotHolder) // not the exact set
	r = b.Do(wire.AppendAcquireSet(nil, b.NextID(), []string{set[2], "other"}, 1000, 0))
	is(t, r, wire.StatusTimeout)

	// a set waits; a single acquire on a free key of it queues behind it
	b.Write(wire.AppendAcquireSet(nil, 20, []string{set[0], "free-key"}, 30000, 10000))
	waitDepth(t, w, set[0], 1)
	w.Write(wire.AppendAcquire(nil, 30, "free-key", 30000, 10000))
	w.ExpectNothing(50e6)
	// release in another order: the waiting set gets both keys, one token above
	is(t, a.Do(wire.AppendReleaseSet(nil, 6, []string{set[2], set[0], set[1]}, tok)), wire.StatusReleased)
	g := b.Read()
	expect(t, g, wire.StatusGranted, 0, 20)
	if g.Value <= tok {
		t.Fatalf("set token %d not above %d", g.Value, tok)
	}
	is(t, b.Do(wire.AppendReleaseSet(nil, 21, []string{"free-key", set[0]}, g.Value)), wire.StatusReleased)
	expect(t, w.Read(), wire.StatusGranted, 0, 30) // handed to the next head
	is(t, a.Acquire(set[1], 1000, 0), wire.StatusGranted)
}

func TestKeySetExpiryAndCancel(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a, b, admin := dial(t, s), dial(t, s), dialRole(t, s, wire.RoleAdmin, "")
	keys := setKeysAcrossShards[2:5]
	is(t, a.Do(wire.AppendAcquireSet(nil, 1, keys, 200, 0)), wire.StatusGranted)
	b.Write(wire.AppendAcquire(nil, 2, keys[2], 30000, 20000))
	expect(t, b.Read(), wire.StatusGranted, 0, 2) // the set's one lease ran out: every key freed
	for _, k := range keys[:2] {
		is(t, a.Acquire(k, 1000, 0), wire.StatusGranted)
	}

	// cancel a queued set: target its req_id, key its first key
	c := dial(t, s)
	c.Write(wire.AppendAcquireSet(nil, 7, []string{"cx", keys[2]}, 1000, 20000))
	waitDepth(t, admin, keys[2], 1)
	c.Write(wire.AppendCancel(nil, 8, keys[2], 7)) // not the first key: N
	expect(t, c.Read(), wire.StatusNotHolder, 0, 8)
	c.Write(wire.AppendCancel(nil, 9, "cx", 7))
	expect(t, c.Read(), wire.StatusTimeout, 0, 7)
	expect(t, c.Read(), wire.StatusReleased, 0, 9)
	is(t, c.Acquire("cx", 1000, 0), wire.StatusGranted) // "cx" was only blocked for the set
}

func TestKeySetValidation(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.MaxLease = 60000e6 })
	c := dial(t, s)
	r := c.Do(wire.AppendAcquireSet(nil, 0x0a, []string{"acct/17", "acct/17"}, 1000, 0))
	expectE(t, r, wire.CodeBadKeySet, 0x0a)
	if string(r.Payload) != "duplicate key in set" {
		t.Fatalf("message %q", r.Payload)
	}
	expectE(t, c.Do(wire.AppendAcquireSet(nil, 2, []string{"one"}, 1000, 0)), wire.CodeBadKeySet, 2)
	expectE(t, c.Do(wire.AppendAcquireSet(nil, 3, []string{"a", "b\x01"}, 1000, 0)), wire.CodeBadKey, 3)
	expectE(t, c.Do(wire.AppendAcquireSet(nil, 4, []string{"a", "b"}, 0, 0)), wire.CodeBadLease, 4)
	expectE(t, c.Do(wire.AppendAcquireSet(nil, 5, []string{"a", "b"}, 1000, 1<<31)), wire.CodeBadWait, 5)
	// body_len above 4016: E BAD_KEYSET, and the body is read and discarded
	big := wire.AppendRequestHeader(nil, wire.OpAcquireSet, 2, 5000, 6, wire.AcquireArg(1000, 0))
	big = append(big, bytes.Repeat([]byte{'x'}, 5000)...)
	c.Write(append(big, wire.AppendPing(nil, 7)...))
	expectE(t, c.Read(), wire.CodeBadKeySet, 6)
	is(t, c.Read(), wire.StatusPong)
	// 16 keys is the most
	var sixteen, seventeen []string
	for i := range 17 {
		seventeen = append(seventeen, "k"+strings.Repeat("x", i))
	}
	sixteen = seventeen[:16]
	is(t, c.Do(wire.AppendAcquireSet(nil, 8, sixteen, 1000, 0)), wire.StatusGranted)
	expectE(t, c.Do(wire.AppendAcquireSet(nil, 9, seventeen, 1000, 0)), wire.CodeBadKeySet, 9)
}

func TestLabelsInLocks(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	a, b, admin := dial(t, s), dial(t, s), dialRole(t, s, wire.RoleAdmin, "")
	is(t, a.Do(wire.AppendLabel(nil, 1, "web-1/4242 go/1.1.0")), wire.StatusReleased)
	expectE(t, b.Do(wire.AppendLabel(nil, 2, "bad\x07label")), wire.CodeBadLabel, 2)
	expectE(t, b.Do(wire.AppendLabel(nil, 3, strings.Repeat("x", 65))), wire.CodeBadLabel, 3)
	is(t, b.Do(wire.AppendLabel(nil, 4, "worker")), wire.StatusReleased)
	is(t, a.Do(wire.AppendAcquireSet(nil, 5, []string{"lk/a", "lk/b"}, 30000, 0)), wire.StatusGranted)
	b.Write(wire.AppendAcquire(nil, 6, "lk/b", 30000, 20000))
	waitDepth(t, admin, "lk/b", 1)
	lr := locks(t, admin, `{"cmd":"locks","prefix":"lk/"}`)
	if len(lr.Locks) != 2 {
		t.Fatalf("locks %+v", lr)
	}
	for _, e := range lr.Locks {
		if e.Holder == nil || e.Holder.Label != "web-1/4242 go/1.1.0" || e.Holder.Addr != a.NC.LocalAddr().String() {
			t.Fatalf("%s: holder %+v, want a's label and address %s", e.Key, e.Holder, a.NC.LocalAddr())
		}
		if !slices.Equal(e.Set, []string{"lk/a", "lk/b"}) {
			t.Fatalf("%s: set %v", e.Key, e.Set)
		}
	}
	wb := lr.Locks[0] // lk/b: the deeper queue first
	if wb.Key != "lk/b" || len(wb.Waiters) != 1 || wb.Waiters[0].Label != "worker" || wb.Waiters[0].Addr != b.NC.LocalAddr().String() {
		t.Fatalf("waiters of %s: %+v", wb.Key, wb.Waiters)
	}
}

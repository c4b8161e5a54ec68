package server_test

// protocol.md §8: admin queries on a single node.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

func rawQuery(tb testing.TB, c interface {
	Query(string) wire.Response
}, body string) map[string]any {
	tb.Helper()
	r := c.Query(body)
	if r.Status != wire.StatusAdmin {
		tb.Fatalf("%s: status %c code %v", body, r.Status, r.Code)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Payload, &m); err != nil {
		tb.Fatal(err)
	}
	return m
}

func hasNumber(tb testing.TB, m map[string]any, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, ok := m[n].(float64); !ok {
			tb.Errorf("member %q missing or not a number in %v", n, m)
		}
	}
}

func TestAdminStatusFields(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.NodeID = "n-7" })
	c := dial(t, s)
	m := rawQuery(t, c, `{"cmd":"status"}`)
	if m["node_id"] != "n-7" || m["role"] != "single" || m["leader"] != "" {
		t.Fatalf("node_id/role/leader: %v", m)
	}
	hasNumber(t, m, "uptime_ms", "keys", "holders", "waiters", "connections")
	ctr, ok := m["counters"].(map[string]any)
	if !ok {
		t.Fatalf("counters: %v", m["counters"])
	}
	hasNumber(t, ctr, "grants", "handoffs", "timeouts", "releases", "not_holder", "expiries", "busy", "errors")
	// uptime_ms moves: observed, not slept for.
	first := status(t, c).UptimeMS
	waitFor(t, "uptime_ms to grow by 20", func() bool { return status(t, c).UptimeMS >= first+20 })
}

// Every counter moves exactly as the requests say.
func TestAdminCounters(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.MaxWaitersPerKey = 1 })
	admin := dial(t, s)
	a, b, c := dial(t, s), dial(t, s), dial(t, s)
	for _, x := range []interface{ Ping() wire.Response }{a, b, c} {
		x.Ping() // registered by the server
	}
	st0 := status(t, admin)
	if st0.Connections != 4 || st0.Keys != 0 || st0.Holders != 0 || st0.Waiters != 0 || st0.Counters != (wire.AdminCounters{}) {
		t.Fatalf("fresh status: %+v", st0)
	}
	tok := a.MustAcquire("k1", 600000)                                                                    // grants 1
	is(t, b.Acquire("k1", 1000, 0), wire.StatusTimeout)                                                   // timeouts 1
	b.Write(wire.AppendAcquire(nil, 5, "k1", 60000, 60000))                                               // waiter
	waitDepth(t, admin, "k1", 1)                                                                          //
	expect(t, c.Do(wire.AppendAcquire(nil, 6, "k1", 1000, 1000)), wire.StatusBusy, wire.CodeQueueFull, 6) // busy 1
	st1 := status(t, admin)
	if st1.Keys != 1 || st1.Holders != 1 || st1.Waiters != 1 || st1.Connections != 4 {
		t.Fatalf("gauges: %+v", st1)
	}
	is(t, a.Release("k1", tok), wire.StatusReleased)                              // releases 1, grants 2, handoffs 1
	expect(t, b.Read(), wire.StatusGranted, 0, 5)                                 //
	is(t, a.Release("k1", tok), wire.StatusNotHolder)                             // not_holder 1
	is(t, b.Acquire("k2", 100, 0), wire.StatusGranted)                            // grants 3, then expiries 1
	expectE(t, a.Do(wire.AppendAcquire(nil, 7, "", 1000, 0)), wire.CodeBadKey, 7) // errors 1
	r := a.Query(`{"cmd":"nope"}`)                                                // errors 2
	expectE(t, r, wire.CodeBadAdmin, r.ReqID)
	is(t, b.Do(wire.AppendCancel(nil, 8, "k1", 99)), wire.StatusNotHolder) // not_holder 2
	waitFor(t, "the k2 lease to expire", func() bool { return status(t, admin).Counters.Expiries == 1 })
	got := status(t, admin)
	want := wire.AdminCounters{Grants: 3, Handoffs: 1, Timeouts: 1, Releases: 1, NotHolder: 2, Expiries: 1, Busy: 1, Errors: 2}
	got.Counters.Cancels = 0 // an extension, not checked here
	if got.Counters != want {
		t.Fatalf("counters %+v, want %+v", got.Counters, want)
	}
	if got.Keys != 1 || got.Holders != 1 || got.Waiters != 0 {
		t.Fatalf("gauges: %+v", got)
	}
	c.Close()
	waitConns(t, admin, 3)
}

func TestAdminLocks(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	admin := dial(t, s)
	h, w := dial(t, s), dial(t, s)
	toks := map[string]uint64{}
	for _, k := range []string{"x/3", "d", "a", "x/1", "c", "b", "x/2"} {
		toks[k] = h.MustAcquire(k, 60000)
	}
	queued := time.Now()
	id := uint32(0)
	for k, n := range map[string]int{"b": 2, "c": 1, "d": 2} {
		for range n {
			id++
			w.Write(wire.AppendAcquire(nil, id, k, 60000, 60000))
		}
		waitDepth(t, admin, k, n)
	}
	// The waiters' age as the server reports it, observed rather than slept for.
	waitFor(t, "every queue's oldest waiter 20 ms old", func() bool {
		for _, e := range locks(t, admin, `{"cmd":"locks"}`).Locks {
			if e.QueueDepth > 0 && e.OldestWaiterAgeMS < 20 {
				return false
			}
		}
		return true
	})

	r := admin.Query(`{"cmd":"locks"}`)
	for _, member := range []string{`"total":`, `"truncated":`, `"locks":[`, `"key":`, `"token":`, `"lease_remaining_ms":`, `"queue_depth":`, `"oldest_waiter_age_ms":`} {
		if !strings.Contains(string(r.Payload), member) {
			t.Fatalf("reply lacks %s: %s", member, r.Payload)
		}
	}
	l := locks(t, admin, `{"cmd":"locks"}`)
	order := func(l wire.LocksReply) string {
		var ks []string
		for _, e := range l.Locks {
			ks = append(ks, e.Key)
		}
		return strings.Join(ks, ",")
	}
	if l.Total != 7 || l.Truncated || order(l) != "b,d,c,a,x/1,x/2,x/3" {
		t.Fatalf("locks: total %d truncated %v order %s", l.Total, l.Truncated, order(l))
	}
	for _, e := range l.Locks {
		if e.Token != toks[e.Key] {
			t.Errorf("%s: token %d, want %d", e.Key, e.Token, toks[e.Key])
		}
		if e.LeaseRemainingMS <= 0 || e.LeaseRemainingMS > 60000 {
			t.Errorf("%s: lease_remaining_ms %d", e.Key, e.LeaseRemainingMS)
		}
		age := e.OldestWaiterAgeMS
		if e.QueueDepth == 0 && age != 0 || e.QueueDepth > 0 && (age < 20 || age > time.Since(queued).Milliseconds()+1) {
			t.Errorf("%s: depth %d oldest_waiter_age_ms %d", e.Key, e.QueueDepth, age)
		}
	}
	for _, tc := range []struct {
		body, order string
		total       int
		truncated   bool
	}{
		{`{"cmd":"locks","prefix":"x/"}`, "x/1,x/2,x/3", 3, false},
		{`{"cmd":"locks","prefix":"x/","limit":1}`, "x/1", 3, true},
		{`{"cmd":"locks","limit":2}`, "b,d", 7, true},
		{`{"cmd":"locks","limit":7}`, "b,d,c,a,x/1,x/2,x/3", 7, false},
		{`{"cmd":"locks","limit":10000}`, "b,d,c,a,x/1,x/2,x/3", 7, false},
		{`{"cmd":"locks","prefix":""}`, "b,d,c,a,x/1,x/2,x/3", 7, false},
		{`{"cmd":"locks","prefix":"c"}`, "c", 1, false},
		{`{"cmd":"locks","prefix":"zz"}`, "", 0, false},
	} {
		l := locks(t, admin, tc.body)
		if order(l) != tc.order || l.Total != tc.total || l.Truncated != tc.truncated {
			t.Errorf("%s: order %q total %d truncated %v; want %q %d %v", tc.body, order(l), l.Total, l.Truncated, tc.order, tc.total, tc.truncated)
		}
	}
	if r := admin.Query(`{"cmd":"locks","prefix":"zz"}`); !strings.Contains(string(r.Payload), `"locks":[]`) {
		t.Errorf("an empty list must be [], got %s", r.Payload)
	}
	for _, body := range []string{
		`{"cmd":"locks","limit":0}`, `{"cmd":"locks","limit":-1}`, `{"cmd":"locks","limit":10001}`,
		`{"cmd":"locks","limit":"5"}`, `{"cmd":"locks","limit":1.5}`, `{"cmd":"locks","limit":true}`,
		`{"cmd":"locks","prefix":5}`, `{"cmd":"locks","prefix":["x/"]}`,
	} {
		r := admin.Query(body)
		expectE(t, r, wire.CodeBadAdmin, r.ReqID)
	}
}

func TestAdminLocksDefaultLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	var b []byte
	for i := range 105 {
		b = wire.AppendAcquire(b, uint32(i+1), fmt.Sprintf("m/%03d", i), 60000, 0)
	}
	c.Write(b)
	for range 105 {
		is(t, c.Read(), wire.StatusGranted)
	}
	l := locks(t, c, `{"cmd":"locks","prefix":"m/"}`)
	if l.Total != 105 || !l.Truncated || len(l.Locks) != 100 || l.Locks[0].Key != "m/000" || l.Locks[99].Key != "m/099" {
		t.Fatalf("default limit: total %d truncated %v len %d", l.Total, l.Truncated, len(l.Locks))
	}
}

func TestAdminTime(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	var tr wire.TimeReply
	before := time.Now().UnixMicro()
	query(t, c, `{"cmd":"time"}`, &tr)
	after := time.Now().UnixMicro()
	if tr.UnixUS < before-5e6 || tr.UnixUS > after+5e6 {
		t.Fatalf("unix_us %d, wall clock %d..%d", tr.UnixUS, before, after)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	s2 := startServer(t, func(c *server.Config) { c.Now = fixedClock(at) })
	query(t, dial(t, s2), `{"cmd":"time"}`, &tr)
	if tr.UnixUS != at.UnixMicro() {
		t.Fatalf("unix_us %d, want the server clock %d", tr.UnixUS, at.UnixMicro())
	}
}

func TestAdminMembers(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.NodeID = "solo" })
	c := dial(t, s)
	m := rawQuery(t, c, `{"cmd":"members"}`)
	ms, ok := m["members"].([]any)
	if !ok || len(ms) != 1 {
		t.Fatalf("members: %v", m)
	}
	e := ms[0].(map[string]any)
	for _, k := range []string{"id", "client_addr", "peer_addr", "role", "voter", "last_contact_ms"} {
		if _, ok := e[k]; !ok {
			t.Errorf("member lacks %q: %v", k, e)
		}
	}
	if e["id"] != "solo" || e["role"] != "single" || e["client_addr"] != s.Addr() {
		t.Fatalf("member %v (server at %s)", e, s.Addr())
	}
	if _, ok := e["voter"].(bool); !ok {
		t.Fatalf("voter is not a bool: %v", e)
	}
}

func TestAdminChangingOnSingleNode(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	for _, body := range []string{
		`{"cmd":"add-node","id":"n2","peer_addr":"127.0.0.1:7471","client_addr":"127.0.0.1:7470","voter":true}`,
		`{"cmd":"add-node"}`,
		`{"cmd":"remove-node","id":"single"}`,
		`{"cmd":"transfer-leader"}`,
		`{"cmd":"transfer-leader","id":"n2"}`,
	} {
		r := c.Query(body)
		expectE(t, r, wire.CodeBadAdmin, r.ReqID)
	}
	if m := rawQuery(t, c, `{"cmd":"members"}`); len(m["members"].([]any)) != 1 {
		t.Fatal("membership changed")
	}
}

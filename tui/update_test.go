package tui

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

const addr1 = "127.0.0.1:7470"

func TestConfigValidate(t *testing.T) {
	src := newFakeSource()
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"ok", Config{Addrs: []string{addr1}, Source: src}, nil},
		{"no addrs", Config{Source: src}, ErrNoAddrs},
		{"no source", Config{Addrs: []string{addr1}}, ErrNoSource},
		{"fast", Config{Addrs: []string{addr1}, Source: src, Interval: time.Millisecond}, ErrBadConfig},
		{"limit", Config{Addrs: []string{addr1}, Source: src, Limit: wire.LocksMaxLimit + 1}, ErrBadConfig},
		{"repeated", Config{Addrs: []string{addr1, addr1}, Source: src}, ErrBadConfig},
	} {
		_, err := New(tc.cfg)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: New = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestComputeRates(t *testing.T) {
	c := func(g, h, r, to, e uint64) wire.AdminCounters {
		return wire.AdminCounters{Grants: g, Handoffs: h, Releases: r, Timeouts: to, Expiries: e}
	}
	for _, tc := range []struct {
		name            string
		prev, cur       sample
		want            rates
		wantOK, wantRst bool
	}{
		{"uptime delta", sample{t0, 10_000, c(100, 10, 90, 1, 0)},
			sample{t0.Add(time.Second), 12_000, c(120, 14, 110, 3, 2)},
			rates{10, 2, 10, 1, 1}, true, false},
		{"wall delta without uptime", sample{t0, 0, c(0, 0, 0, 0, 0)},
			sample{t0.Add(500 * time.Millisecond), 0, c(5, 0, 5, 0, 0)},
			rates{Grants: 10, Releases: 10}, true, false},
		{"counter went down", sample{t0, 10_000, c(100, 10, 90, 1, 0)},
			sample{t0.Add(time.Second), 11_000, c(3, 0, 2, 0, 0)},
			rates{}, false, true},
		{"uptime went back", sample{t0, 10_000, c(100, 10, 90, 1, 0)},
			sample{t0.Add(time.Second), 900, c(100, 10, 90, 1, 0)},
			rates{}, false, true},
		{"no time passed", sample{t0, 0, c(1, 0, 0, 0, 0)},
			sample{t0, 0, c(2, 0, 0, 0, 0)},
			rates{}, false, false},
	} {
		r, ok, rst := computeRates(tc.prev, tc.cur)
		if r != tc.want || ok != tc.wantOK || rst != tc.wantRst {
			t.Errorf("%s: computeRates = %+v %v %v, want %+v %v %v", tc.name, r, ok, rst, tc.want, tc.wantOK, tc.wantRst)
		}
	}
}

// The rates come from counter deltas over the node's uptime; across a
// counter reset (a restart) there is no rate, never a negative or wrapped
// one, and the next poll measures from the new baseline.
func TestUpdateRatesAcrossCounterReset(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	up := time.Hour
	h.src.set(addr1, status(up, wire.AdminCounters{Grants: 1000, Handoffs: 100, Releases: 990, Timeouts: 7, Expiries: 2}))
	h.start()
	if _, ok := h.m.totalRates(); ok {
		t.Fatal("rates known after one poll")
	}
	if got := h.view(); !strings.Contains(got, "grants -  handoffs -") {
		t.Errorf("first view has rates:\n%s", got)
	}

	// 2 s of node uptime, 1 s of wall clock: the uptime decides.
	h.src.set(addr1, status(up+2*time.Second, wire.AdminCounters{Grants: 1040, Handoffs: 110, Releases: 1030, Timeouts: 9, Expiries: 4}))
	h.tick(time.Second)
	r, ok := h.m.totalRates()
	if want := (rates{20, 5, 20, 1, 1}); !ok || r != want {
		t.Fatalf("rates = %+v %v, want %+v", r, ok, want)
	}
	if got := h.view(); !strings.Contains(got, "grants 20.0  handoffs 5.0  releases 20.0  timeouts 1.0  expiries 1.0") {
		t.Errorf("view lacks the rates:\n%s", got)
	}

	// Restart: uptime and counters start again.
	h.src.set(addr1, status(1500*time.Millisecond, wire.AdminCounters{Grants: 3, Releases: 1}))
	h.tick(time.Second)
	if r, ok := h.m.totalRates(); ok {
		t.Errorf("rates across a reset: %+v", r)
	}
	if ev := h.eventTexts(); !slices.Contains(ev, "counters reset (node restarted?)") {
		t.Errorf("no reset event: %q", ev)
	}

	h.src.set(addr1, status(2500*time.Millisecond, wire.AdminCounters{Grants: 13, Releases: 6}))
	h.tick(time.Second)
	r, ok = h.m.totalRates()
	if want := (rates{Grants: 10, Releases: 5}); !ok || r != want {
		t.Errorf("rates after the reset = %+v %v, want %+v", r, ok, want)
	}

	// The sparkline points: one per tick once rates are known; none negative.
	h.tick(time.Second)
	for i, v := range h.m.history {
		if v < 0 || math.IsInf(v, 0) {
			t.Errorf("history[%d] = %v", i, v)
		}
	}
	// One point per tick from the first known rate: the tick after the
	// reset found none (a gap), the next the new rate.
	if hist := h.m.history; len(hist) != 3 || hist[0] != 20 || !math.IsNaN(hist[1]) || hist[2] != 10 {
		t.Errorf("history = %v, want [20 NaN 10]", hist)
	}
}

// An unreachable node is logged once, shown DOWN with its error, and
// logged again when it comes back; first contact is logged too.
func TestUpdateNodeUnreachable(t *testing.T) {
	h := newHarness(t, []string{addr1, "127.0.0.1:7471"}, nil)
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}))
	h.src.set("127.0.0.1:7471", status(time.Minute, wire.AdminCounters{}))
	h.start()
	want := []string{"reachable: node n1, role single", "reachable: node n1, role single"}
	if got := h.eventTexts(); !slices.Equal(got, want) {
		t.Fatalf("events = %q, want %q", got, want)
	}

	h.src.setDown(addr1, errors.New("admin: dial 127.0.0.1:7470: connection refused"))
	h.tick(time.Second)
	h.tick(time.Second) // still down: not logged again
	h.tick(time.Second)
	want = append(want, "unreachable: dial 127.0.0.1:7470: connection refused") // downReason: without "admin: "
	if got := h.eventTexts(); !slices.Equal(got, want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
	n := h.m.node(addr1)
	if n.reachable || !n.polled {
		t.Fatalf("node state reachable=%v polled=%v", n.reachable, n.polled)
	}
	view := h.view()
	if !strings.Contains(view, "DOWN 2.0s: dial 127.0.0.1") {
		t.Errorf("view does not show the node down:\n%s", view)
	}
	if !strings.Contains(view, "2 nodes, 1 up") {
		t.Errorf("title does not count the node down:\n%s", view)
	}

	h.src.set(addr1, status(time.Minute+4*time.Second, wire.AdminCounters{}))
	h.tick(time.Second)
	want = append(want, "reachable again after 3.0s")
	if got := h.eventTexts(); !slices.Equal(got, want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
	for _, e := range h.m.events[2:] {
		if e.node != addr1 {
			t.Errorf("event %q on node %s", e.text, e.node)
		}
	}
}

// A node that never answered is unreachable from its first poll.
func TestUpdateNodeDownFromStart(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.start()
	if got := h.eventTexts(); len(got) != 1 || !strings.HasPrefix(got[0], "unreachable: connection refused") {
		t.Fatalf("events = %q", got)
	}
	if v := h.view(); !strings.Contains(v, "no reachable node yet") {
		t.Errorf("view:\n%s", v)
	}
}

func TestUpdateRoleAndLeaderChanges(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	st := status(time.Minute, wire.AdminCounters{})
	st.Role, st.Leader = wire.NodeFollower, "10.0.0.1:7470"
	h.src.set(addr1, st)
	h.start()
	st.Leader = "10.0.0.2:7470"
	h.src.set(addr1, st)
	h.tick(time.Second)
	st.Leader = ""
	h.src.set(addr1, st)
	h.tick(time.Second)
	st.Role, st.Leader = wire.NodeLeader, addr1
	h.src.set(addr1, st)
	h.tick(time.Second)
	st.CanGrant, st.Reason = false, "at max_keys"
	h.src.set(addr1, st)
	h.tick(time.Second)
	st.CanGrant, st.Reason = true, ""
	h.src.set(addr1, st)
	h.tick(time.Second)
	want := []string{
		"reachable: node n1, role follower",
		"leader 10.0.0.1:7470 → 10.0.0.2:7470",
		"leader lost (was 10.0.0.2:7470)",
		"role follower → leader",
		"leader is 127.0.0.1:7470",
		"cannot grant: at max_keys",
		"can grant again",
	}
	if got := h.eventTexts(); !slices.Equal(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}

func TestUpdateQueueSpikes(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	st := status(time.Minute, wire.AdminCounters{})
	e := func(k string, d int) wire.LockEntry {
		return wire.LockEntry{Key: k, Token: 1, LeaseRemainingMS: 1000, QueueDepth: d}
	}
	h.src.set(addr1, st, e("a", 5), e("b", 1))
	h.start() // no baseline: no spike on the first answer
	h.src.set(addr1, st, e("a", 6), e("b", 4), e("c", 3))
	h.tick(time.Second) // b 1→4 (+3, ×4) and c 0→3 spike; a 5→6 does not
	h.src.set(addr1, st, e("a", 11), e("b", 6), e("c", 3))
	h.tick(time.Second) // a 6→11: +5 but not doubled; b +2
	want := []string{"reachable: node n1, role single", "queue spike: b depth 1 → 4", "queue spike: c depth 0 → 3"}
	if got := h.eventTexts(); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}

	var many []wire.LockEntry
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		many = append(many, e(k, 9))
	}
	h.src.set(addr1, st, many...)
	h.tick(time.Second)
	got := h.eventTexts()[len(want):]
	want = []string{"queue spike: k1 depth 0 → 9", "queue spike: k2 depth 0 → 9", "queue spike: k3 depth 0 → 9", "queue spikes on 2 more keys"}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}

// A key absent from a truncated answer may have been just beyond the limit:
// no spike is claimed for it. Changing the prefix resets the baseline.
func TestUpdateSpikeBaselines(t *testing.T) {
	h := newHarness(t, []string{addr1}, func(c *Config) { c.Limit = 1 })
	st := status(time.Minute, wire.AdminCounters{})
	h.src.set(addr1, st, wire.LockEntry{Key: "a", Token: 1, QueueDepth: 1}, wire.LockEntry{Key: "b", Token: 2})
	h.start()
	h.src.set(addr1, st, wire.LockEntry{Key: "b", Token: 2, QueueDepth: 7})
	h.tick(time.Second)
	if got := h.eventTexts(); len(got) != 1 {
		t.Errorf("spike claimed past a truncated answer: %q", got)
	}
	h.src.set(addr1, st, wire.LockEntry{Key: "x", Token: 3, QueueDepth: 9})
	h.press("/")
	h.typeText("x")
	h.press("enter")
	if got := h.eventTexts(); len(got) != 1 {
		t.Errorf("spike claimed across a prefix change: %q", got)
	}
}

func TestUpdateSortCycle(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}),
		wire.LockEntry{Key: "b", Token: 30, LeaseRemainingMS: 5000, QueueDepth: 2, OldestWaiterAgeMS: 100},
		wire.LockEntry{Key: "a", Token: 10, LeaseRemainingMS: 9000, QueueDepth: 2, OldestWaiterAgeMS: 900},
		wire.LockEntry{Key: "c", Token: 20, LeaseRemainingMS: 1000, QueueDepth: 0},
		wire.LockEntry{Key: "d", Token: 40, LeaseRemainingMS: 3000, QueueDepth: 5, OldestWaiterAgeMS: 50},
	)
	h.start()
	for _, tc := range []struct {
		mode string
		want []string
		mark string
	}{
		{"depth", []string{"d", "a", "b", "c"}, "DEPTH▼"},
		{"oldest wait", []string{"a", "b", "d", "c"}, "OLDEST WAIT▼"},
		{"lease", []string{"c", "d", "b", "a"}, "LEASE▲"},
		{"key", []string{"a", "b", "c", "d"}, "KEY▲"},
		{"token", []string{"d", "b", "c", "a"}, "TOKEN▼"},
		{"depth", []string{"d", "a", "b", "c"}, "DEPTH▼"},
	} {
		if got := h.m.sortBy.String(); got != tc.mode {
			t.Fatalf("sort = %q, want %q", got, tc.mode)
		}
		if got := h.rowKeys(); !slices.Equal(got, tc.want) {
			t.Errorf("sort %s: rows %q, want %q", tc.mode, got, tc.want)
		}
		v := h.view()
		if !strings.Contains(v, tc.mark) || !strings.Contains(v, "sort "+tc.mode) {
			t.Errorf("sort %s: view lacks %q:\n%s", tc.mode, tc.mark, v)
		}
		h.press("s")
	}
}

func TestUpdateFilter(t *testing.T) {
	h := newHarness(t, []string{addr1}, func(c *Config) { c.Prefix = "jobs/" })
	h.src.ignorePfx = true // the server's answer may lag the prefix: filtered here too
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}),
		wire.LockEntry{Key: "jobs/a", Token: 1}, wire.LockEntry{Key: "jobs/b", Token: 2},
		wire.LockEntry{Key: "web/x", Token: 3}, wire.LockEntry{Key: "web/y", Token: 4})
	h.start()
	if got := h.src.takeCalls(); !slices.Equal(got, []string{"status " + addr1, `locks 127.0.0.1:7470 "jobs/" 100`}) {
		t.Errorf("calls = %q", got)
	}
	if got := h.rowKeys(); !slices.Equal(got, []string{"jobs/a", "jobs/b"}) {
		t.Errorf("rows = %q", got)
	}

	h.press("/")
	if !h.m.editing || string(h.m.input) != "jobs/" {
		t.Fatalf("prompt not open with the filter: %v %q", h.m.editing, string(h.m.input))
	}
	h.press("ctrl+u")
	h.typeText("wex")
	h.press("backspace", "backspace")
	h.typeText("q") // text here, not quit
	h.press("backspace")
	if h.quit {
		t.Fatal("q in the prompt quit")
	}
	if v := h.view(); !strings.Contains(v, "filter prefix: w█") {
		t.Errorf("prompt not shown:\n%s", v)
	}
	h.press("enter")
	if h.m.editing || h.m.filter != "w" {
		t.Fatalf("filter = %q editing=%v", h.m.filter, h.m.editing)
	}
	// Enter polls at once with the new prefix.
	if got := h.src.takeCalls(); !slices.Contains(got, `locks 127.0.0.1:7470 "w" 100`) {
		t.Errorf("no poll with the new prefix: %q", got)
	}
	if got := h.rowKeys(); !slices.Equal(got, []string{"web/x", "web/y"}) {
		t.Errorf("rows = %q", got)
	}

	h.press("/")
	h.typeText("zzz")
	h.press("esc")
	if h.m.filter != "w" || h.m.editing {
		t.Errorf("esc changed the filter to %q", h.m.filter)
	}
	h.press("/", "ctrl+u", "enter")
	if got := h.rowKeys(); len(got) != 4 {
		t.Errorf("empty filter rows = %q", got)
	}
}

// Pasted text (bracketed paste) goes into the prompt, without its control
// characters; outside the prompt it does nothing.
func TestUpdateFilterPaste(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.start()
	h.send(tea.PasteMsg{Content: "q/?s"})
	if h.quit || h.m.showHelp || h.m.editing || h.m.sortBy != sortDepth {
		t.Fatal("a paste outside the prompt acted as keys")
	}
	h.press("/")
	h.send(tea.PasteMsg{Content: "jobs/\x1b[2J\r\nnightly"})
	h.press("space")
	h.typeText("x")
	if got := string(h.m.input); got != "jobs/[2Jnightly x" {
		t.Errorf("prompt = %q", got)
	}
	h.send(tea.PasteMsg{Content: strings.Repeat("y", 2*maxFilterLen)})
	if n := len(h.m.input); n != maxFilterLen {
		t.Errorf("prompt holds %d runes, want at most %d", n, maxFilterLen)
	}
}

func TestUpdatePause(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}), wire.LockEntry{Key: "a", Token: 1})
	h.start()
	h.press("p")
	h.src.takeCalls()
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}), wire.LockEntry{Key: "b", Token: 2})
	h.tick(time.Second)
	h.tick(time.Second)
	if got := h.src.takeCalls(); len(got) != 0 {
		t.Errorf("paused but polled: %q", got)
	}
	if got := h.rowKeys(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("paused rows changed: %q", got)
	}
	if v := h.view(); !strings.Contains(v, "PAUSED · 15:09:28") {
		t.Errorf("no PAUSED in the title:\n%s", v)
	}
	h.press("p") // resume polls at once
	if got := h.rowKeys(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("resumed rows: %q", got)
	}
}

// A poll answered after the pause began is dropped: the screen stays frozen.
func TestUpdatePauseDropsLateAnswer(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}), wire.LockEntry{Key: "a", Token: 1})
	h.start()
	h.now = h.now.Add(time.Second)
	_, cmd := h.m.Update(tickMsg(h.now)) // the poll starts but is not answered yet
	h.press("p")
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}), wire.LockEntry{Key: "late", Token: 2})
	h.run(cmd)
	if got := h.rowKeys(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("rows = %q", got)
	}
	if h.m.node(addr1).inflight {
		t.Error("poll still in flight after its answer")
	}
}

// A node whose poll is still running is not polled again by the next tick.
func TestUpdateSkipsNodeInFlight(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}))
	_, cmd := h.m.Update(tickMsg(t0))
	if cmd == nil || !h.m.node(addr1).inflight {
		t.Fatal("first tick started no poll")
	}
	_, cmd2 := h.m.Update(tickMsg(t0.Add(time.Second)))
	h.run(cmd2)
	if got := h.src.takeCalls(); len(got) != 0 {
		t.Errorf("second poll while the first runs: %q", got)
	}
	h.run(cmd)
	if got := h.src.takeCalls(); len(got) != 2 {
		t.Errorf("calls = %q", got)
	}
	if h.ticks != 2 {
		t.Errorf("%d ticks scheduled, want one per tick", h.ticks)
	}
}

func TestUpdateScroll(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	var locks []wire.LockEntry
	for i := range 30 {
		locks = append(locks, wire.LockEntry{Key: "key/" + string(rune('A'+i)), Token: uint64(i + 1), QueueDepth: 30 - i})
	}
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}), locks...)
	h.size(80, 24)
	h.start()
	rows := h.m.layout().keyRows
	if rows != 10 {
		t.Fatalf("key rows at 80x24 = %d, want 10", rows)
	}
	for _, tc := range []struct {
		keys []string
		want int
	}{
		{[]string{"down", "down"}, 2},
		{[]string{"up"}, 1},
		{[]string{"pgdown"}, 11},
		{[]string{"pgdown"}, 20}, // the last page: 30-10
		{[]string{"down"}, 20},
		{[]string{"pgup"}, 10},
		{[]string{"home"}, 0},
		{[]string{"up"}, 0},
		{[]string{"end"}, 20},
		{[]string{"g"}, 0},
		{[]string{"j", "j", "j"}, 3},
		{[]string{"k"}, 2},
		{[]string{"space"}, 12}, // space pages down too
		{[]string{"G"}, 20},
	} {
		h.press(tc.keys...)
		if h.m.offset != tc.want {
			t.Fatalf("after %v offset = %d, want %d", tc.keys, h.m.offset, tc.want)
		}
	}
	v := h.view()
	if !strings.Contains(v, "key/U") || strings.Contains(v, "key/T ") || !strings.Contains(v, "21-30") {
		t.Errorf("last page not shown:\n%s", v)
	}
	// A bigger window shows more rows: the offset follows.
	h.size(120, 40)
	if h.m.offset != 30-h.m.layout().keyRows {
		t.Errorf("offset after resize = %d", h.m.offset)
	}
	h.press("s") // a new order starts at the top
	if h.m.offset != 0 {
		t.Errorf("offset after sort = %d", h.m.offset)
	}
}

func TestUpdateQuitAndHelp(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.press("?")
	if v := h.view(); !h.m.showHelp || !strings.Contains(v, "cycle the sort order") || !strings.Contains(v, "help · ? or esc to close") {
		t.Errorf("help not shown:\n%s", v)
	}
	h.press("esc")
	if h.m.showHelp {
		t.Error("esc left help open")
	}
	h.press("q")
	if !h.quit {
		t.Error("q did not quit")
	}
	h2 := newHarness(t, []string{addr1}, nil)
	h2.press("ctrl+c")
	if !h2.quit {
		t.Error("ctrl+c did not quit")
	}
	h3 := newHarness(t, []string{addr1}, nil)
	h3.press("/", "ctrl+c")
	if !h3.quit {
		t.Error("ctrl+c in the prompt did not quit")
	}
}

// With several single nodes, each has its own table: the keys table shows
// them all with a NODE column and the throughput is their sum. With a
// leader, only the leader's table and counters count.
func TestUpdateMultiNode(t *testing.T) {
	a, b := "10.0.0.1:7470", "10.0.0.2:7470"
	h := newHarness(t, []string{a, b}, nil)
	h.src.set(a, status(time.Minute, wire.AdminCounters{Grants: 10}), wire.LockEntry{Key: "x", Token: 1, QueueDepth: 1})
	h.src.set(b, status(time.Minute, wire.AdminCounters{Grants: 10}), wire.LockEntry{Key: "y", Token: 1, QueueDepth: 2})
	h.start()
	h.src.set(a, status(time.Minute+time.Second, wire.AdminCounters{Grants: 15}), wire.LockEntry{Key: "x", Token: 1, QueueDepth: 1})
	h.src.set(b, status(time.Minute+time.Second, wire.AdminCounters{Grants: 12}), wire.LockEntry{Key: "y", Token: 1, QueueDepth: 2})
	h.tick(time.Second)
	if r, _ := h.m.totalRates(); r.Grants != 7 {
		t.Errorf("sum of grants/s = %v, want 7", r.Grants)
	}
	if got := h.rowKeys(); !slices.Equal(got, []string{"y", "x"}) {
		t.Errorf("rows = %q", got)
	}
	if v := h.view(); !strings.Contains(v, "NODE") || !strings.Contains(v, "sum of 2 nodes") {
		t.Errorf("view:\n%s", v)
	}

	sa, sb := status(time.Minute+2*time.Second, wire.AdminCounters{Grants: 20}), status(time.Minute+2*time.Second, wire.AdminCounters{Grants: 20})
	sa.Role, sa.Leader = wire.NodeLeader, a
	sb.Role, sb.Leader = wire.NodeFollower, a
	h.src.set(a, sa, wire.LockEntry{Key: "x", Token: 1, QueueDepth: 1})
	h.src.set(b, sb, wire.LockEntry{Key: "stale", Token: 1, QueueDepth: 2})
	h.tick(time.Second)
	if r, _ := h.m.totalRates(); r.Grants != 5 {
		t.Errorf("leader's grants/s = %v, want 5", r.Grants)
	}
	if got := h.rowKeys(); !slices.Equal(got, []string{"x"}) {
		t.Errorf("rows = %q, want the leader's", got)
	}
}

// Init delivers the first tick at once, and asks for the terminal's
// background colour.
func TestInitTicksAtOnce(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	batch, ok := h.m.Init()().(tea.BatchMsg)
	if !ok || len(batch) != 2 {
		t.Fatalf("Init delivered %#v, want a batch of 2", batch)
	}
	if msg := batch[0](); msg == nil {
		t.Fatal("Init's first command delivered nothing")
	} else if tm, ok := msg.(tickMsg); !ok || !time.Time(tm).Equal(t0) {
		t.Fatalf("Init delivered %#v", msg)
	}
	if msg := batch[1](); msg != tea.RequestBackgroundColor() {
		t.Fatalf("Init's second command delivered %#v, want the background colour request", msg)
	}
	var _ tea.Model = h.m
}

// The terminal's background picks the light or the dark colours (dark until
// it answers); either way the screen's text is the same.
func TestViewBackground(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.src.setDown(addr1, errors.New("connection refused"))
	h.start()
	const darkRed, lightRed = "38;2;255;95;95", "38;2;192;0;0" // DOWN: #FF5F5F, #C00000
	dark := h.m.View().Content
	if !strings.Contains(dark, darkRed) || strings.Contains(dark, lightRed) {
		t.Fatalf("before any answer, want the dark colours:\n%q", dark)
	}
	h.send(tea.BackgroundColorMsg{Color: color.White})
	light := h.m.View().Content
	if !strings.Contains(light, lightRed) || strings.Contains(light, darkRed) {
		t.Errorf("on a light background, want the light colours:\n%q", light)
	}
	h.send(tea.BackgroundColorMsg{Color: color.Black})
	if v := h.m.View().Content; v != dark {
		t.Errorf("on a black background, want the dark colours again:\n%q", v)
	}
	if plain(light) != plain(dark) {
		t.Errorf("the text changed with the colours:\n%s\n---\n%s", plain(light), plain(dark))
	}
	if !h.m.View().AltScreen {
		t.Error("the view is not in the alternate screen")
	}
}

// top follows the cluster's membership as health does (issue #28 item 10):
// after n3 (10.0.0.3) was replaced by n4 (10.0.0.4), the dead address
// leaves the view with an event and the new member is added and polled;
// a watched address that answers but is not a member says so.
func TestUpdateFollowsMembership(t *testing.T) {
	const a1, a2, a3, a4 = "10.0.0.1:7470", "10.0.0.2:7470", "10.0.0.3:7470", "10.0.0.4:7470"
	h := newHarness(t, []string{a1, a2, a3}, nil)
	leader := status(time.Minute, wire.AdminCounters{})
	leader.Role, leader.Term = wire.NodeLeader, 3
	follower := leader
	follower.Role, follower.NodeID = wire.NodeFollower, "n2"
	h.src.set(a1, leader)
	h.src.set(a2, follower)
	h.src.setDown(a3, errors.New("dial: cannot connect: dial tcp 10.0.0.3:7470: connect: connection refused"))
	h.src.setMembers(a1,
		wire.Member{ID: "n1", ClientAddr: a1, Role: "leader", Voter: true},
		wire.Member{ID: "n2", ClientAddr: a2, Role: "follower", Voter: true},
		wire.Member{ID: "n4", ClientAddr: a4, Role: "follower", Voter: true})
	n4 := follower
	n4.NodeID = "n4"
	h.src.set(a4, n4)
	h.start()
	h.tick(time.Second)
	if h.m.node(a3) != nil {
		t.Errorf("the replaced node %s is still shown", a3)
	}
	if n := h.m.node(a4); n == nil || !n.reachable {
		t.Fatalf("the new member %s is not shown (or not polled): %+v", a4, n)
	}
	ev := strings.Join(h.eventTexts(), "\n")
	for _, want := range []string{"member n4 joined the view", "no longer a member of the cluster"} {
		if !strings.Contains(ev, want) {
			t.Errorf("no event %q in:\n%s", want, ev)
		}
	}
	if v := h.view(); strings.Contains(v, a3) && strings.Contains(v, "DOWN") && !strings.Contains(v, "no longer a member") {
		t.Errorf("view shows %s DOWN:\n%s", a3, v)
	}
	// a2 leaves the membership but still answers: shown as not a member.
	h.src.setMembers(a1,
		wire.Member{ID: "n1", ClientAddr: a1, Role: "leader", Voter: true},
		wire.Member{ID: "n4", ClientAddr: a4, Role: "follower", Voter: true})
	h.tick(time.Second)
	if n := h.m.node(a2); n == nil || !n.notMember {
		t.Fatalf("%s: %+v, want shown as not a member", a2, n)
	}
	if v := h.view(); !strings.Contains(v, "not a member") {
		t.Errorf("view does not say %s is not a member:\n%s", a2, v)
	}
}

// An authentication failure is shown as such, not as DOWN; a DOWN reason
// fits an 80-column screen instead of being cut to "dial…".
func TestUpdateAuthFailureAndDownReason(t *testing.T) {
	const a2 = "10.0.0.2:7470"
	h := newHarness(t, []string{addr1, a2}, nil)
	h.size(80, 24)
	h.src.setDown(addr1, fmt.Errorf("admin: %w: wrong token", client.ErrAuth))
	h.src.setDown(a2, errors.New("dial: cannot connect: no connection to any server: dial tcp 10.0.0.2:7470: connect: connection refused"))
	h.start()
	v := h.view()
	if !strings.Contains(v, "AUTH FAILED") || !strings.Contains(strings.Join(h.eventTexts(), "\n"), "authentication failed") {
		t.Errorf("the auth failure is not shown as such:\n%s\nevents %q", v, h.eventTexts())
	}
	var row string
	for _, l := range strings.Split(v, "\n") {
		if strings.HasPrefix(l, a2) {
			row = l
		}
	}
	if !strings.Contains(row, "DOWN") || !strings.Contains(row, "connection refused") {
		t.Errorf("the DOWN row at 80 columns does not give the reason: %q", row)
	}
}

// Events are kept in time order, whatever order the polls answer in.
func TestUpdateEventsInTimeOrder(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.m.logEvent(t0.Add(2*time.Second), addr1, evInfo, "second")
	h.m.logEvent(t0.Add(time.Second), addr1, evInfo, "first")
	h.m.logEvent(t0.Add(3*time.Second), addr1, evInfo, "third")
	if got := h.eventTexts(); !slices.Equal(got, []string{"first", "second", "third"}) {
		t.Fatalf("events %q, want in time order", got)
	}
}

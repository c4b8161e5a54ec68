package tui

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/ticketing/ticketing/client/wire"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current View")

// golden compares got with testdata/name.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./tui -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("View differs from %s (go test ./tui -run %s -update to accept):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

// checkFits fails unless view has at most h lines of at most w cells.
func checkFits(t *testing.T, view string, w, h int) {
	t.Helper()
	lines := strings.Split(view, "\n")
	if len(lines) > h {
		t.Errorf("%dx%d: %d lines", w, h, len(lines))
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n > w {
			t.Errorf("%dx%d: line %d is %d cells: %q", w, h, i, n, l)
		}
	}
}

// The keys of the dashboard fixture: odd ones included.
const (
	evilKey = "orders/\x1b[2J\x1b]0;pwned\x07\r\n"
	wideKey = "tenant/東京/cache"
	longKey = "batch/reports/quarterly/2025-Q1/eu-west-1/aggregate-revenue-by-region"
)

// dashboard is a node observed for 45 s: a grants wave, a 2 s outage, a
// queue spike, keys of every kind.
func dashboard(t *testing.T, w, h int) *harness {
	hs := newHarness(t, []string{addr1}, nil)
	hs.size(w, h)
	locks := func(spike int) []wire.LockEntry {
		return []wire.LockEntry{
			{Key: "jobs/nightly-report", Token: 4711, LeaseRemainingMS: 27_400, QueueDepth: spike, OldestWaiterAgeMS: 8_200},
			{Key: "db/migrations", Token: 4702, LeaseRemainingMS: 142_000, QueueDepth: 4, OldestWaiterAgeMS: 95_000},
			{Key: evilKey, Token: 4690, LeaseRemainingMS: 3_100, QueueDepth: 2, OldestWaiterAgeMS: 1_250},
			{Key: wideKey, Token: 4721, LeaseRemainingMS: 9_900, QueueDepth: 1, OldestWaiterAgeMS: 400},
			{Key: longKey, Token: 4600, LeaseRemainingMS: 3_540_000, QueueDepth: 1, OldestWaiterAgeMS: 61_000},
			{Key: "cron/cleanup", Token: 4719, LeaseRemainingMS: 55_000},
			{Key: "leader/billing", Token: 12, LeaseRemainingMS: 8_000},
			{Key: "ledger/acct-1042", Token: 4722, LeaseRemainingMS: 850},
			{Key: "ledger/acct-2001", Token: 4718, LeaseRemainingMS: 4_200},
			{Key: "ledger/acct-3377", Token: 4716, LeaseRemainingMS: 12_000},
			{Key: "mail/outbox", Token: 4700, LeaseRemainingMS: 600_000},
			{Key: "shard/07", Token: 4713, LeaseRemainingMS: 29_000},
			{Key: "shard/11", Token: 4715, LeaseRemainingMS: 30_000},
			{Key: "shard/19", Token: 4720, LeaseRemainingMS: 21_000},
		}
	}
	wave := []uint64{12, 14, 18, 23, 27, 30, 31, 29, 25, 20, 15, 11, 9, 8, 10}
	var c wire.AdminCounters
	up := 3*time.Hour + 12*time.Minute
	for i := range 45 {
		g := wave[i%len(wave)]
		c.Grants += g
		c.Handoffs += g / 3
		c.Releases += g - 1
		c.Timeouts += uint64(i % 7 / 6)
		c.Expiries += uint64(i % 11 / 10)
		st := status(up+time.Duration(i)*time.Second, c)
		st.NodeID, st.Version = "n1", "v0.4.0"
		st.Connections, st.Keys, st.Holders, st.Waiters = 23, 14, 14, 8
		spike := 1
		if i >= 40 {
			spike = 6
			st.Waiters = 13
		}
		hs.src.set(addr1, st, locks(spike)...)
		if i == 30 || i == 31 {
			hs.src.setDown(addr1, errors.New("admin: dial 127.0.0.1:7470: connect: connection refused"))
		}
		if i == 0 {
			hs.start()
		} else {
			hs.tick(time.Second)
		}
	}
	return hs
}

func TestViewGolden(t *testing.T) {
	for _, sz := range []struct{ w, h int }{{80, 24}, {120, 40}} {
		t.Run(fmt.Sprintf("%dx%d", sz.w, sz.h), func(t *testing.T) {
			h := dashboard(t, sz.w, sz.h)
			v := h.view()
			checkFits(t, v, sz.w, sz.h)
			golden(t, fmt.Sprintf("top-%dx%d", sz.w, sz.h), v)
		})
	}
}

func TestViewGoldenHelp(t *testing.T) {
	h := dashboard(t, 80, 24)
	h.press("?")
	v := h.view()
	checkFits(t, v, 80, 24)
	golden(t, "help-80x24", v)
}

// Three nodes of a cluster, one down: the leader's keys and counters.
func TestViewGoldenCluster(t *testing.T) {
	a, b, c := "10.0.0.1:7470", "10.0.0.2:7470", "10.0.0.3:7470"
	h := newHarness(t, []string{a, b, c}, nil)
	h.size(80, 24)
	set := func(i int) {
		sa := status(26*time.Hour+time.Duration(i)*time.Second, wire.AdminCounters{Grants: uint64(100 + 40*i), Handoffs: uint64(10 * i), Releases: uint64(95 + 38*i)})
		sa.Role, sa.Leader, sa.NodeID, sa.Keys, sa.Holders, sa.Waiters, sa.Connections = wire.NodeLeader, a, "n1", 3, 3, 5, 40
		sa.Term, sa.CommitIndex, sa.AppliedIndex = 7, 1200, 1200
		sb := sa
		sb.Role, sb.NodeID, sb.Connections = wire.NodeFollower, "n2", 2
		sb.AppliedIndex = 1188
		h.src.set(a, sa,
			wire.LockEntry{Key: "payments/settle", Token: 88012, LeaseRemainingMS: 14_000, QueueDepth: 4, OldestWaiterAgeMS: 3_300},
			wire.LockEntry{Key: "jobs/reindex", Token: 88007, LeaseRemainingMS: 48_000, QueueDepth: 1, OldestWaiterAgeMS: 700},
			wire.LockEntry{Key: "leader/scheduler", Token: 87001, LeaseRemainingMS: 9_000})
		h.src.set(b, sb, wire.LockEntry{Key: "not-shown/follower-copy", Token: 1})
	}
	set(0)
	h.start()
	for i := 1; i <= 5; i++ {
		set(i)
		h.tick(time.Second)
	}
	v := h.view()
	checkFits(t, v, 80, 24)
	for _, want := range []string{"term 7", "lag 12"} {
		if !strings.Contains(v, want) {
			t.Errorf("cluster view lacks %q (leader's term, follower's lag behind the leader's commit index):\n%s", want, v)
		}
	}
	golden(t, "cluster-80x24", v)
}

// The view fits every size, tiny ones included, in every mode.
func TestViewFitsAnySize(t *testing.T) {
	h := dashboard(t, 80, 24)
	for _, mode := range []string{"normal", "help", "prompt"} {
		switch mode {
		case "help":
			h.press("?")
		case "prompt":
			h.press("?", "/")
			h.typeText(strings.Repeat("long/prefix/", 20))
		}
		for w := 1; w <= 200; w += 7 {
			for ht := 1; ht <= 60; ht += 3 {
				h.size(w, ht)
				checkFits(t, h.view(), w, ht)
			}
		}
	}
}

// A key's bytes never reach the terminal raw: the view is rendered in full
// colour (bubbletea downsamples it to the terminal's profile), and nothing in
// it but lipgloss' own SGR sequences is a control character, on a dark or a
// light background; the escaped form of the key is on screen instead.
func TestViewEscapesKeys(t *testing.T) {
	for _, r := range []struct {
		name string
		bg   color.Color // nil: no answer from the terminal (dark)
	}{{"dark", nil}, {"light", color.White}} {
		t.Run(r.name, func(t *testing.T) {
			h := newHarness(t, []string{addr1}, nil)
			if r.bg != nil {
				h.send(tea.BackgroundColorMsg{Color: r.bg})
			}
			h.size(120, 40)
			keys := []string{
				evilKey,
				"bell\x07\x08\x7f",
				"c1\u009b31mred",       // C1 CSI
				"bidi\u202eevil\u202c", // right-to-left override
				"zero\u200bwidth",
				"bad-utf8\xff\xfe",
			}
			var locks []wire.LockEntry
			for i, k := range keys {
				locks = append(locks, wire.LockEntry{Key: k, Token: uint64(i + 1), QueueDepth: i})
			}
			h.src.set(addr1, status(time.Minute, wire.AdminCounters{}), locks...)
			h.start()
			locks[len(locks)-1].QueueDepth = 20 // a spike names the key in the event log too
			h.src.set(addr1, status(time.Minute+time.Second, wire.AdminCounters{}), locks...)
			h.tick(time.Second)
			h.press("/")
			h.typeText("\x1b[31m")
			v := h.m.View().Content
			if !sgr.MatchString(v) {
				t.Fatalf("no colours in the view:\n%q", v)
			}
			plain := plain(v)
			if strings.ContainsRune(plain, '\x1b') {
				t.Errorf("ESC beyond lipgloss' SGR sequences:\n%q", plain)
			}
			for i, c := range plain {
				if c != '\n' && (unicode.IsControl(c) || c == '\u202e' || c == '\u202c' || c == '\u200b') {
					t.Fatalf("raw control %U at %d on screen:\n%q", c, i, plain)
				}
			}
			for _, k := range keys[:1] {
				if !strings.Contains(plain, escape(k)[:20]) {
					t.Errorf("escaped key %q not on screen:\n%s", escape(k), plain)
				}
			}
			if !strings.Contains(plain, "queue spike: "+escape(keys[len(keys)-1])) {
				t.Errorf("escaped key not in the event:\n%s", plain)
			}
		})
	}
}

func TestSparkline(t *testing.T) {
	nan := func() float64 { var z float64; return z / z }()
	for _, tc := range []struct {
		hist      []float64
		cap, cols int
		peak      float64
		want      string
	}{
		{nil, 5, 5, 0, "     "},
		{[]float64{0, 1, 2, 4}, 4, 4, 4, "▁▂▄█"},
		{[]float64{4}, 4, 4, 4, "   █"},
		{[]float64{1, nan, 1}, 3, 3, 1, "█ █"},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8}, 8, 4, 8, "▂▄▆█"}, // two points a cell: the higher
		{[]float64{0, 0}, 2, 2, 0, "▁▁"},
	} {
		if got := sparkline(tc.hist, tc.cap, tc.cols, tc.peak); got != tc.want {
			t.Errorf("sparkline(%v, %d, %d) = %q, want %q", tc.hist, tc.cap, tc.cols, got, tc.want)
		}
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                  "0s",
		850 * time.Millisecond:        "850ms",
		4200 * time.Millisecond:       "4.2s",
		42 * time.Second:              "42s",
		3*time.Minute + 5*time.Second: "3m05s",
		2*time.Hour + 7*time.Minute:   "2h07m",
		76*time.Hour + 59*time.Minute: "3d04h",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}

// Protocol 1.1 (issue 30): the keys table names each lock's holder, its
// label or else its address, and a key set's keys as one holder on every
// row of the set (protocol.md §12.3); a label is escaped like a key.
func TestViewHolders(t *testing.T) {
	h := newHarness(t, []string{addr1}, nil)
	h.size(100, 20)
	set := []string{"acct/17", "acct/42"}
	billing := &wire.ConnInfo{Label: "billing", Addr: "10.1.2.3:51000"}
	h.src.set(addr1, status(time.Minute, wire.AdminCounters{}),
		wire.LockEntry{Key: "acct/17", Token: 900, LeaseRemainingMS: 30_000, QueueDepth: 1, OldestWaiterAgeMS: 2_000, Holder: billing, Set: set},
		wire.LockEntry{Key: "acct/42", Token: 900, LeaseRemainingMS: 30_000, Holder: billing, Set: set},
		wire.LockEntry{Key: "jobs/nightly", Token: 901, LeaseRemainingMS: 9_000, Holder: &wire.ConnInfo{Addr: "10.1.2.4:52000"}},
		wire.LockEntry{Key: "shard/07", Token: 902, LeaseRemainingMS: 5_000, Holder: &wire.ConnInfo{Label: "evil\x1b[2J"}},
		wire.LockEntry{Key: "old/1.0-row", Token: 903, LeaseRemainingMS: 1_000},
		wire.LockEntry{Key: "gone/conn", Token: 904, LeaseRemainingMS: 1_000, Holder: &wire.ConnInfo{}})
	h.start()
	v := h.view()
	checkFits(t, v, 100, 20)
	p := plain(v)
	for _, want := range []string{"HOLDER", "billing acct/17+acct/42", "10.1.2.4:52000", `"evil\x1b[2J"`} {
		if !strings.Contains(p, want) {
			t.Errorf("view lacks %q:\n%s", want, p)
		}
	}
	if n := strings.Count(p, "billing acct/17+acct/42"); n != 2 {
		t.Errorf("the set's holder is on %d rows, want 2 (each key of the set):\n%s", n, p)
	}
	if !strings.Contains(p, "gone/conn                                -") {
		t.Errorf("a holder naming neither label nor address is not shown as -:\n%s", p)
	}
	golden(t, "holders-100x20", v)

	// A server naming no holder (1.0, or only connections gone): no column.
	h2 := newHarness(t, []string{addr1}, nil)
	h2.size(100, 20)
	h2.src.set(addr1, status(time.Minute, wire.AdminCounters{}), wire.LockEntry{Key: "gone/conn", Token: 904, Holder: &wire.ConnInfo{}})
	h2.start()
	if p := plain(h2.view()); strings.Contains(p, "HOLDER ") {
		t.Errorf("HOLDER column without any holder named:\n%s", p)
	}
}

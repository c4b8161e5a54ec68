package tui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/ticketing/ticketing/client/wire"
)

// View renders the dashboard in the alternate screen (tea.Model).
func (m *Model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	return v
}

// render draws the dashboard. It is a pure function of the model: the
// clock is m.now (the last tick), every server string is escaped, and the
// result has at most m.height lines of at most m.width cells.
func (m *Model) render() string {
	w, h := m.width, m.height
	lay := m.layout()
	lines := []string{m.viewTitle(w)}
	lines = append(lines, m.viewNodes(w, lay.nodeRows)...)
	if lay.throughput {
		lines = append(lines, m.viewThroughput(w)...)
	}
	if m.showHelp {
		lines = append(lines, m.viewHelp(w, lay.keyRows+2)...)
	} else {
		lines = append(lines, m.viewKeys(w, lay.keyRows)...)
	}
	if lay.eventRows > 0 {
		lines = append(lines, m.viewEvents(w, lay.eventRows)...)
	}
	if len(lines) > h-1 {
		lines = lines[:max(h-1, 0)]
	}
	lines = append(lines, m.viewFooter(w))
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, w, "")
	}
	return strings.Join(lines, "\n")
}

// layout is how the height is shared: fixed sections first, the keys table
// takes the rest; on short terminals the events, then the throughput go.
type layout struct {
	nodeRows   int // node lines (the last may be "… n more")
	keyRows    int // key lines below the table's header
	eventRows  int // 0: no events section
	throughput bool
}

func (m *Model) layout() layout {
	h := m.height
	l := layout{throughput: true}
	l.nodeRows = min(len(m.nodes), max(1, (h-12)/3))
	l.eventRows = min(max(h/6, 2), 10)
	rest := func() int {
		n := 1 + 1 + l.nodeRows + 2 + 1 // title, node header, nodes, keys rule and header, footer
		if l.throughput {
			n += 3
		}
		if l.eventRows > 0 {
			n += 1 + l.eventRows
		}
		return h - n
	}
	l.keyRows = rest()
	if l.keyRows < 3 {
		l.eventRows = 0
		l.keyRows = rest()
	}
	if l.keyRows < 3 {
		l.throughput = false
		l.keyRows = rest()
	}
	l.keyRows = max(l.keyRows, 0)
	return l
}

func (m *Model) viewTitle(w int) string {
	up := 0
	for _, n := range m.nodes {
		if n.reachable {
			up++
		}
	}
	left := fmt.Sprintf(" ticketing top · %s, %d up · every %s", plural(len(m.nodes), "node"), up, m.cfg.Interval)
	if m.filter != "" {
		left += " · prefix " + quoted(m.filter)
	}
	right := "--:--:-- "
	if !m.now.IsZero() {
		right = m.now.Format("15:04:05") + " "
	}
	if m.paused {
		right = "PAUSED · " + right
	}
	gap := w - ansi.StringWidth(left) - ansi.StringWidth(right)
	if gap < 1 {
		left = ansi.Truncate(left, max(w-ansi.StringWidth(right)-1, 0), "…")
		gap = max(w-ansi.StringWidth(left)-ansi.StringWidth(right), 0)
	}
	return m.st.title.Render(left + strings.Repeat(" ", gap) + right)
}

// rule is a section heading: "── title ─────…".
func (m *Model) rule(w int, title string) string {
	s := "── " + title + " "
	return m.st.section.Render(ansi.Truncate(s, w, "…") + strings.Repeat("─", max(w-ansi.StringWidth(s), 0)))
}

// cell fits s into exactly w cells: truncated with "…", padded with spaces.
func cell(s string, w int, right bool) string {
	if w <= 0 {
		return ""
	}
	s = ansi.Truncate(s, w, "…")
	pad := strings.Repeat(" ", max(w-ansi.StringWidth(s), 0))
	if right {
		return pad + s
	}
	return s + pad
}

// Node table column widths (NODE and STATE share the rest).
const (
	wRole, wUptime, wConns, wKeys, wHolders, wWaiters = 8, 7, 6, 7, 7, 7
	nodeFixed                                         = wRole + wUptime + wConns + wKeys + wHolders + wWaiters + 7 // + gaps
)

func (m *Model) addrWidth(w int) int {
	aw := 10
	for _, n := range m.nodes {
		aw = max(aw, ansi.StringWidth(escape(n.addr)))
	}
	return min(aw, 28, max(w-nodeFixed-12, 8))
}

func (m *Model) viewNodes(w, rows int) []string {
	aw := m.addrWidth(w)
	sw := max(w-nodeFixed-aw, 0)
	hdr := strings.Join([]string{cell("NODE", aw, false), cell("ROLE", wRole, false), cell("UPTIME", wUptime, true),
		cell("CONNS", wConns, true), cell("KEYS", wKeys, true), cell("HOLDERS", wHolders, true),
		cell("WAITERS", wWaiters, true), cell("STATE", sw, false)}, " ")
	out := []string{m.st.header.Render(hdr)}
	for i, n := range m.nodes {
		if i == rows-1 && len(m.nodes) > rows {
			down := 0
			for _, o := range m.nodes[i:] {
				if o.polled && !o.reachable {
					down++
				}
			}
			out = append(out, m.st.faint.Render(fmt.Sprintf("… %d more nodes (%d unreachable)", len(m.nodes)-i, down)))
			break
		}
		role, uptime, conns, keys, holders, waiters := "-", "-", "-", "-", "-", "-"
		var state string
		switch {
		case !n.polled:
			state = m.st.faint.Render(cell("connecting…", sw, false))
		case !n.reachable:
			// A node that does not answer has no figures: its state takes
			// the whole row after the address, so that the reason (not
			// "dial…") fits 80 columns (issue #28 item 10).
			s, style := "DOWN", m.st.down
			if n.authFail {
				s, style = "AUTH FAILED", m.st.warn
			}
			if !m.now.IsZero() && !m.now.Before(n.since) {
				s += " " + fmtDur(m.now.Sub(n.since))
			}
			out = append(out, cell(escape(n.addr), aw, false)+" "+style.Render(cell(s+": "+escapeText(n.err), max(w-aw-1, 0), false)))
			continue
		default:
			st := n.status
			role, uptime = escape(st.Role), fmtDur(time.Duration(st.UptimeMS)*time.Millisecond)
			conns, keys = strconv.FormatInt(st.Connections, 10), strconv.FormatInt(st.Keys, 10)
			holders, waiters = strconv.FormatInt(st.Holders, 10), strconv.FormatInt(st.Waiters, 10)
			s := "up"
			if st.Term > 0 { // a cluster member: its replication lag behind the leader
				if lc, ok := m.leaderCommit(); ok && st.Role != "leader" {
					s += " · lag " + strconv.FormatUint(lc-min(lc, st.AppliedIndex), 10)
				} else if st.Role == "leader" {
					s += " · term " + strconv.FormatUint(st.Term, 10)
				}
			}
			if st.Leader != "" && st.Role != "leader" {
				s += " · leader " + escape(st.Leader)
			}
			if n.notMember {
				s += " · not a member of the cluster"
			}
			if cannotGrant(st) {
				state = m.st.warn.Render(cell(s+" · cannot grant: "+escapeText(st.Reason), sw, false))
			} else {
				state = m.st.up.Render(cell(s, sw, false))
			}
		}
		out = append(out, strings.Join([]string{cell(escape(n.addr), aw, false), cell(role, wRole, false),
			cell(uptime, wUptime, true), cell(conns, wConns, true), cell(keys, wKeys, true),
			cell(holders, wHolders, true), cell(waiters, wWaiters, true), state}, " "))
	}
	return out
}

func (m *Model) viewThroughput(w int) []string {
	r, ok := m.totalRates()
	f := func(v float64) string {
		if !ok {
			return "-"
		}
		return fmtRate(v)
	}
	title := "throughput /s"
	if len(m.authoritative()) > 1 {
		title += " (sum of " + strconv.Itoa(len(m.authoritative())) + " nodes)"
	}
	line := fmt.Sprintf("grants %s  handoffs %s  releases %s  timeouts %s  expiries %s",
		f(r.Grants), f(r.Handoffs), f(r.Releases), f(r.Timeouts), f(r.Expiries))
	const label = "grants/s 1m "
	peak, known := 0.0, false
	for _, v := range m.history {
		if !math.IsNaN(v) {
			peak, known = max(peak, v), true
		}
	}
	tail := " peak -"
	if known {
		tail = " peak " + fmtRate(peak)
	}
	cols := min(m.histCap, max(w-len(label)-len(tail)-1, 0))
	spark := label + m.st.spark.Render(sparkline(m.history, m.histCap, cols, peak)) + m.st.faint.Render(tail)
	return []string{m.rule(w, title), line, spark}
}

// sparkline draws the last capacity points of history (oldest first, NaN
// for unknown) in cols cells, scaled to peak; each cell shows the highest
// point of its share. Missing and unknown points are blank.
func sparkline(history []float64, capacity, cols int, peak float64) string {
	const bars = "▁▂▃▄▅▆▇█"
	if cols <= 0 || capacity <= 0 {
		return ""
	}
	levels := []rune(bars)
	pad := capacity - len(history) // empty slots before the first point
	var b strings.Builder
	for c := range cols {
		lo, hi := c*capacity/cols, (c+1)*capacity/cols
		hi = max(hi, lo+1)
		v, known := 0.0, false
		for s := lo; s < hi; s++ {
			i := s - pad
			if i < 0 || i >= len(history) || math.IsNaN(history[i]) {
				continue
			}
			v, known = max(v, history[i]), true
		}
		switch {
		case !known:
			b.WriteByte(' ')
		case peak <= 0 || v <= 0:
			b.WriteRune(levels[0])
		default:
			b.WriteRune(levels[min(max(int(v/peak*7), 1), 7)])
		}
	}
	return b.String()
}

// Keys table column widths.
const (
	wLease, wDepth, wWait = 8, 6, 12
)

func (m *Model) viewKeys(w, rows int) []string {
	rs, total, multi := m.rows()
	off := min(m.offset, max(len(rs)-rows, 0))
	off = max(off, 0)

	title := fmt.Sprintf("keys · %d", total)
	if len(rs) < total {
		title = fmt.Sprintf("keys · %d of %d (deepest queues)", len(rs), total)
	}
	title += " · sort " + m.sortBy.String()
	if m.filter != "" {
		title += " · prefix " + quoted(m.filter)
	}
	if len(rs) > rows && rows > 0 {
		title += fmt.Sprintf(" · %d-%d", off+1, min(off+rows, len(rs)))
	}

	tw := len("TOKEN") + 1
	for _, r := range rs {
		tw = max(tw, len(strconv.FormatUint(r.Token, 10)))
	}
	aw := 0
	if multi {
		aw = m.addrWidth(w)
	}
	// HOLDER (protocol 1.1, §12.3): only when the server names a holder of
	// some row (a label, an address or a set), so a 1.0 server's table is
	// unchanged; at most a third of the width.
	hw := 0
	for _, r := range rs {
		if ht := holderText(&r.LockEntry); ht != "-" {
			hw = max(hw, len("HOLDER"), ansi.StringWidth(ht))
		}
	}
	hw = min(hw, max(w/3, len("HOLDER")))
	kw := w - tw - wLease - wDepth - wWait - 4
	if multi {
		kw -= aw + 1
	}
	if hw > 0 {
		kw -= hw + 1
	}
	kw = max(kw, 8)
	mark := func(title string, s sortMode, arrow string) string {
		if m.sortBy == s {
			return title + arrow
		}
		return title
	}
	var hdr []string
	if multi {
		hdr = append(hdr, cell("NODE", aw, false))
	}
	hdr = append(hdr, cell(mark("KEY", sortKey, "▲"), kw, false))
	if hw > 0 {
		hdr = append(hdr, cell("HOLDER", hw, false))
	}
	hdr = append(hdr, cell(mark("TOKEN", sortToken, "▼"), tw, true),
		cell(mark("LEASE", sortLease, "▲"), wLease, true), cell(mark("DEPTH", sortDepth, "▼"), wDepth, true),
		cell(mark("OLDEST WAIT", sortWait, "▼"), wWait, true))
	out := []string{m.rule(w, title), m.st.header.Render(strings.Join(hdr, " "))}

	if len(rs) == 0 && rows > 0 {
		msg := "no held keys"
		switch {
		case len(m.authoritative()) == 0:
			msg = "no reachable node yet"
		case m.filter != "":
			msg = "no held key starts with " + quoted(m.filter)
		}
		out = append(out, m.st.faint.Render(msg))
	}
	for _, r := range rs[off:min(off+rows, len(rs))] {
		var c []string
		if multi {
			c = append(c, cell(escape(r.node), aw, false))
		}
		depth := cell(strconv.Itoa(r.QueueDepth), wDepth, true)
		if r.QueueDepth >= m.cfg.SpikeDepth {
			depth = m.st.warn.Render(depth)
		}
		wait := "-"
		if r.QueueDepth > 0 {
			wait = fmtDur(time.Duration(r.OldestWaiterAgeMS) * time.Millisecond)
		}
		token, lease := "-", "-"
		if r.Token != 0 {
			token = strconv.FormatUint(r.Token, 10)
			lease = fmtDur(time.Duration(r.LeaseRemainingMS) * time.Millisecond)
		}
		c = append(c, cell(escape(r.Key), kw, false))
		if hw > 0 {
			c = append(c, cell(holderText(&r.LockEntry), hw, false))
		}
		c = append(c, cell(token, tw, true), cell(lease, wLease, true), depth, cell(wait, wWait, true))
		out = append(out, strings.Join(c, " "))
	}
	for len(out) < rows+2 {
		out = append(out, "")
	}
	return out
}

// holderText is who holds e (protocol.md §12.3): the connection's label, or
// its address when it has none, then for a key set its keys joined by "+"
// (every row of the set shows the same text, so the set reads as one
// holder: "billing acct/17+acct/42"); "-" when the server names neither.
func holderText(e *wire.LockEntry) string {
	who := ""
	if h := e.Holder; h != nil {
		switch {
		case h.Label != "":
			who = escape(h.Label)
		case h.Addr != "":
			who = escape(h.Addr)
		}
	}
	if len(e.Set) > 0 {
		ks := make([]string, len(e.Set))
		for i, k := range e.Set {
			ks[i] = escape(k)
		}
		if who == "" {
			return strings.Join(ks, "+")
		}
		return who + " " + strings.Join(ks, "+")
	}
	if who == "" {
		return "-"
	}
	return who
}

func (m *Model) viewEvents(w, rows int) []string {
	out := []string{m.rule(w, "events")}
	evs := m.events[max(len(m.events)-rows, 0):]
	if len(evs) == 0 {
		out = append(out, m.st.faint.Render("none yet"))
	}
	for _, e := range evs {
		s := e.at.Format("15:04:05") + " "
		if len(m.nodes) > 1 {
			s += escape(e.node) + " "
		}
		s += e.text
		st := m.st.evInfo
		switch e.kind {
		case evDown:
			st = m.st.evDown
		case evUp:
			st = m.st.evUp
		case evSpike:
			st = m.st.evSpike
		case evLeader:
			st = m.st.evLeader
		}
		out = append(out, st.Render(ansi.Truncate(s, w, "…")))
	}
	for len(out) < rows+1 {
		out = append(out, "")
	}
	return out
}

func (m *Model) viewHelp(w, rows int) []string {
	out := []string{m.rule(w, "help · ? or esc to close")}
	out = append(out, strings.Split(m.help.FullHelpView(m.keys.FullHelp()), "\n")...)
	out = append(out, "",
		"sort orders (s): depth ▼ · oldest wait ▼ · lease ▲ · key ▲ · token ▼",
		fmt.Sprintf("each node returns its %d deepest queues under the prefix; s re-sorts those.", m.cfg.Limit),
		"filter (/): a key prefix, asked of the servers; enter applies, esc cancels.",
		"pause (p): freezes the screen; polls resume with p.",
		`keys with control or invisible characters are shown quoted: "a\x1bb".`,
	)
	if len(out) > rows {
		out = out[:rows]
	}
	for len(out) < rows {
		out = append(out, "")
	}
	return out
}

func (m *Model) viewFooter(w int) string {
	if m.editing {
		s := m.st.prompt.Render("filter prefix: ") + escapeText(string(m.input)) + "█"
		return s + m.st.faint.Render("  enter apply · esc cancel · ctrl+u clear")
	}
	return m.help.ShortHelpView(m.keys.ShortHelp())
}

// fmtDur is a compact duration: 850ms, 4.2s, 42s, 3m05s, 2h07m, 3d04h.
func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
}

// fmtRate is a per-second rate: one decimal below 1000.
func fmtRate(v float64) string {
	if v < 1000 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// leaderCommit is the commit index of the reachable leader, if one is polled.
func (m *Model) leaderCommit() (uint64, bool) {
	for _, n := range m.nodes {
		if n.polled && n.reachable && n.status.Role == "leader" {
			return n.status.CommitIndex, true
		}
	}
	return 0, false
}

package tui

import (
	"errors"
	"math"
	"strings"
	"time"
	"unicode"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// maxSpikeEvents is how many spiking keys one poll logs one by one; more
// are summed up in one line.
const maxSpikeEvents = 3

// maxFilterLen bounds the filter prompt (in runes).
const maxFilterLen = 256

// Update applies a message to the model (tea.Model).
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmd tea.Cmd
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = max(msg.Width, 1), max(msg.Height, 1)
		m.help.SetWidth(m.width)
	case tea.BackgroundColorMsg:
		m.st = newStyles(msg.IsDark())
	case tickMsg:
		cmd = m.onTick(time.Time(msg))
	case pollMsg:
		m.onPoll(msg)
	case tea.KeyPressMsg:
		cmd = m.onKey(msg)
	case tea.PasteMsg: // bracketed paste: text for the filter prompt only
		if m.editing {
			m.typeText(msg.Content)
		}
	}
	m.clampOffset()
	return m, cmd
}

// onTick advances the clock, adds a sparkline point and starts the polls
// (unless paused), and schedules the next tick.
func (m *Model) onTick(t time.Time) tea.Cmd {
	m.now = t
	cmds := []tea.Cmd{m.tickCmd()}
	if m.paused {
		return tea.Batch(cmds...)
	}
	if r, ok := m.totalRates(); ok {
		m.pushHistory(r.Grants)
	} else if len(m.history) > 0 {
		m.pushHistory(math.NaN()) // a gap: nothing reachable
	}
	cmds = append(cmds, m.pollAll()...)
	return tea.Batch(cmds...)
}

func (m *Model) pushHistory(v float64) {
	m.history = append(m.history, v)
	if len(m.history) > m.histCap {
		m.history = append(m.history[:0], m.history[len(m.history)-m.histCap:]...)
	}
}

// onPoll applies one node's answer: reachability, status, rates, locks, and
// the events their changes make.
func (m *Model) onPoll(msg pollMsg) {
	n := m.node(msg.addr)
	if n == nil {
		return
	}
	n.inflight = false
	if m.paused { // frozen: the answer to a poll started before the pause is dropped
		return
	}
	at := msg.at
	if msg.err != nil {
		auth := errors.Is(msg.err, client.ErrAuth)
		if !n.polled || n.reachable || auth != n.authFail {
			if auth {
				m.logEvent(at, n.addr, evDown, "authentication failed (the admin token?): %s", escapeText(downReason(msg.err.Error())))
			} else {
				m.logEvent(at, n.addr, evDown, "unreachable: %s", escapeText(downReason(msg.err.Error())))
			}
			n.since = at
		}
		n.polled, n.reachable, n.err, n.authFail = true, false, downReason(msg.err.Error()), auth
		return
	}
	n.authFail = false
	if msg.hasMembers {
		defer m.followMembers(at, msg.members)
	}

	st := msg.status
	switch {
	case !n.polled:
		m.logEvent(at, n.addr, evUp, "reachable: node %s, role %s", escape(st.NodeID), escape(st.Role))
		n.since = at
	case !n.reachable:
		m.logEvent(at, n.addr, evUp, "reachable again after %s", fmtDur(at.Sub(n.since)))
		n.since = at
	}
	n.polled, n.reachable, n.err = true, true, ""

	if n.hasStatus {
		old := n.status
		if st.Role != old.Role {
			m.logEvent(at, n.addr, evLeader, "role %s → %s", escape(old.Role), escape(st.Role))
		}
		if st.Leader != old.Leader {
			switch {
			case st.Leader == "":
				m.logEvent(at, n.addr, evLeader, "leader lost (was %s)", escape(old.Leader))
			case old.Leader == "":
				m.logEvent(at, n.addr, evLeader, "leader is %s", escape(st.Leader))
			default:
				m.logEvent(at, n.addr, evLeader, "leader %s → %s", escape(old.Leader), escape(st.Leader))
			}
		}
		if cannotGrant(st) != cannotGrant(old) {
			if cannotGrant(st) {
				m.logEvent(at, n.addr, evSpike, "cannot grant: %s", escapeText(st.Reason))
			} else {
				m.logEvent(at, n.addr, evUp, "can grant again")
			}
		}
	} else if cannotGrant(st) {
		m.logEvent(at, n.addr, evSpike, "cannot grant: %s", escapeText(st.Reason))
	}

	cur := sample{at: at, uptimeMS: st.UptimeMS, c: st.Counters}
	if n.hasLast {
		r, ok, reset := computeRates(n.last, cur)
		switch {
		case reset:
			m.logEvent(at, n.addr, evInfo, "counters reset (node restarted?)")
			n.hasRates = false
		case ok:
			n.rates, n.hasRates = r, true
		}
	}
	n.last, n.hasLast = cur, true

	if n.hasLocks && n.locksPrefix == msg.prefix {
		m.spikes(n, msg)
	}
	n.status, n.hasStatus = st, true
	n.locks, n.locksPrefix, n.hasLocks = msg.locks, msg.prefix, true
}

// cannotGrant tells that the node refuses fresh acquires (status.can_grant
// false, with its reason).
func cannotGrant(st wire.StatusReply) bool { return !st.CanGrant && st.Reason != "" }

// spikes logs the keys whose queue rose by SpikeDepth or more and at least
// doubled since the node's previous answer (same prefix). A key missing
// from a truncated previous answer has no known depth and is skipped.
func (m *Model) spikes(n *node, msg pollMsg) {
	prev := make(map[string]int, len(n.locks.Locks))
	for _, e := range n.locks.Locks {
		prev[e.Key] = e.QueueDepth
	}
	var count int
	for _, e := range msg.locks.Locks {
		p, known := prev[e.Key]
		if !known && n.locks.Truncated {
			continue
		}
		if e.QueueDepth-p < m.cfg.SpikeDepth || e.QueueDepth < 2*p {
			continue
		}
		count++
		if count <= maxSpikeEvents {
			m.logEvent(msg.at, n.addr, evSpike, "queue spike: %s depth %d → %d", escape(e.Key), p, e.QueueDepth)
		}
	}
	if count > maxSpikeEvents {
		m.logEvent(msg.at, n.addr, evSpike, "queue spikes on %d more keys", count-maxSpikeEvents)
	}
}

// onKey handles a key press.
func (m *Model) onKey(k tea.KeyPressMsg) tea.Cmd {
	if m.editing {
		return m.onPromptKey(k)
	}
	page := max(m.layout().keyRows, 1)
	switch {
	case key.Matches(k, m.keys.Quit):
		return tea.Quit
	case key.Matches(k, m.keys.Help):
		m.showHelp = !m.showHelp
	case k.String() == keyEsc:
		m.showHelp = false
	case key.Matches(k, m.keys.Filter):
		m.editing, m.showHelp = true, false
		m.input = []rune(m.filter)
	case key.Matches(k, m.keys.Sort):
		m.sortBy = (m.sortBy + 1) % numSorts
		m.offset = 0
	case key.Matches(k, m.keys.Pause):
		m.paused = !m.paused
		if !m.paused {
			return tea.Batch(m.pollAll()...)
		}
	case key.Matches(k, m.keys.Up):
		m.offset--
	case key.Matches(k, m.keys.Down):
		m.offset++
	case key.Matches(k, m.keys.PageUp):
		m.offset -= page
	case key.Matches(k, m.keys.PageDown):
		m.offset += page
	case key.Matches(k, m.keys.Top):
		m.offset = 0
	case key.Matches(k, m.keys.Bottom):
		m.offset = math.MaxInt32
	}
	return nil
}

// onPromptKey edits the filter prompt: text, backspace, ctrl+u (clear),
// enter (apply and poll at once), esc (cancel).
func (m *Model) onPromptKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case keyCtrlC:
		return tea.Quit
	case keyEsc:
		m.editing = false
	case keyEnter:
		m.editing = false
		f := string(m.input)
		if f == m.filter {
			return nil
		}
		m.filter, m.offset = f, 0
		if !m.paused {
			return tea.Batch(m.pollAll()...)
		}
	case keyBackspace:
		if len(m.input) > 0 {
			m.input = m.input[:len(m.input)-1]
		}
	case keyCtrlU:
		m.input = m.input[:0]
	default:
		m.typeText(k.Text) // empty for keys that type nothing
	}
	return nil
}

// typeText appends typed or pasted text to the filter prompt, without its
// control characters, up to maxFilterLen runes.
func (m *Model) typeText(s string) {
	for _, r := range s {
		if unicode.IsControl(r) || len(m.input) >= maxFilterLen {
			continue
		}
		m.input = append(m.input, r)
	}
}

// clampOffset keeps the scroll position inside the keys table.
func (m *Model) clampOffset() {
	rs, _, _ := m.rows()
	m.offset = min(m.offset, max(len(rs)-m.layout().keyRows, 0))
	m.offset = max(m.offset, 0)
}

// downReason is an error without the wrappers that say only "could not
// connect" (the row names the address): "dial: cannot connect: no
// connection to any server: dial tcp 10.0.0.5:7470: connect: connection
// refused" is "connect: connection refused", so that the reason, not
// "dial…", fits an 80-column STATE cell.
func downReason(s string) string {
	for {
		t := s
		for _, p := range []string{"ticketing: ", "dial: ", "cannot connect: ", "no connection to any server: ", "admin: ", "connect: "} {
			t = strings.TrimPrefix(t, p)
		}
		if strings.HasPrefix(t, "dial tcp ") || strings.HasPrefix(t, "dial udp ") {
			if _, rest, ok := strings.Cut(t, ": "); ok {
				t = rest
			}
		}
		if t == s {
			return s
		}
		s = t
	}
}

// followMembers applies the leader's membership (issue #28 item 10): a
// member not watched yet is added (and polled from the next tick on); a
// watched address that no member has is dropped when it does not answer
// (a replaced node), or shown as "not a member" when it does.
func (m *Model) followMembers(at time.Time, members []wire.Member) {
	in := map[string]bool{}
	for _, mb := range members {
		if mb.ClientAddr == "" {
			continue
		}
		in[mb.ClientAddr] = true
		if m.node(mb.ClientAddr) == nil {
			m.nodes = append(m.nodes, &node{addr: mb.ClientAddr})
			m.logEvent(at, mb.ClientAddr, evInfo, "member %s joined the view (%s, voter %v)", escape(mb.ID), escape(mb.Role), mb.Voter)
		}
	}
	kept := m.nodes[:0]
	for _, n := range m.nodes {
		switch {
		case in[n.addr]:
			n.notMember = false
		case n.polled && !n.reachable:
			m.logEvent(at, n.addr, evInfo, "no longer a member of the cluster: dropped from the view")
			continue
		case n.reachable && !n.notMember:
			n.notMember = true
			m.logEvent(at, n.addr, evSpike, "not a member of the cluster (the leader's membership does not have it)")
		}
		kept = append(kept, n)
	}
	for i := len(kept); i < len(m.nodes); i++ {
		m.nodes[i] = nil
	}
	m.nodes = kept
}

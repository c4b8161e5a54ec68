package tui

import (
	"math"
	"time"
	"unicode"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

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
		if !n.polled || n.reachable {
			m.logEvent(at, n.addr, evDown, "unreachable: %s", escapeText(msg.err.Error()))
			n.since = at
		}
		n.polled, n.reachable, n.err = true, false, msg.err.Error()
		return
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

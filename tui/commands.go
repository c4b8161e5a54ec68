package tui

import (
	"context"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/ticketing/ticketing/client/wire"
)

// Every piece of I/O of the dashboard is one of these commands; Update and
// View never block, never read a clock and never touch the network.

// nowCmd delivers the current time at once (the first tick).
func nowCmd(now func() time.Time) tea.Cmd {
	return func() tea.Msg { return tickMsg(now()) }
}

// tickCmd schedules the next tick after the interval.
func (m *Model) tickCmd() tea.Cmd {
	return m.cfg.Tick(m.cfg.Interval, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// pollCmd asks one node for its status, then (when that worked) its locks
// under prefix, within timeout. at is the tick that started the poll.
func pollCmd(ctx context.Context, src Source, addr string, at time.Time, prefix string, limit int, timeout time.Duration) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		msg := pollMsg{addr: addr, at: at, prefix: prefix}
		msg.status, msg.err = src.Status(ctx, addr)
		if msg.err == nil {
			msg.locks, msg.err = src.Locks(ctx, addr, prefix, limit)
		}
		if ms, ok := src.(MemberSource); ok && msg.err == nil && msg.status.Role == wire.NodeLeader {
			if members, err := ms.Members(ctx, addr); err == nil {
				msg.members, msg.hasMembers = members, true
			}
		}
		return msg
	}
}

// pollAll starts a poll of every node that has none running.
func (m *Model) pollAll() []tea.Cmd {
	var cmds []tea.Cmd
	for _, n := range m.nodes {
		if n.inflight {
			continue
		}
		n.inflight = true
		cmds = append(cmds, pollCmd(m.cfg.Context, m.cfg.Source, n.addr, m.now, m.filter, m.cfg.Limit, m.cfg.Timeout))
	}
	return cmds
}

// Package tui is `ticketing top`: a live terminal dashboard of one or more
// Ticketing nodes, built on bubbletea (the Elm architecture).
//
// It polls each node's admin `status` and `locks` queries (protocol.md §8)
// every interval and shows, per node, its role, uptime, connections, keys,
// holders and waiters; the throughput (grants, handoffs, releases, timeouts
// and expiries per second, from counter deltas) with a sparkline of the last
// minute; the hottest keys (holder token, lease remaining, queue depth,
// oldest waiter age); and an event log (node unreachable/reachable, queue
// depth spikes, role and leader changes, counter resets).
//
// Layout of the package, after bubbletea's examples and soft-serve:
//
//	model.go     Model, Config and the per-node state
//	update.go    Update: messages and keys change the model
//	view.go      View: a pure function of the model
//	keys.go      key bindings (bubbles/key, bubbles/help)
//	styles.go    lipgloss styles (light or dark background)
//	commands.go  tea.Cmds: every piece of I/O (polls, the clock)
//	messages.go  the messages those commands deliver
//	source.go    Source, the admin queries the model needs
//	source_admin.go  AdminSource: Source over admin/ (one connection a node)
//	escape.go    how server strings are made safe to show
//	run.go       Run: the tea.Program in the alternate screen
//
// Time enters only through messages (tickMsg, and the time stamped on each
// poll result), so tests drive the model with a fake clock and a fake
// Source and never sleep. Every string that comes from a server (keys above
// all) passes through admin.EscapeKey before it reaches the screen: a lock
// key must never be able to drive the operator's terminal.
package tui

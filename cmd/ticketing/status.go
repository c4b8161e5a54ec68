package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/client/wire"
)

// StatusOptions is `ticketing status` after flags and environment are merged.
type StatusOptions struct {
	Conn   ConnOptions
	Output string
	Local  bool // the first node that answers, not the cluster's leader

	Connect func(ctx context.Context, addrs []string) (adminClient, error)
}

func newCmdStatus(fac *Factory, runF func(context.Context, *IO, *StatusOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runStatus
	}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a server's status and counters",
		Long: `Show a server's status: its role, uptime, keys, holders, waiters,
connections, whether it can grant now, and its cumulative counters. In a
cluster, the leader's (found through the first node in --addr that
answers); with --local, that first node's own. The node, address and role
rows say which node answered; when no leader could be reached, the node
asked answers and a note on stderr says its view may lag. Needs the admin
token (default: the client token). --output json prints the server's status
reply (protocol.md §8) with "answered_by": {"id", "addr", "role"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := statusOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	cmd.Flags().Bool("local", false, "in a cluster: the first node in --addr that answers, not the leader")
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func statusOptions(fac *Factory, cmd *cobra.Command) (*StatusOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	st := newSettings(cmd, v)
	opts := &StatusOptions{Local: st.bool("local")}
	if st.err != nil {
		return nil, st.err
	}
	if opts.Output, err = getOutput(cmd, v); err != nil {
		return nil, err
	}
	if opts.Conn, err = fac.Conn(cmd, v); err != nil {
		return nil, err
	}
	opts.Connect = fac.AdminClient(opts.Conn)
	return opts, nil
}

func runStatus(ctx context.Context, ios *IO, opts *StatusOptions) error {
	ctx, cancel := withTimeout(ctx, 2*opts.Conn.Timeout)
	defer cancel()
	r, err := readLeader(ctx, opts.Conn.Addrs, opts.Local, opts.Connect)
	if err != nil {
		return err
	}
	defer r.ac.Close()
	if r.stale != "" {
		fmt.Fprintln(ios.ErrOut, "note: "+r.stale)
	}
	if opts.Output == "json" {
		return writeJSON(ios, statusJSON{StatusReply: r.st, AnsweredBy: r.by})
	}
	rows := statusRows(&r.st)
	rows = append(rows[:1:1], append([][]string{{"address", orDash(r.by.Addr)}}, rows[1:]...)...)
	return renderTable(ios.Out, nil, rows)
}

// statusJSON is status's --output json: the server's reply (protocol.md
// §8) and which node gave it.
type statusJSON struct {
	wire.StatusReply
	AnsweredBy answeredBy `json:"answered_by"`
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// statusRows is the text form of a status reply: one field per row.
func statusRows(st *wire.StatusReply) [][]string {
	withMax := func(n, max int64) string {
		if max > 0 {
			return fmt.Sprintf("%d (max %d)", n, max)
		}
		return strconv.FormatInt(n, 10)
	}
	grant := "yes"
	if !st.CanGrant || st.Draining {
		grant = "NO"
		if st.Reason != "" {
			grant += ": " + st.Reason
		} else if st.Draining {
			grant += ": draining"
		}
	}
	c := st.Counters
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return [][]string{
		{"node", orDash(st.NodeID)},
		{"role", orDash(st.Role)},
		{"leader", orDash(st.Leader)},
		{"version", orDash(st.Version)},
		{"uptime", fmtMS(st.UptimeMS)},
		{"can grant", grant},
		{"keys", withMax(st.Keys, st.MaxKeys)},
		{"holders", strconv.FormatInt(st.Holders, 10)},
		{"waiters", withMax(st.Waiters, st.MaxWaiters)},
		{"connections", withMax(st.Connections, st.MaxConnections)},
		{"grants", u(c.Grants)},
		{"handoffs", u(c.Handoffs)},
		{"releases", u(c.Releases)},
		{"timeouts", u(c.Timeouts)},
		{"cancels", u(c.Cancels)},
		{"expiries", u(c.Expiries)},
		{"not holder", u(c.NotHolder)},
		{"busy", u(c.Busy)},
		{"errors", u(c.Errors)},
	}
}

// fmtMS renders milliseconds for humans: 850ms, 29.5s, 1h2m3s.
func fmtMS(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

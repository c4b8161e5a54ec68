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
		Long: `Show the status of the first server in --addr that answers: its role, uptime,
keys, holders, waiters, connections, whether it can grant now, and its
cumulative counters. Needs the admin token (default: the client token).
--output json prints the server's status reply (protocol.md §8).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := statusOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func statusOptions(fac *Factory, cmd *cobra.Command) (*StatusOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	opts := &StatusOptions{}
	if opts.Output, err = getOutput(v); err != nil {
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
	ac, err := opts.Connect(ctx, opts.Conn.Addrs)
	if err != nil {
		return err
	}
	defer ac.Close()
	st, err := ac.Status(ctx)
	if err != nil {
		return err
	}
	if opts.Output == "json" {
		return writeJSON(ios, st)
	}
	return renderTable(ios.Out, nil, statusRows(&st))
}

// statusRows is the text form of a status reply: one field per row.
func statusRows(st *wire.StatusReply) [][]string {
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
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

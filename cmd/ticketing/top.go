package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/tui"
)

// TopOptions is `ticketing top` after flags and environment are merged.
type TopOptions struct {
	Conn     ConnOptions
	Interval time.Duration
	Prefix   string
	Limit    int
	Timeout  time.Duration // one poll of one node; 0: the dashboard's default

	// Source answers the admin queries; nil: admin connections made from Conn.
	Source tui.Source
	// IsTerminal tells whether out is a terminal (tests fake it).
	IsTerminal func(any) bool
}

func newCmdTop(fac *Factory, runF func(context.Context, *IO, *TopOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runTop
	}
	cmd := &cobra.Command{
		Use:   "top [--addr a,b,c] [--interval 1s] [--prefix P]",
		Short: "Live dashboard: nodes, throughput, hottest keys, events",
		Long: `Watch one or more nodes live in the terminal.

Polls each --addr's admin status and locks every --interval and shows a line
per node (role, uptime, connections, keys, holders, waiters, reachable or
not), the throughput (grants, handoffs, releases, timeouts and expiries per
second, with a sparkline of grants over the last minute), the keys with the
deepest queues (holder token, lease remaining, queue depth, oldest waiter
age) and a log of events (node unreachable/reachable, queue depth spikes,
role and leader changes, counter resets).

Keys: q quit · / filter by key prefix · s cycle the sort · p pause ·
arrows, PgUp, PgDn scroll · ? help. Keys with control or invisible
characters are shown quoted and escaped.

Needs a terminal; for scripts use ` + "`ticketing status`" + ` and ` + "`ticketing locks`" + `.
--timeout bounds each poll of a node (default: twice the interval, at
least 1s); a node that does not answer within it is shown unreachable.`,
		Example: `  ticketing top
  ticketing top --addr 10.0.0.1:7470,10.0.0.2:7470,10.0.0.3:7470 --interval 2s
  ticketing top --prefix jobs/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := topOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	addConnFlags(cmd)
	f := cmd.Flags()
	durationFlag(cmd, "interval", "", tui.DefaultInterval.String(), "time between polls")
	f.String("prefix", "", "show only keys starting with this prefix (/ changes it)")
	f.Int("limit", tui.DefaultLimit, "keys asked of each node (the deepest queues), 1..10000")
	return cmd
}

func topOptions(fac *Factory, cmd *cobra.Command) (*TopOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	opts := &TopOptions{IsTerminal: isTerminal}
	if opts.Conn, err = fac.Conn(cmd, v); err != nil {
		return nil, err
	}
	if opts.Interval, err = getDuration(cmd, v, "interval"); err != nil {
		return nil, err
	}
	if opts.Interval < 100*time.Millisecond {
		return nil, usageError("--interval %v: want at least 100ms", opts.Interval)
	}
	st := newSettings(cmd, v)
	opts.Prefix = st.str("prefix")
	opts.Limit = st.int("limit")
	if st.err != nil {
		return nil, st.err
	}
	if opts.Limit < 1 || opts.Limit > 10000 {
		return nil, usageError("--limit %d: want 1..10000", opts.Limit)
	}
	// --timeout is the connect budget of the other commands (5s); here it
	// bounds each poll, and only when given.
	if _, env := lookupEnv("TICKETING_TIMEOUT"); cmd.Flags().Changed("timeout") || env {
		opts.Timeout = opts.Conn.Timeout
	}
	return opts, nil
}

func runTop(ctx context.Context, ios *IO, opts *TopOptions) error {
	if opts.IsTerminal != nil && !opts.IsTerminal(ios.Out) {
		return usageError("top needs a terminal; for scripts use `ticketing status` or `ticketing locks`")
	}
	src := opts.Source
	if src == nil {
		as := tui.NewAdminSource(opts.Conn.clientOptions(true)...)
		defer as.Close()
		src = as
	}
	cfg := tui.Config{
		Addrs:    opts.Conn.Addrs,
		Source:   src,
		Interval: opts.Interval,
		Timeout:  opts.Timeout,
		Prefix:   opts.Prefix,
		Limit:    opts.Limit,
	}
	var in io.Reader = ios.In
	if in == os.Stdin {
		in = nil // stdin, or the controlling terminal when stdin is not one
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return tui.Run(ctx, cfg, in, ios.Out)
}

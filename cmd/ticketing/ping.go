package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/admin"
)

// PingOptions is `ticketing ping` after flags and environment are merged.
type PingOptions struct {
	Conn     ConnOptions
	Output   string
	Count    int
	Interval time.Duration

	Connect func(ctx context.Context, addrs []string) (adminClient, error)
	Sleep   func(ctx context.Context, d time.Duration) error // between pings; tests skip it
}

// pingJSON is one address of ping's --output json. Durations in µs.
type pingJSON struct {
	Addr     string          `json:"addr"`
	Sent     int             `json:"sent"`
	Received int             `json:"received"`
	Pings    []pingProbeJSON `json:"pings"`
	// Over the answered pings: round-trip min/avg/max, and the offset
	// measured by the fastest one (the tightest bound).
	RTTMinUS      int64  `json:"rtt_min_us"`
	RTTAvgUS      int64  `json:"rtt_avg_us"`
	RTTMaxUS      int64  `json:"rtt_max_us"`
	OffsetUS      int64  `json:"offset_us"`
	OffsetErrorUS int64  `json:"offset_error_us"`
	Error         string `json:"error,omitempty"`

	err                    error // the failure, for the exit code
	rttMin, rttMax, rttSum time.Duration
	bestOffset, bestBound  time.Duration // from the fastest round trip
}

// add records an answered ping.
func (r *pingJSON) add(seq int, p admin.PingResult) {
	r.Received++
	r.Pings = append(r.Pings, pingProbeJSON{
		Seq: seq, RTTUS: p.RTT.Microseconds(), OffsetUS: p.Offset.Microseconds(),
		ErrorBoundUS: p.ErrorBound.Microseconds(), ServerTime: p.ServerTime.UTC().Format(time.RFC3339Nano),
	})
	r.rttSum += p.RTT
	if r.Received == 1 || p.RTT < r.rttMin {
		r.rttMin = p.RTT
		r.bestOffset, r.bestBound = p.Offset, p.ErrorBound
	}
	r.rttMax = max(r.rttMax, p.RTT)
	r.RTTMinUS, r.RTTMaxUS = r.rttMin.Microseconds(), r.rttMax.Microseconds()
	r.RTTAvgUS = (r.rttSum / time.Duration(r.Received)).Microseconds()
	r.OffsetUS, r.OffsetErrorUS = r.bestOffset.Microseconds(), r.bestBound.Microseconds()
}

type pingProbeJSON struct {
	Seq          int    `json:"seq"`
	RTTUS        int64  `json:"rtt_us"`
	OffsetUS     int64  `json:"offset_us"`
	ErrorBoundUS int64  `json:"error_bound_us"`
	ServerTime   string `json:"server_time"`
}

func newCmdPing(fac *Factory, runF func(context.Context, *IO, *PingOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runPing
	}
	cmd := &cobra.Command{
		Use:   "ping [--count N]",
		Short: "Measure round-trip times and server clock offsets",
		Long: `Ping every address in --addr --count times and print each round trip and
the server clock's offset from the local clock (server time minus the
midpoint of the round trip, accurate to ± half the round trip).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := pingOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	cmd.Flags().IntP("count", "c", 3, "pings per address")
	durationFlag(cmd, "interval", "i", "200ms", "pause between pings")
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func pingOptions(fac *Factory, cmd *cobra.Command) (*PingOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	st := newSettings(cmd, v)
	opts := &PingOptions{Count: st.int("count")}
	if st.err != nil {
		return nil, st.err
	}
	if opts.Count < 1 {
		return nil, usageError("--count %d: want at least 1", opts.Count)
	}
	if opts.Interval, err = getDuration(cmd, v, "interval"); err != nil {
		return nil, err
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func runPing(ctx context.Context, ios *IO, opts *PingOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	sleep := opts.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	results := make([]*pingJSON, 0, len(opts.Conn.Addrs))
	var rows [][]string
	for _, addr := range opts.Conn.Addrs {
		r := pingAddr(ctx, opts, addr, sleep)
		results = append(results, r)
		for _, p := range r.Pings {
			rows = append(rows, []string{addr, fmt.Sprint(p.Seq), fmtRTT(time.Duration(p.RTTUS) * time.Microsecond),
				fmtOffset(time.Duration(p.OffsetUS)*time.Microsecond, time.Duration(p.ErrorBoundUS)*time.Microsecond)})
		}
		if r.Error != "" {
			fmt.Fprintf(ios.ErrOut, "ticketing: ping %s: %s\n", addr, r.Error)
		}
	}
	if opts.Output == "json" {
		if err := writeJSON(ios, results); err != nil {
			return err
		}
	} else {
		if len(rows) > 0 { // no header over nothing: only the errors
			if err := renderTable(ios.Out, []string{"ADDR", "SEQ", "RTT", "OFFSET"}, rows); err != nil {
				return err
			}
		}
		for _, r := range results {
			if r.Received == 0 {
				continue
			}
			fmt.Fprintf(ios.Out, "%s: %d/%d answered, rtt min/avg/max %s/%s/%s, clock offset %s\n",
				r.Addr, r.Received, r.Sent, fmtRTT(r.rttMin), fmtRTT(r.rttSum/time.Duration(r.Received)), fmtRTT(r.rttMax),
				fmtOffset(r.bestOffset, r.bestBound))
		}
	}
	for _, r := range results {
		if r.err != nil {
			return withExit(exitCodeOf(r.err), nil)
		}
	}
	return nil
}

// exitCodeOf is clientExitCode with the fallback of 1.
func exitCodeOf(err error) int {
	if c, ok := clientExitCode(err); ok {
		return c
	}
	return ExitError
}

// pingAddr pings one address opts.Count times; the first failure stops it.
func pingAddr(ctx context.Context, opts *PingOptions, addr string, sleep func(context.Context, time.Duration) error) *pingJSON {
	r := &pingJSON{Addr: addr, Pings: []pingProbeJSON{}}
	fail := func(err error) *pingJSON {
		r.Error = oneLine(err)
		r.err = err
		return r
	}
	dctx, cancel := withTimeout(ctx, 2*opts.Conn.Timeout)
	ac, err := opts.Connect(dctx, []string{addr})
	cancel()
	if err != nil {
		return fail(err)
	}
	defer ac.Close()
	for i := 1; i <= opts.Count; i++ {
		if i > 1 && opts.Interval > 0 {
			if err := sleep(ctx, opts.Interval); err != nil {
				return fail(err)
			}
		}
		r.Sent++
		pctx, cancel := withTimeout(ctx, opts.Conn.Timeout)
		p, err := ac.Ping(pctx)
		cancel()
		if err != nil {
			return fail(err)
		}
		r.add(i, p)
	}
	return r
}

// fmtOffset renders a clock offset with its bound: +0.120ms ±0.050ms.
func fmtOffset(off, bound time.Duration) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("%+.3fms ±%s", float64(off)/float64(time.Millisecond), ms(bound))
}

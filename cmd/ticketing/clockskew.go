package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
)

const (
	defaultMaxSkew      = 500 * time.Millisecond
	defaultSkewSamples  = 5
	skewSampleInterval  = 20 * time.Millisecond // between one node's pings
	clockSkewHostLabel  = "this host"
	clockSampleStaleFor = admin.ClockSampleStale
)

// ClockSkewOptions is `ticketing clock-skew` after flags and environment are merged.
type ClockSkewOptions struct {
	Conn    ConnOptions
	Output  string
	MaxSkew time.Duration
	Samples int

	Discover func(ctx context.Context, addrs []string) (*admin.ClusterView, error)
	// Probe pings addr Samples times and returns the fastest sample and
	// how many pings were answered.
	Probe func(ctx context.Context, addr string) (admin.PingResult, int, error)
}

// skewRow is one measured pair: From's view of To's clock. Offset is To's
// clock minus From's, known to ± Error; Worst = |Offset| + Error is what
// the bound is checked against.
type skewRow struct {
	From     string `json:"from"` // "this host" or the leader's id
	To       string `json:"node"`
	Addr     string `json:"addr,omitempty"`
	OffsetUS int64  `json:"offset_us"`
	ErrorUS  int64  `json:"error_us"`
	WorstUS  int64  `json:"worst_us"`
	RTTUS    int64  `json:"rtt_us"`
	Samples  int    `json:"samples,omitempty"` // host rows: pings answered
	AgeMS    int64  `json:"age_ms"`            // node rows: age of the leader's sample
	OK       bool   `json:"ok"`
	Problem  string `json:"problem,omitempty"`

	measured bool  // offset known
	skew     bool  // a skew problem (exit 4) rather than unreachable (exit 7)
	err      error // the probe's error
}

// clockSkewJSON is clock-skew's --output json.
type clockSkewJSON struct {
	MaxSkewMS int64     `json:"max_skew_ms"`
	OK        bool      `json:"ok"`
	Leader    string    `json:"leader"`
	Host      []skewRow `json:"host"`  // this host against each node
	Nodes     []skewRow `json:"nodes"` // each node against the leader (its samples)
	Problems  []string  `json:"problems"`
}

func newCmdClockSkew(fac *Factory, runF func(context.Context, *IO, *ClockSkewOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runClockSkew
	}
	cmd := &cobra.Command{
		Use:   "clock-skew [--max-skew 500ms]",
		Short: "Measure clock offsets: this host against each node, and node against node",
		Long: `Measure wall-clock offsets and their error bounds.

This host against each node: --samples pings to each member's client address
(offset = server time − the midpoint of the round trip, known to ± half the
round trip); the sample with the smallest round trip counts.

Node against node: the leader's own samples of every other node (it pings
them over the peer port about once a second; offset = node − leader), read
from its status.

A pair fails when |offset| + error exceeds --max-skew, and a node fails when
the leader has no fresh sample of it (older than 3 s, or none). Exit 0 when
everything is within the bound; 4 when something is above it or unverified
(or the cluster has no leader); 7 when a node cannot be reached from here (8
credentials refused). The leader enforces its own bound
(serve --max-clock-skew): above it, new acquires fail closed.`,
		Example: `  ticketing clock-skew --addr n1:7470
  ticketing clock-skew --max-skew 100ms -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := clockSkewOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	durationFlag(cmd, "max-skew", "", defaultMaxSkew.String(), "largest tolerated |offset| + error")
	cmd.Flags().Int("samples", defaultSkewSamples, "pings per node from this host (the fastest counts)")
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func clockSkewOptions(fac *Factory, cmd *cobra.Command) (*ClockSkewOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	opts := &ClockSkewOptions{Samples: v.GetInt("samples")}
	if opts.Samples < 1 || opts.Samples > 1000 {
		return nil, usageError("--samples %d: want 1..1000", opts.Samples)
	}
	if opts.MaxSkew, err = getDuration(v, "max-skew"); err != nil {
		return nil, err
	}
	if opts.MaxSkew <= 0 {
		return nil, usageError("--max-skew must be positive")
	}
	if opts.Output, err = getOutput(v); err != nil {
		return nil, err
	}
	if opts.Conn, err = fac.Conn(cmd, v); err != nil {
		return nil, err
	}
	opts.Discover = discoverer(opts.Conn)
	copts := opts.Conn.clientOptions(true)
	samples, timeout := opts.Samples, opts.Conn.Timeout
	opts.Probe = func(ctx context.Context, addr string) (admin.PingResult, int, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*timeout)
		defer cancel()
		c, err := admin.Dial(ctx, addr, copts...)
		if err != nil {
			return admin.PingResult{}, 0, err
		}
		defer c.Close()
		return admin.BestPing(ctx, c, samples, skewSampleInterval)
	}
	return opts, nil
}

func runClockSkew(ctx context.Context, ios *IO, opts *ClockSkewOptions) error {
	ctx, cancel := withTimeout(ctx, 3*opts.Conn.Timeout)
	defer cancel()
	v, err := opts.Discover(ctx, opts.Conn.Addrs)
	if err != nil {
		return err
	}
	host := hostSkew(ctx, v, opts)
	nodes, problems := nodeSkew(v, opts.MaxSkew)
	out := clockSkewJSON{MaxSkewMS: opts.MaxSkew.Milliseconds(), OK: len(problems) == 0, Leader: v.LeaderID, Host: host, Nodes: nodes, Problems: nonNilStrings(problems)}
	for _, r := range append(append([]skewRow{}, host...), nodes...) {
		out.OK = out.OK && r.OK
	}
	if opts.Output == "json" {
		err = writeJSON(ios, out)
	} else {
		err = renderClockSkew(ios, out, opts.MaxSkew)
	}
	if err != nil {
		return err
	}
	return clockSkewExit(out)
}

// hostSkew measures this host against every node of the view.
func hostSkew(ctx context.Context, v *admin.ClusterView, opts *ClockSkewOptions) []skewRow {
	rows := make([]skewRow, len(v.Nodes))
	var wg sync.WaitGroup
	for i, n := range v.Nodes {
		rows[i] = skewRow{From: clockSkewHostLabel, To: cellOrDash(n.ID), Addr: n.ClientAddr}
		if n.ClientAddr == "" {
			rows[i].Problem = "no client address known"
			rows[i].err = errors.New(rows[i].Problem)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &rows[i]
			p, got, err := opts.Probe(ctx, n.ClientAddr)
			if err != nil {
				r.err = err
				r.Problem = "unreachable: " + oneLine(err)
				return
			}
			r.Samples, r.measured = got, true
			r.OffsetUS, r.ErrorUS, r.RTTUS = p.Offset.Microseconds(), p.ErrorBound.Microseconds(), p.RTT.Microseconds()
			r.WorstUS = skewAbs(r.OffsetUS) + r.ErrorUS
			judgeSkew(r, opts.MaxSkew)
		}()
	}
	wg.Wait()
	return rows
}

// nodeSkew lists the leader's samples of the other nodes, and what is
// missing from them (cluster-wide problems: no leader, no samples).
func nodeSkew(v *admin.ClusterView, maxSkew time.Duration) ([]skewRow, []string) {
	rows := []skewRow{}
	if v.Single {
		return rows, nil
	}
	l := v.Leader()
	if l == nil {
		return rows, []string{"no leader: node-against-node offsets are unknown"}
	}
	clk := l.Status.Clock
	if clk == nil {
		return rows, []string{"the leader " + v.LeaderID + " reports no clock samples"}
	}
	seen := map[string]bool{}
	for _, c := range clk.Nodes {
		seen[c.ID] = true
		r := skewRow{From: v.LeaderID, To: c.ID, OffsetUS: c.OffsetUS, ErrorUS: c.RTTUS / 2, WorstUS: c.BoundUS, RTTUS: c.RTTUS, AgeMS: c.AgeMS}
		if n := v.Node(c.ID); n != nil {
			r.Addr = n.ClientAddr
		}
		age := time.Duration(c.AgeMS) * time.Millisecond
		switch {
		case c.Err != "" && (c.RTTUS == 0 || age >= clockSampleStaleFor):
			r.Problem, r.skew = "the leader cannot sample it: "+c.Err, true
		case age >= clockSampleStaleFor:
			r.measured = true
			r.Problem, r.skew = fmt.Sprintf("the leader's sample is %v old", age.Round(100*time.Millisecond)), true
		default:
			r.measured = true
			judgeSkew(&r, maxSkew)
		}
		rows = append(rows, r)
	}
	for _, n := range v.Nodes {
		if n.Member && n.ID != v.LeaderID && n.ID != "" && !seen[n.ID] {
			rows = append(rows, skewRow{From: v.LeaderID, To: n.ID, Addr: n.ClientAddr, Problem: "not sampled by the leader yet", skew: true})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].To < rows[j].To })
	return rows, nil
}

// judgeSkew sets OK, or the problem of a measured row above the bound.
func judgeSkew(r *skewRow, maxSkew time.Duration) {
	if r.WorstUS > maxSkew.Microseconds() {
		r.Problem = fmt.Sprintf("|offset| + error = %s, above the %v bound", fmtSkewUS(r.WorstUS), maxSkew)
		r.skew = true
		return
	}
	r.OK = true
}

func skewAbs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func fmtSkewUS(us int64) string { return strconv.FormatFloat(float64(us)/1000, 'f', 3, 64) + "ms" }

// clockSkewRows is clock-skew's table.
func clockSkewRows(out clockSkewJSON) (header []string, rows [][]string) {
	header = []string{"FROM", "TO", "ADDR", "OFFSET", "RTT", "AGE", "STATUS"}
	for _, r := range append(append([]skewRow{}, out.Host...), out.Nodes...) {
		offset, rtt, age := "-", "-", "-"
		if r.measured {
			offset = fmtOffset(time.Duration(r.OffsetUS)*time.Microsecond, time.Duration(r.ErrorUS)*time.Microsecond)
			rtt = fmtRTT(time.Duration(r.RTTUS) * time.Microsecond)
			if r.From != clockSkewHostLabel {
				age = fmtMS(r.AgeMS)
			}
		}
		status := "ok"
		if !r.OK {
			status = "FAIL"
		}
		rows = append(rows, []string{r.From, r.To, cellOrDash(r.Addr), offset, rtt, age, status})
	}
	return header, rows
}

func renderClockSkew(ios *IO, out clockSkewJSON, maxSkew time.Duration) error {
	header, rows := clockSkewRows(out)
	if err := renderTable(ios.Out, header, rows); err != nil {
		return err
	}
	for _, r := range append(append([]skewRow{}, out.Host...), out.Nodes...) {
		if r.Problem != "" {
			fmt.Fprintf(ios.Out, "FAIL %s → %s: %s\n", r.From, r.To, r.Problem)
		}
	}
	for _, p := range out.Problems {
		fmt.Fprintf(ios.Out, "FAIL cluster: %s\n", p)
	}
	worst, pair := int64(-1), ""
	for _, r := range append(append([]skewRow{}, out.Host...), out.Nodes...) {
		if r.measured && r.WorstUS > worst {
			worst, pair = r.WorstUS, r.From+" → "+r.To
		}
	}
	verdict := "ok"
	if !out.OK {
		verdict = "FAIL"
	}
	line := fmt.Sprintf("clock skew %s (bound %v)", verdict, maxSkew)
	if worst >= 0 {
		line += fmt.Sprintf(": worst |offset| + error %s (%s)", fmtSkewUS(worst), pair)
	}
	_, err := fmt.Fprintln(ios.Out, line)
	return err
}

// clockSkewExit: nil when all is within the bound; 4 for skew that is
// above the bound or unverified; else 7/8 for nodes this host cannot reach.
func clockSkewExit(out clockSkewJSON) error {
	if out.OK {
		return nil
	}
	if len(out.Problems) > 0 {
		return withExit(ExitBusy, nil)
	}
	rows := append(append([]skewRow{}, out.Host...), out.Nodes...)
	for _, r := range rows {
		if r.skew {
			return withExit(ExitBusy, nil)
		}
	}
	for _, r := range rows {
		if r.err != nil && errors.Is(r.err, client.ErrAuth) {
			return withExit(ExitAuth, nil)
		}
	}
	return withExit(ExitConnect, nil)
}

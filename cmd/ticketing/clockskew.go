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

// skewKind is what is wrong with a pair, for the exit code (clockSkewExit).
type skewKind int

const (
	skewOK          skewKind = iota
	skewAbove                // measured, |offset| + error above the bound: exit 4
	skewUnverified           // no fresh sample of the leader's (stale, none, it cannot sample), no leader: exit 4
	skewUnreachable          // this host cannot reach the node: exit 7 (8: credentials)
)

// skewRow is one pair: From's view of To's clock. Offset is To's clock
// minus From's, known to ± Error; Worst = |Offset| + Error is what the
// bound is checked against. The numbers mean something only when measured.
type skewRow struct {
	From, To, Addr    string // From: "this host" or the leader's id
	OffsetUS, ErrorUS int64
	WorstUS, RTTUS    int64
	Samples           int   // host rows: pings answered
	AgeMS             int64 // node rows: age of the leader's sample
	Problem           string
	measured          bool // the numbers are known
	kind              skewKind
	err               error // why this host cannot reach the node
}

func (r *skewRow) ok() bool { return r.kind == skewOK }

// line is the row's FAIL line (without "FAIL "), "" when it is ok.
func (r *skewRow) line() string {
	if r.ok() {
		return ""
	}
	return r.From + " → " + r.To + ": " + r.Problem
}

// skewReport is what clock-skew found: the rows and the cluster-wide
// problems (no leader, no samples), which are unverified (exit 4).
type skewReport struct {
	maxSkew time.Duration
	leader  string
	host    []skewRow // this host against each node
	nodes   []skewRow // each node against the leader (its samples)
	cluster []string
}

func (rep *skewReport) rows() []skewRow {
	return append(append([]skewRow{}, rep.host...), rep.nodes...)
}

// problems are the FAIL lines (without "FAIL "): every failing pair, then
// the cluster-wide problems as "cluster: …".
func (rep *skewReport) problems() []string {
	out := []string{}
	for _, r := range rep.rows() {
		if l := r.line(); l != "" {
			out = append(out, l)
		}
	}
	for _, p := range rep.cluster {
		out = append(out, "cluster: "+p)
	}
	return out
}

// clockSkewJSON is clock-skew's --output json. Problems are the text
// output's FAIL lines (without "FAIL "); OK is true exactly when there are
// none.
type clockSkewJSON struct {
	MaxSkewMS int64          `json:"max_skew_ms"`
	OK        bool           `json:"ok"`
	Leader    string         `json:"leader"`
	Host      []skewPairJSON `json:"host"`  // this host against each node
	Nodes     []skewPairJSON `json:"nodes"` // each node against the leader (its samples)
	Problems  []string       `json:"problems"`
}

// skewPairJSON is one pair of clockSkewJSON. The numbers are absent when
// they are not known (measured false: the table's "-"); samples only on
// host rows, age_ms only on node rows.
type skewPairJSON struct {
	From     string `json:"from"` // "this host" or the leader's id
	To       string `json:"node"`
	Addr     string `json:"addr,omitempty"`
	Measured bool   `json:"measured"`
	OffsetUS *int64 `json:"offset_us,omitempty"`
	ErrorUS  *int64 `json:"error_us,omitempty"`
	WorstUS  *int64 `json:"worst_us,omitempty"`
	RTTUS    *int64 `json:"rtt_us,omitempty"`
	Samples  int    `json:"samples,omitempty"`
	AgeMS    *int64 `json:"age_ms,omitempty"`
	OK       bool   `json:"ok"`
	Problem  string `json:"problem,omitempty"`
}

func (rep *skewReport) json() clockSkewJSON {
	out := clockSkewJSON{MaxSkewMS: rep.maxSkew.Milliseconds(), Leader: rep.leader, Host: []skewPairJSON{}, Nodes: []skewPairJSON{}, Problems: rep.problems()}
	out.OK = len(out.Problems) == 0
	pair := func(r skewRow) skewPairJSON {
		j := skewPairJSON{From: r.From, To: r.To, Addr: r.Addr, Measured: r.measured, OK: r.ok(), Problem: r.Problem}
		if r.measured {
			j.OffsetUS, j.ErrorUS, j.WorstUS, j.RTTUS = &r.OffsetUS, &r.ErrorUS, &r.WorstUS, &r.RTTUS
			if r.From == clockSkewHostLabel {
				j.Samples = r.Samples
			} else {
				j.AgeMS = &r.AgeMS
			}
		}
		return j
	}
	for _, r := range rep.host {
		out.Host = append(out.Host, pair(r))
	}
	for _, r := range rep.nodes {
		out.Nodes = append(out.Nodes, pair(r))
	}
	return out
}

// clockSkewExitHelp is clock-skew's exit rule (clockSkewExit), in order:
// the first that applies.
const clockSkewExitHelp = `Exit codes (the first that applies):
  0  every pair is within the bound
  4  a measured |offset| + error is above the bound
  7  a node, or an --addr address, cannot be reached from this host (8: it
     refused the credentials), whatever the leader's samples say
  4  a pair is unverified: the leader has no fresh sample of a node, or the
     cluster has no leader
With -o json, "problems" lists the FAIL lines and "ok" is true exactly when
it is empty; a pair that was not measured has no offset_us, error_us,
worst_us, rtt_us, samples or age_ms ("measured": false).`

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
the leader has no fresh sample of it (older than 3 s, or none). The leader
enforces its own bound (serve --max-clock-skew): above it, new acquires fail
closed.

` + clockSkewExitHelp,
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
	st := newSettings(cmd, v)
	opts := &ClockSkewOptions{Samples: st.int("samples")}
	if st.err != nil {
		return nil, st.err
	}
	if opts.Samples < 1 || opts.Samples > 1000 {
		return nil, usageError("--samples %d: want 1..1000", opts.Samples)
	}
	if opts.MaxSkew, err = getDuration(cmd, v, "max-skew"); err != nil {
		return nil, err
	}
	if opts.MaxSkew <= 0 {
		return nil, usageError("--max-skew must be positive")
	}
	if opts.Output, err = getOutput(cmd, v); err != nil {
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
	rep := &skewReport{maxSkew: opts.MaxSkew, leader: v.LeaderID, host: hostSkew(ctx, v, opts)}
	rep.nodes, rep.cluster = nodeSkew(v, opts.MaxSkew)
	if opts.Output == "json" {
		err = writeJSON(ios, rep.json())
	} else {
		err = renderClockSkew(ios, rep)
	}
	if err != nil {
		return err
	}
	return clockSkewExit(rep)
}

// hostSkew measures this host against every node of the view. A node that
// did not answer discovery is not dialed again (it would cost the budget a
// second time): its row is unreachable with discovery's error.
func hostSkew(ctx context.Context, v *admin.ClusterView, opts *ClockSkewOptions) []skewRow {
	rows := make([]skewRow, len(v.Nodes))
	var wg sync.WaitGroup
	for i, n := range v.Nodes {
		r := &rows[i]
		*r = skewRow{From: clockSkewHostLabel, To: cellOrDash(n.ID), Addr: n.ClientAddr}
		switch {
		case n.ClientAddr == "":
			r.err = errors.New("no client address known")
			r.Problem, r.kind = r.err.Error(), skewUnreachable
			continue
		case n.Status == nil:
			r.err = n.Err
			if r.err == nil {
				r.err = errors.New("no answer")
			}
			r.Problem, r.kind = "unreachable: "+oneLine(r.err), skewUnreachable
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, got, err := opts.Probe(ctx, n.ClientAddr)
			if err != nil {
				r.err = err
				r.Problem, r.kind = "unreachable: "+oneLine(err), skewUnreachable
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
		r := skewRow{From: v.LeaderID, To: c.ID}
		if n := v.Node(c.ID); n != nil {
			r.Addr = n.ClientAddr
		}
		age := time.Duration(c.AgeMS) * time.Millisecond
		if c.Err != "" && (c.RTTUS == 0 || age >= clockSampleStaleFor) {
			r.Problem, r.kind = "the leader cannot sample it: "+c.Err, skewUnverified
			rows = append(rows, r)
			continue
		}
		r.measured = true
		r.OffsetUS, r.ErrorUS, r.WorstUS, r.RTTUS, r.AgeMS = c.OffsetUS, c.RTTUS/2, c.BoundUS, c.RTTUS, c.AgeMS
		if age >= clockSampleStaleFor {
			r.Problem, r.kind = fmt.Sprintf("the leader's sample is %v old", age.Round(100*time.Millisecond)), skewUnverified
		} else {
			judgeSkew(&r, maxSkew)
		}
		rows = append(rows, r)
	}
	for _, n := range v.Nodes {
		if n.Member && n.ID != v.LeaderID && n.ID != "" && !seen[n.ID] {
			rows = append(rows, skewRow{From: v.LeaderID, To: n.ID, Addr: n.ClientAddr, Problem: "not sampled by the leader yet", kind: skewUnverified})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].To < rows[j].To })
	return rows, nil
}

// judgeSkew marks a measured row above the bound.
func judgeSkew(r *skewRow, maxSkew time.Duration) {
	if r.WorstUS > maxSkew.Microseconds() {
		r.Problem = fmt.Sprintf("|offset| + error = %s, above the %v bound", fmtSkewUS(r.WorstUS), maxSkew)
		r.kind = skewAbove
	}
}

func skewAbs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func fmtSkewUS(us int64) string { return strconv.FormatFloat(float64(us)/1000, 'f', 3, 64) + "ms" }

// clockSkewRows is clock-skew's table.
func clockSkewRows(rep *skewReport) (header []string, rows [][]string) {
	header = []string{"FROM", "TO", "ADDR", "OFFSET", "RTT", "AGE", "STATUS"}
	for _, r := range rep.rows() {
		offset, rtt, age := "-", "-", "-"
		if r.measured {
			offset = fmtOffset(time.Duration(r.OffsetUS)*time.Microsecond, time.Duration(r.ErrorUS)*time.Microsecond)
			rtt = fmtRTT(time.Duration(r.RTTUS) * time.Microsecond)
			if r.From != clockSkewHostLabel {
				age = fmtMS(r.AgeMS)
			}
		}
		status := "ok"
		if !r.ok() {
			status = "FAIL"
		}
		rows = append(rows, []string{r.From, r.To, cellOrDash(r.Addr), offset, rtt, age, status})
	}
	return header, rows
}

func renderClockSkew(ios *IO, rep *skewReport) error {
	header, rows := clockSkewRows(rep)
	if err := renderTable(ios.Out, header, rows); err != nil {
		return err
	}
	problems := rep.problems()
	for _, p := range problems {
		fmt.Fprintf(ios.Out, "FAIL %s\n", p)
	}
	worst, pair := int64(-1), ""
	for _, r := range rep.rows() {
		if r.measured && r.WorstUS > worst {
			worst, pair = r.WorstUS, r.From+" → "+r.To
		}
	}
	verdict := "ok"
	if len(problems) > 0 {
		verdict = "FAIL"
	}
	line := fmt.Sprintf("clock skew %s (bound %v)", verdict, rep.maxSkew)
	if worst >= 0 {
		line += fmt.Sprintf(": worst |offset| + error %s (%s)", fmtSkewUS(worst), pair)
	}
	_, err := fmt.Fprintln(ios.Out, line)
	return err
}

// clockSkewExit (clockSkewExitHelp): nil when every pair is within the
// bound; else 4 when a measured offset is above it; else 7 (8 when the
// credentials were refused) when this host cannot reach a node; else 4
// (unverified).
func clockSkewExit(rep *skewReport) error {
	rows := rep.rows()
	if len(rep.problems()) == 0 {
		return nil
	}
	for _, r := range rows {
		if r.kind == skewAbove {
			return withExit(ExitBusy, nil)
		}
	}
	unreachable := false
	for _, r := range rows {
		if r.kind == skewUnreachable {
			if errors.Is(r.err, client.ErrAuth) {
				return withExit(ExitAuth, nil)
			}
			unreachable = true
		}
	}
	if unreachable {
		return withExit(ExitConnect, nil)
	}
	return withExit(ExitBusy, nil)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// HealthOptions is `ticketing health` after flags and environment are merged.
type HealthOptions struct {
	Conn   ConnOptions
	Output string
	// Cluster thresholds (--max-lag, --max-contact).
	MaxLag     uint64
	MaxContact time.Duration

	Check func(ctx context.Context, addrs []string) []admin.HealthResult
	// Cluster judges the whole cluster once Check found a cluster node
	// among the addresses (their results are reused); nil: single nodes only.
	Cluster func(ctx context.Context, seeds []admin.HealthResult) (admin.ClusterHealthResult, error)
}

// healthJSON is one address of health's --output json.
type healthJSON struct {
	Addr    string            `json:"addr"`
	Healthy bool              `json:"healthy"`
	Reason  string            `json:"reason,omitempty"`
	RTTUS   int64             `json:"rtt_us"`
	Status  *wire.StatusReply `json:"status,omitempty"`
}

func newCmdHealth(fac *Factory, runF func(context.Context, *IO, *HealthOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runHealth
	}
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check that every server can grant locks (for monitoring)",
		Long: `Check every address in --addr: the handshake, a ping and a status query must
succeed and the server must report that it can grant a fresh acquire (not
draining, not at a hard limit such as max keys or max connections). Prints
one line per address; exits 0 when all are healthy, otherwise with the code
of the first failure (7 cannot connect, 8 authentication, 4 cannot grant).
Needs the admin token (default: the client token).

In a cluster (any of its nodes in --addr), health discovers the members from
the leader and checks every node: one row per node (role, term, commit and
applied index, lag behind the leader's commit index, last contact with the
leader, clock offset from the leader), then one line per failing node with
the reason. It exits 0 only when a leader serves and can grant, and every
voter is reachable, follows that leader, is at most --max-lag entries behind,
heard from the leader within --max-contact, and has a clock the leader
sampled within the cluster's skew bound. Otherwise it exits 4 (8 when a node
refused the credentials). WARN lines do not fail the check: a learner's
problems, a voter whose clock the leader has not sampled yet.`,
		Example: `  ticketing health --addr n1:7470,n2:7470,n3:7470 || alert
  ticketing health --addr n1:7470 --max-lag 5000 -o json
  # systemd: ExecStartPost=/usr/bin/ticketing health --timeout 2s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := healthOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	cmd.Flags().Uint64("max-lag", admin.DefaultMaxLag, "cluster: raft entries a voter may trail the leader's commit index")
	durationFlag(cmd, "max-contact", "", admin.DefaultMaxContact.String(), "cluster: longest a follower may go without hearing from the leader")
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func healthOptions(fac *Factory, cmd *cobra.Command) (*HealthOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	opts := &HealthOptions{}
	if opts.Output, err = getOutput(cmd, v); err != nil {
		return nil, err
	}
	if opts.Conn, err = fac.Conn(cmd, v); err != nil {
		return nil, err
	}
	st := newSettings(cmd, v)
	opts.MaxLag = st.uint64("max-lag")
	if st.err != nil {
		return nil, st.err
	}
	if opts.MaxLag == 0 {
		return nil, usageError("--max-lag must be at least 1")
	}
	if opts.MaxContact, err = getDuration(cmd, v, "max-contact"); err != nil {
		return nil, err
	}
	if opts.MaxContact <= 0 {
		return nil, usageError("--max-contact must be positive")
	}
	copts := opts.Conn.clientOptions(true)
	opts.Check = func(ctx context.Context, addrs []string) []admin.HealthResult {
		return admin.Health(ctx, addrs, copts...)
	}
	timeout := opts.Conn.Timeout
	hcfg := admin.ClusterHealthConfig{MaxLag: opts.MaxLag, MaxContact: opts.MaxContact}
	opts.Cluster = func(ctx context.Context, seeds []admin.HealthResult) (admin.ClusterHealthResult, error) {
		return admin.ClusterHealth(ctx, seeds, hcfg, 2*timeout, copts...)
	}
	return opts, nil
}

func runHealth(ctx context.Context, ios *IO, opts *HealthOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	hctx, cancel := withTimeout(ctx, 2*opts.Conn.Timeout)
	res := opts.Check(hctx, opts.Conn.Addrs)
	cancel()
	if opts.Cluster != nil && anyClusterNode(res) {
		// The cluster check has its own budget: discovery may take a second
		// and a third round (the leader, members not in --addr).
		cctx, cancel := withTimeout(ctx, 3*opts.Conn.Timeout)
		defer cancel()
		return runClusterHealth(cctx, ios, opts, res)
	}
	var err error
	if opts.Output == "json" {
		out := make([]healthJSON, len(res))
		for i, r := range res {
			out[i] = healthJSON{Addr: r.Addr, Healthy: r.Healthy, Reason: reasonLine(r), RTTUS: r.RTT.Microseconds(), Status: r.Status}
		}
		err = writeJSON(ios, out)
	} else {
		err = renderTable(ios.Out, nil, healthRows(res))
	}
	if err != nil {
		return err
	}
	return healthExit(res)
}

// anyClusterNode reports whether an address answered as a cluster member.
func anyClusterNode(res []admin.HealthResult) bool {
	for _, r := range res {
		if r.Status != nil && r.Status.Role != "" && r.Status.Role != wire.NodeSingle {
			return true
		}
	}
	return false
}

// reasonLine is r's reason on one line, without package prefixes.
func reasonLine(r admin.HealthResult) string {
	if r.Reason == "" {
		return ""
	}
	return oneLine(errors.New(r.Reason))
}

// healthRows: one line per address, "ADDR ok rtt" or "ADDR FAIL reason".
func healthRows(res []admin.HealthResult) [][]string {
	rows := make([][]string, 0, len(res))
	for _, r := range res {
		if r.Healthy {
			rows = append(rows, []string{r.Addr, "ok", "rtt " + fmtRTT(r.RTT)})
			continue
		}
		rows = append(rows, []string{r.Addr, "FAIL", reasonLine(r)})
	}
	return rows
}

// healthExit: nil when all are healthy, else the exit code of the first
// failure (its error's code, or 4 for a node that cannot grant). The lines
// printed already say why, so nothing more goes to stderr.
func healthExit(res []admin.HealthResult) error {
	for _, r := range res {
		if r.Healthy {
			continue
		}
		code := ExitBusy
		if r.Err != nil {
			code = ExitError
			if c, ok := clientExitCode(r.Err); ok {
				code = c
			}
		}
		return withExit(code, nil)
	}
	return nil
}

// fmtRTT renders a round trip with µs precision below 10 ms.
func fmtRTT(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// clusterHealthJSON is health's --output json for a cluster.
type clusterHealthJSON struct {
	Cluster       bool              `json:"cluster"` // always true: tells this shape from the single-node list
	Healthy       bool              `json:"healthy"`
	Leader        string            `json:"leader"` // leader id, "" when none
	LeaderAddr    string            `json:"leader_addr"`
	Term          uint64            `json:"term"`
	CommitIndex   uint64            `json:"commit_index"`
	Voters        int               `json:"voters"`
	VotersHealthy int               `json:"voters_healthy"`
	MaxLag        uint64            `json:"max_lag"`
	MaxContactMS  int64             `json:"max_contact_ms"`
	Problems      []string          `json:"problems"`    // cluster-wide
	NotMembers    []string          `json:"not_members"` // --addr entries no member has (each fails the check)
	Nodes         []clusterNodeJSON `json:"nodes"`
}

// clusterNodeJSON is one node of clusterHealthJSON. Unknown numbers are -1
// (lag, last contact) or absent (clock).
type clusterNodeJSON struct {
	ID            string            `json:"id"`
	Addr          string            `json:"addr"`
	PeerAddr      string            `json:"peer_addr,omitempty"`
	Member        bool              `json:"member"`
	Voter         bool              `json:"voter"`
	Role          string            `json:"role"`
	Reachable     bool              `json:"reachable"`
	Term          uint64            `json:"term"`
	CommitIndex   uint64            `json:"commit_index"`
	AppliedIndex  uint64            `json:"applied_index"`
	Lag           int64             `json:"lag"`
	LastContactMS int64             `json:"last_contact_ms"` // since the node last heard from the leader
	ClockOffsetUS *int64            `json:"clock_offset_us,omitempty"`
	ClockBoundUS  *int64            `json:"clock_bound_us,omitempty"` // |offset| + rtt/2
	Healthy       bool              `json:"healthy"`
	Problems      []string          `json:"problems"`
	Warnings      []string          `json:"warnings,omitempty"`
	Status        *wire.StatusReply `json:"status,omitempty"`
}

func runClusterHealth(ctx context.Context, ios *IO, opts *HealthOptions, seeds []admin.HealthResult) error {
	ch, err := opts.Cluster(ctx, seeds)
	if err != nil {
		return err
	}
	if opts.Output == "json" {
		err = writeJSON(ios, clusterHealthOut(ch, opts))
	} else {
		err = renderClusterHealth(ios, ch)
	}
	if err != nil {
		return err
	}
	return clusterHealthExit(ch)
}

func clusterHealthOut(ch admin.ClusterHealthResult, opts *HealthOptions) clusterHealthJSON {
	v := ch.View
	out := clusterHealthJSON{
		Cluster: true, Healthy: ch.Healthy, Leader: v.LeaderID, LeaderAddr: v.LeaderAddr, Term: v.Term,
		CommitIndex: v.CommitIndex, Voters: ch.Voters, VotersHealthy: ch.VotersOK, MaxLag: opts.MaxLag,
		MaxContactMS: opts.MaxContact.Milliseconds(), Problems: nonNilStrings(ch.Problems), NotMembers: nonNilStrings(ch.NotMembers),
		Nodes: []clusterNodeJSON{},
	}
	for _, n := range ch.Nodes {
		j := clusterNodeJSON{
			ID: n.ID, Addr: n.ClientAddr, PeerAddr: n.PeerAddr, Member: n.Member, Voter: n.Voter, Role: nodeRole(&n.NodeView),
			Reachable: n.Reachable(), Lag: n.Lag, LastContactMS: -1, Healthy: n.Healthy,
			Problems: nonNilStrings(n.Problems), Warnings: n.Warnings, Status: n.Status,
		}
		if st := n.Status; st != nil {
			j.Term, j.CommitIndex, j.AppliedIndex = st.Term, st.CommitIndex, st.AppliedIndex
			if n.ID != v.LeaderID {
				j.LastContactMS = st.LastContactMS
			}
		}
		if n.Clock != nil && n.Clock.Measured() {
			off, bound := n.Clock.OffsetUS, n.Clock.BoundUS
			j.ClockOffsetUS, j.ClockBoundUS = &off, &bound
		} else if n.ID == v.LeaderID && v.LeaderID != "" {
			var zero int64
			j.ClockOffsetUS, j.ClockBoundUS = &zero, &zero
		}
		out.Nodes = append(out.Nodes, j)
	}
	return out
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// nodeRole is the role to show: what the node says of itself when it
// answered, else its role in the configuration.
func nodeRole(n *admin.NodeView) string {
	if n.Status != nil && n.Status.Role != "" {
		return n.Status.Role
	}
	if n.Role == "" {
		return "-"
	}
	return n.Role
}

// clusterHealthRows is the table of a cluster's health.
func clusterHealthRows(ch admin.ClusterHealthResult) (header []string, rows [][]string) {
	header = []string{"NODE", "ADDR", "ROLE", "VOTER", "TERM", "COMMIT", "APPLIED", "LAG", "CONTACT", "CLOCK", "STATUS"}
	v := ch.View
	for _, n := range ch.Nodes {
		row := []string{cellOrDash(n.ID), cellOrDash(n.ClientAddr), nodeRole(&n.NodeView), voterCell(&n.NodeView), "-", "-", "-", lagCell(n.Lag), "-", "-", "ok"}
		if st := n.Status; st != nil {
			row[4] = strconv.FormatUint(st.Term, 10)
			row[5] = strconv.FormatUint(st.CommitIndex, 10)
			row[6] = strconv.FormatUint(st.AppliedIndex, 10)
			if n.ID != v.LeaderID {
				row[8] = fmtMS(st.LastContactMS)
			}
		}
		switch {
		case n.ID == v.LeaderID && v.LeaderID != "":
			row[9] = "reference"
		case n.Clock != nil && n.Clock.Measured():
			row[9] = fmtOffset(time.Duration(n.Clock.OffsetUS)*time.Microsecond, time.Duration(n.Clock.RTTUS/2)*time.Microsecond)
		}
		switch {
		case !n.Healthy:
			row[10] = "FAIL"
		case len(n.Warnings) > 0:
			row[10] = "WARN"
		}
		rows = append(rows, row)
	}
	return header, rows
}

// clusterHealthLines are the lines under the table: one per failing (or
// warned) node with its reasons, the cluster-wide problems, a summary.
func clusterHealthLines(ch admin.ClusterHealthResult) []string {
	var lines []string
	name := func(n admin.NodeHealth) string {
		if n.ID == "" {
			return n.ClientAddr
		}
		return n.ID + " (" + n.ClientAddr + ")"
	}
	for _, n := range ch.Nodes {
		if len(n.Problems) > 0 {
			lines = append(lines, "FAIL "+name(n)+": "+strings.Join(n.Problems, "; "))
		}
		if len(n.Warnings) > 0 {
			what := ""
			if n.Member && !n.Voter {
				what = " (learner)"
			}
			lines = append(lines, "WARN "+name(n)+what+": "+strings.Join(n.Warnings, "; "))
		}
	}
	for _, p := range ch.Problems {
		lines = append(lines, "FAIL cluster: "+p)
	}
	v := ch.View
	leader := "no leader"
	if v.LeaderID != "" {
		leader = fmt.Sprintf("leader %s (%s), term %d", v.LeaderID, v.LeaderAddr, v.Term)
	}
	verdict := "healthy"
	if !ch.Healthy {
		verdict = "UNHEALTHY"
	}
	line := fmt.Sprintf("cluster %s: %s, %d of %d voters healthy", verdict, leader, ch.VotersOK, ch.Voters)
	switch len(ch.NotMembers) {
	case 0:
	case 1:
		line += "; --addr names " + ch.NotMembers[0] + ", which is not a member"
	default:
		line += "; --addr names " + strings.Join(ch.NotMembers, ", ") + ", which are not members"
	}
	lines = append(lines, line)
	return lines
}

func renderClusterHealth(ios *IO, ch admin.ClusterHealthResult) error {
	header, rows := clusterHealthRows(ch)
	if err := renderTable(ios.Out, header, rows); err != nil {
		return err
	}
	for _, l := range clusterHealthLines(ch) {
		if _, err := fmt.Fprintln(ios.Out, l); err != nil {
			return err
		}
	}
	return nil
}

// clusterHealthExit: nil when healthy; 8 when a node refused the
// credentials; else 4. The lines printed already say why.
func clusterHealthExit(ch admin.ClusterHealthResult) error {
	if ch.Healthy {
		return nil
	}
	for _, n := range ch.Nodes {
		if n.Err != nil && errors.Is(n.Err, client.ErrAuth) {
			return withExit(ExitAuth, nil)
		}
	}
	return withExit(ExitBusy, nil)
}

func cellOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func voterCell(n *admin.NodeView) string {
	switch {
	case !n.Member:
		return "-"
	case n.Voter:
		return "yes"
	}
	return "no"
}

func lagCell(lag int64) string {
	if lag < 0 {
		return "-"
	}
	return strconv.FormatInt(lag, 10)
}

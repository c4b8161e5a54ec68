package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// `ticketing node …`: cluster membership (protocol.md §8 members, add-node,
// remove-node, transfer-leader). Changing commands may go to any node: a
// follower answers M and the client follows it to the leader.

const (
	// defaultChangeWait bounds add-node: the leader itself gives a learner
	// up to a minute to catch up before promoting it.
	defaultChangeWait = 90 * time.Second
	// noLeaderRetry is the pause between attempts while the cluster has no
	// leader (an election takes well under a second).
	noLeaderRetry = 250 * time.Millisecond
)

const nodeExitHelp = `Exit codes:
  0  done
  1  the leader tried and failed, or another membership change is in
     progress (one at a time: retry when it has finished)
  2  usage, or a change the leader refuses as invalid (id or address already
     in use, id used before, no such member, not a cluster)
  4  no leader within --timeout
  5  outcome unknown (connection lost after sending, or no answer within
     --wait): check ` + "`ticketing node list`" + `
  7  cannot connect
  8  authentication failed, or the token's role may not change membership
     (use the admin token)`

func newCmdNode(fac *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List and change cluster members (list, add, remove, transfer-leader)",
		Long: `Cluster membership. --addr may name any node(s) of the cluster: changes are
sent to the leader (a follower answers with the leader's address, which is
followed). Changing commands need the admin token (--admin-token,
TICKETING_ADMIN_TOKEN; default: the client token).

` + nodeExitHelp,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newCmdNodeList(fac, nil), newCmdNodeAdd(fac, nil), newCmdNodeRemove(fac, nil), newCmdNodeTransfer(fac, nil))
	return cmd
}

// memberAdmin is what the changing node commands use (a fake in tests).
type memberAdmin interface {
	AddNode(ctx context.Context, a admin.AddNodeArgs) ([]wire.Member, error)
	RemoveNode(ctx context.Context, id string) ([]wire.Member, error)
	TransferLeader(ctx context.Context, id string) (string, error)
	Close() error
}

// memberDialer returns the real connector: one admin client over the whole
// --addr list (it follows M to the leader).
func memberDialer(o ConnOptions) func(context.Context, []string) (memberAdmin, error) {
	return func(ctx context.Context, addrs []string) (memberAdmin, error) {
		c, err := client.Dial(ctx, addrs, o.clientOptions(true)...)
		if err != nil {
			return nil, err
		}
		return realMemberAdmin{c}, nil
	}
}

type realMemberAdmin struct{ c *client.Client }

func (a realMemberAdmin) AddNode(ctx context.Context, args admin.AddNodeArgs) ([]wire.Member, error) {
	return admin.AddNode(ctx, a.c, args)
}

func (a realMemberAdmin) RemoveNode(ctx context.Context, id string) ([]wire.Member, error) {
	return admin.RemoveNode(ctx, a.c, id)
}

func (a realMemberAdmin) TransferLeader(ctx context.Context, id string) (string, error) {
	return admin.TransferLeader(ctx, a.c, id)
}

func (a realMemberAdmin) Close() error { return a.c.Close() }

// discoverer returns the real cluster discovery for --addr.
func discoverer(o ConnOptions) func(context.Context, []string) (*admin.ClusterView, error) {
	copts := o.clientOptions(true)
	return func(ctx context.Context, addrs []string) (*admin.ClusterView, error) {
		return admin.Discover(ctx, addrs, 2*o.Timeout, copts...)
	}
}

// ---------------------------------------------------------------------------
// node list

// NodeListOptions is `ticketing node list` after flags and environment are merged.
type NodeListOptions struct {
	Conn   ConnOptions
	Output string

	Discover func(ctx context.Context, addrs []string) (*admin.ClusterView, error)
}

// nodeListJSON is node list's --output json. Unknown numbers are -1 (the
// table's "-" and "unreachable"): term and commit_index without a leader.
type nodeListJSON struct {
	Leader      string         `json:"leader"` // id, "" when none answered
	LeaderAddr  string         `json:"leader_addr"`
	Term        int64          `json:"term"`
	CommitIndex int64          `json:"commit_index"` // the leader's
	ConfigFrom  string         `json:"config_from"`  // whose configuration is listed
	Nodes       []nodeListNode `json:"nodes"`
}

// nodeListNode is one node of nodeListJSON. Unknown numbers are -1: the
// leader's last contact with itself, and everything a node that did not
// answer (or answered as another node) would have told.
type nodeListNode struct {
	ID            string `json:"id"`
	ClientAddr    string `json:"client_addr"`
	PeerAddr      string `json:"peer_addr"`
	Role          string `json:"role"`
	Voter         bool   `json:"voter"`
	Member        bool   `json:"member"`
	LastContactMS int64  `json:"last_contact_ms"` // the leader's last contact with it
	Reachable     bool   `json:"reachable"`
	Term          int64  `json:"term"`
	CommitIndex   int64  `json:"commit_index"`
	AppliedIndex  int64  `json:"applied_index"`
	Lag           int64  `json:"lag"` // leader's commit index − applied index
	Error         string `json:"error,omitempty"`
}

func newCmdNodeList(fac *Factory, runF func(context.Context, *IO, *NodeListOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runNodeList
	}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's members with role, contact and replication lag",
		Long: `List the members of the cluster as its leader sees them (any node in --addr
will do): id, client and peer address, role, voter, the leader's last contact
with it, its applied index and its lag behind the leader's commit index (read
from each node's status over its client address). Nodes that do not answer
are listed as unreachable (and named on stderr); the exit code is still 0.
Exit 7 when no address answers, 8 when the credentials are refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := nodeListOptions(fac, cmd)
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

func nodeListOptions(fac *Factory, cmd *cobra.Command) (*NodeListOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	opts := &NodeListOptions{}
	if opts.Output, err = getOutput(cmd, v); err != nil {
		return nil, err
	}
	if opts.Conn, err = fac.Conn(cmd, v); err != nil {
		return nil, err
	}
	opts.Discover = discoverer(opts.Conn)
	return opts, nil
}

func runNodeList(ctx context.Context, ios *IO, opts *NodeListOptions) error {
	ctx, cancel := withTimeout(ctx, 3*opts.Conn.Timeout)
	defer cancel()
	v, err := opts.Discover(ctx, opts.Conn.Addrs)
	if err != nil {
		return err
	}
	if opts.Output == "json" {
		return writeJSON(ios, nodeListOut(v))
	}
	header, rows := nodeListRows(v)
	if err := renderTable(ios.Out, header, rows); err != nil {
		return err
	}
	for _, n := range v.Nodes {
		if n.Err != nil {
			fmt.Fprintf(ios.ErrOut, "node %s (%s): %s\n", cellOrDash(n.ID), cellOrDash(n.ClientAddr), oneLine(n.Err))
		} else if !n.Member {
			fmt.Fprintf(ios.ErrOut, "node %s (%s): answers, but is not in the configuration\n", cellOrDash(n.ID), n.ClientAddr)
		}
	}
	if !v.Single && v.LeaderID == "" {
		fmt.Fprintln(ios.ErrOut, "no leader answered: the configuration shown is "+configSource(v))
	}
	return nil
}

func configSource(v *admin.ClusterView) string {
	if v.ConfigFrom == "" {
		return "unknown (only the nodes that answered are listed)"
	}
	return "node " + v.ConfigFrom + "'s"
}

func nodeListOut(v *admin.ClusterView) nodeListJSON {
	out := nodeListJSON{Leader: v.LeaderID, LeaderAddr: v.LeaderAddr, Term: -1, CommitIndex: -1, ConfigFrom: v.ConfigFrom, Nodes: []nodeListNode{}}
	if v.LeaderID != "" {
		out.Term, out.CommitIndex = knownNumber(v.Term), knownNumber(v.CommitIndex)
	}
	for _, n := range v.Nodes {
		j := nodeListNode{
			ID: n.ID, ClientAddr: n.ClientAddr, PeerAddr: n.PeerAddr, Role: nodeRole(&n), Voter: n.Voter, Member: n.Member,
			LastContactMS: n.LastContactMS, Reachable: n.Reachable() && n.Err == nil, Lag: n.Lag,
			Term: -1, CommitIndex: -1, AppliedIndex: -1,
		}
		if n.ID == v.LeaderID || j.LastContactMS < 0 {
			j.LastContactMS = -1 // the table's "-" (contactCell)
		}
		if st := n.Status; st != nil && n.Err == nil {
			j.Term, j.CommitIndex, j.AppliedIndex = knownNumber(st.Term), knownNumber(st.CommitIndex), knownNumber(st.AppliedIndex)
		}
		if n.Err != nil {
			j.Error = oneLine(n.Err)
		}
		out.Nodes = append(out.Nodes, j)
	}
	return out
}

// knownNumber is a raft number for JSON, where -1 means unknown (it never
// reaches 2^63).
func knownNumber(x uint64) int64 { return int64(min(x, math.MaxInt64)) }

// nodeListRows is node list's table.
func nodeListRows(v *admin.ClusterView) (header []string, rows [][]string) {
	header = []string{"ID", "CLIENT ADDR", "PEER ADDR", "ROLE", "VOTER", "LAST CONTACT", "APPLIED", "LAG"}
	for _, n := range v.Nodes {
		applied := "unreachable"
		if n.Status != nil {
			applied = strconv.FormatUint(n.Status.AppliedIndex, 10)
			if n.Err != nil {
				applied = "?"
			}
		}
		rows = append(rows, []string{
			cellOrDash(n.ID), cellOrDash(n.ClientAddr), cellOrDash(n.PeerAddr), nodeRole(&n), voterCell(&n),
			contactCell(n.ID == v.LeaderID, n.LastContactMS), applied, lagCell(n.Lag),
		})
	}
	return header, rows
}

// contactCell renders the leader's last contact with a node.
func contactCell(isLeader bool, ms int64) string {
	if isLeader || ms < 0 {
		return "-"
	}
	return fmtMS(ms) + " ago"
}

// membersRows is the table of a members reply (after add and remove).
func membersRows(ms []wire.Member) (header []string, rows [][]string) {
	header = []string{"ID", "CLIENT ADDR", "PEER ADDR", "ROLE", "VOTER", "LAST CONTACT"}
	for _, m := range ms {
		voter := "no"
		if m.Voter {
			voter = "yes"
		}
		rows = append(rows, []string{cellOrDash(m.ID), cellOrDash(m.ClientAddr), cellOrDash(m.PeerAddr), cellOrDash(m.Role), voter,
			contactCell(m.Role == wire.NodeLeader, m.LastContactMS)})
	}
	return header, rows
}

// ---------------------------------------------------------------------------
// node add

// NodeAddOptions is `ticketing node add` after flags and environment are merged.
type NodeAddOptions struct {
	Conn   ConnOptions
	Output string
	Args   admin.AddNodeArgs
	Wait   time.Duration // bound of the whole change (catch-up included)

	Connect func(ctx context.Context, addrs []string) (memberAdmin, error)
	Sleep   func(ctx context.Context, d time.Duration) error // between no-leader retries
}

func newCmdNodeAdd(fac *Factory, runF func(context.Context, *IO, *NodeAddOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runNodeAdd
	}
	cmd := &cobra.Command{
		Use:   "add --id ID --peer-addr HOST:PORT --client-addr HOST:PORT [--voter]",
		Short: "Add a running node (started with serve --join) to the cluster",
		Long: `Add a node to the cluster. Start it first with ` + "`ticketing serve --join`" + ` (and
its --node-id, --peer-listen, --advertise); then add it here under the same id
and addresses. It joins as a learner (it replicates, but neither votes nor
serves); with --voter the leader waits until it has caught up with the
commit index and its clock was sampled, then promotes it to voter (not with
a clock off beyond the cluster's bound: it stays a learner). Run add again
with --voter and the same addresses to promote a learner. An id is never
reused, not after its node lost its state and not after a remove. Prints the
members afterwards.

A member that lost its state (in-memory, or its data directory) comes back
under a new id: add the replacement, then remove the old id.

` + nodeExitHelp,
		Example: `  ticketing serve --node-id n4 --listen 10.0.0.4:7470 --peer-listen 10.0.0.4:7471 --join &
  ticketing node add --id n4 --peer-addr 10.0.0.4:7471 --client-addr 10.0.0.4:7470 --voter`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := nodeAddOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	f := cmd.Flags()
	f.String("id", "", "the new node's id (its --node-id)")
	f.String("peer-addr", "", "the new node's peer address host:port, as the other nodes dial it")
	f.String("client-addr", "", "the new node's client address host:port (its --advertise)")
	f.Bool("voter", false, "promote the node to voter once it has caught up (default: stay a learner)")
	durationFlag(cmd, "wait", "", defaultChangeWait.String(), "give up waiting for the leader's answer after this long")
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func nodeAddOptions(fac *Factory, cmd *cobra.Command) (*NodeAddOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	// Like every setting, from the flag or TICKETING_ID, TICKETING_PEER_ADDR,
	// TICKETING_CLIENT_ADDR, TICKETING_VOTER (issue #28 item 1).
	st := newSettings(cmd, v)
	opts := &NodeAddOptions{}
	opts.Args.ID = st.str("id")
	opts.Args.PeerAddr = st.str("peer-addr")
	opts.Args.ClientAddr = st.str("client-addr")
	opts.Args.Voter = st.bool("voter")
	if st.err != nil {
		return nil, st.err
	}
	for _, req := range []string{"id", "peer-addr", "client-addr"} {
		if strings.TrimSpace(v.GetString(req)) == "" {
			return nil, usageError("--%s is required", req)
		}
	}
	if err := opts.Args.Validate(); err != nil {
		return nil, usageError("%s", strings.TrimPrefix(oneLine(err), "invalid argument: "))
	}
	if opts.Wait, opts.Output, opts.Conn, err = changeFlags(fac, cmd, v); err != nil {
		return nil, err
	}
	opts.Connect = memberDialer(opts.Conn)
	return opts, nil
}

func runNodeAdd(ctx context.Context, ios *IO, opts *NodeAddOptions) error {
	var ms []wire.Member
	err := withMemberAdmin(ctx, opts.Conn, opts.Wait, opts.Connect, opts.Sleep, func(ctx context.Context, ma memberAdmin) error {
		var err error
		ms, err = ma.AddNode(ctx, opts.Args)
		return err
	})
	if err != nil {
		return nodeChangeError("node add "+opts.Args.ID, err)
	}
	as := "a learner"
	if opts.Args.Voter {
		as = "a voter"
	}
	return printMembers(ios, opts.Output, ms, fmt.Sprintf("added %s as %s", opts.Args.ID, as))
}

// ---------------------------------------------------------------------------
// node remove

// NodeRemoveOptions is `ticketing node remove` after flags and environment are merged.
type NodeRemoveOptions struct {
	Conn   ConnOptions
	Output string
	ID     string
	Wait   time.Duration

	Connect func(ctx context.Context, addrs []string) (memberAdmin, error)
	Sleep   func(ctx context.Context, d time.Duration) error
}

func newCmdNodeRemove(fac *Factory, runF func(context.Context, *IO, *NodeRemoveOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runNodeRemove
	}
	cmd := &cobra.Command{
		Use:   "remove --id ID",
		Short: "Remove a member from the cluster",
		Long: `Remove the member ID from the cluster's configuration and print the members
afterwards. Stop the removed node's process afterwards; it never comes back
under that id without its state (add a fresh node under a new id instead).
Removing the leader makes it hand over first.

` + nodeExitHelp,
		Example: `  ticketing node remove --id n4`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := nodeRemoveOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	cmd.Flags().String("id", "", "the member to remove")
	durationFlag(cmd, "wait", "", "30s", "give up waiting for the leader's answer after this long")
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func nodeRemoveOptions(fac *Factory, cmd *cobra.Command) (*NodeRemoveOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	st := newSettings(cmd, v)
	opts := &NodeRemoveOptions{ID: st.str("id")}
	if st.err != nil {
		return nil, st.err
	}
	if strings.TrimSpace(opts.ID) == "" {
		return nil, usageError("--id is required")
	}
	if opts.Wait, opts.Output, opts.Conn, err = changeFlags(fac, cmd, v); err != nil {
		return nil, err
	}
	opts.Connect = memberDialer(opts.Conn)
	return opts, nil
}

func runNodeRemove(ctx context.Context, ios *IO, opts *NodeRemoveOptions) error {
	var ms []wire.Member
	err := withMemberAdmin(ctx, opts.Conn, opts.Wait, opts.Connect, opts.Sleep, func(ctx context.Context, ma memberAdmin) error {
		var err error
		ms, err = ma.RemoveNode(ctx, opts.ID)
		return err
	})
	if err != nil {
		return nodeChangeError("node remove "+opts.ID, err)
	}
	return printMembers(ios, opts.Output, ms, "removed "+opts.ID+"; stop its process now")
}

// ---------------------------------------------------------------------------
// node transfer-leader

// NodeTransferOptions is `ticketing node transfer-leader` after flags and environment are merged.
type NodeTransferOptions struct {
	Conn   ConnOptions
	Output string
	ID     string // "" = any caught-up voter
	Wait   time.Duration

	Connect func(ctx context.Context, addrs []string) (memberAdmin, error)
	Sleep   func(ctx context.Context, d time.Duration) error
}

func newCmdNodeTransfer(fac *Factory, runF func(context.Context, *IO, *NodeTransferOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runNodeTransfer
	}
	cmd := &cobra.Command{
		Use:   "transfer-leader [--id ID]",
		Short: "Hand leadership to another voter",
		Long: `Ask the leader to hand leadership over to the voter ID (default: any voter
that has caught up). The leader stops taking lock requests (clients are
redirected), lets the ones it took commit, and transfers; it answers within
its --transfer-timeout (default 3 s) plus about a second. Prints the new
leader's client address ("unknown" when it was not known yet when the old
leader answered).

` + nodeExitHelp,
		Example: `  ticketing node transfer-leader
  ticketing node transfer-leader --id n2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := nodeTransferOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	cmd.Flags().String("id", "", "the voter to hand leadership to (default: any caught-up voter)")
	durationFlag(cmd, "wait", "", "30s", "give up waiting for the leader's answer after this long")
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func nodeTransferOptions(fac *Factory, cmd *cobra.Command) (*NodeTransferOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	st := newSettings(cmd, v)
	opts := &NodeTransferOptions{ID: strings.TrimSpace(st.str("id"))}
	if st.err != nil {
		return nil, st.err
	}
	if opts.Wait, opts.Output, opts.Conn, err = changeFlags(fac, cmd, v); err != nil {
		return nil, err
	}
	opts.Connect = memberDialer(opts.Conn)
	return opts, nil
}

func runNodeTransfer(ctx context.Context, ios *IO, opts *NodeTransferOptions) error {
	var leader string
	err := withMemberAdmin(ctx, opts.Conn, opts.Wait, opts.Connect, opts.Sleep, func(ctx context.Context, ma memberAdmin) error {
		var err error
		leader, err = ma.TransferLeader(ctx, opts.ID)
		return err
	})
	if err != nil {
		return nodeChangeError("node transfer-leader", err)
	}
	if opts.Output == "json" {
		return writeJSON(ios, wire.LeaderReply{Leader: leader})
	}
	if leader == "" {
		fmt.Fprintln(ios.Out, "leader unknown")
		fmt.Fprintln(ios.ErrOut, "leadership was handed over; the new leader was not known yet (see `ticketing node list`)")
		return nil
	}
	_, err = fmt.Fprintln(ios.Out, "leader "+leader)
	return err
}

// ---------------------------------------------------------------------------
// shared

// withMemberAdmin connects (within --timeout) and runs op within wait,
// trying again while the cluster has no leader (an answer M without an
// address: nothing was executed), for at most --timeout.
func withMemberAdmin(ctx context.Context, conn ConnOptions, wait time.Duration,
	connect func(context.Context, []string) (memberAdmin, error), sleep func(context.Context, time.Duration) error,
	op func(context.Context, memberAdmin) error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if sleep == nil {
		sleep = sleepCtx
	}
	ctx, cancel := context.WithTimeout(ctx, wait+conn.Timeout)
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, 2*conn.Timeout)
	ma, err := connect(dctx, conn.Addrs)
	dcancel()
	if err != nil {
		return err
	}
	defer ma.Close()
	giveUp := time.Now().Add(conn.Timeout)
	for {
		octx, ocancel := context.WithTimeout(ctx, wait)
		err = op(octx, ma)
		ocancel()
		if err == nil || !errors.Is(err, client.ErrNoLeader) || time.Now().After(giveUp) {
			return err
		}
		if sleep(ctx, noLeaderRetry) != nil {
			return err
		}
	}
}

// nodeChangeError maps a failed change to its exit code (nodeExitHelp)
// with a message naming the operation.
func nodeChangeError(op string, err error) error {
	var ce *admin.ChangeError
	switch {
	case errors.As(err, &ce) && errors.Is(err, admin.ErrNotCluster):
		return withExit(ExitUsage, fmt.Errorf("%s: %s (--addr names a single server, not a cluster)", op, ce.Error()))
	case errors.As(err, &ce) && errors.Is(err, admin.ErrInvalidChange):
		return withExit(ExitUsage, fmt.Errorf("%s: %s", op, ce.Error()))
	case errors.As(err, &ce) && errors.Is(err, admin.ErrChangeInProgress):
		return withExit(ExitError, fmt.Errorf("%s: %s (one change at a time: retry when it has finished)", op, ce.Error()))
	case errors.As(err, &ce):
		return withExit(ExitError, fmt.Errorf("%s: %s", op, ce.Error()))
	case errors.Is(err, client.ErrIndeterminate):
		return withExit(ExitIndeterminate, fmt.Errorf("%s: %w (the change may have happened: check `ticketing node list`)", op, err))
	case errors.Is(err, client.ErrNoLeader):
		return withExit(ExitBusy, fmt.Errorf("%s: %w; none within --timeout: retry once there is one", op, err))
	case errors.Is(err, client.ErrConnect), errors.Is(err, client.ErrAuth):
		// errors.go's mapping (7, 8)
	case errors.Is(err, context.DeadlineExceeded):
		return withExit(ExitIndeterminate, fmt.Errorf("%s: no answer within --wait (the change may still complete: check `ticketing node list`)", op))
	}
	return fmt.Errorf("%s: %w", op, err) // client errors: errors.go
}

// printMembers prints the members after a change: a table (and note on
// stderr), or the members reply as JSON.
func printMembers(ios *IO, output string, ms []wire.Member, note string) error {
	if ms == nil {
		ms = []wire.Member{}
	}
	if output == "json" {
		return writeJSON(ios, wire.MembersReply{Members: ms})
	}
	header, rows := membersRows(ms)
	if err := renderTable(ios.Out, header, rows); err != nil {
		return err
	}
	fmt.Fprintln(ios.ErrOut, note)
	return nil
}

// changeFlags reads the flags every membership change shares: --wait (a
// positive duration), --output and the connection flags.
func changeFlags(fac *Factory, cmd *cobra.Command, v *viper.Viper) (wait time.Duration, output string, conn ConnOptions, err error) {
	if wait, err = getDuration(cmd, v, "wait"); err != nil {
		return 0, "", conn, err
	}
	if wait <= 0 {
		return 0, "", conn, usageError("--wait must be positive")
	}
	if output, err = getOutput(cmd, v); err != nil {
		return 0, "", conn, err
	}
	conn, err = fac.Conn(cmd, v)
	return wait, output, conn, err
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client/wire"
)

// LocksOptions is `ticketing locks` after flags and environment are merged.
type LocksOptions struct {
	Conn   ConnOptions
	Output string
	Prefix string
	Limit  int
	Local  bool // the first node that answers, not the cluster's leader

	Connect func(ctx context.Context, addrs []string) (adminClient, error)
}

func newCmdLocks(fac *Factory, runF func(context.Context, *IO, *LocksOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runLocks
	}
	cmd := &cobra.Command{
		Use:   "locks [--prefix P] [--limit N]",
		Short: "List held locks and their queues",
		Long: `List held keys: key, holder's fencing token, lease left, queue depth and the
age of the oldest waiter, deepest queue first. Keys with unusual characters
are shown quoted and escaped. Needs the admin token (default: the client
token). In a cluster the leader answers (found through the first node in
--addr that answers; with --local, that first node answers), and a line on
stderr names it; when no leader could be reached, the node asked answers and
the line says its view may lag. --output json prints the server's locks
reply (protocol.md §8), with each token a decimal string (tokens exceed
2^53), and "answered_by": {"id", "addr", "role"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := locksOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	cmd.Flags().String("prefix", "", "only keys starting with this prefix")
	cmd.Flags().Int("limit", wire.LocksDefaultLimit, fmt.Sprintf("show at most this many keys (1..%d)", wire.LocksMaxLimit))
	cmd.Flags().Bool("local", false, "in a cluster: the first node in --addr that answers, not the leader")
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func locksOptions(fac *Factory, cmd *cobra.Command) (*LocksOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	st := newSettings(cmd, v)
	opts := &LocksOptions{Prefix: st.str("prefix"), Limit: st.int("limit"), Local: st.bool("local")}
	if st.err == nil && (opts.Limit < 1 || opts.Limit > wire.LocksMaxLimit) {
		st.failf("limit", "want 1..%d", wire.LocksMaxLimit)
	}
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

func runLocks(ctx context.Context, ios *IO, opts *LocksOptions) error {
	ctx, cancel := withTimeout(ctx, 2*opts.Conn.Timeout)
	defer cancel()
	r, err := readLeader(ctx, opts.Conn.Addrs, opts.Local, opts.Connect)
	if err != nil {
		return err
	}
	defer r.ac.Close()
	lr, err := r.ac.Locks(ctx, opts.Prefix, opts.Limit)
	if err != nil {
		return err
	}
	switch {
	case r.stale != "":
		fmt.Fprintln(ios.ErrOut, "note: "+r.stale)
	case r.by.inCluster() && opts.Output != "json":
		fmt.Fprintln(ios.ErrOut, "answered by "+r.by.String())
	}
	if opts.Output == "json" {
		out := locksOut(lr)
		out.AnsweredBy = r.by
		return writeJSON(ios, out)
	}
	if len(lr.Locks) == 0 {
		if opts.Prefix != "" {
			fmt.Fprintf(ios.ErrOut, "no locks held under prefix %s\n", admin.EscapeKey(opts.Prefix))
		} else {
			fmt.Fprintln(ios.ErrOut, "no locks held")
		}
		return nil
	}
	header, rows := locksTable(lr.Locks)
	if err := renderTable(ios.Out, header, rows); err != nil {
		return err
	}
	if lr.Truncated {
		fmt.Fprintf(ios.ErrOut, "showing %d of %d keys (--limit, --prefix)\n", len(lr.Locks), lr.Total)
	}
	if lr.ClockUnverified {
		fmt.Fprintln(ios.ErrOut, "clock unverified: the leader's clock is not verified within max_clock_skew; LEASE LEFT is as it will enforce it")
	}
	return nil
}

// locksTable is the text form of a locks reply.
func locksTable(locks []wire.LockEntry) (header []string, rows [][]string) {
	header = []string{"KEY", "TOKEN", "LEASE LEFT", "QUEUE", "OLDEST WAITER", "HOLDER", "SET"}
	for _, e := range locks {
		oldest := "-"
		if e.QueueDepth > 0 {
			oldest = fmtMS(e.OldestWaiterAgeMS)
		}
		rows = append(rows, []string{
			admin.EscapeKey(e.Key),
			strconv.FormatUint(e.Token, 10),
			fmtMS(e.LeaseRemainingMS),
			strconv.Itoa(e.QueueDepth),
			oldest,
			holderText(e.Holder),
			setText(e.Set),
		})
	}
	return header, rows
}

// holderText is a holder's label and address (protocol.md §12.3), "-" when
// the server names neither (a 1.0 server, or no label and no address).
func holderText(h *wire.ConnInfo) string {
	if h == nil || h.Label == "" && h.Addr == "" {
		return "-"
	}
	switch {
	case h.Label == "":
		return h.Addr
	case h.Addr == "":
		return admin.EscapeKey(h.Label)
	}
	return admin.EscapeKey(h.Label) + " @" + h.Addr
}

// setText lists the keys of the key set holding a key: every row of a set
// shows the same list, so the set reads as one holder.
func setText(set []string) string {
	if len(set) == 0 {
		return "-"
	}
	ks := make([]string, len(set))
	for i, k := range set {
		ks[i] = admin.EscapeKey(k)
	}
	return strings.Join(ks, ",")
}

// locksJSON is locks' --output json: the server's reply (protocol.md §8)
// with every token a decimal string, since tokens exceed 2^53 and JSON
// tools that read numbers as doubles (jq) would round them.
type locksJSON struct {
	Total     int             `json:"total"`
	Truncated bool            `json:"truncated"`
	Locks     []lockEntryJSON `json:"locks"`
	// ClockUnverified is the reply's clock_unverified.
	ClockUnverified bool `json:"clock_unverified,omitempty"`
	// AnsweredBy is the node that gave the reply (not the server's).
	AnsweredBy answeredBy `json:"answered_by"`
}

type lockEntryJSON struct {
	Key               string `json:"key"`
	Token             string `json:"token"`
	LeaseRemainingMS  int64  `json:"lease_remaining_ms"`
	QueueDepth        int    `json:"queue_depth"`
	OldestWaiterAgeMS int64  `json:"oldest_waiter_age_ms"`
	// protocol 1.1 (§12.3): who holds it, the holding set, the first waiters
	Holder  *wire.ConnInfo    `json:"holder,omitempty"`
	Set     []string          `json:"set,omitempty"`
	Waiters []wire.WaiterInfo `json:"waiters,omitempty"`
}

func locksOut(lr wire.LocksReply) locksJSON {
	out := locksJSON{Total: lr.Total, Truncated: lr.Truncated, ClockUnverified: lr.ClockUnverified, Locks: make([]lockEntryJSON, 0, len(lr.Locks))}
	for _, e := range lr.Locks {
		out.Locks = append(out.Locks, lockEntryJSON{
			Key: e.Key, Token: strconv.FormatUint(e.Token, 10), LeaseRemainingMS: e.LeaseRemainingMS,
			QueueDepth: e.QueueDepth, OldestWaiterAgeMS: e.OldestWaiterAgeMS,
			Holder: e.Holder, Set: e.Set, Waiters: e.Waiters,
		})
	}
	return out
}

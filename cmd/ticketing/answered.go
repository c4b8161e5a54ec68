package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client/wire"
)

// answeredBy names the node whose reply `status` and `locks` show: its id,
// its client address and its role (single, leader, follower, learner,
// removed). JSON outputs carry it as "answered_by".
type answeredBy struct {
	ID   string `json:"id,omitempty"`   // "" on a single server without --node-id
	Addr string `json:"addr,omitempty"` // its advertised client address ("" when unknown)
	Role string `json:"role"`
}

func (a answeredBy) String() string {
	name := a.ID
	switch {
	case name == "" && a.Addr == "":
		name = "the server"
	case name == "":
		name = a.Addr
	case a.Addr != "":
		name += " at " + a.Addr
	}
	if a.Role == "" {
		return name
	}
	return name + " (" + a.Role + ")"
}

// inCluster: the node is a member of a cluster (its view may lag the
// leader's).
func (a answeredBy) inCluster() bool { return a.Role != "" && a.Role != wire.NodeSingle }

// leaderReader is what a read-only admin command (status, locks) asks: the
// cluster's leader by default, found through the first node of addrs that
// answers; with local, that node itself.
type leaderReader struct {
	ac    adminClient
	st    wire.StatusReply // ac's status, asked at the start
	by    answeredBy
	stale string // why the answer may lag the leader's ("" when it is the leader's, or a single server's)
}

// readLeader connects to addrs and, unless local, moves to the leader that
// the first answering node names. When no leader can be reached it stays
// with that node and says why in stale. The caller closes r.ac.
//
// Every connection it opens is to one address: a client over several
// spreads its queries over all of them, so the status and the locks query
// after it could be answered by different nodes (a follower's lagging
// table under the leader's answered_by).
func readLeader(ctx context.Context, addrs []string, local bool, connect func(context.Context, []string) (adminClient, error)) (*leaderReader, error) {
	var r *leaderReader
	var err error
	if local {
		// The first address in order that answers. One that refuses the
		// connection is passed over at once (a client keeps retrying it
		// for the whole connect budget); the last is always asked.
		for i, a := range addrs {
			if i < len(addrs)-1 && refuses(ctx, a) {
				continue
			}
			if r, err = askNode(ctx, []string{a}, connect); err == nil {
				break
			}
		}
	} else {
		r, err = askFirst(ctx, addrs, connect)
	}
	if err != nil {
		return nil, err
	}
	st := r.st
	if !r.by.inCluster() || st.Role == wire.NodeLeader {
		return r, nil
	}
	ac := r.ac
	if local {
		r.stale = fmt.Sprintf("%s may lag the leader (--local)", r.by)
		return r, nil
	}
	if st.Leader == "" {
		r.stale = fmt.Sprintf("no leader known to %s: its view may lag the cluster's", r.by)
		return r, nil
	}
	l, err := askNode(ctx, []string{st.Leader}, connect)
	if err == nil && l.st.Role == wire.NodeLeader {
		ac.Close()
		return l, nil
	}
	if err == nil {
		l.ac.Close()
		err = fmt.Errorf("it answers as %s", l.st.Role)
	}
	r.stale = fmt.Sprintf("the leader that %s names, %s, did not answer as the leader (%s): %s's view may lag the cluster's", r.by, st.Leader, oneLine(err), r.by.ID)
	return r, nil
}

// refuses reports whether addr cannot answer at all right now: nothing
// listens there, or the host does not exist (admin.Refused).
func refuses(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return admin.Refused(ctx, addr) != nil
}

// askFirst asks every address at once, each over its own connection, and
// keeps the first node that answers (the others are closed). The error,
// when none answers, is the first address's.
func askFirst(ctx context.Context, addrs []string, connect func(context.Context, []string) (adminClient, error)) (*leaderReader, error) {
	if len(addrs) == 1 {
		return askNode(ctx, addrs, connect)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		i   int
		r   *leaderReader
		err error
	}
	answers := make(chan answer, len(addrs))
	for i, a := range addrs {
		go func() {
			r, err := askNode(ctx, []string{a}, connect)
			answers <- answer{i, r, err}
		}()
	}
	errs := make([]error, len(addrs))
	for left := len(addrs); left > 0; left-- {
		a := <-answers
		if a.err != nil {
			errs[a.i] = a.err
			continue
		}
		// The others stop dialling (cancel) and are closed as they end.
		go func(left int) {
			for range left - 1 {
				if a := <-answers; a.err == nil {
					a.r.ac.Close()
				}
			}
		}(left)
		return a.r, nil
	}
	return nil, errs[0]
}

// askNode connects to addrs and asks for the status.
func askNode(ctx context.Context, addrs []string, connect func(context.Context, []string) (adminClient, error)) (*leaderReader, error) {
	ac, err := connect(ctx, addrs)
	if err != nil {
		return nil, err
	}
	st, err := ac.Status(ctx)
	if err != nil {
		ac.Close()
		return nil, err
	}
	return &leaderReader{ac: ac, st: st, by: nodeOf(&st, addrs)}, nil
}

// nodeOf is who answered st, asked through addrs.
func nodeOf(st *wire.StatusReply, addrs []string) answeredBy {
	by := answeredBy{ID: st.NodeID, Addr: st.ClientAddr, Role: st.Role}
	if by.Addr == "" && len(addrs) == 1 {
		by.Addr = addrs[0]
	}
	return by
}

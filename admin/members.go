package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// Errors of the membership operations (AddNode, RemoveNode,
// TransferLeader). The leader's refusal arrives as an E BAD_ADMIN answer;
// the returned *ChangeError matches one of these sentinels (errors.Is) and
// carries the leader's message.
var (
	// ErrNotCluster: the node is a single server; membership commands need
	// a cluster (protocol.md §8).
	ErrNotCluster = errors.New("admin: not a cluster")
	// ErrChangeInProgress: the leader is running another membership change;
	// it takes one at a time. Retry when that one has finished.
	ErrChangeInProgress = errors.New("admin: another membership change is in progress")
	// ErrInvalidChange: the change names something that cannot be changed
	// that way: an id or peer address already in use (or used before: a
	// node that lost its state rejoins under a new id), no such member.
	ErrInvalidChange = errors.New("admin: invalid membership change")
	// ErrChangeFailed: the leader tried and failed (a learner that did not
	// catch up in time, leadership lost during the change, a transfer that
	// did not complete). The leader's message says which.
	ErrChangeFailed = errors.New("admin: membership change failed")
)

// AddNodeArgs are the arguments of `add-node`.
type AddNodeArgs struct {
	// ID is the new node's raft id (its --node-id). It must never have been
	// a member before.
	ID string
	// PeerAddr is the node's peer address as the other nodes dial it.
	PeerAddr string
	// ClientAddr is the node's client address (its --advertise), the one M
	// answers name once it leads.
	ClientAddr string
	// Voter: after joining as a learner and catching up with the leader's
	// commit index, the node is promoted to voter. False leaves a learner.
	Voter bool
}

// addNodeBody is the JSON of `add-node` without "cmd" (client.Admin adds it).
type addNodeBody struct {
	ID         string `json:"id"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
	Voter      bool   `json:"voter"`
}

type idBody struct {
	ID string `json:"id,omitempty"`
}

// Validate checks the arguments before anything is sent: an id, and
// host:port addresses whose host is neither empty nor a wildcard.
func (a AddNodeArgs) Validate() error {
	if strings.TrimSpace(a.ID) == "" {
		return fmt.Errorf("%w: add-node: empty node id", client.ErrInvalidArgument)
	}
	if err := concreteAddr("peer address", a.PeerAddr); err != nil {
		return err
	}
	return concreteAddr("client address", a.ClientAddr)
}

func concreteAddr(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return fmt.Errorf("%w: %s %q: want host:port", client.ErrInvalidArgument, what, addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: %s %q is a wildcard; name an address the other nodes can reach", client.ErrInvalidArgument, what, addr)
	}
	return nil
}

// AddNode adds a node to the cluster (`add-node`, protocol.md §8): it joins
// as a learner; with Voter the leader waits until it has caught up, then
// promotes it. The node must already run (`ticketing serve --join`). c may
// be connected to any node: a follower answers M and c follows it to the
// leader. Bound ctx generously: the catch-up may take the leader up to a
// minute. It returns the members after the change.
func AddNode(ctx context.Context, c *client.Client, a AddNodeArgs) ([]wire.Member, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var mr wire.MembersReply
	body := addNodeBody(a)
	if err := c.Admin(ctx, wire.CmdAddNode, body, &mr); err != nil {
		return nil, changeError(err)
	}
	return mr.Members, nil
}

// RemoveNode removes the member id from the configuration (`remove-node`)
// and returns the members after the change. A removed node's process keeps
// running until stopped; stop it, and never bring it back under the same id
// without its state.
func RemoveNode(ctx context.Context, c *client.Client, id string) ([]wire.Member, error) {
	if strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("%w: remove-node: empty node id", client.ErrInvalidArgument)
	}
	var mr wire.MembersReply
	if err := c.Admin(ctx, wire.CmdRemoveNode, idBody{ID: id}, &mr); err != nil {
		return nil, changeError(err)
	}
	return mr.Members, nil
}

// TransferLeader hands leadership to the voter id ("" for any caught-up
// voter) and returns the new leader's client address ("" when it was not
// known yet when the old leader answered). The leader answers within its
// transfer timeout (default 3 s) plus about a second.
func TransferLeader(ctx context.Context, c *client.Client, id string) (string, error) {
	var lr wire.LeaderReply
	if err := c.Admin(ctx, wire.CmdTransferLeader, idBody{ID: id}, &lr); err != nil {
		err = changeError(err)
		var ce *ChangeError
		if id != "" && errors.As(err, &ce) && strings.Contains(ce.Msg, "no voter") {
			explainNoVoter(ctx, c, id, ce)
		}
		return "", err
	}
	return lr.Leader, nil
}

// explainNoVoter turns the leader's "no voter" refusal of a transfer to id
// into what it means, from the members (asked of the same leader): an id
// that is not a member (listing the members), the leader itself, or a
// non-voter. The refusal stands unchanged when the members are unknown.
func explainNoVoter(ctx context.Context, c *client.Client, id string, ce *ChangeError) {
	var mr wire.MembersReply
	if c.Admin(ctx, wire.CmdMembers, nil, &mr) != nil || len(mr.Members) == 0 {
		return
	}
	ids := make([]string, 0, len(mr.Members))
	for _, m := range mr.Members {
		ids = append(ids, m.ID)
		if m.ID != id {
			continue
		}
		switch {
		case m.Role == wire.NodeLeader:
			ce.Kind, ce.Msg = ErrInvalidChange, fmt.Sprintf("%s is the leader already", id)
		case !m.Voter:
			ce.Kind, ce.Msg = ErrInvalidChange, fmt.Sprintf("%s is not a voter: only a voter can lead", id)
		}
		return
	}
	ce.Kind = ErrInvalidChange
	ce.Msg = fmt.Sprintf("unknown node id %q: the members are %s", id, strings.Join(ids, ", "))
}

// ChangeError is the leader's refusal of a changing query (E BAD_ADMIN).
// errors.Is matches its Kind (ErrNotCluster, ErrChangeInProgress,
// ErrInvalidChange or ErrChangeFailed); errors.As finds the
// *client.ProtocolError.
type ChangeError struct {
	Kind error  // one of the sentinels above
	Msg  string // the leader's message
	Err  error  // the client's error (wraps the *client.ProtocolError)
}

func (e *ChangeError) Error() string { return "the leader refused: " + e.Msg }

// Unwrap returns the kind and the client's error.
func (e *ChangeError) Unwrap() []error { return []error{e.Kind, e.Err} }

// changeError classifies the leader's E BAD_ADMIN answer to a changing
// query by its message (the code alone says no more); other errors pass
// unchanged.
func changeError(err error) error {
	var pe *client.ProtocolError
	if !errors.As(err, &pe) || pe.Code != wire.CodeBadAdmin {
		return err
	}
	msg := strings.TrimPrefix(pe.Msg, "cluster: ")
	lower := strings.ToLower(msg)
	var kind error
	switch {
	case strings.Contains(lower, "not a cluster"):
		kind = ErrNotCluster
	case strings.Contains(lower, "in progress"):
		kind = ErrChangeInProgress
	case strings.Contains(lower, "already"), strings.Contains(lower, "no member"),
		strings.Contains(lower, "used before"), strings.Contains(lower, "required"):
		kind = ErrInvalidChange
	default:
		kind = ErrChangeFailed
	}
	if msg == "" {
		msg = kind.Error()
	}
	return &ChangeError{Kind: kind, Msg: msg, Err: err}
}

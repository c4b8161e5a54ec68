package tui

import (
	"context"

	"github.com/ticketing/ticketing/client/wire"
)

// Source is what the dashboard needs from the nodes: the admin `status` and
// `locks` queries of one node, by its address. The commands call it from
// their own goroutines, never two calls for one address at a time.
// AdminSource implements it over admin/; tests use a fake.
type Source interface {
	Status(ctx context.Context, addr string) (wire.StatusReply, error)
	Locks(ctx context.Context, addr, prefix string, limit int) (wire.LocksReply, error)
}

// MemberSource is a Source that also answers the admin `members` query:
// the dashboard then follows the cluster's membership as `health` does
// (issue #28 item 10), asking the leader each poll.
type MemberSource interface {
	Members(ctx context.Context, addr string) ([]wire.Member, error)
}

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

package admin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// HealthResult is the health of one node.
type HealthResult struct {
	// Addr is the address checked.
	Addr string
	// Healthy: the node completed the handshake, answered a ping and a
	// status query, and reported that it can grant a fresh acquire.
	Healthy bool
	// Reason says why the node is not healthy ("" when it is).
	Reason string
	// RTT is the ping's round trip (0 when the ping failed).
	RTT time.Duration
	// Status is the node's status reply (nil when it could not be read).
	Status *wire.StatusReply
	// Err is the error that failed the check (connect, authentication,
	// ping or status); nil when healthy, and when the node answered but
	// cannot grant (see Reason).
	Err error
}

// Health checks every address concurrently and returns one result per
// address, in the order given. A node is healthy only when a fresh acquire
// sent to it now would not be refused: it accepts the handshake with opts'
// credentials (use client.WithAdminToken: status needs role admin), answers
// a ping and a status query, is not draining, reports CanGrant (not at
// max_keys or max_connections, clock healthy, quorum), and — a cluster
// follower — knows a leader to forward to. Each check is bounded by ctx and
// by the dial timeout in opts.
func Health(ctx context.Context, addrs []string, opts ...client.Option) []HealthResult {
	out := make([]HealthResult, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = checkOne(ctx, a, opts)
		}()
	}
	wg.Wait()
	return out
}

func checkOne(ctx context.Context, addr string, opts []client.Option) HealthResult {
	r := HealthResult{Addr: addr}
	fail := func(stage string, err error) HealthResult {
		r.Err = err
		r.Reason = stage + ": " + err.Error()
		return r
	}
	c, err := Dial(ctx, addr, opts...)
	if err != nil {
		return fail("connect", err)
	}
	defer c.Close()
	p, err := Ping(ctx, c)
	if err != nil {
		return fail("ping", err)
	}
	r.RTT = p.RTT
	st, err := Status(ctx, c)
	if err != nil {
		var pe *client.ProtocolError
		if errors.As(err, &pe) && pe.Code == wire.CodeNotPermitted {
			err = fmt.Errorf("%w (health needs role admin: the admin token)", err)
		}
		return fail("status", err)
	}
	r.Status = &st
	r.Reason = cannotGrant(&st)
	r.Healthy = r.Reason == ""
	return r
}

// cannotGrant says why a node with this status would refuse a fresh
// acquire, or "" when it would not.
func cannotGrant(st *wire.StatusReply) string {
	switch {
	case st.Draining:
		return "draining (shutting down)"
	case !st.CanGrant:
		if st.Reason != "" {
			return "cannot grant: " + st.Reason
		}
		return "cannot grant"
	case (st.Role == wire.NodeFollower || st.Role == wire.NodeLearner) && st.Leader == "":
		return "no leader known"
	case st.MaxKeys > 0 && st.Keys >= st.MaxKeys:
		return "at max_keys"
	case st.MaxConnections > 0 && st.Connections > st.MaxConnections:
		return "at max_connections"
	}
	return ""
}

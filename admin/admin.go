// Package admin is the typed operations API of a Ticketing node: the §8
// admin queries of protocol.md (status, locks, members, add-node,
// remove-node, transfer-leader), clock probes, a cluster view (Discover)
// and health checks built on them. It does no printing: cmd/ticketing renders
// the results as tables or JSON, and tui/ displays them.
//
// Admin queries need role admin on the connection (protocol.md §1): dial
// with client.WithAdminToken (the admin token defaults to the client token
// on the server, so a client token usually works as the admin token).
package admin

import (
	"context"
	"fmt"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// Dial connects to the one node at addr ("host:port"). Unlike client.Dial
// with several addresses, the result talks to that node only (it follows
// no other address unless the node redirects a changing command), which is
// what per-node queries (Status, Ping) need. Close it when done.
func Dial(ctx context.Context, addr string, opts ...client.Option) (*client.Client, error) {
	return client.Dial(ctx, []string{addr}, opts...)
}

// Status returns the node's `status` reply: its role, leader, uptime, the
// number of keys, holders, waiters and connections, the cumulative
// counters, and whether it can grant a fresh acquire now (CanGrant, with
// Reason when it cannot).
func Status(ctx context.Context, c *client.Client) (wire.StatusReply, error) {
	var st wire.StatusReply
	if err := c.Admin(ctx, wire.CmdStatus, nil, &st); err != nil {
		return wire.StatusReply{}, err
	}
	return st, nil
}

// locksArgs are the arguments of `locks`; zero values are left out so the
// server applies its defaults.
type locksArgs struct {
	Prefix string `json:"prefix,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// Locks returns the held keys that start with prefix ("" for all), at most
// limit of them (0 means the server's default, 100; at most 10,000), sorted
// by queue depth descending, then key. Total counts every matching key;
// Truncated says whether some were left out.
func Locks(ctx context.Context, c *client.Client, prefix string, limit int) (wire.LocksReply, error) {
	if limit < 0 || limit > wire.LocksMaxLimit {
		return wire.LocksReply{}, fmt.Errorf("admin: locks: %w: limit %d must be 1..%d (0 for the default)", client.ErrInvalidArgument, limit, wire.LocksMaxLimit)
	}
	var lr wire.LocksReply
	if err := c.Admin(ctx, wire.CmdLocks, locksArgs{Prefix: prefix, Limit: limit}, &lr); err != nil {
		return wire.LocksReply{}, err
	}
	if lr.Locks == nil {
		lr.Locks = []wire.LockEntry{}
	}
	return lr, nil
}

// Members returns the cluster's members as this node sees them: one entry
// with role "single" on a single node.
func Members(ctx context.Context, c *client.Client) ([]wire.Member, error) {
	var mr wire.MembersReply
	if err := c.Admin(ctx, wire.CmdMembers, nil, &mr); err != nil {
		return nil, err
	}
	return mr.Members, nil
}

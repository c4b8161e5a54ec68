package tui

import (
	"context"
	"errors"
	"sync"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// AdminSource is the real Source: one admin connection (admin.Dial) per
// address, dialled on first use and again after a failed dial, so a node
// that is down at start is picked up when it comes back. The client keeps
// each connection up in the background once dialled.
type AdminSource struct {
	opts []client.Option

	mu      sync.Mutex
	clients map[string]*client.Client
	closed  bool
}

// NewAdminSource returns a Source that connects with opts (tokens, TLS,
// dial timeout; admin.Dial adds the admin role).
func NewAdminSource(opts ...client.Option) *AdminSource {
	return &AdminSource{opts: opts, clients: map[string]*client.Client{}}
}

var errSourceClosed = errors.New("source closed")

func (s *AdminSource) client(ctx context.Context, addr string) (*client.Client, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errSourceClosed
	}
	c := s.clients[addr]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := admin.Dial(ctx, addr, s.opts...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, errSourceClosed
	}
	if old := s.clients[addr]; old != nil { // lost a race: keep the first
		c.Close()
		return old, nil
	}
	s.clients[addr] = c
	return c, nil
}

// Status implements Source.
func (s *AdminSource) Status(ctx context.Context, addr string) (wire.StatusReply, error) {
	c, err := s.client(ctx, addr)
	if err != nil {
		return wire.StatusReply{}, err
	}
	return admin.Status(ctx, c)
}

// Locks implements Source.
func (s *AdminSource) Locks(ctx context.Context, addr, prefix string, limit int) (wire.LocksReply, error) {
	c, err := s.client(ctx, addr)
	if err != nil {
		return wire.LocksReply{}, err
	}
	return admin.Locks(ctx, c, prefix, limit)
}

// Members implements MemberSource.
func (s *AdminSource) Members(ctx context.Context, addr string) ([]wire.Member, error) {
	c, err := s.client(ctx, addr)
	if err != nil {
		return nil, err
	}
	return admin.Members(ctx, c)
}

// Close closes every connection; later calls fail.
func (s *AdminSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for a, c := range s.clients {
		c.Close()
		delete(s.clients, a)
	}
	return nil
}

package server

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Advertise self-check (issue #13 item 3): a cluster node checks at start
// that its advertised client address reaches itself, not just some open
// port. It dials the address and reads the HELLO; the server nonce in it
// must be one this process issued (recorded while the check runs). A wrong
// --advertise would send every client that a follower redirects to a dead
// or foreign address, so the node reports it: an error log, and status
// can_grant false with the reason (so `health` fails naming it).

const (
	advertiseCheckFor   = 10 * time.Second // retries until then (the listener may not serve yet)
	advertiseCheckDial  = time.Second
	advertiseRecheck    = 5 * time.Second
	advertiseNoncesKept = 64
)

// helloNonces records the server nonces this process sent while an
// advertise check runs; noteHello is a no-op otherwise.
type helloNonces struct {
	active atomic.Bool
	mu     sync.Mutex
	ring   [advertiseNoncesKept][wire.NonceLen]byte
	next   int
}

func (h *helloNonces) note(n *[wire.NonceLen]byte) {
	if !h.active.Load() {
		return
	}
	h.mu.Lock()
	h.ring[h.next%advertiseNoncesKept] = *n
	h.next++
	h.mu.Unlock()
}

func (h *helloNonces) issued(n *[wire.NonceLen]byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	found := 0
	for i := range h.ring {
		found |= subtle.ConstantTimeCompare(h.ring[i][:], n[:])
	}
	return found == 1
}

var errForeignServer = errors.New("another ticketing server answers there (its HELLO nonce is not one this node issued)")

// noteHello is called by the handshake with the nonce it sends.
func (s *Server) noteHello(n *[wire.NonceLen]byte) { s.hellos.note(n) }

// AdvertiseError is why the advertised client address does not reach this
// node, "" when it does or was not checked yet.
func (s *Server) AdvertiseError() string {
	if e, ok := s.advertiseErr.Load().(string); ok {
		return e
	}
	return ""
}

// checkAdvertise runs the self-check in the background: retried for
// advertiseCheckFor, then reported and re-checked until it passes.
func (s *Server) checkAdvertise(addr string) {
	defer s.wg.Done()
	s.hellos.active.Store(true)
	defer s.hellos.active.Store(false)
	deadline := time.Now().Add(advertiseCheckFor)
	reported := false
	for {
		err := s.probeAdvertise(addr)
		switch {
		case err == nil:
			s.advertiseErr.Store("")
			s.log.Info("advertised client address reaches this node", "advertise", addr)
			return
		case (time.Now().After(deadline) || errors.Is(err, errForeignServer)) && !reported:
			// A foreign server's HELLO is definite at once; a refused or
			// silent address may be a proxy or route still coming up.
			// Reported once; re-checked every advertiseRecheck (a proxy or
			// route that comes up later clears it).
			reported = true
			msg := fmt.Sprintf("advertised client address %s does not reach this node: %v", addr, err)
			s.log.Error(msg + " (fix --advertise: followers name it to clients)") // before status says it
			s.advertiseErr.Store(msg)
		}
		wait := 200 * time.Millisecond
		if reported {
			wait = advertiseRecheck
		}
		select {
		case <-s.closed:
			return
		case <-time.After(wait):
		}
	}
}

// probeAdvertise dials addr and checks that the HELLO it reads carries a
// nonce this process issued.
func (s *Server) probeAdvertise(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), advertiseCheckDial)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(advertiseCheckDial))
	if s.tlsCfg.Load() != nil {
		// Identity is proved by the nonce below, not by the certificate
		// (which names the address clients use, maybe not this one).
		cfg, err := s.peerTLSClient() // presents this node's certificate, for a server that requires one
		if err != nil {
			return err
		}
		cfg = cfg.Clone()
		cfg.InsecureSkipVerify = true //nolint:gosec // see above
		tc := tls.Client(nc, cfg)
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		nc = tc
	}
	b := make([]byte, wire.HelloLen)
	if _, err := io.ReadFull(nc, b); err != nil {
		return fmt.Errorf("no HELLO: %w", err)
	}
	h, err := wire.ParseHello(b)
	if err != nil {
		return fmt.Errorf("not a ticketing server: %w", err)
	}
	if !s.hellos.issued(&h.Nonce) {
		return errForeignServer
	}
	return nil
}

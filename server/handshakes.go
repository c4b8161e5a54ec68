package server

import (
	"container/list"
	"net"
	"sync"
	"time"
)

// HandshakeEvictAge is how long a connection must have been in the
// handshake (its slot taken, HELLO sent, no complete AUTH yet) before it may
// be closed to admit a newer one. An honest client answers HELLO within one
// round trip, far below it, so a herd of honest clients is never evicted,
// however many arrive at once (issue #29 item 1); connections that stay
// silent (or trickle) for this long are the only ones evicted.
const HandshakeEvictAge = time.Second

// handshakes tracks the connections still in the handshake (TLS and AUTH
// not yet done), apart from the authenticated connections' max_connections,
// so that silent connections cannot take the slots of authenticated ones
// (issue #22 item 1).
//
// Admission (issue #29 item 1) is by back-pressure, not by accept-and-evict:
//
//   - At most Config.MaxHandshakes connections are in the handshake. At that
//     cap the accept loop stops accepting (the kernel's listen backlog holds
//     the new connections) until one finishes, or until the oldest has been
//     in the handshake for HandshakeEvictAge: that one is closed and the
//     next connection accepted.
//   - At most Config.MaxHandshakesPerAddr of them from one source IP address
//     have a slot (HELLO sent, AUTH read). An accepted connection beyond it
//     is parked, nothing sent, in its address's FIFO queue, until a slot of
//     that address frees or the address's oldest slot holder has been in the
//     handshake for HandshakeEvictAge (then that one is closed). Parked
//     connections count against MaxHandshakes (they hold a descriptor).
//
// So a flood of connections that never authenticate only slows its own
// address's admission (one per HandshakeEvictAge per slot), a client with
// the right token from another address is accepted within
// HandshakeEvictAge, and one from the flooding address within about
// HandshakeEvictAge per MaxHandshakesPerAddr connections queued before it.
type handshakes struct {
	mu      sync.Mutex
	l       list.List // *conn in the handshake (with a slot or parked), by hsAt, oldest first
	perAddr map[string]*addrSlots
	room    chan struct{} // closed when a connection leaves the handshake (nil: no accept loop waits)
}

// addrSlots: one source address's connections in the handshake.
type addrSlots struct {
	active list.List // *conn with a slot, by hsAt
	parked list.List // *conn waiting for a slot, FIFO
}

func hostOf(nc net.Conn) string {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	h, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return h
}

// hsWaitRoom is called by an accept loop before each Accept: it returns
// once fewer than MaxHandshakes connections are in the handshake, closing
// the oldest when it has been there for HandshakeEvictAge, and false when
// the server closes meanwhile.
func (s *Server) hsWaitRoom(h *handshakes) bool {
	for {
		h.mu.Lock()
		if h.l.Len() < s.cfg.MaxHandshakes {
			h.mu.Unlock()
			return true
		}
		o := h.l.Front().Value.(*conn)
		wait := time.Duration(o.hsAt + int64(HandshakeEvictAge) - s.nanotime())
		if wait <= 0 {
			s.hsEvictLocked(o)
			h.mu.Unlock()
			return true
		}
		if h.room == nil {
			h.room = make(chan struct{})
		}
		room := h.room
		h.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-room:
		case <-t.C:
		case <-s.closed:
			t.Stop()
			return false
		}
		t.Stop()
	}
}

// hsAdmit records an accepted connection as in the handshake (parked until
// hsSlot gives it a slot).
func (s *Server) hsAdmit(c *conn) {
	h := s.hsOf(c)
	c.hsAddr = hostOf(c.raw)
	c.hsWake = make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perAddr == nil {
		h.perAddr = make(map[string]*addrSlots)
	}
	a := h.perAddr[c.hsAddr]
	if a == nil {
		a = &addrSlots{}
		h.perAddr[c.hsAddr] = a
	}
	c.hsAt = s.nanotime()
	c.hsElem = h.l.PushBack(c)
	c.hsAddrElem = a.parked.PushBack(c)
}

// hsSlot waits until c has one of its address's handshake slots: at once
// when one is free and no connection of the address is queued before it.
// It returns false when c was evicted, its handshake time ran out or the
// server closed; the caller closes c then.
func (s *Server) hsSlot(c *conn) bool {
	h := s.hsOf(c)
	var timeout <-chan time.Time
	for {
		h.mu.Lock()
		if c.hsElem == nil { // evicted
			h.mu.Unlock()
			return false
		}
		a := h.perAddr[c.hsAddr]
		s.hsPromoteLocked(h, a)
		if c.hsActive {
			h.mu.Unlock()
			return true
		}
		wait := HandshakeEvictAge
		if a.parked.Front().Value.(*conn) == c {
			// First in the queue: the address's oldest slot holder is
			// closed once it has been silent for HandshakeEvictAge.
			o := a.active.Front().Value.(*conn)
			if wait = time.Duration(o.hsAt + int64(HandshakeEvictAge) - s.nanotime()); wait <= 0 {
				s.hsEvictLocked(o) // promotes c
				h.mu.Unlock()
				continue
			}
		}
		h.mu.Unlock()
		if timeout == nil {
			tt := time.NewTimer(s.cfg.HandshakeTimeout)
			defer tt.Stop()
			timeout = tt.C
		}
		t := time.NewTimer(wait)
		select {
		case <-c.hsWake:
		case <-t.C:
		case <-timeout:
			t.Stop()
			s.hsDone(c)
			return false
		case <-s.closed:
			t.Stop()
			s.hsDone(c)
			return false
		}
		t.Stop()
	}
}

// hsPromoteLocked gives free slots of address a to its queue's first
// connections, and wakes the (new) first so it watches the oldest holder.
func (s *Server) hsPromoteLocked(h *handshakes, a *addrSlots) {
	promoted := false
	for a.parked.Len() > 0 && a.active.Len() < s.cfg.MaxHandshakesPerAddr {
		p := a.parked.Remove(a.parked.Front()).(*conn)
		p.hsActive = true
		p.hsAt = s.nanotime()
		h.l.MoveToBack(p.hsElem)
		p.hsAddrElem = a.active.PushBack(p)
		wake(p.hsWake)
		promoted = true
	}
	if promoted && a.parked.Len() > 0 {
		wake(a.parked.Front().Value.(*conn).hsWake)
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *Server) hsEvictLocked(o *conn) {
	s.hsRemoveLocked(o)
	s.handshakeEvictions.Add(1)
	o.raw.Close() // its handshake's read or write fails (or its hsSlot wait ends); it exits
	wake(o.hsWake)
}

func (s *Server) hsRemoveLocked(c *conn) {
	if c.hsElem == nil {
		return
	}
	h := s.hsOf(c)
	h.l.Remove(c.hsElem)
	c.hsElem = nil
	a := h.perAddr[c.hsAddr]
	if c.hsActive {
		a.active.Remove(c.hsAddrElem)
	} else {
		first := a.parked.Front() == c.hsAddrElem
		a.parked.Remove(c.hsAddrElem)
		if first && a.parked.Len() > 0 {
			wake(a.parked.Front().Value.(*conn).hsWake)
		}
	}
	c.hsAddrElem = nil
	s.hsPromoteLocked(h, a)
	if a.active.Len() == 0 && a.parked.Len() == 0 {
		delete(h.perAddr, c.hsAddr)
	}
	if h.room != nil {
		close(h.room)
		h.room = nil
	}
}

// hsDone: c's handshake ended (accepted or not).
func (s *Server) hsDone(c *conn) {
	h := s.hsOf(c)
	h.mu.Lock()
	s.hsRemoveLocked(c)
	h.mu.Unlock()
}

// hsOf is the handshake table of c's listener: the cluster peer port has
// its own, so a flood of client connections never delays a peer's.
func (s *Server) hsOf(c *conn) *handshakes {
	if c.peerPort {
		return &s.peerHS
	}
	return &s.hs
}

// handshaking returns how many client connections are in the handshake.
func (s *Server) handshaking() int {
	s.hs.mu.Lock()
	defer s.hs.mu.Unlock()
	return s.hs.l.Len()
}

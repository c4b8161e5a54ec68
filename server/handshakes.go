package server

import (
	"container/list"
	"net"
	"sync"
)

// handshakes tracks the connections still in the handshake (TLS and AUTH
// not yet done): at most Config.MaxHandshakes of them, at most
// Config.MaxHandshakesPerAddr from one source address. They have their own
// cap, apart from the authenticated connections' max_connections, so that
// silent connections cannot take the slots of authenticated ones (issue #22
// item 1). When a cap is reached the oldest handshaking connection (of that
// address, for the per-address cap) is closed to admit the new one: a flood
// of connections that never authenticate only evicts itself, while a client
// that answers within a round trip gets in.
type handshakes struct {
	mu      sync.Mutex
	l       list.List // *conn, oldest first
	perAddr map[string]int
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

// admit records c as handshaking, evicting the oldest when a cap is full.
func (s *Server) hsAdmit(c *conn) {
	h := &s.hs
	c.hsAddr = hostOf(c.raw)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perAddr == nil {
		h.perAddr = make(map[string]int)
	}
	if h.perAddr[c.hsAddr] >= s.cfg.MaxHandshakesPerAddr {
		for e := h.l.Front(); e != nil; e = e.Next() {
			if o := e.Value.(*conn); o.hsAddr == c.hsAddr {
				s.hsEvictLocked(o)
				break
			}
		}
	}
	if h.l.Len() >= s.cfg.MaxHandshakes {
		s.hsEvictLocked(h.l.Front().Value.(*conn))
	}
	c.hsElem = h.l.PushBack(c)
	h.perAddr[c.hsAddr]++
}

func (s *Server) hsEvictLocked(o *conn) {
	s.hsRemoveLocked(o)
	s.handshakeEvictions.Add(1)
	o.raw.Close() // its handshake's read or write fails; it exits
}

func (s *Server) hsRemoveLocked(c *conn) {
	if c.hsElem == nil {
		return
	}
	s.hs.l.Remove(c.hsElem)
	c.hsElem = nil
	if s.hs.perAddr[c.hsAddr]--; s.hs.perAddr[c.hsAddr] <= 0 {
		delete(s.hs.perAddr, c.hsAddr)
	}
}

// hsDone: c's handshake ended (accepted or not).
func (s *Server) hsDone(c *conn) {
	s.hs.mu.Lock()
	s.hsRemoveLocked(c)
	s.hs.mu.Unlock()
}

// handshaking returns how many connections are in the handshake.
func (s *Server) handshaking() int {
	s.hs.mu.Lock()
	defer s.hs.mu.Unlock()
	return s.hs.l.Len()
}

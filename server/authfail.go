package server

import (
	"sync"
	"time"
)

// Failed handshakes (issue #22 item 4): counted (status
// counters.auth_failures, ticketing_auth_failures_total), logged at most
// once per authFailLogEvery with the number since the last line (the
// address, never a token or proof), and slowed per source address: from
// the authFailFree-th failure within authFailWindow on, REJECT AUTH_FAILED
// waits authFailStep more per failure, at most authFailMaxDelay. The delay
// runs inside the handshake, so the handshake caps (MaxHandshakes, per
// address, oldest evicted) bound what a guesser can hold with it.
const (
	authFailWindow   = time.Minute
	authFailFree     = 3
	authFailStep     = 100 * time.Millisecond
	authFailMaxDelay = time.Second
	authFailLogEvery = time.Second
	authFailMaxAddrs = 4096 // addresses remembered; beyond, the table starts over
)

type authFailures struct {
	mu       sync.Mutex
	byAddr   map[string]*addrFailures
	lastLog  time.Time
	unlogged int
	lastAddr string
}

type addrFailures struct {
	n    int
	last time.Time
}

// authFailed records a failed handshake from addr and returns how long to
// wait before answering REJECT.
func (s *Server) authFailed(addr string) time.Duration {
	s.authFailCount.Add(1)
	a := &s.authFail
	now := time.Now()
	a.mu.Lock()
	if a.byAddr == nil || len(a.byAddr) >= authFailMaxAddrs {
		a.byAddr = make(map[string]*addrFailures)
	}
	f := a.byAddr[addr]
	if f == nil || now.Sub(f.last) > authFailWindow {
		f = &addrFailures{}
		a.byAddr[addr] = f
	}
	f.n++
	f.last = now
	n := f.n
	a.unlogged++
	a.lastAddr = addr
	logNow := now.Sub(a.lastLog) >= authFailLogEvery
	count := a.unlogged
	if logNow {
		a.lastLog, a.unlogged = now, 0
	}
	a.mu.Unlock()
	if logNow {
		s.log.Warn("handshake failed: wrong token", "remote", addr, "failures_since_last_line", count, "failures_from_remote", n)
	}
	if n < authFailFree {
		return 0
	}
	return min(time.Duration(n-authFailFree+1)*authFailStep, authFailMaxDelay)
}

// authSucceeded forgets addr's failures.
func (s *Server) authSucceeded(addr string) {
	a := &s.authFail
	a.mu.Lock()
	delete(a.byAddr, addr)
	a.mu.Unlock()
}

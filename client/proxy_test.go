package client

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// faultProxy is a fault-injecting TCP proxy between a client and a real
// server: it counts client→server bytes, can hold server→client bytes
// (delivering them later, in order), and can cut every connection.
type faultProxy struct {
	ln     net.Listener
	addr   string
	target string
	c2s    atomic.Int64 // client→server bytes forwarded

	mu      sync.Mutex
	hold    bool // default for new links
	links   map[*proxyLink]bool
	stopped bool
	wg      sync.WaitGroup
}

type proxyLink struct {
	cc, sc net.Conn
	mu     sync.Mutex // orders writes to cc with the hold buffer
	hold   bool
	held   []byte
}

func newProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, addr: ln.Addr().String(), target: target, links: map[*proxyLink]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.stop)
	return p
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		sc, err := net.Dial("tcp", p.target)
		if err != nil {
			cc.Close()
			continue
		}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			cc.Close()
			sc.Close()
			return
		}
		l := &proxyLink{cc: cc, sc: sc, hold: p.hold}
		p.links[l] = true
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pumpC2S(l)
		go p.pumpS2C(l)
	}
}

func (p *faultProxy) pumpC2S(l *proxyLink) {
	defer p.wg.Done()
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.cc.Read(buf)
		if n > 0 {
			if _, werr := l.sc.Write(buf[:n]); werr != nil {
				return
			}
			p.c2s.Add(int64(n))
		}
		if err != nil {
			return
		}
	}
}

func (p *faultProxy) pumpS2C(l *proxyLink) {
	defer p.wg.Done()
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.sc.Read(buf)
		if n > 0 {
			l.mu.Lock()
			if l.hold {
				l.held = append(l.held, buf[:n]...)
			} else if _, werr := l.cc.Write(buf[:n]); werr != nil {
				l.mu.Unlock()
				return
			}
			l.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (l *proxyLink) close() {
	l.cc.Close()
	l.sc.Close()
}

// setHold starts (true) or ends (false) holding server→client bytes; ending
// delivers what was held.
func (p *faultProxy) setHold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = on
	for l := range p.links {
		l.mu.Lock()
		l.hold = on
		if !on && len(l.held) > 0 {
			l.cc.Write(l.held)
			l.held = nil
		}
		l.mu.Unlock()
	}
}

// cut closes every connection; new ones are still accepted.
func (p *faultProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.close()
		delete(p.links, l)
	}
}

func (p *faultProxy) stop() {
	p.mu.Lock()
	p.stopped = true
	p.ln.Close()
	p.mu.Unlock()
	p.cut()
	p.wg.Wait()
}

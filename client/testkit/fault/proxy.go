// Package fault holds the testkit's fault injectors: a TCP proxy between a
// client and a real server that can hold, drop, delay or cut traffic, and a
// scripted fake server (fake.go) that speaks the real handshake and answers
// requests from a script. Both record what they saw with timestamps.
package fault

import (
	"net"
	"sync"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Frame is one request or response seen by the proxy (parsing mode only).
type Frame struct {
	Link   int       // the connection's index, in accept order
	Time   time.Time // when it was read
	Raw    []byte    // the whole frame; a hook may replace it
	Req    wire.Request
	Resp   wire.Response
	IsResp bool
}

// Verdict is a hook's decision about a frame.
type Verdict int

// Verdicts.
const (
	Pass       Verdict = iota // forward Raw
	Drop                      // forward nothing
	DropAndCut                // forward nothing, then cut the connection
	PassAndCut                // forward Raw, then cut the connection
)

// Proxy forwards TCP connections to Target. With Parse, it splits both
// directions into protocol frames (after the handshake) and records the
// requests; hooks may drop, rewrite or cut on them. Without Parse (TLS) it
// forwards bytes.
type Proxy struct {
	ln     net.Listener
	Target string
	Parse  bool

	// OnRequest and OnResponse, when set, decide about each frame (Parse only).
	OnRequest  func(f *Frame) Verdict
	OnResponse func(f *Frame) Verdict
	// MaxLinks > 0 closes connections accepted beyond that many live ones.
	MaxLinks int
	// BeforeDial, when set, runs after each accept, before the target is dialled.
	BeforeDial func()

	mu        sync.Mutex
	links     map[*link]bool
	nlinks    int
	accepts   []time.Time
	requests  []Frame
	hold      bool
	blackhole bool
	refuse    bool
	delay     time.Duration
	stopped   bool
	wg        sync.WaitGroup
}

type link struct {
	p      *Proxy
	n      int
	cc, sc net.Conn
	mu     sync.Mutex // orders writes to cc with held bytes
	held   []byte
	once   sync.Once
	cut    bool // set (under mu) by PassAndCut: nothing more reaches the client
}

// Listen starts a proxy on 127.0.0.1:0 to target. Call Start after setting
// the hooks.
func Listen(target string, parse bool) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &Proxy{ln: ln, Target: target, Parse: parse, links: map[*link]bool{}}, nil
}

// Start accepts connections in the background.
func (p *Proxy) Start() *Proxy {
	p.wg.Add(1)
	go p.accept()
	return p
}

// Addr is the proxy's listen address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepts are the times connections were accepted.
func (p *Proxy) Accepts() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.accepts...)
}

// Requests are the request frames seen so far (Parse only).
func (p *Proxy) Requests() []Frame {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Frame(nil), p.requests...)
}

// CountOp counts the recorded requests of op.
func (p *Proxy) CountOp(op wire.Op) int {
	n := 0
	for _, f := range p.Requests() {
		if f.Req.Op == op {
			n++
		}
	}
	return n
}

// Hold starts (true) or ends (false) holding server→client bytes; ending
// delivers what was held.
func (p *Proxy) Hold(on bool) {
	p.mu.Lock()
	p.hold = on
	ls := p.linksLocked()
	p.mu.Unlock()
	if on {
		return
	}
	for _, l := range ls {
		l.mu.Lock()
		if len(l.held) > 0 {
			l.cc.Write(l.held)
			l.held = nil
		}
		l.mu.Unlock()
	}
}

// Blackhole makes every connection, current and new, swallow all bytes in
// both directions (a silent network) until called with false.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

// Refuse makes the proxy close every new connection at once (a server that
// is down: connection refused or reset) until called with false.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Delay delays server→client bytes by d.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Cut closes every connection; new ones are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	ls := p.linksLocked()
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) linksLocked() []*link {
	var ls []*link
	for l := range p.links {
		ls = append(ls, l)
	}
	return ls
}

func (p *Proxy) state() (hold, blackhole bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hold, p.blackhole, p.delay
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepts = append(p.accepts, time.Now())
		if p.stopped || p.refuse || (p.MaxLinks > 0 && len(p.links) >= p.MaxLinks) {
			p.mu.Unlock()
			cc.Close()
			continue
		}
		p.mu.Unlock()
		if p.BeforeDial != nil {
			p.BeforeDial()
		}
		sc, err := net.DialTimeout("tcp", p.Target, 5*time.Second)
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
		l := &link{p: p, n: p.nlinks, cc: cc, sc: sc}
		p.nlinks++
		p.links[l] = true
		p.wg.Add(2)
		p.mu.Unlock()
		go l.pump(false)
		go l.pump(true)
	}
}

func (l *link) close() {
	l.once.Do(func() {
		l.cc.Close()
		l.sc.Close()
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

// pump copies one direction: s2c (server to client) or client to server.
func (l *link) pump(s2c bool) {
	defer l.p.wg.Done()
	defer l.close()
	src, dst := l.cc, l.sc
	skip := wire.AuthLen // handshake bytes forwarded unparsed
	if s2c {
		src, dst = l.sc, l.cc
		skip = wire.HelloLen + wire.WelcomeLen
	}
	var pend []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			_, bh, _ := l.p.state()
			if bh {
				pend = pend[:0]
				skip = 1 << 62 // a black-holed stream is never parsed again
			} else if !l.p.Parse {
				if !l.write(dst, s2c, buf[:n]) {
					return
				}
			} else {
				pend = append(pend, buf[:n]...)
				var ok bool
				if pend, skip, ok = l.frames(dst, s2c, pend, skip); !ok {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// frames forwards the complete frames at the front of b; it returns the rest.
func (l *link) frames(dst net.Conn, s2c bool, b []byte, skip int) ([]byte, int, bool) {
	if skip > 0 {
		k := min(skip, len(b))
		if !l.write(dst, s2c, b[:k]) {
			return nil, 0, false
		}
		b, skip = b[k:], skip-k
		if skip > 0 {
			return b[:0], skip, true
		}
	}
	for len(b) >= wire.HeaderLen {
		var n int
		var err error
		if s2c {
			n, err = wire.ResponseFrameLen(b)
		} else {
			n, err = wire.RequestFrameLen(b)
		}
		if err != nil {
			// Not a frame we understand: forward raw from here on.
			l.write(dst, s2c, b)
			return b[:0], 1 << 62, true
		}
		if n == 0 || n > len(b) {
			break
		}
		f := Frame{Link: l.n, Time: time.Now(), Raw: append([]byte(nil), b[:n]...), IsResp: s2c}
		v := Pass
		if s2c {
			f.Resp, _, _ = wire.ParseResponse(f.Raw)
			if h := l.p.OnResponse; h != nil {
				v = h(&f)
			}
		} else {
			f.Req, _, _ = wire.ParseRequest(f.Raw)
			l.p.mu.Lock()
			l.p.requests = append(l.p.requests, f)
			l.p.mu.Unlock()
			if h := l.p.OnRequest; h != nil {
				v = h(&f)
			}
		}
		switch v {
		case Pass, PassAndCut:
			if v == PassAndCut && !s2c {
				// Before the request reaches the server, so that its answer
				// cannot be forwarded in the moment before the close.
				l.mu.Lock()
				l.cut = true
				l.mu.Unlock()
			}
			if !l.write(dst, s2c, f.Raw) {
				return nil, 0, false
			}
			if v == PassAndCut {
				return nil, 0, false
			}
		case DropAndCut:
			return nil, 0, false
		}
		b = b[n:]
	}
	return append([]byte(nil), b...), 0, true
}

func (l *link) write(dst net.Conn, s2c bool, b []byte) bool {
	if !s2c {
		_, err := dst.Write(b)
		return err == nil
	}
	hold, _, delay := l.p.state()
	if delay > 0 {
		time.Sleep(delay)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return false
	}
	if hold {
		l.held = append(l.held, b...)
		return true
	}
	_, err := dst.Write(b)
	return err == nil
}

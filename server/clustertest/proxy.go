package clustertest

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Net is a fault-injecting network of TCP proxies on loopback, one in front
// of each node's peer port. Nodes advertise the proxy addresses as their peer
// addresses, so every raft stream and every clock-sampling connection between
// nodes goes through a proxy.
//
// Faults are per directed link (src → dst). A proxy knows dst (the node it
// fronts); it learns src when it accepts a connection, by finding which
// registered node process owns the dialing socket (/proc on Linux, see
// SetPID). Connections whose source is unknown (the test's own, or every
// connection of an in-process cluster, where all nodes share one process)
// count as coming from "" and are cut only by Isolate.
//
// A blocked link behaves like a partition: existing connections on it are
// closed, new ones are accepted and then blackholed (nothing forwarded, held
// open until the link heals or a minute passes), so dialers see timeouts, as
// across a real partition, rather than fast refusals.
type Net struct {
	mu      sync.Mutex
	proxies map[string]*Proxy // by dst node id
	pids    map[int]string    // node process → node id
	blocked map[[2]string]bool
	isol    map[string]bool // every link to and from the node, known source or not
	healed  chan struct{}   // closed (and replaced) on every rule change
	closed  bool
}

// NewNet returns an empty network.
func NewNet() *Net {
	return &Net{proxies: map[string]*Proxy{}, pids: map[int]string{}, blocked: map[[2]string]bool{}, isol: map[string]bool{}, healed: make(chan struct{})}
}

// Proxy fronts one node's peer port.
type Proxy struct {
	net    *Net
	ID     string // node id of the destination
	ln     net.Listener
	mu     sync.Mutex
	target string // the node's real peer address; "" until known
	conns  map[*link]struct{}
	wg     sync.WaitGroup
}

type link struct {
	src        string
	in         net.Conn
	mu         sync.Mutex
	out        net.Conn // nil until dialed (and while blackholed)
	closed     bool
	blackholed bool // under the proxy's mu
}

func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.in.Close()
	if l.out != nil {
		l.out.Close()
	}
}

// setOut installs the dialed connection; false (and out closed) when the
// link was closed meanwhile.
func (l *link) setOut(out net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		out.Close()
		return false
	}
	l.out = out
	return true
}

// Listen opens the proxy for node id on a free loopback port. Its target is
// set later (SetTarget) once the node's real peer port is known; until then
// connections are blackholed.
func (n *Net) Listen(id string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{net: n, ID: id, ln: ln, conns: map[*link]struct{}{}}
	n.mu.Lock()
	n.proxies[id] = p
	n.mu.Unlock()
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address: the node's advertised peer address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget points the proxy at the node's real peer address (a restarted
// node gets a new port) and closes connections to the old one.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	old := p.target
	p.target = addr
	var cs []*link
	if old != addr {
		for l := range p.conns {
			cs = append(cs, l)
		}
	}
	p.mu.Unlock()
	for _, l := range cs {
		l.close()
	}
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	cs := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		cs = append(cs, l)
	}
	p.mu.Unlock()
	for _, l := range cs {
		l.close()
	}
	p.wg.Wait()
}

// SetPID registers the process of node id, so links from it are recognised.
func (n *Net) SetPID(id string, pid int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for p, i := range n.pids {
		if i == id {
			delete(n.pids, p)
		}
	}
	if pid > 0 {
		n.pids[pid] = id
	}
}

// Block cuts the directed links src → dst for every dst in dsts.
func (n *Net) Block(src string, dsts ...string) {
	n.mu.Lock()
	for _, d := range dsts {
		n.blocked[[2]string{src, d}] = true
	}
	n.changedLocked()
	n.mu.Unlock()
	n.enforce()
}

// Isolate cuts every link to and from id (both directions, every peer,
// and connections of unknown source to it).
func (n *Net) Isolate(id string) {
	n.mu.Lock()
	n.isol[id] = true
	n.changedLocked()
	n.mu.Unlock()
	n.enforce()
}

// Partition splits the nodes into the given groups: links between groups
// are cut in both directions; links within a group stay.
func (n *Net) Partition(groups ...[]string) {
	n.mu.Lock()
	for i, g := range groups {
		for j, h := range groups {
			if i == j {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					n.blocked[[2]string{a, b}] = true
				}
			}
		}
	}
	n.changedLocked()
	n.mu.Unlock()
	n.enforce()
}

// Heal restores every link.
func (n *Net) Heal() {
	n.mu.Lock()
	n.blocked = map[[2]string]bool{}
	n.isol = map[string]bool{}
	n.changedLocked()
	n.mu.Unlock()
}

// Close closes every proxy.
func (n *Net) Close() {
	n.mu.Lock()
	n.closed = true
	ps := make([]*Proxy, 0, len(n.proxies))
	for _, p := range n.proxies {
		ps = append(ps, p)
	}
	n.changedLocked()
	n.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
}

func (n *Net) changedLocked() {
	close(n.healed)
	n.healed = make(chan struct{})
}

func (n *Net) cut(src, dst string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cutLocked(src, dst)
}

func (n *Net) cutLocked(src, dst string) bool {
	return n.isol[dst] || src != "" && (n.isol[src] || n.blocked[[2]string{src, dst}])
}

// enforce closes existing connections on links that are now cut.
func (n *Net) enforce() {
	n.mu.Lock()
	ps := make([]*Proxy, 0, len(n.proxies))
	for _, p := range n.proxies {
		ps = append(ps, p)
	}
	n.mu.Unlock()
	for _, p := range ps {
		var cs []*link
		p.mu.Lock()
		for l := range p.conns {
			if !l.blackholed && n.cut(l.src, p.ID) {
				cs = append(cs, l)
			}
		}
		p.mu.Unlock()
		for _, l := range cs {
			l.close()
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	src := p.net.sourceOf(in)
	l := &link{src: src, in: in}
	p.mu.Lock()
	p.conns[l] = struct{}{}
	target := p.target
	p.mu.Unlock()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	}()
	if target == "" || p.net.cut(src, p.ID) {
		p.blackhole(l)
		return
	}
	out, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return // like a refused connection: the node is down
	}
	if !l.setOut(out) {
		return
	}
	// Re-check: a rule may have changed while dialing.
	if p.net.cut(src, p.ID) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}

// blackhole holds a connection on a cut link without forwarding anything
// until the rules change (then closes it: the dialer retries) or a minute.
func (p *Proxy) blackhole(l *link) {
	p.mu.Lock()
	l.blackholed = true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(io.Discard, l.in) }()
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	for {
		p.net.mu.Lock()
		ch, closed := p.net.healed, p.net.closed
		p.net.mu.Unlock()
		if closed {
			return
		}
		select {
		case <-ch:
			if !p.net.cut(l.src, p.ID) {
				return
			}
		case <-t.C:
			return
		}
	}
}

// sourceOf finds the registered node process that owns the other end of c.
func (n *Net) sourceOf(c net.Conn) string {
	n.mu.Lock()
	if len(n.pids) == 0 {
		n.mu.Unlock()
		return ""
	}
	pids := make(map[int]string, len(n.pids))
	for p, id := range n.pids {
		pids[p] = id
	}
	n.mu.Unlock()
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return ""
	}
	inode := socketInode(ra.Port, la.Port)
	if inode == "" {
		return ""
	}
	want := "socket:[" + inode + "]"
	for pid, id := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name())); err == nil && l == want {
				return id
			}
		}
	}
	return ""
}

// socketInode returns the inode of the TCP socket whose local port is
// localPort and remote port remotePort (Linux /proc/net/tcp{,6}), "" if none.
func socketInode(localPort, remotePort int) string {
	lp := fmt.Sprintf(":%04X", localPort)
	rp := fmt.Sprintf(":%04X", remotePort)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || !strings.HasSuffix(fs[1], lp) || !strings.HasSuffix(fs[2], rp) {
				continue
			}
			if !loopbackHex(fs[1]) {
				continue
			}
			fh.Close()
			return fs[9]
		}
		fh.Close()
	}
	return ""
}

// loopbackHex reports whether a /proc/net/tcp address (hex ip:port) is on
// loopback (127.0.0.0/8 or ::1 / ::ffff:127.x).
func loopbackHex(a string) bool {
	ip, _, _ := strings.Cut(a, ":")
	b, err := hex.DecodeString(ip)
	if err != nil {
		return false
	}
	switch len(b) {
	case 4: // little-endian u32
		return b[3] == 127 || b[0] == 127
	case 16:
		return true
	}
	return false
}

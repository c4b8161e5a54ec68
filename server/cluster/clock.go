package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
)

// clockStale is how old a peer's last clock sample may be before it no
// longer counts as verified.
const clockStale = 3 * time.Second

// ClockSample is the leader's latest view of one peer's wall clock.
type ClockSample struct {
	ID       string        `json:"id"`
	Offset   time.Duration `json:"offset"` // peer − leader, midpoint estimate
	RTT      time.Duration `json:"rtt"`
	Bound    time.Duration `json:"bound"` // |offset| + rtt/2
	At       time.Time     `json:"at"`
	Err      string        `json:"err,omitempty"`
	Applied  uint64        `json:"applied"`
	Incarn   uint32        `json:"incarnation"`
	Durable  bool          `json:"durable"`
	Healthy  bool          `json:"healthy"`
	Contact  bool          `json:"contact"` // sampled within clockStale
	ClientAd string        `json:"client_addr"`
}

// clockHealth samples every other voter's clock over the authenticated peer
// port about once a second (P ping: offset = server_time − (t0+t1)/2, error
// ±rtt/2) while this node leads.
type clockHealth struct {
	n       *Node
	mu      sync.Mutex
	samples map[string]ClockSample
	healthy bool
	reason  string
	started time.Time       // when start was called
	verdict chan struct{}   // closed at the first verdict: healthy, or a skew measured beyond the bound
	kick    chan struct{}   // capacity 1: sample again now (AddNode)
	down    map[string]bool // on mu: peers whose last sample failed
}

func newClockHealth(n *Node) *clockHealth {
	return &clockHealth{n: n, samples: map[string]ClockSample{}, reason: "not sampled yet", kick: make(chan struct{}, 1), down: map[string]bool{}}
}

// waitSample asks for a round now and waits until id has a successful
// sample taken at or after from (bounded by ctx; the error is ctx's).
func (c *clockHealth) waitSample(ctx context.Context, id string, from time.Time) (ClockSample, error) {
	for {
		select {
		case c.kick <- struct{}{}:
		default:
		}
		c.mu.Lock()
		s, ok := c.samples[id]
		c.mu.Unlock()
		if ok && s.Err == "" && !s.At.Before(from) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Healthy reports whether new grants may be made, and why not.
func (c *clockHealth) Healthy() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.healthy, c.reason
}

// Samples returns the latest sample per peer.
func (c *clockHealth) Samples() []ClockSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ClockSample, 0, len(c.samples))
	for _, s := range c.samples {
		out = append(out, s)
	}
	return out
}

// start resets the health for a new term of leadership and returns a
// channel closed at the first verdict of run: healthy, or a clock measured
// beyond the bound.
func (c *clockHealth) start() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.healthy, c.reason = false, "not sampled yet"
	c.samples = map[string]ClockSample{}
	c.verdict = make(chan struct{})
	c.started = time.Now()
	return c.verdict
}

func (c *clockHealth) decidedLocked() {
	if c.verdict == nil {
		return
	}
	select {
	case <-c.verdict:
	default:
		close(c.verdict)
	}
}

// run samples the peers' clocks about once a second until ctx ends; start
// must have been called first.
func (c *clockHealth) run(ctx context.Context) {
	clients := map[string]*peerClient{}
	defer func() {
		for _, pc := range clients {
			pc.close()
		}
	}()
	for {
		c.round(ctx, clients)
		// About once a second; but until the first verdict (a new leader
		// waits for it before serving) retry quickly: one slow or failed
		// sample must not leave a new leader without a verdict for a second.
		wait := time.Second
		c.mu.Lock()
		if !c.isDecidedLocked() && time.Since(c.started) < firstVerdictWait {
			wait = 50 * time.Millisecond
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			c.mu.Lock()
			c.healthy, c.reason = false, "not the leader"
			c.mu.Unlock()
			return
		case <-time.After(wait):
		case <-c.kick:
		}
	}
}

func (c *clockHealth) isDecidedLocked() bool {
	if c.verdict == nil {
		return true
	}
	select {
	case <-c.verdict:
		return true
	default:
		return false
	}
}

func (c *clockHealth) round(ctx context.Context, clients map[string]*peerClient) {
	cf := c.n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	var voters []raft.Server
	seen := map[string]bool{}
	for _, s := range cf.Configuration().Servers {
		id := string(s.ID)
		seen[id] = true
		if id == c.n.cfg.NodeID {
			continue
		}
		if s.Suffrage == raft.Voter {
			voters = append(voters, s)
		}
		pc := clients[id]
		if pc == nil || pc.addr != string(s.Address) {
			if pc != nil {
				pc.close()
			}
			pc = &peerClient{addr: string(s.Address), token: c.n.cfg.PeerToken, tls: c.n.cfg.TLSClient}
			clients[id] = pc
		}
	}
	for id, pc := range clients {
		if !seen[id] {
			pc.close()
			delete(clients, id)
		}
	}
	// Samples are taken in parallel and health is re-evaluated as each one
	// arrives: an unreachable peer (its sample runs into the timeout) must
	// not hold back the verdict of the quorum that answered, or a new
	// leader would refuse grants for a whole sample timeout after every
	// election that left a peer partitioned.
	results := make(chan ClockSample, len(clients))
	for id, pc := range clients {
		go func() { results <- c.sample(ctx, id, pc) }()
	}
	c.mu.Lock()
	for id := range c.samples {
		if !seen[id] {
			delete(c.samples, id)
		}
	}
	c.evaluateLocked(voters)
	c.mu.Unlock()
	for range len(clients) {
		s := <-results
		c.mu.Lock()
		// A peer back after failed samples, or restarted, may be catching
		// up: the leader beats its clock for a while (ClockBeat).
		if old, ok := c.samples[s.ID]; s.Err == "" && (c.down[s.ID] || ok && old.Incarn != 0 && s.Incarn != 0 && old.Incarn != s.Incarn) {
			c.n.beatUntil.Store(c.n.now().UnixNano() + int64(beatWindow))
		}
		if s.Err != "" {
			c.down[s.ID] = true
		} else {
			delete(c.down, s.ID)
		}
		if s.Err != "" {
			if old, ok := c.samples[s.ID]; ok {
				old.Err = s.Err
				s = old
			}
		}
		c.samples[s.ID] = s
		c.evaluateLocked(voters)
		c.mu.Unlock()
	}
}

// evaluateLocked decides clock health from the latest samples. Healthy: no
// voter in contact is measured beyond the bound (|offset| − rtt/2 above
// it), and (with this node) a quorum of voters is verified (|offset| +
// rtt/2 within it).
func (c *clockHealth) evaluateLocked(voters []raft.Server) {
	now := c.n.now()
	verified := 1
	healthy, reason, skewed := true, "", false
	for _, v := range voters {
		s, ok := c.samples[string(v.ID)]
		fresh := ok && s.Err == "" && now.Sub(s.At) < clockStale
		s.Contact = fresh
		s.Healthy = fresh && s.Bound <= c.n.cfg.MaxClockSkew
		if ok {
			c.samples[string(v.ID)] = s
		}
		switch {
		case s.Healthy:
			verified++
		case fresh && s.Offset.Abs()-s.RTT/2 > c.n.cfg.MaxClockSkew:
			// Beyond the bound even at the most favourable end of the
			// error interval: measured skew, fail closed. (A sample whose
			// round trip alone is too slow to decide — a peer that just
			// resumed from a stall — is inconclusive: it verifies nothing,
			// but does not count as skew; the quorum rule below decides.)
			healthy, skewed = false, true
			reason = fmt.Sprintf("clock skew of %s is %v ± %v, above the %v bound", v.ID, s.Offset.Round(time.Millisecond), (s.RTT / 2).Round(time.Microsecond), c.n.cfg.MaxClockSkew)
		}
	}
	if healthy && verified < (len(voters)+1)/2+1 {
		healthy = false
		reason = fmt.Sprintf("only %d of %d voters have a verified clock", verified, len(voters)+1)
	}
	if healthy != c.healthy {
		if healthy {
			c.n.log.Info("clock health verified")
		} else {
			c.n.log.Warn("clock unhealthy: new grants fail closed", "reason", reason)
		}
	}
	c.healthy, c.reason = healthy, reason
	if healthy || skewed {
		// A verdict: verified, or a clock measured beyond the bound (not
		// merely too few samples yet, which the next round may fix).
		c.decidedLocked()
	}
}

func (c *clockHealth) sample(ctx context.Context, id string, pc *peerClient) ClockSample {
	ctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	defer cancel()
	s := ClockSample{ID: id}
	t0 := c.n.now()
	serverUS, err := pc.ping(ctx)
	t1 := c.n.now()
	if err != nil {
		s.Err = err.Error()
		return s
	}
	rtt := t1.Sub(t0)
	mid := t0.Add(rtt / 2)
	s.Offset = time.UnixMicro(serverUS).Sub(mid)
	s.RTT = rtt
	s.Bound = s.Offset.Abs() + rtt/2
	s.At = t1
	if st, err := pc.status(ctx); err == nil {
		s.Applied = st.AppliedIndex
		s.Incarn = st.Incarnation
		s.Durable = st.Durable
		s.ClientAd = st.Advertise
		c.n.checkIncarnation(id, st)
	}
	return s
}

// peerStatus is the part of a peer's `status` reply the leader reads.
type peerStatus struct {
	NodeID       string `json:"node_id"`
	AppliedIndex uint64 `json:"applied_index"`
	Incarnation  uint32 `json:"incarnation"`
	Durable      bool   `json:"durable"`
	Advertise    string `json:"client_addr"`
}

// peerClient is one authenticated protocol connection to a peer's peer port
// for P and read-only Q, one request at a time.
type peerClient struct {
	addr, token string
	tls         *tls.Config
	mu          sync.Mutex
	nc          net.Conn
	id          uint32
}

func (p *peerClient) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nc != nil {
		p.nc.Close()
		p.nc = nil
	}
}

func (p *peerClient) roundTrip(ctx context.Context, frame func(b []byte, id uint32) []byte) (wire.Response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nc == nil {
		nc, err := DialPeer(ctx, p.addr, p.token, p.tls)
		if err != nil {
			return wire.Response{}, err
		}
		p.nc = nc
	}
	r, err := p.exchange(ctx, frame)
	if err != nil {
		p.nc.Close()
		p.nc = nil
	}
	return r, err
}

func (p *peerClient) exchange(ctx context.Context, frame func(b []byte, id uint32) []byte) (wire.Response, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(time.Second)
	}
	_ = p.nc.SetDeadline(dl)
	p.id++
	if _, err := p.nc.Write(frame(nil, p.id)); err != nil {
		return wire.Response{}, err
	}
	buf := make([]byte, 0, 512)
	var tmp [512]byte
	for {
		r, n, err := wire.ParseResponse(buf)
		if err != nil {
			return wire.Response{}, err
		}
		if n > 0 {
			if r.ReqID != p.id {
				return wire.Response{}, fmt.Errorf("peer answered req_id %d, want %d", r.ReqID, p.id)
			}
			return r, nil
		}
		m, err := p.nc.Read(tmp[:])
		if err != nil {
			return wire.Response{}, err
		}
		buf = append(buf, tmp[:m]...)
	}
}

func (p *peerClient) ping(ctx context.Context) (int64, error) {
	r, err := p.roundTrip(ctx, wire.AppendPing)
	if err != nil {
		return 0, err
	}
	if r.Status != wire.StatusPong {
		return 0, fmt.Errorf("peer answered %c to a ping", r.Status)
	}
	return int64(r.Value), nil
}

func (p *peerClient) status(ctx context.Context) (peerStatus, error) {
	var st peerStatus
	r, err := p.roundTrip(ctx, func(b []byte, id uint32) []byte {
		return wire.AppendQuery(b, id, []byte(`{"cmd":"status"}`))
	})
	if err != nil {
		return st, err
	}
	if r.Status != wire.StatusAdmin {
		return st, fmt.Errorf("peer answered %c to status", r.Status)
	}
	err = json.Unmarshal(r.Payload, &st)
	return st, err
}

// Package server is the Ticketing lock server, a single node or a cluster
// member (server/cluster; the two are backends behind one seam, backend.go):
// the listener, the protocol.md §1 handshake (HMAC challenge-response,
// optional TLS), the pipelined connection loop, admin queries, metrics and
// graceful shutdown. The lock rules live in server/locktable; the bytes in
// client/wire.
//
// Concurrency. On a single node, keys are sharded over Config.Shards lock
// tables, each behind its own mutex with its own timer goroutine (a cluster
// member has the raft FSM's one table). Each connection has a reader
// goroutine, which decodes a batch of requests, applies them and flushes the
// responses in one write, and a writer goroutine that flushes answers other
// goroutines deliver to it (a handoff, a wait timeout, a changing admin
// command's answer). Lock order: shard.mu → conn.mu → (nothing).
// Server.connsMu is never held with either.
package server

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/cluster"
	"github.com/ticketing/ticketing/server/locktable"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("server: closed")

// leaseSlack is added to every lease deadline so that a lease never ends
// before lease_ms has elapsed since its grant, even though a batch's grant
// instant is read once at the batch's start (protocol.md §5 "Leases").
// Wait deadlines get no slack: a waiter whose wait elapsed is never granted.
const leaseSlack = time.Millisecond

// Server is a running lock server: a single node or a cluster member.
type Server struct {
	cfg    Config
	log    *slog.Logger
	start  time.Time // monotonic base of the table clock
	now    func() time.Time
	lock   backend // the sharded tables, or the raft node
	grace  *grace  // restart grace (single node with a data dir), else nil
	tlsCfg atomic.Pointer[tls.Config]
	certs  *certStore

	lnMu     sync.Mutex
	ln       net.Listener
	metrics  *http.Server
	connsMu  sync.RWMutex
	conns    map[uint64]*conn
	nextConn atomic.Uint64
	hs       handshakes   // client connections in the handshake (their own cap)
	peerHS   handshakes   // the cluster peer port's, capped alike
	live     atomic.Int64 // past the handshake (slot taken before WELCOME)

	handshakeEvictions atomic.Uint64 // handshaking connections closed to admit newer ones
	peakLive           atomic.Int64  // most authenticated connections since the last memory release
	releasing          atomic.Bool
	authFail           authFailures
	authFailCount      atomic.Uint64 // handshakes answered REJECT AUTH_FAILED

	// cluster mode (the raft node is s.lock's); nil peerLn: single node
	peerLn      net.Listener
	incarnation uint32
	limits      locktable.Limits

	errorsCount  atomic.Uint64
	busyExtra    atomic.Uint64 // B answered by the server itself (draining, max_inflight)
	draining     atomic.Bool
	lastMoved    atomic.Int64 // nanotime of the last lock request answered M (cluster)
	closed       chan struct{}
	hellos       helloNonces  // nonces sent while the advertise self-check runs
	advertiseErr atomic.Value // string: why the advertised address does not reach this node
	closeOnce    sync.Once
	wg           sync.WaitGroup // accept loop, timers, connections
}

// Start validates cfg, opens the listener (and metrics listener) and serves
// in the background. Use Addr for the bound address (Listen may use port 0).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	lc.KeepAliveConfig = keepAliveConfig
	ln := cfg.Listener
	if ln == nil {
		ln, err = lc.Listen(ctx, "tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("server: listen %s: %w", cfg.Listen, err)
		}
	}
	if err := s.startMetrics(ctx); err != nil {
		ln.Close()
		return nil, err
	}
	s.setListener(ln)
	for _, w := range s.cfg.insecureWarnings() {
		s.log.Warn(w)
	}
	switch rec, until := s.grace.recovering(s.nanotime()); {
	case rec:
		s.log.Warn("restart grace: the last stop was unclean; acquires are answered busy RECOVERING until every lease granted before it has ended",
			"until", until.UTC().Format(time.RFC3339Nano))
	case cfg.Cluster == nil && cfg.DataDir == "":
		s.log.Warn("no data dir: held locks are forgotten on a restart (a restarted node grants them again at once); set --data-dir for a restart grace")
	}
	if cfg.Cluster != nil {
		if err := s.startCluster(ctx); err != nil {
			ln.Close()
			if s.metrics != nil {
				s.metrics.Close()
			}
			return nil, err
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.Serve(ln)
	}()
	return s, nil
}

// New builds a server from cfg without listening. It loads TLS files and the
// persisted token high-water mark.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:    cfg,
		log:    cfg.Logger,
		start:  time.Now(),
		now:    cfg.Now,
		conns:  make(map[uint64]*conn),
		closed: make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.now == nil {
		s.now = time.Now
	}
	if cfg.TLSCertFile != "" {
		cs, err := newCertStore(cfg, s.log, s.now)
		if err != nil {
			return nil, err
		}
		s.certs = cs
		s.tlsCfg.Store(cs.config())
	}
	limits := locktable.Limits{
		MaxKeys:          cfg.MaxKeys,
		MaxWaiters:       cfg.MaxWaiters,
		MaxWaitersPerKey: cfg.MaxWaitersPerKey,
		IdleCache:        max(1, cfg.IdleKeyCache/cfg.Shards),
		LeaseSlack:       int64(leaseSlack),
	}
	s.limits = limits
	if cfg.Cluster != nil {
		// The raft backend is made by startCluster.
		inc, err := randomIncarnation()
		if err != nil {
			return nil, err
		}
		s.incarnation = inc
		return s, nil
	}
	first := locktable.FirstToken(s.now().UnixMilli())
	var tokens locktable.TokenSource = locktable.NewCounter(first)
	if cfg.DataDir != "" {
		pt, err := openPersistentTokens(cfg.DataDir, first, cfg.TokenBlock, s.fatal)
		if err != nil {
			return nil, err
		}
		tokens = pt
	}
	s.lock = newTables(s, cfg.Shards, limits, tokens)
	if cfg.DataDir != "" {
		g, err := openGrace(s)
		if err != nil {
			return nil, err
		}
		s.grace = g // its writer starts with Serve
	}
	return s, nil
}

func (s *Server) fatal(err error) {
	s.log.Error("fatal: cannot persist the fencing-token high-water mark; stopping", "err", err)
	panic(fmt.Sprintf("ticketing: cannot persist fencing tokens: %v", err))
}

// Addr returns the client listener's address, "" before Serve.
func (s *Server) Addr() string {
	ln := s.listener()
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

func (s *Server) listener() net.Listener {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	return s.ln
}

func (s *Server) setListener(ln net.Listener) {
	s.lnMu.Lock()
	s.ln = ln
	s.lnMu.Unlock()
}

// MetricsAddr returns the metrics listener's address, "" when off.
func (s *Server) MetricsAddr() string {
	if s.metrics == nil {
		return ""
	}
	return s.metrics.Addr
}

// Serve accepts connections on ln until Shutdown or Close; it returns
// ErrServerClosed then.
func (s *Server) Serve(ln net.Listener) error {
	s.setListener(ln)
	s.grace.start()
	select {
	case <-s.closed:
		ln.Close()
		return ErrServerClosed
	default:
	}
	s.lock.run()
	var delay time.Duration
	for {
		if !s.hsWaitRoom(&s.hs) { // back-pressure at the handshake cap: the backlog holds the rest
			ln.Close()
			return ErrServerClosed
		}
		nc, err := ln.Accept()
		if err != nil {
			if s.draining.Load() { // Shutdown closed ln before closing s.closed
				return ErrServerClosed
			}
			select {
			case <-s.closed:
				return ErrServerClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// e.g. EMFILE: back off like net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("server: accept: %w", err)
		}
		delay = 0
		c := newConn(s, nc)
		s.hsAdmit(c)
		s.wg.Add(1)
		go c.serve()
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// nanotime is the table clock: monotonic ns since the server started.
func (s *Server) nanotime() int64 { return int64(time.Since(s.start)) }

// Deliver implements locktable.Sink: an answer to a queued acquire, made
// while some goroutine holds the shard lock. It is appended to the owning
// connection's output and its writer is woken.
func (s *Server) Deliver(e locktable.Effect) {
	s.connsMu.RLock()
	c := s.conns[e.Owner.Conn]
	s.connsMu.RUnlock()
	if c == nil {
		return
	}
	c.deliver(e)
}

// Memory after a connection flood (issue #22 item 7): each connection costs
// about 22 KiB of heap while open (docs/operations.md); when the open
// connections fall by releaseDrop or more and to half their peak, the freed
// heap is returned to the OS (after releaseSettle, so the rest of the
// flood's closes are included), instead of the Go runtime keeping it for
// minutes.
const (
	releaseDrop   = 1000
	releaseSettle = time.Second
)

// connOpened counts an authenticated connection (its slot was taken).
func (s *Server) connOpened(n int64) {
	for p := s.peakLive.Load(); n > p && !s.peakLive.CompareAndSwap(p, n); p = s.peakLive.Load() {
	}
}

// connClosed frees an authenticated connection's slot.
func (s *Server) connClosed() {
	n := s.live.Add(-1)
	p := s.peakLive.Load()
	if p-n < releaseDrop || n > p/2 || !s.peakLive.CompareAndSwap(p, n) || !s.releasing.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.releasing.Store(false)
		select {
		case <-time.After(releaseSettle):
		case <-s.closed:
			return
		}
		debug.FreeOSMemory()
		s.log.Debug("returned freed memory to the OS after a drop in connections", "connections", s.live.Load(), "peak", p)
	}()
}

// Draining reports whether the server is shutting down.
func (s *Server) Draining() bool { return s.draining.Load() }

// Shutdown stops accepting, answers every queued acquire B SHUTTING_DOWN,
// answers new acquires B SHUTTING_DOWN and new handshakes REJECT
// SHUTTING_DOWN, flushes and closes every connection, and waits for the
// server's goroutines until ctx ends. Held locks are simply dropped with the
// process (single node).
func (s *Server) Shutdown(ctx context.Context) error {
	s.lock.handOver()
	s.draining.Store(true)
	if ln := s.listener(); ln != nil {
		ln.Close()
	}
	s.lock.drain()
	s.connsMu.RLock()
	cs := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		cs = append(cs, c)
	}
	s.connsMu.RUnlock()
	for _, c := range cs {
		c.flush()
	}
	s.closeOnce.Do(func() { close(s.closed) })
	// Each connection writes what it has queued (bounded by the write
	// timeout, and by ctx below) before it half-closes; a client that does
	// not read delays only its own connection.
	flushBy := time.Now().Add(s.cfg.WriteTimeout)
	if dl, ok := ctx.Deadline(); ok {
		// Half the remaining budget at most: then the connections are
		// closed in time even when their clients do not read.
		flushBy = time.Now().Add(min(s.cfg.WriteTimeout, time.Until(dl)/2))
	}
	var sw sync.WaitGroup
	for _, c := range cs {
		sw.Add(1)
		go func() { defer sw.Done(); c.shutdown(flushBy) }()
	}
	if s.metrics != nil {
		_ = s.metrics.Shutdown(ctx)
	}
	s.lock.stop(ctx)
	s.closeGrace()
	done := make(chan struct{})
	go func() { sw.Wait(); s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.connsMu.RLock()
		for _, c := range s.conns {
			c.nc.Close()
		}
		s.connsMu.RUnlock()
		return ctx.Err()
	}
}

// Close shuts down with a 5 s budget.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(ctx)
}

func (s *Server) register(c *conn) {
	s.connsMu.Lock()
	s.conns[c.id] = c
	s.connsMu.Unlock()
}

func (s *Server) unregister(c *conn) {
	s.connsMu.Lock()
	delete(s.conns, c.id)
	s.connsMu.Unlock()
}

// ReloadTLS re-reads the certificate files (on SIGHUP); existing connections
// keep their sessions. It returns the error of a failed reload and keeps the
// previous certificate then.
func (s *Server) ReloadTLS() error {
	if s.certs == nil {
		return nil
	}
	if err := s.certs.reload(); err != nil {
		s.log.Warn("tls reload failed; keeping the current certificate", "err", err)
		return err
	}
	s.tlsCfg.Store(s.certs.config())
	return nil
}

var _ locktable.Sink = (*Server)(nil)

// tokenBytes returns the HMAC key of role.
func (s *Server) tokenBytes(r wire.Role) []byte { return []byte(s.cfg.tokenFor(r)) }

func randomIncarnation() (uint32, error) {
	var b [4]byte
	for {
		if _, err := crand.Read(b[:]); err != nil {
			return 0, err
		}
		if v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) & (1<<cluster.IncarnationBits - 1); v != 0 {
			return v, nil
		}
	}
}

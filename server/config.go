package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Config is the single-node server's configuration. DefaultConfig gives the
// documented defaults (protocol.md §2.1, §3.3, §4); Validate checks it.
type Config struct {
	// Listen is the client address, host:port. Default "127.0.0.1:7470".
	Listen string
	// Listener, when set, is used by Start instead of listening on Listen
	// (tests open it on port 0 first to know the address).
	Listener net.Listener
	// ClientToken, AdminToken and PeerToken are the roles' shared secrets
	// (protocol.md §1.2). Empty = not configured; admin defaults to client,
	// peer to admin. An admin or peer token without a client token is an error.
	ClientToken, AdminToken, PeerToken string
	// Insecure allows a non-loopback Listen address without a token.
	Insecure bool

	// TLSCertFile and TLSKeyFile enable TLS (1.2 minimum) when both are set.
	// TLSClientCAFile additionally requires client certificates signed by it.
	TLSCertFile, TLSKeyFile, TLSClientCAFile string

	MaxLease         time.Duration // longest lease_ms accepted; default 1 h, at most 2^32-1 ms
	MaxWait          time.Duration // longest wait_ms accepted; default 15 min
	MaxKeys          int           // keys held or queued on; default 1,000,000 (B OVERLOADED)
	MaxWaitersPerKey int           // default 10,000 (B QUEUE_FULL)
	MaxWaiters       int           // queued acquires in all; default 1,000,000 (B OVERLOADED)
	MaxConnections   int           // authenticated client connections; default 10,000 (REJECT OVERLOADED)
	// AdminReserve is how many admin and peer connections may exceed
	// MaxConnections, so an operator can always get in. Default 16.
	AdminReserve int
	// MaxHandshakes bounds the connections still in the handshake (not
	// counted in MaxConnections); MaxHandshakesPerAddr those from one source
	// IP address. At the first cap the server stops accepting; beyond the
	// second a connection waits, parked, for its address's slot; only one
	// that has been in the handshake for HandshakeEvictAge is closed to
	// admit a newer one (handshakes.go).
	// Defaults 1,024 and 128.
	MaxHandshakes        int
	MaxHandshakesPerAddr int
	MaxInflight          int           // queued acquires per connection, sent in WELCOME; default 1,024
	HandshakeTimeout     time.Duration // TLS handshake + AUTH; default 5 s

	// DataDir, when set, persists the fencing-token high-water mark (§6) so
	// tokens keep increasing across restarts even when the wall clock steps back.
	DataDir string
	// TokenBlock is how many tokens are reserved (and fsynced) ahead at a time
	// with DataDir. Default 1<<16.
	TokenBlock uint64

	// MetricsListen, when set, serves Prometheus /metrics on that address.
	// A non-loopback address needs MetricsToken, or Insecure.
	MetricsListen string
	// MetricsToken, when set, is the bearer token /metrics requires
	// (Authorization: Bearer <token>; 401 otherwise).
	MetricsToken string

	// Shards is the number of lock-table shards (each one mutex and one timer
	// goroutine). Default 16.
	Shards int
	// IdleKeyCache is how many free keys are kept (in all) for reuse without
	// allocating. Default 16,384.
	IdleKeyCache int
	// FrameTimeout bounds how long a started request frame may take to
	// complete: a connection holding an incomplete frame longer is closed.
	// An idle connection (no partial frame) has no deadline. Default 10 s.
	FrameTimeout time.Duration
	// WriteTimeout bounds how long a connection's output may stay blocked
	// (a client that does not read): a write that does not complete within
	// it closes the connection, whose locks then follow the
	// closed-connection rule (§5). Default 30 s.
	WriteTimeout time.Duration
	// SendBuffer is the kernel send buffer of each client connection
	// (SO_SNDBUF), bytes; 0 leaves the kernel's autotuning (up to
	// net.ipv4.tcp_wmem's maximum, 4 MiB by default). Default 256 KiB.
	SendBuffer int
	// OutBufferLimit is the unsent-response bound per connection in bytes
	// above which the server stops reading from it (§3.3). Default 256 KiB.
	OutBufferLimit int

	NodeID string // reported by admin status; default "single"; a cluster member's raft id
	// Cluster, when set, makes this server a raft cluster member.
	Cluster *ClusterConfig
	Version string       // reported by admin status
	Logger  *slog.Logger // default: discard
	// Now returns the wall clock; nil means time.Now. Tests inject a clock to
	// check the first fencing token of a domain (§6).
	Now func() time.Time
}

// DefaultConfig returns the documented defaults: a single node on
// 127.0.0.1:7470 with no token.
func DefaultConfig() Config {
	return Config{
		Listen:               "127.0.0.1:7470",
		MaxLease:             time.Hour,
		MaxWait:              15 * time.Minute,
		MaxKeys:              1_000_000,
		MaxWaitersPerKey:     10_000,
		MaxWaiters:           1_000_000,
		MaxConnections:       10_000,
		AdminReserve:         16,
		MaxHandshakes:        1024,
		MaxHandshakesPerAddr: 128,
		MaxInflight:          1024,
		HandshakeTimeout:     5 * time.Second,
		TokenBlock:           1 << 16,
		Shards:               16,
		IdleKeyCache:         16384,
		OutBufferLimit:       256 << 10,
		WriteTimeout:         30 * time.Second,
		FrameTimeout:         10 * time.Second,
		SendBuffer:           256 << 10,
		NodeID:               "single",
	}
}

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("invalid configuration")

func cfgErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
}

// Validate checks the configuration; errors wrap ErrConfig and name the setting.
func (c *Config) Validate() error {
	if c.Listener != nil {
		c.Listen = c.Listener.Addr().String()
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return cfgErr("listen address %q: %v", c.Listen, err)
	}
	if c.ClientToken == "" && (c.AdminToken != "" || c.PeerToken != "") {
		return cfgErr("an admin or peer token requires a client token")
	}
	if c.ClientToken == "" && !c.Insecure && !isLoopback(host) {
		return cfgErr("refusing to listen on non-loopback address %q without a token (set a token, or --insecure)", c.Listen)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return cfgErr("TLS needs both a certificate and a key file")
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		return cfgErr("a TLS client CA needs a server certificate and key")
	}
	if c.MaxLease < time.Millisecond || c.MaxLease.Milliseconds() > 1<<32-1 {
		return cfgErr("max lease %v: must be 1ms..%v", c.MaxLease, time.Duration(1<<32-1)*time.Millisecond)
	}
	if c.MaxWait < 0 || c.MaxWait.Milliseconds() > 1<<32-1 {
		return cfgErr("max wait %v: must be 0..%v", c.MaxWait, time.Duration(1<<32-1)*time.Millisecond)
	}
	for _, l := range []struct {
		name string
		v    int
	}{
		{"max keys", c.MaxKeys}, {"max waiters per key", c.MaxWaitersPerKey},
		{"max waiters", c.MaxWaiters}, {"max connections", c.MaxConnections},
		{"max inflight", c.MaxInflight}, {"shards", c.Shards},
		{"max handshakes", c.MaxHandshakes}, {"max handshakes per address", c.MaxHandshakesPerAddr},
	} {
		if l.v < 1 {
			return cfgErr("%s must be at least 1 (got %d)", l.name, l.v)
		}
	}
	if uint64(c.MaxInflight) > 1<<32-1 {
		return cfgErr("max inflight above 2^32-1")
	}
	if c.HandshakeTimeout <= 0 {
		return cfgErr("handshake timeout must be positive")
	}
	if c.AdminReserve < 0 {
		return cfgErr("admin reserve must not be negative")
	}
	if c.FrameTimeout <= 0 {
		return cfgErr("frame timeout must be positive")
	}
	if c.WriteTimeout <= 0 {
		return cfgErr("write timeout must be positive")
	}
	if c.SendBuffer < 0 {
		return cfgErr("send buffer must not be negative")
	}
	if c.OutBufferLimit < 4*wire.MaxErrorPayload {
		return cfgErr("out buffer limit below %d bytes", 4*wire.MaxErrorPayload)
	}
	if err := c.validateCluster(); err != nil {
		return err
	}
	if c.Cluster != nil && c.ClientToken == "" && !c.Insecure {
		if h, _, _ := net.SplitHostPort(c.Cluster.PeerListen); !isLoopback(h) {
			return cfgErr("refusing to listen for peers on non-loopback address %q without a token (set a token, or --insecure)", c.Cluster.PeerListen)
		}
	}
	for _, t := range c.shortTokens() {
		if !t.loopback {
			return cfgErr("the %s token is %d bytes: want at least %d on non-loopback address %q (e.g. head -c 32 /dev/urandom | base64)", t.role, t.n, MinTokenLen, t.addr)
		}
	}
	if c.MetricsListen != "" {
		h, _, err := net.SplitHostPort(c.MetricsListen)
		if err != nil {
			return cfgErr("metrics listen address %q: %v", c.MetricsListen, err)
		}
		if c.MetricsToken == "" && !c.Insecure && !isLoopback(h) {
			return cfgErr("refusing to serve metrics on non-loopback address %q without a metrics token (set a metrics token, or --insecure)", c.MetricsListen)
		}
	}
	return nil
}

// MinTokenLen is the shortest token accepted on a non-loopback address
// (issue #28 item 4); a shorter one on loopback is logged as a warning.
const MinTokenLen = 16

type shortToken struct {
	role, addr string
	n          int
	loopback   bool
}

// shortTokens lists the configured tokens shorter than MinTokenLen with the
// address they guard (client and admin: Listen; peer: the peer listener;
// metrics: MetricsListen).
func (c *Config) shortTokens() []shortToken {
	var out []shortToken
	check := func(role, tok, addr string) {
		if tok == "" || len(tok) >= MinTokenLen || addr == "" {
			return
		}
		h, _, _ := net.SplitHostPort(addr)
		out = append(out, shortToken{role: role, addr: addr, n: len(tok), loopback: isLoopback(h)})
	}
	check("client", c.ClientToken, c.Listen)
	check("admin", c.AdminToken, c.Listen)
	if c.Cluster != nil {
		check("peer", c.tokenFor(wire.RolePeer), c.Cluster.PeerListen)
	}
	check("metrics", c.MetricsToken, c.MetricsListen)
	return out
}

// insecureWarnings are the exposures Insecure allowed, one line each, logged
// at start (issue #22 item 8), and the short tokens loopback allowed (#28).
func (c *Config) insecureWarnings() []string {
	var w []string
	for _, t := range c.shortTokens() {
		w = append(w, fmt.Sprintf("the %s token is %d bytes, shorter than %d: accepted on loopback address %s only", t.role, t.n, MinTokenLen, t.addr))
	}
	if !c.Insecure {
		return w
	}
	if h, _, _ := net.SplitHostPort(c.Listen); c.ClientToken == "" && !isLoopback(h) {
		w = append(w, "listening without a token on non-loopback address "+c.Listen+" (--insecure): anyone who can reach it can take and release locks")
	}
	if c.Cluster != nil && c.ClientToken == "" {
		if h, _, _ := net.SplitHostPort(c.Cluster.PeerListen); !isLoopback(h) {
			w = append(w, "listening for peers without a token on non-loopback address "+c.Cluster.PeerListen+" (--insecure)")
		}
	}
	if c.MetricsListen != "" && c.MetricsToken == "" {
		if h, _, _ := net.SplitHostPort(c.MetricsListen); !isLoopback(h) {
			w = append(w, "serving metrics without a token on non-loopback address "+c.MetricsListen+" (--insecure)")
		}
	}
	return w
}

// isLoopback reports whether host names only loopback addresses: localhost,
// 127.0.0.0/8 or ::1. The empty host (all interfaces) is not loopback.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenFor returns the token of role per protocol.md §1.2 defaults.
func (c *Config) tokenFor(r wire.Role) string {
	client := c.ClientToken
	admin := c.AdminToken
	if admin == "" {
		admin = client
	}
	peer := c.PeerToken
	if peer == "" {
		peer = admin
	}
	switch r {
	case wire.RoleClient:
		return client
	case wire.RoleAdmin:
		return admin
	case wire.RolePeer:
		return peer
	}
	return ""
}

func (c *Config) tokensConfigured() bool { return c.ClientToken != "" }

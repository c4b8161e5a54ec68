package client

import (
	"crypto/tls"
	"log/slog"
	"time"
)

// Option configures Dial.
type Option func(*config)

// WithToken sets the client token (role client). Without a token the client
// connects to servers that have none configured (the development default);
// with one, it also checks that the server proves the same token and refuses
// an impostor with ErrAuth.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithAdminToken connects with role admin (protocol.md §1) using the admin
// token, which allows the admin queries of Admin besides lock operations.
// It takes precedence over WithToken. An empty token connects as admin to a
// server without tokens.
func WithAdminToken(token string) Option {
	return func(c *config) { c.admin, c.adminToken = true, token }
}

// WithTLS enables TLS (1.2 or later) with the given configuration. When its
// ServerName is empty, the host part of each address is used.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithDialTimeout bounds one connection attempt (TCP, TLS and the protocol
// handshake), how long Dial waits for the first connection, and how long a
// release, ping or admin query waits for a connection when none is up.
// Default 5 s. An acquire waits for a connection within its own wait only
// (edge rule R1): with no connection up when the wait is used up, it fails
// ErrConnect (nothing was tried).
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithAnswerAllowance sets how long past its wait an acquire that was
// written may stay unanswered before it ends ErrIndeterminate and is
// withdrawn with a cancel (edge rule R2, architecture.md "Client library
// behaviour"): the call returns at the latest wait + allowance after its
// frame was queued for writing, also when the server has stopped without
// closing the connection. Default 3 s (long enough for a cluster commit
// under load); values ≤ 0 keep the default.
func WithAnswerAllowance(d time.Duration) Option { return func(c *config) { c.answerAllowance = d } }

// WithLogger sets the logger for connection events (connects, losses,
// rejections) and background releases. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// Defaults and fixed parameters of the client behaviour (architecture.md,
// "Client library behaviour").
const (
	defaultDialTimeout = 5 * time.Second
	// defaultAnswerAllowance: R2, between 2 and 5 s in every client.
	defaultAnswerAllowance = 3 * time.Second
	// firstConnectGrace: an acquire whose wait is used up while a connection
	// is being opened for the first time (Dial's second connection, a
	// leader learned from M) waits up to this long for it (R1).
	firstConnectGrace = time.Second
	backoffBase       = 100 * time.Millisecond // first reconnect step
	backoffCap        = 3200 * time.Millisecond
	// After maxMoves consecutive M answers (an election under way), and
	// between the tries of a release, the client backs off on a shorter
	// schedule than for reconnects: 25 ms doubling to 200 ms, jittered. An
	// election takes about half a second; a caller sleeping on this
	// schedule is also woken (once per call) as soon as any request of the
	// client learns the new leader (Client.follow), so the slowest caller
	// follows within one round trip of the first. At the cap an election
	// costs each waiting caller at most maxMoves+1 small requests per
	// 100–200 ms.
	redirectBackoffBase = 25 * time.Millisecond
	redirectBackoffCap  = 200 * time.Millisecond
	releaseWindow       = 5 * time.Second // releases are retried until this long after they were requested
	releaseQueueLen     = 4096            // bound of the background release queue
	maxMoves            = 3               // consecutive M answers followed before backing off (§7)
	maxExtraEndpoints   = 32              // addresses learned from M answers, beyond those given to Dial
	maxWriteBuffer      = 4 << 20         // unsent bytes per connection above which new requests go elsewhere or wait
)

type config struct {
	token       string
	admin       bool
	adminToken  string
	tls         *tls.Config
	dialTimeout time.Duration
	logger      *slog.Logger
	label       *string // WithLabel: the whole label (protocol.md §12.3)
	appName     string  // WithAppName: prefixed to the default label
	// answerAllowance: R2 (WithAnswerAllowance).
	answerAllowance time.Duration

	// For tests (unexported options in options_test.go).
	backoffBase   time.Duration
	backoffCap    time.Duration
	releaseWindow time.Duration
	onReconnect   func(cn *conn, attempt int, delay time.Duration) // called with each chosen backoff delay
	randN         func(k int64) int64                              // reconnect jitter's source, uniform in [0, k); nil: math/rand/v2
	beforeWrite   func(cn *conn)                                   // called by a writer before it takes a batch
	afterEnqueue  func(c *call)                                    // called by send once c is queued on a connection
}

func newConfig(opts []Option) config {
	c := config{
		dialTimeout:   defaultDialTimeout,
		backoffBase:   backoffBase,
		backoffCap:    backoffCap,
		releaseWindow: releaseWindow,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.dialTimeout <= 0 {
		c.dialTimeout = defaultDialTimeout
	}
	if c.answerAllowance <= 0 {
		c.answerAllowance = defaultAnswerAllowance
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Package bench is the load generator behind `ticketing bench`: it drives a
// running Ticketing server (or any server speaking the v1 wire protocol, such
// as the loopback floor server of scripts/floor) with raw, pre-encoded wire
// frames, and reports throughput, outcomes, an HDR latency histogram and the
// server's peak RSS.
//
// It deliberately does not use the client library: every connection is one
// goroutine that reads a batch of responses, encodes the follow-up requests
// straight into its write buffer and writes them in one syscall, so the
// generator stays far below the server in CPU per operation and allocates
// nothing per operation (BenchmarkWorkerLoop).
//
// Keys are fixed-width (16 bytes), so an acquire or a release is a 32-byte
// frame and every response 16 bytes — the same shapes as the floor server's.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Mode is the workload shape.
type Mode string

const (
	// ModePairs: each pipeline slot repeats acquire → (G) release on keys
	// of its own partition of the key space (free keys), or with probability
	// Contention on one of HotKeys shared keys (queueing and handoff when
	// Wait > 0, T otherwise).
	ModePairs Mode = "pairs"
	// ModeTry: every key is acquired (held) first; then each slot repeats a
	// try-acquire (wait 0) on a random held key: a storm of T answers.
	ModeTry Mode = "try"
	// ModeFill: acquire every key of the key space once and keep it held;
	// reports the server's RSS with Keys held (then releases them unless
	// Keep is set).
	ModeFill Mode = "fill"
)

// KeyLen is the width of every generated key: acquires and releases are
// 16 + 16 = 32-byte frames.
const KeyLen = 16

// MaxPipeline bounds Pipeline: a slot's index is its req_id (low 31 bits).
const MaxPipeline = 1 << 16

// Config is one benchmark run.
type Config struct {
	Addr  string
	Token string    // client token; "" = none configured
	Role  wire.Role // role of the load connections; default client

	Conns      int     // connections
	Pipeline   int     // requests in flight per connection
	Keys       int     // key-space size
	HotKeys    int     // number of shared hot keys (0 = none)
	Contention float64 // share of acquires on the hot keys, 0..1 (1 when HotKeys > 0 and Contention is 0)

	Duration time.Duration // measured run length (ignored when Ops > 0)
	Ops      uint64        // stop after this many measured operations (0 = use Duration)
	Warmup   time.Duration // unmeasured run before the measurement

	Lease time.Duration // lease of every acquire
	Wait  time.Duration // wait of every acquire (0 = try once)
	Hold  time.Duration // time a slot holds a granted lock before releasing it (pairs)

	Mode Mode
	Keep bool // fill: leave the keys held at the end

	// SetSize is the number of distinct keys of every acquire and release
	// (pairs): 1 = single-key A and R; 2..16 = key sets, S and X
	// (protocol.md §12.2), on connections whose feature pong announced
	// KEY_SETS (§12.1).
	SetSize int
	// ConnLabel, when set, is sent as every load connection's label (L,
	// protocol.md §12.3) after its feature pong announced LABELS, as the
	// official clients do: the memory a label costs per held lock.
	ConnLabel string

	// ServerPID, when > 0, is the server's process id: the report carries its
	// VmHWM (peak RSS) and VmRSS from /proc.
	ServerPID int
	// ServerStats queries the server's admin `status` before and after the
	// run (handoff counts); needs a role that may query (admin).
	ServerStats bool
	AdminToken  string // token for the status connection; default Token

	Label string // free-form name of the target in the report ("ticketing", "floor")
	Seed  uint64 // key-choice seed (0 = fixed default)

	// Progress receives a live progress line every ProgressEvery (nil: none).
	Progress      io.Writer
	ProgressEvery time.Duration
	ProgressTTY   bool // rewrite one line with \r instead of printing lines

	DialTimeout time.Duration

	// FindLeader, when set, names the cluster's current leader: where the
	// locks whose release was redirected (M without a leader's address)
	// are released at the end.
	FindLeader func(context.Context) (string, error)
}

// DefaultConfig returns the defaults of `ticketing bench`.
func DefaultConfig() Config {
	return Config{
		Addr:          "127.0.0.1:7470",
		Role:          wire.RoleClient,
		Conns:         8,
		Pipeline:      64,
		Keys:          10000,
		Duration:      10 * time.Second,
		Lease:         30 * time.Second,
		Mode:          ModePairs,
		SetSize:       1,
		ServerStats:   true,
		ProgressEvery: time.Second,
		DialTimeout:   5 * time.Second,
		Label:         "ticketing",
	}
}

// ErrConfig wraps every Validate error.
var ErrConfig = errors.New("bench: invalid configuration")

func cfgErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
}

// Validate checks the configuration and fills derived defaults.
func (c *Config) Validate() error {
	switch c.Mode {
	case ModePairs, ModeTry, ModeFill:
	default:
		return cfgErr("mode %q: want pairs, try or fill", c.Mode)
	}
	if c.Role == 0 {
		c.Role = wire.RoleClient
	}
	if c.Conns < 1 || c.Conns > 100000 {
		return cfgErr("conns must be 1..100000 (got %d)", c.Conns)
	}
	if c.Pipeline < 1 || c.Pipeline > MaxPipeline {
		return cfgErr("pipeline must be 1..%d (got %d)", MaxPipeline, c.Pipeline)
	}
	if c.Keys < 1 || c.Keys > 9_999_999_999 {
		return cfgErr("keys must be 1..9999999999 (got %d)", c.Keys)
	}
	if c.HotKeys < 0 || c.HotKeys > 999_999_999 {
		return cfgErr("hot keys must be 0..999999999 (got %d)", c.HotKeys)
	}
	if c.Contention < 0 || c.Contention > 1 || math.IsNaN(c.Contention) {
		return cfgErr("contention must be 0..1 (got %v)", c.Contention)
	}
	if c.Contention > 0 && c.HotKeys == 0 {
		c.HotKeys = 1
	}
	if c.HotKeys > 0 && c.Contention == 0 {
		c.Contention = 1
	}
	if c.Mode != ModePairs && c.HotKeys > 0 {
		return cfgErr("hot keys and contention apply to mode pairs only")
	}
	if c.SetSize < 1 || c.SetSize > wire.MaxSetKeys {
		return cfgErr("set size must be 1..%d (got %d)", wire.MaxSetKeys, c.SetSize)
	}
	if c.ConnLabel != "" && !wire.ValidLabel([]byte(c.ConnLabel)) {
		return cfgErr("connection label must be 0..%d bytes of UTF-8 without control characters", wire.MaxLabelLen)
	}
	if c.SetSize > 1 && c.Mode != ModePairs {
		return cfgErr("a set size above 1 applies to mode pairs only")
	}
	if c.Ops == 0 && c.Duration <= 0 && c.Mode != ModeFill {
		return cfgErr("give a positive duration or a number of ops")
	}
	if c.Warmup < 0 || c.Hold < 0 || c.Wait < 0 {
		return cfgErr("warmup, hold and wait must not be negative")
	}
	if c.Lease < time.Millisecond || c.Lease.Milliseconds() > math.MaxUint32 {
		return cfgErr("lease %v: must be 1ms..%v", c.Lease, time.Duration(math.MaxUint32)*time.Millisecond)
	}
	if c.Wait.Milliseconds() > math.MaxUint32 {
		return cfgErr("wait %v: too long", c.Wait)
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = time.Second
	}
	if c.AdminToken == "" {
		c.AdminToken = c.Token
	}
	return nil
}

// slotsTotal is the number of pipeline slots over all connections.
func (c *Config) slotsTotal() int { return c.Conns * c.Pipeline }

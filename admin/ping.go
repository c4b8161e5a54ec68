package admin

import (
	"context"
	"time"

	"github.com/ticketing/ticketing/client"
)

// PingResult is one clock probe of a node (protocol.md §3, P). The local
// clock is read when the ping is written (t0) and when the pong arrives
// (t1); the server's wall clock ServerTime was read somewhere in between.
type PingResult struct {
	// RTT is the round-trip time, t1 − t0.
	RTT time.Duration
	// Offset estimates the server's clock minus the local clock:
	// ServerTime − (t0+t1)/2. Positive: the server's clock is ahead.
	Offset time.Duration
	// ErrorBound bounds the estimate: the true offset lies within
	// Offset ± ErrorBound (RTT/2), up to the server clock's 1 µs resolution.
	ErrorBound time.Duration
	// ServerTime is the server's wall clock in its pong.
	ServerTime time.Time
}

// Ping sends one ping on c and returns the round trip and the clock offset.
func Ping(ctx context.Context, c *client.Client) (PingResult, error) {
	st, rtt, err := c.Ping(ctx)
	t1 := time.Now()
	if err != nil {
		return PingResult{}, err
	}
	return pingResult(st, rtt, t1), nil
}

// pingResult computes the offset from the pong's server time, the round
// trip and the local time t1 the pong was read.
func pingResult(serverTime time.Time, rtt time.Duration, t1 time.Time) PingResult {
	mid := t1.Round(0).Add(-rtt / 2) // (t0+t1)/2 on the wall clock
	return PingResult{
		RTT:        rtt,
		Offset:     serverTime.Sub(mid),
		ErrorBound: rtt / 2,
		ServerTime: serverTime,
	}
}

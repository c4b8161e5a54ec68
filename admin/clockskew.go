package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/ticketing/ticketing/client"
)

// BestPing pings c samples times (interval apart) and returns the sample
// with the smallest round trip — the tightest offset bound (ErrorBound =
// RTT/2) — and how many pings were answered. It fails when none was; a
// later failure ends the series but keeps the best sample so far.
func BestPing(ctx context.Context, c *client.Client, samples int, interval time.Duration) (PingResult, int, error) {
	if samples < 1 {
		return PingResult{}, 0, fmt.Errorf("%w: samples %d: want at least 1", client.ErrInvalidArgument, samples)
	}
	var best PingResult
	n := 0
	for i := range samples {
		if i > 0 && interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-ctx.Done():
				t.Stop()
				if n > 0 {
					return best, n, nil
				}
				return PingResult{}, 0, ctx.Err()
			case <-t.C:
			}
		}
		p, err := Ping(ctx, c)
		if err != nil {
			if n > 0 {
				return best, n, nil
			}
			return PingResult{}, 0, err
		}
		if n == 0 || p.RTT < best.RTT {
			best = p
		}
		n++
	}
	return best, n, nil
}

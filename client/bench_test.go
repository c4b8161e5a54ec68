package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkClientAcquireRelease measures acquire + release round trips
// through one Client shared by parallel goroutines (each on its own key),
// against the in-process server. allocs/op counts the whole process, so it
// includes the server's allocations.
func BenchmarkClientAcquireRelease(b *testing.B) {
	b.Run("goroutines=GOMAXPROCS", func(b *testing.B) { benchAcquireRelease(b, 1) })
	b.Run("goroutines=64xGOMAXPROCS", func(b *testing.B) { benchAcquireRelease(b, 64) })
}

func benchAcquireRelease(b *testing.B, parallelism int) {
	srv := startServer(b, nil)
	cl := dial(b, []string{srv.Addr()})
	waitUp(b, cl, 2)
	var n atomic.Int64
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	w0, f0 := cl.stats.writes.Load(), cl.stats.frames.Load()
	defer func() {
		b.ReportMetric(float64(cl.stats.frames.Load()-f0)/float64(max(1, cl.stats.writes.Load()-w0)), "frames/write")
	}()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("bench/", n.Add(1))
		ctx := context.Background()
		for pb.Next() {
			l, err := cl.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkClientAcquireReleaseContended: all goroutines on 8 keys,
// queueing behind each other (direct handoff on release).
func BenchmarkClientAcquireReleaseContended(b *testing.B) {
	srv := startServer(b, nil)
	cl := dial(b, []string{srv.Addr()})
	waitUp(b, cl, 2)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("bench/c", n.Add(1)%8)
		ctx := context.Background()
		for pb.Next() {
			l, err := cl.Acquire(ctx, key, time.Minute, time.Minute)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

package client

import (
	"context"
	"testing"
	"time"
)

// Issue 35's target: a 2-key set acquire+release costs at most 1.5× a
// single-key pair. Sequential round trips against the in-process server:
//
//	go test ./client -run '^$' -bench 'PairSingle|PairSet2' -count 5
func BenchmarkPairSingle(b *testing.B) {
	srv := startServer(b, nil)
	cl := dial(b, []string{srv.Addr()})
	ctx := context.Background()
	for b.Loop() {
		l, err := cl.Acquire(ctx, "bench/a", 30*time.Second, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPairSet2(b *testing.B) {
	srv := startServer(b, nil)
	cl := dial(b, []string{srv.Addr()})
	ctx := context.Background()
	keys := []string{"bench/a", "bench/b"}
	for b.Loop() {
		l, err := cl.AcquireSet(ctx, keys, 30*time.Second, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

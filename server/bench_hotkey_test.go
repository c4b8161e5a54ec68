package server_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
)

// BenchmarkHotKeyHandoff is `ticketing bench --hot-keys 1 --wait` in
// process: conns connections over loopback, each looping acquire (wait 30 s)
// → release on one key, so every grant but the first is a handoff from the
// releasing connection to the head of the queue. One op is one handoff.
// allocs/op counts the whole process (server and this raw client).
//
//	go test ./server -run '^$' -bench HotKeyHandoff -benchmem
func BenchmarkHotKeyHandoff(b *testing.B) {
	for _, conns := range []int{2, 16, 100} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) { benchHotKey(b, conns) })
	}
}

func benchHotKey(b *testing.B, conns int) {
	s := startServer(b, nil)
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = rawDial(b, s.Addr())
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for _, nc := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hotKeyLoop(nc, &left); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	// The machine's other load stretches wall time; CPU time per handoff
	// (this process: server and client) moves far less.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	for _, c := range cs {
		c.Close()
	}
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// hotKeyLoop acquires and releases the hot key until left runs out (each
// grant takes one); it allocates nothing per loop.
func hotKeyLoop(nc net.Conn, left *atomic.Int64) error {
	const key = "bench/hot/key/00" // 16 bytes
	w := make([]byte, 0, 64)
	r := make([]byte, wire.HeaderLen)
	for id := uint32(1); ; id += 2 {
		w = wire.AppendAcquire(w[:0], id, key, 60000, 30000)
		if _, err := nc.Write(w); err != nil {
			return err
		}
		if _, err := io.ReadFull(nc, r); err != nil {
			return err
		}
		if r[0] != byte(wire.StatusGranted) {
			return fmt.Errorf("acquire: %q", r)
		}
		tok := binary.BigEndian.Uint64(r[8:])
		more := left.Add(-1) > 0
		w = wire.AppendRelease(w[:0], id+1, key, tok)
		if _, err := nc.Write(w); err != nil {
			return err
		}
		if _, err := io.ReadFull(nc, r); err != nil {
			return err
		}
		if r[0] != byte(wire.StatusReleased) {
			return fmt.Errorf("release: %q", r)
		}
		if !more {
			return nil
		}
	}
}

// processCPU is this process's user + system CPU time in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

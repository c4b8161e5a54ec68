package server_test

import (
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// heldHeap is the heap the runtime holds from the OS (in use, dead but not
// yet collected, or free but not released), bytes: what the process's RSS
// follows. Reading it runs no collection.
func heldHeap() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapSys - ms.HeapReleased
}

func rssKiB() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
		}
	}
	return "?"
}

// TestMemoryReturnedAfterFlood: after a flood of connections closes, the
// heap they used is returned to the OS within seconds, not kept for
// minutes (issue #22 item 7). The bound is generous: the heap held from the
// OS must fall to the baseline plus a quarter of what the flood used.
func TestMemoryReturnedAfterFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of connections")
	}
	n := 3000
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(2*n+200) {
		t.Skipf("RLIMIT_NOFILE %d is below the %d descriptors this test needs", lim.Cur, 2*n+200)
	}
	s := startServer(t, func(c *server.Config) { c.MaxConnections = n + 10 })
	runtime.GC()
	base := heldHeap()
	conns := make([]net.Conn, 0, n)
	for range n {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.SetDeadline(time.Now().Add(long))
		if _, _, err := wire.ClientHandshake(nc, wire.RoleClient, nil); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	admin := dial(t, s)
	eventually(t, long, "all connections registered", func() bool { return status(t, admin).Connections == int64(n+1) })
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	inUse := ms.HeapInuse
	t.Logf("%d connections open: heap in use %d KiB (%.1f KiB per connection, both ends), RSS %s", n, inUse>>10, float64(inUse)/float64(n)/1024, rssKiB())
	for _, nc := range conns {
		nc.Close()
	}
	eventually(t, long, "all connections closed", func() bool { return status(t, admin).Connections == 1 })
	// No runtime.GC here: a server that goes quiet after a flood runs no
	// collection either, and that kept the memory for minutes.
	t.Logf("closed: heap held from the OS %d KiB (baseline %d KiB), RSS %s", heldHeap()>>10, base>>10, rssKiB())
	bound := base + inUse/4
	eventually(t, 15*time.Second, "the freed heap returned to the OS", func() bool { return heldHeap() <= bound })
	t.Logf("released: heap held %d KiB, RSS %s", heldHeap()>>10, rssKiB())
}

package server_test

import (
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// eventually polls cond every 20 ms until it holds or d passed.
func eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			tb.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNonReaderIsClosed: a client that pipelines requests and never reads
// its answers is closed once its output stays blocked for the write
// timeout (issue #22 item 2); before, it was kept forever.
func TestNonReaderIsClosed(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) {
		c.WriteTimeout = 500 * time.Millisecond
		c.SendBuffer = 16 << 10
	})
	admin := dial(t, s)
	c := dial(t, s)
	c.MustAcquire("nr2", 60000)
	_ = c.NC.(*net.TCPConn).SetReadBuffer(4096)
	var b []byte
	for i := range 65536 {
		b = wire.AppendPing(b, uint32(i+10))
	}
	done := make(chan struct{})
	go func() { // pipeline without ever reading, until the server closes
		defer close(done)
		for c.WriteErr(b) == nil {
		}
	}()
	eventually(t, long, "the non-reading connection closed", func() bool {
		return status(t, admin).Connections == 1
	})
	<-done
	c.Close()
	// Its lock follows the closed-connection rule: still held until its lease ends.
	is(t, admin.Acquire("nr2", 1000, 0), wire.StatusTimeout)
}

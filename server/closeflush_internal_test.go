package server

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// TestTeardownWaitsForTheWriter: the writer goroutine is blocked writing a
// large backlog (the client does not read yet) when the reader hits a fatal
// error. The connection must close only after the backlog and the error's
// E frame are written (issue #22 item 9): before the fix, teardown's flush
// returned at once (another goroutine was flushing) and the half-close made
// the writer's write fail, losing the backlog's tail and the E frame.
func TestTeardownWaitsForTheWriter(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(s, sc)
	c.role = wire.RoleClient
	c.rbuf = make([]byte, readBufSize)
	s.register(c)
	// A backlog far above what the socket buffers hold, queued as answers
	// delivered by other goroutines are.
	const frames = 1 << 18 // 4 MiB of G frames
	c.mu.Lock()
	for i := range frames {
		c.out = wire.AppendGranted(c.out, uint32(i), uint64(i)+1, 0)
	}
	c.mu.Unlock()
	s.wg.Add(1)
	go c.writeLoop()
	c.wake <- struct{}{}
	done, readDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		fatal := c.readLoop()
		close(readDone)
		c.teardown(fatal)
	}()
	// Wait until the writer is blocked in its write, then send an unknown op.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		busy := c.flushing
		c.mu.Unlock()
		if busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := cl.Write(wire.AppendRequestHeader(nil, wire.Op('Z'), 0, 0, 4242, 0)); err != nil {
		t.Fatal(err)
	}
	// The reader has answered the bad op and ended: teardown runs while
	// the client reads (observed, not slept for).
	select {
	case <-readDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the reader did not end on the bad op within 30 s")
	}
	_ = cl.SetReadDeadline(time.Now().Add(30 * time.Second))
	all, err := io.ReadAll(cl)
	if err != nil {
		t.Fatalf("read: %v after %d bytes", err, len(all))
	}
	n := 0
	var last wire.Response
	for len(all) > 0 {
		r, k, err := wire.ParseResponse(all)
		if err != nil || k == 0 {
			t.Fatalf("frame %d: %v (%d bytes left)", n, err, len(all))
		}
		last = r
		all = all[k:]
		n++
	}
	if n != frames+1 || last.Status != wire.StatusError || last.Code != wire.CodeBadOp || last.ReqID != 4242 {
		t.Fatalf("got %d frames, the last %+v; want %d G then E BAD_OP", n, last, frames)
	}
	<-done
	close(s.closed)
	s.wg.Wait()
}

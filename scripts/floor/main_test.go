package main

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// TestHotKeyFloor: --hotkey mode hands the one key off in FIFO order with
// tokens rising by one per grant, writing the next waiter's G on its own
// connection, and answers a cancel of a queued acquire T then O (else N).
func TestHotKeyFloor(t *testing.T) {
	hotKey.mu.Lock()
	hotKey.held, hotKey.token, hotKey.queue = false, 0, nil // a fresh floor (-count N)
	hotKey.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveHot(c)
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		var hs [72]byte
		if _, err := io.ReadFull(c, hs[:40]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(hs[:72]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, hs[:40]); err != nil || hs[0] != 'K' {
			t.Fatalf("welcome %q, %v", hs[:1], err)
		}
		return c
	}
	send := func(c net.Conn, op byte, id, target uint32) {
		var req [reqLen]byte
		req[0], req[1] = op, 16
		binary.BigEndian.PutUint32(req[4:], id)
		binary.BigEndian.PutUint32(req[8:], target)
		if _, err := c.Write(req[:]); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(c net.Conn, st byte, id uint32, value uint64) {
		t.Helper()
		var resp [respLen]byte
		if _, err := io.ReadFull(c, resp[:]); err != nil {
			t.Fatal(err)
		}
		if resp[0] != st || binary.BigEndian.Uint32(resp[4:]) != id || binary.BigEndian.Uint64(resp[8:]) != value {
			t.Fatalf("got %c req %d value %d; want %c req %d value %d", resp[0], binary.BigEndian.Uint32(resp[4:]),
				binary.BigEndian.Uint64(resp[8:]), st, id, value)
		}
	}
	// queued waits until the floor queued n acquires (each connection is
	// read by its own goroutine: the queue's order is the order they read)
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			hotKey.mu.Lock()
			l := len(hotKey.queue)
			hotKey.mu.Unlock()
			if l == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d acquires queued, want %d", l, n)
			}
		}
	}
	a, b, c := dial(), dial(), dial()
	send(a, 'A', 1, 0)
	expect(a, 'G', 1, 1) // free: granted at once
	send(b, 'A', 2, 0)
	queued(1)
	send(c, 'A', 3, 0)
	queued(2)
	send(a, 'A', 4, 0) // a queues behind b and c
	queued(3)
	send(a, 'R', 5, 0)
	expect(a, 'O', 5, 0)
	expect(b, 'G', 2, 2) // the first waiter, token + 1
	send(b, 'R', 6, 0)
	expect(b, 'O', 6, 0)
	expect(c, 'G', 3, 3)
	send(a, 'C', 7, 4) // a's queued acquire withdrawn
	expect(a, 'T', 4, 0)
	expect(a, 'O', 7, 0)
	send(a, 'C', 8, 4) // nothing queued any more
	expect(a, 'N', 8, 0)
	send(c, 'R', 9, 0)
	expect(c, 'O', 9, 0) // no waiter: the key is free again
	send(b, 'A', 10, 0)
	expect(b, 'G', 10, 4)
}

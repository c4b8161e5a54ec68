// Command floor is the loopback floor of scripts/bench-floor.sh: the least a
// server can do over TCP. It accepts connections, does a token-less v1
// handshake (HELLO, AUTH, WELCOME — no HMAC, so setup stays cheap), and then
// answers every 32-byte request with a 16-byte response that copies the
// request's req_id (status G to an acquire, O to anything else), reading and
// writing in batches exactly like the Ticketing server. No lock table, no
// validation: whatever `ticketing bench` measures against it is what this
// machine's loopback, scheduler and load generator can do at all.
//
// Standard library only, so its memory is that of a trivial Go server.
//
// With --hotkey it is the floor of the hot-key row instead: every key is
// the one hot key, handed off in FIFO order with no lock table, no timers
// and no writer goroutines. An acquire is granted at once (G, the token
// rising by one per grant) when the key is free and queued otherwise; a
// release answers O and the releasing connection's goroutine writes the
// next waiter's G straight to that waiter's socket (one syscall, no
// goroutine woken in this process); a cancel of a queued acquire answers T
// to it, then O (else N). One handoff is then what it must be at least: the
// grant's write, the holder's wake-up and its release's write, this
// process's wake-up and read.
//
//	go run ./scripts/floor --listen 127.0.0.1:7479 [--hotkey]
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
)

const (
	reqLen  = 32
	respLen = 16
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7479", "listen address")
	hot := flag.Bool("hotkey", false, "hand every key off in FIFO order (the hot-key row's floor)")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "floor: listening on %s\n", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		if *hot {
			go serveHot(c)
		} else {
			go serve(c)
		}
	}
}

// handshake is the token-less v1 handshake; false when the client went away.
func handshake(c net.Conn) bool {
	// HELLO: "TKTS", version 1, no tokens, zero nonce.
	var hs [72]byte
	copy(hs[:], "TKTS\x01")
	if _, err := c.Write(hs[:40]); err != nil {
		return false
	}
	if _, err := io.ReadFull(c, hs[:72]); err != nil {
		return false
	}
	// WELCOME: 'K', max_inflight 2^20, zero proof (no token: not checked).
	clear(hs[:])
	hs[0] = 'K'
	hs[5] = 0x10
	_, err := c.Write(hs[:40])
	return err == nil
}

func serve(c net.Conn) {
	defer c.Close()
	if !handshake(c) {
		return
	}
	rbuf := make([]byte, 16<<10)
	wbuf := make([]byte, 0, len(rbuf)/2)
	r := 0
	for {
		n, err := c.Read(rbuf[r:])
		r += n
		off := 0
		for ; r-off >= reqLen; off += reqLen {
			req := rbuf[off : off+reqLen]
			st := byte('O')
			if req[0] == 'A' {
				st = 'G'
			}
			wbuf = append(wbuf, st, 0, 0, 0, req[4], req[5], req[6], req[7], 0, 0, 0, 0, 0, 0, 0, 1)
		}
		r = copy(rbuf, rbuf[off:r])
		if len(wbuf) > 0 {
			if _, werr := c.Write(wbuf); werr != nil {
				return
			}
			wbuf = wbuf[:0]
		}
		if err != nil {
			return
		}
	}
}

// hotConn is a connection of --hotkey mode: other connections' goroutines
// write grants to it, so every write takes mu.
type hotConn struct {
	net.Conn
	mu sync.Mutex
}

func (h *hotConn) write(b []byte) error {
	h.mu.Lock()
	_, err := h.Write(b)
	h.mu.Unlock()
	return err
}

type waiter struct {
	c     *hotConn
	reqID uint32
}

// hotKey is the one key of --hotkey mode.
var hotKey struct {
	mu    sync.Mutex
	held  bool
	token uint64
	queue []waiter // FIFO
}

func answer(b []byte, st byte, reqID uint32, value uint64) []byte {
	b = append(b, st, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, reqID)
	return binary.BigEndian.AppendUint64(b, value)
}

func serveHot(nc net.Conn) {
	defer nc.Close()
	if !handshake(nc) {
		return
	}
	c := &hotConn{Conn: nc}
	defer func() { // leave the queue (a lock held stays held: the run is over)
		k := &hotKey
		k.mu.Lock()
		q := k.queue[:0]
		for _, w := range k.queue {
			if w.c != c {
				q = append(q, w)
			}
		}
		k.queue = q
		k.mu.Unlock()
	}()
	rbuf := make([]byte, 16<<10)
	wbuf := make([]byte, 0, len(rbuf)/2)
	var grant []byte
	r := 0
	for {
		n, err := c.Read(rbuf[r:])
		r += n
		off := 0
		for ; r-off >= reqLen; off += reqLen {
			req := rbuf[off : off+reqLen]
			id := binary.BigEndian.Uint32(req[4:8])
			k := &hotKey
			switch req[0] {
			case 'A':
				k.mu.Lock()
				if !k.held {
					k.held = true
					k.token++
					wbuf = answer(wbuf, 'G', id, k.token)
				} else {
					k.queue = append(k.queue, waiter{c, id})
				}
				k.mu.Unlock()
			case 'R':
				wbuf = answer(wbuf, 'O', id, 0)
				k.mu.Lock()
				var next waiter
				if len(k.queue) > 0 {
					next = k.queue[0]
					k.queue = k.queue[1:]
					k.token++
				} else {
					k.held = false
				}
				tok := k.token
				k.mu.Unlock()
				switch next.c {
				case nil:
				case c:
					wbuf = answer(wbuf, 'G', next.reqID, tok)
				default:
					grant = answer(grant[:0], 'G', next.reqID, tok)
					_ = next.c.write(grant) // a failed waiter's reader ends it
				}
			case 'C':
				target := binary.BigEndian.Uint32(req[8:12])
				k.mu.Lock()
				found := false
				for i, w := range k.queue {
					if w.c == c && w.reqID == target {
						k.queue = append(k.queue[:i], k.queue[i+1:]...)
						found = true
						break
					}
				}
				k.mu.Unlock()
				if found {
					wbuf = answer(wbuf, 'T', target, 0)
					wbuf = answer(wbuf, 'O', id, 0)
				} else {
					wbuf = answer(wbuf, 'N', id, 0)
				}
			default:
				wbuf = answer(wbuf, 'O', id, 0)
			}
		}
		r = copy(rbuf, rbuf[off:r])
		if len(wbuf) > 0 {
			if werr := c.write(wbuf); werr != nil {
				return
			}
			wbuf = wbuf[:0]
		}
		if err != nil {
			return
		}
	}
}

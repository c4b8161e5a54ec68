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
//	go run ./scripts/floor --listen 127.0.0.1:7479
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
)

const (
	reqLen  = 32
	respLen = 16
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7479", "listen address")
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
		go serve(c)
	}
}

func serve(c net.Conn) {
	defer c.Close()
	// HELLO: "TKTS", version 1, no tokens, zero nonce.
	var hs [72]byte
	copy(hs[:], "TKTS\x01")
	if _, err := c.Write(hs[:40]); err != nil {
		return
	}
	if _, err := io.ReadFull(c, hs[:72]); err != nil {
		return
	}
	// WELCOME: 'K', max_inflight 2^20, zero proof (no token: not checked).
	clear(hs[:])
	hs[0] = 'K'
	hs[5] = 0x10
	if _, err := c.Write(hs[:40]); err != nil {
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

package server

// protocol.md §1 "Liveness": accepted connections have TCP keepalive (probe
// after 15 s idle, every 5 s, 3 probes) and a 30 s TCP user timeout.

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"golang.org/x/sys/unix"
)

func TestLivenessSocketOptions(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b := make([]byte, wire.HelloLen)
	if _, err := io.ReadFull(nc, b); err != nil {
		t.Fatal(err)
	}
	a := wire.Auth{Role: wire.RoleAdmin} // no token configured: any proof
	if _, err := nc.Write(wire.AppendAuth(nil, &a)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(nc, b[:wire.WelcomeLen]); err != nil || b[0] != wire.WelcomeAccepted {
		t.Fatalf("WELCOME % x %v", b, err)
	}
	var sc *net.TCPConn
	deadline := time.Now().Add(10 * time.Second)
	for sc == nil && time.Now().Before(deadline) {
		// The server's end is the connection whose remote is our local address.
		s.connsMu.RLock()
		for _, c := range s.conns {
			if tc, ok := c.nc.(*net.TCPConn); ok && tc.RemoteAddr().String() == nc.LocalAddr().String() {
				sc = tc
			}
		}
		s.connsMu.RUnlock()
		time.Sleep(time.Millisecond)
	}
	if sc == nil {
		t.Fatal("server side of the connection not found")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int{
		"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE},
		"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
		"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
		"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
		"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
	}
	expect := map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 15, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3, "TCP_USER_TIMEOUT": 30000}
	for name, opt := range want {
		var v int
		var gerr error
		if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), opt[0], opt[1]) }); err != nil || gerr != nil {
			t.Fatalf("%s: %v %v", name, err, gerr)
		}
		if v != expect[name] {
			t.Errorf("%s = %d, want %d", name, v, expect[name])
		}
	}
}

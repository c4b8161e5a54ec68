package server_test

// protocol.md §1: HELLO, AUTH, WELCOME/REJECT, tokens and roles, handshake
// timeout, max_connections, draining, closing after REJECT.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
)

func TestHelloBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		mod   func(*server.Config)
		flags byte
	}{
		{"no token", nil, 0},
		{"client token", func(c *server.Config) { c.ClientToken = "sekrit" }, 1},
		{"all tokens", func(c *server.Config) { c.ClientToken, c.AdminToken, c.PeerToken = "c", "a", "p" }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, tc.mod)
			seen := map[string]bool{}
			for range 8 {
				c := st.DialRaw(t, s.Addr(), nil)
				b, err := c.ReadExact(wire.HelloLen)
				if err != nil {
					t.Fatal(err)
				}
				if string(b[0:4]) != "TKTS" || b[4] != 1 || b[5] != tc.flags || b[6] != 0 || b[7] != 0 {
					t.Fatalf("HELLO header % x: want TKTS 01 %02x 00 00", b[:8], tc.flags)
				}
				nonce := string(b[8:40])
				if nonce == string(make([]byte, 32)) || seen[nonce] {
					t.Fatalf("server_nonce %x is zero or repeated", b[8:40])
				}
				seen[nonce] = true
				c.Close()
			}
		})
	}
}

func TestAuthBadHandshake(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{"", "tok"} {
		s := startServer(t, func(c *server.Config) { c.ClientToken = tok })
		for _, tc := range []struct {
			name string
			edit func(b []byte)
		}{
			{"magic TKTX", func(b []byte) { b[3] = 'X' }},
			{"magic lower case", func(b []byte) { copy(b, "tktc") }},
			{"magic of HELLO", func(b []byte) { copy(b, "TKTS") }},
			{"version 0", func(b []byte) { b[4] = 0 }},
			{"version 2", func(b []byte) { b[4] = 2 }},
			{"version 255", func(b []byte) { b[4] = 255 }},
			{"role 0", func(b []byte) { b[5] = 0 }},
			{"role 4", func(b []byte) { b[5] = 4 }},
			{"role 255", func(b []byte) { b[5] = 255 }},
			{"reserved byte 6", func(b []byte) { b[6] = 1 }},
			{"reserved byte 7", func(b []byte) { b[7] = 0x80 }},
		} {
			t.Run(tok+"/"+tc.name, func(t *testing.T) {
				c := st.DialRaw(t, s.Addr(), nil)
				h := c.ReadHello()
				a := st.NewAuth(wire.RoleClient, tok, &h)
				b := wire.AppendAuth(nil, &a)
				tc.edit(b)
				c.Write(b)
				expectReject(t, c, wire.CodeBadHandshake)
			})
		}
	}
}

// expectReject reads a REJECT with code, byte for byte, then EOF.
func expectReject(tb testing.TB, c *st.Conn, code wire.Code) {
	tb.Helper()
	b, err := c.ReadExact(wire.WelcomeLen)
	if err != nil {
		tb.Fatalf("reading REJECT %v: %v", code, err)
	}
	if want := wire.AppendReject(nil, code); !bytes.Equal(b, want) {
		tb.Fatalf("got % x, want REJECT % x", b, want)
	}
	c.ExpectEOF()
}

func TestAuthFailed(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.ClientToken, c.AdminToken, c.PeerToken = "ctok", "atok", "ptok" })
	// A recorded, accepted AUTH, to replay on another connection.
	first := st.DialRaw(t, s.Addr(), nil)
	h := first.ReadHello()
	recorded := st.NewAuth(wire.RoleClient, "ctok", &h)
	first.Write(wire.AppendAuth(nil, &recorded))
	if w := first.ReadWelcome(); !w.Accepted() {
		t.Fatalf("the recorded AUTH was rejected: %v", w.Code)
	}
	for _, tc := range []struct {
		name string
		auth func(h *wire.Hello) wire.Auth
	}{
		{"wrong token", func(h *wire.Hello) wire.Auth { return st.NewAuth(wire.RoleClient, "nope", h) }},
		{"empty token", func(h *wire.Hello) wire.Auth { return st.NewAuth(wire.RoleClient, "", h) }},
		{"zero proof", func(h *wire.Hello) wire.Auth {
			a := st.NewAuth(wire.RoleClient, "ctok", h)
			a.Proof = [32]byte{}
			return a
		}},
		{"proof for another role", func(h *wire.Hello) wire.Auth {
			a := st.NewAuth(wire.RoleClient, "ctok", h)
			a.Proof = wire.ClientProof([]byte("ctok"), wire.RoleAdmin, &h.Nonce, &a.Nonce)
			return a
		}},
		{"nonces swapped", func(h *wire.Hello) wire.Auth {
			a := st.NewAuth(wire.RoleClient, "ctok", h)
			a.Proof = wire.ClientProof([]byte("ctok"), wire.RoleClient, &a.Nonce, &h.Nonce)
			return a
		}},
		{"server proof sent as client proof", func(h *wire.Hello) wire.Auth {
			a := st.NewAuth(wire.RoleClient, "ctok", h)
			a.Proof = wire.ServerProof([]byte("ctok"), wire.RoleClient, &a.Nonce, &h.Nonce)
			return a
		}},
		{"replayed AUTH", func(*wire.Hello) wire.Auth { return recorded }},
		{"admin with client token", func(h *wire.Hello) wire.Auth { return st.NewAuth(wire.RoleAdmin, "ctok", h) }},
		{"peer with admin token", func(h *wire.Hello) wire.Auth { return st.NewAuth(wire.RolePeer, "atok", h) }},
		{"client with admin token", func(h *wire.Hello) wire.Auth { return st.NewAuth(wire.RoleClient, "atok", h) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := st.DialRaw(t, s.Addr(), nil)
			h := c.ReadHello()
			a := tc.auth(&h)
			c.Write(wire.AppendAuth(nil, &a))
			expectReject(t, c, wire.CodeAuthFailed)
		})
	}
}

func TestRoleTokens(t *testing.T) {
	t.Parallel()
	type try struct {
		role  wire.Role
		token string
		ok    bool
	}
	for _, tc := range []struct {
		name                string
		client, admin, peer string
		tries               []try
	}{
		{"client token only", "c", "", "", []try{
			{wire.RoleClient, "c", true}, {wire.RoleAdmin, "c", true}, {wire.RolePeer, "c", true},
			{wire.RoleAdmin, "x", false}, {wire.RolePeer, "", false},
		}},
		{"client and admin", "c", "a", "", []try{
			{wire.RoleClient, "c", true}, {wire.RoleAdmin, "a", true}, {wire.RolePeer, "a", true},
			{wire.RoleAdmin, "c", false}, {wire.RolePeer, "c", false}, {wire.RoleClient, "a", false},
		}},
		{"all three", "c", "a", "p", []try{
			{wire.RoleClient, "c", true}, {wire.RoleAdmin, "a", true}, {wire.RolePeer, "p", true},
			{wire.RolePeer, "a", false}, {wire.RoleAdmin, "p", false}, {wire.RolePeer, "c", false},
		}},
		{"client and peer (admin defaults to client)", "c", "", "p", []try{
			{wire.RoleAdmin, "c", true}, {wire.RolePeer, "p", true}, {wire.RolePeer, "c", false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, func(c *server.Config) {
				c.ClientToken, c.AdminToken, c.PeerToken = tc.client, tc.admin, tc.peer
				c.MaxInflight = 77
			})
			for _, tr := range tc.tries {
				c := st.DialRaw(t, s.Addr(), nil)
				h := c.ReadHello()
				if !h.TokensConfigured() {
					t.Fatal("HELLO flag bit 0 must be set when tokens are configured")
				}
				a := st.NewAuth(tr.role, tr.token, &h)
				c.Write(wire.AppendAuth(nil, &a))
				if !tr.ok {
					expectReject(t, c, wire.CodeAuthFailed)
					continue
				}
				b, err := c.ReadExact(wire.WelcomeLen)
				if err != nil {
					t.Fatal(err)
				}
				if b[0] != 'K' || b[1] != 0 || b[2] != 0 || b[3] != 0 || b[4] != 0 || b[5] != 0 || b[6] != 0 || b[7] != 77 {
					t.Fatalf("role %v: WELCOME header % x, want 4b 00 0000 0000004d", tr.role, b[:8])
				}
				want := wire.ServerProof([]byte(tr.token), tr.role, &a.Nonce, &h.Nonce)
				if !bytes.Equal(b[8:], want[:]) {
					t.Fatalf("role %v: server_proof does not verify with the role's token", tr.role)
				}
				other := wire.ServerProof([]byte(tr.token+"x"), tr.role, &a.Nonce, &h.Nonce)
				if bytes.Equal(b[8:], other[:]) {
					t.Fatal("server_proof verifies with a wrong token")
				}
				c.Ping()
				c.Close()
			}
		})
	}
}

func TestTokenConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ admin, peer string }{{"a", ""}, {"", "p"}, {"a", "p"}} {
		cfg := server.DefaultConfig()
		cfg.Listen = "127.0.0.1:0"
		cfg.AdminToken, cfg.PeerToken = tc.admin, tc.peer
		s, err := server.Start(context.Background(), cfg)
		if err == nil {
			s.Close()
			t.Fatalf("admin %q peer %q without a client token: Start succeeded", tc.admin, tc.peer)
		}
		if !errors.Is(err, server.ErrConfig) {
			t.Fatalf("error %v does not wrap ErrConfig", err)
		}
	}
}

// Without tokens no proof is checked and the server proves with the empty key.
func TestNoTokenProofs(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	for _, role := range []wire.Role{wire.RoleClient, wire.RoleAdmin, wire.RolePeer} {
		c := st.DialRaw(t, s.Addr(), nil)
		h := c.ReadHello()
		if h.TokensConfigured() {
			t.Fatal("HELLO flag bit 0 set without tokens")
		}
		a := wire.Auth{Role: role}
		for i := range a.Proof {
			a.Proof[i] = 0xA5 // garbage: not checked
		}
		a.Nonce[0] = byte(role)
		c.Write(wire.AppendAuth(nil, &a))
		w := c.ReadWelcome()
		if !w.Accepted() || w.Code != 0 || w.MaxInflight != 1024 {
			t.Fatalf("role %v: %+v, want WELCOME with the default max_inflight 1024", role, w)
		}
		want := wire.ServerProof(nil, role, &a.Nonce, &h.Nonce)
		if w.Proof != want {
			t.Fatalf("role %v: server_proof is not HMAC with the empty key", role)
		}
		c.Ping()
	}
}

func TestRolePermissions(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	readOnly := []string{`{"cmd":"status"}`, `{"cmd":"locks"}`, `{"cmd":"time"}`, `{"cmd":"members"}`}
	changing := []string{
		`{"cmd":"add-node","id":"n2","peer_addr":"127.0.0.1:1","client_addr":"127.0.0.1:2","voter":true}`,
		`{"cmd":"remove-node","id":"n2"}`, `{"cmd":"transfer-leader"}`, `{"cmd":"transfer-leader","id":"n2"}`,
	}
	t.Run("client", func(t *testing.T) {
		c := dialRole(t, s, wire.RoleClient, "")
		tok := c.MustAcquire("perm/client", 60000)
		r := c.Release("perm/client", tok)
		expect(t, r, wire.StatusReleased, 0, r.ReqID)
		id := c.NextID()
		expect(t, c.Do(wire.AppendCancel(nil, id, "perm/client", 1)), wire.StatusNotHolder, 0, id)
		c.Ping()
		for _, q := range append(append(readOnly, changing...), `not json`, `{"cmd":"nope"}`) {
			r := c.Query(q)
			expectE(t, r, wire.CodeNotPermitted, r.ReqID)
		}
		c.Ping()
	})
	t.Run("peer", func(t *testing.T) {
		c := dialRole(t, s, wire.RolePeer, "")
		for _, f := range [][]byte{
			wire.AppendAcquire(nil, 1, "perm/peer", 1000, 0),
			wire.AppendRelease(nil, 2, "perm/peer", 1),
			wire.AppendCancel(nil, 3, "perm/peer", 1),
		} {
			r := c.Do(f)
			expectE(t, r, wire.CodeNotPermitted, r.ReqID)
		}
		c.Ping()
		for _, q := range readOnly {
			if r := c.Query(q); r.Status != wire.StatusAdmin {
				t.Fatalf("peer %s: %s, want J", q, st.Describe(r))
			}
		}
		for _, q := range changing {
			r := c.Query(q)
			expectE(t, r, wire.CodeNotPermitted, r.ReqID)
		}
		c.Ping()
	})
	t.Run("admin", func(t *testing.T) {
		c := dialRole(t, s, wire.RoleAdmin, "")
		tok := c.MustAcquire("perm/admin", 60000)
		if r := c.Release("perm/admin", tok); r.Status != wire.StatusReleased {
			t.Fatal(st.Describe(r))
		}
		for _, q := range readOnly {
			if r := c.Query(q); r.Status != wire.StatusAdmin {
				t.Fatalf("admin %s: %s, want J", q, st.Describe(r))
			}
		}
		for _, q := range changing {
			r := c.Query(q)
			expectE(t, r, wire.CodeBadAdmin, r.ReqID) // single node: not a cluster
			if len(r.Payload) == 0 {
				t.Error("E BAD_ADMIN without a message")
			}
		}
	})
}

func TestHandshakeTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"nothing", nil},
		{"71 of 72 AUTH bytes", func() []byte {
			a := wire.Auth{Role: wire.RoleClient}
			return wire.AppendAuth(nil, &a)[:71]
		}()},
		{"one byte", []byte{'T'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := st.DialRaw(t, s.Addr(), nil)
			start := time.Now()
			c.ReadHello()
			if len(tc.send) > 0 {
				c.Write(tc.send)
			}
			c.ExpectEOF() // nothing more than HELLO, then close
			if el := time.Since(start); el < 250*time.Millisecond {
				t.Fatalf("closed after %v, before the 300ms handshake timeout", el)
			}
		})
	}
	// A connection that completes the handshake in time stays open after the timeout.
	c := dial(t, s)
	time.Sleep(400 * time.Millisecond)
	c.Ping()
}

func TestMaxConnections(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.MaxConnections = 2 })
	c1 := dialRole(t, s, wire.RoleClient, "")
	c2 := dialRole(t, s, wire.RoleClient, "")
	c3 := st.DialRaw(t, s.Addr(), nil)
	h := c3.ReadHello()
	a := st.NewAuth(wire.RoleClient, "", &h)
	c3.Write(wire.AppendAuth(nil, &a))
	expectReject(t, c3, wire.CodeOverloaded)
	c2.Ping()
	c1.Close()
	// Once the server noticed c1 closed there is room again.
	waitFor(t, "a free connection slot", func() bool {
		c, err := st.DialRawErr(s.Addr(), nil)
		if err != nil {
			return false
		}
		defer c.Close()
		return c.Handshake(st.Options{Role: wire.RoleClient}) == nil
	})
}

func TestDrainingRejectsHandshake(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := st.DialRaw(t, s.Addr(), nil)
	h := c.ReadHello()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	waitFor(t, "draining", s.Draining)
	a := st.NewAuth(wire.RoleAdmin, "", &h)
	c.Write(wire.AppendAuth(nil, &a))
	expectReject(t, c, wire.CodeShuttingDown)
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Shutdown took %v", el)
	}
}

func TestDrainingFlagRejectsHandshake(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	server.SetDraining(s, true)
	c := st.DialRaw(t, s.Addr(), nil)
	h := c.ReadHello()
	a := st.NewAuth(wire.RoleClient, "", &h)
	c.Write(wire.AppendAuth(nil, &a))
	expectReject(t, c, wire.CodeShuttingDown)
	server.SetDraining(s, false)
}

// §1: a client may send requests right behind AUTH, in the same write.
func TestRequestsBehindAuth(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.ClientToken = "tok" })
	c := st.DialRaw(t, s.Addr(), nil)
	h := c.ReadHello()
	a := st.NewAuth(wire.RoleAdmin, "tok", &h)
	b := wire.AppendAuth(nil, &a)
	b = wire.AppendPing(b, 1)
	b = wire.AppendAcquire(b, 2, "behind", 60000, 0)
	b = wire.AppendQuery(b, 3, []byte(`{"cmd":"time"}`))
	c.Write(b)
	if w := c.ReadWelcome(); !w.Accepted() {
		t.Fatalf("rejected: %v", w.Code)
	}
	expect(t, c.Read(), wire.StatusPong, 0, 1)
	expect(t, c.Read(), wire.StatusGranted, 0, 2)
	expect(t, c.Read(), wire.StatusAdmin, 0, 3)
}

// §1 "Closing after an error": after a REJECT the server half-closes and
// discards what the client pipelined, so the client reads the REJECT whole
// (no reset), then EOF, and none of its requests is answered.
func TestRejectThenDiscard(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.ClientToken = "tok" })
	var pipelined []byte
	for i := range 40000 { // 640 KB behind the bad AUTH
		pipelined = wire.AppendPing(pipelined, uint32(i))
	}
	for _, halfClose := range []bool{true, false} {
		c := st.DialRaw(t, s.Addr(), nil)
		h := c.ReadHello()
		a := st.NewAuth(wire.RoleClient, "wrong", &h)
		errc := make(chan error, 1)
		go func() {
			err := c.WriteErr(append(wire.AppendAuth(nil, &a), pipelined...))
			if err == nil && halfClose {
				err = c.CloseWrite()
			}
			errc <- err
		}()
		expectReject(t, c, wire.CodeAuthFailed)
		if err := <-errc; err != nil {
			t.Fatalf("halfClose=%v: the server did not discard the pipelined requests: %v", halfClose, err)
		}
	}
}

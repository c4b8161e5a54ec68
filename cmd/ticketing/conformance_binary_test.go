package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/servertest"
)

// The server package's conformance suite runs against servers started
// in-process; this one runs the protocol's main rules (protocol.md §1–§6)
// over real TCP against the built binary, `ticketing serve`, configured by
// flags as an operator would.

const confToken = "conformance-token"

// spawnServe starts `ticketing serve` with args on a port the kernel picks
// and returns the process and its address.
func spawnServe(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	bin := ticketingBin(t)
	w := newWorld(t, bin, "")
	p := w.start("", append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	return p, servingAddr(t, p)
}

// servingAddr waits for serve's log line naming the address it listens on.
func servingAddr(t *testing.T, p *proc) string {
	t.Helper()
	re := regexp.MustCompile(`msg=serving addr=(\S+)`)
	var addr string
	waitFor(t, 20*time.Second, func() bool {
		if m := re.FindStringSubmatch(p.err.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, "serve to log its address")
	return addr
}

func TestConformanceBinary(t *testing.T) {
	ticketingBin(t)
	t.Parallel()
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte(confToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, addr := spawnServe(t, "--token-file", tf, "--max-lease", "10s", "--max-wait", "5s",
		"--max-waiters-per-key", "6", "--max-inflight", "8", "--data-dir", filepath.Join(dir, "data"))
	admin := servertest.Options{Role: wire.RoleAdmin, Token: confToken}
	client := servertest.Options{Role: wire.RoleClient, Token: confToken}

	t.Run("handshake", func(t *testing.T) {
		c := servertest.DialRaw(t, addr, nil)
		h := c.ReadHello()
		if !h.TokensConfigured() {
			t.Fatal("HELLO flags: tokens configured bit not set")
		}
		bad := servertest.NewAuth(wire.RoleClient, "wrong", &h)
		c.Write(wire.AppendAuth(nil, &bad))
		if w := c.ReadWelcome(); w.Accepted() || w.Code != wire.CodeAuthFailed {
			t.Fatalf("wrong token: %+v, want REJECT AUTH_FAILED", w)
		}
		c.ExpectEOF()
		ok := servertest.Dial(t, addr, client) // verifies server_proof
		if ok.Welcome.MaxInflight != 8 {
			t.Fatalf("max_inflight %d, want 8", ok.Welcome.MaxInflight)
		}
	})

	t.Run("field checks keep the connection usable", func(t *testing.T) {
		c := servertest.Dial(t, addr, client)
		cases := []struct {
			name  string
			frame []byte
			code  wire.Code
		}{
			{"flags", append(servertest.Header('A', 1, 1, 1, servertest.AcquireArg(1000, 0)), 'k'), wire.CodeBadFlags},
			{"empty key", servertest.Header('A', 0, 0, 2, servertest.AcquireArg(1000, 0)), wire.CodeBadKey},
			{"control char", append(servertest.Header('A', 2, 0, 3, servertest.AcquireArg(1000, 0)), 'k', 0x1b), wire.CodeBadKey},
			{"lease 0", wire.AppendAcquire(nil, 4, "k", 0, 0), wire.CodeBadLease},
			{"lease above --max-lease", wire.AppendAcquire(nil, 5, "k", 10001, 0), wire.CodeBadLease},
			{"wait above --max-wait", wire.AppendAcquire(nil, 6, "k", 1000, 5001), wire.CodeBadWait},
			{"client role admin query", wire.AppendQuery(nil, 7, []byte(`{"cmd":"status"}`)), wire.CodeNotPermitted},
		}
		for _, tc := range cases {
			r := c.Do(tc.frame)
			if r.Status != wire.StatusError || r.Code != tc.code {
				t.Errorf("%s: %s, want E %v", tc.name, servertest.Describe(r), tc.code)
			}
			c.Ping()
		}
	})

	t.Run("2000 pipelined requests in one write", func(t *testing.T) {
		c := servertest.Dial(t, addr, client)
		var b []byte
		for i := range uint32(1000) {
			b = wire.AppendAcquire(b, 2*i+1, "pipe/"+string(rune('a'+i%26)), 1000, 0)
			b = wire.AppendPing(b, 2*i+2)
		}
		c.Write(b)
		seen := map[uint32]bool{}
		for range 2000 {
			r := c.Read()
			if seen[r.ReqID] || r.ReqID == 0 || r.ReqID > 2000 {
				t.Fatalf("unexpected or repeated req_id: %s", servertest.Describe(r))
			}
			seen[r.ReqID] = true
		}
	})

	t.Run("FIFO handoff with strictly increasing tokens", func(t *testing.T) {
		holder := servertest.Dial(t, addr, client)
		tok := holder.MustAcquire("fifo", 10000)
		waiters := make([]*servertest.Conn, 5)
		for i := range waiters {
			waiters[i] = servertest.Dial(t, addr, client)
			waiters[i].Write(wire.AppendAcquire(nil, 1, "fifo", 10000, 5000))
			waitDepth(t, addr, admin, "fifo", i+1)
		}
		extra := servertest.Dial(t, addr, client)
		extra.Write(wire.AppendAcquire(nil, 1, "fifo", 10000, 5000))
		waitDepth(t, addr, admin, "fifo", 6)
		if r := servertest.Dial(t, addr, client).Acquire("fifo", 1000, 100); r.Status != wire.StatusBusy || r.Code != wire.CodeQueueFull {
			t.Fatalf("7th waiter: %s, want B QUEUE_FULL", servertest.Describe(r))
		}
		prev, who := tok, holder
		for i, w := range waiters {
			if r := who.Release("fifo", prev); r.Status != wire.StatusReleased {
				t.Fatalf("release %d: %s", i, servertest.Describe(r))
			}
			r := w.Read()
			if r.Status != wire.StatusGranted || r.Value <= prev {
				t.Fatalf("waiter %d: %s, want G with a token above %d", i, servertest.Describe(r), prev)
			}
			prev, who = r.Value, w
		}
		who.Release("fifo", prev)
		if r := extra.Read(); r.Status != wire.StatusGranted || r.Value <= prev {
			t.Fatalf("last waiter: %s", servertest.Describe(r))
		}
	})

	t.Run("lease expiry hands off; wait timeout; closed waiter skipped; closed holder kept", func(t *testing.T) {
		h := servertest.Dial(t, addr, client)
		granted := time.Now()
		tok := h.MustAcquire("lease", 300)
		gone := servertest.Dial(t, addr, client)
		gone.Write(wire.AppendAcquire(nil, 1, "lease", 1000, 5000))
		waitDepth(t, addr, admin, "lease", 1)
		w := servertest.Dial(t, addr, client)
		w.Write(wire.AppendAcquire(nil, 1, "lease", 1000, 5000))
		waitDepth(t, addr, admin, "lease", 2)
		gone.Close()
		waitDepth(t, addr, admin, "lease", 1)
		h.Close() // the holder's lock stays held until its lease ends
		r := w.Read()
		if r.Status != wire.StatusGranted || r.Value <= tok {
			t.Fatalf("after lease expiry: %s", servertest.Describe(r))
		}
		if d := time.Since(granted); d < 300*time.Millisecond {
			t.Fatalf("the closed holder's 300 ms lease ended after %v", d)
		}
		t2 := servertest.Dial(t, addr, client)
		if r := t2.Acquire("lease", 1000, 200); r.Status != wire.StatusTimeout {
			t.Fatalf("wait 200 ms on a held key: %s, want T", servertest.Describe(r))
		}
	})

	t.Run("unknown op closes after E BAD_OP", func(t *testing.T) {
		c := servertest.Dial(t, addr, client)
		c.Write(servertest.Header('Z', 0, 0, 77, 0))
		r := c.Read()
		if r.Status != wire.StatusError || r.Code != wire.CodeBadOp || r.ReqID != 77 {
			t.Fatalf("unknown op: %s", servertest.Describe(r))
		}
		c.ExpectEOF()
	})

	// SIGTERM: waiters answered B SHUTTING_DOWN, exit 0 within 5 s.
	h := servertest.Dial(t, addr, client)
	last := h.MustAcquire("drain", 10000)
	w := servertest.Dial(t, addr, client)
	w.Write(wire.AppendAcquire(nil, 9, "drain", 1000, 5000))
	waitDepth(t, addr, admin, "drain", 1)
	start := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := w.Read(); r.Status != wire.StatusBusy || r.Code != wire.CodeShuttingDown {
		t.Fatalf("waiter at shutdown: %s, want B SHUTTING_DOWN", servertest.Describe(r))
	}
	if code := srv.wait(t); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM: %s", code, srv.err.String())
	}
	if d := time.Since(start); d > 5*time.Second+2*time.Second {
		t.Errorf("shutdown took %v, budget 5 s", d)
	}

	// Restart with the same data dir: "drain" was still held at the
	// shutdown, so the node answers B RECOVERING until that lease has ended
	// (restart grace, docs/operations.md), then grants; tokens continue above
	// every token issued.
	_, addr2 := spawnServe(t, "--token-file", tf, "--data-dir", filepath.Join(dir, "data"))
	c := servertest.Dial(t, addr2, client)
	var tok uint64
	for deadline := time.Now().Add(30 * time.Second); tok == 0; time.Sleep(100 * time.Millisecond) {
		switch r := c.Acquire("after-restart", 1000, 0); {
		case r.Status == wire.StatusGranted:
			tok = r.Value
		case r.Status != wire.StatusBusy || r.Code != wire.CodeRecovering || time.Now().After(deadline):
			t.Fatalf("acquire after the restart: %s, want G or B RECOVERING", servertest.Describe(r))
		}
	}
	if tok <= last {
		t.Fatalf("token after restart %d, not above %d", tok, last)
	}
}

// waitDepth waits until admin `locks` shows key with the queue depth.
func waitDepth(t *testing.T, addr string, opts servertest.Options, key string, depth int) {
	t.Helper()
	c := servertest.Dial(t, addr, opts)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r := c.Query(`{"cmd":"locks","prefix":"` + key + `"}`)
		var lr wire.LocksReply
		if r.Status == wire.StatusAdmin && json.Unmarshal(r.Payload, &lr) == nil {
			for _, l := range lr.Locks {
				if l.Key == key && l.QueueDepth == depth {
					return
				}
			}
		}
	}
	t.Fatalf("key %q never reached queue depth %d", key, depth)
}

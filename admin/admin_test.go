package admin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

func TestEscapeKey(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"orders/42", "orders/42"},
		{"jobs:nightly-backup_v2", "jobs:nightly-backup_v2"},
		{"café/ключ/鍵", "café/ключ/鍵"},
		{"with space", `"with space"`},
		{"tab\there", `"tab\there"`},
		{"esc\x1b[2J", `"esc\x1b[2J"`},
		{"nl\n", `"nl\n"`},
		{"del\x7f", `"del\x7f"`},
		{"c1\u0085", `"c1\u0085"`},
		{"rtl\u202eevil", `"rtl\u202eevil"`},
		{"zero\u200bwidth", `"zero\u200bwidth"`},
		{"nbsp\u00a0", `"nbsp\u00a0"`},
		{`"quoted"`, `"\"quoted\""`},
		{`back\slash`, `back\slash`},
		{"bad\xffutf8", `"bad\xffutf8"`},
		{"", `""`},
	} {
		if got := EscapeKey(tt.in); got != tt.want {
			t.Errorf("EscapeKey(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestPingResult(t *testing.T) {
	t1 := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	// t0 = t1 − 4 ms; the midpoint is t1 − 2 ms; the server read 9.999 s + 5 ms ahead of it.
	server := t1.Add(-2 * time.Millisecond).Add(5 * time.Millisecond)
	p := pingResult(server, 4*time.Millisecond, t1)
	if p.RTT != 4*time.Millisecond || p.Offset != 5*time.Millisecond || p.ErrorBound != 2*time.Millisecond || !p.ServerTime.Equal(server) {
		t.Errorf("%+v", p)
	}
	p = pingResult(t1.Add(-3*time.Millisecond), 2*time.Millisecond, t1)
	if p.Offset != -2*time.Millisecond || p.ErrorBound != time.Millisecond {
		t.Errorf("%+v", p)
	}
}

func TestCannotGrant(t *testing.T) {
	ok := wire.StatusReply{Role: wire.NodeSingle, CanGrant: true, MaxKeys: 10, MaxConnections: 10}
	for _, tt := range []struct {
		name string
		mut  func(*wire.StatusReply)
		want string
	}{
		{"ok", func(*wire.StatusReply) {}, ""},
		{"draining", func(s *wire.StatusReply) { s.Draining = true }, "draining (shutting down)"},
		{"server says no", func(s *wire.StatusReply) { s.CanGrant, s.Reason = false, "at max_keys" }, "cannot grant: at max_keys"},
		{"no can_grant member (older server): fail closed", func(s *wire.StatusReply) { s.CanGrant = false }, "cannot grant"},
		{"follower without leader", func(s *wire.StatusReply) { s.Role = wire.NodeFollower }, "no leader known"},
		{"follower with leader", func(s *wire.StatusReply) { s.Role, s.Leader = wire.NodeFollower, "n1:7470" }, ""},
		{"keys at max", func(s *wire.StatusReply) { s.Keys = 10 }, "at max_keys"},
	} {
		st := ok
		tt.mut(&st)
		if got := cannotGrant(&st); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func startServer(t *testing.T, mut func(*server.Config)) string {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	if mut != nil {
		mut(&cfg)
	}
	s, err := server.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.Addr()
}

func TestAgainstServer(t *testing.T) {
	addr := startServer(t, func(c *server.Config) { c.NodeID = "n-test" })
	ctx := context.Background()
	c, err := Dial(ctx, addr, client.WithAdminToken(""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	holder, err := c.Acquire(ctx, "jobs/a", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "other", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.Acquire(wctx, "jobs/a", time.Minute, time.Minute)
	var lr wire.LocksReply
	until(10*time.Second, func() bool {
		if lr, err = Locks(ctx, c, "jobs/", 0); err != nil {
			t.Fatal(err)
		}
		return len(lr.Locks) == 1 && lr.Locks[0].QueueDepth == 1
	})
	if lr.Total != 1 || len(lr.Locks) != 1 || lr.Locks[0].Key != "jobs/a" || lr.Locks[0].Token != holder.Token() || lr.Locks[0].QueueDepth != 1 {
		t.Fatalf("locks %+v", lr)
	}
	if lr, err = Locks(ctx, c, "", 1); err != nil || !lr.Truncated || lr.Total != 2 || lr.Locks[0].Key != "jobs/a" {
		t.Errorf("limit 1: %+v %v", lr, err)
	}
	if _, err := Locks(ctx, c, "", wire.LocksMaxLimit+1); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("limit too large: %v", err)
	}

	st, err := Status(ctx, c)
	if err != nil || st.NodeID != "n-test" || st.Role != wire.NodeSingle || st.Holders != 2 || st.Waiters != 1 || !st.CanGrant {
		t.Errorf("status %+v %v", st, err)
	}
	ms, err := Members(ctx, c)
	if err != nil || len(ms) != 1 || ms[0].Role != wire.NodeSingle || ms[0].ClientAddr != addr {
		t.Errorf("members %+v %v", ms, err)
	}
	p, err := Ping(ctx, c)
	if err != nil || p.RTT <= 0 || p.ErrorBound != p.RTT/2 || p.Offset.Abs() > time.Second {
		t.Errorf("ping %+v %v", p, err)
	}

	// A client-role connection may not run admin queries.
	cc, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var pe *client.ProtocolError
	if _, err := Status(ctx, cc); !errors.As(err, &pe) || pe.Code != wire.CodeNotPermitted {
		t.Errorf("client role status: %v", err)
	}
}

func TestHealth(t *testing.T) {
	good := startServer(t, nil)
	full := startServer(t, func(c *server.Config) { c.MaxKeys = 1 })
	fc, err := Dial(context.Background(), full)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if _, err := fc.Acquire(context.Background(), "only", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	tokened := startServer(t, func(c *server.Config) { c.ClientToken = "s3cret" })
	down := "127.0.0.1:1"

	res := Health(context.Background(), []string{good, full, down, tokened},
		client.WithAdminToken(""), client.WithDialTimeout(time.Second))
	if len(res) != 4 {
		t.Fatal(res)
	}
	if r := res[0]; !r.Healthy || r.Reason != "" || r.Err != nil || r.RTT <= 0 || r.Status == nil || r.Addr != good {
		t.Errorf("good: %+v", r)
	}
	if r := res[1]; r.Healthy || r.Err != nil || r.Status == nil || r.Reason != "cannot grant: at max_keys" {
		t.Errorf("full: %+v", r)
	}
	if r := res[2]; r.Healthy || !errors.Is(r.Err, client.ErrConnect) || r.Reason == "" {
		t.Errorf("down: %+v", r)
	}
	if r := res[3]; r.Healthy || !errors.Is(r.Err, client.ErrAuth) {
		t.Errorf("wrong token: %+v", r)
	}
}

// until is the package's wait on an observation: it polls cond every 20 ms
// for at most d and reports whether it came to hold; the caller's
// assertions then say what was seen.
func until(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

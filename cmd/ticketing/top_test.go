package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

func TestNewCmdTop(t *testing.T) {
	def := ConnOptions{Addrs: []string{"127.0.0.1:7470"}, Timeout: 5 * time.Second}
	tests := []struct {
		name     string
		argv     []string
		env      map[string]string
		want     TopOptions // compared: Conn.{Addrs,Token,AdminToken,Timeout}, Interval, Prefix, Limit, Timeout
		wantCode int
	}{
		{name: "defaults", want: TopOptions{Conn: def, Interval: time.Second, Limit: 100}},
		{name: "flags",
			argv: []string{"--addr", "a:1,b:2, c:3", "--interval", "2.5", "--prefix", "jobs/", "--limit", "50", "--timeout", "3s", "--admin-token", "adm"},
			want: TopOptions{Conn: ConnOptions{Addrs: []string{"a:1", "b:2", "c:3"}, AdminToken: "adm", Timeout: 3 * time.Second},
				Interval: 2500 * time.Millisecond, Prefix: "jobs/", Limit: 50, Timeout: 3 * time.Second}},
		{name: "env", env: map[string]string{"TICKETING_ADDR": "x:9", "TICKETING_INTERVAL": "500ms", "TICKETING_PREFIX": "p/", "TICKETING_TIMEOUT": "4s"},
			want: TopOptions{Conn: ConnOptions{Addrs: []string{"x:9"}, Timeout: 4 * time.Second}, Interval: 500 * time.Millisecond, Prefix: "p/", Limit: 100, Timeout: 4 * time.Second}},
		{name: "interval too short", argv: []string{"--interval", "10ms"}, wantCode: ExitUsage},
		{name: "bad interval", argv: []string{"--interval", "often"}, wantCode: ExitUsage},
		{name: "limit zero", argv: []string{"--limit", "0"}, wantCode: ExitUsage},
		{name: "limit too big", argv: []string{"--limit", "10001"}, wantCode: ExitUsage},
		{name: "bad addr", argv: []string{"--addr", "nohost"}, wantCode: ExitUsage},
		{name: "args", argv: []string{"extra"}, wantCode: ExitUsage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ios, _, _ := testIO("")
			var got *TopOptions
			cmd := newCmdTop(newFactory(ios), func(_ context.Context, _ *IO, o *TopOptions) error { got = o; return nil })
			err := execCmd(t, cmd, tc.argv...)
			if tc.wantCode != 0 {
				if code, _ := codeOf(err); code != tc.wantCode {
					t.Fatalf("err = %v (exit %d), want exit %d", err, code, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if !slices.Equal(got.Conn.Addrs, w.Conn.Addrs) || got.Conn.Token != w.Conn.Token || got.Conn.AdminToken != w.Conn.AdminToken ||
				got.Conn.Timeout != w.Conn.Timeout || got.Interval != w.Interval || got.Prefix != w.Prefix || got.Limit != w.Limit || got.Timeout != w.Timeout {
				t.Errorf("options = %+v\nwant %+v", *got, w)
			}
			if got.IsTerminal == nil {
				t.Error("no terminal check")
			}
		})
	}
}

// topSource is a tui.Source with one node holding one queued key.
type topSource struct{}

func (topSource) Status(context.Context, string) (wire.StatusReply, error) {
	return wire.StatusReply{NodeID: "n1", Role: wire.NodeSingle, UptimeMS: 61_000, Keys: 1, Holders: 1, Waiters: 3, Connections: 5, CanGrant: true}, nil
}

func (topSource) Locks(_ context.Context, _, prefix string, _ int) (wire.LocksReply, error) {
	return wire.LocksReply{Total: 1, Locks: []wire.LockEntry{{Key: "jobs/x\x1b[2J", Token: 4242, LeaseRemainingMS: 9000, QueueDepth: 3, OldestWaiterAgeMS: 1200}}}, nil
}

// syncBuffer is a bytes.Buffer safe for the program's writer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// runTop with a fake source draws the dashboard (alternate screen in and
// out, the key escaped) and returns nil on q.
func TestRunTop(t *testing.T) {
	inR, inW := io.Pipe()
	out := &syncBuffer{}
	ios := &IO{In: inR, Out: out, ErrOut: io.Discard}
	opts := &TopOptions{Conn: ConnOptions{Addrs: []string{"127.0.0.1:7470"}}, Interval: 100 * time.Millisecond, Limit: 100,
		Source: topSource{}, IsTerminal: func(any) bool { return true }}
	done := make(chan error, 1)
	go func() { done <- runTop(context.Background(), ios, opts) }()

	deadline := time.After(10 * time.Second)
	for !strings.Contains(out.String(), "4242") {
		select {
		case err := <-done:
			t.Fatalf("runTop returned early: %v\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("dashboard never showed the key:\n%q", out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := inW.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runTop = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not quit")
	}
	inW.Close()
	s := out.String()
	for _, want := range []string{"\x1b[?1049h", "\x1b[?1049l", `"jobs/x\x1b[2J"`} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%q", want, s)
		}
	}
	if strings.Contains(s, "jobs/x\x1b[2J") {
		t.Error("the raw key reached the terminal")
	}
}

func TestRunTopNeedsTerminal(t *testing.T) {
	ios, _, _ := testIO("")
	err := runTop(context.Background(), ios, &TopOptions{Conn: ConnOptions{Addrs: []string{"a:1"}}, Interval: time.Second, Limit: 100,
		Source: topSource{}, IsTerminal: func(any) bool { return false }})
	if code, msg := codeOf(err); code != ExitUsage || !strings.Contains(msg, "needs a terminal") {
		t.Errorf("exit %d %q, want %d and a hint", code, msg, ExitUsage)
	}
}

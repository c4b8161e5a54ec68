package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

func TestNewCmdAcquire(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tokFile, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		argv     []string
		env      map[string]string
		want     AcquireOptions // compared: Key, Lease, Wait, ConflictExitCode, Output, Conn.{Addrs,Token,AdminToken,Timeout}
		wantCode int            // exit code of the error, 0: no error
	}{
		{name: "defaults", argv: []string{"k"},
			want: AcquireOptions{Key: "k", Lease: 30 * time.Second, Wait: 10 * time.Second, ConflictExitCode: 3, Output: "text",
				Conn: ConnOptions{Addrs: []string{"127.0.0.1:7470"}, Timeout: 5 * time.Second}}},
		{name: "plain seconds", argv: []string{"k", "-w", "2.5", "-l", "90"},
			want: AcquireOptions{Key: "k", Lease: 90 * time.Second, Wait: 2500 * time.Millisecond, ConflictExitCode: 3, Output: "text",
				Conn: ConnOptions{Addrs: []string{"127.0.0.1:7470"}, Timeout: 5 * time.Second}}},
		{name: "nonblock and -E and json", argv: []string{"jobs/x", "-n", "-E", "0", "-o", "json", "--lease", "1m30s"},
			want: AcquireOptions{Key: "jobs/x", Lease: 90 * time.Second, Wait: 0, ConflictExitCode: 0, Output: "json",
				Conn: ConnOptions{Addrs: []string{"127.0.0.1:7470"}, Timeout: 5 * time.Second}}},
		{name: "env", argv: []string{"k"},
			env: map[string]string{"TICKETING_ADDR": "a:1, b:2", "TICKETING_TOKEN": "tok", "TICKETING_WAIT": "1.5", "TICKETING_TIMEOUT": "750ms"},
			want: AcquireOptions{Key: "k", Lease: 30 * time.Second, Wait: 1500 * time.Millisecond, ConflictExitCode: 3, Output: "text",
				Conn: ConnOptions{Addrs: []string{"a:1", "b:2"}, Token: "tok", Timeout: 750 * time.Millisecond}}},
		{name: "flag beats env; token file beats token", argv: []string{"k", "--addr", "c:3", "--token-file", tokFile, "--admin-token", "adm"},
			env: map[string]string{"TICKETING_ADDR": "a:1", "TICKETING_TOKEN": "tok"},
			want: AcquireOptions{Key: "k", Lease: 30 * time.Second, Wait: 10 * time.Second, ConflictExitCode: 3, Output: "text",
				Conn: ConnOptions{Addrs: []string{"c:3"}, Token: "s3cret", AdminToken: "adm", Timeout: 5 * time.Second}}},
		{name: "inside run: TICKETING_TOKEN is a fencing token", argv: []string{"k"},
			env: map[string]string{"TICKETING_TOKEN": "123", envFencingToken: "123", envLeaseDeadline: "2030-01-01T00:00:00Z"},
			want: AcquireOptions{Key: "k", Lease: 30 * time.Second, Wait: 10 * time.Second, ConflictExitCode: 3, Output: "text",
				Conn: ConnOptions{Addrs: []string{"127.0.0.1:7470"}, Timeout: 5 * time.Second}}},
		{name: "inside run: --token still counts", argv: []string{"k", "--token", "t"},
			env: map[string]string{"TICKETING_TOKEN": "123", envFencingToken: "123", envLeaseDeadline: "2030-01-01T00:00:00Z"},
			want: AcquireOptions{Key: "k", Lease: 30 * time.Second, Wait: 10 * time.Second, ConflictExitCode: 3, Output: "text",
				Conn: ConnOptions{Addrs: []string{"127.0.0.1:7470"}, Token: "t", Timeout: 5 * time.Second}}},
		{name: "wait and nonblock", argv: []string{"k", "-w", "3", "-n"}, wantCode: ExitUsage},
		{name: "bad duration", argv: []string{"k", "-w", "soon"}, wantCode: ExitUsage},
		{name: "negative duration", argv: []string{"k", "-w", "-1"}, wantCode: ExitUsage},
		{name: "bad env duration", argv: []string{"k"}, env: map[string]string{"TICKETING_LEASE": "forever"}, wantCode: ExitUsage},
		{name: "zero lease", argv: []string{"k", "--lease", "0"}, wantCode: ExitUsage},
		{name: "bad key", argv: []string{"a\x01b"}, wantCode: ExitUsage},
		{name: "no key", argv: []string{}, wantCode: ExitUsage},
		{name: "bad output", argv: []string{"k", "-o", "yaml"}, wantCode: ExitUsage},
		{name: "bad addr", argv: []string{"k", "--addr", "nohostport"}, wantCode: ExitUsage},
		{name: "missing token file", argv: []string{"k", "--token-file", "/nonexistent/tok"}, wantCode: ExitUsage},
		{name: "bad -E", argv: []string{"k", "-E", "300"}, wantCode: ExitUsage},
		{name: "tls cert without key", argv: []string{"k", "--tls-cert", tokFile}, wantCode: ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var got *AcquireOptions
			ios, _, _ := testIO("")
			cmd := newCmdAcquire(newFactory(ios), func(_ context.Context, _ *IO, o *AcquireOptions) error { got = o; return nil })
			err := execCmd(t, cmd, tt.argv...)
			if tt.wantCode != 0 {
				code := exitCodeForTest(err)
				if code != tt.wantCode {
					t.Fatalf("err %v: code %d, want %d", err, code, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Key != tt.want.Key || got.Lease != tt.want.Lease || got.Wait != tt.want.Wait ||
				got.ConflictExitCode != tt.want.ConflictExitCode || got.Output != tt.want.Output {
				t.Errorf("got %+v\nwant %+v", *got, tt.want)
			}
			checkConn(t, got.Conn, tt.want.Conn)
			if got.Connect == nil || got.Signals == nil {
				t.Error("Connect or Signals not set")
			}
		})
	}
}

// exitCodeForTest is the code Main gives an error from cobra's Execute
// (cobra's own usage errors included).
func exitCodeForTest(err error) int {
	if err == nil {
		return 0
	}
	c, _ := codeOf(err)
	return c
}

func checkConn(t *testing.T, got, want ConnOptions) {
	t.Helper()
	if fmt.Sprint(got.Addrs) != fmt.Sprint(want.Addrs) || got.Token != want.Token || got.AdminToken != want.AdminToken || got.Timeout != want.Timeout {
		t.Errorf("conn: got addrs=%v token=%q admin=%q timeout=%v, want addrs=%v token=%q admin=%q timeout=%v",
			got.Addrs, got.Token, got.AdminToken, got.Timeout, want.Addrs, want.Token, want.AdminToken, want.Timeout)
	}
}

func TestAcquireRun(t *testing.T) {
	base := func(f *fakeLocker) *AcquireOptions {
		return &AcquireOptions{Conn: testConn(), Output: "text", Key: "k", Lease: 30 * time.Second, Wait: time.Second,
			ConflictExitCode: ExitTimeout, Connect: f.connect, Signals: noSignals}
	}
	timeoutErr := &client.OpError{Op: "acquire", Key: "k", Err: client.ErrTimeout}

	t.Run("prints the token alone", func(t *testing.T) {
		f := &fakeLocker{token: 1234567890123456789}
		ios, out, errOut := testIO("")
		if err := runAcquire(context.Background(), ios, base(f)); err != nil {
			t.Fatal(err)
		}
		if out.String() != "1234567890123456789\n" || errOut.Len() != 0 {
			t.Fatalf("stdout %q stderr %q", out, errOut)
		}
		if !f.closed || len(f.released) != 0 {
			t.Errorf("closed=%v released=%v: the lock must outlive the command", f.closed, f.released)
		}
	})
	t.Run("json", func(t *testing.T) {
		f := &fakeLocker{token: 1<<62 + 1}
		ios, out, _ := testIO("")
		o := base(f)
		o.Output = "json"
		if err := runAcquire(context.Background(), ios, o); err != nil {
			t.Fatal(err)
		}
		var j acquireJSON
		if err := json.Unmarshal(out.Bytes(), &j); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if j.Key != "k" || j.Token != strconv.FormatUint(1<<62+1, 10) || j.LeaseMS != 30000 {
			t.Errorf("%+v", j)
		}
		if d, err := time.Parse(time.RFC3339Nano, j.Deadline); err != nil || time.Until(d) < 25*time.Second {
			t.Errorf("deadline %q: %v", j.Deadline, err)
		}
	})
	for _, tt := range []struct {
		name     string
		err      error
		conflict int
		code     int
	}{
		{"timed out", timeoutErr, ExitTimeout, ExitTimeout},
		{"timed out with -E", timeoutErr, 0, 0},
		{"timed out with -E 42", timeoutErr, 42, 42},
		{"busy", &client.OpError{Op: "acquire", Key: "k", Err: &client.BusyError{Code: wire.CodeQueueFull}}, 42, ExitBusy},
		{"indeterminate", &client.OpError{Op: "acquire", Key: "k", Err: fmt.Errorf("%w: connection lost", client.ErrIndeterminate)}, 3, ExitIndeterminate},
		{"bad lease", &client.OpError{Op: "acquire", Key: "k", Err: &client.ProtocolError{Code: wire.CodeBadLease}}, 3, ExitUsage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLocker{acquireErr: tt.err}
			ios, out, _ := testIO("")
			o := base(f)
			o.ConflictExitCode = tt.conflict
			err := runAcquire(context.Background(), ios, o)
			code, line := codeOf(err)
			if code != tt.code || out.Len() != 0 {
				t.Fatalf("code %d (%s), want %d; stdout %q", code, line, tt.code, out)
			}
			if tt.code != 0 && line == "" {
				t.Error("no error line")
			}
		})
	}
	t.Run("connect errors", func(t *testing.T) {
		for _, tt := range []struct {
			err  error
			code int
		}{
			{&client.OpError{Op: "dial", Err: fmt.Errorf("%w: refused", client.ErrConnect)}, ExitConnect},
			{&client.OpError{Op: "dial", Err: &client.RejectError{Code: wire.CodeAuthFailed}}, ExitAuth},
		} {
			ios, _, _ := testIO("")
			o := base(&fakeLocker{})
			o.Connect = func(context.Context) (lockClient, error) { return nil, tt.err }
			if code, line := codeOf(runAcquire(context.Background(), ios, o)); code != tt.code {
				t.Errorf("%v: code %d (%s), want %d", tt.err, code, line, tt.code)
			}
		}
	})
	t.Run("signal while waiting withdraws and exits 128+N", func(t *testing.T) {
		f := &fakeLocker{block: true, waiting: make(chan struct{})}
		sigs := make(chan os.Signal, 1)
		o := base(f)
		o.Signals = chanSignals(sigs)
		ios, out, _ := testIO("")
		go func() { <-f.waiting; sigs <- syscall.SIGINT }() // while it waits
		err := runAcquire(context.Background(), ios, o)
		code, line := codeOf(err)
		if code != 130 || out.Len() != 0 {
			t.Fatalf("code %d (%s), stdout %q", code, line, out)
		}
		if !f.drained || !f.closed {
			t.Errorf("drained=%v closed=%v: the withdrawn wait must be drained before exit", f.drained, f.closed)
		}
	})
}

//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
)

func TestNewCmdRun(t *testing.T) {
	tests := []struct {
		name       string
		argv       []string
		wantCmd    []string
		wantLease  time.Duration
		wantWait   time.Duration
		wantGrace  time.Duration
		wantMargin time.Duration
		wantCode   int
	}{
		{name: "defaults", argv: []string{"k", "--", "echo", "-n", "hi"}, wantCmd: []string{"echo", "-n", "hi"},
			wantLease: 30 * time.Second, wantWait: 10 * time.Second, wantGrace: 5 * time.Second, wantMargin: 6 * time.Second},
		{name: "flags before --", argv: []string{"k", "-n", "--lease", "1m", "--kill-grace", "2", "--lease-margin", "3s", "--", "sh", "-c", "exit 7"},
			wantCmd: []string{"sh", "-c", "exit 7"}, wantLease: time.Minute, wantWait: 0, wantGrace: 2 * time.Second, wantMargin: 3 * time.Second},
		{name: "short lease: grace a quarter, margin half", argv: []string{"k", "--lease", "4s", "--", "true"}, wantCmd: []string{"true"},
			wantLease: 4 * time.Second, wantWait: 10 * time.Second, wantGrace: time.Second, wantMargin: 2 * time.Second},
		{name: "grace does not fit the lease", argv: []string{"k", "--lease", "4s", "--kill-grace", "5s", "--", "true"}, wantCode: ExitUsage},
		{name: "margin leaves no time after SIGKILL", argv: []string{"k", "--lease", "1m", "--kill-grace", "2s", "--lease-margin", "2s", "--", "true"}, wantCode: ExitUsage},
		{name: "-- required", argv: []string{"k", "true"}, wantCode: ExitUsage},
		{name: "no command", argv: []string{"k", "--"}, wantCode: ExitUsage},
		{name: "a key twice before --", argv: []string{"k", "k", "--", "true"}, wantCode: ExitUsage}, // two keys are a key set (protocol 1.1)
		{name: "margin not below lease", argv: []string{"k", "--lease", "2s", "--lease-margin", "2s", "--", "true"}, wantCode: ExitUsage},
		{name: "bad grace", argv: []string{"k", "--kill-grace", "x", "--", "true"}, wantCode: ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			var got *RunOptions
			ios, _, _ := testIO("")
			err := execCmd(t, newCmdRun(newFactory(ios), func(_ context.Context, _ *IO, o *RunOptions) error { got = o; return nil }), tt.argv...)
			if tt.wantCode != 0 {
				if code := exitCodeForTest(err); code != tt.wantCode {
					t.Fatalf("err %v: code %d, want %d", err, code, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Key != "k" || strings.Join(got.Command, "\x00") != strings.Join(tt.wantCmd, "\x00") ||
				got.Lease != tt.wantLease || got.Wait != tt.wantWait || got.KillGrace != tt.wantGrace || got.LeaseMargin != tt.wantMargin {
				t.Errorf("got key=%q cmd=%q lease=%v wait=%v grace=%v margin=%v", got.Key, got.Command, got.Lease, got.Wait, got.KillGrace, got.LeaseMargin)
			}
			if got.Connect == nil || got.Env == nil {
				t.Errorf("Connect/Env not set: %+v", *got)
			}
		})
	}
}

func TestRunRun(t *testing.T) {
	base := func(f *fakeLocker, cmd ...string) *RunOptions {
		return &RunOptions{Conn: testConn(), Key: "jobs/a", Lease: 10 * time.Second, Wait: time.Second,
			ConflictExitCode: ExitTimeout, KillGrace: 300 * time.Millisecond, LeaseMargin: 200 * time.Millisecond,
			Command: cmd, Env: []string{"PATH=" + os.Getenv("PATH"), "TICKETING_TOKEN=parent-secret", "KEEP=1"},
			Connect: f.connect, Signals: noSignals}
	}

	t.Run("environment and exit code passed through", func(t *testing.T) {
		f := &fakeLocker{token: 77}
		ios, out, _ := testIO("")
		before := time.Now()
		err := runRun(context.Background(), ios, base(f, "sh", "-c", `echo "$TICKETING_KEY $TICKETING_FENCING_TOKEN $KEEP $TICKETING_LEASE_DEADLINE $TICKETING_TOKEN"; exit 7`))
		after := time.Now()
		if code, line := codeOf(err); code != 7 || line != "" {
			t.Fatalf("code %d line %q, want 7 silently", code, line)
		}
		fields := strings.Fields(out.String())
		if len(fields) != 5 || fields[0] != "jobs/a" || fields[1] != "77" || fields[2] != "1" || fields[4] != "parent-secret" {
			t.Fatalf("child saw %q", out)
		}
		d, err := time.Parse(time.RFC3339, fields[3])
		// The lease (10 s) from the grant, in whole seconds (RFC 3339): between
		// before+10s-1s and after+10s, however long the run took on a loaded machine.
		if err != nil || d.Before(before.Add(9*time.Second).Truncate(time.Second)) || d.After(after.Add(10*time.Second)) {
			t.Errorf("TICKETING_LEASE_DEADLINE %q: %v", fields[3], err)
		}
		if rel := f.releasedTokens(); len(rel) != 1 || rel[0] != 77 {
			t.Errorf("released %v, want [77]", rel)
		}
	})
	t.Run("success", func(t *testing.T) {
		f := &fakeLocker{}
		ios, _, _ := testIO("")
		if err := runRun(context.Background(), ios, base(f, "true")); err != nil {
			t.Fatal(err)
		}
		if len(f.releasedTokens()) != 1 {
			t.Error("not released")
		}
	})
	t.Run("killed by a signal: 128+N", func(t *testing.T) {
		f := &fakeLocker{}
		ios, _, _ := testIO("")
		code, _ := codeOf(runRun(context.Background(), ios, base(f, "sh", "-c", "kill -USR1 $$")))
		if code != 128+int(syscall.SIGUSR1) {
			t.Fatalf("code %d", code)
		}
	})
	t.Run("command not found: 127, released", func(t *testing.T) {
		f := &fakeLocker{}
		ios, _, _ := testIO("")
		code, line := codeOf(runRun(context.Background(), ios, base(f, "/nonexistent/cmd")))
		if code != 127 || line == "" || len(f.releasedTokens()) != 1 {
			t.Fatalf("code %d line %q released %v", code, line, f.releasedTokens())
		}
	})
	t.Run("not acquired: -E applies, child not started", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "started")
		f := &fakeLocker{acquireErr: &client.OpError{Op: "acquire", Key: "jobs/a", Err: client.ErrTimeout}}
		ios, _, _ := testIO("")
		o := base(f, "touch", marker)
		o.ConflictExitCode = 0
		if code, _ := codeOf(runRun(context.Background(), ios, o)); code != 0 {
			t.Fatalf("code %d", code)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("child started without the lock")
		}
	})
	t.Run("lease ending: process group stopped, exit 9, released", func(t *testing.T) {
		dir := t.TempDir()
		f := &fakeLocker{lease: 700 * time.Millisecond}
		ios, _, errOut := testIO("")
		// The child ignores SIGTERM and leaves a grandchild in its group.
		o := base(f, "sh", "-c", `trap "" TERM; sleep 60 & echo $! > `+dir+`/gc; while :; do sleep 0.05; done`)
		start := time.Now()
		code, line := codeOf(runRun(context.Background(), ios, o))
		el := time.Since(start)
		if code != ExitLeaseLost || line == "" {
			t.Fatalf("code %d line %q, want 9", code, line)
		}
		// SIGTERM at 0.5 s, SIGKILL at 0.8 s.
		if el < 400*time.Millisecond || el > 5*time.Second {
			t.Errorf("took %v", el)
		}
		if !strings.Contains(errOut.String(), "stopping") {
			t.Errorf("stderr %q", errOut)
		}
		if len(f.releasedTokens()) != 1 {
			t.Error("not released")
		}
		assertGone(t, filepath.Join(dir, "gc"))
	})
	t.Run("lease too short to start", func(t *testing.T) {
		f := &fakeLocker{lease: 100 * time.Millisecond}
		ios, _, _ := testIO("")
		code, _ := codeOf(runRun(context.Background(), ios, base(f, "true")))
		if code != ExitLeaseLost || len(f.releasedTokens()) != 1 {
			t.Fatalf("code %d released %v", code, f.releasedTokens())
		}
	})
	t.Run("signal forwarded to the child", func(t *testing.T) {
		dir := t.TempDir()
		f := &fakeLocker{}
		sigs := make(chan os.Signal, 1)
		o := base(f, "sh", "-c", `trap "exit 3" TERM; touch `+dir+`/ready; while :; do sleep 0.05; done`)
		o.Signals = chanSignals(sigs)
		ios, _, _ := testIO("")
		done := make(chan error, 1)
		go func() { done <- runRun(context.Background(), ios, o) }()
		waitFile(t, filepath.Join(dir, "ready"))
		sigs <- syscall.SIGTERM
		select {
		case err := <-done:
			if code, _ := codeOf(err); code != 3 {
				t.Fatalf("code %d, want the child's 3", code)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("run did not end")
		}
		if len(f.releasedTokens()) != 1 {
			t.Error("not released")
		}
	})
	t.Run("signal while waiting: withdrawn, 143, not started", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "started")
		f := &fakeLocker{block: true, waiting: make(chan struct{})}
		sigs := make(chan os.Signal, 1)
		o := base(f, "touch", marker)
		o.Signals = chanSignals(sigs)
		ios, _, _ := testIO("")
		go func() { <-f.waiting; sigs <- syscall.SIGTERM }() // while it waits
		code, line := codeOf(runRun(context.Background(), ios, o))
		if code != 143 || !strings.Contains(line, "withdrawn") {
			t.Fatalf("code %d line %q", code, line)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("child started")
		}
		if !f.drained || len(f.releasedTokens()) != 0 {
			t.Errorf("drained %v released %v", f.drained, f.releasedTokens())
		}
	})
	t.Run("children left behind are stopped before release", func(t *testing.T) {
		dir := t.TempDir()
		f := &fakeLocker{}
		ios, _, _ := testIO("")
		o := base(f, "sh", "-c", `sleep 60 & echo $! > `+dir+`/gc; exit 0`)
		if err := runRun(context.Background(), ios, o); err != nil {
			t.Fatal(err)
		}
		assertGone(t, filepath.Join(dir, "gc"))
	})
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool { _, err := os.Stat(path); return err == nil }, path+" to appear")
}

// assertGone checks that the process whose pid is in pidFile has ended
// (no such process, or a zombie awaiting its reaper) within 3 s.
func assertGone(t *testing.T, pidFile string) {
	t.Helper()
	assertGoneWithin(t, pidFile, 3*time.Second)
}

func assertGoneWithin(t *testing.T, pidFile string, d time.Duration) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid := strings.TrimSpace(string(b))
	deadline := time.Now().Add(d)
	for {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			if _, serr := os.Stat("/proc/self/stat"); serr != nil {
				return // no procfs: trust the group kill
			}
			return
		}
		if f := strings.Fields(string(st)); len(f) > 2 && (f[2] == "Z" || f[2] == "X") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s still running: %s", pid, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

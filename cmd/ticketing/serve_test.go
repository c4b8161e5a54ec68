package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/server/cluster"
)

// serve's cluster flags: the raft timing defaults reach the node, and
// timings raft would refuse at start are a usage error (exit 2, one line)
// before anything listens.
func TestServeRaftTimings(t *testing.T) {
	peers := []string{"--node-id", "n1", "--peers", "n1=127.0.0.1:17471,n2=127.0.0.1:17473,n3=127.0.0.1:17475", "--bootstrap"}
	cases := []struct {
		name          string
		args          []string
		wantErr       string // "" = accepted
		hb, el, lease time.Duration
	}{
		{name: "defaults", hb: cluster.DefaultHeartbeatTimeout, el: cluster.DefaultElectionTimeout, lease: cluster.DefaultLeaderLeaseTimeout},
		{name: "all raised together", args: []string{"--raft-heartbeat-timeout", "1s", "--raft-election-timeout", "1s", "--raft-leader-lease-timeout", "500ms"},
			hb: time.Second, el: time.Second, lease: 500 * time.Millisecond},
		{name: "lease above heartbeat", args: []string{"--raft-leader-lease-timeout", "500ms"}, wantErr: "raft timings"},
		{name: "heartbeat alone raised", args: []string{"--raft-heartbeat-timeout", "1s"}, wantErr: "raft timings"},
		{name: "election below heartbeat", args: []string{"--raft-election-timeout", "100ms"}, wantErr: "raft timings"},
		{name: "below raft's floor", args: []string{"--raft-leader-lease-timeout", "1ms"}, wantErr: "at least 5ms"},
		{name: "zero", args: []string{"--raft-leader-lease-timeout", "0"}, wantErr: "at least 5ms"},
		{name: "negative", args: []string{"--raft-heartbeat-timeout", "-1s"}, wantErr: "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			var got *ServeOptions
			ios, _, _ := testIO("")
			cmd := newCmdServe(newFactory(ios), func(_ context.Context, _ *IO, o *ServeOptions) error { got = o; return nil })
			err := execCmd(t, cmd, append(append([]string{}, peers...), tc.args...)...)
			if tc.wantErr != "" {
				code, line := codeOf(err)
				if code != ExitUsage || !strings.Contains(line, tc.wantErr) || strings.Count(line, "\n") != 0 {
					t.Fatalf("exit %d %q, want %d and one line with %q", code, line, ExitUsage, tc.wantErr)
				}
				if got != nil {
					t.Fatal("serve ran with refused timings")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cc := got.Config.Cluster
			if cc.HeartbeatTimeout != tc.hb || cc.ElectionTimeout != tc.el || cc.LeaderLeaseTimeout != tc.lease {
				t.Errorf("timings %v/%v/%v, want %v/%v/%v", cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout, tc.hb, tc.el, tc.lease)
			}
		})
	}
}

// Every setting that does not parse, from a flag, the environment or the
// config file, is an invalid configuration: one line naming the setting and
// the value, exit 2 — never 0 (issue #22 item 5: TICKETING_MAX_WAIT=abc
// started a server answering every acquire BAD_WAIT).
func TestServeUnparseableSettings(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "ticketing.yaml")
	if err := os.WriteFile(conf, []byte("max-keys: lots\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string // "" = accepted
	}{
		{name: "env duration", env: map[string]string{"TICKETING_MAX_WAIT": "abc"}, wantErr: `max-wait: environment TICKETING_MAX_WAIT "abc"`},
		{name: "env int", env: map[string]string{"TICKETING_MAX_CONNECTIONS": "10k"}, wantErr: `"10k"`},
		{name: "env bool", env: map[string]string{"TICKETING_INSECURE": "maybe"}, wantErr: `insecure`},
		{name: "env new bound", env: map[string]string{"TICKETING_WRITE_TIMEOUT": "soon"}, wantErr: `write-timeout`},
		{name: "config file", args: []string{"--config", conf}, wantErr: `max-keys: config file ` + conf + ` key max-keys "lots"`},
		{name: "flag", args: []string{"--max-lease", "abc"}, wantErr: "max-lease"},
		{name: "env valid", env: map[string]string{"TICKETING_MAX_WAIT": "2m", "TICKETING_FRAME_TIMEOUT": "3s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got *ServeOptions
			ios, _, _ := testIO("")
			cmd := newCmdServe(newFactory(ios), func(_ context.Context, _ *IO, o *ServeOptions) error { got = o; return nil })
			err := execCmd(t, cmd, tc.args...)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.Config.MaxWait != 2*time.Minute || got.Config.FrameTimeout != 3*time.Second {
					t.Fatalf("max wait %v, frame timeout %v", got.Config.MaxWait, got.Config.FrameTimeout)
				}
				return
			}
			code, line := codeOf(err)
			if code != ExitUsage || !strings.Contains(line, tc.wantErr) || strings.Count(line, "\n") != 0 {
				t.Fatalf("exit %d %q, want %d and one line with %q", code, line, ExitUsage, tc.wantErr)
			}
			if got != nil {
				t.Fatal("serve ran with an unreadable setting")
			}
		})
	}
}

// An unknown config file key is an invalid configuration naming the key and
// the closest known one (issue #28 item 2: tls_cert: gave a plaintext
// server, max-leese: and max_lease: left the default).
func TestServeConfigUnknownKeys(t *testing.T) {
	cases := []struct{ conf, key, closest string }{
		{"tls_cert: /x/cert.pem\ntls_key: /x/key.pem\n", "tls_cert", "tls-cert"},
		{"max-leese: 5m\n", "max-leese", "max-lease"},
		{"max_lease: 5m\n", "max_lease", "max-lease"},
		{"listen: 127.0.0.1:0\ntls:\n  cert: x\n", "tls.cert", "tls-cert"},
	}
	for _, tc := range cases {
		clearEnv(t)
		conf := filepath.Join(t.TempDir(), "ticketing.yaml")
		if err := os.WriteFile(conf, []byte(tc.conf), 0o600); err != nil {
			t.Fatal(err)
		}
		var got *ServeOptions
		ios, _, _ := testIO("")
		cmd := newCmdServe(newFactory(ios), func(_ context.Context, _ *IO, o *ServeOptions) error { got = o; return nil })
		code, line := codeOf(execCmd(t, cmd, "--config", conf))
		if code != ExitUsage || !strings.Contains(line, `unknown key "`+tc.key+`"`) || !strings.Contains(line, `did you mean "`+tc.closest+`"`) {
			t.Errorf("%q: exit %d %q, want 2 naming %s and %s", tc.conf, code, line, tc.key, tc.closest)
		}
		if got != nil {
			t.Errorf("%q: serve ran", tc.conf)
		}
	}
	// The accepted spelling is read.
	clearEnv(t)
	conf := filepath.Join(t.TempDir(), "ticketing.yaml")
	if err := os.WriteFile(conf, []byte("max-lease: 5m\nMax-Wait: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got *ServeOptions
	ios, _, _ := testIO("")
	cmd := newCmdServe(newFactory(ios), func(_ context.Context, _ *IO, o *ServeOptions) error { got = o; return nil })
	if err := execCmd(t, cmd, "--config", conf); err != nil {
		t.Fatal(err)
	}
	if got.Config.MaxLease != 5*time.Minute || got.Config.MaxWait != time.Minute {
		t.Fatalf("max lease %v, max wait %v; want 5m, 1m", got.Config.MaxLease, got.Config.MaxWait)
	}
}

// Token files (issue #28 item 4): an empty or whitespace-only file is exit 2
// (it started a server without authentication); a token under 16 bytes is
// refused off loopback and warned about on loopback.
func TestServeTokenRules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty, blank, short := write("empty", ""), write("blank", " \n\t\n"), write("short", "abcde\n")
	good := write("good", "0123456789abcdef\n")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"empty token file", []string{"--token-file", empty}, "empty"},
		{"blank token file", []string{"--token-file", blank}, "empty"},
		{"blank admin token file", []string{"--token-file", good, "--admin-token-file", blank}, "admin-token-file"},
		{"short token off loopback", []string{"--token-file", short, "--listen", "0.0.0.0:0"}, "5 bytes: want at least 16"},
		{"short admin token off loopback", []string{"--token-file", good, "--admin-token", "adm", "--listen", "0.0.0.0:0"}, "admin token is 3 bytes"},
		{"short metrics token off loopback", []string{"--metrics-token", "m", "--metrics-listen", "0.0.0.0:0"}, "metrics token is 1 bytes"},
		{"short token on loopback", []string{"--token-file", short, "--listen", "127.0.0.1:0"}, ""},
		{"good token off loopback", []string{"--token-file", good, "--listen", "0.0.0.0:0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			var got *ServeOptions
			ios, _, _ := testIO("")
			cmd := newCmdServe(newFactory(ios), func(_ context.Context, _ *IO, o *ServeOptions) error { got = o; return nil })
			err := execCmd(t, cmd, tc.args...)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			code, line := codeOf(err)
			if code != ExitUsage || !strings.Contains(line, tc.wantErr) {
				t.Fatalf("exit %d %q, want 2 with %q", code, line, tc.wantErr)
			}
			if got != nil {
				t.Fatal("serve ran")
			}
		})
	}
	// On loopback the short token is logged at start.
	clearEnv(t)
	ios, _, errOut := testIO("")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := newCmdServe(newFactory(ios), func(_ context.Context, ios *IO, o *ServeOptions) error {
		o.Ready = func(string) { cancel() }
		return runServe(ctx, ios, o)
	})
	if err := execCmd(t, cmd, "--token-file", short, "--listen", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "the client token is 5 bytes, shorter than 16") {
		t.Fatalf("no warning about the short token in the log:\n%s", errOut.String())
	}
	// A client command refuses an empty token file too.
	clearEnv(t)
	var out, cerr syncBuf
	if code := Main([]string{"status", "--token-file", blank}, strings.NewReader(""), &out, &cerr); code != ExitUsage || !strings.Contains(cerr.String(), "empty") {
		t.Fatalf("status with a blank token file: exit %d %q, want 2", code, cerr.String())
	}
}

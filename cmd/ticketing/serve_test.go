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
		{name: "negative", args: []string{"--raft-heartbeat-timeout", "-1s"}, wantErr: "at least 5ms"},
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
		{name: "env duration", env: map[string]string{"TICKETING_MAX_WAIT": "abc"}, wantErr: `max-wait (TICKETING_MAX_WAIT, config key max-wait) "abc"`},
		{name: "env int", env: map[string]string{"TICKETING_MAX_CONNECTIONS": "10k"}, wantErr: `"10k"`},
		{name: "env bool", env: map[string]string{"TICKETING_INSECURE": "maybe"}, wantErr: `insecure`},
		{name: "env new bound", env: map[string]string{"TICKETING_WRITE_TIMEOUT": "soon"}, wantErr: `write-timeout`},
		{name: "config file", args: []string{"--config", conf}, wantErr: `max-keys (TICKETING_MAX_KEYS, config key max-keys) "lots"`},
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

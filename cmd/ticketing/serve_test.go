package main

import (
	"context"
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

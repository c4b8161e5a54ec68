package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

func TestNewCmdHealthClusterFlags(t *testing.T) {
	for _, tt := range []struct {
		argv       []string
		maxLag     uint64
		maxContact time.Duration
		code       int
	}{
		{maxLag: 1000, maxContact: 3 * time.Second},
		{argv: []string{"--max-lag", "50", "--max-contact", "1.5"}, maxLag: 50, maxContact: 1500 * time.Millisecond},
		{argv: []string{"--max-lag", "0"}, code: ExitUsage},
		{argv: []string{"--max-contact", "0s"}, code: ExitUsage},
	} {
		clearEnv(t)
		var got *HealthOptions
		ios, _, _ := testIO("")
		err := execCmd(t, newCmdHealth(newFactory(ios), func(_ context.Context, _ *IO, o *HealthOptions) error { got = o; return nil }), tt.argv...)
		if tt.code != 0 {
			if c := exitCodeForTest(err); c != tt.code {
				t.Errorf("%v: code %d (%v)", tt.argv, c, err)
			}
			continue
		}
		if err != nil || got.MaxLag != tt.maxLag || got.MaxContact != tt.maxContact || got.Cluster == nil || got.Check == nil {
			t.Errorf("%v: %v %+v", tt.argv, err, got)
		}
	}
}

// clusterSeeds is what Check finds at the --addr list of sampleView.
func clusterSeeds(v *admin.ClusterView) []admin.HealthResult {
	var res []admin.HealthResult
	for _, n := range v.Nodes {
		res = append(res, admin.HealthResult{Addr: n.ClientAddr, Healthy: n.Status != nil, Status: n.Status, Err: n.Err})
	}
	return res
}

func TestHealthRunCluster(t *testing.T) {
	run := func(t *testing.T, v *admin.ClusterView, output string) (int, string, string, []admin.HealthResult) {
		t.Helper()
		var gotSeeds []admin.HealthResult
		ios, out, errOut := testIO("")
		o := &HealthOptions{Conn: testConn(), Output: output, MaxLag: 1000, MaxContact: 3 * time.Second,
			Check: func(context.Context, []string) []admin.HealthResult { return clusterSeeds(v) },
			Cluster: func(_ context.Context, seeds []admin.HealthResult) (admin.ClusterHealthResult, error) {
				gotSeeds = seeds
				return admin.EvaluateCluster(v, admin.ClusterHealthConfig{MaxLag: 1000, MaxContact: 3 * time.Second}), nil
			}}
		code, _ := codeOf(runHealth(context.Background(), ios, o))
		return code, out.String(), errOut.String(), gotSeeds
	}

	// Healthy cluster.
	v := skewView()
	code, out, errOut, seeds := run(t, v, "text")
	if code != 0 || errOut != "" || len(seeds) != 3 {
		t.Fatalf("code %d stderr %q seeds %d\n%s", code, errOut, len(seeds), out)
	}
	want := []string{
		"NODE ADDR ROLE VOTER TERM COMMIT APPLIED LAG CONTACT CLOCK STATUS",
		"n1 h1:7470 leader yes 4 120 120 0 - reference ok",
		"n2 h2:7470 follower yes 4 120 117 3 0s +1.200ms ±0.150ms ok",
		"n3 h3:7470 follower yes 4 0 0 - 0s -0.800ms ±0.100ms ok",
		"cluster healthy: leader n1 (h1:7470), term 4, 3 of 3 voters healthy",
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out)
	}
	for i := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want[i] {
			t.Errorf("line %d: %q, want %q", i, got, want[i])
		}
	}

	// A follower down: non-zero, one line naming it.
	code, out, _, _ = run(t, sampleView(), "text")
	if code != ExitBusy || !strings.Contains(out, "\nFAIL n3 (h3:7470): unreachable: dial: cannot connect: connection refused\n") ||
		!strings.Contains(out, "cluster UNHEALTHY: leader n1 (h1:7470), term 4, 2 of 3 voters healthy") || strings.Count(out, "FAIL n") != 1 {
		t.Errorf("code %d:\n%s", code, out)
	}

	// The leader cannot grant (clock unhealthy).
	v = skewView()
	v.Nodes[0].Status.CanGrant, v.Nodes[0].Status.Reason = false, "clock unhealthy: clock skew of n2 is 900ms ± 1ms, above the 500ms bound"
	code, out, _, _ = run(t, v, "text")
	if code != ExitBusy || !strings.Contains(out, "FAIL n1 (h1:7470): cannot grant: clock unhealthy: clock skew of n2 is 900ms") {
		t.Errorf("code %d:\n%s", code, out)
	}

	// No leader.
	v = skewView()
	v.LeaderID = ""
	for i := range v.Nodes {
		v.Nodes[i].Status.Role, v.Nodes[i].Status.LeaderID = wire.NodeFollower, ""
	}
	code, out, _, _ = run(t, v, "text")
	if code != ExitBusy || !strings.Contains(out, "FAIL cluster: no leader") || !strings.Contains(out, "cluster UNHEALTHY: no leader") {
		t.Errorf("code %d:\n%s", code, out)
	}

	// An unreachable learner and an unsampled voter: warnings, exit 0.
	v = skewView()
	v.Nodes[0].Status.Clock.Nodes = v.Nodes[0].Status.Clock.Nodes[:1]
	v.Nodes = append(v.Nodes, admin.NodeView{ID: "n4", ClientAddr: "h4:7470", Member: true, Role: wire.NodeLearner, Lag: -1,
		Err: &client.OpError{Op: "dial", Err: fmt.Errorf("%w: refused", client.ErrConnect)}})
	code, out, _, _ = run(t, v, "text")
	if code != 0 || !strings.Contains(out, "\nWARN n3 (h3:7470): clock not sampled by the leader yet\n") ||
		!strings.Contains(out, "\nWARN n4 (h4:7470) (learner): unreachable: dial: cannot connect: refused\n") ||
		!regexp.MustCompile(`(?m)^n4\s+h4:7470\s+learner\s+no\s.*WARN$`).MatchString(out) || !strings.Contains(out, "cluster healthy") {
		t.Errorf("warnings: code %d\n%s", code, out)
	}

	// A voter the leader tried but never measured: its CLOCK is "-", not a
	// perfect +0.000ms (and JSON has no offset), and it fails with the error.
	v = skewView()
	v.Nodes[0].Status.Clock.Nodes[1] = wire.ClockNode{ID: "n3", Err: "dial tcp: connection refused"}
	code, out, _, _ = run(t, v, "text")
	if code != ExitBusy || !regexp.MustCompile(`(?m)^n3\s+h3:7470\s+follower\s+yes\s.*\s-\s+FAIL$`).MatchString(out) ||
		strings.Contains(out, "+0.000ms") || !strings.Contains(out, "FAIL n3 (h3:7470): the leader cannot sample its clock: dial tcp: connection refused") {
		t.Errorf("unmeasured clock: code %d\n%s", code, out)
	}
	if _, out, _, _ = run(t, v, "json"); strings.Count(out, "clock_offset_us") != 2 { // n1 (reference) and n2
		t.Errorf("unmeasured clock in JSON:\n%s", out)
	}

	// A node refusing the credentials: 8.
	v = sampleView()
	v.Nodes[2].Err = &client.OpError{Op: "dial", Err: &client.RejectError{Code: wire.CodeAuthFailed}}
	if code, out, _, _ = run(t, v, "text"); code != ExitAuth {
		t.Errorf("auth: code %d\n%s", code, out)
	}

	// JSON.
	code, out, _, _ = run(t, sampleView(), "json")
	var hj clusterHealthJSON
	if err := json.Unmarshal([]byte(out), &hj); err != nil || code != ExitBusy {
		t.Fatalf("json %v code %d: %s", err, code, out)
	}
	if !hj.Cluster || hj.Healthy || hj.Leader != "n1" || hj.Voters != 3 || hj.VotersHealthy != 2 || len(hj.Nodes) != 3 || hj.MaxLag != 1000 ||
		hj.Nodes[2].Reachable || hj.Nodes[2].Healthy || len(hj.Nodes[2].Problems) != 1 || hj.Nodes[1].Lag != 3 || !hj.Nodes[1].Healthy ||
		hj.Nodes[0].ClockOffsetUS == nil || *hj.Nodes[0].ClockOffsetUS != 0 || hj.Problems == nil {
		t.Errorf("json: %s", out)
	}

	// Single nodes keep the single-node output (Cluster is not called).
	st := sampleStatus()
	ios, o2, _ := testIO("")
	called := false
	ho := &HealthOptions{Conn: testConn(), Output: "text",
		Check: func(context.Context, []string) []admin.HealthResult {
			return []admin.HealthResult{{Addr: "a:1", Healthy: true, RTT: 300 * time.Microsecond, Status: &st}}
		},
		Cluster: func(context.Context, []admin.HealthResult) (admin.ClusterHealthResult, error) {
			called = true
			return admin.ClusterHealthResult{}, nil
		}}
	if err := runHealth(context.Background(), ios, ho); err != nil || called || o2.String() != "a:1  ok  rtt 300µs\n" {
		t.Errorf("single: %v called=%v %q", err, called, o2)
	}

	// Discovery failing after all: its error.
	ios, _, _ = testIO("")
	ho = &HealthOptions{Conn: testConn(), Output: "text",
		Check: func(context.Context, []string) []admin.HealthResult { return clusterSeeds(sampleView()) },
		Cluster: func(context.Context, []admin.HealthResult) (admin.ClusterHealthResult, error) {
			return admin.ClusterHealthResult{}, &client.OpError{Op: "dial", Err: fmt.Errorf("%w: x", client.ErrConnect)}
		}}
	if code, _ := codeOf(runHealth(context.Background(), ios, ho)); code != ExitConnect {
		t.Errorf("discovery error: code %d", code)
	}
}

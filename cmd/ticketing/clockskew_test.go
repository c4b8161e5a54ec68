package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

func TestNewCmdClockSkew(t *testing.T) {
	for _, tt := range []struct {
		argv    []string
		env     string
		maxSkew time.Duration
		samples int
		code    int
	}{
		{maxSkew: 500 * time.Millisecond, samples: 5},
		{argv: []string{"--max-skew", "100ms", "--samples", "9", "-o", "json"}, maxSkew: 100 * time.Millisecond, samples: 9},
		{env: "0.25", maxSkew: 250 * time.Millisecond, samples: 5},
		{argv: []string{"--samples", "0"}, code: ExitUsage},
		{argv: []string{"--max-skew", "0"}, code: ExitUsage},
		{argv: []string{"--max-skew", "-1s"}, code: ExitUsage},
	} {
		clearEnv(t)
		if tt.env != "" {
			t.Setenv("TICKETING_MAX_SKEW", tt.env)
		}
		var got *ClockSkewOptions
		ios, _, _ := testIO("")
		err := execCmd(t, newCmdClockSkew(newFactory(ios), func(_ context.Context, _ *IO, o *ClockSkewOptions) error { got = o; return nil }), tt.argv...)
		if tt.code != 0 {
			if c := exitCodeForTest(err); c != tt.code {
				t.Errorf("%v: code %d (%v)", tt.argv, c, err)
			}
			continue
		}
		if err != nil || got.MaxSkew != tt.maxSkew || got.Samples != tt.samples || got.Discover == nil || got.Probe == nil {
			t.Errorf("%v: %v %+v", tt.argv, err, got)
		}
	}
}

// skewView is sampleView with every node reachable and the leader's clock samples.
func skewView() *admin.ClusterView {
	v := sampleView()
	v.Nodes[2].Err = nil
	v.Nodes[2].Status = &wire.StatusReply{NodeID: "n3", Role: wire.NodeFollower, LeaderID: "n1", Term: 4, CanGrant: true}
	v.Nodes[0].Status.Clock = &wire.ClockStatus{Healthy: true, MaxSkewMS: 500, Sampled: true, Nodes: []wire.ClockNode{
		{ID: "n2", OffsetUS: 1200, BoundUS: 1350, RTTUS: 300, AgeMS: 420, Healthy: true},
		{ID: "n3", OffsetUS: -800, BoundUS: 900, RTTUS: 200, AgeMS: 410, Healthy: true},
	}}
	return v
}

func TestClockSkewRun(t *testing.T) {
	pings := map[string]admin.PingResult{
		"h1:7470": {RTT: 200 * time.Microsecond, Offset: 50 * time.Microsecond, ErrorBound: 100 * time.Microsecond},
		"h2:7470": {RTT: 300 * time.Microsecond, Offset: 1250 * time.Microsecond, ErrorBound: 150 * time.Microsecond},
		"h3:7470": {RTT: 100 * time.Microsecond, Offset: -750 * time.Microsecond, ErrorBound: 50 * time.Microsecond},
	}
	connErr := &client.OpError{Op: "dial", Err: fmt.Errorf("%w: connection refused", client.ErrConnect)}
	opts := func(v *admin.ClusterView, maxSkew time.Duration, down string) *ClockSkewOptions {
		return &ClockSkewOptions{
			Conn: testConn(), Output: "text", MaxSkew: maxSkew, Samples: 5,
			Discover: func(context.Context, []string) (*admin.ClusterView, error) { return v, nil },
			Probe: func(_ context.Context, addr string) (admin.PingResult, int, error) {
				if addr == down {
					return admin.PingResult{}, 0, connErr
				}
				return pings[addr], 5, nil
			},
		}
	}

	ios, out, _ := testIO("")
	if err := runClockSkew(context.Background(), ios, opts(skewView(), 500*time.Millisecond, "")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"FROM TO ADDR OFFSET RTT AGE STATUS",
		"this host n1 h1:7470 +0.050ms ±0.100ms 200µs - ok",
		"this host n2 h2:7470 +1.250ms ±0.150ms 300µs - ok",
		"this host n3 h3:7470 -0.750ms ±0.050ms 100µs - ok",
		"n1 n2 h2:7470 +1.200ms ±0.150ms 300µs 420ms ok",
		"n1 n3 h3:7470 -0.800ms ±0.100ms 200µs 410ms ok",
		"clock skew ok (bound 500ms): worst |offset| + error 1.400ms (this host → n2)",
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out)
	}
	for i := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != strings.Join(strings.Fields(want[i]), " ") {
			t.Errorf("line %d: %q, want %q", i, got, want[i])
		}
	}

	// JSON.
	ios, out, _ = testIO("")
	o := opts(skewView(), 500*time.Millisecond, "")
	o.Output = "json"
	if err := runClockSkew(context.Background(), ios, o); err != nil {
		t.Fatal(err)
	}
	var cj clockSkewJSON
	num := func(p *int64) int64 {
		if p == nil {
			return -999
		}
		return *p
	}
	if err := json.Unmarshal(out.Bytes(), &cj); err != nil || !cj.OK || cj.Leader != "n1" || len(cj.Host) != 3 || len(cj.Nodes) != 2 || len(cj.Problems) != 0 ||
		num(cj.Host[1].WorstUS) != 1400 || cj.Host[1].Samples != 5 || cj.Host[1].AgeMS != nil || !cj.Host[1].Measured ||
		num(cj.Nodes[0].WorstUS) != 1350 || num(cj.Nodes[0].ErrorUS) != 150 || num(cj.Nodes[0].AgeMS) != 420 || cj.MaxSkewMS != 500 {
		t.Errorf("json %v: %s", err, out)
	}

	for _, tt := range []struct {
		name    string
		mut     func(v *admin.ClusterView)
		maxSkew time.Duration
		down    string
		code    int
		line    string
	}{
		{"above the bound", func(*admin.ClusterView) {}, time.Millisecond, "", ExitBusy, "FAIL n1 → n2: |offset| + error = 1.350ms, above the 1ms bound"},
		{"host unreachable", func(*admin.ClusterView) {}, time.Second, "h3:7470", ExitConnect, "FAIL this host → n3: unreachable: dial: cannot connect: connection refused"},
		{"stale sample", func(v *admin.ClusterView) { v.Nodes[0].Status.Clock.Nodes[1].AgeMS = 4000 }, time.Second, "", ExitBusy, "FAIL n1 → n3: the leader's sample is 4s old"},
		{"leader cannot sample", func(v *admin.ClusterView) {
			v.Nodes[0].Status.Clock.Nodes[1] = wire.ClockNode{ID: "n3", Err: "dial tcp: connection refused"}
		}, time.Second, "", ExitBusy, "FAIL n1 → n3: the leader cannot sample it: dial tcp: connection refused"},
		{"not sampled", func(v *admin.ClusterView) { v.Nodes[0].Status.Clock.Nodes = v.Nodes[0].Status.Clock.Nodes[:1] }, time.Second, "", ExitBusy, "FAIL n1 → n3: not sampled by the leader yet"},
		{"no leader", func(v *admin.ClusterView) { v.LeaderID = "" }, time.Second, "", ExitBusy, "FAIL cluster: no leader: node-against-node offsets are unknown"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := skewView()
			tt.mut(v)
			ios, out, _ := testIO("")
			code, _ := codeOf(runClockSkew(context.Background(), ios, opts(v, tt.maxSkew, tt.down)))
			if code != tt.code || !strings.Contains(out.String(), tt.line+"\n") || !strings.Contains(out.String(), "clock skew FAIL") {
				t.Errorf("code %d (want %d), output:\n%s", code, tt.code, out)
			}
		})
	}

	// A single server: this host only.
	single := &admin.ClusterView{Single: true, Nodes: []admin.NodeView{{ID: "solo", ClientAddr: "h1:7470", Member: true, Voter: true, Role: wire.NodeSingle, Status: &wire.StatusReply{NodeID: "solo", Role: wire.NodeSingle}, Lag: -1}}}
	ios, out, _ = testIO("")
	if err := runClockSkew(context.Background(), ios, opts(single, time.Second, "")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Count(out.String(), "\n") != 3 || !strings.Contains(out.String(), "this host  solo") {
		t.Errorf("single:\n%s", out)
	}
}

// clockSkewDown is skewView with n3 stopped: discovery could not read it,
// and the leader's sampling of it fails.
func clockSkewDown() *admin.ClusterView {
	v := skewView()
	v.Nodes[2].Status = nil
	v.Nodes[2].Err = &client.OpError{Op: "dial", Err: fmt.Errorf("%w: no connection to any server: connection refused", client.ErrConnect)}
	v.Nodes[0].Status.Clock.Nodes[1] = wire.ClockNode{ID: "n3", OffsetUS: -800, BoundUS: 900, RTTUS: 200, AgeMS: 4100, Err: "dial tcp h3:7471: connection refused"}
	return v
}

// A member that discovery could not reach is not dialed again (it cost
// the whole budget a second time: clock-skew took 2 × --timeout with a
// node down), and it is exit 7 although the leader's sample of it is
// unverified too.
func TestClockSkewUnreachableNotDialedAgain(t *testing.T) {
	var mu sync.Mutex
	dials := map[string]int{}
	opts := &ClockSkewOptions{
		Conn: testConn(), Output: "text", MaxSkew: time.Second, Samples: 5,
		Discover: func(context.Context, []string) (*admin.ClusterView, error) { return clockSkewDown(), nil },
		Probe: func(_ context.Context, addr string) (admin.PingResult, int, error) {
			mu.Lock()
			dials[addr]++
			mu.Unlock()
			return admin.PingResult{RTT: 200 * time.Microsecond, ErrorBound: 100 * time.Microsecond}, 5, nil
		},
	}
	ios, out, _ := testIO("")
	code, _ := codeOf(runClockSkew(context.Background(), ios, opts))
	if code != ExitConnect {
		t.Errorf("exit %d, want %d (a node this host cannot reach)\n%s", code, ExitConnect, out)
	}
	if dials["h3:7470"] != 0 || dials["h1:7470"] != 1 || dials["h2:7470"] != 1 {
		t.Errorf("probes %v: want one of h1 and h2 each, none of the unreachable h3", dials)
	}
	for _, want := range []string{
		"FAIL this host → n3: unreachable: dial: cannot connect: no connection to any server: connection refused\n",
		"FAIL n1 → n3: the leader cannot sample it: dial tcp h3:7471: connection refused\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^this host\s+n3\s+h3:7470\s+-\s+-\s+-\s+FAIL$`).MatchString(out.String()) ||
		!regexp.MustCompile(`(?m)^n1\s+n3\s+h3:7470\s+-\s+-\s+-\s+FAIL$`).MatchString(out.String()) {
		t.Errorf("n3's rows are not all '-':\n%s", out)
	}
}

// The exit code's precedence (clockSkewExitHelp): 4 when a measured
// offset is above the bound; else 7 (8) when this host cannot reach a
// node, member or not; else 4 when a pair is unverified.
func TestClockSkewExitPrecedence(t *testing.T) {
	authErr := &client.OpError{Op: "dial", Err: fmt.Errorf("%w: wrong token", client.ErrAuth)}
	for _, tt := range []struct {
		name    string
		view    func() *admin.ClusterView
		maxSkew time.Duration
		code    int
	}{
		{"unreachable member, unverified by the leader", clockSkewDown, time.Second, ExitConnect},
		{"unreachable member and a pair above the bound", clockSkewDown, time.Millisecond, ExitBusy},
		{"unreachable non-member", func() *admin.ClusterView {
			v := skewView()
			v.Nodes = append(v.Nodes, admin.NodeView{ClientAddr: "h9:7470", Lag: -1, LastContactMS: -1, Err: clockSkewDown().Nodes[2].Err})
			return v
		}, time.Second, ExitConnect},
		{"credentials refused", func() *admin.ClusterView {
			v := clockSkewDown()
			v.Nodes[2].Err = authErr
			return v
		}, time.Second, ExitAuth},
		{"unverified only", func() *admin.ClusterView {
			v := skewView()
			v.Nodes[0].Status.Clock.Nodes[1].AgeMS = 4000
			return v
		}, time.Second, ExitBusy},
		{"no leader, a node unreachable", func() *admin.ClusterView {
			v := clockSkewDown()
			v.LeaderID = ""
			return v
		}, time.Second, ExitConnect},
		{"all within the bound", skewView, time.Second, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := &ClockSkewOptions{
				Conn: testConn(), Output: "json", MaxSkew: tt.maxSkew, Samples: 5,
				Discover: func(context.Context, []string) (*admin.ClusterView, error) { return tt.view(), nil },
				Probe: func(context.Context, string) (admin.PingResult, int, error) {
					return admin.PingResult{RTT: 2 * time.Millisecond, Offset: time.Millisecond, ErrorBound: time.Millisecond}, 5, nil
				},
			}
			ios, out, _ := testIO("")
			if code, _ := codeOf(runClockSkew(context.Background(), ios, opts)); code != tt.code {
				t.Errorf("exit %d, want %d\n%s", code, tt.code, out)
			}
		})
	}
}

// -o json: "problems" lists exactly the text output's FAIL lines ("ok"
// false exactly when there are some), and a pair that was not measured
// carries no numbers (the table's "-"), not stale ones.
func TestClockSkewJSONProblemsAndUnmeasured(t *testing.T) {
	for _, tt := range []struct {
		name string
		view func() *admin.ClusterView
	}{
		{"n3 down", clockSkewDown},
		{"no leader", func() *admin.ClusterView { v := skewView(); v.LeaderID = ""; return v }},
		{"not sampled", func() *admin.ClusterView {
			v := skewView()
			v.Nodes[0].Status.Clock.Nodes = v.Nodes[0].Status.Clock.Nodes[:1]
			return v
		}},
		{"healthy", skewView},
	} {
		t.Run(tt.name, func(t *testing.T) {
			run := func(output string) (string, int) {
				opts := &ClockSkewOptions{
					Conn: testConn(), Output: output, MaxSkew: time.Second, Samples: 5,
					Discover: func(context.Context, []string) (*admin.ClusterView, error) { return tt.view(), nil },
					Probe: func(context.Context, string) (admin.PingResult, int, error) {
						return admin.PingResult{RTT: 200 * time.Microsecond, Offset: 50 * time.Microsecond, ErrorBound: 100 * time.Microsecond}, 5, nil
					},
				}
				ios, out, _ := testIO("")
				code, _ := codeOf(runClockSkew(context.Background(), ios, opts))
				return out.String(), code
			}
			text, textCode := run("text")
			raw, jsonCode := run("json")
			var fails []string
			for _, l := range strings.Split(text, "\n") {
				if p, ok := strings.CutPrefix(l, "FAIL "); ok {
					fails = append(fails, p)
				}
			}
			var cj clockSkewJSON
			if err := json.Unmarshal([]byte(raw), &cj); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(cj.Problems) != fmt.Sprint(fails) || cj.Problems == nil || cj.OK != (len(fails) == 0) || textCode != jsonCode {
				t.Errorf("json problems %q ok %v (exit %d), text FAIL lines %q (exit %d)", cj.Problems, cj.OK, jsonCode, fails, textCode)
			}
			var generic struct {
				Host, Nodes []map[string]any
			}
			if err := json.Unmarshal([]byte(raw), &generic); err != nil {
				t.Fatal(err)
			}
			for _, pair := range append(generic.Host, generic.Nodes...) {
				measured, _ := pair["measured"].(bool)
				for _, k := range []string{"offset_us", "error_us", "worst_us", "rtt_us"} {
					if _, has := pair[k]; has != measured {
						t.Errorf("pair %v: %s present %v, measured %v", pair, k, has, measured)
					}
				}
				_, hasAge := pair["age_ms"]
				_, hasSamples := pair["samples"]
				host := pair["from"] == clockSkewHostLabel
				if hasAge != (measured && !host) || hasSamples != (measured && host) {
					t.Errorf("pair %v: age_ms %v samples %v", pair, hasAge, hasSamples)
				}
			}
		})
	}
}

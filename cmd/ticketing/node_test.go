package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// ---------------------------------------------------------------------------
// argv → options

func TestNewCmdNodeAdd(t *testing.T) {
	ok := []string{"--id", "n4", "--peer-addr", "10.0.0.4:7471", "--client-addr", "10.0.0.4:7470"}
	for _, tt := range []struct {
		argv  []string
		voter bool
		wait  time.Duration
		code  int
	}{
		{argv: ok, wait: 90 * time.Second},
		{argv: append([]string{"--voter", "--wait", "2m"}, ok...), voter: true, wait: 2 * time.Minute},
		{argv: ok[2:], code: ExitUsage},                                                                        // no --id
		{argv: []string{"--id", "n4", "--client-addr", "h:1"}, code: ExitUsage},                                // no --peer-addr
		{argv: []string{"--id", "n4", "--peer-addr", "h:1"}, code: ExitUsage},                                  // no --client-addr
		{argv: []string{"--id", "n4", "--peer-addr", "0.0.0.0:7471", "--client-addr", "h:1"}, code: ExitUsage}, // wildcard
		{argv: []string{"--id", "n4", "--peer-addr", "h", "--client-addr", "h:1"}, code: ExitUsage},
		{argv: append([]string{"--wait", "0"}, ok...), code: ExitUsage},
		{argv: append([]string{"extra"}, ok...), code: ExitUsage},
	} {
		clearEnv(t)
		t.Setenv("TICKETING_ADMIN_TOKEN", "adm")
		var got *NodeAddOptions
		ios, _, _ := testIO("")
		err := execCmd(t, newCmdNodeAdd(newFactory(ios), func(_ context.Context, _ *IO, o *NodeAddOptions) error { got = o; return nil }), tt.argv...)
		if tt.code != 0 {
			if c := exitCodeForTest(err); c != tt.code {
				t.Errorf("%v: code %d (%v)", tt.argv, c, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tt.argv, err)
		}
		want := admin.AddNodeArgs{ID: "n4", PeerAddr: "10.0.0.4:7471", ClientAddr: "10.0.0.4:7470", Voter: tt.voter}
		if got.Args != want || got.Wait != tt.wait || got.Connect == nil || got.Output != "text" {
			t.Errorf("%v: %+v", tt.argv, got)
		}
		checkConn(t, got.Conn, ConnOptions{Addrs: []string{defaultAddr}, AdminToken: "adm", Timeout: defaultTimeout})
	}
}

func TestNewCmdNodeRemoveTransferList(t *testing.T) {
	clearEnv(t)
	ios, _, _ := testIO("")
	var rm *NodeRemoveOptions
	if err := execCmd(t, newCmdNodeRemove(newFactory(ios), func(_ context.Context, _ *IO, o *NodeRemoveOptions) error { rm = o; return nil }),
		"--id", "n2", "--addr", "a:1,b:2", "-o", "json"); err != nil {
		t.Fatal(err)
	}
	if rm.ID != "n2" || rm.Output != "json" || rm.Wait != 30*time.Second || rm.Connect == nil {
		t.Errorf("remove %+v", rm)
	}
	checkConn(t, rm.Conn, ConnOptions{Addrs: []string{"a:1", "b:2"}, Timeout: defaultTimeout})
	if err := execCmd(t, newCmdNodeRemove(newFactory(ios), nil)); exitCodeForTest(err) != ExitUsage {
		t.Errorf("remove without --id: %v", err)
	}

	var tr *NodeTransferOptions
	for _, tt := range []struct {
		argv []string
		id   string
	}{{nil, ""}, {[]string{"--id", "n3"}, "n3"}} {
		if err := execCmd(t, newCmdNodeTransfer(newFactory(ios), func(_ context.Context, _ *IO, o *NodeTransferOptions) error { tr = o; return nil }), tt.argv...); err != nil {
			t.Fatal(err)
		}
		if tr.ID != tt.id || tr.Connect == nil {
			t.Errorf("%v: %+v", tt.argv, tr)
		}
	}

	var ls *NodeListOptions
	t.Setenv("TICKETING_ADDR", "n1:7470,n2:7470")
	if err := execCmd(t, newCmdNodeList(newFactory(ios), func(_ context.Context, _ *IO, o *NodeListOptions) error { ls = o; return nil }), "--timeout", "2"); err != nil {
		t.Fatal(err)
	}
	if ls.Discover == nil || ls.Output != "text" {
		t.Errorf("list %+v", ls)
	}
	checkConn(t, ls.Conn, ConnOptions{Addrs: []string{"n1:7470", "n2:7470"}, Timeout: 2 * time.Second})
}

func TestNodeUnknownSubcommand(t *testing.T) {
	clearEnv(t)
	var out, errOut strings.Builder
	if code := Main([]string{"node", "frobnicate"}, strings.NewReader(""), &out, &errOut); code != ExitUsage || !strings.Contains(errOut.String(), "frobnicate") {
		t.Errorf("code %d stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := Main([]string{"node"}, strings.NewReader(""), &out, &errOut); code != 0 || !strings.Contains(out.String(), "transfer-leader") {
		t.Errorf("node alone: code %d, stdout %q", code, out.String())
	}
}

// ---------------------------------------------------------------------------
// options + fake → output

type fakeMembers struct {
	mu      sync.Mutex
	errs    []error // returned in turn (then nil)
	members []wire.Member
	leader  string
	calls   []string
	dialErr error
}

func (f *fakeMembers) connect(context.Context, []string) (memberAdmin, error) {
	if f.dialErr != nil {
		return nil, f.dialErr
	}
	return f, nil
}

func (f *fakeMembers) next(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if len(f.errs) == 0 {
		return nil
	}
	err := f.errs[0]
	f.errs = f.errs[1:]
	return err
}

func (f *fakeMembers) AddNode(_ context.Context, a admin.AddNodeArgs) ([]wire.Member, error) {
	if err := f.next(fmt.Sprintf("add %s %s %s %v", a.ID, a.PeerAddr, a.ClientAddr, a.Voter)); err != nil {
		return nil, err
	}
	return f.members, nil
}

func (f *fakeMembers) RemoveNode(_ context.Context, id string) ([]wire.Member, error) {
	if err := f.next("remove " + id); err != nil {
		return nil, err
	}
	return f.members, nil
}

func (f *fakeMembers) TransferLeader(_ context.Context, id string) (string, error) {
	if err := f.next("transfer " + id); err != nil {
		return "", err
	}
	return f.leader, nil
}

func (f *fakeMembers) Close() error { return nil }

func sampleMembers() []wire.Member {
	return []wire.Member{
		{ID: "n1", ClientAddr: "h1:7470", PeerAddr: "h1:7471", Role: wire.NodeLeader, Voter: true},
		{ID: "n2", ClientAddr: "h2:7470", PeerAddr: "h2:7471", Role: wire.NodeFollower, Voter: true, LastContactMS: 420},
		{ID: "n3", ClientAddr: "h3:7470", PeerAddr: "h3:7471", Role: wire.NodeFollower, Voter: true, LastContactMS: 380},
		{ID: "n4", ClientAddr: "h4:7470", PeerAddr: "h4:7471", Role: wire.NodeFollower, Voter: true, LastContactMS: -1},
	}
}

func changeErr(kind error, msg string) error {
	return &admin.ChangeError{Kind: kind, Msg: msg, Err: &client.OpError{Op: "admin", Err: &client.ProtocolError{Code: wire.CodeBadAdmin, Msg: msg}}}
}

func TestNodeAddRun(t *testing.T) {
	noSleep := func(context.Context, time.Duration) error { return nil }
	args := admin.AddNodeArgs{ID: "n4", PeerAddr: "h4:7471", ClientAddr: "h4:7470", Voter: true}
	f := &fakeMembers{members: sampleMembers()}
	ios, out, errOut := testIO("")
	o := &NodeAddOptions{Conn: testConn(), Output: "text", Args: args, Wait: time.Minute, Connect: f.connect, Sleep: noSleep}
	if err := runNodeAdd(context.Background(), ios, o); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 5 || strings.Join(strings.Fields(lines[0]), " ") != "ID CLIENT ADDR PEER ADDR ROLE VOTER LAST CONTACT" {
		t.Fatalf("table:\n%s", out)
	}
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "n2 h2:7470 h2:7471 follower yes 420ms ago" {
		t.Errorf("row %q", got)
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "n1 h1:7470 h1:7471 leader yes -" {
		t.Errorf("leader row %q", got)
	}
	if !strings.Contains(errOut.String(), "added n4 as a voter") || f.calls[0] != "add n4 h4:7471 h4:7470 true" {
		t.Errorf("stderr %q calls %v", errOut, f.calls)
	}

	// JSON: the members reply.
	ios, out, _ = testIO("")
	o.Output = "json"
	if err := runNodeAdd(context.Background(), ios, o); err != nil {
		t.Fatal(err)
	}
	var mr wire.MembersReply
	if err := json.Unmarshal(out.Bytes(), &mr); err != nil || len(mr.Members) != 4 {
		t.Errorf("json %v: %s", err, out)
	}

	// Errors → exit codes.
	opErr := func(err error) error { return &client.OpError{Op: "admin", Err: err} }
	for _, tt := range []struct {
		name  string
		errs  []error
		dial  error
		code  int
		msg   string
		calls int
	}{
		{"in progress", []error{changeErr(admin.ErrChangeInProgress, "membership change refused: another membership change is in progress")}, nil,
			ExitError, "node add n4: the leader refused: membership change refused: another membership change is in progress (one change at a time: retry when it has finished)", 1},
		{"already a member", []error{changeErr(admin.ErrInvalidChange, `membership change refused: id "n4" is already a member`)}, nil,
			ExitUsage, `node add n4: the leader refused: membership change refused: id "n4" is already a member`, 1},
		{"not a cluster", []error{changeErr(admin.ErrNotCluster, "not a cluster")}, nil, ExitUsage, "not a cluster (--addr names a single server, not a cluster)", 1},
		{"catch-up failed", []error{changeErr(admin.ErrChangeFailed, "membership change refused: learner n4 did not catch up")}, nil, ExitError, "did not catch up", 1},
		{"no leader, then one", []error{opErr(client.ErrNoLeader), opErr(client.ErrNoLeader)}, nil, 0, "", 3},
		{"no leader at all", repeatErr(opErr(client.ErrNoLeader), 1000), nil, ExitBusy, "none within --timeout: retry once there is one", -1},
		{"connection lost", []error{opErr(fmt.Errorf("%w: connection lost after the query was written", client.ErrIndeterminate))}, nil,
			ExitIndeterminate, "check `ticketing node list`", 1},
		{"no answer within --wait", []error{opErr(context.DeadlineExceeded)}, nil, ExitIndeterminate, "no answer within --wait", 1},
		{"not permitted", []error{opErr(&client.ProtocolError{Code: wire.CodeNotPermitted})}, nil, ExitAuth, "NOT_PERMITTED", 1},
		{"cannot connect", nil, &client.OpError{Op: "dial", Err: fmt.Errorf("%w: refused", client.ErrConnect)}, ExitConnect, "cannot connect", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeMembers{members: sampleMembers(), errs: tt.errs, dialErr: tt.dial}
			ios, out, _ := testIO("")
			conn := testConn()
			conn.Timeout = 50 * time.Millisecond
			sleep := func(context.Context, time.Duration) error { time.Sleep(time.Millisecond); return nil }
			o := &NodeAddOptions{Conn: conn, Output: "text", Args: args, Wait: time.Minute, Connect: f.connect, Sleep: sleep}
			code, line := codeOf(runNodeAdd(context.Background(), ios, o))
			if code != tt.code || !strings.Contains(line, tt.msg) {
				t.Errorf("code %d line %q, want %d with %q", code, line, tt.code, tt.msg)
			}
			if tt.calls >= 0 && len(f.calls) != tt.calls {
				t.Errorf("%d calls, want %d", len(f.calls), tt.calls)
			}
			if code != 0 && out.Len() != 0 {
				t.Errorf("stdout on failure: %q", out)
			}
		})
	}
}

func repeatErr(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func TestNodeRemoveAndTransferRun(t *testing.T) {
	f := &fakeMembers{members: sampleMembers()[:3], leader: "h2:7470"}
	ios, out, errOut := testIO("")
	if err := runNodeRemove(context.Background(), ios, &NodeRemoveOptions{Conn: testConn(), Output: "text", ID: "n4", Wait: time.Second, Connect: f.connect}); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "\n") != 4 || strings.Contains(out.String(), "n4") || !strings.Contains(errOut.String(), "removed n4") {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}

	ios, out, _ = testIO("")
	if err := runNodeTransfer(context.Background(), ios, &NodeTransferOptions{Conn: testConn(), Output: "text", ID: "n2", Wait: time.Second, Connect: f.connect}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "leader h2:7470\n" || f.calls[1] != "transfer n2" {
		t.Errorf("stdout %q calls %v", out, f.calls)
	}
	ios, out, _ = testIO("")
	if err := runNodeTransfer(context.Background(), ios, &NodeTransferOptions{Conn: testConn(), Output: "json", Wait: time.Second, Connect: f.connect}); err != nil {
		t.Fatal(err)
	}
	var lr wire.LeaderReply
	if err := json.Unmarshal(out.Bytes(), &lr); err != nil || lr.Leader != "h2:7470" {
		t.Errorf("json %v %s", err, out)
	}
	f.leader = ""
	ios, out, errOut = testIO("")
	if err := runNodeTransfer(context.Background(), ios, &NodeTransferOptions{Conn: testConn(), Output: "text", Wait: time.Second, Connect: f.connect}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "leader unknown\n" || !strings.Contains(errOut.String(), "node list") {
		t.Errorf("unknown leader: %q %q", out, errOut)
	}
	f.errs = []error{changeErr(admin.ErrInvalidChange, `membership change refused: no member "n9"`)}
	ios, _, _ = testIO("")
	if code, line := codeOf(runNodeTransfer(context.Background(), ios, &NodeTransferOptions{Conn: testConn(), Output: "text", ID: "n9", Wait: time.Second, Connect: f.connect})); code != ExitUsage || !strings.Contains(line, `no member "n9"`) {
		t.Errorf("code %d %q", code, line)
	}
}

// sampleView is a 3-node cluster led by n1 whose n3 does not answer.
func sampleView() *admin.ClusterView {
	st := func(id, role string, applied uint64) *wire.StatusReply {
		return &wire.StatusReply{NodeID: id, Role: role, LeaderID: "n1", Leader: "h1:7470", Term: 4, CommitIndex: 120, AppliedIndex: applied, CanGrant: true}
	}
	return &admin.ClusterView{LeaderID: "n1", LeaderAddr: "h1:7470", Term: 4, CommitIndex: 120, ConfigFrom: "n1", Nodes: []admin.NodeView{
		{ID: "n1", ClientAddr: "h1:7470", PeerAddr: "h1:7471", Member: true, Role: wire.NodeLeader, Voter: true, Status: st("n1", wire.NodeLeader, 120), Lag: 0},
		{ID: "n2", ClientAddr: "h2:7470", PeerAddr: "h2:7471", Member: true, Role: wire.NodeFollower, Voter: true, LastContactMS: 310, Status: st("n2", wire.NodeFollower, 117), Lag: 3},
		{ID: "n3", ClientAddr: "h3:7470", PeerAddr: "h3:7471", Member: true, Role: wire.NodeFollower, Voter: true, LastContactMS: 5200, Lag: -1,
			Err: &client.OpError{Op: "dial", Err: fmt.Errorf("%w: connection refused", client.ErrConnect)}},
	}}
}

func TestNodeListRun(t *testing.T) {
	discover := func(v *admin.ClusterView, err error) func(context.Context, []string) (*admin.ClusterView, error) {
		return func(context.Context, []string) (*admin.ClusterView, error) { return v, err }
	}
	ios, out, errOut := testIO("")
	if err := runNodeList(context.Background(), ios, &NodeListOptions{Conn: testConn(), Output: "text", Discover: discover(sampleView(), nil)}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ID CLIENT ADDR PEER ADDR ROLE VOTER LAST CONTACT APPLIED LAG",
		"n1 h1:7470 h1:7471 leader yes - 120 0",
		"n2 h2:7470 h2:7471 follower yes 310ms ago 117 3",
		"n3 h3:7470 h3:7471 follower yes 5.2s ago unreachable -",
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("table:\n%s", out)
	}
	for i := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want[i] {
			t.Errorf("line %d: %q, want %q", i, got, want[i])
		}
	}
	if got := errOut.String(); got != "node n3 (h3:7470): dial: cannot connect: connection refused\n" {
		t.Errorf("stderr %q", got)
	}

	ios, out, _ = testIO("")
	if err := runNodeList(context.Background(), ios, &NodeListOptions{Conn: testConn(), Output: "json", Discover: discover(sampleView(), nil)}); err != nil {
		t.Fatal(err)
	}
	var lj nodeListJSON
	if err := json.Unmarshal(out.Bytes(), &lj); err != nil || lj.Leader != "n1" || len(lj.Nodes) != 3 || lj.Nodes[1].Lag != 3 || lj.Nodes[1].AppliedIndex != 117 ||
		lj.Nodes[2].Reachable || lj.Nodes[2].Error == "" || lj.Nodes[2].Lag != -1 || !lj.Nodes[0].Reachable {
		t.Errorf("json %v: %s", err, out)
	}

	// Unknown numbers are -1 in every numeric field (the table's "-" and
	// "unreachable"), known ones as they are.
	var raw struct{ Nodes []map[string]any }
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil || len(raw.Nodes) != 3 {
		t.Fatalf("json %v: %s", err, out)
	}
	for i, want := range []map[string]float64{
		{"last_contact_ms": -1, "term": 4, "commit_index": 120, "applied_index": 120, "lag": 0},   // the leader: no contact with itself
		{"last_contact_ms": 310, "term": 4, "commit_index": 120, "applied_index": 117, "lag": 3},  // a follower
		{"last_contact_ms": 5200, "term": -1, "commit_index": -1, "applied_index": -1, "lag": -1}, // unreachable
	} {
		for k, w := range want {
			if got, ok := raw.Nodes[i][k].(float64); !ok || got != w {
				t.Errorf("node %s %s = %v, want %v", lj.Nodes[i].ID, k, raw.Nodes[i][k], w)
			}
		}
	}
	if lj.Term != 4 || lj.CommitIndex != 120 {
		t.Errorf("json term %d commit %d", lj.Term, lj.CommitIndex)
	}
	// Without a leader the leader's numbers are unknown; a node that answers
	// as another node has no numbers of its own (the table's "?").
	v := sampleView()
	v.LeaderID, v.LeaderAddr, v.Term, v.CommitIndex = "", "", 0, 0
	v.Nodes[1].Err = errors.New("h2:7470 answers as node \"n7\"")
	ios, out, _ = testIO("")
	if err := runNodeList(context.Background(), ios, &NodeListOptions{Conn: testConn(), Output: "json", Discover: discover(v, nil)}); err != nil {
		t.Fatal(err)
	}
	lj = nodeListJSON{}
	if err := json.Unmarshal(out.Bytes(), &lj); err != nil || lj.Term != -1 || lj.CommitIndex != -1 || lj.Nodes[1].AppliedIndex != -1 || lj.Nodes[1].Term != -1 ||
		lj.Nodes[1].Reachable || lj.Nodes[0].AppliedIndex != 120 {
		t.Errorf("no leader json %v: %s", err, out)
	}

	// No leader: said on stderr.
	v = sampleView()
	v.LeaderID, v.ConfigFrom = "", "n2"
	ios, _, errOut = testIO("")
	if err := runNodeList(context.Background(), ios, &NodeListOptions{Conn: testConn(), Output: "text", Discover: discover(v, nil)}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "no leader answered: the configuration shown is node n2's") {
		t.Errorf("stderr %q", errOut)
	}

	// Nothing reachable: the connect error's code.
	ios, _, _ = testIO("")
	connErr := &client.OpError{Op: "dial", Err: fmt.Errorf("%w: refused", client.ErrConnect)}
	if code, _ := codeOf(runNodeList(context.Background(), ios, &NodeListOptions{Conn: testConn(), Output: "text", Discover: discover(nil, connErr)})); code != ExitConnect {
		t.Errorf("code %d", code)
	}
	if !errors.Is(connErr, client.ErrConnect) {
		t.Fatal("setup")
	}
}

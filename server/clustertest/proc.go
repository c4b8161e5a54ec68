package clustertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// BuildBinary builds cmd/ticketing into dir and returns its path. Node
// processes are built without -race (the test binary may use it).
func BuildBinary(dir string) (string, error) {
	bin := filepath.Join(dir, "ticketing")
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		// Retried: a build cache shared with concurrent builds has been seen
		// to fail one spuriously ("could not import …").
		cmd := exec.Command("go", "build", "-o", bin, "github.com/ticketing/ticketing/cmd/ticketing")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		var out []byte
		if out, err = cmd.CombinedOutput(); err == nil {
			return bin, nil
		}
		err = fmt.Errorf("go build cmd/ticketing: %v\n%s", err, out)
	}
	return "", err
}

// ProcOptions tune a cluster of node processes.
type ProcOptions struct {
	// Durable gives every node a --data-dir, so it may restart under its id.
	Durable bool
	// Direct connects the nodes' peer ports directly, without the proxies
	// of Net (no link faults then): for tests that must not have the test
	// process (perhaps built with -race) in the path of every heartbeat.
	// Peer ports are picked free beforehand (listen, close).
	Direct       bool
	MaxClockSkew time.Duration // --max-clock-skew; 0 = the default (500 ms)
	// Raft timings; 0 = the binary's defaults.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	TransferTimeout    time.Duration
	// ClockOffset shifts a node's clock (--test-clock-offset), by node id.
	ClockOffset map[string]time.Duration
	// LogLevel of the nodes; default "info".
	LogLevel string
	// Env is added to every node's environment.
	Env []string
}

// ProcCluster is a cluster of real `ticketing serve` processes on loopback,
// their peer ports behind the fault-injecting proxies of Net.
type ProcCluster struct {
	T    testing.TB
	Bin  string
	Net  *Net
	Opts ProcOptions
	dir  string

	mu    sync.Mutex
	nodes []*Proc // every node ever started, in order
	seq   int     // for new node ids
}

// Proc is one node process (and its later restarts under the same id).
type Proc struct {
	c        *ProcCluster
	ID       string
	Proxy    *Proxy   // nil with ProcOptions.Direct
	direct   string   // Direct: the peer listen (and advertised) address
	Client   string   // client address (advertised; M names it)
	PeerReal string   // the node's own peer listener (behind Proxy)
	DataDir  string   // "" = in memory
	args     []string // the extra flags of the first start, reused by Restart

	mu      sync.Mutex
	cmd     *exec.Cmd
	pid     int
	exited  chan struct{}
	removed bool
	logs    []string // last lines of stderr
	logFile *os.File
}

// StartProcs starts an n-node cluster of processes (bootstrapped from their
// --peers list) and waits until a leader serves with verified clocks.
func StartProcs(t testing.TB, bin string, n int, opts ProcOptions) *ProcCluster {
	t.Helper()
	c := &ProcCluster{T: t, Bin: bin, Net: NewNet(), Opts: opts, dir: t.TempDir()}
	t.Cleanup(c.Net.Close)
	t.Cleanup(c.killAll)
	var peers []string
	var ps []*Proc
	for i := range n {
		p, err := c.newProc(fmt.Sprintf("n%d", i+1))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
		peers = append(peers, p.ID+"="+p.PeerAddr())
	}
	c.seq = n
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.start("--peers", strings.Join(peers, ","), "--bootstrap")
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReady(30 * time.Second)
	return c
}

func (c *ProcCluster) newProc(id string) (*Proc, error) {
	p := &Proc{c: c, ID: id}
	if c.Opts.Direct {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p.direct = ln.Addr().String()
		ln.Close()
	} else {
		px, err := c.Net.Listen(id)
		if err != nil {
			return nil, err
		}
		p.Proxy = px
	}
	if c.Opts.Durable {
		p.DataDir = filepath.Join(c.dir, id)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, p)
	c.mu.Unlock()
	return p, nil
}

var (
	reServing = regexp.MustCompile(`msg=serving addr=(\S+)`)
	reMember  = regexp.MustCompile(`msg="cluster member".* peer_addr=(\S+)`)
)

// start runs the node process with the common flags and extra, and waits
// until it logged its client and peer addresses.
func (p *Proc) start(extra ...string) error {
	c := p.c
	listen := "127.0.0.1:0"
	if p.Client != "" {
		listen = p.Client // a restart keeps its client address
	}
	peerListen := "127.0.0.1:0" // behind the proxy
	if p.direct != "" {
		peerListen = p.direct
	}
	args := []string{"serve", "--node-id", p.ID, "--listen", listen,
		"--peer-listen", peerListen, "--peer-advertise", p.PeerAddr()}
	lvl := c.Opts.LogLevel
	if lvl == "" {
		lvl = "info"
	}
	args = append(args, "--log-level", lvl)
	if c.Opts.MaxClockSkew > 0 {
		args = append(args, "--max-clock-skew", c.Opts.MaxClockSkew.String())
	}
	if c.Opts.HeartbeatTimeout > 0 {
		args = append(args, "--raft-heartbeat-timeout", c.Opts.HeartbeatTimeout.String())
	}
	if c.Opts.ElectionTimeout > 0 {
		args = append(args, "--raft-election-timeout", c.Opts.ElectionTimeout.String())
	}
	if c.Opts.LeaderLeaseTimeout > 0 {
		args = append(args, "--raft-leader-lease-timeout", c.Opts.LeaderLeaseTimeout.String())
	}
	if c.Opts.TransferTimeout > 0 {
		args = append(args, "--transfer-timeout", c.Opts.TransferTimeout.String())
	}
	if off := c.Opts.ClockOffset[p.ID]; off != 0 {
		args = append(args, "--test-clock-offset", off.String())
	}
	if p.DataDir != "" {
		args = append(args, "--data-dir", p.DataDir)
	}
	if p.args == nil {
		p.args = append([]string{}, extra...)
	}
	args = append(args, extra...)
	cmd := exec.Command(c.Bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), c.Opts.Env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = io.Discard
	lf, err := os.OpenFile(filepath.Join(c.dir, p.ID+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(lf, "=== start %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.pid, p.exited, p.logFile = cmd, cmd.Process.Pid, exited, lf
	p.mu.Unlock()
	ready := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var client, peer string
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.addLog(lf, line)
			if m := reServing.FindStringSubmatch(line); m != nil {
				client = m[1]
			}
			if m := reMember.FindStringSubmatch(line); m != nil {
				peer = m[1]
			}
			if !sent && client != "" && peer != "" {
				ready <- [2]string{client, peer}
				sent = true
			}
		}
		_ = cmd.Wait()
		fmt.Fprintf(lf, "=== exited %s %v\n", time.Now().Format(time.RFC3339Nano), cmd.ProcessState)
		lf.Close()
		close(exited)
	}()
	select {
	case a := <-ready:
		p.mu.Lock()
		p.Client, p.PeerReal = a[0], a[1]
		p.mu.Unlock()
		if p.Proxy != nil {
			p.Proxy.SetTarget(a[1])
		}
		c.Net.SetPID(p.ID, cmd.Process.Pid)
		c.T.Logf("node %s started: pid %d, client %s, peer %s, advertised %s", p.ID, cmd.Process.Pid, a[0], a[1], p.PeerAddr())
		return nil
	case <-exited:
		return fmt.Errorf("node %s exited during start-up:\n%s", p.ID, p.Logs(30))
	case <-time.After(30 * time.Second):
		p.signal(syscall.SIGKILL)
		return fmt.Errorf("node %s did not start within 30s:\n%s", p.ID, p.Logs(30))
	}
}

func (p *Proc) addLog(lf *os.File, line string) {
	fmt.Fprintln(lf, line)
	p.mu.Lock()
	p.logs = append(p.logs, line)
	if len(p.logs) > 400 {
		p.logs = append(p.logs[:0], p.logs[len(p.logs)-200:]...)
	}
	p.mu.Unlock()
}

// PeerAddr is the node's advertised peer address: its proxy's, or with
// ProcOptions.Direct its own peer port.
func (p *Proc) PeerAddr() string {
	if p.Proxy != nil {
		return p.Proxy.Addr()
	}
	return p.direct
}

// Logs returns the node's last n log lines.
func (p *Proc) Logs(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.logs
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// LogsContain reports whether a recent log line contains s.
func (p *Proc) LogsContain(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.logs {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// Running reports whether the process is alive (possibly stopped).
func (p *Proc) Running() bool {
	p.mu.Lock()
	ch := p.exited
	p.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// Removed reports whether the test removed the node from the configuration.
func (p *Proc) Removed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removed
}

func (p *Proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if pid > 0 {
		_ = syscall.Kill(-pid, sig) // the process group
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() {
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// Pause sends SIGSTOP.
func (p *Proc) Pause() { p.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT.
func (p *Proc) Resume() { p.signal(syscall.SIGCONT) }

// Term sends SIGTERM and waits (up to d) for a clean exit; it kills the
// process after d and reports that as an error.
func (p *Proc) Term(d time.Duration) error {
	p.signal(syscall.SIGTERM)
	if p.wait(d) {
		p.mu.Lock()
		st := p.cmd.ProcessState
		p.mu.Unlock()
		if st != nil && !st.Success() {
			return fmt.Errorf("node %s exited with %v after SIGTERM", p.ID, st)
		}
		return nil
	}
	p.Kill()
	return fmt.Errorf("node %s did not exit within %v of SIGTERM", p.ID, d)
}

func (p *Proc) wait(d time.Duration) bool {
	p.mu.Lock()
	ch := p.exited
	p.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// Restart starts the node again under its id, with its data dir (if any),
// client address, proxy and the flags of its first start (extra, when
// given, instead). The process must have exited.
func (p *Proc) Restart(extra ...string) error {
	if p.Running() {
		return fmt.Errorf("node %s is still running", p.ID)
	}
	if len(extra) == 0 {
		extra = p.args
	}
	return p.start(extra...)
}

func (c *ProcCluster) killAll() {
	for _, p := range c.Nodes() {
		p.signal(syscall.SIGCONT)
		p.signal(syscall.SIGKILL)
	}
	for _, p := range c.Nodes() {
		p.wait(10 * time.Second)
	}
	if c.T.Failed() {
		for _, p := range c.Nodes() {
			c.T.Logf("--- last log lines of %s (full log in %s):\n%s", p.ID, filepath.Join(c.dir, p.ID+".log"), p.Logs(40))
		}
	}
	// TICKETING_FAULT_LOGDIR keeps every node's log (the temp dir goes).
	if d := os.Getenv("TICKETING_FAULT_LOGDIR"); d != "" {
		{
			_ = os.MkdirAll(d, 0o755)
			for _, p := range c.Nodes() {
				b, _ := os.ReadFile(filepath.Join(c.dir, p.ID+".log"))
				name := strings.NewReplacer("/", "_", " ", "_").Replace(c.T.Name()) + "-" + p.ID + ".log"
				_ = os.WriteFile(filepath.Join(d, name), b, 0o644)
			}
		}
	}
}

// Nodes returns every node ever started.
func (c *ProcCluster) Nodes() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Proc(nil), c.nodes...)
}

// Members returns the nodes that are running and not removed.
func (c *ProcCluster) Members() []*Proc {
	var out []*Proc
	for _, p := range c.Nodes() {
		if p.Running() && !p.Removed() {
			out = append(out, p)
		}
	}
	return out
}

// ClientAddrs returns the client addresses of the running members.
func (c *ProcCluster) ClientAddrs() []string {
	var out []string
	for _, p := range c.Members() {
		out = append(out, p.Client)
	}
	return out
}

// Node returns the node with id, or nil.
func (c *ProcCluster) Node(id string) *Proc {
	for _, p := range c.Nodes() {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// NodeByClient returns the node whose client address is addr, or nil.
func (c *ProcCluster) NodeByClient(addr string) *Proc {
	for _, p := range c.Nodes() {
		if p.Client == addr {
			return p
		}
	}
	return nil
}

// Status queries one node.
func (p *Proc) Status() (wire.StatusReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return Status(ctx, p.Client)
}

// Query runs an admin query on this node (fresh connection).
func (p *Proc) Query(cmd string, args map[string]any, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return QueryOnce(ctx, p.Client, cmd, args, out)
}

// Leader returns the member that serves as leader now (status role leader
// naming itself), or nil.
func (c *ProcCluster) Leader() *Proc {
	for _, p := range c.Members() {
		st, err := p.Status()
		if err == nil && st.Role == wire.NodeLeader && st.Leader != "" && st.Leader == p.Client {
			return p
		}
	}
	return nil
}

// WaitLeader waits until a member serves as leader.
func (c *ProcCluster) WaitLeader(d time.Duration) *Proc {
	c.T.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.T.Fatalf("no serving leader within %v", d)
	return nil
}

// WaitReady waits until a leader serves and can grant (clocks verified).
func (c *ProcCluster) WaitReady(d time.Duration) *Proc {
	c.T.Helper()
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil {
			st, err := l.Status()
			if err == nil && st.CanGrant {
				return l
			}
			if err == nil {
				last = st.Reason
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.T.Fatalf("no leader able to grant within %v (last reason %q)", d, last)
	return nil
}

// LeaderQuery runs a changing admin query on the current leader, retrying
// (until d) while there is no leader or the leader moved.
func (c *ProcCluster) LeaderQuery(d time.Duration, cmd string, args map[string]any, out any) error {
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		l := c.Leader()
		if l == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
		err = QueryOnce(ctx, l.Client, cmd, args, out)
		cancel()
		var mv *MovedError
		if err == nil || !errors.As(err, &mv) && !isConnErr(err) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s: no leader took it within %v: %v", cmd, d, err)
}

func isConnErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// MemberIDs returns the ids in the leader's configuration (sorted) with
// voter flags.
func (c *ProcCluster) MemberIDs() (map[string]bool, error) {
	l := c.Leader()
	if l == nil {
		return nil, errors.New("no leader")
	}
	var mr wire.MembersReply
	if err := l.Query(wire.CmdMembers, nil, &mr); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range mr.Members {
		out[m.ID] = m.Voter
	}
	return out, nil
}

// AddNode starts a new node process under a fresh id (--join, in memory or
// with a fresh data dir) and adds it with `add-node` (as a voter when voter
// is set: learner, catch-up, promotion). A membership change can fail when
// leadership moves meanwhile (a loaded machine): then the half-added node
// is removed and killed, and a new one tried, three times at most.
func (c *ProcCluster) AddNode(voter bool) (*Proc, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var p *Proc
		if p, err = c.addNode(voter); err == nil {
			return p, nil
		}
		c.T.Logf("add-node attempt %d: %v", attempt+1, err)
		if p != nil {
			if ms, merr := c.MemberIDs(); merr == nil {
				if _, in := ms[p.ID]; in {
					_ = c.RemoveNode(p.ID)
				}
			}
			p.Kill()
			p.MarkRemoved()
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil, err
}

func (c *ProcCluster) addNode(voter bool) (*Proc, error) {
	c.mu.Lock()
	c.seq++
	id := fmt.Sprintf("n%d", c.seq)
	c.mu.Unlock()
	p, err := c.newProc(id)
	if err != nil {
		return nil, err
	}
	if err := p.start("--join"); err != nil {
		return p, err
	}
	var mr wire.MembersReply
	err = c.LeaderQuery(60*time.Second, wire.CmdAddNode, map[string]any{
		"id": id, "peer_addr": p.PeerAddr(), "client_addr": p.Client, "voter": voter,
	}, &mr)
	if err != nil {
		return p, fmt.Errorf("add-node %s: %w", id, err)
	}
	return p, nil
}

// RemoveNode removes id from the configuration with `remove-node` and marks
// it removed (its process, if any, keeps running until killed).
func (c *ProcCluster) RemoveNode(id string) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var mr wire.MembersReply
		err = c.LeaderQuery(60*time.Second, wire.CmdRemoveNode, map[string]any{"id": id}, &mr)
		if err != nil {
			c.WaitLeader(30 * time.Second)
			if ms, merr := c.MemberIDs(); merr == nil {
				if _, ok := ms[id]; !ok {
					err = nil // the removal was committed after all (or retried)
				}
			}
		}
		if err == nil {
			break
		}
		c.T.Logf("remove-node %s attempt %d: %v", id, attempt+1, err)
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("remove-node %s: %w", id, err)
	}
	if p := c.Node(id); p != nil {
		p.mu.Lock()
		p.removed = true
		p.mu.Unlock()
	}
	return nil
}

// Replace is the runbook for an in-memory node that stopped (or is being
// retired): start a new node under a new id, add it as a voter, then
// remove the old id.
func (c *ProcCluster) Replace(old *Proc) (*Proc, error) {
	p, err := c.AddNode(true)
	if err != nil {
		return p, err
	}
	if err := c.RemoveNode(old.ID); err != nil {
		return p, err
	}
	return p, nil
}

// MarkRemoved records that id left the configuration by other means.
func (p *Proc) MarkRemoved() {
	p.mu.Lock()
	p.removed = true
	p.mu.Unlock()
}

// Digest is one node's view of the lock table: key → token, queue depth.
type Digest struct {
	Node    string
	Applied uint64
	Locks   map[string][2]uint64
}

func (d Digest) String() string {
	keys := make([]string, 0, len(d.Locks))
	for k := range d.Locks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%d{", d.Node, d.Applied)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s:%d/%d ", k, d.Locks[k][0], d.Locks[k][1])
	}
	b.WriteString("}")
	return b.String()
}

// TableOf reads a node's lock table with `locks` (up to 10,000 keys).
func (p *Proc) TableOf() (Digest, error) { return TableAt(p.ID, p.Client, "") }

// TableAt reads the lock table of node id at addr with `locks` (up to
// 10,000 keys) between two `status` queries that must report the same
// applied index; adminToken is the nodes' admin token ("" for none).
func TableAt(id, addr, adminToken string) (Digest, error) {
	status := func() (wire.StatusReply, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var st wire.StatusReply
		err := QueryOnceAuth(ctx, addr, adminToken, wire.CmdStatus, nil, &st)
		return st, err
	}
	st0, err := status()
	if err != nil {
		return Digest{}, err
	}
	var lr wire.LocksReply
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err = QueryOnceAuth(ctx, addr, adminToken, wire.CmdLocks, map[string]any{"limit": wire.LocksMaxLimit}, &lr)
	cancel()
	if err != nil {
		return Digest{}, err
	}
	st, err := status()
	if err != nil {
		return Digest{}, err
	}
	if st.AppliedIndex != st0.AppliedIndex {
		return Digest{}, fmt.Errorf("node %s applied %d..%d while read", id, st0.AppliedIndex, st.AppliedIndex)
	}
	d := Digest{Node: id, Applied: st.AppliedIndex, Locks: map[string][2]uint64{}}
	for _, l := range lr.Locks {
		d.Locks[l.Key] = [2]uint64{l.Token, uint64(l.QueueDepth)}
	}
	return d, nil
}

// SameTables reports whether every digest has the same applied index and
// the same locks (keys, tokens, queue depths); false for none.
func SameTables(ds []Digest) bool {
	if len(ds) == 0 {
		return false
	}
	for _, d := range ds[1:] {
		if d.Applied != ds[0].Applied || !sameLocks(d.Locks, ds[0].Locks) {
			return false
		}
	}
	return true
}

// WaitSameTables waits (up to d) until every running member reports the
// same lock table (keys, tokens, queue depths) at the same applied index,
// and returns it. It fails the test otherwise.
func (c *ProcCluster) WaitSameTables(d time.Duration) Digest {
	c.T.Helper()
	deadline := time.Now().Add(d)
	var last []Digest
	var lastErr error
	for time.Now().Before(deadline) {
		last, lastErr = nil, nil
		same := true
		for _, p := range c.Members() {
			dg, err := p.TableOf()
			if err != nil {
				lastErr = err
				same = false
				break
			}
			last = append(last, dg)
		}
		if same && SameTables(last) {
			return last[0]
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.T.Fatalf("nodes do not report the same lock table within %v (err %v): %v", d, lastErr, last)
	return Digest{}
}

func sameLocks(a, b map[string][2]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

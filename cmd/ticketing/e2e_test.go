//go:build unix

package main

// End-to-end tests: the real binary, run as a shell user would, against a
// real server (in-process server.Start, or a spawned `ticketing serve`).
// They cover the "Done when" list of the CLI issue. Skipped with -short.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == guardCmdName {
		// run's guard, started by in-process tests of run (os.Executable
		// is the test binary).
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// ticketingBin builds the binary once per test run.
func ticketingBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: builds and runs the binary")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "ticketing-e2e-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "ticketing")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// e2e is one test's world: the binary and the environment it runs with.
type e2e struct {
	t   *testing.T
	bin string
	env []string
	dir string
}

// newE2E starts an in-process server (cfg adjusted by mut) and returns a
// world whose commands talk to it through TICKETING_ADDR.
func newE2E(t *testing.T, mut func(*server.Config)) *e2e {
	t.Helper()
	bin := ticketingBin(t)
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	if mut != nil {
		mut(&cfg)
	}
	s, err := server.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return newWorld(t, bin, s.Addr())
}

func newWorld(t *testing.T, bin, addr string) *e2e {
	env := []string{"TICKETING_ADDR=" + addr}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TICKETING_") {
			env = append(env, kv)
		}
	}
	return &e2e{t: t, bin: bin, env: env, dir: t.TempDir()}
}

func (e *e2e) path(name string) string { return filepath.Join(e.dir, name) }

// proc is a started ticketing process, in a process group of its own that
// the test's cleanup kills.
type proc struct {
	cmd        *exec.Cmd
	out, err   syncBuf
	done       chan struct{}
	code       int
	start, end time.Time
}

func (e *e2e) start(stdin string, args ...string) *proc {
	e.t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(e.bin, args...)
	p.cmd.Env = e.env
	p.cmd.Dir = e.dir
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	pid := p.cmd.Process.Pid
	go func() {
		p.cmd.Wait()
		p.end = time.Now()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	e.t.Cleanup(func() {
		syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

// wait waits for p to exit (at most a minute) and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(time.Minute):
		t.Fatalf("%v did not exit; stderr: %s", p.cmd.Args, p.err.String())
		return -1
	}
}

// run runs ticketing with args to completion.
func (e *e2e) run(args ...string) *proc { return e.runIn("", args...) }

func (e *e2e) runIn(stdin string, args ...string) *proc {
	e.t.Helper()
	p := e.start(stdin, args...)
	p.wait(e.t)
	return p
}

// expect runs args and fails unless the exit code is code.
func (e *e2e) expect(code int, args ...string) *proc {
	e.t.Helper()
	p := e.run(args...)
	if p.code != code {
		e.t.Fatalf("ticketing %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), p.code, code, p.out.String(), p.err.String())
	}
	return p
}

// token parses acquire's output.
func (e *e2e) token(p *proc) uint64 {
	e.t.Helper()
	s := p.out.String()
	if !regexp.MustCompile(`^[0-9]+\n$`).MatchString(s) {
		e.t.Fatalf("acquire printed %q, want the token alone", s)
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	return n
}

// locks returns the locks reply for key's prefix.
func (e *e2e) lockEntry(key string) (wire.LockEntry, bool) {
	e.t.Helper()
	p := e.expect(0, "locks", "--prefix", key, "-o", "json")
	var lr locksJSON
	if err := json.Unmarshal([]byte(p.out.String()), &lr); err != nil {
		e.t.Fatalf("locks json: %v: %s", err, p.out.String())
	}
	for _, l := range lr.Locks {
		if l.Key == key {
			tok, err := strconv.ParseUint(l.Token, 10, 64)
			if err != nil {
				e.t.Fatalf("locks json: token %q: %v", l.Token, err)
			}
			return wire.LockEntry{Key: l.Key, Token: tok, LeaseRemainingMS: l.LeaseRemainingMS, QueueDepth: l.QueueDepth, OldestWaiterAgeMS: l.OldestWaiterAgeMS}, true
		}
	}
	return wire.LockEntry{}, false
}

// waitQueue waits until key's queue has depth waiters.
func (e *e2e) waitQueue(key string, depth int) {
	e.t.Helper()
	e.waitEntry(key, fmt.Sprintf("a queue of %d", depth), func(l wire.LockEntry) bool { return l.QueueDepth == depth })
}

// waitEntry waits (20 s at most) until key's locks entry satisfies ok.
func (e *e2e) waitEntry(key, what string, ok func(wire.LockEntry) bool) {
	e.t.Helper()
	waitFor(e.t, 20*time.Second, func() bool {
		l, found := e.lockEntry(key)
		return found && ok(l)
	}, fmt.Sprintf("%q: %s", key, what))
}

func (e *e2e) readFile(name string) string {
	e.t.Helper()
	b, err := os.ReadFile(e.path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func oneStderrLine(t *testing.T, p *proc, secrets ...string) {
	t.Helper()
	s := strings.TrimRight(p.err.String(), "\n")
	if s == "" || strings.Contains(s, "\n") || !strings.HasPrefix(s, "ticketing: ") {
		t.Errorf("want one error line on stderr, got %q", s)
	}
	for _, sec := range secrets {
		if sec != "" && strings.Contains(s, sec) {
			t.Errorf("stderr %q shows a secret", s)
		}
	}
}

// ---------------------------------------------------------------------------

func TestE2EAcquireRelease(t *testing.T) {
	e := newE2E(t, nil)
	tok := e.token(e.expect(0, "acquire", "k", "--lease", "30s"))
	p := e.expect(ExitTimeout, "acquire", "k", "-n")
	oneStderrLine(t, p)
	if p.out.Len() != 0 {
		t.Errorf("stdout %q", p.out.String())
	}
	e.expect(42, "acquire", "k", "-n", "-E", "42")
	e.expect(ExitTimeout, "acquire", "k", "--wait", "0.2")

	// Release by token from another process: 0, then 6.
	e.expect(0, "release", "k", strconv.FormatUint(tok, 10))
	oneStderrLine(t, e.expect(ExitNotHolder, "release", "k", strconv.FormatUint(tok, 10)))
	tok2 := e.token(e.expect(0, "acquire", "k", "-n"))
	if tok2 <= tok {
		t.Errorf("token %d after %d", tok2, tok)
	}

	// acquire | release - pipelines, text and JSON.
	sh := exec.Command("sh", "-c", `"$BIN" acquire pipe | "$BIN" release pipe - && "$BIN" acquire pipe -o json | "$BIN" release pipe -`)
	sh.Env = append(e.env, "BIN="+e.bin)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("pipeline: %v: %s", err, out)
	}
	e.expect(0, "acquire", "pipe", "-n") // free again
	e.expect(ExitUsage, "release", "k", "not-a-token")
}

func TestE2ERunChildExitCode(t *testing.T) {
	e := newE2E(t, nil)
	p := e.expect(7, "run", "r", "--", "sh", "-c", `test -n "$TICKETING_TOKEN" && test "$TICKETING_KEY" = r && exit 7`)
	if p.err.Len() != 0 {
		t.Errorf("stderr %q", p.err.String())
	}
	e.expect(0, "acquire", "r", "-n") // released afterwards
	e.expect(127, "run", "r2", "--", "/nonexistent/program")
	e.expect(0, "acquire", "r2", "-n")
}

func TestE2ERunLeaseLost(t *testing.T) {
	e := newE2E(t, nil)
	// The child ignores SIGTERM and leaves a grandchild in its process group.
	p := e.expect(ExitLeaseLost, "run", "ll", "--lease", "2s", "--lease-margin", "1.2", "--kill-grace", "0.5s", "--",
		"sh", "-c", `echo "$TICKETING_TOKEN" > tok; sleep 60 & echo $! > grandchild; trap "" TERM; while :; do sleep 0.1; done`)
	if el := p.end.Sub(p.start); el < time.Second || el > 15*time.Second {
		t.Errorf("run took %v (lease 2s)", el)
	}
	if !strings.Contains(p.err.String(), "lease of ll") {
		t.Errorf("stderr %q", p.err.String())
	}
	assertGone(t, e.path("grandchild"))
	first, _ := strconv.ParseUint(e.readFile("tok"), 10, 64)
	next := e.token(e.expect(0, "acquire", "ll", "--wait", "5"))
	if first == 0 || next <= first {
		t.Errorf("next token %d, run's %d", next, first)
	}
}

func TestE2ERunWaitedLongerThanLease(t *testing.T) {
	e := newE2E(t, nil)
	holder := e.token(e.expect(0, "acquire", "wl", "--lease", "60s"))
	const lease, margin = 3 * time.Second, 1500 * time.Millisecond
	r := e.start("", "run", "wl", "--lease", "3s", "--lease-margin", "1500ms", "--kill-grace", "0.5s", "--wait", "30", "--",
		"sh", "-c", `date +%s%N > started; exec sleep 60`)
	e.waitQueue("wl", 1)
	// locks shows the key with its queue.
	lp := e.expect(0, "locks")
	var row []string
	for _, l := range strings.Split(lp.out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "wl" {
			row = f
		}
	}
	if len(row) < 7 || row[1] != strconv.FormatUint(holder, 10) || row[3] != "1" {
		t.Errorf("locks row %q in\n%s", row, lp.out.String())
	}
	// run has waited longer than its lease: observed on the server's queue.
	e.waitEntry("wl", "the waiter older than the lease", func(l wire.LockEntry) bool {
		return l.QueueDepth == 1 && l.OldestWaiterAgeMS >= (lease+time.Second).Milliseconds()
	})
	e.expect(0, "release", "wl", strconv.FormatUint(holder, 10))
	if code := r.wait(t); code != ExitLeaseLost {
		t.Fatalf("run exit %d, want 9; stderr %s", code, r.err.String())
	}
	ns, err := strconv.ParseInt(e.readFile("started"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	lived := r.end.Sub(time.Unix(0, ns))
	// The child gets the whole lease less the margin, counted from
	// the grant, not from when run asked.
	if lived < lease-margin-500*time.Millisecond || lived > lease+3*time.Second {
		t.Errorf("child lived %v, want about %v", lived, lease-margin)
	}
	if waited := r.end.Sub(r.start); waited < lease+time.Second {
		t.Errorf("run ended after %v", waited)
	}
}

func TestE2ERunSIGTERM(t *testing.T) {
	e := newE2E(t, nil)
	r := e.start("", "run", "st", "--lease", "60s", "--",
		"sh", "-c", `trap "echo term > got; exit 5" TERM; touch ready; while :; do sleep 0.1; done`)
	waitFile(t, e.path("ready"))
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t); code != 5 {
		t.Fatalf("run exit %d, want the child's 5; stderr %s", code, r.err.String())
	}
	if e.readFile("got") != "term" {
		t.Error("the child did not get SIGTERM")
	}
	e.expect(0, "acquire", "st", "-n") // released
}

func TestE2ESignalWhileWaiting(t *testing.T) {
	e := newE2E(t, nil)
	e.expect(0, "acquire", "sw", "--lease", "60s")
	r := e.start("", "run", "sw", "--wait", "30", "--", "touch", "started")
	e.waitQueue("sw", 1)
	r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(t); code != 143 {
		t.Fatalf("run exit %d, want 143; stderr %s", code, r.err.String())
	}
	oneStderrLine(t, r)
	if _, err := os.Stat(e.path("started")); err == nil {
		t.Error("CMD started")
	}
	a := e.start("", "acquire", "sw", "--wait", "30")
	e.waitQueue("sw", 1)
	a.cmd.Process.Signal(syscall.SIGINT)
	if code := a.wait(t); code != 130 || a.out.Len() != 0 {
		t.Fatalf("acquire exit %d, stdout %q", code, a.out.String())
	}
	if l, _ := e.lockEntry("sw"); l.QueueDepth != 0 {
		t.Errorf("the waits were not withdrawn: queue %d", l.QueueDepth)
	}
}

func TestE2EQueueAndJSON(t *testing.T) {
	e := newE2E(t, nil)
	var j acquireJSON
	p := e.expect(0, "acquire", "q", "--lease", "60s", "-o", "json")
	if err := json.Unmarshal([]byte(p.out.String()), &j); err != nil || j.Key != "q" || j.LeaseMS != 60000 {
		t.Fatalf("acquire json %v: %s", err, p.out.String())
	}
	waiter := e.start("", "acquire", "q", "--wait", "30")
	e.waitQueue("q", 1)

	var st wire.StatusReply
	if p := e.expect(0, "status", "-o", "json"); json.Unmarshal([]byte(p.out.String()), &st) != nil || st.Waiters != 1 || st.Holders != 1 {
		t.Errorf("status json: %s", p.out.String())
	}
	if p := e.expect(0, "status"); !strings.Contains(p.out.String(), "can grant") {
		t.Errorf("status: %s", p.out.String())
	}
	var hj []healthJSON
	if p := e.expect(0, "health", "-o", "json"); json.Unmarshal([]byte(p.out.String()), &hj) != nil || len(hj) != 1 || !hj[0].Healthy {
		t.Errorf("health json: %s", p.out.String())
	}
	if p := e.expect(0, "health"); !strings.Contains(p.out.String(), " ok ") {
		t.Errorf("health: %q", p.out.String())
	}
	var pj []pingJSON
	if p := e.expect(0, "ping", "-c", "2", "-i", "0.05", "-o", "json"); json.Unmarshal([]byte(p.out.String()), &pj) != nil || len(pj) != 1 || pj[0].Received != 2 {
		t.Errorf("ping json: %s", p.out.String())
	}
	if p := e.expect(0, "ping", "-c", "1"); !strings.Contains(p.out.String(), "1/1 answered") {
		t.Errorf("ping: %s", p.out.String())
	}

	// Handoff to the waiter: it prints a larger token.
	tok, _ := strconv.ParseUint(j.Token, 10, 64)
	e.expect(0, "release", "q", j.Token)
	if code := waiter.wait(t); code != 0 {
		t.Fatalf("waiter exit %d: %s", code, waiter.err.String())
	}
	if next := e.token(waiter); next <= tok {
		t.Errorf("handoff token %d after %d", next, tok)
	}
}

func TestE2ENoServer(t *testing.T) {
	bin := ticketingBin(t)
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := newWorld(t, bin, addr)
	for _, args := range [][]string{
		{"acquire", "k", "--timeout", "1s"},
		{"run", "k", "--timeout", "1", "--", "true"},
		{"release", "k", "1", "--timeout", "1s"},
		{"status", "--timeout", "1s"},
		{"health", "--timeout", "1s"},
		{"ping", "--timeout", "1s", "-c", "1"},
	} {
		p := e.expect(ExitConnect, args...)
		if el := p.end.Sub(p.start); el > 6*time.Second {
			t.Errorf("%v took %v with --timeout 1s", args, el)
		}
		if args[0] != "health" {
			oneStderrLine(t, p)
		}
	}
}

func TestE2ETokenFileAndAuth(t *testing.T) {
	bin := ticketingBin(t)
	t.Parallel()
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A spawned `ticketing serve`, which logs the bound address.
	w := newWorld(t, bin, "")
	srv := w.start("", "serve", "--listen", "127.0.0.1:0", "--token-file", tf)
	addr := servingAddr(t, srv)
	e := newWorld(t, bin, addr)

	tok := e.token(e.expect(0, "acquire", "a", "--token-file", tf))
	p := e.expect(ExitAuth, "acquire", "b", "--token", "wrong-token")
	oneStderrLine(t, p, "wrong-token", "s3cret-token")
	e.expect(ExitAuth, "acquire", "b")
	e.expect(ExitAuth, "status", "--token", "wrong-token")
	e.expect(ExitAuth, "health", "--token", "wrong-token")

	e.env = append(e.env, "TICKETING_TOKEN_FILE="+tf)
	e.expect(0, "status", "-o", "json")
	e.expect(0, "health")
	// Inside run without a TICKETING_TOKEN, TICKETING_TOKEN is the fencing
	// token too (transition); the credential comes from the file.
	e.expect(0, "run", "c", "--", "sh", "-c", `"$0" acquire nested -n && test "$TICKETING_TOKEN" = "$TICKETING_FENCING_TOKEN" && "$0" release c "$TICKETING_FENCING_TOKEN"`, bin)
	e.expect(0, "release", "a", strconv.FormatUint(tok, 10))

	srv.cmd.Process.Signal(syscall.SIGTERM)
	if code := srv.wait(t); code != 0 {
		t.Errorf("serve exit %d: %s", code, srv.err.String())
	}
}

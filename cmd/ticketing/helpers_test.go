package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client/wire"
)

// clearEnv neutralizes TICKETING_* variables of the developer's shell
// (viper treats an empty variable as unset).
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TICKETING_") {
			t.Setenv(k, "")
		}
	}
	saved := lookupEnv
	lookupEnv = func(k string) (string, bool) {
		v, ok := os.LookupEnv(k)
		return v, ok && v != ""
	}
	t.Cleanup(func() { lookupEnv = saved })
}

// syncBuf is a bytes.Buffer safe for the concurrent writes of a command
// and its child's output copier.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuf) Bytes() []byte { return []byte(s.String()) }
func (s *syncBuf) Len() int      { return len(s.String()) }

func testIO(stdin string) (*IO, *syncBuf, *syncBuf) {
	var out, errOut syncBuf
	return &IO{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}, &out, &errOut
}

// execCmd runs cmd with argv and returns cobra's error.
func execCmd(t *testing.T, cmd *cobra.Command, argv ...string) error {
	t.Helper()
	cmd.SetArgs(argv)
	var sink bytes.Buffer
	cmd.SetOut(&sink)
	cmd.SetErr(&sink)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	markUsageErrors(cmd) // as newRootCmd does for the whole tree
	return cmd.Execute()
}

// codeOf is the exit code Main would give err, and its stderr line.
func codeOf(err error) (int, string) {
	var b bytes.Buffer
	return exitCode(err, &b), strings.TrimSpace(b.String())
}

// ---------------------------------------------------------------------------
// Fakes

type fakeLock struct {
	key      string
	token    uint64
	deadline time.Time
	cl       *fakeLocker
}

func (l *fakeLock) Key() string         { return l.key }
func (l *fakeLock) Token() uint64       { return l.token }
func (l *fakeLock) Deadline() time.Time { return l.deadline }
func (l *fakeLock) Release(ctx context.Context) error {
	return l.cl.Release(ctx, l.key, l.token)
}

type fakeLocker struct {
	mu sync.Mutex
	// Acquire's behaviour: block until ctx ends (block), else err, else grant.
	block      bool
	acquireErr error
	lease      time.Duration // for the granted lock's deadline (default: the asked lease)
	token      uint64
	releaseErr error
	// waiting, when set, is closed once a blocking Acquire waits: the test
	// observes the wait instead of sleeping for it.
	waiting     chan struct{}
	waitingOnce sync.Once

	acquired []string
	released []uint64
	drained  bool
	closed   bool
}

func (f *fakeLocker) connect(context.Context) (lockClient, error) { return f, nil }

func (f *fakeLocker) Acquire(ctx context.Context, key string, lease, wait time.Duration) (heldLock, error) {
	f.mu.Lock()
	f.acquired = append(f.acquired, key)
	block, err, tok := f.block, f.acquireErr, f.token
	if f.lease > 0 {
		lease = f.lease
	}
	f.mu.Unlock()
	if block {
		if f.waiting != nil {
			f.waitingOnce.Do(func() { close(f.waiting) })
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	if tok == 0 {
		tok = 1 << 60
	}
	return &fakeLock{key: key, token: tok, deadline: time.Now().Add(lease), cl: f}, nil
}

func (f *fakeLocker) Release(_ context.Context, key string, token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, token)
	return f.releaseErr
}

func (f *fakeLocker) Drain(context.Context) error {
	f.mu.Lock()
	f.drained = true
	f.mu.Unlock()
	return nil
}

func (f *fakeLocker) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return nil
}

func (f *fakeLocker) releasedTokens() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.released...)
}

type fakeAdmin struct {
	status  wire.StatusReply
	locks   wire.LocksReply
	pings   []admin.PingResult
	err     error
	n       int
	prefix  string
	limit   int
	dialed  [][]string
	dialErr error
}

func (f *fakeAdmin) connect(_ context.Context, addrs []string) (adminClient, error) {
	f.dialed = append(f.dialed, addrs)
	if f.dialErr != nil {
		return nil, f.dialErr
	}
	return f, nil
}

func (f *fakeAdmin) Status(context.Context) (wire.StatusReply, error) { return f.status, f.err }
func (f *fakeAdmin) Locks(_ context.Context, prefix string, limit int) (wire.LocksReply, error) {
	f.prefix, f.limit = prefix, limit
	return f.locks, f.err
}
func (f *fakeAdmin) Ping(context.Context) (admin.PingResult, error) {
	if f.err != nil {
		return admin.PingResult{}, f.err
	}
	p := f.pings[f.n%len(f.pings)]
	f.n++
	return p, nil
}
func (f *fakeAdmin) Close() error { return nil }

// noSignals is a signal source that never fires.
func noSignals() (<-chan os.Signal, func()) { return make(chan os.Signal), func() {} }

// chanSignals delivers what the test sends on ch.
func chanSignals(ch chan os.Signal) signalSource {
	return func() (<-chan os.Signal, func()) { return ch, func() {} }
}

func testConn() ConnOptions {
	return ConnOptions{Addrs: []string{"127.0.0.1:7470"}, Timeout: 2 * time.Second}
}

// hp is host:port.
func hp(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// waitFor is the package's one wait on an observation: it polls cond every
// 20 ms until it holds, and fails the test after d (a generous bound: CI is
// a loaded 2-core machine). No test orders events by sleeping.
func waitFor(t testing.TB, d time.Duration, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package server_test

// Random garbage never crashes the server or breaks the stream, and the
// server stays up for the next client.

import (
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
)

// checkResponseStream parses out as a sequence of whole responses obeying §3.
func checkResponseStream(out []byte) (n int, err error) {
	for len(out) > 0 {
		r, m, err := wire.ParseResponse(out)
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, fmt.Errorf("stream ends inside a frame: % x", out)
		}
		if err := checkResponse(r); err != nil {
			return n, err
		}
		out = out[m:]
		n++
	}
	return n, nil
}

// checkResponse checks what a single node may answer (§3, §4).
func checkResponse(r wire.Response) error {
	switch r.Status {
	case wire.StatusMoved, wire.StatusUnknown:
		return fmt.Errorf("single node answered %s", st.Describe(r))
	case wire.StatusError:
		if (r.Code < wire.CodeBadOp || r.Code > wire.CodeBadLabel) || len(r.Payload) == 0 { // 29, 30: protocol 1.1 (§12.5)
			return fmt.Errorf("bad E: %s", st.Describe(r))
		}
	case wire.StatusBusy:
		if r.Code != wire.CodeQueueFull && r.Code != wire.CodeOverloaded && r.Code != wire.CodeShuttingDown {
			return fmt.Errorf("bad B: %s", st.Describe(r))
		}
	case wire.StatusGranted:
		if r.Value == 0 || r.Code != 0 {
			return fmt.Errorf("bad G: %s", st.Describe(r))
		}
	default:
		if r.Code != 0 {
			return fmt.Errorf("code on %s", st.Describe(r))
		}
	}
	if r.Status != wire.StatusGranted && r.Queued != 0 {
		return fmt.Errorf("queued on %s", st.Describe(r))
	}
	return nil
}

// stillServing checks a fresh client can do real work.
func stillServing(tb testing.TB, s *server.Server) {
	tb.Helper()
	c := dial(tb, s)
	c.Ping()
	tok := c.MustAcquire("after-garbage", 1000)
	is(tb, c.Release("after-garbage", tok), wire.StatusReleased)
	status(tb, c)
	c.Close()
}

// Many random byte streams, before and after a valid handshake.
func TestGarbageStreams(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	s := startServer(t, func(c *server.Config) {
		c.MaxLease, c.MaxWait = 2*time.Second, 500*time.Millisecond
	})
	const streams, workers = 300, 6
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := garbageStream(s.Addr(), seed, i); err != nil {
					t.Errorf("stream %d (seed %d): %v", i, seed, err)
				}
			}
		}()
	}
	for i := range streams {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	stillServing(t, s)
}

func garbageStream(addr string, seed uint64, i int) error {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	c, err := st.DialRawErr(addr, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	handshake := i%4 != 0 // a quarter send garbage instead of AUTH
	if handshake {
		if err := c.Handshake(st.Options{Role: wire.Role(1 + rng.IntN(3))}); err != nil {
			return err
		}
	} else if _, err := c.ReadHelloErr(); err != nil {
		return err
	}
	var n int
	switch rng.IntN(4) {
	case 0:
		n = rng.IntN(32)
	case 1, 2:
		n = rng.IntN(4096)
	default:
		n = rng.IntN(65536)
	}
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(rng.Uint32())
	}
	if handshake && n > 0 && rng.IntN(2) == 0 {
		b[0] = "ARCPQ"[rng.IntN(5)] // get past check 1 more often
	}
	go func() { // the server may close early (BAD_OP): write errors are fine
		_ = c.WriteErr(b)
		_ = c.CloseWrite()
	}()
	out, err := c.ReadAll()
	if err != nil {
		return fmt.Errorf("after %d garbage bytes: %v", n, err)
	}
	if !handshake {
		switch {
		case len(out) == 0 && n < wire.AuthLen:
		case len(out) == wire.WelcomeLen && out[0] == 'E' && wire.Code(out[1]) == wire.CodeBadHandshake:
		default:
			return fmt.Errorf("garbage AUTH: got % x", out)
		}
		return nil
	}
	_, err = checkResponseStream(out)
	return err
}

// Frames with valid headers (ops A R C P Q) and garbage everywhere else: the
// stream stays in sync, so a final ping is answered, after at least one
// answer to every request that cannot queue.
func TestGarbageFrames(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	s := startServer(t, func(c *server.Config) {
		c.MaxLease, c.MaxWait = 2*time.Second, 500*time.Millisecond
	})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				if err := garbageFrames(s.Addr(), seed, w*1000+i); err != nil {
					t.Errorf("run %d (seed %d): %v", w*1000+i, seed, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	stillServing(t, s)
}

func garbageFrames(addr string, seed uint64, run int) error {
	rng := rand.New(rand.NewPCG(seed, uint64(run)))
	c, err := st.DialRawErr(addr, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Handshake(st.Options{Role: wire.Role(1 + rng.IntN(3))}); err != nil {
		return err
	}
	var b []byte
	sent := map[uint32]bool{}
	immediate := 0
	keys := []string{"g/a", "g/b", "g/c"}
	for range 50 + rng.IntN(150) {
		op := "ARCPQ"[rng.IntN(5)]
		var flags uint16
		if rng.IntN(10) == 0 {
			flags = uint16(rng.Uint32())
		}
		id := rng.Uint32N(64) // collisions exercise the duplicate rule
		sent[id] = true
		arg := rng.Uint64()
		var tail []byte
		keyLen := uint8(rng.IntN(256))
		switch {
		case op == 'Q':
			keyLen = 0
			if rng.IntN(4) == 0 {
				keyLen = uint8(rng.IntN(256))
			}
			body := make([]byte, rng.IntN(300))
			for j := range body {
				body[j] = byte(rng.Uint32())
			}
			if rng.IntN(3) == 0 {
				body = []byte(`{"cmd":"` + []string{"status", "locks", "time", "members", "add-node", "x"}[rng.IntN(6)] + `"}`)
			}
			tail = body
			arg = uint64(len(body)) << 32
			if rng.IntN(5) == 0 {
				arg |= uint64(rng.Uint32())
			}
		case rng.IntN(2) == 0 && op != 'P':
			k := keys[rng.IntN(len(keys))]
			keyLen, tail = uint8(len(k)), []byte(k)
			if op == 'A' {
				arg = st.AcquireArg(uint32(rng.IntN(2500)), uint32(rng.IntN(700)))
			}
		default:
			if op == 'P' && rng.IntN(2) == 0 {
				keyLen = 0
			}
			tail = make([]byte, keyLen)
			for j := range tail {
				tail[j] = byte(rng.Uint32())
			}
		}
		if op != 'A' {
			immediate++
		}
		b = append(b, frame(op, keyLen, flags, id, arg, string(tail))...)
	}
	const final = 1 << 20
	b = wire.AppendPing(b, final)
	errc := make(chan error, 1)
	go func() { errc <- c.WriteErr(b) }()
	answered := 0
	for {
		r, err := c.ReadResponseErr(long)
		if err != nil {
			return fmt.Errorf("after %d answers: %v", answered, err)
		}
		if r.ReqID == final {
			if r.Status != wire.StatusPong {
				return fmt.Errorf("final ping: %s", st.Describe(r))
			}
			break
		}
		if !sent[r.ReqID] {
			return fmt.Errorf("answer to a req_id never sent: %s", st.Describe(r))
		}
		if err := checkResponse(r); err != nil {
			return err
		}
		answered++
	}
	if answered < immediate {
		return fmt.Errorf("%d answers before the final pong, want ≥ %d", answered, immediate)
	}
	return <-errc
}

// unixListen listens on a Unix socket in a temporary directory: no
// ephemeral ports and no TIME_WAIT, so a fuzzer can open many connections.
func unixListen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("unix", filepath.Join(tb.TempDir(), "s"))
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}

// FuzzServerStream feeds arbitrary bytes, after a valid handshake with the
// role the input picks, into an in-process server over a real (Unix) socket,
// half-closes, and checks the server answers with whole, valid responses and
// then closes (no hang, no crash, no garbage).
func FuzzServerStream(f *testing.F) {
	ln := unixListen(f)
	serveOn(f, ln, func(c *server.Config) {
		c.MaxLease, c.MaxWait = 100*time.Millisecond, 100*time.Millisecond
		c.MaxKeys, c.MaxWaiters, c.MaxWaitersPerKey, c.MaxInflight = 1000, 1000, 4, 8
		c.Shards = 1
	})
	seed := func(role byte, frames ...[]byte) {
		var b []byte
		for _, fr := range frames {
			b = append(b, fr...)
		}
		f.Add(role, b)
	}
	seed(2, wire.AppendPing(nil, 1))
	seed(2, wire.AppendAcquire(nil, 1, "k", 50, 0), wire.AppendAcquire(nil, 2, "k", 50, 80), wire.AppendRelease(nil, 3, "k", 1))
	seed(1, wire.AppendAcquire(nil, 1, "k", 100, 100), wire.AppendAcquire(nil, 2, "k", 100, 100), wire.AppendCancel(nil, 3, "k", 2))
	seed(2, wire.AppendQuery(nil, 1, []byte(`{"cmd":"status"}`)), wire.AppendQuery(nil, 2, []byte(`{"cmd":"locks","prefix":"k","limit":3}`)))
	seed(3, wire.AppendQuery(nil, 1, []byte(`{"cmd":"add-node"}`)), wire.AppendAcquire(nil, 2, "k", 1, 1))
	seed(2, frame('Z', 0, 0, 7, 0, ""))
	seed(2, frame('Q', 0, 0, 7, 70000<<32, ""))
	seed(2, frame('P', 3, 0, 7, 0, "abc"), frame('A', 1, 1, 8, 0, "k"))
	seed(2, frame('Q', 0, 0, 7, 20000<<32, ""))
	seed(1, frame('A', 2, 0, 1, st.AcquireArg(50, 50), "\xc0\x80"))
	f.Fuzz(func(t *testing.T, role byte, data []byte) {
		nc, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c := st.Wrap(t, nc)
		if err := c.Handshake(st.Options{Role: wire.Role(1 + role%3)}); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.WriteErr(data)
			_ = c.CloseWrite()
		}()
		out, err := c.ReadAll()
		if err != nil {
			t.Fatalf("the server did not answer and close: %v", err)
		}
		<-done
		if _, err := checkResponseStream(out); err != nil {
			t.Fatal(err)
		}
	})
}

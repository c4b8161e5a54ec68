package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
)

// frames parses a byte stream of responses; it fails the test on a torn one.
func frames(tb testing.TB, b []byte) []wire.Response {
	tb.Helper()
	var out []wire.Response
	for len(b) > 0 {
		r, n, err := wire.ParseResponse(b)
		if err != nil || n == 0 {
			tb.Fatalf("response %d: %v (%d bytes left)", len(out), err, len(b))
		}
		out = append(out, r)
		b = b[n:]
	}
	return out
}

// TestNoAnswerLostOnClose interleaves cross-connection handoffs with fatal
// errors, and queued waiters with shutdown: whatever closes the connection,
// every answer queued before is written first (issue #22 item 9).
func TestNoAnswerLostOnClose(t *testing.T) {
	t.Run("handoff then unknown op", func(t *testing.T) {
		s := startServer(t, nil)
		for i := range 100 {
			key := fmt.Sprintf("k%d", i)
			a, b := dial(t, s), dial(t, s)
			tok := a.MustAcquire(key, 60000)
			b.Write(wire.AppendAcquire(nil, 1, key, 60000, 10000))
			// The waiter is queued once a ping behind it is answered.
			expect(t, b.Do(wire.AppendPing(nil, 2)), wire.StatusPong, 0, 2)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); a.Write(wire.AppendRelease(nil, 9, key, tok)) }()
			go func() {
				defer wg.Done()
				// Several frames so that the handoff's G and the E race.
				var f []byte
				for j := range 20 {
					f = wire.AppendPing(f, uint32(100+j))
				}
				b.Write(append(f, st.Header('Z', 0, 0, 99, 0)...))
			}()
			wg.Wait()
			all, err := b.ReadAll()
			if err != nil {
				t.Fatalf("iteration %d: %v", i, err)
			}
			rs := frames(t, all)
			if len(rs) == 0 || rs[len(rs)-1].Status != wire.StatusError || rs[len(rs)-1].Code != wire.CodeBadOp || rs[len(rs)-1].ReqID != 99 {
				t.Fatalf("iteration %d: %d answers, the last %+v; want E BAD_OP for req 99 last", i, len(rs), rs)
			}
			pongs := 0
			for _, r := range rs {
				if r.Status == wire.StatusPong {
					pongs++
				}
			}
			if pongs != 20 {
				t.Fatalf("iteration %d: %d of 20 pongs", i, pongs)
			}
			a.Close()
			b.Close()
		}
	})
	t.Run("waiters then shutdown", func(t *testing.T) {
		for i := range 5 {
			cfg := server.DefaultConfig()
			cfg.Listen = "127.0.0.1:0"
			s, err := server.Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			holder := dial(t, s)
			var conns []*st.Conn
			const perConn = 200
			for c := range 10 {
				w := dial(t, s)
				var f []byte
				for j := range perConn {
					key := fmt.Sprintf("i%d/c%d/k%d", i, c, j)
					holder.MustAcquire(key, 60000)
					f = wire.AppendAcquire(f, uint32(j+1), key, 60000, 60000)
				}
				w.Write(append(f, wire.AppendPing(nil, 9999)...))
				expect(t, w.Read(), wire.StatusPong, 0, 9999)
				conns = append(conns, w)
			}
			go func() { _ = s.Close() }()
			for c, w := range conns {
				all, err := w.ReadAll()
				if err != nil {
					t.Fatalf("run %d conn %d: %v", i, c, err)
				}
				rs := frames(t, all)
				if len(rs) != perConn {
					t.Fatalf("run %d conn %d: %d answers, want %d B SHUTTING_DOWN", i, c, len(rs), perConn)
				}
				for _, r := range rs {
					if r.Status != wire.StatusBusy || r.Code != wire.CodeShuttingDown {
						t.Fatalf("run %d conn %d: %+v", i, c, r)
					}
				}
				w.Close()
			}
			holder.Close()
			_ = s.Close()
		}
	})
}

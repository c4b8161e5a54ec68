package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// long is the generous bound used for anything that must "eventually" happen.
const long = 10 * time.Second

// startServer starts an in-process server on 127.0.0.1:0 with the defaults
// changed by mod, and closes it when the test ends (Close must succeed).
func startServer(tb testing.TB, mod func(*server.Config)) *server.Server {
	tb.Helper()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Shards = 4
	if mod != nil {
		mod(&cfg)
	}
	s, err := server.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

// dial connects with role admin (no token).
func dial(tb testing.TB, s *server.Server) *st.Conn {
	tb.Helper()
	return st.Dial(tb, s.Addr(), st.Options{Role: wire.RoleAdmin})
}

func dialRole(tb testing.TB, s *server.Server, role wire.Role, token string) *st.Conn {
	tb.Helper()
	return st.Dial(tb, s.Addr(), st.Options{Role: role, Token: token})
}

// expect checks a response's status, code and req_id.
func expect(tb testing.TB, r wire.Response, status wire.Status, code wire.Code, reqID uint32) {
	tb.Helper()
	if r.Status != status || r.Code != code || r.ReqID != reqID {
		tb.Fatalf("got %s; want %c code %v req_id %d", st.Describe(r), status, code, reqID)
	}
	checkResponseShape(tb, r)
}

// checkResponseShape checks the §3 invariants every response obeys.
func checkResponseShape(tb testing.TB, r wire.Response) {
	tb.Helper()
	if r.Status != wire.StatusGranted && r.Queued != 0 {
		tb.Errorf("%s: queued must be 0 for status %c", st.Describe(r), r.Status)
	}
	switch r.Status {
	case wire.StatusTimeout, wire.StatusBusy, wire.StatusReleased, wire.StatusNotHolder, wire.StatusUnknown:
		if r.Value != 0 {
			tb.Errorf("%s: value must be 0", st.Describe(r))
		}
	case wire.StatusGranted:
		if r.Value == 0 {
			tb.Errorf("%s: a token is > 0", st.Describe(r))
		}
		if r.Code != 0 {
			tb.Errorf("%s: G carries code 0", st.Describe(r))
		}
	case wire.StatusError:
		if len(r.Payload) > wire.MaxErrorPayload || !utf8Valid(r.Payload) || uint64(len(r.Payload)) != r.Value {
			tb.Errorf("%s: E payload must be ≤ 1024 bytes of UTF-8, value = its length", st.Describe(r))
		}
	case wire.StatusAdmin:
		var m map[string]any
		if err := json.Unmarshal(r.Payload, &m); err != nil || m == nil {
			tb.Errorf("%s: J payload must be a JSON object: %v", st.Describe(r), err)
		}
	}
}

func utf8Valid(b []byte) bool { return strings.ToValidUTF8(string(b), "\x00\x01") == string(b) }

// is checks a response's status (and code 0).
func is(tb testing.TB, r wire.Response, status wire.Status) wire.Response {
	tb.Helper()
	expect(tb, r, status, 0, r.ReqID)
	return r
}

// expectE checks an E answer with code for reqID.
func expectE(tb testing.TB, r wire.Response, code wire.Code, reqID uint32) {
	tb.Helper()
	expect(tb, r, wire.StatusError, code, reqID)
}

// query sends an admin query and decodes the J reply into out.
func query(tb testing.TB, c *st.Conn, body string, out any) {
	tb.Helper()
	r := c.Query(body)
	if r.Status != wire.StatusAdmin {
		tb.Fatalf("query %s: %s, want J", body, st.Describe(r))
	}
	if err := json.Unmarshal(r.Payload, out); err != nil {
		tb.Fatalf("query %s: %v in %s", body, err, r.Payload)
	}
}

func status(tb testing.TB, c *st.Conn) wire.StatusReply {
	tb.Helper()
	var s wire.StatusReply
	query(tb, c, `{"cmd":"status"}`, &s)
	return s
}

func locks(tb testing.TB, c *st.Conn, body string) wire.LocksReply {
	tb.Helper()
	var l wire.LocksReply
	query(tb, c, body, &l)
	return l
}

// queueDepth is the queue depth of key per admin `locks` (-1 when not held).
func queueDepth(tb testing.TB, c *st.Conn, key string) int {
	tb.Helper()
	body, _ := json.Marshal(map[string]any{"cmd": "locks", "prefix": key, "limit": 10000})
	for _, e := range locks(tb, c, string(body)).Locks {
		if e.Key == key {
			return e.QueueDepth
		}
	}
	return -1
}

// waitFor polls cond until it holds or the generous bound passes.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	eventually(tb, long, what, cond)
}

// waitDepth waits until key's queue depth (seen by admin) is n.
func waitDepth(tb testing.TB, admin *st.Conn, key string, n int) {
	tb.Helper()
	waitFor(tb, fmt.Sprintf("queue depth of %q = %d", key, n), func() bool { return queueDepth(tb, admin, key) == n })
}

// waitConns waits until the server counts n live connections.
func waitConns(tb testing.TB, admin *st.Conn, n int64) {
	tb.Helper()
	waitFor(tb, fmt.Sprintf("%d connections", n), func() bool { return status(tb, admin).Connections == n })
}

func writeFile(tb testing.TB, path string, b []byte) {
	tb.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

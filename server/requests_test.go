package server_test

// protocol.md §2 and §2.1: request framing and every field constraint, in
// order, each answered with its code while the connection stays usable.

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	st "github.com/ticketing/ticketing/server/servertest"
)

// frame builds a raw request: a header followed by tail (key or body bytes).
func frame(op byte, keyLen uint8, flags uint16, reqID uint32, arg uint64, tail string) []byte {
	return append(st.Header(op, keyLen, flags, reqID, arg), tail...)
}

// keyFrame builds A/R/C with key_len = len(key).
func keyFrame(op byte, flags uint16, reqID uint32, arg uint64, key string) []byte {
	return frame(op, uint8(len(key)), flags, reqID, arg, key)
}

func qFrame(flags uint16, reqID uint32, body string) []byte {
	return frame('Q', 0, flags, reqID, uint64(len(body))<<32, body)
}

var okArg = st.AcquireArg(60000, 0)

var badKeys = []struct{ name, key string }{
	{"empty", ""},
	{"251 bytes", strings.Repeat("k", 251)},
	{"255 bytes", strings.Repeat("k", 255)},
	{"invalid byte ff", "ab\xffcd"},
	{"lone continuation byte", "\x80"},
	{"truncated 2-byte sequence", "ab\xc3"},
	{"truncated 3-byte sequence", "\xe2\x82"},
	{"overlong NUL c0 80", "\xc0\x80"},
	{"overlong slash c1 af", "\xc1\xaf"},
	{"overlong e0 80 80", "\xe0\x80\x80"},
	{"overlong f0 80 80 80", "\xf0\x80\x80\x80"},
	{"surrogate U+D800", "\xed\xa0\x80"},
	{"surrogate U+DFFF", "\xed\xbf\xbf"},
	{"above U+10FFFF", "\xf4\x90\x80\x80"},
	{"f5 lead byte", "\xf5\x80\x80\x80"},
	{"NUL", "a\x00b"},
	{"U+001F", "\x1f"},
	{"tab", "a\tb"},
	{"newline", "a\n"},
	{"DEL U+007F", "\x7f"},
	{"C1 U+0080", "a\u0080"},
	{"C1 U+0085 (NEL)", "\u0085"},
	{"C1 U+009F", "\u009f"},
}

var goodKeys = []struct{ name, key string }{
	{"one byte", "k"},
	{"250 bytes", strings.Repeat("k", 250)},
	{"250 bytes of 2-byte chars", strings.Repeat("é", 125)},
	{"space", " "},
	{"U+00A0 after the C1 range", "\u00a0"},
	{"tilde", "~"},
	{"Cyrillic", "ключ"},
	{"U+2028", "a\u2028b"},
	{"U+FFFD", "\ufffd"},
	{"emoji U+1F512", "🔒"},
	{"U+10FFFF", "\U0010FFFF"},
	{"not normalized: e + combining acute", "e\u0301"},
}

type fcase struct {
	name  string
	frame []byte
	code  wire.Code
}

// checkCases sends each case's frame and a ping in one write: the answer
// must be E with the case's code and req_id, and the ping's pong must follow
// (the stream stayed in sync and the connection usable).
func checkCases(t *testing.T, c *st.Conn, cases []fcase) {
	t.Helper()
	for _, tc := range cases {
		h, _ := wire.ParseRequestHeader(tc.frame)
		pingID := h.ReqID + 1_000_000
		c.Write(wire.AppendPing(append([]byte(nil), tc.frame...), pingID))
		r := c.Read()
		if r.Status != wire.StatusError || r.Code != tc.code || r.ReqID != h.ReqID {
			t.Fatalf("%s: got %s, want E %v req_id %d", tc.name, st.Describe(r), tc.code, h.ReqID)
		}
		checkResponseShape(t, r)
		if p := c.Read(); p.Status != wire.StatusPong || p.ReqID != pingID {
			t.Fatalf("%s: after the E got %s, want the pong of req_id %d", tc.name, st.Describe(p), pingID)
		}
	}
}

func TestFieldConstraints(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	heldTok := h.MustAcquire("held", 600000)
	c := dial(t, s)

	var cases []fcase
	id := uint32(100)
	add := func(name string, f []byte, code wire.Code) {
		cases = append(cases, fcase{name, f, code})
	}
	next := func() uint32 { id++; return id }

	// check 2: flags
	for _, fl := range []uint16{1, 2, 0x0100, 0x8000, 0xffff} {
		add(fmt.Sprintf("A flags %#x", fl), keyFrame('A', fl, next(), okArg, "free-flags"), wire.CodeBadFlags)
		add(fmt.Sprintf("R flags %#x", fl), keyFrame('R', fl, next(), heldTok, "held"), wire.CodeBadFlags)
		add(fmt.Sprintf("C flags %#x", fl), keyFrame('C', fl, next(), 1<<32, "held"), wire.CodeBadFlags)
		add(fmt.Sprintf("P flags %#x", fl), frame('P', 0, fl, next(), 0, ""), wire.CodeBadFlags)
		add(fmt.Sprintf("Q flags %#x", fl), qFrame(fl, next(), `{"cmd":"status"}`), wire.CodeBadFlags)
	}
	// check 5: keys of A, R, C
	for _, k := range badKeys {
		add("A key "+k.name, keyFrame('A', 0, next(), okArg, k.key), wire.CodeBadKey)
		add("A wait key "+k.name, keyFrame('A', 0, next(), st.AcquireArg(1000, 1000), k.key), wire.CodeBadKey)
		add("R key "+k.name, keyFrame('R', 0, next(), 1, k.key), wire.CodeBadKey)
		add("C key "+k.name, keyFrame('C', 0, next(), 1<<32, k.key), wire.CodeBadKey)
	}
	// check 5: ping key_len must be 0; the key bytes are read and discarded.
	add("P key_len 1", frame('P', 1, 0, next(), 0, "x"), wire.CodeBadKey)
	add("P key_len 255", frame('P', 255, 0, next(), 0, strings.Repeat("P", 255)), wire.CodeBadKey)
	// The discarded bytes form a valid ping: it must not be answered.
	add("P key_len 16 holding a ping", frame('P', 16, 0, next(), 0, string(wire.AppendPing(nil, 424242))), wire.CodeBadKey)
	// check 5: Q header
	add("Q key_len 1", frame('Q', 1, 0, next(), uint64(len(`{"cmd":"time"}`))<<32, `{"cmd":"time"}`), wire.CodeBadAdmin)
	add("Q key_len 255", frame('Q', 255, 0, next(), uint64(len(`{"cmd":"time"}`))<<32, `{"cmd":"time"}`), wire.CodeBadAdmin)
	add("Q bytes 12..16 = 1", frame('Q', 0, 0, next(), uint64(len(`{"cmd":"time"}`))<<32|1, `{"cmd":"time"}`), wire.CodeBadAdmin)
	add("Q bytes 12..16 = ffffffff", frame('Q', 0, 0, next(), uint64(len(`{"cmd":"time"}`))<<32|0xffffffff, `{"cmd":"time"}`), wire.CodeBadAdmin)
	add("Q body_len 0", frame('Q', 0, 0, next(), 0, ""), wire.CodeBadAdmin)
	// check 6: lease
	for _, lease := range []uint32{0, 3_600_001, 1 << 31, 0xffffffff} {
		add(fmt.Sprintf("A lease %d", lease), keyFrame('A', 0, next(), st.AcquireArg(lease, 0), "free-lease"), wire.CodeBadLease)
		add(fmt.Sprintf("A lease %d on a held key", lease), keyFrame('A', 0, next(), st.AcquireArg(lease, 1000), "held"), wire.CodeBadLease)
	}
	// check 7: wait
	for _, wait := range []uint32{900_001, 1 << 31, 0xffffffff} {
		add(fmt.Sprintf("A wait %d", wait), keyFrame('A', 0, next(), st.AcquireArg(1000, wait), "free-wait"), wire.CodeBadWait)
		add(fmt.Sprintf("A wait %d on a held key", wait), keyFrame('A', 0, next(), st.AcquireArg(1000, wait), "held"), wire.CodeBadWait)
	}
	// check 8: Q body
	for _, body := range []string{
		`hello`, `[]`, `[{"cmd":"status"}]`, `"status"`, `null`, `true`, `42`, `{}`, ` `, "\xff",
		`{"cmd":1}`, `{"cmd":null}`, `{"cmd":true}`, `{"cmd":["status"]}`, `{"cmd":{"name":"status"}}`,
		`{"cmd":""}`, `{"cmd":"nope"}`, `{"cmd":"STATUS"}`, `{"cmd":"Status"}`, `{"cmd":"status "}`,
		`{"cmd":"lock"}`, `{"cmd":"add_node"}`,
		`{"CMD":"status"}`, `{"Cmd":"status"}`, `{"command":"status"}`,
		`{"cmd":"status"}x`, `{"cmd":"status"}{}`, `{"cmd":"status"`, `{"cmd":"status",}`, `{'cmd':'status'}`,
		"\u00a0{\"cmd\":\"status\"}",
	} {
		add(fmt.Sprintf("Q body %q", body), qFrame(0, next(), body), wire.CodeBadAdmin)
	}
	checkCases(t, c, cases)

	// The valid neighbours of those cases are accepted.
	for _, k := range goodKeys {
		r := c.Acquire(k.key, 60000, 0)
		expect(t, r, wire.StatusGranted, 0, r.ReqID)
		if r.Queued != 0 {
			t.Fatalf("immediate grant with queued %d", r.Queued)
		}
		is(t, c.Release(k.key, r.Value), wire.StatusReleased)
	}
	for _, lease := range []uint32{1, 3_600_000} {
		r := c.Acquire("lease-bounds", lease, 900_000)
		expect(t, r, wire.StatusGranted, 0, r.ReqID)
		c.Release("lease-bounds", r.Value)
	}
	// A flags-free cancel ignores its reserved bytes 12..16, a ping its arg.
	expect(t, c.Do(keyFrame('C', 0, 5, 77<<32|0xffffffff, "held")), wire.StatusNotHolder, 0, 5)
	expect(t, c.Do(frame('P', 0, 0, 6, ^uint64(0), "")), wire.StatusPong, 0, 6)
	for _, body := range []string{
		`{"cmd":"status","extra":[1,{"x":null}]}`, " \t\r\n{\"cmd\":\"time\"} \n", `{"cmd":"members","CMD":"x"}`,
		`{"cmd":"locks","prefix":"zz","limit":1}`, `{"cmd":"locks","prefix":null}`,
	} {
		if r := c.Query(body); r.Status != wire.StatusAdmin {
			t.Fatalf("Q %q: %s, want J", body, st.Describe(r))
		}
	}

	// None of the refused requests changed anything (§2.1: "the request
	// changes nothing"): only "held" is held, by its first token, no waiters.
	l := locks(t, c, `{"cmd":"locks"}`)
	if l.Total != 1 || len(l.Locks) != 1 || l.Locks[0].Key != "held" || l.Locks[0].Token != heldTok || l.Locks[0].QueueDepth != 0 {
		t.Fatalf("refused requests changed the lock table: %+v", l)
	}
	if stt := status(t, c); stt.Waiters != 0 || stt.Keys != 1 {
		t.Fatalf("status after refused requests: %+v", stt)
	}
	// Every E counted.
	if stt := status(t, c); stt.Counters.Errors != uint64(len(cases)) {
		t.Fatalf("errors counter %d, want %d", stt.Counters.Errors, len(cases))
	}
}

// §2.1 check 3: a req_id equal to an outstanding (queued) acquire's.
func TestDuplicateReqID(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	tok := h.MustAcquire("dup", 600000)
	c := dial(t, s)
	c.Write(wire.AppendAcquire(nil, 7, "dup", 60000, 60000))
	waitDepth(t, h, "dup", 1)

	checkCases(t, c, []fcase{
		{"A on a free key", wire.AppendAcquire(nil, 7, "dup-free", 60000, 0), wire.CodeDuplicateReqID},
		{"A on the same key", wire.AppendAcquire(nil, 7, "dup", 60000, 60000), wire.CodeDuplicateReqID},
		{"R", wire.AppendRelease(nil, 7, "dup", tok), wire.CodeDuplicateReqID},
		{"C of itself", wire.AppendCancel(nil, 7, "dup", 7), wire.CodeDuplicateReqID},
		{"P", wire.AppendPing(nil, 7), wire.CodeDuplicateReqID},
		{"Q", wire.AppendQuery(nil, 7, []byte(`{"cmd":"status"}`)), wire.CodeDuplicateReqID},
		{"P with key_len 3", frame('P', 3, 0, 7, 0, "abc"), wire.CodeDuplicateReqID},
	})
	c.ExpectNothing(50 * time.Millisecond)
	// Nothing changed: the release was refused, dup-free was not granted,
	// the waiter is still queued.
	if d := queueDepth(t, h, "dup"); d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}
	if d := queueDepth(t, h, "dup-free"); d != -1 {
		t.Fatal("a refused acquire took dup-free")
	}
	// Another connection may use req_id 7 (req_ids are per connection).
	o := dial(t, s)
	expect(t, o.Do(wire.AppendPing(nil, 7)), wire.StatusPong, 0, 7)
	// The outstanding acquire still gets its own answer.
	is(t, h.Release("dup", tok), wire.StatusReleased)
	g := c.Read()
	expect(t, g, wire.StatusGranted, 0, 7)
	if g.Value <= tok {
		t.Fatalf("handoff token %d not above %d", g.Value, tok)
	}
	// Answered: 7 is free again.
	expect(t, c.Do(wire.AppendPing(nil, 7)), wire.StatusPong, 0, 7)
	// Answers given at once never make a req_id outstanding.
	expect(t, c.Do(wire.AppendAcquire(nil, 8, "dup", 1000, 0)), wire.StatusTimeout, 0, 8)
	expect(t, c.Do(wire.AppendPing(nil, 8)), wire.StatusPong, 0, 8)
}

// §2.1: checks run in order; the first failing one answers.
func TestFirstFailingCheckWins(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	h.MustAcquire("ffc", 600000)
	c := dial(t, s)
	c.Write(wire.AppendAcquire(nil, 77, "ffc", 60000, 60000)) // outstanding 77
	waitDepth(t, h, "ffc", 1)
	bad := st.AcquireArg(0, 0xffffffff) // lease 0 and wait too long
	checkCases(t, c, []fcase{
		{"flags before dup, key, lease, wait", keyFrame('A', 1, 77, bad, "\x00"), wire.CodeBadFlags},
		{"dup before key, lease, wait", keyFrame('A', 0, 77, bad, ""), wire.CodeDuplicateReqID},
		{"key before lease and wait", keyFrame('A', 0, 78, bad, strings.Repeat("x", 251)), wire.CodeBadKey},
		{"lease before wait", keyFrame('A', 0, 79, bad, "ok"), wire.CodeBadLease},
		{"wait last", keyFrame('A', 0, 80, st.AcquireArg(1, 0xffffffff), "ok"), wire.CodeBadWait},
		{"R flags before dup and key", keyFrame('R', 1, 77, 0, ""), wire.CodeBadFlags},
		{"R dup before key", keyFrame('R', 0, 77, 0, ""), wire.CodeDuplicateReqID},
		{"C dup before key", keyFrame('C', 0, 77, 0, "\x7f"), wire.CodeDuplicateReqID},
		{"P flags before dup and key_len", frame('P', 2, 1, 77, 0, "xx"), wire.CodeBadFlags},
		{"P dup before key_len", frame('P', 2, 0, 77, 0, "xx"), wire.CodeDuplicateReqID},
		{"Q flags before dup", frame('Q', 1, 1, 77, 2<<32|1, "{}"), wire.CodeBadFlags},
		{"Q dup before header and body", frame('Q', 1, 0, 77, 2<<32|1, "{}"), wire.CodeDuplicateReqID},
		{"Q header before body", frame('Q', 1, 0, 81, 2<<32, "{}"), wire.CodeBadAdmin},
	})
	p := dialRole(t, s, wire.RolePeer, "")
	checkCases(t, p, []fcase{
		{"peer A: flags before role", keyFrame('A', 1, 1, bad, ""), wire.CodeBadFlags},
		{"peer A: role before key and lease", keyFrame('A', 0, 2, bad, ""), wire.CodeNotPermitted},
		{"peer R: role before key", keyFrame('R', 0, 3, 0, "\xff"), wire.CodeNotPermitted},
		{"peer C: role before key", keyFrame('C', 0, 4, 0, ""), wire.CodeNotPermitted},
		{"peer changing Q", qFrame(0, 5, `{"cmd":"remove-node","id":"x"}`), wire.CodeNotPermitted},
	})
	cl := dialRole(t, s, wire.RoleClient, "")
	checkCases(t, cl, []fcase{
		{"client Q: flags before role", qFrame(1, 1, `{"cmd":"status"}`), wire.CodeBadFlags},
		{"client Q: role before header", frame('Q', 3, 0, 2, 2<<32|9, "{}"), wire.CodeNotPermitted},
		{"client Q: role before body", qFrame(0, 3, `not json`), wire.CodeNotPermitted},
	})
}

// §2.1 check 1: an unknown op is answered E BAD_OP with its req_id once its
// 16-byte header arrived, then the connection closes; nothing after it is
// answered.
func TestUnknownOp(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	for _, op := range []byte{0x00, 0x01, 'a', 'r', 'c', 'p', 'q', 'B', 'G', 'O', 'Z', 0x40, 0x7f, 0x80, 0xff} {
		t.Run(fmt.Sprintf("op %#02x", op), func(t *testing.T) {
			t.Parallel()
			c := dial(t, s)
			b := wire.AppendPing(nil, 1)
			b = append(b, frame(op, 5, 0, 0xABCD1234, 0x0102030405060708, "hello")...)
			b = wire.AppendPing(b, 3)
			c.Write(b)
			expect(t, c.Read(), wire.StatusPong, 0, 1)
			expectE(t, c.Read(), wire.CodeBadOp, 0xABCD1234)
			c.ExpectEOF()
		})
	}
	t.Run("flags and key also bad", func(t *testing.T) {
		t.Parallel()
		c := dial(t, s)
		c.Write(frame('Z', 0, 0xffff, 9, 0, ""))
		expectE(t, c.Read(), wire.CodeBadOp, 9)
		c.ExpectEOF()
	})
	t.Run("answered only after the whole header", func(t *testing.T) {
		t.Parallel()
		c := dial(t, s)
		f := frame('z', 0, 0, 0x01020304, 0, "")
		c.Write(f[:10])
		c.ExpectNothing(150 * time.Millisecond)
		c.Write(f[10:])
		expectE(t, c.Read(), wire.CodeBadOp, 0x01020304)
		c.ExpectEOF()
	})
}

// After E BAD_OP the connection's waiters leave their queues silently; the
// locks it holds stay held.
func TestUnknownOpDropsWaitersKeepsLocks(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	admin := dial(t, s)
	other := dial(t, s)
	otherTok := other.MustAcquire("q", 600000)
	c := dial(t, s)
	held := c.MustAcquire("h", 600000)
	c.Write(wire.AppendAcquire(nil, 50, "q", 60000, 60000))
	waitDepth(t, admin, "q", 1)
	c.Write(frame(0xEE, 0, 0, 51, 0, ""))
	expectE(t, c.Read(), wire.CodeBadOp, 51)
	c.ExpectEOF()
	waitDepth(t, admin, "q", 0)
	// q goes free on release: the closed connection's waiter was not granted.
	is(t, other.Release("q", otherTok), wire.StatusReleased)
	if d := queueDepth(t, admin, "q"); d != -1 {
		t.Fatalf("q still held after release (depth %d)", d)
	}
	// h is still held by c's token, and can be released by that token.
	is(t, other.Acquire("h", 1000, 0), wire.StatusTimeout)
	l := locks(t, admin, `{"cmd":"locks","prefix":"h"}`)
	if l.Total != 1 || l.Locks[0].Token != held {
		t.Fatalf("h: %+v, want held by token %d", l, held)
	}
	is(t, other.Release("h", held), wire.StatusReleased)
}

// §2.1 check 5: body_len above 65,536 is answered E BAD_ADMIN and the
// connection closes without reading the body; 65,536 itself is fine.
func TestQueryBodyLimits(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	for _, n := range []uint64{65537, 1 << 20, 0xffffffff} {
		c := dial(t, s)
		c.Write(append(wire.AppendPing(nil, 1), frame('Q', 0, 0, 2, n<<32, `{"cmd":"status"}`)...))
		expect(t, c.Read(), wire.StatusPong, 0, 1)
		expectE(t, c.Read(), wire.CodeBadAdmin, 2)
		c.ExpectEOF()
	}
	// The earlier checks still win, and the connection still closes.
	c := dial(t, s)
	c.Write(frame('Q', 0, 1, 3, 70000<<32, ""))
	expectE(t, c.Read(), wire.CodeBadFlags, 3)
	c.ExpectEOF()
	cl := dialRole(t, s, wire.RoleClient, "")
	cl.Write(frame('Q', 0, 0, 4, 70000<<32, ""))
	expectE(t, cl.Read(), wire.CodeNotPermitted, 4)
	cl.ExpectEOF()

	// Bodies larger than the server's read buffer, up to the limit, are fine,
	// even when they arrive in small pieces.
	c = dial(t, s)
	for _, n := range []int{100, 16 << 10, 16<<10 + 1, 20000, 40000, 65536} {
		body := padBody(`{"cmd":"time","pad":"`, `"}`, n)
		r := c.Query(body)
		expect(t, r, wire.StatusAdmin, 0, r.ReqID)
	}
	body := padBody(`{"cmd":"time","pad":"`, `"}`, 65536)
	f := wire.AppendQuery(nil, 9, []byte(body))
	f = wire.AppendPing(f, 10)
	for len(f) > 0 {
		n := min(len(f), 7000)
		c.Write(f[:n])
		f = f[n:]
		time.Sleep(time.Millisecond)
	}
	expect(t, c.Read(), wire.StatusAdmin, 0, 9)
	expect(t, c.Read(), wire.StatusPong, 0, 10)
	// Too large JSON inside a valid frame is just bad JSON.
	r := c.Query(padBody(`{"cmd":"time","pad":"`, `"`, 65536))
	expectE(t, r, wire.CodeBadAdmin, r.ReqID)
	c.Ping()
}

// padBody returns pre + x… + post of exactly n bytes.
func padBody(pre, post string, n int) string {
	return pre + strings.Repeat("x", n-len(pre)-len(post)) + post
}

// Requests split at every byte boundary are reassembled.
func TestRequestsSplitAnywhere(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	var b []byte
	b = wire.AppendAcquire(b, 1, "split/ключ", 60000, 0)
	b = wire.AppendPing(b, 2)
	b = wire.AppendQuery(b, 3, []byte(`{"cmd":"time"}`))
	b = wire.AppendAcquire(b, 4, "split/ключ", 60000, 0)
	for i := range b {
		c.Write(b[i : i+1])
	}
	expect(t, c.Read(), wire.StatusGranted, 0, 1)
	expect(t, c.Read(), wire.StatusPong, 0, 2)
	expect(t, c.Read(), wire.StatusAdmin, 0, 3)
	expect(t, c.Read(), wire.StatusTimeout, 0, 4)
}

// Keys are compared byte for byte: no normalization, no case folding.
func TestKeysByteForByte(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	for _, k := range []string{"é", "e\u0301", "K", "k", "k ", " k"} {
		c.MustAcquire("bb/"+k, 60000)
	}
	l := locks(t, c, `{"cmd":"locks","prefix":"bb/"}`)
	if l.Total != 6 {
		t.Fatalf("%d keys, want 6 distinct", l.Total)
	}
	var keys [][]byte
	for _, e := range l.Locks {
		keys = append(keys, []byte(e.Key))
	}
	if !bytes.Equal(bytes.Join(keys, nil), []byte("bb/ kbb/Kbb/e\u0301bb/kbb/k bb/é")) {
		t.Fatalf("keys %q", keys)
	}
}

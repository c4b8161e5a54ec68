package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ticketing/ticketing/client/wire"
)

// reencodeRequest writes a decoded request back with the generic header
// encoder; for any frame ParseRequest accepted it must give the same bytes.
func reencodeRequest(b []byte, r *wire.Request) []byte {
	b = wire.AppendRequestHeader(b, r.Op, r.KeyLen, r.Flags, r.ReqID, r.Arg)
	b = append(b, r.Key...)
	return append(b, r.Body...)
}

func reencodeResponse(b []byte, r *wire.Response) []byte {
	b = wire.AppendResponseHeader(b, r.Status, r.Code, r.Queued, r.ReqID, r.Value)
	return append(b, r.Payload...)
}

func TestRequestRoundTrip(t *testing.T) {
	long := strings.Repeat("k", 250)
	body := []byte(`{"cmd":"locks","prefix":"orders/","limit":10}`)
	bigBody := bytes.Repeat([]byte{'x'}, wire.MaxAdminBody)
	tests := []struct {
		name   string
		frame  []byte
		op     wire.Op
		reqID  uint32
		key    string
		arg    uint64
		body   []byte
		header string // expected first 16 bytes, hex
	}{
		{"acquire", wire.AppendAcquire(nil, 7, "a", 1, 0), wire.OpAcquire, 7, "a", 1 << 32, nil,
			"41010000000000070000000100000000"},
		{"acquire max values", wire.AppendAcquire(nil, math.MaxUint32, long, math.MaxUint32, math.MaxUint32), wire.OpAcquire, math.MaxUint32, long, math.MaxUint64, nil,
			"41fa0000ffffffffffffffffffffffff"},
		{"acquire req_id 0", wire.AppendAcquire(nil, 0, "k", 3600000, 900000), wire.OpAcquire, 0, "k", 3600000<<32 | 900000, nil,
			"41010000000000000036ee80000dbba0"},
		{"release", wire.AppendRelease(nil, 0x01020304, "orders/42", 0x0102030405060708), wire.OpRelease, 0x01020304, "orders/42", 0x0102030405060708, nil,
			"52090000010203040102030405060708"},
		{"release max token", wire.AppendRelease(nil, 1, "k", math.MaxUint64), wire.OpRelease, 1, "k", math.MaxUint64, nil,
			"5201000000000001ffffffffffffffff"},
		{"cancel", wire.AppendCancel(nil, 9, "k", 0xa0b0c0d0), wire.OpCancel, 9, "k", 0xa0b0c0d0 << 32, nil,
			"4301000000000009a0b0c0d000000000"},
		{"ping", wire.AppendPing(nil, 0xfffffffe), wire.OpPing, 0xfffffffe, "", 0, nil,
			"50000000fffffffe0000000000000000"},
		{"query", wire.AppendQuery(nil, 11, body), wire.OpQuery, 11, "", uint64(len(body)) << 32, body,
			"510000000000000b0000002d00000000"},
		{"query 1 byte", wire.AppendQuery(nil, 12, []byte("{")), wire.OpQuery, 12, "", 1 << 32, []byte("{"),
			"510000000000000c0000000100000000"},
		{"query 65536 bytes", wire.AppendQuery(nil, 13, bigBody), wire.OpQuery, 13, "", 65536 << 32, bigBody,
			"510000000000000d0001000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hexOf(tt.frame[:16]); got != tt.header {
				t.Fatalf("header %s, want %s", got, tt.header)
			}
			wantLen := 16 + len(tt.key) + len(tt.body)
			if len(tt.frame) != wantLen {
				t.Fatalf("frame length %d, want %d", len(tt.frame), wantLen)
			}
			req, n, err := wire.ParseRequest(tt.frame)
			if err != nil || n != wantLen {
				t.Fatalf("ParseRequest n %d err %v", n, err)
			}
			if req.Op != tt.op || req.ReqID != tt.reqID || string(req.Key) != tt.key || req.Arg != tt.arg ||
				!bytes.Equal(req.Body, tt.body) || req.Flags != 0 || int(req.KeyLen) != len(tt.key) {
				t.Fatalf("decoded %+v", req)
			}
			if got := reencodeRequest(nil, &req); !bytes.Equal(got, tt.frame) {
				t.Fatalf("re-encoded %x, want %x", got, tt.frame)
			}
			// Trailing bytes are left for the next frame.
			_, n2, err := wire.ParseRequest(append(append([]byte(nil), tt.frame...), 'P', 0))
			if err != nil || n2 != n {
				t.Fatalf("with trailing bytes: n %d err %v", n2, err)
			}
		})
	}
}

func TestRequestAccessors(t *testing.T) {
	r := wire.Request{Arg: 0x1122334455667788}
	if r.LeaseMS() != 0x11223344 || r.WaitMS() != 0x55667788 || r.Token() != 0x1122334455667788 ||
		r.Target() != 0x11223344 || r.BodyLen() != 0x11223344 || r.ArgLow() != 0x55667788 {
		t.Fatalf("accessors of %#x: lease %#x wait %#x token %#x target %#x body_len %#x low %#x",
			r.Arg, r.LeaseMS(), r.WaitMS(), r.Token(), r.Target(), r.BodyLen(), r.ArgLow())
	}
}

// TestParseRequestNonCanonical: the decoder frames requests the server must
// answer with an error (§2.1), so that it can send the E and go on.
func TestParseRequestNonCanonical(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		rest    string
		wantLen int
	}{
		{"acquire with flags", "41 01 0001 00000001 00000001 00000000", "k", 17},
		{"acquire with empty key", "41 00 0000 00000001 00000001 00000000", "", 16},
		{"ping with a key (read and discarded)", "50 03 0000 00000001 00000000 00000000", "abc", 19},
		{"ping with max key_len", "50 ff 0000 00000001 00000000 00000000", strings.Repeat("z", 255), 271},
		{"query with key_len (ignored for framing)", "51 05 0000 00000001 00000002 00000000", "{}", 18},
		{"query with nonzero bytes 12..16", "51 00 0000 00000001 00000002 ffffffff", "{}", 18},
		{"query with body_len 0", "51 00 0000 00000001 00000000 00000000", "", 16},
		{"release key_len 255", "52 ff 0000 00000001 00000000 00000001", strings.Repeat("r", 255), 271},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := append(mustHex(t, tt.header), tt.rest...)
			fl, err := wire.RequestFrameLen(frame)
			if err != nil || fl != tt.wantLen {
				t.Fatalf("RequestFrameLen = %d, %v; want %d", fl, err, tt.wantLen)
			}
			req, n, err := wire.ParseRequest(frame)
			if err != nil || n != tt.wantLen {
				t.Fatalf("ParseRequest n %d err %v", n, err)
			}
			if got := reencodeRequest(nil, &req); !bytes.Equal(got, frame) {
				t.Fatalf("re-encoded %x, want %x", got, frame)
			}
			// One byte short is incomplete, not an error.
			if _, n, err := wire.ParseRequest(frame[:len(frame)-1]); n != 0 || err != nil {
				t.Fatalf("short by one: n %d err %v", n, err)
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   error
	}{
		{"op 0x00", "00 00 0000 00000001 00000000 00000000", wire.ErrBadOp},
		{"op Z", "5a 00 0000 00000001 00000000 00000000", wire.ErrBadOp},
		{"op lower-case a", "61 01 0000 00000001 00000000 00000000", wire.ErrBadOp},
		{"op G (a status)", "47 00 0000 00000001 00000000 00000000", wire.ErrBadOp},
		{"op ff", "ff ff ffff ffffffff ffffffff ffffffff", wire.ErrBadOp},
		{"body_len 65537", "51 00 0000 00000001 00010001 00000000", wire.ErrBodyTooLarge},
		{"body_len 2^24", "51 00 0000 00000001 01000000 00000000", wire.ErrBodyTooLarge},
		{"body_len max", "51 00 0000 00000001 ffffffff 00000000", wire.ErrBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := mustHex(t, tt.header)
			// Before the whole header arrived there is no verdict yet (§2.1: BAD_OP is
			// sent after the 16-byte header).
			for i := 0; i < len(h); i++ {
				if _, n, err := wire.ParseRequest(h[:i]); n != 0 || err != nil {
					t.Fatalf("%d bytes: n %d err %v", i, n, err)
				}
			}
			_, n, err := wire.ParseRequest(h)
			if !errors.Is(err, tt.want) || n != 0 {
				t.Fatalf("ParseRequest n %d err %v, want %v", n, err, tt.want)
			}
			if _, err := wire.RequestFrameLen(h); !errors.Is(err, tt.want) {
				t.Fatalf("RequestFrameLen err %v, want %v", err, tt.want)
			}
			// The header still decodes, so the server can answer with its req_id.
			req, err := wire.ParseRequestHeader(h)
			if err != nil || req.ReqID != binary.BigEndian.Uint32(h[4:8]) {
				t.Fatalf("ParseRequestHeader %+v %v", req, err)
			}
		})
	}
	if _, err := wire.RequestFrameLen(make([]byte, 15)); !errors.Is(err, wire.ErrShortFrame) {
		t.Fatalf("RequestFrameLen(15 bytes) err %v", err)
	}
	if _, err := wire.ParseRequestHeader(make([]byte, 15)); !errors.Is(err, wire.ErrShortFrame) {
		t.Fatalf("ParseRequestHeader(15 bytes) err %v", err)
	}
	// body_len 65536 is allowed: it only needs more bytes.
	h := mustHex(t, "51 00 0000 00000001 00010000 00000000")
	if _, n, err := wire.ParseRequest(h); n != 0 || err != nil {
		t.Fatalf("body_len 65536 header alone: n %d err %v", n, err)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	maxAddr := strings.Repeat("a", 255)
	maxMsg := strings.Repeat("m", 1024)
	json := []byte(`{"locks":[],"total":0,"truncated":false}`)
	tests := []struct {
		name    string
		frame   []byte
		header  string
		payload string
	}{
		{"granted", wire.AppendGranted(nil, 1, 0x0102030405060708, 0), "47000000000000010102030405060708", ""},
		{"granted queued max", wire.AppendGranted(nil, math.MaxUint32, math.MaxUint64, 65535), "4700ffffffffffffffffffffffffffff", ""},
		{"granted queued 1", wire.AppendGranted(nil, 2, 1, 1), "47000001000000020000000000000001", ""},
		{"timeout", wire.AppendStatus(nil, wire.StatusTimeout, wire.CodeNone, 3), "54000000000000030000000000000000", ""},
		{"busy queue full", wire.AppendStatus(nil, wire.StatusBusy, wire.CodeQueueFull, 4), "42010000000000040000000000000000", ""},
		{"released", wire.AppendStatus(nil, wire.StatusReleased, wire.CodeNone, 5), "4f000000000000050000000000000000", ""},
		{"not holder", wire.AppendStatus(nil, wire.StatusNotHolder, wire.CodeNone, 6), "4e000000000000060000000000000000", ""},
		{"unknown", wire.AppendStatus(nil, wire.StatusUnknown, wire.CodeNoQuorum, 7), "55050000000000070000000000000000", ""},
		{"pong", wire.AppendPong(nil, 8, 1700000000123456), "500000000000000800060a2418202240", ""},
		{"moved", wire.AppendMoved(nil, 9, "[::1]:7001"), "4d00000000000009000000000000000a", "[::1]:7001"},
		{"moved empty", wire.AppendMoved(nil, 10, ""), "4d0000000000000a0000000000000000", ""},
		{"moved 255", wire.AppendMoved(nil, 11, maxAddr), "4d0000000000000b00000000000000ff", maxAddr},
		{"error", wire.AppendError(nil, 12, wire.CodeBadLease, "lease_ms 0"), "451600000000000c000000000000000a", "lease_ms 0"},
		{"error 1024", wire.AppendError(nil, 13, wire.CodeInternal, maxMsg), "451c00000000000d0000000000000400", maxMsg},
		{"error utf-8", wire.AppendError(nil, 14, wire.CodeBadKey, "clé ✗"), "451500000000000e0000000000000008", "clé ✗"},
		{"admin", wire.AppendAdmin(nil, 15, json), "4a0000000000000f0000000000000028", string(json)},
		{"admin empty", wire.AppendAdmin(nil, 16, nil), "4a000000000000100000000000000000", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hexOf(tt.frame[:16]); got != tt.header {
				t.Fatalf("header %s, want %s", got, tt.header)
			}
			if string(tt.frame[16:]) != tt.payload {
				t.Fatalf("payload %q, want %q", tt.frame[16:], tt.payload)
			}
			resp, n, err := wire.ParseResponse(tt.frame)
			if err != nil || n != len(tt.frame) {
				t.Fatalf("ParseResponse n %d err %v", n, err)
			}
			if string(resp.Payload) != tt.payload {
				t.Fatalf("decoded payload %q", resp.Payload)
			}
			if got := reencodeResponse(nil, &resp); !bytes.Equal(got, tt.frame) {
				t.Fatalf("re-encoded %x, want %x", got, tt.frame)
			}
		})
	}
}

// TestResponseValueIsNotALength: G, P and the others carry values that are not
// payload lengths; the decoder must not wait for or consume a payload.
func TestResponseValueIsNotALength(t *testing.T) {
	for _, st := range []wire.Status{'G', 'T', 'B', 'O', 'N', 'U', 'P'} {
		frame := wire.AppendResponseHeader(nil, st, 0, 0, 1, math.MaxUint64)
		resp, n, err := wire.ParseResponse(frame)
		if err != nil || n != 16 || resp.Value != math.MaxUint64 || resp.Payload != nil {
			t.Errorf("%c: n %d err %v %+v", st, n, err, resp)
		}
	}
}

func TestParseResponseErrors(t *testing.T) {
	tests := []struct {
		name  string
		st    wire.Status
		value uint64
		want  error // nil: an incomplete frame (n == 0)
	}{
		{"status 0", 0, 0, wire.ErrBadStatus},
		{"status K (a WELCOME status)", 'K', 0, wire.ErrBadStatus},
		{"status A (an op)", 'A', 0, wire.ErrBadStatus},
		{"status g", 'g', 0, wire.ErrBadStatus},
		{"status ff", 0xff, 0, wire.ErrBadStatus},
		{"M 255 needs payload", 'M', 255, nil},
		{"M 256", 'M', 256, wire.ErrPayloadTooLarge},
		{"E 1024 needs payload", 'E', 1024, nil},
		{"E 1025", 'E', 1025, wire.ErrPayloadTooLarge},
		{"J 16 MiB needs payload", 'J', 16 << 20, nil},
		{"J 16 MiB + 1", 'J', 16<<20 + 1, wire.ErrPayloadTooLarge},
		{"E 2^32", 'E', 1 << 32, wire.ErrPayloadTooLarge},
		{"J 2^63", 'J', 1 << 63, wire.ErrPayloadTooLarge},
		{"M max", 'M', math.MaxUint64, wire.ErrPayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := wire.AppendResponseHeader(nil, tt.st, 0, 0, 1, tt.value)
			for i := 0; i < len(h); i++ {
				if _, n, err := wire.ParseResponse(h[:i]); n != 0 || err != nil {
					t.Fatalf("%d bytes: n %d err %v", i, n, err)
				}
			}
			resp, n, err := wire.ParseResponse(h)
			if n != 0 || !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("n %d err %v, want %v", n, err, tt.want)
			}
			if err != nil && (resp.Payload != nil || resp.Status != 0) {
				t.Fatalf("error returned a response %+v", resp)
			}
		})
	}
}

func TestAppendErrorPayloadIsBoundedUTF8(t *testing.T) {
	a1023 := strings.Repeat("a", 1023)
	a1022 := strings.Repeat("a", 1022)
	tests := []struct {
		name, msg, want string
	}{
		{"empty", "", ""},
		{"ascii", "bad key", "bad key"},
		{"exactly 1024", strings.Repeat("x", 1024), strings.Repeat("x", 1024)},
		{"1025 ascii is cut", strings.Repeat("x", 1025), strings.Repeat("x", 1024)},
		{"cut before a 2-byte char", a1023 + "é", a1023},
		{"2-byte char fits exactly", a1022 + "é", a1022 + "é"},
		{"cut before a 4-byte char", a1022 + "🔒", a1022},
		{"invalid byte becomes U+FFFD", "key \xff\xfe", "key \uFFFD\uFFFD"},
		{"surrogate bytes become U+FFFD", "\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"U+FFFD that does not fit is dropped", a1022 + "\xff", a1022},
		{"real U+FFFD kept", "\uFFFD", "\uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := wire.AppendError([]byte("pre"), 1, wire.CodeBadKey, tt.msg)
			resp, n, err := wire.ParseResponse(frame[3:])
			if err != nil || n != len(frame)-3 {
				t.Fatalf("ParseResponse n %d err %v", n, err)
			}
			if string(resp.Payload) != tt.want {
				t.Fatalf("payload %q (len %d), want %q (len %d)", resp.Payload, len(resp.Payload), tt.want, len(tt.want))
			}
			if !utf8.Valid(resp.Payload) || len(resp.Payload) > wire.MaxErrorPayload {
				t.Fatalf("payload invalid or too long: %d bytes", len(resp.Payload))
			}
		})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		msg := randomKey(rng)
		msg = append(msg, randomKey(rng)...)
		for j := rng.IntN(8); j > 0; j-- {
			msg = append(msg, randomKey(rng)...)
		}
		frame := wire.AppendError(nil, 1, wire.CodeInternal, string(msg))
		resp, n, err := wire.ParseResponse(frame)
		if err != nil || n != len(frame) || !utf8.Valid(resp.Payload) || len(resp.Payload) > wire.MaxErrorPayload {
			t.Fatalf("message %x: n %d err %v payload valid %v len %d", msg, n, err, utf8.Valid(resp.Payload), len(resp.Payload))
		}
		if utf8.Valid(msg) && len(msg) <= wire.MaxErrorPayload && string(resp.Payload) != string(msg) {
			t.Fatalf("valid message changed: %q -> %q", msg, resp.Payload)
		}
	}
}

func TestAppendMovedTooLong(t *testing.T) {
	frame := wire.AppendMoved(nil, 1, strings.Repeat("h", 251)+":7001")
	resp, n, err := wire.ParseResponse(frame)
	if err != nil || n != 16 || len(resp.Payload) != 0 || resp.Value != 0 {
		t.Fatalf("256-byte address: n %d err %v payload %q; want an empty M", n, err, resp.Payload)
	}
}

// Streams: many frames back to back, fed one byte at a time and in random
// splits, as a connection's read loop sees them.

type streamFrame struct {
	name  string
	bytes []byte
}

func streamOf(t *testing.T, frames []streamFrame, copies int, rng *rand.Rand) ([]byte, []streamFrame) {
	var order []streamFrame
	for i := 0; i < copies; i++ {
		order = append(order, frames...)
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var stream []byte
	for _, f := range order {
		stream = append(stream, f.bytes...)
	}
	return stream, order
}

func requestFrames(t *testing.T) []streamFrame {
	var fs []streamFrame
	for _, name := range goldenFiles(t, "req_") {
		fs = append(fs, streamFrame{name, readGolden(t, name)})
	}
	fs = append(fs,
		streamFrame{"acquire 250", wire.AppendAcquire(nil, 99, strings.Repeat("q", 250), 5, 5)},
		streamFrame{"ping with key", append(wire.AppendRequestHeader(nil, wire.OpPing, 2, 0, 98, 0), "xy"...)},
		streamFrame{"query 4 KiB", wire.AppendQuery(nil, 97, bytes.Repeat([]byte(" "), 4096))},
		streamFrame{"query empty", wire.AppendRequestHeader(nil, wire.OpQuery, 0, 0, 96, 0)},
	)
	return fs
}

func responseFrames(t *testing.T) []streamFrame {
	var fs []streamFrame
	for _, name := range goldenFiles(t, "resp_") {
		fs = append(fs, streamFrame{name, readGolden(t, name)})
	}
	fs = append(fs,
		streamFrame{"admin 70 KiB", wire.AppendAdmin(nil, 99, bytes.Repeat([]byte("{}"), 35000))},
		streamFrame{"error 1024", wire.AppendError(nil, 98, wire.CodeInternal, strings.Repeat("e", 1024))},
	)
	return fs
}

// feed delivers stream in chunks of the sizes next() returns, parsing every
// complete frame as soon as it is buffered, and returns the frames' bytes.
func feed(t *testing.T, stream []byte, next func() int,
	parse func([]byte) (frame []byte, n int, err error)) [][]byte {
	t.Helper()
	var buf []byte
	var out [][]byte
	for len(stream) > 0 || len(buf) > 0 {
		if len(stream) == 0 {
			t.Fatalf("%d bytes left over that never formed a frame", len(buf))
		}
		c := min(next(), len(stream))
		buf = append(buf, stream[:c]...)
		stream = stream[c:]
		for {
			frame, n, err := parse(buf)
			if err != nil {
				t.Fatalf("parse error after %d frames: %v", len(out), err)
			}
			if n < 0 || n > len(buf) {
				t.Fatalf("n %d out of bounds (buffered %d)", n, len(buf))
			}
			if n == 0 {
				break
			}
			out = append(out, append([]byte(nil), frame...))
			buf = buf[n:]
		}
	}
	return out
}

func parseReq(b []byte) ([]byte, int, error) {
	req, n, err := wire.ParseRequest(b)
	if n == 0 {
		return nil, n, err
	}
	return reencodeRequest(nil, &req), n, err
}

func parseResp(b []byte) ([]byte, int, error) {
	resp, n, err := wire.ParseResponse(b)
	if n == 0 {
		return nil, n, err
	}
	return reencodeResponse(nil, &resp), n, err
}

func TestStreams(t *testing.T) {
	kinds := []struct {
		name   string
		frames func(*testing.T) []streamFrame
		parse  func([]byte) ([]byte, int, error)
	}{
		{"requests", requestFrames, parseReq},
		{"responses", responseFrames, parseResp},
	}
	for _, kind := range kinds {
		rng := rand.New(rand.NewPCG(5, 6))
		stream, order := streamOf(t, kind.frames(t), 5, rng)
		splits := []struct {
			name string
			next func() int
		}{
			{"one byte at a time", func() int { return 1 }},
			{"random small splits", func() int { return 1 + rng.IntN(40) }},
			{"random large splits", func() int { return 1 + rng.IntN(9000) }},
			{"all at once", func() int { return len(stream) }},
		}
		for _, sp := range splits {
			t.Run(kind.name+"/"+sp.name, func(t *testing.T) {
				got := feed(t, stream, sp.next, kind.parse)
				if len(got) != len(order) {
					t.Fatalf("%d frames, want %d", len(got), len(order))
				}
				for i, f := range order {
					if !bytes.Equal(got[i], f.bytes) {
						t.Fatalf("frame %d (%s): got %x, want %x", i, f.name, got[i], f.bytes)
					}
				}
			})
		}
	}
}

// TestStreamStopsAtBadFrame: a bad op or status in the middle of a stream is
// reported once its header is complete, after the good frames before it.
func TestStreamStopsAtBadFrame(t *testing.T) {
	good := wire.AppendPing(nil, 1)
	bad := mustHex(t, "78 00 0000 00000002 00000000 00000000")
	stream := append(append(append([]byte(nil), good...), good...), bad...)
	var frames int
	for buf, fed := []byte(nil), 0; ; {
		req, n, err := wire.ParseRequest(buf)
		if err != nil {
			if !errors.Is(err, wire.ErrBadOp) || fed != len(stream) || frames != 2 {
				t.Fatalf("err %v after %d frames and %d bytes", err, frames, fed)
			}
			break
		}
		if n > 0 {
			if req.Op != wire.OpPing {
				t.Fatalf("frame %+v", req)
			}
			frames++
			buf = buf[n:]
			continue
		}
		if fed == len(stream) {
			t.Fatal("stream ended without an error")
		}
		buf = append(buf, stream[fed])
		fed++
	}

	respStream := append(wire.AppendStatus(nil, wire.StatusTimeout, 0, 1), mustHex(t, "4b 00 0000 00000002 00000000 00000000")...)
	resp, n, err := wire.ParseResponse(respStream)
	if err != nil || n != 16 || resp.Status != wire.StatusTimeout {
		t.Fatalf("first: %+v n %d err %v", resp, n, err)
	}
	if _, _, err := wire.ParseResponse(respStream[n:]); !errors.Is(err, wire.ErrBadStatus) {
		t.Fatalf("second: err %v", err)
	}
}

// Decoded slices alias the input and are capped at the frame, so appending to
// one cannot overwrite the next frame in the buffer.
func TestDecodedSlicesAreCapped(t *testing.T) {
	buf := append(wire.AppendAcquire(nil, 1, "abc", 1, 1), wire.AppendPing(nil, 2)...)
	req, n, err := wire.ParseRequest(buf)
	if err != nil || n != 19 {
		t.Fatal(n, err)
	}
	if cap(req.Key) != 3 || &req.Key[0] != &buf[16] {
		t.Fatalf("key cap %d, aliases input %v", cap(req.Key), &req.Key[0] == &buf[16])
	}
	_ = append(req.Key, 'X')
	if buf[19] != 'P' {
		t.Fatal("append to Key overwrote the next frame")
	}
	rbuf := append(wire.AppendMoved(nil, 1, "h:1"), wire.AppendPong(nil, 2, 3)...)
	resp, _, _ := wire.ParseResponse(rbuf)
	if cap(resp.Payload) != 3 {
		t.Fatalf("payload cap %d", cap(resp.Payload))
	}
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := parseHexFile(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func TestResponseFrameLen(t *testing.T) {
	big := wire.AppendResponseHeader(nil, wire.StatusError, wire.CodeBadOp, 0, 1, wire.MaxErrorPayload+1)
	for _, tc := range []struct {
		name string
		b    []byte
		n    int
		err  error
	}{
		{"short", make([]byte, 15), 0, wire.ErrShortFrame},
		{"granted", wire.AppendGranted(nil, 1, 9, 0), 16, nil},
		{"error header only", wire.AppendError(nil, 1, wire.CodeBadOp, "abc")[:16], 19, nil},
		{"admin", wire.AppendAdmin(nil, 1, []byte(`{}`)), 18, nil},
		{"bad status", make([]byte, 16), 0, wire.ErrBadStatus},
		{"payload too large", big, 0, wire.ErrPayloadTooLarge},
	} {
		n, err := wire.ResponseFrameLen(tc.b)
		if n != tc.n || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: %d %v, want %d %v", tc.name, n, err, tc.n, tc.err)
		}
	}
}

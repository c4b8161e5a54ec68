package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ticketing/ticketing/client/wire"
)

// Fuzz targets. Seeds: real frames from the encoders plus every golden vector.
// Run one at a time, e.g.
//
//	go test ./client/wire -run '^$' -fuzz FuzzParseRequest -fuzztime 60s

// fuzzMaxFrames bounds the frames parsed per input. Without a bound, every
// extra frame in a stream reaches a new loop-count coverage bucket, so the
// engine keeps growing inputs and then spends most of its time minimizing
// them. Long streams are covered by TestStreams.
const fuzzMaxFrames = 4

func addGoldenSeeds(f *testing.F, prefixes ...string) {
	for _, p := range prefixes {
		for _, name := range goldenFiles(f, p) {
			f.Add(readGolden(f, name))
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	addGoldenSeeds(f, "req_")
	f.Add(wire.AppendAcquire(nil, 1, "orders/42", 30000, 5000))
	f.Add(wire.AppendRelease(wire.AppendAcquire(nil, 1, "k", 1, 0), 2, "k", 1<<40))
	f.Add(wire.AppendCancel(wire.AppendPing(nil, 3), 4, "k", 1))
	f.Add(wire.AppendQuery(nil, 5, []byte(`{"cmd":"locks","limit":5}`)))
	f.Add(wire.AppendRequestHeader(nil, wire.OpQuery, 0, 0, 6, 0x0001000100000000)) // body_len 65537
	f.Add(wire.AppendRequestHeader(nil, 'Z', 0, 0, 7, 0))                           // bad op
	f.Add(wire.AppendAcquireSet(nil, 10, []string{"acct/17", "acct/42"}, 30000, 5000))
	f.Add(wire.AppendReleaseSet(nil, 11, []string{"a", "b", "c"}, 1<<40))
	f.Add(wire.AppendLabel(nil, 12, "web-1/4242 go/1.1.0"))
	f.Add(wire.AppendRequestHeader(nil, wire.OpAcquireSet, 2, 0xffff, 13, 0)) // body_len 65535
	for _, name := range []string{"req_acquire_set.hex", "req_acquire_set_try.hex", "req_release_set.hex", "req_label.hex", "req_ping_features.hex"} {
		f.Add(readGolden11(f, name))
	}
	f.Add(append(wire.AppendRequestHeader(nil, wire.OpPing, 3, 1, 8, 9), "abc"...))
	f.Add([]byte("A"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rest := data
		for range fuzzMaxFrames {
			req, n, err := wire.ParseRequest(rest)
			if n < 0 || n > len(rest) {
				t.Fatalf("n %d out of [0, %d]", n, len(rest))
			}
			if len(rest) < wire.HeaderLen {
				if n != 0 || err != nil {
					t.Fatalf("%d bytes: n %d err %v, want need-more", len(rest), n, err)
				}
				return
			}
			// Reference framing, from §2 directly.
			op := rest[0]
			var frameLen int
			var wantErr error
			switch op {
			case 'A', 'R', 'C', 'P', 'L':
				frameLen = 16 + int(rest[1])
			case 'S', 'X':
				frameLen = 16 + int(binary.BigEndian.Uint16(rest[2:4]))
			case 'Q':
				bodyLen := binary.BigEndian.Uint32(rest[8:12])
				if bodyLen > 65536 {
					wantErr = wire.ErrBodyTooLarge
				}
				frameLen = 16 + int(bodyLen)
			default:
				wantErr = wire.ErrBadOp
			}
			if wantErr != nil {
				if n != 0 || !errors.Is(err, wantErr) {
					t.Fatalf("header %x: n %d err %v, want %v", rest[:16], n, err, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("header %x: unexpected error %v", rest[:16], err)
			}
			if len(rest) < frameLen {
				if n != 0 {
					t.Fatalf("incomplete frame (%d of %d bytes) gave n %d", len(rest), frameLen, n)
				}
				return
			}
			if n != frameLen {
				t.Fatalf("n %d, want %d", n, frameLen)
			}
			// One byte less is incomplete.
			if _, n2, err2 := wire.ParseRequest(rest[:n-1]); n2 != 0 || err2 != nil {
				t.Fatalf("frame minus one byte: n %d err %v", n2, err2)
			}
			frame := rest[:n]
			if got := reencodeRequest(nil, &req); !bytes.Equal(got, frame) {
				t.Fatalf("re-encoded %x, want %x", got, frame)
			}
			// A canonical frame is what the op's own encoder writes.
			if req.Flags == 0 {
				var enc []byte
				switch req.Op {
				case wire.OpAcquire:
					enc = wire.AppendAcquire(nil, req.ReqID, string(req.Key), req.LeaseMS(), req.WaitMS())
				case wire.OpRelease:
					enc = wire.AppendRelease(nil, req.ReqID, string(req.Key), req.Token())
				case wire.OpCancel:
					if req.ArgLow() == 0 {
						enc = wire.AppendCancel(nil, req.ReqID, string(req.Key), req.Target())
					}
				case wire.OpPing:
					if req.KeyLen == 0 && req.Arg == 0 {
						enc = wire.AppendPing(nil, req.ReqID)
					}
				case wire.OpQuery:
					if req.KeyLen == 0 && req.ArgLow() == 0 {
						enc = wire.AppendQuery(nil, req.ReqID, req.Body)
					}
				case wire.OpLabel:
					if req.Arg == 0 {
						enc = wire.AppendLabel(nil, req.ReqID, string(req.Key))
					}
				}
				if enc != nil && !bytes.Equal(enc, frame) {
					t.Fatalf("%c encoder wrote %x, frame %x", req.Op, enc, frame)
				}
			}
			if req.Op == wire.OpAcquireSet || req.Op == wire.OpReleaseSet {
				checkFuzzKeySet(t, &req, frame)
			}
			rest = rest[n:]
		}
	})
}

// checkFuzzKeySet: a body ParseKeySet accepts has count distinct valid keys
// that exactly fill it, and the op's encoder writes the same frame back.
func checkFuzzKeySet(t *testing.T, req *wire.Request, frame []byte) {
	var ks wire.KeySet
	code, _ := wire.ParseKeySet(&ks, req.SetCount(), req.Body)
	if code != wire.CodeNone {
		if ks.N != 0 {
			t.Fatalf("rejected set (%s) with N %d", code, ks.N)
		}
		return
	}
	if ks.N != int(req.SetCount()) || ks.N < 2 || ks.N > 16 {
		t.Fatalf("N %d count %d", ks.N, req.SetCount())
	}
	keys := make([]string, ks.N)
	seen := map[string]bool{}
	for i := range keys {
		keys[i] = string(ks.Keys[i])
		if !wire.ValidKey(ks.Keys[i]) || seen[keys[i]] {
			t.Fatalf("accepted bad or duplicate key %q", keys[i])
		}
		seen[keys[i]] = true
	}
	var enc []byte
	if req.Op == wire.OpAcquireSet {
		enc = wire.AppendAcquireSet(nil, req.ReqID, keys, req.LeaseMS(), req.WaitMS())
	} else {
		enc = wire.AppendReleaseSet(nil, req.ReqID, keys, req.Token())
	}
	if !bytes.Equal(enc, frame) {
		t.Fatalf("set encoder wrote %x, frame %x", enc, frame)
	}
}

func FuzzParseResponse(f *testing.F) {
	addGoldenSeeds(f, "resp_")
	f.Add(wire.AppendGranted(nil, 1, 1<<52, 3))
	f.Add(wire.AppendMoved(wire.AppendStatus(nil, wire.StatusBusy, wire.CodeQueueFull, 2), 3, "10.0.0.1:7001"))
	f.Add(wire.AppendError(wire.AppendPong(nil, 4, 5), 6, wire.CodeBadKey, "bad key"))
	f.Add(wire.AppendAdmin(nil, 7, []byte(`{"members":[]}`)))
	f.Add(wire.AppendResponseHeader(nil, wire.StatusMoved, 0, 0, 8, 256)) // over the limit
	f.Add(wire.AppendResponseHeader(nil, 'K', 0, 0, 9, 0))                // bad status
	f.Add([]byte("G"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rest := data
		for range fuzzMaxFrames {
			resp, n, err := wire.ParseResponse(rest)
			if n < 0 || n > len(rest) {
				t.Fatalf("n %d out of [0, %d]", n, len(rest))
			}
			if len(rest) < wire.HeaderLen {
				if n != 0 || err != nil {
					t.Fatalf("%d bytes: n %d err %v, want need-more", len(rest), n, err)
				}
				return
			}
			// Reference framing, from §3 directly.
			value := binary.BigEndian.Uint64(rest[8:16])
			frameLen := 16
			var wantErr error
			switch st := rest[0]; {
			case strings.IndexByte("GTBONUP", st) >= 0:
			case st == 'M' || st == 'E' || st == 'J':
				limit := map[byte]uint64{'M': 255, 'E': 1024, 'J': 16 << 20}[st]
				if value > limit {
					wantErr = wire.ErrPayloadTooLarge
				} else {
					frameLen += int(value)
				}
			default:
				wantErr = wire.ErrBadStatus
			}
			if wantErr != nil {
				if n != 0 || !errors.Is(err, wantErr) {
					t.Fatalf("header %x: n %d err %v, want %v", rest[:16], n, err, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("header %x: unexpected error %v", rest[:16], err)
			}
			if len(rest) < frameLen {
				if n != 0 {
					t.Fatalf("incomplete frame (%d of %d bytes) gave n %d", len(rest), frameLen, n)
				}
				return
			}
			if n != frameLen {
				t.Fatalf("n %d, want %d", n, frameLen)
			}
			if _, n2, err2 := wire.ParseResponse(rest[:n-1]); n2 != 0 || err2 != nil {
				t.Fatalf("frame minus one byte: n %d err %v", n2, err2)
			}
			frame := rest[:n]
			if got := reencodeResponse(nil, &resp); !bytes.Equal(got, frame) {
				t.Fatalf("re-encoded %x, want %x", got, frame)
			}
			// A canonical frame is what the status's own encoder writes.
			var enc []byte
			switch {
			case resp.Status == wire.StatusGranted && resp.Code == 0:
				enc = wire.AppendGranted(nil, resp.ReqID, resp.Value, resp.Queued)
			case resp.Queued != 0:
			case resp.Status == wire.StatusPong && resp.Code == 0:
				enc = wire.AppendPong(nil, resp.ReqID, resp.Value)
			case resp.Status == wire.StatusMoved && resp.Code == 0:
				enc = wire.AppendMoved(nil, resp.ReqID, string(resp.Payload))
			case resp.Status == wire.StatusAdmin && resp.Code == 0:
				enc = wire.AppendAdmin(nil, resp.ReqID, resp.Payload)
			case resp.Status == wire.StatusError && validUTF8(resp.Payload):
				enc = wire.AppendError(nil, resp.ReqID, resp.Code, string(resp.Payload))
			case strings.IndexByte("TBONU", byte(resp.Status)) >= 0 && resp.Value == 0:
				enc = wire.AppendStatus(nil, resp.Status, resp.Code, resp.ReqID)
			}
			if enc != nil && !bytes.Equal(enc, frame) {
				t.Fatalf("%c encoder wrote %x, frame %x", resp.Status, enc, frame)
			}
			rest = rest[n:]
		}
	})
}

func FuzzHandshake(f *testing.F) {
	addGoldenSeeds(f, "hello_", "auth_", "welcome_", "reject_")
	var n [32]byte
	f.Add(wire.AppendHello(nil, &wire.Hello{Flags: 1, Nonce: n}))
	f.Add(wire.AppendAuth(nil, &wire.Auth{Role: wire.RolePeer}))
	f.Add(wire.AppendWelcome(nil, &wire.Welcome{Status: 'K', MaxInflight: 1024}))
	f.Add(wire.AppendReject(nil, wire.CodeBadHandshake))
	f.Add([]byte("TKTC\x01\x04"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// HELLO, by §1.1 directly.
		h, err := wire.ParseHello(data)
		wantHello := len(data) >= 40 && string(data[:4]) == "TKTS" && data[4] == 1 && data[5]&^1 == 0 && data[6] == 0 && data[7] == 0
		if (err == nil) != wantHello {
			t.Fatalf("ParseHello(%x) err %v, reference accepts %v", data, err, wantHello)
		}
		if err == nil {
			if got := wire.AppendHello(nil, &h); !bytes.Equal(got, data[:40]) {
				t.Fatalf("HELLO re-encoded %x, want %x", got, data[:40])
			}
		}
		// AUTH, by §1.2.
		a, err := wire.ParseAuth(data)
		wantAuth := len(data) >= 72 && string(data[:4]) == "TKTC" && data[4] == 1 && data[5] >= 1 && data[5] <= 3 && data[6] == 0 && data[7] == 0
		if (err == nil) != wantAuth {
			t.Fatalf("ParseAuth(%x) err %v, reference accepts %v", data, err, wantAuth)
		}
		if err == nil {
			if got := wire.AppendAuth(nil, &a); !bytes.Equal(got, data[:72]) {
				t.Fatalf("AUTH re-encoded %x, want %x", got, data[:72])
			}
		}
		// WELCOME/REJECT, by §1.3.
		w, err := wire.ParseWelcome(data)
		wantWelcome := len(data) >= 40 && (data[0] == 'K' || data[0] == 'E') && data[2] == 0 && data[3] == 0
		if (err == nil) != wantWelcome {
			t.Fatalf("ParseWelcome(%x) err %v, reference accepts %v", data, err, wantWelcome)
		}
		if err == nil {
			if got := wire.AppendWelcome(nil, &w); !bytes.Equal(got, data[:40]) {
				t.Fatalf("WELCOME re-encoded %x, want %x", got, data[:40])
			}
			if w.Status == 'E' && w.MaxInflight == 0 && w.Proof == [32]byte{} {
				if got := wire.AppendReject(nil, w.Code); !bytes.Equal(got, data[:40]) {
					t.Fatalf("REJECT re-encoded %x, want %x", got, data[:40])
				}
			}
		}
	})
}

func FuzzValidKey(f *testing.F) {
	for _, name := range goldenFiles(f, "req_") {
		b := readGolden(f, name)
		f.Add(b[16:]) // the key (or body)
	}
	for _, k := range []string{
		"", "a", "orders/42", "clé/🔒", "\x00", "\x1f", "\x7f", "\xc2\x80", "\xc2\x9f", "\xc2\xa0",
		"\xed\xa0\x80", "\xc0\x80", "\xe0\x80\x80", "\xf0\x80\x80\x80", "\xf4\x90\x80\x80", "\xf4\x8f\xbf\xbf",
		strings.Repeat("k", 250), strings.Repeat("k", 251), strings.Repeat("é", 125) + "\xc3",
		"bench:000000\x7f042", "bench:00\x1f0000042", "bench:0000000\x0042", "bench:00000000é42", "bench:0000000\xc2\x85",
	} {
		f.Add([]byte(k))
	}
	f.Fuzz(func(t *testing.T, k []byte) {
		if got, want := wire.ValidKey(k), refValidKey(k); got != want {
			t.Fatalf("ValidKey(%x) = %v, reference %v", k, got, want)
		}
	})
}

// validUTF8 is the condition under which AppendError passes a message
// through unchanged.
func validUTF8(b []byte) bool { return len(b) <= wire.MaxErrorPayload && utf8.Valid(b) }

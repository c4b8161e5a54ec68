package wire_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
)

// Golden vectors of protocol 1.1 (docs/protocol.md §12.6), in their own
// directory so that the version 1 test of "every file in golden/" is unchanged.

const golden11Dir = "testdata/golden/v1_1"

func readGolden11(tb testing.TB, name string) []byte {
	tb.Helper()
	return readGolden(tb, filepath.Join("v1_1", name))
}

type golden11 struct {
	file   string
	decode func(t *testing.T, b []byte)
	encode func(b []byte) []byte
}

func expectReq(t *testing.T, b []byte) wire.Request {
	t.Helper()
	req, n, err := wire.ParseRequest(b)
	if err != nil || n != len(b) {
		t.Fatalf("ParseRequest: n %d err %v, want n %d", n, err, len(b))
	}
	if fl, err := wire.RequestFrameLen(b); err != nil || fl != len(b) {
		t.Fatalf("RequestFrameLen = %d, %v; want %d", fl, err, len(b))
	}
	return req
}

func expectResp(t *testing.T, b []byte) wire.Response {
	t.Helper()
	resp, n, err := wire.ParseResponse(b)
	if err != nil || n != len(b) {
		t.Fatalf("ParseResponse: n %d err %v, want n %d", n, err, len(b))
	}
	return resp
}

func checkSet(t *testing.T, req wire.Request, want []string) {
	t.Helper()
	if int(req.SetCount()) != len(want) || int(req.SetBodyLen()) != wire.SetBodyLen(want) || len(req.Key) != 0 {
		t.Fatalf("count %d body_len %d key %q, want %d %d none", req.SetCount(), req.SetBodyLen(), req.Key, len(want), wire.SetBodyLen(want))
	}
	var ks wire.KeySet
	if c, msg := wire.ParseKeySet(&ks, req.SetCount(), req.Body); c != wire.CodeNone {
		t.Fatalf("ParseKeySet: %s %s", c, msg)
	}
	if ks.N != len(want) {
		t.Fatalf("N %d, want %d", ks.N, len(want))
	}
	for i, k := range want {
		if string(ks.Keys[i]) != k {
			t.Fatalf("key %d %q, want %q", i, ks.Keys[i], k)
		}
	}
}

var setKeys = []string{"acct/17", "acct/42"}
var setTryKeys = []string{"jobs", "tables", "queue1"}

var golden11Vectors = []golden11{
	{"req_ping_features.hex", func(t *testing.T, b []byte) {
		r := expectReq(t, b)
		if r.Op != wire.OpPing || r.ReqID != 9 || r.Arg != wire.PingArgFeatures || r.KeyLen != 0 {
			t.Fatalf("got %+v", r)
		}
	}, func(b []byte) []byte { return wire.AppendPingFeatures(b, 9) }},
	{"resp_pong_features.hex", func(t *testing.T, b []byte) {
		r := expectResp(t, b)
		if r.Status != wire.StatusPong || r.ReqID != 9 || r.Value != 1700000000123456 ||
			r.Features() != wire.FeatureKeySets|wire.FeatureLabels|wire.FeatureTLSHint {
			t.Fatalf("got %+v", r)
		}
		if !r.Features().Has(wire.FeatureKeySets) || !r.Features().Has(wire.FeatureLabels) {
			t.Fatal("Has")
		}
	}, func(b []byte) []byte { return wire.AppendPongFeatures(b, 9, wire.ServerFeatures, 1700000000123456) }},
	{"req_acquire_set.hex", func(t *testing.T, b []byte) {
		r := expectReq(t, b)
		if r.Op != wire.OpAcquireSet || r.ReqID != 0x0a || r.LeaseMS() != 30000 || r.WaitMS() != 5000 {
			t.Fatalf("got %+v", r)
		}
		checkSet(t, r, setKeys)
	}, func(b []byte) []byte { return wire.AppendAcquireSet(b, 0x0a, setKeys, 30000, 5000) }},
	{"req_acquire_set_try.hex", func(t *testing.T, b []byte) {
		r := expectReq(t, b)
		if r.Op != wire.OpAcquireSet || r.ReqID != 0x10 || r.LeaseMS() != 10000 || r.WaitMS() != 0 {
			t.Fatalf("got %+v", r)
		}
		checkSet(t, r, setTryKeys)
	}, func(b []byte) []byte { return wire.AppendAcquireSet(b, 0x10, setTryKeys, 10000, 0) }},
	{"req_release_set.hex", func(t *testing.T, b []byte) {
		r := expectReq(t, b)
		if r.Op != wire.OpReleaseSet || r.ReqID != 0x0b || r.Token() != firstToken+9 {
			t.Fatalf("got %+v", r)
		}
		checkSet(t, r, setKeys)
	}, func(b []byte) []byte { return wire.AppendReleaseSet(b, 0x0b, setKeys, firstToken+9) }},
	{"req_cancel_set.hex", func(t *testing.T, b []byte) {
		r := expectReq(t, b)
		if r.Op != wire.OpCancel || r.ReqID != 0x0c || r.Target() != 0x0a || string(r.Key) != "acct/17" {
			t.Fatalf("got %+v", r)
		}
	}, func(b []byte) []byte { return wire.AppendCancel(b, 0x0c, "acct/17", 0x0a) }},
	{"req_label.hex", func(t *testing.T, b []byte) {
		r := expectReq(t, b)
		if r.Op != wire.OpLabel || r.ReqID != 0x0d || r.Flags != 0 || r.Arg != 0 || string(r.Key) != "web-1/4242 go/1.1.0" {
			t.Fatalf("got %+v", r)
		}
		if !wire.ValidLabel(r.Key) {
			t.Fatal("golden label not valid")
		}
	}, func(b []byte) []byte { return wire.AppendLabel(b, 0x0d, "web-1/4242 go/1.1.0") }},
	{"resp_label_ok.hex", func(t *testing.T, b []byte) {
		r := expectResp(t, b)
		if r.Status != wire.StatusReleased || r.ReqID != 0x0d || r.Value != 0 || r.Code != 0 {
			t.Fatalf("got %+v", r)
		}
	}, func(b []byte) []byte { return wire.AppendStatus(b, wire.StatusReleased, wire.CodeNone, 0x0d) }},
	{"resp_error_bad_keyset.hex", func(t *testing.T, b []byte) {
		r := expectResp(t, b)
		if r.Status != wire.StatusError || r.Code != wire.CodeBadKeySet || r.ReqID != 0x0a || string(r.Payload) != wire.MsgSetDuplicate {
			t.Fatalf("got %+v", r)
		}
	}, func(b []byte) []byte { return wire.AppendError(b, 0x0a, wire.CodeBadKeySet, wire.MsgSetDuplicate) }},
	{"resp_error_bad_label.hex", func(t *testing.T, b []byte) {
		r := expectResp(t, b)
		if r.Status != wire.StatusError || r.Code != wire.CodeBadLabel || r.ReqID != 0x0d || len(r.Payload) != 0 {
			t.Fatalf("got %+v", r)
		}
	}, func(b []byte) []byte { return wire.AppendError(b, 0x0d, wire.CodeBadLabel, "") }},
	{"reject_tls_required.hex", func(t *testing.T, b []byte) {
		w, err := wire.ParseWelcome(b)
		if err != nil || w.Accepted() || w.Code != wire.CodeTLSRequired || w.MaxInflight != 0 {
			t.Fatalf("got %+v %v", w, err)
		}
	}, func(b []byte) []byte { return wire.AppendReject(b, wire.CodeTLSRequired) }},
}

func TestGolden11FilesMatchTable(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(golden11Dir, "*.hex"))
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, v := range golden11Vectors {
		in[v.file] = true
	}
	if len(paths) != len(in) {
		t.Errorf("%d files on disk, %d in the table", len(paths), len(in))
	}
	for _, p := range paths {
		if !in[filepath.Base(p)] {
			t.Errorf("%s has no entry in golden11Vectors", p)
		}
	}
}

func TestGolden11(t *testing.T) {
	for _, v := range golden11Vectors {
		t.Run(v.file, func(t *testing.T) {
			want := readGolden11(t, v.file)
			v.decode(t, want)
			if got := v.encode(nil); !bytes.Equal(got, want) {
				t.Fatalf("encode:\n got %x\nwant %x", got, want)
			}
			prefix := []byte("prefix")
			if got := v.encode(append([]byte(nil), prefix...)); !bytes.Equal(got[len(prefix):], want) {
				t.Fatalf("encode after a prefix: %x", got)
			}
		})
	}
}

// A stream of every 1.1 request vector mixed with version 1 ones decodes frame
// by frame when fed one byte at a time.
func TestGolden11Stream(t *testing.T) {
	var stream []byte
	var want int
	for _, v := range golden11Vectors {
		if strings.HasPrefix(v.file, "req_") {
			stream = append(stream, readGolden11(t, v.file)...)
			stream = append(stream, readGolden(t, "req_acquire.hex")...)
			want += 2
		}
	}
	var buf []byte
	got := 0
	for _, c := range stream {
		buf = append(buf, c)
		_, n, err := wire.ParseRequest(buf)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			buf = buf[n:]
			got++
		}
	}
	if got != want || len(buf) != 0 {
		t.Fatalf("%d frames (%d bytes left), want %d", got, len(buf), want)
	}
}

func TestParseKeySetChecks(t *testing.T) {
	body := func(keys ...string) []byte {
		b := wire.AppendAcquireSet(nil, 1, keys, 1, 0)
		return b[wire.HeaderLen:]
	}
	long := strings.Repeat("k", 250)
	sixteen := make([]string, 16)
	for i := range sixteen {
		sixteen[i] = long[:249] + string(rune('a'+i))
	}
	cases := []struct {
		name  string
		count uint8
		body  []byte
		want  wire.Code
		msg   string
	}{
		{"two", 2, body("a", "b"), wire.CodeNone, ""},
		{"sixteen of 250 bytes", 16, body(sixteen...), wire.CodeNone, ""},
		{"body_len above 4016", 16, append(body(sixteen...), 'x'), wire.CodeBadKeySet, wire.MsgSetBodyTooLong},
		{"count 1", 1, body("a"), wire.CodeBadKeySet, wire.MsgSetShape},
		{"count 0", 0, nil, wire.CodeBadKeySet, wire.MsgSetShape},
		{"count 17", 17, body("a", "b"), wire.CodeBadKeySet, wire.MsgSetShape},
		{"count above entries", 3, body("a", "b"), wire.CodeBadKeySet, wire.MsgSetShape},
		{"byte left over", 2, append(body("a", "b"), 'c'), wire.CodeBadKeySet, wire.MsgSetShape},
		{"key_len 0", 2, []byte{0, 1, 'a'}, wire.CodeBadKeySet, wire.MsgSetShape},
		{"key_len 251", 2, append([]byte{251}, []byte(long+"x")...), wire.CodeBadKeySet, wire.MsgSetShape},
		{"key_len past the end", 2, []byte{1, 'a', 5, 'b'}, wire.CodeBadKeySet, wire.MsgSetShape},
		{"control character", 2, body("a", "b\x01"), wire.CodeBadKey, wire.MsgSetBadKey},
		{"invalid UTF-8", 2, body("\xff", "b"), wire.CodeBadKey, wire.MsgSetBadKey},
		{"duplicate", 3, body("a", "b", "a"), wire.CodeBadKeySet, wire.MsgSetDuplicate},
		{"bad key before duplicate", 3, body("a", "a", "\x00"), wire.CodeBadKey, wire.MsgSetBadKey},
		{"prefix is not a duplicate", 2, body("ab", "a"), wire.CodeNone, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ks wire.KeySet
			code, msg := wire.ParseKeySet(&ks, c.count, c.body)
			if code != c.want || msg != c.msg {
				t.Fatalf("got %s %q, want %s %q", code, msg, c.want, c.msg)
			}
			if (code == wire.CodeNone) != (ks.N == int(c.count) && ks.N > 0) {
				t.Fatalf("N %d", ks.N)
			}
		})
	}
}

func TestValidLabelAndCut(t *testing.T) {
	for _, c := range []struct {
		l  string
		ok bool
	}{
		{"", true}, {"web-1/4242 go/1.1.0", true}, {strings.Repeat("x", 64), true},
		{strings.Repeat("x", 65), false}, {"a\tb", false}, {"\xc2\x85", false}, {"\xff", false}, {"é", true},
	} {
		if got := wire.ValidLabel([]byte(c.l)); got != c.ok {
			t.Errorf("ValidLabel(%q) = %v", c.l, got)
		}
	}
	s := strings.Repeat("a", 63) + "é" // 65 bytes: the é does not fit
	if got := wire.CutLabel(s); got != strings.Repeat("a", 63) {
		t.Errorf("CutLabel = %q", got)
	}
	if got := wire.CutLabel(strings.Repeat("a", 70)); len(got) != 64 {
		t.Errorf("CutLabel len %d", len(got))
	}
	if got := wire.CutLabel("short"); got != "short" {
		t.Errorf("CutLabel = %q", got)
	}
}

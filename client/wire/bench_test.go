package wire_test

import (
	"strings"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
)

// The hot path must not allocate (docs/architecture: 0 allocs/op for
// acquire+release). TestZeroAllocs enforces it in every test run; the
// benchmarks report it.

var (
	benchKey     = "orders/42"
	benchAcquire = wire.AppendAcquire(nil, 1, benchKey, 30000, 5000)
	benchGranted = wire.AppendGranted(nil, 1, 1<<52, 3)
	benchError   = wire.AppendError(nil, 1, wire.CodeBadKey, "key is not valid UTF-8")
	benchStream  = func() []byte {
		var b []byte
		for i := uint32(0); i < 64; i++ {
			b = wire.AppendAcquire(b, i, benchKey, 30000, 5000)
			b = wire.AppendRelease(b, i, benchKey, 1<<52+uint64(i))
			b = wire.AppendPing(b, i)
		}
		return b
	}()
	sinkReq  wire.Request
	sinkResp wire.Response
	sinkBool bool

	benchSet      = []string{"acct/17", "acct/42", "acct/99"}
	benchSetFrame = wire.AppendAcquireSet(nil, 1, benchSet, 30000, 5000)
	benchKS       wire.KeySet
	sinkCode      wire.Code
)

func parseStream(b []byte) int {
	frames := 0
	for len(b) > 0 {
		req, n, err := wire.ParseRequest(b)
		if err != nil || n == 0 {
			panic("bad bench stream")
		}
		sinkReq = req
		b = b[n:]
		frames++
	}
	return frames
}

func TestZeroAllocs(t *testing.T) {
	buf := make([]byte, 0, 4096)
	var n1, n2 [wire.NonceLen]byte
	badLongMsg := "\xff" + strings.Repeat("é", 600)
	cases := []struct {
		name string
		fn   func()
	}{
		{"ParseRequest", func() { sinkReq, _, _ = wire.ParseRequest(benchAcquire) }},
		{"ParseRequest stream", func() { parseStream(benchStream) }},
		{"ParseResponse", func() { sinkResp, _, _ = wire.ParseResponse(benchGranted) }},
		{"ParseResponse with payload", func() { sinkResp, _, _ = wire.ParseResponse(benchError) }},
		{"AppendAcquire", func() { buf = wire.AppendAcquire(buf[:0], 1, benchKey, 30000, 5000) }},
		{"AppendRelease", func() { buf = wire.AppendRelease(buf[:0], 1, benchKey, 1<<52) }},
		{"AppendCancel", func() { buf = wire.AppendCancel(buf[:0], 2, benchKey, 1) }},
		{"AppendPing", func() { buf = wire.AppendPing(buf[:0], 1) }},
		{"AppendGranted", func() { buf = wire.AppendGranted(buf[:0], 1, 1<<52, 3) }},
		{"AppendStatus", func() { buf = wire.AppendStatus(buf[:0], wire.StatusBusy, wire.CodeQueueFull, 1) }},
		{"AppendPong", func() { buf = wire.AppendPong(buf[:0], 1, 1700000000123456) }},
		{"AppendMoved", func() { buf = wire.AppendMoved(buf[:0], 1, "10.0.0.2:7001") }},
		{"AppendError", func() { buf = wire.AppendError(buf[:0], 1, wire.CodeBadKey, "bad key") }},
		{"AppendError invalid UTF-8, too long", func() {
			buf = wire.AppendError(buf[:0], 1, wire.CodeBadKey, badLongMsg)
		}},
		{"AppendHello", func() { buf = wire.AppendHello(buf[:0], &wire.Hello{Flags: 1, Nonce: n1}) }},
		{"AppendAuth", func() { buf = wire.AppendAuth(buf[:0], &wire.Auth{Role: 1, Nonce: n2}) }},
		{"ParseHello", func() { _, _ = wire.ParseHello(readGoldenCached("hello_flags1.hex")) }},
		{"ParseAuth", func() { _, _ = wire.ParseAuth(readGoldenCached("auth_client.hex")) }},
		{"ParseWelcome", func() { _, _ = wire.ParseWelcome(readGoldenCached("welcome_client.hex")) }},
		{"ValidKey", func() { sinkBool = wire.ValidKey(benchAcquire[16:]) }},
		{"ValidKey UTF-8", func() { sinkBool = wire.ValidKey([]byte("clé/🔒")) }},
		{"Code.String", func() { _ = wire.CodeDuplicateReqID.String() }},
		{"AppendAcquireSet", func() { buf = wire.AppendAcquireSet(buf[:0], 1, benchSet, 30000, 5000) }},
		{"AppendReleaseSet", func() { buf = wire.AppendReleaseSet(buf[:0], 1, benchSet, 1<<52) }},
		{"AppendLabel", func() { buf = wire.AppendLabel(buf[:0], 1, "web-1/4242 go/1.1.0") }},
		{"ParseKeySet", func() { sinkCode, _ = wire.ParseKeySet(&benchKS, 3, benchSetFrame[wire.HeaderLen:]) }},
		{"ValidLabel", func() { sinkBool = wire.ValidLabel([]byte("web-1/4242 go/1.1.0")) }},
	}
	goldenCache = map[string][]byte{}
	for _, name := range []string{"hello_flags1.hex", "auth_client.hex", "welcome_client.hex"} {
		goldenCache[name] = readGolden(t, name)
	}
	for _, c := range cases {
		if a := testing.AllocsPerRun(100, c.fn); a != 0 {
			t.Errorf("%s: %v allocs/op, want 0", c.name, a)
		}
	}
}

var goldenCache map[string][]byte

func readGoldenCached(name string) []byte { return goldenCache[name] }

func BenchmarkParseRequest(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchAcquire)))
	for b.Loop() {
		sinkReq, _, _ = wire.ParseRequest(benchAcquire)
	}
}

func BenchmarkParseRequestStream(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchStream)))
	for b.Loop() {
		parseStream(benchStream)
	}
}

func BenchmarkParseResponse(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchGranted)))
	for b.Loop() {
		sinkResp, _, _ = wire.ParseResponse(benchGranted)
	}
}

func BenchmarkAppendAcquire(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 512)
	for b.Loop() {
		buf = wire.AppendAcquire(buf[:0], 1, benchKey, 30000, 5000)
	}
}

func BenchmarkAppendRelease(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 512)
	for b.Loop() {
		buf = wire.AppendRelease(buf[:0], 1, benchKey, 1<<52)
	}
}

func BenchmarkAppendGranted(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 512)
	for b.Loop() {
		buf = wire.AppendGranted(buf[:0], 1, 1<<52, 3)
	}
}

func BenchmarkAppendError(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 2048)
	for b.Loop() {
		buf = wire.AppendError(buf[:0], 1, wire.CodeBadKey, "key is not valid UTF-8")
	}
}

func BenchmarkValidKey(b *testing.B) {
	b.ReportAllocs()
	key := []byte("tenants/acme/orders/2024-06-01/é/🔒")
	b.SetBytes(int64(len(key)))
	for b.Loop() {
		sinkBool = wire.ValidKey(key)
	}
}

package wire_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ticketing/ticketing/client/wire"
)

// refValidKey is the reference for ValidKey, written from §2.1 check 5 with
// the standard library: 1..250 bytes, utf8.Valid, no rune in U+0000–U+001F
// or U+007F–U+009F.
func refValidKey(k []byte) bool {
	if len(k) < 1 || len(k) > 250 || !utf8.Valid(k) {
		return false
	}
	for _, r := range string(k) {
		if r <= 0x1f || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

func TestValidKeyTable(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{"empty", "", false},
		{"1 byte", "a", true},
		{"250 bytes", strings.Repeat("k", 250), true},
		{"251 bytes", strings.Repeat("k", 251), false},
		{"250 bytes of 2-byte chars", strings.Repeat("é", 125), true},
		{"252 bytes of 2-byte chars", strings.Repeat("é", 126), false},
		{"248 + 2-byte char = 250", strings.Repeat("k", 248) + "é", true},
		{"249 + 2-byte char = 251", strings.Repeat("k", 249) + "é", false},
		{"space", " ", true},
		{"tilde U+007E", "~", true},
		{"path", "orders/42", true},
		{"NUL", "a\x00b", false},
		{"TAB", "a\tb", false},
		{"LF", "a\n", false},
		{"U+001F", "\x1f", false},
		{"DEL U+007F", "a\x7f", false},
		{"U+0080 (C2 80)", "\xc2\x80", false},
		{"U+0085 NEL", "\u0085", false},
		{"U+009F (C2 9F)", "\xc2\x9f", false},
		{"U+00A0 (C2 A0)", "\xc2\xa0", true},
		{"2-byte é", "\xc3\xa9", true},
		{"2-byte U+07FF", "\xdf\xbf", true},
		{"3-byte U+0800", "\xe0\xa0\x80", true},
		{"3-byte € U+20AC", "€", true},
		{"3-byte U+D7FF", "\xed\x9f\xbf", true},
		{"3-byte U+E000", "\xee\x80\x80", true},
		{"3-byte U+FFFD", "\uFFFD", true},
		{"3-byte U+FFFF", "\xef\xbf\xbf", true},
		{"4-byte U+10000", "\xf0\x90\x80\x80", true},
		{"4-byte 🔒", "🔒", true},
		{"4-byte U+10FFFF", "\xf4\x8f\xbf\xbf", true},
		{"surrogate U+D800 (ED A0 80)", "\xed\xa0\x80", false},
		{"surrogate U+DFFF (ED BF BF)", "\xed\xbf\xbf", false},
		{"surrogate pair", "\xed\xa0\xbd\xed\xb2\xa9", false},
		{"overlong NUL C0 80", "\xc0\x80", false},
		{"overlong C1 BF", "\xc1\xbf", false},
		{"overlong E0 80 80", "\xe0\x80\x80", false},
		{"overlong E0 9F BF", "\xe0\x9f\xbf", false},
		{"overlong F0 80 80 80", "\xf0\x80\x80\x80", false},
		{"overlong F0 8F BF BF", "\xf0\x8f\xbf\xbf", false},
		{"above U+10FFFF F4 90 80 80", "\xf4\x90\x80\x80", false},
		{"F5 lead", "\xf5\x80\x80\x80", false},
		{"FF", "\xff", false},
		{"lone continuation", "\x80", false},
		{"truncated 2-byte", "a\xc3", false},
		{"truncated 3-byte", "\xe2\x82", false},
		{"truncated 4-byte", "\xf0\x9f\x94", false},
		{"bad continuation", "\xc3\x28", false},
		{"valid then control", "é\x01", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wire.ValidKey([]byte(tt.key)); got != tt.want {
				t.Errorf("ValidKey(%q) = %v, want %v", tt.key, got, tt.want)
			}
			if ref := refValidKey([]byte(tt.key)); ref != tt.want {
				t.Errorf("reference disagrees with the table for %q", tt.key)
			}
		})
	}
}

// TestValidKeyControlRanges checks every code point of both control ranges and
// their neighbours, alone and inside a key.
func TestValidKeyControlRanges(t *testing.T) {
	for r := rune(0); r <= 0xff; r++ {
		want := !(r <= 0x1f || (r >= 0x7f && r <= 0x9f))
		for _, k := range []string{string(r), "a" + string(r), string(r) + "z", "é" + string(r) + "€"} {
			if got := wire.ValidKey([]byte(k)); got != want {
				t.Errorf("ValidKey(%q) (U+%04X) = %v, want %v", k, r, got, want)
			}
		}
	}
}

// TestValidKeyExhaustiveShort compares ValidKey with the reference on every
// 1- and 2-byte input and on every 3-byte input with a lead byte ≥ 0xC0.
func TestValidKeyExhaustiveShort(t *testing.T) {
	var b [3]byte
	for i := 0; i < 256; i++ {
		b[0] = byte(i)
		if wire.ValidKey(b[:1]) != refValidKey(b[:1]) {
			t.Fatalf("disagree on %x", b[:1])
		}
		for j := 0; j < 256; j++ {
			b[1] = byte(j)
			if wire.ValidKey(b[:2]) != refValidKey(b[:2]) {
				t.Fatalf("disagree on %x", b[:2])
			}
			if i < 0xc0 {
				continue
			}
			for k := 0; k < 256; k++ {
				b[2] = byte(k)
				if wire.ValidKey(b[:3]) != refValidKey(b[:3]) {
					t.Fatalf("disagree on %x", b[:3])
				}
			}
		}
	}
}

// TestValidKeyFourByteLeads compares all 4-byte inputs with a lead F0..F7 and
// continuation bytes from a set of boundary values.
func TestValidKeyFourByteLeads(t *testing.T) {
	conts := []byte{0x00, 0x3f, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xff}
	for lead := 0xf0; lead <= 0xf7; lead++ {
		for _, c1 := range conts {
			for _, c2 := range conts {
				for _, c3 := range conts {
					k := []byte{byte(lead), c1, c2, c3}
					if wire.ValidKey(k) != refValidKey(k) {
						t.Fatalf("disagree on %x", k)
					}
				}
			}
		}
	}
}

// interestingBytes drives the random key generator towards the edges of UTF-8.
var interestingBytes = []byte{
	0x00, 0x01, 0x1f, 0x20, 0x41, 0x7e, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf,
	0xc0, 0xc1, 0xc2, 0xc3, 0xdf, 0xe0, 0xe2, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf3, 0xf4, 0xf5, 0xf8, 0xff,
}

func randomKey(rng *rand.Rand) []byte {
	n := rng.IntN(260)
	if rng.IntN(4) == 0 {
		n = 245 + rng.IntN(10) // around the length limit
	}
	k := make([]byte, 0, n+4)
	for len(k) < n {
		switch rng.IntN(4) {
		case 0:
			k = append(k, interestingBytes[rng.IntN(len(interestingBytes))])
		case 1:
			k = append(k, byte(rng.UintN(256)))
		case 2:
			k = append(k, byte(0x20+rng.IntN(0x5f)))
		default:
			k = utf8.AppendRune(k, rune(rng.IntN(0x110000)))
		}
	}
	return k
}

func TestValidKeyRandomAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	valid := 0
	for i := 0; i < 200000; i++ {
		k := randomKey(rng)
		got, want := wire.ValidKey(k), refValidKey(k)
		if got != want {
			t.Fatalf("ValidKey(%x) = %v, reference %v", k, got, want)
		}
		if want {
			valid++
		}
	}
	if valid == 0 {
		t.Fatal("random generator produced no valid key; the test is not testing")
	}
}

func TestCodeString(t *testing.T) {
	tests := []struct {
		code wire.Code
		want string
	}{
		{0, "NONE"}, {1, "QUEUE_FULL"}, {2, "OVERLOADED"}, {3, "CLOCK_UNHEALTHY"},
		{4, "SHUTTING_DOWN"}, {5, "NO_QUORUM"}, {10, "BAD_HANDSHAKE"}, {11, "AUTH_FAILED"},
		{20, "BAD_OP"}, {21, "BAD_KEY"}, {22, "BAD_LEASE"}, {23, "BAD_WAIT"}, {24, "BAD_FLAGS"},
		{25, "DUPLICATE_REQ_ID"}, {26, "BAD_ADMIN"}, {27, "NOT_PERMITTED"}, {28, "INTERNAL"},
		{12, "TLS_REQUIRED"}, {29, "BAD_KEYSET"}, {30, "BAD_LABEL"},
		{6, "RECOVERING"}, {7, "CODE_7"}, {9, "CODE_9"}, {13, "CODE_13"}, {19, "CODE_19"}, {31, "CODE_31"},
		{100, "CODE_100"}, {255, "CODE_255"},
	}
	for _, tt := range tests {
		if got := tt.code.String(); got != tt.want {
			t.Errorf("Code(%d).String() = %q, want %q", tt.code, got, tt.want)
		}
	}
	// The named constants carry the numbers of §4.
	consts := map[wire.Code]uint8{
		wire.CodeNone: 0, wire.CodeQueueFull: 1, wire.CodeOverloaded: 2, wire.CodeClockUnhealthy: 3,
		wire.CodeShuttingDown: 4, wire.CodeNoQuorum: 5, wire.CodeBadHandshake: 10, wire.CodeAuthFailed: 11,
		wire.CodeBadOp: 20, wire.CodeBadKey: 21, wire.CodeBadLease: 22, wire.CodeBadWait: 23,
		wire.CodeBadFlags: 24, wire.CodeDuplicateReqID: 25, wire.CodeBadAdmin: 26,
		wire.CodeNotPermitted: 27, wire.CodeInternal: 28,
		wire.CodeTLSRequired: 12, wire.CodeBadKeySet: 29, wire.CodeBadLabel: 30,
		wire.CodeRecovering: 6,
	}
	if len(consts) != 21 {
		t.Fatalf("code constants collide: %d distinct", len(consts))
	}
	for c, n := range consts {
		if uint8(c) != n {
			t.Errorf("%s = %d, want %d", c, uint8(c), n)
		}
	}
}

func TestQueuedUnits(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want uint16
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Millisecond, 0},
		{15 * time.Millisecond, 0},
		{16*time.Millisecond - 1, 0},
		{16 * time.Millisecond, 1},
		{31 * time.Millisecond, 1},
		{32 * time.Millisecond, 2},
		{10 * time.Second, 625},
		{65534 * 16 * time.Millisecond, 65534},
		{65535 * 16 * time.Millisecond, 65535},
		{65536 * 16 * time.Millisecond, 65535},
		{time.Hour, 65535},
		{math.MaxInt64, 65535},
	}
	for _, tt := range tests {
		if got := wire.QueuedUnits(tt.d); got != tt.want {
			t.Errorf("QueuedUnits(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	// Saturation is about 17.5 minutes: 65,535 × 16 ms = 1,048.56 s.
	if got := wire.QueuedDuration(65535); got != 1048560*time.Millisecond {
		t.Errorf("QueuedDuration(65535) = %v, want 17m28.56s", got)
	}
	if got := wire.QueuedDuration(1); got != 16*time.Millisecond {
		t.Errorf("QueuedDuration(1) = %v", got)
	}
	// QueuedDuration is a lower bound of the real wait.
	for _, d := range []time.Duration{0, 15 * time.Millisecond, 17 * time.Millisecond, 10*time.Second + 7*time.Millisecond} {
		if q := wire.QueuedDuration(wire.QueuedUnits(d)); q > d || d-q >= wire.QueuedUnit {
			t.Errorf("QueuedDuration(QueuedUnits(%v)) = %v", d, q)
		}
	}
}

func TestEnumValues(t *testing.T) {
	for b := 0; b < 256; b++ {
		wantOp := strings.IndexByte("ARCPQSXL", byte(b)) >= 0 // with the 1.1 ops (§12)
		if got := wire.Op(b).Valid(); got != wantOp {
			t.Errorf("Op(%#x).Valid() = %v", b, got)
		}
		wantSt := strings.IndexByte("GTBONMUEPJ", byte(b)) >= 0
		if got := wire.Status(b).Valid(); got != wantSt {
			t.Errorf("Status(%#x).Valid() = %v", b, got)
		}
		wantPayload := strings.IndexByte("MEJ", byte(b)) >= 0
		if got := wire.Status(b).HasPayload(); got != wantPayload {
			t.Errorf("Status(%#x).HasPayload() = %v", b, got)
		}
	}
	limits := map[wire.Status]int{'M': 255, 'E': 1024, 'J': 16 << 20, 'G': 0, 'P': 0, 'T': 0}
	for st, want := range limits {
		if got := st.MaxPayload(); got != want {
			t.Errorf("%c MaxPayload = %d, want %d", st, got, want)
		}
	}
	bytesOf := map[string]byte{
		"A": byte(wire.OpAcquire), "R": byte(wire.OpRelease), "C": byte(wire.OpCancel), "P": byte(wire.OpPing), "Q": byte(wire.OpQuery),
		"G": byte(wire.StatusGranted), "T": byte(wire.StatusTimeout), "B": byte(wire.StatusBusy), "O": byte(wire.StatusReleased),
		"N": byte(wire.StatusNotHolder), "M": byte(wire.StatusMoved), "U": byte(wire.StatusUnknown), "E": byte(wire.StatusError),
		"p": byte(wire.StatusPong), "J": byte(wire.StatusAdmin), "K": wire.WelcomeAccepted, "e": wire.WelcomeRejected,
	}
	want := map[string]byte{"A": 0x41, "R": 0x52, "C": 0x43, "P": 0x50, "Q": 0x51, "G": 0x47, "T": 0x54, "B": 0x42,
		"O": 0x4f, "N": 0x4e, "M": 0x4d, "U": 0x55, "E": 0x45, "p": 0x50, "J": 0x4a, "K": 0x4b, "e": 0x45}
	for k, v := range want {
		if bytesOf[k] != v {
			t.Errorf("%s = %#x, want %#x", k, bytesOf[k], v)
		}
	}
	roles := []struct {
		r    wire.Role
		n    uint8
		name string
	}{{wire.RoleClient, 1, "client"}, {wire.RoleAdmin, 2, "admin"}, {wire.RolePeer, 3, "peer"}, {0, 0, "unknown"}, {4, 4, "unknown"}}
	for _, tt := range roles {
		if uint8(tt.r) != tt.n || tt.r.String() != tt.name {
			t.Errorf("role %d: %q, want %d %q", tt.r, tt.r.String(), tt.n, tt.name)
		}
	}
	sizes := []struct{ got, want int }{
		{wire.HelloLen, 40}, {wire.AuthLen, 72}, {wire.WelcomeLen, 40}, {wire.HeaderLen, 16},
		{wire.NonceLen, 32}, {wire.ProofLen, 32}, {wire.MaxKeyLen, 250}, {wire.MaxAdminBody, 65536},
		{wire.MaxMovedPayload, 255}, {wire.MaxErrorPayload, 1024}, {wire.MaxAdminReply, 16777216},
		{wire.Version, 1}, {wire.HelloFlagTokens, 1}, {wire.MaxQueued, 65535},
	}
	for i, s := range sizes {
		if s.got != s.want {
			t.Errorf("constant %d = %d, want %d", i, s.got, s.want)
		}
	}
	if string(wire.HelloMagic[:]) != "TKTS" || string(wire.AuthMagic[:]) != "TKTC" {
		t.Errorf("magic %q %q", wire.HelloMagic, wire.AuthMagic)
	}
}

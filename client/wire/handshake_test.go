package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
)

// mutate returns a copy of frame with byte i set to v.
func mutate(frame []byte, i int, v byte) []byte {
	b := append([]byte(nil), frame...)
	b[i] = v
	return b
}

func TestHandshakeRoundTrip(t *testing.T) {
	var n1, n2, p [32]byte
	for i := range n1 {
		n1[i], n2[i], p[i] = byte(0xff-i), byte(i*7), byte(i*13)
	}
	for _, flags := range []uint8{0, 1} {
		h := wire.Hello{Flags: flags, Nonce: n1}
		b := wire.AppendHello(nil, &h)
		got, err := wire.ParseHello(b)
		if len(b) != wire.HelloLen || err != nil || got != h {
			t.Errorf("hello flags %d: len %d err %v got %+v", flags, len(b), err, got)
		}
	}
	for _, role := range []wire.Role{wire.RoleClient, wire.RoleAdmin, wire.RolePeer} {
		a := wire.Auth{Role: role, Nonce: n1, Proof: p}
		b := wire.AppendAuth(nil, &a)
		got, err := wire.ParseAuth(b)
		if len(b) != wire.AuthLen || err != nil || got != a {
			t.Errorf("auth role %d: len %d err %v got %+v", role, len(b), err, got)
		}
	}
	welcomes := []wire.Welcome{
		{Status: wire.WelcomeAccepted, MaxInflight: 1, Proof: p},
		{Status: wire.WelcomeAccepted, MaxInflight: 0xffffffff, Proof: n2},
		{Status: wire.WelcomeRejected, Code: wire.CodeAuthFailed},
	}
	for _, w := range welcomes {
		b := wire.AppendWelcome(nil, &w)
		got, err := wire.ParseWelcome(b)
		if len(b) != wire.WelcomeLen || err != nil || got != w {
			t.Errorf("welcome %+v: len %d err %v got %+v", w, len(b), err, got)
		}
	}
	// Parsers read only their frame's bytes; what follows (pipelined requests
	// behind AUTH, §1) is left alone.
	a := wire.Auth{Role: wire.RoleAdmin, Nonce: n1, Proof: p}
	b := wire.AppendPing(wire.AppendAuth(nil, &a), 1)
	if got, err := wire.ParseAuth(b); err != nil || got != a {
		t.Errorf("auth followed by a ping: %v %+v", err, got)
	}
}

func TestParseHelloErrors(t *testing.T) {
	good := readGolden(t, "hello_flags1.hex")
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"empty", nil, wire.ErrShortFrame},
		{"39 bytes", good[:39], wire.ErrShortFrame},
		{"magic TKTC (AUTH's)", mutate(good, 3, 'C'), wire.ErrBadMagic},
		{"magic lower-case", mutate(good, 0, 't'), wire.ErrBadMagic},
		{"version 0", mutate(good, 4, 0), wire.ErrBadVersion},
		{"version 2", mutate(good, 4, 2), wire.ErrBadVersion},
		{"flags bit 1", mutate(good, 5, 0x02), wire.ErrBadReserved},
		{"flags 0x81", mutate(good, 5, 0x81), wire.ErrBadReserved},
		{"reserved byte 6", mutate(good, 6, 1), wire.ErrBadReserved},
		{"reserved byte 7", mutate(good, 7, 0x80), wire.ErrBadReserved},
	}
	for _, tt := range tests {
		if _, err := wire.ParseHello(tt.frame); !errors.Is(err, tt.want) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestParseAuthErrors(t *testing.T) {
	good := readGolden(t, "auth_client.hex")
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"empty", nil, wire.ErrShortFrame},
		{"71 bytes", good[:71], wire.ErrShortFrame},
		{"HELLO magic", mutate(good, 3, 'S'), wire.ErrBadMagic},
		{"garbage magic", mutate(good, 1, 0), wire.ErrBadMagic},
		{"version 0", mutate(good, 4, 0), wire.ErrBadVersion},
		{"version 2", mutate(good, 4, 2), wire.ErrBadVersion},
		{"role 0", mutate(good, 5, 0), wire.ErrBadRole},
		{"role 4", mutate(good, 5, 4), wire.ErrBadRole},
		{"role ff", mutate(good, 5, 0xff), wire.ErrBadRole},
		{"reserved byte 6", mutate(good, 6, 1), wire.ErrBadReserved},
		{"reserved byte 7", mutate(good, 7, 1), wire.ErrBadReserved},
		// Order of checks: magic, version, role, reserved.
		{"bad version and role", mutate(mutate(good, 4, 9), 5, 9), wire.ErrBadVersion},
		{"bad role and reserved", mutate(mutate(good, 5, 9), 7, 9), wire.ErrBadRole},
	}
	for _, tt := range tests {
		if _, err := wire.ParseAuth(tt.frame); !errors.Is(err, tt.want) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestParseWelcomeErrors(t *testing.T) {
	good := readGolden(t, "welcome_client.hex")
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"empty", nil, wire.ErrShortFrame},
		{"39 bytes", good[:39], wire.ErrShortFrame},
		{"status k", mutate(good, 0, 'k'), wire.ErrBadStatus},
		{"status G", mutate(good, 0, 'G'), wire.ErrBadStatus},
		{"reserved byte 2", mutate(good, 2, 1), wire.ErrBadReserved},
		{"reserved byte 3", mutate(good, 3, 1), wire.ErrBadReserved},
	}
	for _, tt := range tests {
		if _, err := wire.ParseWelcome(tt.frame); !errors.Is(err, tt.want) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestAppendReject(t *testing.T) {
	for _, c := range []wire.Code{wire.CodeOverloaded, wire.CodeShuttingDown, wire.CodeBadHandshake, wire.CodeAuthFailed} {
		b := wire.AppendReject(nil, c)
		want := append([]byte{'E', byte(c)}, make([]byte, 38)...)
		if !bytes.Equal(b, want) {
			t.Errorf("reject %s: %x, want %x", c, b, want)
		}
	}
}

func TestProofs(t *testing.T) {
	sn, cn := goldenServerNonce, goldenClientNonce
	token := []byte("s3cret")
	cp := wire.ClientProof(token, wire.RoleClient, &sn, &cn)
	sp := wire.ServerProof(token, wire.RoleClient, &cn, &sn)
	distinct := map[[32]byte]string{
		cp: "client proof",
		sp: "server proof",
		wire.ClientProof(token, wire.RoleAdmin, &sn, &cn):             "client proof, other role",
		wire.ClientProof([]byte("s3creT"), wire.RoleClient, &sn, &cn): "client proof, other token",
		wire.ClientProof(nil, wire.RoleClient, &sn, &cn):              "client proof, empty key",
		wire.ClientProof(token, wire.RoleClient, &cn, &sn):            "client proof, nonces swapped",
	}
	if len(distinct) != 6 {
		t.Fatalf("proofs collide: %v", distinct)
	}
	// The empty token and a nil token are the same empty HMAC key.
	a := wire.ClientProof(nil, wire.RoleClient, &sn, &cn)
	b := wire.ClientProof([]byte{}, wire.RoleClient, &sn, &cn)
	if a != b {
		t.Fatal("nil and empty token differ")
	}
	other := cp
	other[31] ^= 1
	if wire.ProofEqual(&cp, &other) || !wire.ProofEqual(&cp, &cp) {
		t.Fatal("ProofEqual is wrong")
	}
}

package wire_test

import (
	"errors"
	"io"
	"net"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
)

// fakeServer answers one handshake on nc: HELLO, read AUTH, then the
// WELCOME built by welcome (given the AUTH and HELLO).
func fakeServer(t *testing.T, nc net.Conn, hello []byte, welcome func(a *wire.Auth, h *wire.Hello) []byte) {
	t.Helper()
	defer nc.Close()
	if _, err := nc.Write(hello); err != nil {
		return
	}
	h, _ := wire.ParseHello(hello)
	var b [wire.AuthLen]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return
	}
	a, err := wire.ParseAuth(b[:])
	if err != nil {
		t.Errorf("AUTH: %v", err)
		return
	}
	_, _ = nc.Write(welcome(&a, &h))
}

func TestClientHandshake(t *testing.T) {
	token := []byte("s3cret")
	hello := wire.AppendHello(nil, &wire.Hello{Flags: wire.HelloFlagTokens, Nonce: [32]byte{1, 2, 3}})
	good := func(a *wire.Auth, h *wire.Hello) []byte {
		want := wire.ClientProof(token, a.Role, &h.Nonce, &a.Nonce)
		if !wire.ProofEqual(&want, &a.Proof) {
			return wire.AppendReject(nil, wire.CodeAuthFailed)
		}
		return wire.AppendWelcome(nil, &wire.Welcome{Status: wire.WelcomeAccepted, MaxInflight: 7,
			Proof: wire.ServerProof(token, a.Role, &a.Nonce, &h.Nonce)})
	}
	noProof := func(*wire.Auth, *wire.Hello) []byte {
		return wire.AppendWelcome(nil, &wire.Welcome{Status: wire.WelcomeAccepted, MaxInflight: 7})
	}
	for _, tc := range []struct {
		name    string
		hello   []byte
		token   []byte
		welcome func(*wire.Auth, *wire.Hello) []byte
		want    error
		code    wire.Code
	}{
		{"accepted", hello, token, good, nil, 0},
		{"wrong token", hello, []byte("other"), good, wire.ErrRejected, wire.CodeAuthFailed},
		{"impostor", hello, token, noProof, wire.ErrServerProof, 0},
		{"no token: proof not checked", hello, nil, noProof, nil, 0},
		{"bad magic", mutate(hello, 0, 'X'), token, good, wire.ErrBadMagic, 0},
		{"bad welcome", hello, token, func(*wire.Auth, *wire.Hello) []byte { return make([]byte, wire.WelcomeLen) }, wire.ErrBadStatus, 0},
		{"closed before welcome", hello, token, func(*wire.Auth, *wire.Hello) []byte { return nil }, io.ErrUnexpectedEOF, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, sv := net.Pipe()
			defer cl.Close()
			go fakeServer(t, sv, tc.hello, tc.welcome)
			_, w, err := wire.ClientHandshake(cl, wire.RoleAdmin, tc.token)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				if !(tc.want == io.ErrUnexpectedEOF && errors.Is(err, io.EOF)) {
					t.Fatalf("err %v, want %v", err, tc.want)
				}
			}
			if tc.want == nil && w.MaxInflight != 7 {
				t.Errorf("max inflight %d", w.MaxInflight)
			}
			if tc.code != 0 && w.Code != tc.code {
				t.Errorf("code %v, want %v", w.Code, tc.code)
			}
		})
	}
}

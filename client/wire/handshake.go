package wire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// Hello is the server's first frame (§1.1), 40 bytes.
type Hello struct {
	Flags uint8          // bit 0 = HelloFlagTokens
	Nonce [NonceLen]byte // server_nonce, fresh from a CSPRNG per connection
}

// TokensConfigured reports HELLO flag bit 0.
func (h *Hello) TokensConfigured() bool { return h.Flags&HelloFlagTokens != 0 }

// AppendHello appends the 40-byte HELLO frame.
func AppendHello(b []byte, h *Hello) []byte {
	b = append(b, HelloMagic[:]...)
	b = append(b, Version, h.Flags, 0, 0)
	return append(b, h.Nonce[:]...)
}

// ParseHello decodes a HELLO frame from the first 40 bytes of b.
// Errors: ErrShortFrame, ErrBadMagic, ErrBadVersion, ErrBadReserved (flags
// other than bit 0, or reserved bytes, nonzero).
func ParseHello(b []byte) (Hello, error) {
	var h Hello
	if len(b) < HelloLen {
		return h, ErrShortFrame
	}
	if [4]byte(b[0:4]) != HelloMagic {
		return h, ErrBadMagic
	}
	if b[4] != Version {
		return h, ErrBadVersion
	}
	if b[5]&^HelloFlagTokens != 0 || b[6] != 0 || b[7] != 0 {
		return h, ErrBadReserved
	}
	h.Flags = b[5]
	copy(h.Nonce[:], b[8:40])
	return h, nil
}

// Auth is the client's handshake frame (§1.2), 72 bytes.
type Auth struct {
	Role  Role
	Nonce [NonceLen]byte // client_nonce
	Proof [ProofLen]byte // client_proof
}

// AppendAuth appends the 72-byte AUTH frame.
func AppendAuth(b []byte, a *Auth) []byte {
	b = append(b, AuthMagic[:]...)
	b = append(b, Version, byte(a.Role), 0, 0)
	b = append(b, a.Nonce[:]...)
	return append(b, a.Proof[:]...)
}

// ParseAuth decodes an AUTH frame from the first 72 bytes of b, checking in
// order magic, version, role (1..3) and the reserved bytes.
// Errors: ErrShortFrame, ErrBadMagic, ErrBadVersion, ErrBadRole,
// ErrBadReserved; the server answers every one of them with REJECT
// BAD_HANDSHAKE (§1.3).
func ParseAuth(b []byte) (Auth, error) {
	var a Auth
	if len(b) < AuthLen {
		return a, ErrShortFrame
	}
	if [4]byte(b[0:4]) != AuthMagic {
		return a, ErrBadMagic
	}
	if b[4] != Version {
		return a, ErrBadVersion
	}
	if r := Role(b[5]); r < RoleClient || r > RolePeer {
		return a, ErrBadRole
	}
	if b[6] != 0 || b[7] != 0 {
		return a, ErrBadReserved
	}
	a.Role = Role(b[5])
	copy(a.Nonce[:], b[8:40])
	copy(a.Proof[:], b[40:72])
	return a, nil
}

// Welcome statuses (§1.3).
const (
	WelcomeAccepted byte = 'K' // 0x4B
	WelcomeRejected byte = 'E' // 0x45
)

// Welcome is the server's answer to AUTH (§1.3), 40 bytes: WELCOME when
// Status is 'K', REJECT when 'E'.
type Welcome struct {
	Status      byte   // WelcomeAccepted or WelcomeRejected
	Code        Code   // 0 when accepted
	MaxInflight uint32 // accepted: ≥ 1; rejected: 0
	Proof       [ProofLen]byte
}

// Accepted reports whether this is a WELCOME rather than a REJECT.
func (w *Welcome) Accepted() bool { return w.Status == WelcomeAccepted }

// AppendWelcome appends the 40-byte WELCOME/REJECT frame.
func AppendWelcome(b []byte, w *Welcome) []byte {
	b = append(b, w.Status, byte(w.Code), 0, 0)
	b = be.AppendUint32(b, w.MaxInflight)
	return append(b, w.Proof[:]...)
}

// AppendReject appends a REJECT with the given code (zero max_inflight and proof).
func AppendReject(b []byte, c Code) []byte {
	return AppendWelcome(b, &Welcome{Status: WelcomeRejected, Code: c})
}

// ParseWelcome decodes a WELCOME/REJECT from the first 40 bytes of b.
// Errors: ErrShortFrame, ErrBadStatus (neither 'K' nor 'E'), ErrBadReserved.
func ParseWelcome(b []byte) (Welcome, error) {
	var w Welcome
	if len(b) < WelcomeLen {
		return w, ErrShortFrame
	}
	if b[0] != WelcomeAccepted && b[0] != WelcomeRejected {
		return w, ErrBadStatus
	}
	if b[2] != 0 || b[3] != 0 {
		return w, ErrBadReserved
	}
	w.Status = b[0]
	w.Code = Code(b[1])
	w.MaxInflight = be.Uint32(b[4:8])
	copy(w.Proof[:], b[8:40])
	return w, nil
}

const (
	clientProofLabel = "ticketing-v1-client"
	serverProofLabel = "ticketing-v1-server"
)

// ClientProof computes client_proof = HMAC-SHA256(key = token,
// msg = "ticketing-v1-client" ‖ role ‖ server_nonce ‖ client_nonce) (§1.2).
// An empty token is the empty key (no tokens configured).
func ClientProof(token []byte, role Role, serverNonce, clientNonce *[NonceLen]byte) [ProofLen]byte {
	return proof(token, clientProofLabel, role, serverNonce, clientNonce)
}

// ServerProof computes server_proof = HMAC-SHA256(key = token,
// msg = "ticketing-v1-server" ‖ role ‖ client_nonce ‖ server_nonce) (§1.3).
func ServerProof(token []byte, role Role, clientNonce, serverNonce *[NonceLen]byte) [ProofLen]byte {
	return proof(token, serverProofLabel, role, clientNonce, serverNonce)
}

func proof(token []byte, label string, role Role, first, second *[NonceLen]byte) [ProofLen]byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	m.Write([]byte{byte(role)})
	m.Write(first[:])
	m.Write(second[:])
	var out [ProofLen]byte
	m.Sum(out[:0])
	return out
}

// ProofEqual compares two proofs in constant time (§1.3).
func ProofEqual(a, b *[ProofLen]byte) bool { return hmac.Equal(a[:], b[:]) }

// Errors of ClientHandshake besides the frame errors and I/O errors it wraps.
var (
	// ErrRejected: the server answered REJECT; the returned Welcome holds the code.
	ErrRejected = errors.New("wire: handshake rejected")
	// ErrServerProof: WELCOME's server_proof is wrong (a token was given):
	// the peer does not hold the token, an impostor.
	ErrServerProof = errors.New("wire: the server did not prove the token")
)

// ClientHandshake runs the client side of the handshake (§1) on rw, an
// established (and, with TLS, already TLS-handshaken) connection: read
// HELLO, send AUTH for role with a fresh client nonce, read WELCOME/REJECT
// and, when token is not empty, check the server's proof. The caller sets
// the deadline. It returns the HELLO and the WELCOME (also on a REJECT).
//
// Errors wrap, in the order they can happen: the read error ("reading
// HELLO"), a ParseHello error ("not a ticketing v1 server"), the write error
// ("sending AUTH"), the read error ("reading WELCOME"), a ParseWelcome error
// ("bad WELCOME"), ErrRejected (the code is in the Welcome), ErrServerProof.
func ClientHandshake(rw io.ReadWriter, role Role, token []byte) (Hello, Welcome, error) {
	var b [AuthLen]byte
	if _, err := io.ReadFull(rw, b[:HelloLen]); err != nil {
		return Hello{}, Welcome{}, fmt.Errorf("reading HELLO: %w", err)
	}
	h, err := ParseHello(b[:HelloLen])
	if err != nil {
		return h, Welcome{}, fmt.Errorf("not a ticketing v1 server: %w", err)
	}
	a := Auth{Role: role}
	if _, err := rand.Read(a.Nonce[:]); err != nil {
		return h, Welcome{}, err
	}
	a.Proof = ClientProof(token, role, &h.Nonce, &a.Nonce)
	if _, err := rw.Write(AppendAuth(b[:0], &a)); err != nil {
		return h, Welcome{}, fmt.Errorf("sending AUTH: %w", err)
	}
	if _, err := io.ReadFull(rw, b[:WelcomeLen]); err != nil {
		return h, Welcome{}, fmt.Errorf("reading WELCOME: %w", err)
	}
	w, err := ParseWelcome(b[:WelcomeLen])
	if err != nil {
		return h, w, fmt.Errorf("bad WELCOME: %w", err)
	}
	if !w.Accepted() {
		return h, w, fmt.Errorf("%w: %s", ErrRejected, w.Code)
	}
	if len(token) > 0 {
		want := ServerProof(token, role, &a.Nonce, &h.Nonce)
		if !ProofEqual(&want, &w.Proof) {
			return h, w, ErrServerProof
		}
	}
	return h, w, nil
}

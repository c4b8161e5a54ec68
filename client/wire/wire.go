// Package wire is the Ticketing v1 wire codec: every frame of the protocol
// (docs/protocol.md, which mirrors ../shared/design/protocol.md byte for byte),
// its constants, append-style encoders and fixed-offset decoders.
//
// It is a leaf package: it imports only the standard library. Both the client
// and the server use it, so there is exactly one definition of the bytes.
//
// Decoders never allocate: the key and payload slices they return alias the
// input buffer and are valid only until the caller reuses that buffer.
// Encoders append to a caller-owned buffer and never allocate when it has room.
package wire

import (
	"encoding/binary"
	"errors"
	"time"
)

// Frame sizes and limits, in bytes unless stated (protocol.md §1, §2, §3).
const (
	HelloLen   = 40 // HELLO, server → client (§1.1)
	AuthLen    = 72 // AUTH, client → server (§1.2)
	WelcomeLen = 40 // WELCOME or REJECT, server → client (§1.3)
	HeaderLen  = 16 // request and response header (§2, §3)
	NonceLen   = 32 // HELLO/AUTH nonces
	ProofLen   = 32 // HMAC-SHA256 proofs

	MaxKeyLen       = 250      // key_len of A, R, C (§2)
	MaxAdminBody    = 65536    // body_len of Q (§2)
	MaxMovedPayload = 255      // M payload: leader address (§3)
	MaxErrorPayload = 1024     // E payload: UTF-8 message (§3)
	MaxAdminReply   = 16 << 20 // J payload: JSON object (§3)

	// Version is the only protocol version (§1.1, §1.2).
	Version = 1

	// HelloFlagTokens is HELLO flags bit 0: tokens are configured and proofs are checked (§1.1).
	HelloFlagTokens = 0x01

	// QueuedUnit is the unit of the G header's queued field (§3).
	QueuedUnit = 16 * time.Millisecond
	// MaxQueued is the saturation value of the queued field (§3).
	MaxQueued = 65535
)

// Magic numbers (§1.1, §1.2).
var (
	HelloMagic = [4]byte{'T', 'K', 'T', 'S'}
	AuthMagic  = [4]byte{'T', 'K', 'T', 'C'}
)

// Role is the AUTH role byte (§1 table).
type Role uint8

// Roles (§1.2).
const (
	RoleClient Role = 1
	RoleAdmin  Role = 2
	RolePeer   Role = 3
)

// String names the role as the docs do.
func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleAdmin:
		return "admin"
	case RolePeer:
		return "peer"
	}
	return "unknown"
}

// Op is a request's operation byte (§2).
type Op uint8

// Request operations (§2).
const (
	OpAcquire Op = 'A' // 0x41
	OpRelease Op = 'R' // 0x52
	OpCancel  Op = 'C' // 0x43
	OpPing    Op = 'P' // 0x50
	OpQuery   Op = 'Q' // 0x51
)

// Valid reports whether o is one of A R C P Q (§2.1 check 1) or one of the
// 1.1 ops S X L (§12).
func (o Op) Valid() bool {
	switch o {
	case OpAcquire, OpRelease, OpCancel, OpPing, OpQuery, OpAcquireSet, OpReleaseSet, OpLabel:
		return true
	}
	return false
}

// Status is a response's status byte (§3).
type Status uint8

// Response statuses (§3).
const (
	StatusGranted   Status = 'G' // 0x47: acquire granted; value = fencing token
	StatusTimeout   Status = 'T' // 0x54: acquire timed out or wait 0 on a held key
	StatusBusy      Status = 'B' // 0x42: not acquired, not queued; code says why
	StatusReleased  Status = 'O' // 0x4F: released / cancel withdrew the acquire
	StatusNotHolder Status = 'N' // 0x4E: release/cancel matched nothing
	StatusMoved     Status = 'M' // 0x4D: not the leader; payload = leader address
	StatusUnknown   Status = 'U' // 0x55: outcome unknown (cluster)
	StatusError     Status = 'E' // 0x45: bad request; payload = message
	StatusPong      Status = 'P' // 0x50: pong; value = server time in µs
	StatusAdmin     Status = 'J' // 0x4A: admin reply; payload = JSON
)

// Valid reports whether s is a status of §3.
func (s Status) Valid() bool {
	switch s {
	case StatusGranted, StatusTimeout, StatusBusy, StatusReleased, StatusNotHolder,
		StatusMoved, StatusUnknown, StatusError, StatusPong, StatusAdmin:
		return true
	}
	return false
}

// HasPayload reports whether responses of this status carry a payload whose
// length is the header's value field (M, E, J; §3).
func (s Status) HasPayload() bool {
	return s == StatusMoved || s == StatusError || s == StatusAdmin
}

// MaxPayload is the largest payload allowed for the status (§3), 0 for statuses without one.
func (s Status) MaxPayload() int {
	switch s {
	case StatusMoved:
		return MaxMovedPayload
	case StatusError:
		return MaxErrorPayload
	case StatusAdmin:
		return MaxAdminReply
	}
	return 0
}

// Code is a reason code (§4).
type Code uint8

// Codes (§4).
const (
	CodeNone           Code = 0
	CodeQueueFull      Code = 1
	CodeOverloaded     Code = 2
	CodeClockUnhealthy Code = 3
	CodeShuttingDown   Code = 4
	CodeNoQuorum       Code = 5
	CodeRecovering     Code = 6
	CodeBadHandshake   Code = 10
	CodeAuthFailed     Code = 11
	CodeBadOp          Code = 20
	CodeBadKey         Code = 21
	CodeBadLease       Code = 22
	CodeBadWait        Code = 23
	CodeBadFlags       Code = 24
	CodeDuplicateReqID Code = 25
	CodeBadAdmin       Code = 26
	CodeNotPermitted   Code = 27
	CodeInternal       Code = 28
)

var codeNames = [...]string{
	CodeNone: "NONE", CodeQueueFull: "QUEUE_FULL", CodeOverloaded: "OVERLOADED",
	CodeClockUnhealthy: "CLOCK_UNHEALTHY", CodeShuttingDown: "SHUTTING_DOWN",
	CodeNoQuorum: "NO_QUORUM", CodeRecovering: "RECOVERING", CodeBadHandshake: "BAD_HANDSHAKE", CodeAuthFailed: "AUTH_FAILED",
	CodeBadOp: "BAD_OP", CodeBadKey: "BAD_KEY", CodeBadLease: "BAD_LEASE", CodeBadWait: "BAD_WAIT",
	CodeBadFlags: "BAD_FLAGS", CodeDuplicateReqID: "DUPLICATE_REQ_ID", CodeBadAdmin: "BAD_ADMIN",
	CodeNotPermitted: "NOT_PERMITTED", CodeInternal: "INTERNAL",
	CodeTLSRequired: "TLS_REQUIRED", CodeBadKeySet: "BAD_KEYSET", CodeBadLabel: "BAD_LABEL",
}

// String is the code's name in §4 (e.g. "QUEUE_FULL"), or "CODE_n" for an unknown one.
func (c Code) String() string {
	if int(c) < len(codeNames) && codeNames[c] != "" {
		return codeNames[c]
	}
	return "CODE_" + itoa(int(c))
}

func itoa(n int) string {
	var b [4]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}

// Decoder errors. Callers branch on them with errors.Is.
var (
	// ErrBadMagic: a handshake frame does not start with its magic (§1.1, §1.2).
	ErrBadMagic = errors.New("wire: bad magic")
	// ErrBadVersion: a handshake frame names a version other than 1.
	ErrBadVersion = errors.New("wire: unknown protocol version")
	// ErrBadRole: AUTH names a role other than 1, 2, 3.
	ErrBadRole = errors.New("wire: unknown role")
	// ErrBadReserved: a reserved handshake field is not zero.
	ErrBadReserved = errors.New("wire: nonzero reserved bytes")
	// ErrBadStatus: a WELCOME or response status byte is not one of the spec's.
	ErrBadStatus = errors.New("wire: unknown status")
	// ErrBadOp: a request op byte is not A R C P Q S X L (§2.1 check 1; the connection closes).
	ErrBadOp = errors.New("wire: unknown op")
	// ErrBodyTooLarge: a Q header announces body_len > 65,536 (§2.1 check 5; the connection closes).
	ErrBodyTooLarge = errors.New("wire: admin body_len above 65536")
	// ErrPayloadTooLarge: a response payload length exceeds its status's bound (§3).
	ErrPayloadTooLarge = errors.New("wire: response payload above limit")
	// ErrShortFrame: a fixed-size frame was given fewer bytes than its size.
	ErrShortFrame = errors.New("wire: short frame")
)

var be = binary.BigEndian

// ---------------------------------------------------------------------------
// Queued field (§3)

// QueuedUnits converts a wait in the queue to the G header's queued field:
// units of 16 ms, rounded down, saturating at 65,535.
func QueuedUnits(d time.Duration) uint16 {
	if d <= 0 {
		return 0
	}
	u := d / QueuedUnit
	if u > MaxQueued {
		return MaxQueued
	}
	return uint16(u)
}

// QueuedDuration converts the queued field back to a duration (a lower bound
// of the real wait, §5 "The client's deadline").
func QueuedDuration(q uint16) time.Duration { return time.Duration(q) * QueuedUnit }

// ---------------------------------------------------------------------------
// Keys (§2.1 check 5)

// ValidKey reports whether k is a valid key for A, R and C: 1..250 bytes of
// valid UTF-8 (as utf8.Valid) with no control characters (U+0000–U+001F,
// U+007F–U+009F). It does not allocate.
func ValidKey(k []byte) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	i := 0
	for ; i+8 <= len(k) && printable8(binary.LittleEndian.Uint64(k[i:])); i += 8 {
		// 8 bytes of printable ASCII at a time: the common key (issue 35:
		// a byte at a time was 7 % of the server's CPU in the set row)
	}
	for i < len(k) {
		c := k[i]
		if c < 0x80 {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := decodeRune(k[i:])
		if size == 0 {
			return false
		}
		if r >= 0x80 && r <= 0x9f {
			return false
		}
		i += size
	}
	return true
}

// printable8 reports whether each byte of x is printable ASCII (0x20–0x7e):
// none has the top bit, none is below 0x20 (hasless) and none is 0x7f
// (haszero of x^0x7f..), by the exact word tests of "Bit Twiddling Hacks"
// (no false "printable"; a false "not" would only mean the byte loop checks).
func printable8(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	y := x ^ 0x7f7f7f7f7f7f7f7f
	return (x|((x-0x20*lo)&^x)|((y-lo)&^y))&hi == 0
}

// decodeRune decodes one multi-byte UTF-8 sequence by RFC 3629 (no surrogates,
// no overlong forms, at most U+10FFFF); size 0 means invalid.
func decodeRune(p []byte) (rune, int) {
	n := len(p)
	c0 := p[0]
	switch {
	case c0 >= 0xC2 && c0 <= 0xDF:
		if n < 2 || p[1]&0xC0 != 0x80 {
			return 0, 0
		}
		return rune(c0&0x1F)<<6 | rune(p[1]&0x3F), 2
	case c0 >= 0xE0 && c0 <= 0xEF:
		if n < 3 || p[1]&0xC0 != 0x80 || p[2]&0xC0 != 0x80 {
			return 0, 0
		}
		if c0 == 0xE0 && p[1] < 0xA0 { // overlong
			return 0, 0
		}
		if c0 == 0xED && p[1] > 0x9F { // surrogates
			return 0, 0
		}
		return rune(c0&0x0F)<<12 | rune(p[1]&0x3F)<<6 | rune(p[2]&0x3F), 3
	case c0 >= 0xF0 && c0 <= 0xF4:
		if n < 4 || p[1]&0xC0 != 0x80 || p[2]&0xC0 != 0x80 || p[3]&0xC0 != 0x80 {
			return 0, 0
		}
		if c0 == 0xF0 && p[1] < 0x90 { // overlong
			return 0, 0
		}
		if c0 == 0xF4 && p[1] > 0x8F { // above U+10FFFF
			return 0, 0
		}
		return rune(c0&0x07)<<18 | rune(p[1]&0x3F)<<12 | rune(p[2]&0x3F)<<6 | rune(p[3]&0x3F), 4
	}
	return 0, 0
}

package wire

// Protocol 1.1 additions (docs/protocol.md §12): feature discovery, key sets
// (S, X), connection labels (L), the TLS-required hint and codes 12, 29, 30.

// Request operations added by protocol 1.1 (§12.2, §12.3).
const (
	OpAcquireSet Op = 'S' // 0x53: acquire a key set
	OpReleaseSet Op = 'X' // 0x58: release a key set
	OpLabel      Op = 'L' // 0x4C: set the connection's label
)

// V1 reports whether o is one of the version 1 ops A R C P Q (§2); a 1.0
// server answers any other op E BAD_OP and closes.
func (o Op) V1() bool {
	switch o {
	case OpAcquire, OpRelease, OpCancel, OpPing, OpQuery:
		return true
	}
	return false
}

// Limits of the 1.1 frames (§12.2, §12.3).
const (
	MinSetKeys  = 2                      // fewest keys in a set
	MaxSetKeys  = 16                     // most keys in a set
	MaxSetBody  = MaxSetKeys * (1 + 250) // 4,016: the largest valid body_len of S and X
	MaxLabelLen = 64                     // label_len of L, bytes
)

// PingArgFeatures is the ping arg that asks a 1.1 server for its feature bits (§12.1).
const PingArgFeatures = 1

// Features are the feature bits of a 1.1 pong's queued field (§12.1).
type Features uint16

// Feature bits (§12.1). A client ignores bits it does not know.
const (
	FeatureKeySets Features = 0x0001 // S and X are accepted
	FeatureLabels  Features = 0x0002 // L is accepted; labels are shown in locks
	FeatureTLSHint Features = 0x0004 // the TLS listener sends REJECT TLS_REQUIRED
)

// ServerFeatures is what this server implementation announces.
const ServerFeatures = FeatureKeySets | FeatureLabels | FeatureTLSHint

// Has reports whether every bit of want is set.
func (f Features) Has(want Features) bool { return f&want == want }

// Codes added by protocol 1.1 (§12.5).
const (
	CodeTLSRequired Code = 12 // REJECT, plaintext, from a TLS listener (§12.4)
	CodeBadKeySet   Code = 29 // E to S/X: count, framing, body_len or duplicate keys
	CodeBadLabel    Code = 30 // E to L: too long, not UTF-8, or a control character
)

// SetCount is the number of keys of an S or X (header byte 1).
func (r *Request) SetCount() uint8 { return r.KeyLen }

// SetBodyLen is the body_len of an S or X (header bytes 2..4).
func (r *Request) SetBodyLen() uint16 { return r.Flags }

// AppendPingFeatures appends a ping asking for the feature bits (arg 1, §12.1).
func AppendPingFeatures(b []byte, reqID uint32) []byte {
	return AppendRequestHeader(b, OpPing, 0, 0, reqID, PingArgFeatures)
}

// AppendPongFeatures appends a pong carrying feature bits in its queued field
// (the answer to a ping with arg 1, §12.1).
func AppendPongFeatures(b []byte, reqID uint32, f Features, unixUS uint64) []byte {
	return AppendResponseHeader(b, StatusPong, CodeNone, uint16(f), reqID, unixUS)
}

// Features is the feature bits of a pong (its queued field, §12.1).
func (r *Response) Features() Features { return Features(r.Queued) }

// SetBodyLen is the body_len of the S/X body for keys: Σ (1 + len(key)).
func SetBodyLen(keys []string) int {
	n := 0
	for _, k := range keys {
		n += 1 + len(k)
	}
	return n
}

func appendSet(b []byte, op Op, reqID uint32, keys []string, arg uint64) []byte {
	b = append(b, byte(op), uint8(len(keys)))
	b = be.AppendUint16(b, uint16(SetBodyLen(keys)))
	b = be.AppendUint32(b, reqID)
	b = be.AppendUint64(b, arg)
	for _, k := range keys {
		b = append(b, uint8(len(k)))
		b = append(b, k...)
	}
	return b
}

// AppendAcquireSet appends an S frame (§12.2). The caller ensures 2–16 keys of
// 1–250 bytes each; lease and wait are in ms.
func AppendAcquireSet(b []byte, reqID uint32, keys []string, leaseMS, waitMS uint32) []byte {
	return appendSet(b, OpAcquireSet, reqID, keys, AcquireArg(leaseMS, waitMS))
}

// AppendReleaseSet appends an X frame releasing the set with token (§12.2).
func AppendReleaseSet(b []byte, reqID uint32, keys []string, token uint64) []byte {
	return appendSet(b, OpReleaseSet, reqID, keys, token)
}

// AppendLabel appends an L frame (§12.3). The caller ensures len(label) ≤ 64.
func AppendLabel(b []byte, reqID uint32, label string) []byte {
	b = AppendRequestHeader(b, OpLabel, uint8(len(label)), 0, reqID, 0)
	return append(b, label...)
}

// KeySet is the decoded body of an S or X: N keys aliasing the frame.
type KeySet struct {
	N    int
	Keys [MaxSetKeys][]byte
}

// Messages of the E answers to a bad set (§12.2).
const (
	MsgSetBodyTooLong = "key set body_len above 4016"
	MsgSetShape       = "key set needs 2 to 16 keys of 1 to 250 bytes, exactly filling body_len"
	MsgSetBadKey      = "a key of the set is not 1 to 250 bytes of UTF-8 without control characters"
	MsgSetDuplicate   = "duplicate key in set"
)

// ParseKeySet decodes and checks an S or X body with the given count, in the
// order of §12.2 steps 2, 5, 6 and 7: body_len ≤ 4,016 and the shape
// (CodeBadKeySet), every key as ValidKey (CodeBadKey), no key twice
// (CodeBadKeySet). It returns CodeNone and fills ks when all pass; the message
// names the failed check. It does not allocate.
func ParseKeySet(ks *KeySet, count uint8, body []byte) (Code, string) {
	ks.N = 0
	if len(body) > MaxSetBody {
		return CodeBadKeySet, MsgSetBodyTooLong
	}
	if count < MinSetKeys || count > MaxSetKeys {
		return CodeBadKeySet, MsgSetShape
	}
	rest := body
	for i := 0; i < int(count); i++ {
		if len(rest) == 0 {
			return CodeBadKeySet, MsgSetShape
		}
		kl := int(rest[0])
		if kl == 0 || kl > MaxKeyLen || len(rest) < 1+kl {
			return CodeBadKeySet, MsgSetShape
		}
		ks.Keys[i] = rest[1 : 1+kl : 1+kl]
		rest = rest[1+kl:]
	}
	if len(rest) != 0 {
		return CodeBadKeySet, MsgSetShape
	}
	n := int(count)
	for i := 0; i < n; i++ {
		if !ValidKey(ks.Keys[i]) {
			return CodeBadKey, MsgSetBadKey
		}
	}
	for i := 1; i < n; i++ {
		for j := 0; j < i; j++ {
			if string(ks.Keys[i]) == string(ks.Keys[j]) {
				return CodeBadKeySet, MsgSetDuplicate
			}
		}
	}
	ks.N = n
	return CodeNone, ""
}

// ValidLabel reports whether l is a valid label for L (§12.3): 0–64 bytes of
// valid UTF-8 with no control character (the key rule of §2.1 with 0–64
// bytes). It does not allocate.
func ValidLabel(l []byte) bool {
	if len(l) == 0 {
		return true
	}
	return len(l) <= MaxLabelLen && ValidKey(l)
}

// CutLabel cuts s to at most 64 bytes at a character boundary (§12.3: a client
// never sends a label too long).
func CutLabel(s string) string {
	if len(s) <= MaxLabelLen {
		return s
	}
	i := MaxLabelLen
	for i > 0 && s[i]&0xC0 == 0x80 { // s[i] starts the first cut character
		i--
	}
	return s[:i]
}

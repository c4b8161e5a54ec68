package wire

import "unicode/utf8"

// Request is a decoded request (§2). Key and Body alias the decoder's input.
type Request struct {
	Op     Op
	KeyLen uint8  // header byte 1 (for Q it MUST be 0)
	Flags  uint16 // MUST be 0 in version 1
	ReqID  uint32
	Arg    uint64 // bytes 8..16; use the accessors below
	Key    []byte // A R C: the key; P: the key bytes to discard (valid only when KeyLen is 0); L: the label
	Body   []byte // Q: the JSON body; S X: the key set body (ParseKeySet)
}

// The request arg (bytes 8..16) of each op, §2: A lease_ms<<32 | wait_ms;
// R the token; C target<<32 (low half reserved); Q body_len<<32 (low half 0).
// These are the only places that pack or unpack it.

// AcquireArg packs an acquire's lease and wait (ms) into its arg.
func AcquireArg(leaseMS, waitMS uint32) uint64 { return uint64(leaseMS)<<32 | uint64(waitMS) }

// CancelArg packs a cancel's target req_id into its arg.
func CancelArg(target uint32) uint64 { return uint64(target) << 32 }

// QueryArg packs a query's body length into its arg.
func QueryArg(bodyLen uint32) uint64 { return uint64(bodyLen) << 32 }

// ArgLeaseMS is the lease (ms) of an acquire arg.
func ArgLeaseMS(arg uint64) uint32 { return uint32(arg >> 32) }

// ArgWaitMS is the wait (ms) of an acquire arg; 0 = try once.
func ArgWaitMS(arg uint64) uint32 { return uint32(arg) }

// ArgTarget is the target req_id of a cancel arg (and the body_len of a query arg).
func ArgTarget(arg uint64) uint32 { return uint32(arg >> 32) }

// LeaseMS is the acquire's lease in ms (A: arg bytes 8..12).
func (r *Request) LeaseMS() uint32 { return ArgLeaseMS(r.Arg) }

// WaitMS is the acquire's wait in ms (A: arg bytes 12..16); 0 = try once.
func (r *Request) WaitMS() uint32 { return ArgWaitMS(r.Arg) }

// Token is the release's fencing token (R: arg bytes 8..16).
func (r *Request) Token() uint64 { return r.Arg }

// Target is the req_id of the acquire a cancel withdraws (C: arg bytes 8..12).
func (r *Request) Target() uint32 { return ArgTarget(r.Arg) }

// BodyLen is the Q body length (arg bytes 8..12).
func (r *Request) BodyLen() uint32 { return ArgTarget(r.Arg) }

// ArgLow is arg bytes 12..16 (Q: MUST be zero; C: reserved).
func (r *Request) ArgLow() uint32 { return uint32(r.Arg) }

// AppendRequestHeader appends a 16-byte request header.
func AppendRequestHeader(b []byte, op Op, keyLen uint8, flags uint16, reqID uint32, arg uint64) []byte {
	b = append(b, byte(op), keyLen)
	b = be.AppendUint16(b, flags)
	b = be.AppendUint32(b, reqID)
	return be.AppendUint64(b, arg)
}

// AppendAcquire appends an acquire frame (16 + len(key) bytes). The caller
// ensures 1 ≤ len(key) ≤ 250; lease and wait are in ms.
func AppendAcquire(b []byte, reqID uint32, key string, leaseMS, waitMS uint32) []byte {
	b = AppendRequestHeader(b, OpAcquire, uint8(len(key)), 0, reqID, AcquireArg(leaseMS, waitMS))
	return append(b, key...)
}

// AppendRelease appends a release frame (16 + len(key) bytes).
func AppendRelease(b []byte, reqID uint32, key string, token uint64) []byte {
	b = AppendRequestHeader(b, OpRelease, uint8(len(key)), 0, reqID, token)
	return append(b, key...)
}

// AppendCancel appends a cancel frame withdrawing this connection's queued
// acquire target on key (16 + len(key) bytes).
func AppendCancel(b []byte, reqID uint32, key string, target uint32) []byte {
	b = AppendRequestHeader(b, OpCancel, uint8(len(key)), 0, reqID, CancelArg(target))
	return append(b, key...)
}

// AppendPing appends a 16-byte ping frame.
func AppendPing(b []byte, reqID uint32) []byte {
	return AppendRequestHeader(b, OpPing, 0, 0, reqID, 0)
}

// AppendQuery appends an admin query frame (16 + len(body) bytes). The caller
// ensures 1 ≤ len(body) ≤ 65,536.
func AppendQuery(b []byte, reqID uint32, body []byte) []byte {
	b = AppendRequestHeader(b, OpQuery, 0, 0, reqID, QueryArg(uint32(len(body))))
	return append(b, body...)
}

// RequestFrameLen returns the full length of the request whose 16-byte header
// starts b: 16 + key_len for A R C P L, 16 + body_len for Q, 16 + the u16
// body_len at offset 2 for S and X (§12.2).
// Errors: ErrShortFrame (fewer than 16 bytes), ErrBadOp (§2.1 check 1),
// ErrBodyTooLarge (Q with body_len > 65,536). Both of the latter are fatal to
// the connection: the frame cannot be skipped.
func RequestFrameLen(b []byte) (int, error) {
	if len(b) < HeaderLen {
		return 0, ErrShortFrame
	}
	op := Op(b[0])
	if !op.Valid() {
		return 0, ErrBadOp
	}
	if op == OpQuery {
		n := be.Uint32(b[8:12])
		if n > MaxAdminBody {
			return 0, ErrBodyTooLarge
		}
		return HeaderLen + int(n), nil
	}
	if op == OpAcquireSet || op == OpReleaseSet {
		return HeaderLen + int(be.Uint16(b[2:4])), nil
	}
	return HeaderLen + int(b[1]), nil
}

// ParseRequestHeader decodes the 16-byte header at the start of b without
// looking at the op's validity.
func ParseRequestHeader(b []byte) (Request, error) {
	if len(b) < HeaderLen {
		return Request{}, ErrShortFrame
	}
	return Request{
		Op:     Op(b[0]),
		KeyLen: b[1],
		Flags:  be.Uint16(b[2:4]),
		ReqID:  be.Uint32(b[4:8]),
		Arg:    be.Uint64(b[8:16]),
	}, nil
}

// ParseRequest decodes one complete request from the start of b.
// It returns the request and the number of bytes it used; n == 0 with a nil
// error means b holds an incomplete frame (read more). Errors are those of
// RequestFrameLen except ErrShortFrame. It checks framing only; the field
// constraints of §2.1 are the server's (see ValidKey).
func ParseRequest(b []byte) (req Request, n int, err error) {
	if len(b) < HeaderLen {
		return req, 0, nil
	}
	n, err = RequestFrameLen(b)
	if err != nil {
		return req, 0, err
	}
	if len(b) < n {
		return req, 0, nil
	}
	req, _ = ParseRequestHeader(b)
	if req.Op == OpQuery || req.Op == OpAcquireSet || req.Op == OpReleaseSet {
		req.Body = b[HeaderLen:n:n]
	} else {
		req.Key = b[HeaderLen:n:n]
	}
	return req, n, nil
}

// Response is a decoded response (§3). Payload aliases the decoder's input.
type Response struct {
	Status  Status
	Code    Code
	Queued  uint16 // G: time waited in the queue, 16 ms units
	ReqID   uint32
	Value   uint64 // G: token; P: server time µs; M E J: payload length
	Payload []byte // M: leader address; E: message; J: JSON
}

// AppendResponseHeader appends a 16-byte response header.
func AppendResponseHeader(b []byte, st Status, code Code, queued uint16, reqID uint32, value uint64) []byte {
	b = append(b, byte(st), byte(code))
	b = be.AppendUint16(b, queued)
	b = be.AppendUint32(b, reqID)
	return be.AppendUint64(b, value)
}

// AppendGranted appends G with the fencing token and the queued field.
func AppendGranted(b []byte, reqID uint32, token uint64, queued uint16) []byte {
	return AppendResponseHeader(b, StatusGranted, CodeNone, queued, reqID, token)
}

// AppendStatus appends a payload-less response (T B O N U) with a code.
func AppendStatus(b []byte, st Status, code Code, reqID uint32) []byte {
	return AppendResponseHeader(b, st, code, 0, reqID, 0)
}

// AppendPong appends P with the server wall clock in µs since the Unix epoch.
func AppendPong(b []byte, reqID uint32, unixUS uint64) []byte {
	return AppendResponseHeader(b, StatusPong, CodeNone, 0, reqID, unixUS)
}

// AppendError appends E with code and a message. The payload is always valid
// UTF-8 of at most 1,024 bytes (§3): each byte of msg that is not part of a
// valid UTF-8 sequence becomes U+FFFD, and a message that is too long is cut
// at the last whole character that fits.
func AppendError(b []byte, reqID uint32, code Code, msg string) []byte {
	start := len(b)
	b = AppendResponseHeader(b, StatusError, code, 0, reqID, 0)
	b = appendUTF8Prefix(b, msg, MaxErrorPayload)
	be.PutUint64(b[start+8:start+HeaderLen], uint64(len(b)-start-HeaderLen))
	return b
}

// appendUTF8Prefix appends s to b as valid UTF-8 of at most limit bytes:
// invalid bytes become U+FFFD and the text is cut on a character boundary.
// It does not allocate when b has room.
func appendUTF8Prefix(b []byte, s string, limit int) []byte {
	if len(s) <= limit && utf8.ValidString(s) {
		return append(b, s...)
	}
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		chunk := s[i : i+size]
		if r == utf8.RuneError && size == 1 {
			chunk = "\uFFFD"
		}
		if n+len(chunk) > limit {
			break
		}
		b = append(b, chunk...)
		n += len(chunk)
		i += size
	}
	return b
}

// AppendMoved appends M with the leader's client address "host:port" (§3).
// An empty leader means no leader is known. An address longer than 255 bytes
// cannot be sent (a cut one would name another host), so it is sent as empty.
func AppendMoved(b []byte, reqID uint32, leader string) []byte {
	if len(leader) > MaxMovedPayload {
		leader = ""
	}
	b = AppendResponseHeader(b, StatusMoved, CodeNone, 0, reqID, uint64(len(leader)))
	return append(b, leader...)
}

// AppendAdmin appends J with a JSON object payload. The caller keeps it ≤ 16 MiB.
func AppendAdmin(b []byte, reqID uint32, json []byte) []byte {
	b = AppendResponseHeader(b, StatusAdmin, CodeNone, 0, reqID, uint64(len(json)))
	return append(b, json...)
}

// ResponseFrameLen returns the full length of the response whose 16-byte
// header starts b: 16, plus the payload length for the statuses that carry
// one (§3); the twin of RequestFrameLen. Errors: ErrShortFrame (fewer than 16
// bytes), ErrBadStatus, ErrPayloadTooLarge (both fatal to the stream).
func ResponseFrameLen(b []byte) (int, error) {
	if len(b) < HeaderLen {
		return 0, ErrShortFrame
	}
	st := Status(b[0])
	if !st.Valid() {
		return 0, ErrBadStatus
	}
	if !st.HasPayload() {
		return HeaderLen, nil
	}
	v := be.Uint64(b[8:16])
	if v > uint64(st.MaxPayload()) {
		return 0, ErrPayloadTooLarge
	}
	return HeaderLen + int(v), nil
}

// ParseResponse decodes one complete response from the start of b. n == 0 with
// a nil error means b holds an incomplete frame. Errors: ErrBadStatus,
// ErrPayloadTooLarge (both fatal: the stream cannot be resynchronized).
func ParseResponse(b []byte) (resp Response, n int, err error) {
	if len(b) < HeaderLen {
		return resp, 0, nil
	}
	n, err = ResponseFrameLen(b)
	if err != nil {
		return Response{}, 0, err
	}
	if len(b) < n {
		return Response{}, 0, nil
	}
	resp = Response{
		Status: Status(b[0]),
		Code:   Code(b[1]),
		Queued: be.Uint16(b[2:4]),
		ReqID:  be.Uint32(b[4:8]),
		Value:  be.Uint64(b[8:16]),
	}
	if !resp.Status.HasPayload() {
		return resp, HeaderLen, nil
	}
	resp.Payload = b[HeaderLen:n:n]
	return resp, n, nil
}

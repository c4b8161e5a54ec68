package client

import (
	"errors"

	"github.com/ticketing/ticketing/client/wire"
)

// Sentinel errors. Every error the client returns wraps one of them (or is a
// *BusyError or *ProtocolError), so callers branch with errors.Is and
// errors.As. Errors also name the operation and, for lock operations, the key.
var (
	// ErrTimeout: the acquire was answered T — its wait elapsed (or wait was
	// 0 and the key was held). The lock was not acquired.
	ErrTimeout = errors.New("ticketing: timed out, not acquired")

	// ErrBusy: the server answered B — definitely not acquired and not
	// queued. errors.As gives the *BusyError with the reason.
	ErrBusy = errors.New("ticketing: busy, not acquired")

	// ErrIndeterminate: the request was written but no definite answer came
	// back (the connection was lost, or a cluster answered U). For an
	// acquire: the lock may have been granted; the caller MUST NOT enter the
	// critical section; the lease ends it at the latest. For a release: the
	// release was not confirmed; the lock may still be held until its lease
	// ends.
	ErrIndeterminate = errors.New("ticketing: outcome unknown")

	// ErrNotHolder: the server answered N to a release — the key is free or
	// the token is not the current holder's (the lease may have expired).
	ErrNotHolder = errors.New("ticketing: not the holder")

	// ErrAuth: the server rejected the handshake (AUTH_FAILED or
	// BAD_HANDSHAKE), or it failed to prove the token (an impostor, or a
	// server configured without the token).
	ErrAuth = errors.New("ticketing: authentication failed")

	// ErrConnect: no connection to any server could be established (by Dial
	// within its timeout, or by an operation waiting for one). Nothing was
	// sent; the operation did not happen.
	ErrConnect = errors.New("ticketing: cannot connect")

	// ErrNoLeader: a cluster answered M (not the leader) more often than the
	// client follows (protocol.md §7) within the wait budget; nothing was
	// executed.
	ErrNoLeader = errors.New("ticketing: no leader")

	// ErrInvalidArgument: a key, lease or wait the server would reject
	// (checked before anything is sent).
	ErrInvalidArgument = errors.New("ticketing: invalid argument")

	// ErrClosed: the Client was closed. Nothing was sent.
	ErrClosed = errors.New("ticketing: client closed")

	// ErrTLS: the TLS handshake failed (certificate verification), or TLS
	// is configured on one side only: "the server requires TLS" (a
	// plaintext client, protocol.md §12.4), "the server does not speak
	// TLS" (a TLS client). A configuration error: calls waiting for a
	// connection fail with it at once (edge rule R5).
	ErrTLS = errors.New("ticketing: TLS")

	// ErrInsufficientLease: the acquire was granted, but less of the lease
	// was left than its MinRemaining (a long queue or a slow answer ate
	// it); the client released the lock at once (edge rule R14).
	ErrInsufficientLease = errors.New("ticketing: insufficient lease")
)

// BusyError is the reason of a B answer (protocol.md §3, §4): QUEUE_FULL,
// OVERLOADED, CLOCK_UNHEALTHY, SHUTTING_DOWN or NO_QUORUM.
// errors.Is(err, ErrBusy) is true for it.
type BusyError struct {
	Code wire.Code
}

func (e *BusyError) Error() string { return "ticketing: busy (" + e.Code.String() + "), not acquired" }

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// ProtocolError is an E answer: the server found the request invalid
// (protocol.md §2.1) and changed nothing.
type ProtocolError struct {
	Code wire.Code
	Msg  string
}

func (e *ProtocolError) Error() string {
	if e.Msg == "" {
		return "ticketing: server error " + e.Code.String()
	}
	return "ticketing: server error " + e.Code.String() + ": " + e.Msg
}

// RejectError is a handshake REJECT (protocol.md §1.3). For AUTH_FAILED and
// BAD_HANDSHAKE errors.Is(err, ErrAuth) is true; for OVERLOADED and
// SHUTTING_DOWN errors.Is(err, ErrBusy) is true.
type RejectError struct {
	Code wire.Code
}

func (e *RejectError) Error() string {
	return "ticketing: handshake rejected (" + e.Code.String() + ")"
}

// Is maps the reject code to ErrAuth or ErrBusy.
func (e *RejectError) Is(target error) bool {
	switch target {
	case ErrAuth:
		return e.Code == wire.CodeAuthFailed || e.Code == wire.CodeBadHandshake
	case ErrBusy:
		return e.Code == wire.CodeOverloaded || e.Code == wire.CodeShuttingDown
	}
	return false
}

// OpError is what the operations return: the operation, the key (empty for
// ping and admin), the server address and the cause, one of the errors
// above or a context error (edge rule R15: every error names the key and
// the server).
type OpError struct {
	Op   string // "acquire", "release", "ping", "admin", "dial"
	Key  string
	Addr string // the server that answered, or the addresses tried ("a, b")
	Err  error
}

func (e *OpError) Error() string {
	s := e.Op
	if e.Key != "" {
		s += " " + quote(e.Key)
	}
	if e.Addr != "" {
		s += " at " + e.Addr
	}
	return s + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

func opErr(op, key string, err error) error { return &OpError{Op: op, Key: key, Err: err} }

func opErrAt(op, key, addr string, err error) error {
	return &OpError{Op: op, Key: key, Addr: addr, Err: err}
}

// quote is a cheap %q for keys (valid UTF-8 without control characters).
func quote(s string) string { return `"` + s + `"` }

// joinErr is an error that matches two sentinels (errors.Is with either):
// e.g. ErrIndeterminate and context.Canceled.
type joinErr struct {
	a, b error
}

func (e *joinErr) Error() string   { return e.a.Error() + ": " + e.b.Error() }
func (e *joinErr) Unwrap() []error { return []error{e.a, e.b} }

func both(a, b error) error { return &joinErr{a, b} }

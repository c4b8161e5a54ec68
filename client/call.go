package client

import (
	"sync"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// failKind says why a call ended without an answer.
type failKind uint8

const (
	failNone   failKind = iota // answered: status etc. are valid
	failUnsent                 // never handed to the socket: definitely not executed, safe to retry
	failLost                   // handed to the socket, no answer: maybe executed
)

// owner says who consumes a call's completion.
type owner uint8

const (
	ownerCaller    owner = iota // the goroutine that sent it waits on done
	ownerAbandoned              // nobody: the reader drops it (compensating a grant)
	ownerReleaser               // the background releaser
	ownerDropped                // nobody, and nothing to do: a release given up (not counted by Drain)
)

// call is one request in flight on a connection. Calls come from a pool; a
// call is owned by exactly one party at a time:
//   - the sender until conn.enqueue succeeds;
//   - then the connection (its pending map) until the answer or the
//     connection's loss completes it;
//   - then its owner (see owner), which returns it to the pool.
//
// Fields marked "cn.mu" may change only while the call is pending, under its
// connection's mutex.
type call struct {
	// Request, set by the sender.
	op     wire.Op
	key    string
	arg    uint64        // the request arg: A wire.AcquireArg; R the token; C wire.CancelArg
	body   []byte        // Q
	counts bool          // an acquire that may queue: holds one of max_inflight while outstanding
	keys   []string      // S, X: the key set (protocol.md §12.2)
	need   wire.Features // features the connection must announce (§12.1); else the call fails ErrUnsupported

	// Set by conn.enqueue.
	cn    *conn
	reqID uint32
	seq   uint64    // frame number on its connection, to tell written from unsent
	sent  time.Time // t_send for A and P: read just before the frame is queued for writing

	pending bool    // cn.mu: in cn.pending
	owner   owner   // cn.mu
	job     *relJob // cn.mu: with ownerReleaser

	// Result, written by the completer before it hands the call to its owner.
	status  wire.Status
	code    wire.Code
	queued  uint16
	value   uint64
	payload []byte // M E J, copied out of the read buffer
	fail    failKind
	failErr error // the connection error for failUnsent/failLost

	done chan struct{} // capacity 1; one send per completion with ownerCaller
	t    *time.Timer   // reused with the call (see after)
}

// after returns a channel that fires in d, reusing the call's timer.
func (c *call) after(d time.Duration) <-chan time.Time {
	if c.t == nil {
		c.t = time.NewTimer(d)
	} else {
		c.t.Reset(d)
	}
	return c.t.C
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall() *call { return callPool.Get().(*call) }

func putCall(c *call) {
	done, t := c.done, c.t
	if t != nil {
		t.Stop()
	}
	*c = call{done: done, t: t}
	callPool.Put(c)
}

// fits reports whether status is a possible answer to op (protocol.md §3).
// Anything else is a protocol violation that ends the connection.
func fits(op wire.Op, st wire.Status) bool {
	if st == wire.StatusError {
		return true
	}
	switch op {
	case wire.OpAcquire, wire.OpAcquireSet:
		switch st {
		case wire.StatusGranted, wire.StatusTimeout, wire.StatusBusy, wire.StatusMoved, wire.StatusUnknown:
			return true
		}
	case wire.OpRelease, wire.OpCancel, wire.OpReleaseSet:
		switch st {
		case wire.StatusReleased, wire.StatusNotHolder, wire.StatusMoved, wire.StatusUnknown:
			return true
		}
	case wire.OpPing:
		return st == wire.StatusPong
	case wire.OpQuery:
		return st == wire.StatusAdmin || st == wire.StatusMoved
	}
	return false
}

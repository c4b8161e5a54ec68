// Package client is the Go client of the Ticketing lock server.
//
// A Client keeps persistent, pipelined connections to one server or to the
// nodes of a cluster (following the leader), and is shared by any number of
// goroutines:
//
//	cl, err := client.Dial(ctx, []string{"127.0.0.1:7470"}, client.WithToken(token))
//	...
//	lock, err := cl.Acquire(ctx, "orders/42", 30*time.Second, 5*time.Second)
//	if err != nil { ... }          // not acquired (see below)
//	defer lock.Release(context.Background())
//	store.Write(lock.Token(), ...) // fenced by the token
//
// # The safety contract
//
// You hold the lock from the moment Acquire returns a *Lock until the
// earlier of Lock.Deadline and your call to Release. Nothing else means you
// hold it: any error from Acquire means you must not enter the critical
// section.
//
// Deadline is conservative: it is the local time taken just before the
// acquire was written, plus the time the server reports the request waited
// in the key's queue, plus the lease. The server cannot end the lease
// before it, even after a long wait in the queue (protocol.md §5). Clocks
// tick at slightly different rates, so stop work a small margin before it;
// Lock.Done is closed at the deadline (or on Release) to make that easy.
// The client never extends a lease: a holder that needs longer must be done
// by its deadline, or use a longer lease.
//
// Fencing. A process can pause (GC, swap, a stopped VM) past its deadline
// and wake up believing it still holds the lock. Every grant carries a
// fencing token (Lock.Token) strictly greater than every token issued
// before it, across all keys, restarts and leader changes. Pass the token
// to every resource the lock protects; the resource must remember the
// highest token it has accepted and reject any lower one, and that check
// and the write must happen in one transaction (or one conditional write).
// Then a stale holder cannot overwrite the work of a newer one.
// ExampleLock_Token shows the pattern.
//
// ErrIndeterminate means the client cannot know what happened: an acquire
// or release was written to the connection but no definite answer came
// back (the connection was lost, or a cluster leader lost leadership before
// the commit was confirmed). After an indeterminate acquire the lock may be
// held in your name, but you do not have it: do not enter the critical
// section; the lease ends it. After an indeterminate release the lock may
// still be held until its lease ends. The client never converts an
// indeterminate outcome into success: a release returns nil only after the
// server answered "released".
//
// # Behaviour
//
//   - One persistent connection per address (two when Dial is given a single
//     address), reconnected in the background with exponential backoff
//     (0.1 s doubling to 3.2 s, each delay drawn uniformly from zero to its
//     step: full jitter) until Close. A dead connection never breaks the Client.
//   - Requests go to the known leader first (learned from "moved" answers),
//     else round robin. Requests are pipelined; answers are matched by
//     req_id, and a req_id is never reused while its request is outstanding.
//   - An acquire is retried only when it was never written or the answer was
//     "moved" (not executed), within the remaining wait, which the retry
//     carries. A "busy" answer returns ErrBusy at once.
//   - When ctx ends while an acquire waits in the server's queue, Acquire
//     returns ctx's error at once and withdraws the waiter with a cancel; if
//     the grant won that race, the client releases the lock itself.
//   - Releases are retried until they get a definite answer, for at most 5 s
//     after they were requested; a release abandoned by its caller's ctx and
//     those compensating releases go on in a bounded background queue.
//   - During an election (no node names a leader: 3 "moved" answers in a
//     row, or a lost connection before a release's retry) a call backs off
//     25 ms doubling to 200 ms, jittered, and tries again at once (once per
//     call) when any call of the Client learns the new leader: every caller
//     follows a failover within about a round trip of the first.
//   - The server's max_inflight (queued acquires per connection) is
//     respected: an acquire that could queue waits client-side for a free
//     slot within its wait budget (ErrTimeout when the budget runs out).
//   - The edge rules of architecture.md "Client library behaviour": an
//     acquire's wait bounds the whole call, connecting included (no
//     connection in time: ErrConnect, nothing tried); an acquire written and
//     unanswered past its wait plus the answer allowance (WithAnswerAllowance,
//     3 s) ends ErrIndeterminate and is withdrawn; an authentication or TLS
//     failure of every connection fails waiting calls at once (ErrAuth,
//     ErrTLS); a second Lock.Release is a no-op; a closed Client answers
//     ErrClosed, also to a release; Lock.Ending(margin) signals the lease's
//     end; MinRemaining refuses a grant with too little lease left
//     (ErrInsufficientLease); errors name the key and the server address.
//
// Errors wrap the sentinels of this package (ErrTimeout, ErrBusy,
// ErrIndeterminate, ErrNotHolder, ErrAuth, ErrConnect, ErrClosed …) and
// carry the operation and key (*OpError); branch with errors.Is and
// errors.As.
package client

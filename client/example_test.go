package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/server"
)

// startExampleServer runs an in-process single-node server on a free
// loopback port. In production, Dial the addresses of your server or of your
// cluster's nodes instead.
func startExampleServer() *server.Server {
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	srv, err := server.Start(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	return srv
}

func ExampleClient_Acquire() {
	srv := startExampleServer()
	defer srv.Close()

	ctx := context.Background()
	cl, err := client.Dial(ctx, []string{srv.Addr()})
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrConnect) or client.ErrAuth
	}
	defer cl.Close()

	// Wait up to 5 s for the lock; hold it for at most 30 s.
	lock, err := cl.Acquire(ctx, "reports/daily", 30*time.Second, 5*time.Second)
	switch {
	case errors.Is(err, client.ErrTimeout):
		fmt.Println("someone else is running the report")
		return
	case err != nil:
		// ErrBusy, ErrIndeterminate, a context error …: not acquired.
		// Never enter the critical section without a *Lock.
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	// The critical section must end before lock.Deadline();
	// lock.Done() is closed then.
	fmt.Println("holding", lock.Key(), "until", time.Until(lock.Deadline()) > 29*time.Second)

	// Meanwhile nobody else gets it: a try-once acquire times out at once.
	_, err = cl.TryAcquire(ctx, "reports/daily", 30*time.Second)
	fmt.Println("second acquire timed out:", errors.Is(err, client.ErrTimeout))
	// Output:
	// holding reports/daily until true
	// second acquire timed out: true
}

// store stands for the database a lock protects. It fences writes by token:
// it remembers the highest token it has accepted per record and rejects a
// lower one. The high-water check and the business write happen in one
// transaction (here: under one mutex; in SQL: one UPDATE … WHERE token <= ?,
// or a transaction).
type store struct {
	mu   sync.Mutex
	high map[string]uint64 // highest fencing token accepted, per record
	data map[string]string
}

var errStaleToken = errors.New("rejected: stale fencing token")

// Write is the conditional write.
func (s *store) Write(record string, token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.high[record] {
		return errStaleToken
	}
	s.high[record] = token
	s.data[record] = value
	return nil
}

// A holder that stalls past its lease (a GC pause, a stopped VM) cannot
// overwrite the work of the next holder: the resource checks the token.
func ExampleLock_Token() {
	srv := startExampleServer()
	defer srv.Close()
	ctx := context.Background()
	cl, err := client.Dial(ctx, []string{srv.Addr()})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	db := &store{high: map[string]uint64{}, data: map[string]string{}}

	// Worker A gets the lock with a short lease, then stalls past it.
	a, err := cl.Acquire(ctx, "invoice/7", 100*time.Millisecond, 0)
	if err != nil {
		log.Fatal(err)
	}
	<-a.Done() // A's lease is over, but A does not notice in time.

	// Worker B gets the lock once the lease has expired, and writes.
	b, err := cl.Acquire(ctx, "invoice/7", 30*time.Second, 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("B writes:", db.Write("invoice/7", b.Token(), "paid by B"))

	// A wakes up and writes with its old token: the store refuses.
	fmt.Println("A writes:", db.Write("invoice/7", a.Token(), "paid by A"))
	fmt.Println("record:", db.data["invoice/7"])

	b.Release(ctx)
	// Output:
	// B writes: <nil>
	// A writes: rejected: stale fencing token
	// record: paid by B
}

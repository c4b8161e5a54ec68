package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
)

type fakeFuture struct {
	err   error
	ready chan struct{}
}

func (f fakeFuture) Error() error  { <-f.ready; return f.err }
func (f fakeFuture) Index() uint64 { return 0 }
func (f fakeFuture) Response() any { return nil }

// One goroutine answers every entry in flight, in log order: a failed
// entry's lock requests get their M/U answers and every entry's in-flight
// slot is freed once its future answers (not before).
func TestWaitFlightsAnswersInOrderAndFreesSlots(t *testing.T) {
	const inc = 9
	var got effects
	p := newProposer(&Node{incarnation: inc, out: &got})
	p.mu.Lock()
	p.running = true // this test plays run: it closes flights
	p.mu.Unlock()
	ok, lost := fakeFuture{ready: make(chan struct{})}, fakeFuture{err: raft.ErrNotLeader, ready: make(chan struct{})}
	for i, f := range []fakeFuture{ok, lost} {
		p.sem <- struct{}{}
		p.flights <- flight{f: f, data: AppendBatch(nil, &Batch{Cmds: []Command{{Op: OpAcquire, Conn: ConnID(inc, 1), ReqID: uint32(i + 1), Key: []byte("k")}}})}
	}
	time.Sleep(10 * time.Millisecond)
	if len(p.sem) != 2 {
		t.Fatalf("%d slots taken before any future answered, want 2", len(p.sem))
	}
	close(lost.ready) // the later entry answers first: still waited for in order
	close(ok.ready)
	close(p.flights)
	p.close()
	if len(p.sem) != 0 {
		t.Fatalf("%d slots still taken", len(p.sem))
	}
	if len(got) != 1 || got[0].Owner.ReqID != 2 || got[0].Status != wire.StatusMoved {
		t.Fatalf("answers %+v, want one M for req 2", got)
	}
}

// close returns when run never started (a node whose bootstrap failed):
// nothing is in flight, so waitFlights must not wait for run to end.
func TestProposerCloseWithoutRun(t *testing.T) {
	p := newProposer(&Node{})
	done := make(chan struct{})
	go func() { p.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close hung without run")
	}
	p.n.wg.Add(1)
	p.run() // after close, run returns at once (and does not close flights twice)
}

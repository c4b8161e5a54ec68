package cluster

import (
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// Group commit: commands from every connection are gathered into one raft
// entry of up to maxBatch commands, with up to maxInflight entries in
// flight, so the cluster is not one round trip per operation (issue #7
// notes: the in-flight cap matters more than raft's own batching knobs).
//
// Before it takes a batch, the proposer yields to the connection readers
// (up to lingerYields times, while the queue still grows): the answers of
// one entry reach the clients together and their next requests arrive as
// a burst across all connections; proposing at the first of them cut each
// burst into ~8 entries of ~60 commands, and every extra entry costs a
// raft round on every node (docs/benchmarks.md "Cluster throughput and
// memory": 3× the commands per entry and ~25 % less CPU per op).
// runtime.Gosched costs nothing when no reader is runnable.
const (
	maxBatch     = 1024
	maxInflight  = 8
	lingerYields = 4
)

type proposer struct {
	n       *Node
	mu      sync.Mutex
	pending []Command
	spare   []Command // mu: the queue's other slice (run swaps them)
	kick    chan struct{}
	sem     chan struct{} // one token per entry in flight
	flights chan flight   // entries in flight, in log order (waitFlights)
	running bool          // mu: run started (it closes flights when it ends)
	closed  bool          // mu: close was called
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup // waitFlights
}

// flight is one proposed entry whose future is not answered yet.
type flight struct {
	f    raft.ApplyFuture
	data []byte // the entry: decoded again only when it failed
}

func newProposer(n *Node) *proposer {
	p := &proposer{n: n, kick: make(chan struct{}, 1), sem: make(chan struct{}, maxInflight),
		flights: make(chan flight, maxInflight), done: make(chan struct{})}
	p.wg.Add(1)
	go p.waitFlights()
	return p
}

func (p *proposer) add(cmds []Command) {
	p.mu.Lock()
	p.pending = append(p.pending, cmds...)
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// idle reports whether no command is queued or in flight.
func (p *proposer) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending) == 0 && len(p.sem) == 0
}

// dropPending answers M to every queued, never-proposed lock command: it
// was definitely not executed (the node stopped leading before proposing it).
func (p *proposer) dropPending() {
	p.mu.Lock()
	cmds := p.pending
	p.pending = nil
	p.mu.Unlock()
	p.fail(cmds, raft.ErrNotLeader)
}

// close stops run and waits until every entry in flight was answered.
func (p *proposer) close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		running := p.running
		p.mu.Unlock()
		close(p.done)
		if !running {
			close(p.flights) // run never started (or never will): nothing to wait for
		}
	})
	p.wg.Wait()
}

func (p *proposer) run() {
	defer p.n.wg.Done()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.running = true
	p.mu.Unlock()
	defer close(p.flights)
	for {
		select {
		case <-p.done:
			p.failAll()
			return
		case <-p.kick:
		}
		for {
			// Take an in-flight slot first: while all are taken, commands
			// keep gathering into the next, larger batch.
			select {
			case p.sem <- struct{}{}:
			case <-p.done:
				p.failAll()
				return
			}
			p.linger()
			p.mu.Lock()
			n := min(len(p.pending), maxBatch)
			if n == 0 {
				p.mu.Unlock()
				<-p.sem
				break
			}
			// The queue is swapped for the spare one (no copy) unless it
			// holds more than one batch.
			var cmds []Command
			if n == len(p.pending) {
				cmds, p.pending = p.pending, p.spare[:0]
			} else {
				cmds = append(p.spare[:0], p.pending[:n]...)
				rest := copy(p.pending, p.pending[n:])
				clear(p.pending[rest:])
				p.pending = p.pending[:rest]
			}
			p.spare = nil
			p.mu.Unlock()
			b := Batch{Time: p.n.now().UnixNano(), Cmds: cmds}
			data := AppendBatch(nil, &b)
			clear(cmds) // the keys: the entry has its own copy
			p.mu.Lock()
			p.spare = cmds[:0]
			p.mu.Unlock()
			// Never blocks: flights has room for every slot of sem.
			p.flights <- flight{f: p.n.raft.Apply(data, 5*time.Second), data: data}
		}
	}
}

// linger yields to the connection readers while the queue grows (at most
// lingerYields times, and not once a full batch waits), so a burst of
// requests goes into one entry (see maxBatch).
func (p *proposer) linger() {
	last := -1
	for range lingerYields {
		p.mu.Lock()
		n := len(p.pending)
		p.mu.Unlock()
		if n == last || n >= maxBatch {
			return
		}
		last = n
		runtime.Gosched()
	}
}

// waitFlights answers the entries in flight in log order (raft answers
// their futures in that order): it frees the entry's slot and, when raft
// reports a failure, answers its lock requests (fail). One goroutine for
// all the entries in flight, where there was one per entry.
func (p *proposer) waitFlights() {
	defer p.wg.Done()
	for fl := range p.flights {
		err := fl.f.Error()
		<-p.sem
		if err != nil {
			b, _ := DecodeBatch(fl.data) // made by AppendBatch: decodes
			p.fail(b.Cmds, err)
		}
	}
}

func (p *proposer) failAll() {
	p.mu.Lock()
	cmds := p.pending
	p.pending = nil
	p.mu.Unlock()
	p.fail(cmds, raft.ErrRaftShutdown)
}

// fail answers the lock requests of an entry whose commit was not
// confirmed: M when raft says it was never appended (definitely not
// executed), U otherwise (protocol.md §3, §7). The server drops an answer
// for a request already answered (an entry applied before the error).
func (p *proposer) fail(cmds []Command, err error) {
	st := wire.StatusUnknown
	if errors.Is(err, raft.ErrNotLeader) {
		st = wire.StatusMoved
	}
	for _, c := range cmds {
		switch c.Op {
		case OpAcquire, OpRelease, OpCancel, OpAcquireSet, OpReleaseSet:
			if IncarnationOf(c.Conn) == p.n.incarnation {
				p.n.out.Deliver(locktable.Effect{Owner: locktable.Owner{Conn: c.Conn, ReqID: c.ReqID}, Status: st})
			}
		}
	}
}

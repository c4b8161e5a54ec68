package cluster

import (
	"errors"
	"runtime"
	"sync"

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
//
// A command is encoded into the queue as it is submitted (the entry's
// encoding, appendCommand), so the key goes from the connection's read
// buffer into the queue and from there into the entry: no per-command
// allocation, and an entry is one copy of the queue (issue 35).
const (
	maxBatch     = 1024
	maxInflight  = 8
	lingerYields = 4
	// maxSpare: a queue buffer larger than this (after a burst of timer
	// commands, say) is dropped rather than kept for reuse.
	maxSpare = 256 << 10
)

type proposer struct {
	n       *Node
	mu      sync.Mutex
	pending []byte // mu: the queued commands, encoded (appendCommand)
	npend   int    // mu: how many commands pending holds
	spare   []byte // mu: the queue's other buffer (run swaps them)
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

// add queues cmds, encoded at once: their keys are not kept. Only the add
// that finds the queue empty kicks run: run waits for a kick only after it
// saw the queue empty (under mu), so a queue that was not empty already
// has its kick on the way, or run has yet to take it.
func (p *proposer) add(cmds []Command) {
	p.mu.Lock()
	was := p.npend
	for i := range cmds {
		p.pending = appendCommand(p.pending, &cmds[i])
	}
	p.npend += len(cmds)
	p.mu.Unlock()
	if was == 0 {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// idle reports whether no command is queued or in flight.
func (p *proposer) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.npend == 0 && len(p.sem) == 0
}

// takeAll empties the queue and returns its commands (decoded).
func (p *proposer) takeAll() []Command {
	p.mu.Lock()
	buf, n := p.pending, p.npend
	p.pending, p.npend = nil, 0
	p.mu.Unlock()
	if n == 0 {
		return nil
	}
	b, err := DecodeBatch(entryOf(buf, n, 0))
	if err != nil {
		panic("cluster: proposer queue: " + err.Error()) // encoded by add: cannot happen
	}
	return b.Cmds
}

// entryOf makes the log entry of the n encoded commands in cmds at time t,
// allocated to its exact size: raft keeps the entry's bytes in its log, so
// spare capacity would be held with them.
func entryOf(cmds []byte, n int, t int64) []byte {
	data := make([]byte, batchHeaderLen+len(cmds))
	putBatchHeader(data, t, n)
	copy(data[batchHeaderLen:], cmds)
	return data
}

// dropPending answers M to every queued, never-proposed lock command: it
// was definitely not executed (the node stopped leading before proposing it).
func (p *proposer) dropPending() {
	p.fail(p.takeAll(), raft.ErrNotLeader)
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
			n := min(p.npend, maxBatch)
			if n == 0 {
				p.mu.Unlock()
				<-p.sem
				break
			}
			var data []byte
			if n == p.npend {
				// The whole queue: swapped for the spare buffer, and the
				// entry made from it outside the lock.
				cmds := p.pending
				p.pending, p.npend, p.spare = p.spare[:0], 0, nil
				p.mu.Unlock()
				data = entryOf(cmds, n, p.n.now().UnixNano())
				p.mu.Lock()
				if cap(cmds) <= maxSpare {
					p.spare = cmds[:0]
				}
				p.mu.Unlock()
			} else {
				// More than one batch queued: the first maxBatch commands.
				k := commandsPrefix(p.pending, n)
				data = entryOf(p.pending[:k], n, p.n.now().UnixNano())
				p.pending = p.pending[:copy(p.pending, p.pending[k:])]
				p.npend -= n
				p.mu.Unlock()
			}
			// No enqueue timeout (it cost a timer per entry): raft takes
			// entries in every state (a follower answers ErrNotLeader),
			// applyCh holds MaxAppendEntries, more than are ever in flight,
			// and shutdown answers ErrRaftShutdown. Never blocks on
			// flights: it has room for every slot of sem.
			p.flights <- flight{f: p.n.raft.Apply(data, 0), data: data}
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
		n := p.npend
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
	p.fail(p.takeAll(), raft.ErrRaftShutdown)
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

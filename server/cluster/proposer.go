package cluster

import (
	"errors"
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
const (
	maxBatch    = 1024
	maxInflight = 8
)

type proposer struct {
	n       *Node
	mu      sync.Mutex
	pending []Command
	kick    chan struct{}
	sem     chan struct{}
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func newProposer(n *Node) *proposer {
	return &proposer{n: n, kick: make(chan struct{}, 1), sem: make(chan struct{}, maxInflight), done: make(chan struct{})}
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

func (p *proposer) close() {
	p.once.Do(func() { close(p.done) })
	p.wg.Wait()
}

func (p *proposer) run() {
	defer p.n.wg.Done()
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
			p.mu.Lock()
			n := min(len(p.pending), maxBatch)
			if n == 0 {
				p.mu.Unlock()
				<-p.sem
				break
			}
			cmds := make([]Command, n)
			copy(cmds, p.pending[:n])
			rest := copy(p.pending, p.pending[n:])
			clear(p.pending[rest:])
			p.pending = p.pending[:rest]
			p.mu.Unlock()
			b := Batch{Time: p.n.now().UnixNano(), Cmds: cmds}
			f := p.n.raft.Apply(AppendBatch(nil, &b), 5*time.Second)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				err := f.Error()
				<-p.sem
				if err != nil {
					p.fail(cmds, err)
				}
			}()
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
		case OpAcquire, OpRelease, OpCancel:
			if IncarnationOf(c.Conn) == p.n.incarnation {
				p.n.out.Deliver(locktable.Effect{Owner: locktable.Owner{Conn: c.Conn, ReqID: c.ReqID}, Status: st})
			}
		}
	}
}

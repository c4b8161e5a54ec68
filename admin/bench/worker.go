package bench

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ticketing/ticketing/client/wire"
)

// Slot states.
const (
	slotIdle    uint8 = iota // no request in flight, will send an acquire
	slotAcquire              // acquire in flight
	slotRelease              // release in flight
	slotDone                 // finished (stop, or fill mode out of keys)
)

// cancelBit marks the req_id of a cancel (C) sent while stopping, so it never
// equals its slot's outstanding acquire.
const cancelBit = 1 << 31

type slot struct {
	state     uint8
	hot       bool
	cancelled bool // a C was sent for the acquire in flight
	sentAt    int64
	seen      uint64 // fifo: highest token any slot had seen when this acquire was written
	token     uint64
	cursor    uint64 // next key of the slot's partition (pairs, fill)
	keyIdx    uint64
	key       [KeyLen]byte
}

// base is the generator's monotonic epoch.
var base = time.Now()

func mono() int64 { return int64(time.Since(base)) }

// Histogram range: 1 ns .. 1 h, 3 significant digits.
const (
	histMin = 1
	histMax = int64(time.Hour)
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, 3) }

// newWorkerHist is a worker's histogram: 3 significant digits (about
// 200 KiB each, mostly never touched) up to 256 connections, 2 beyond.
func newWorkerHist(conns int) *hdrhistogram.Histogram {
	if conns > 256 {
		return hdrhistogram.New(histMin, histMax, 2)
	}
	return newHist()
}

// shared is the state every worker of one run sees.
type shared struct {
	cfg      *Config
	leaseArg uint64 // acquire arg: wire.AcquireArg(lease_ms, wait_ms)
	total    uint64 // slots over all connections
	stop     atomic.Bool
	phase    atomic.Int32  // 0 warmup, 1 measuring
	ops      atomic.Uint64 // completed ops (G, T to an acquire; O, N to a release)
	refused  atomic.Uint64 // B, U and E answers: not ops, but they count toward --ops
	errs     atomic.Uint64
	tokens   []uint64 // fill: token of each key

	// fifo check (one hot key, waiting): the highest token seen by any
	// slot. Tokens rise by one per grant, so a grant's token minus the
	// highest token seen when its acquire was sent bounds the grants made
	// to others while it waited.
	fifo     bool
	maxToken atomic.Uint64
	// fifo: when each of the last grants was read, by token (a ring), so
	// the reader of grant t measures the gap since grant t-1: the time the
	// key went from one holder to the next, as the generator sees it. A
	// handoff chain reads its grants in token order (grant t needs the
	// release of t-1, sent after t-1 was read), so t-1 is in the ring.
	grants [grantRing]grantSeen
}

// grantRing is the number of recent grants the fifo check remembers.
const grantRing = 256

type grantSeen struct {
	token atomic.Uint64 // written after at
	at    atomic.Int64
}

// stranded is a granted lock whose release reached a node that was no
// longer the leader: still held there until it is released on the new
// leader (finish does) or its lease runs out.
type stranded struct {
	key   [KeyLen]byte
	token uint64
}

// worker drives one connection: all of its slots, one goroutine.
type worker struct {
	sh    *shared
	nc    net.Conn
	first uint64 // global index of slot 0
	slots []slot
	rbuf  []byte
	wbuf  []byte
	batch []uint32 // slots whose request is in wbuf (stamped at write time)
	rng   uint64

	phase     int32
	inflight  int
	cancels   int
	grantsNow int // grants in the current read batch (hold)

	hist      *hdrhistogram.Histogram // every op
	acqHist   *hdrhistogram.Histogram // acquires only (wait for a queued one)
	gapHist   *hdrhistogram.Histogram // fifo: time between consecutive grants (nil otherwise)
	ops       uint64                  // completed: G or T to an acquire, O or N to a release
	refused   uint64                  // B, U, E: answered, not completed
	redirects uint64                  // M: not the leader (the slot stops; never an op)
	movedTo   string                  // the leader the last M named ("" = none known)
	stranded  []stranded              // locks granted whose release was answered M
	acquires  uint64
	releases  uint64
	outcomes  [256]uint64 // by status byte
	busy      [32]uint64  // B by code
	errCodes  [32]uint64  // E by code
	cancelO   uint64
	cancelN   uint64
	errs      uint64
	writes    uint64 // write syscalls (batches sent)
	overtook  uint64 // fifo: most grants to others while one acquire waited
	maxQueued uint16 // fifo: longest time in the server's queue, 16 ms units (G header)
}

func newWorker(sh *shared, nc net.Conn, id int) *worker {
	p := sh.cfg.Pipeline
	w := &worker{
		sh:      sh,
		nc:      nc,
		first:   uint64(id * p),
		slots:   make([]slot, p),
		rbuf:    make([]byte, max(64<<10, 2*p*(wire.HeaderLen+wire.MaxErrorPayload))),
		wbuf:    make([]byte, 0, 2*p*(wire.HeaderLen+sh.cfg.SetSize*(1+KeyLen))),
		batch:   make([]uint32, 0, 2*p),
		rng:     splitmix(sh.cfg.Seed + uint64(id)*0x9E3779B97F4A7C15 + 1),
		hist:    newWorkerHist(sh.cfg.Conns),
		acqHist: newWorkerHist(sh.cfg.Conns),
	}
	if sh.fifo {
		w.gapHist = newWorkerHist(sh.cfg.Conns)
	}
	return w
}

func splitmix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

func (w *worker) rand() uint64 {
	// xorshift64*
	w.rng ^= w.rng >> 12
	w.rng ^= w.rng << 25
	w.rng ^= w.rng >> 27
	return w.rng * 2685821657736338717
}

// putKey writes "bench:" and idx as 10 decimal digits (16 bytes).
func putKey(k *[KeyLen]byte, idx uint64) {
	copy(k[:], "bench:")
	for i := KeyLen - 1; i >= 6; i-- {
		k[i] = byte('0' + idx%10)
		idx /= 10
	}
}

// putHotKey writes "bench:h" and idx as 9 decimal digits (16 bytes).
func putHotKey(k *[KeyLen]byte, idx uint64) {
	copy(k[:], "bench:h")
	for i := KeyLen - 1; i >= 7; i-- {
		k[i] = byte('0' + idx%10)
		idx /= 10
	}
}

// appendReq appends a 16-byte request header and the 16-byte key.
func appendReq(b []byte, op wire.Op, reqID uint32, key *[KeyLen]byte, arg uint64) []byte {
	b = wire.AppendRequestHeader(b, op, KeyLen, 0, reqID, arg)
	return append(b, key[:]...)
}

// A key set's member 0 is the slot's key. Its members j ≥ 1 are the keys j
// places further along the slot's own share of the key space (wrapping
// within it), so a set row touches the --keys keys a single-key row does
// (issue 35: a set row over twice the keys measured the idle key cache,
// not the sets), and no two slots' sets share a key. When the share holds
// fewer keys than a set (or the key is a hot one) member j is instead the
// key with byte setMark replaced by 'a'+j-1 ("bencha…").
const setMark = 5

// setSpan is how a set's members are chosen: the slots over all connections
// and the key-space size; zero: by setMark.
type setSpan struct{ total, keys uint64 }

// span is the setSpan of cfg's runs with total slots.
func span(cfg *Config, total uint64) setSpan {
	if uint64(cfg.Keys) < total || total == 0 {
		return setSpan{} // slots share keys: members by setMark
	}
	return setSpan{total: total, keys: uint64(cfg.Keys)}
}

// member writes into out member j ≥ 1 of the set whose member 0 is key.
func (sp setSpan) member(out, key *[KeyLen]byte, n, j int) {
	*out = *key
	if sp.total > 0 && key[setMark+1] != 'h' { // "bench:h…" is a hot key
		var idx uint64
		for _, d := range key[6:] {
			idx = idx*10 + uint64(d-'0')
		}
		g, c := idx%sp.total, idx/sp.total
		if m := (sp.keys - g + sp.total - 1) / sp.total; m >= uint64(n) {
			putKey(out, g+(c+uint64(j))%m*sp.total)
			return
		}
	}
	out[setMark] = 'a' + byte(j-1)
}

// appendSetReq appends an S or X frame (protocol.md §12.2) for the n-key set
// whose member 0 is key: the same bytes as wire.AppendAcquireSet and
// wire.AppendReleaseSet (TestSetFrames), without building a []string.
func appendSetReq(b []byte, op wire.Op, reqID uint32, key *[KeyLen]byte, n int, sp setSpan, arg uint64) []byte {
	b = wire.AppendRequestHeader(b, op, uint8(n), uint16(n*(1+KeyLen)), reqID, arg)
	b = append(b, KeyLen)
	b = append(b, key[:]...)
	var m [KeyLen]byte
	for j := 1; j < n; j++ {
		sp.member(&m, key, n, j)
		b = append(b, KeyLen)
		b = append(b, m[:]...)
	}
	return b
}

// appendAcquire appends slot key's acquire: A, or S for a set.
func appendAcquire(b []byte, setSize int, sp setSpan, reqID uint32, key *[KeyLen]byte, arg uint64) []byte {
	if setSize > 1 {
		return appendSetReq(b, wire.OpAcquireSet, reqID, key, setSize, sp, arg)
	}
	return appendReq(b, wire.OpAcquire, reqID, key, arg)
}

// appendRelease appends the release of key (or of its set) with token: R or X.
func appendRelease(b []byte, setSize int, sp setSpan, reqID uint32, key *[KeyLen]byte, token uint64) []byte {
	if setSize > 1 {
		return appendSetReq(b, wire.OpReleaseSet, reqID, key, setSize, sp, token)
	}
	return appendReq(b, wire.OpRelease, reqID, key, token)
}

// nextKey picks the key of slot i's next acquire; false when the slot has no
// key left (fill mode).
func (w *worker) nextKey(i int) bool {
	s := &w.slots[i]
	cfg := w.sh.cfg
	g := w.first + uint64(i)
	switch cfg.Mode {
	case ModeTry:
		s.keyIdx = w.rand() % uint64(cfg.Keys)
		s.hot = false
		putKey(&s.key, s.keyIdx)
		return true
	case ModeFill:
		k := g + s.cursor*w.sh.total
		if k >= uint64(cfg.Keys) {
			return false
		}
		s.cursor++
		s.keyIdx = k
		s.hot = false
		putKey(&s.key, k)
		return true
	}
	if cfg.HotKeys > 0 && (cfg.Contention >= 1 || float64(w.rand()>>11)/(1<<53) < cfg.Contention) {
		s.hot = true
		s.keyIdx = w.rand() % uint64(cfg.HotKeys)
		putHotKey(&s.key, s.keyIdx)
		return true
	}
	s.hot = false
	keys := uint64(cfg.Keys)
	if keys < w.sh.total {
		// fewer keys than slots: slots share keys (collisions answer T or queue)
		s.keyIdx = (g + s.cursor*w.sh.total) % keys
	} else {
		k := g + s.cursor*w.sh.total
		if k >= keys {
			s.cursor = 0
			k = g
		}
		s.keyIdx = k
	}
	s.cursor++
	putKey(&s.key, s.keyIdx)
	return true
}

// sendAcquire queues slot i's next acquire (or marks it done).
func (w *worker) sendAcquire(i int) {
	s := &w.slots[i]
	if w.sh.stop.Load() || !w.nextKey(i) {
		s.state = slotDone
		return
	}
	s.state = slotAcquire
	s.cancelled = false
	w.wbuf = appendAcquire(w.wbuf, w.sh.cfg.SetSize, span(w.sh.cfg, w.sh.total), uint32(i), &s.key, w.sh.leaseArg)
	w.batch = append(w.batch, uint32(i))
	w.inflight++
}

func (w *worker) sendRelease(i int) {
	s := &w.slots[i]
	s.state = slotRelease
	w.wbuf = appendRelease(w.wbuf, w.sh.cfg.SetSize, span(w.sh.cfg, w.sh.total), uint32(i), &s.key, s.token)
	w.batch = append(w.batch, uint32(i))
	w.inflight++
}

// start queues the first request of every slot.
func (w *worker) start() {
	for i := range w.slots {
		w.sendAcquire(i)
	}
}

var errProtocol = errors.New("bench: unexpected response")

// process handles every complete response in b (received at now), appending
// the follow-up requests to wbuf. It returns the bytes used.
func (w *worker) process(b []byte, now int64) (int, error) {
	off := 0
	for {
		resp, n, err := wire.ParseResponse(b[off:])
		if err != nil {
			return off, err
		}
		if n == 0 {
			return off, nil
		}
		off += n
		if err := w.handle(&resp, now); err != nil {
			return off, err
		}
	}
}

func (w *worker) handle(r *wire.Response, now int64) error {
	id := r.ReqID
	if id&cancelBit != 0 {
		i := id &^ cancelBit
		if int(i) >= len(w.slots) {
			return fmt.Errorf("%w: %c to req_id %d", errProtocol, r.Status, id)
		}
		w.cancels--
		if r.Status == wire.StatusReleased {
			w.cancelO++
		} else {
			w.cancelN++
		}
		return nil
	}
	if int(id) >= len(w.slots) {
		return fmt.Errorf("%w: %c to req_id %d", errProtocol, r.Status, id)
	}
	s := &w.slots[id]
	if r.Status == wire.StatusMoved {
		return w.moved(s, r)
	}
	lat := max(now-s.sentAt, histMin)
	if lat > histMax {
		lat = histMax
	}
	w.outcomes[r.Status]++
	w.inflight--
	completed := true
	switch r.Status {
	case wire.StatusBusy:
		w.busy[r.Code&31]++
		completed = false
	case wire.StatusUnknown:
		completed = false
	case wire.StatusError:
		w.errCodes[r.Code&31]++
		w.errs++
		completed = false
	}
	if completed {
		w.ops++
		_ = w.hist.RecordValue(lat)
	} else {
		w.refused++
	}
	switch s.state {
	case slotAcquire:
		if completed {
			w.acquires++
			_ = w.acqHist.RecordValue(lat)
		}
		if r.Status == wire.StatusGranted {
			s.token = r.Value
			if w.sh.fifo {
				w.fifoGrant(s, r.Value, now)
				w.maxQueued = max(w.maxQueued, r.Queued)
			}
			switch w.sh.cfg.Mode {
			case ModeFill:
				w.sh.tokens[s.keyIdx] = r.Value
			default:
				w.grantsNow++
				w.sendRelease(int(id))
				return nil
			}
		}
		w.sendAcquire(int(id))
	case slotRelease:
		if completed {
			w.releases++
		}
		w.sendAcquire(int(id))
	default:
		return fmt.Errorf("%w: %c to req_id %d, which has nothing in flight", errProtocol, r.Status, id)
	}
	return nil
}

// moved handles M (this node is not the leader): not an op, and the slot
// stops rather than repeat requests the node will only redirect. A release
// that met M leaves its lock held on the leader: it is remembered for
// finish to release there.
func (w *worker) moved(s *slot, r *wire.Response) error {
	switch s.state {
	case slotAcquire:
	case slotRelease:
		w.stranded = append(w.stranded, stranded{key: s.key, token: s.token})
	default:
		return fmt.Errorf("%w: M to req_id %d, which has nothing in flight", errProtocol, r.ReqID)
	}
	w.outcomes[wire.StatusMoved]++
	w.redirects++
	w.inflight--
	if len(r.Payload) > 0 && string(r.Payload) != w.movedTo {
		w.movedTo = string(r.Payload)
	}
	s.state = slotDone
	return nil
}

// fifoGrant records how many grants went to others while s waited, and the
// gap since the previous grant was read (received at now).
func (w *worker) fifoGrant(s *slot, token uint64, now int64) {
	if s.seen > 0 && token > s.seen+1 { // seen 0: sent before any grant was seen
		w.overtook = max(w.overtook, token-s.seen-1)
	}
	if prev := &w.sh.grants[(token-1)%grantRing]; prev.token.Load() == token-1 {
		_ = w.gapHist.RecordValue(min(max(now-prev.at.Load(), histMin), histMax))
	}
	g := &w.sh.grants[token%grantRing]
	g.at.Store(now)
	g.token.Store(token)
	for {
		m := w.sh.maxToken.Load()
		if token <= m || w.sh.maxToken.CompareAndSwap(m, token) {
			return
		}
	}
}

// lostConn is a worker's connection that failed mid-run (the server stopped,
// crashed or closed it): the run ends with what was measured until then
// (Result.Lost), not with an error and no report.
type lostConn struct {
	inflight int
	err      error
}

func (e *lostConn) Error() string {
	return fmt.Sprintf("connection lost with %d requests in flight: %v", e.inflight, e.err)
}

func (e *lostConn) Unwrap() error { return e.err }

// lose ends the worker on a failed connection: each lock whose release was
// in flight is remembered (stranded) for finish to release on the leader;
// an acquire in flight is undecided (granted or not, its lease ends it).
func (w *worker) lose(err error) error {
	for i := range w.slots {
		if s := &w.slots[i]; s.state == slotRelease {
			w.stranded = append(w.stranded, stranded{key: s.key, token: s.token})
		}
	}
	return &lostConn{inflight: w.inflight, err: err}
}

// cancelQueued sends C for every acquire in flight (stopping with wait > 0),
// so the run ends without waiting out queued acquires.
func (w *worker) cancelQueued() {
	for i := range w.slots {
		s := &w.slots[i]
		if s.state == slotAcquire && !s.cancelled {
			s.cancelled = true
			w.wbuf = appendReq(w.wbuf, wire.OpCancel, uint32(i)|cancelBit, &s.key, wire.CancelArg(uint32(i)))
			w.cancels++
		}
	}
}

// flush writes wbuf, stamping the send time of the batch's requests.
func (w *worker) flush() error {
	if len(w.wbuf) == 0 {
		return nil
	}
	if w.grantsNow > 0 && w.sh.cfg.Hold > 0 {
		time.Sleep(w.sh.cfg.Hold)
	}
	w.grantsNow = 0
	now := mono()
	var seen uint64
	if w.sh.fifo {
		seen = w.sh.maxToken.Load()
	}
	for _, i := range w.batch {
		w.slots[i].sentAt = now
		w.slots[i].seen = seen
	}
	w.batch = w.batch[:0]
	_, err := w.nc.Write(w.wbuf)
	w.wbuf = w.wbuf[:0]
	w.writes++
	return err
}

// resetStats drops what was counted during the warmup.
func (w *worker) resetStats() {
	w.hist.Reset()
	w.acqHist.Reset()
	if w.gapHist != nil {
		w.gapHist.Reset()
	}
	w.ops, w.refused, w.redirects, w.acquires, w.releases, w.errs, w.cancelO, w.cancelN, w.overtook, w.maxQueued, w.writes = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
	clear(w.outcomes[:])
	clear(w.busy[:])
	clear(w.errCodes[:])
}

// run is the connection's loop: write, read a batch, answer it, repeat, until
// stopped and nothing is in flight.
func (w *worker) run() error {
	w.phase = w.sh.phase.Load()
	w.start()
	cancelled := false
	r := 0
	for {
		if err := w.flush(); err != nil {
			return w.lose(err)
		}
		if w.inflight == 0 && w.cancels == 0 {
			return nil
		}
		n, err := w.nc.Read(w.rbuf[r:])
		now := mono()
		if n > 0 {
			r += n
			before, refusedBefore, errsBefore := w.ops, w.refused, w.errs
			used, perr := w.process(w.rbuf[:r], now)
			r = copy(w.rbuf, w.rbuf[used:r])
			if perr != nil {
				return perr
			}
			if ph := w.sh.phase.Load(); ph != w.phase {
				w.phase = ph
				w.resetStats()
			} else if w.phase == 1 {
				d, dr := w.ops-before, w.refused-refusedBefore
				if d > 0 || dr > 0 {
					// Refusals count toward --ops (a refusing server
					// cannot keep the run going), not as ops.
					n := w.sh.ops.Add(d)
					if dr > 0 {
						n += w.sh.refused.Add(dr)
					} else {
						n += w.sh.refused.Load()
					}
					if w.sh.cfg.Ops > 0 && n >= w.sh.cfg.Ops {
						w.sh.stop.Store(true)
					}
				}
				if d := w.errs - errsBefore; d > 0 {
					w.sh.errs.Add(d)
				}
			}
		}
		if err != nil {
			if w.inflight == 0 && w.cancels == 0 {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && w.sh.stop.Load() {
				// poked by Run at the stop: cancel what is queued, read on
				_ = w.nc.SetReadDeadline(time.Time{})
				err = nil
			}
		}
		if err != nil {
			return w.lose(err)
		}
		if !cancelled && w.sh.cfg.Wait > 0 && w.sh.stop.Load() {
			cancelled = true
			w.cancelQueued()
		}
	}
}

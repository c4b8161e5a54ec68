package clustertest

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Outcome is how a recorded operation ended, as the client saw it.
type Outcome uint8

// Outcomes. TimedOut and Refused had no effect on the lock table (T, or a
// request that was never executed: B, M beyond the client's hops, no
// connection); Unknown may or may not have taken effect (U, a connection
// lost after the request was written).
const (
	Granted Outcome = iota + 1
	Released
	NotHolder
	TimedOut
	Refused
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case Granted:
		return "granted"
	case Released:
		return "released"
	case NotHolder:
		return "not-holder"
	case TimedOut:
		return "timeout"
	case Refused:
		return "refused"
	case Unknown:
		return "indeterminate"
	}
	return "?"
}

// Op is one recorded acquire ('A') or release ('R'). Times are offsets from
// the history's start on the test's monotonic clock.
type Op struct {
	Worker   int
	Kind     byte
	Key      string
	Keys     []string      // a key set's keys (protocol.md §12.2; Key is the first); nil for one key
	Lease    time.Duration // acquire
	Token    uint64        // granted token (A) or released token (R)
	Call     time.Duration
	Return   time.Duration
	Deadline time.Duration // granted acquire: the client's conservative lease end (Lock.Deadline)
	Outcome  Outcome
	Err      string
}

func (o Op) String() string {
	k := o.Key
	if o.Keys != nil {
		k = "{" + strings.Join(o.Keys, ",") + "}"
	}
	if o.Kind == 'A' {
		return fmt.Sprintf("w%d acquire(%s, lease %v) [%v, %v] → %s %d %s", o.Worker, k, o.Lease, o.Call, o.Return, o.Outcome, o.Token, o.Err)
	}
	return fmt.Sprintf("w%d release(%s, %d) [%v, %v] → %s %s", o.Worker, k, o.Token, o.Call, o.Return, o.Outcome, o.Err)
}

// KeyList is the keys the operation names: its set's, or its one key.
func (o Op) KeyList() []string {
	if o.Keys != nil {
		return o.Keys
	}
	return []string{o.Key}
}

// History is a concurrent, append-only record of operations.
type History struct {
	Start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewHistory starts an empty history now.
func NewHistory() *History { return &History{Start: time.Now()} }

// Now is the current offset from the start.
func (h *History) Now() time.Duration { return time.Since(h.Start) }

// At converts an absolute time (with its monotonic reading) to an offset.
func (h *History) At(t time.Time) time.Duration { return t.Sub(h.Start) }

// Add records one completed operation.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the operations.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// GrantsAfter counts the granted acquires invoked after at.
func (h *History) GrantsAfter(at time.Duration) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, o := range h.ops {
		if o.Kind == 'A' && o.Outcome == Granted && o.Call > at {
			n++
		}
	}
	return n
}

// Counts tallies outcomes per kind, e.g. "A granted" → 12.
func (h *History) Counts() map[string]int {
	out := map[string]int{}
	for _, o := range h.Ops() {
		out[string(o.Kind)+" "+o.Outcome.String()]++
	}
	return out
}

// Summary is a one-line tally.
func (h *History) Summary() string {
	c := h.Counts()
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, c[k])
	}
	return strings.TrimSpace(b.String())
}

// Fence is the fenced resource the workload writes to: per key it keeps the
// highest token it accepted and rejects a lower one, check and write in one
// step (protocol.md §6). Holders write only before their lease deadline, so
// with mutual exclusion every write must be accepted: a rejected one means
// a newer holder had already written while an older one still held the lock.
type Fence struct {
	mu       sync.Mutex
	high     map[string]uint64
	accepted map[string][]uint64
	rejected []string
	late     int
}

// NewFence returns an empty resource.
func NewFence() *Fence { return &Fence{high: map[string]uint64{}, accepted: map[string][]uint64{}} }

// Write writes to key with token if now is before deadline (the holder's
// own check, done inside the resource's critical section so that it is
// exact) and reports whether the write happened.
func (f *Fence) Write(key string, token uint64, deadline time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !time.Now().Before(deadline) {
		f.late++
		return false
	}
	if token < f.high[key] {
		f.rejected = append(f.rejected, fmt.Sprintf("key %s: token %d rejected, %d already written", key, token, f.high[key]))
		return false
	}
	f.high[key] = token
	f.accepted[key] = append(f.accepted[key], token)
	return true
}

// Rejected returns the writes the resource rejected (each a violation).
func (f *Fence) Rejected() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.rejected...)
}

// Writes returns how many writes were accepted.
func (f *Fence) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, a := range f.accepted {
		n += len(a)
	}
	return n
}

// Violations runs every check on the history and returns what failed:
// porcupine linearizability of each key against the lock model (mutual
// exclusion considering leases, releases only by the holder, tokens
// increasing per key), tokens unique and increasing in real-time order
// across keys, holders' usage intervals disjoint per key. visualize, when
// not empty, is a directory for porcupine's HTML visualization of a failed
// check.
func (h *History) Violations(timeout time.Duration, visualize string) (violations []string, notes []string) {
	ops := h.Ops()
	violations = append(violations, checkTokens(ops)...)
	violations = append(violations, checkExclusion(ops)...)
	res, info := porcupine.CheckOperationsVerbose(LockModel(), PorcupineOps(ops), timeout)
	switch res {
	case porcupine.Illegal:
		msg := "porcupine: the history is not linearizable against the lock model"
		if visualize != "" {
			_ = os.MkdirAll(visualize, 0o755)
			path := filepath.Join(visualize, fmt.Sprintf("porcupine-%d.html", time.Now().UnixNano()))
			if err := porcupine.VisualizePath(LockModel(), info, path); err == nil {
				msg += " (visualization: " + path + ")"
			}
		}
		violations = append(violations, msg)
	case porcupine.Unknown:
		notes = append(notes, fmt.Sprintf("porcupine: check not finished within %v (%d ops)", timeout, len(ops)))
	}
	return violations, notes
}

// checkTokens: every granted token is unique, and a grant that returned
// before another was invoked has the lower token (protocol.md §6: strictly
// increasing across all keys and leader changes).
func checkTokens(ops []Op) []string {
	var out []string
	var grants []Op
	seen := map[uint64]Op{}
	for _, o := range ops {
		if o.Kind != 'A' || o.Outcome != Granted {
			continue
		}
		if o.Token == 0 {
			out = append(out, "token 0 granted: "+o.String())
		}
		if p, dup := seen[o.Token]; dup {
			out = append(out, fmt.Sprintf("token %d issued twice: %s; %s", o.Token, p, o))
		}
		seen[o.Token] = o
		grants = append(grants, o)
	}
	byReturn := append([]Op(nil), grants...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	byCall := append([]Op(nil), grants...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].Call < byCall[j].Call })
	// Sweep: for each grant in call order, the highest token among grants
	// that returned strictly before its call must be lower.
	var maxTok uint64
	var maxOp Op
	j := 0
	for _, b := range byCall {
		for j < len(byReturn) && byReturn[j].Return < b.Call {
			if byReturn[j].Token > maxTok {
				maxTok, maxOp = byReturn[j].Token, byReturn[j]
			}
			j++
		}
		if maxTok != 0 && b.Token <= maxTok {
			out = append(out, fmt.Sprintf("token order: %s was invoked after %s returned but has a lower token", b, maxOp))
		}
	}
	return out
}

// checkExclusion: per key, the intervals in which holders used the lock —
// from the grant's return to the earlier of the release's invocation and
// the client's deadline — never overlap.
func checkExclusion(ops []Op) []string {
	type iv struct {
		from, to time.Duration
		op       Op
	}
	release := map[string]time.Duration{} // key/token → release call
	for _, o := range ops {
		if o.Kind == 'R' {
			for _, key := range o.KeyList() {
				k := fmt.Sprintf("%s/%d", key, o.Token)
				if c, ok := release[k]; !ok || o.Call < c {
					release[k] = o.Call
				}
			}
		}
	}
	byKey := map[string][]iv{}
	for _, o := range ops {
		if o.Kind != 'A' || o.Outcome != Granted {
			continue
		}
		for _, key := range o.KeyList() {
			end := o.Deadline
			if c, ok := release[fmt.Sprintf("%s/%d", key, o.Token)]; ok && c < end {
				end = c
			}
			if end <= o.Return {
				continue // never used
			}
			byKey[key] = append(byKey[key], iv{o.Return, end, o})
		}
	}
	var out []string
	for _, ivs := range byKey {
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].from < ivs[j].from })
		if len(ivs) == 0 {
			continue
		}
		far := ivs[0] // the earlier interval reaching furthest
		for i := 1; i < len(ivs); i++ {
			if far.to > ivs[i].from {
				out = append(out, fmt.Sprintf("mutual exclusion: %s used until %v overlaps %s", far.op, far.to, ivs[i].op))
			}
			if ivs[i].to > far.to {
				far = ivs[i]
			}
		}
	}
	return out
}

// Porcupine lock model, one partition per group of keys that key sets
// link (every key of a set in the set's group; a key no set names is a
// group of its own). Times are ns offsets; an indeterminate operation never
// returns (Return = MaxInt64), so it may take effect at any point after its
// invocation, or (placed last) not at all.

type lockIn struct {
	kind  byte
	keys  []string // the keys it names (one, or a set's)
	token uint64   // release: the token released
	lease int64
	call  int64
	ret   int64
}

type lockOut struct {
	outcome Outcome
	token   uint64 // granted token
}

// lockState is one key's state.
type lockState struct {
	held   bool
	token  uint64 // holder's token; 0 = granted to an indeterminate acquire (unknown token)
	freeAt int64  // earliest instant the holder's lease can have ended
	last   uint64 // highest known token granted on the key
}

// keyState is one key of a group's state.
type keyState struct {
	key string
	s   lockState
}

// groupState is the state of a partition's keys: sorted by key, the keys in
// their initial state (free, no token yet) left out, so equal states are
// equal slices. Steps copy it.
type groupState []keyState

func (g groupState) get(key string) lockState {
	for _, ks := range g {
		if ks.key == key {
			return ks.s
		}
	}
	return lockState{}
}

// with returns a copy of g with key's state set to s.
func (g groupState) with(key string, s lockState) groupState {
	out := make(groupState, 0, len(g)+1)
	done := false
	for _, ks := range g {
		if !done && ks.key >= key {
			done = true
			if s != (lockState{}) {
				out = append(out, keyState{key, s})
			}
			if ks.key == key {
				continue
			}
		}
		out = append(out, ks)
	}
	if !done && s != (lockState{}) {
		out = append(out, keyState{key, s})
	}
	return out
}

// stepLock is the sequential specification of an operation on the keys it
// names, all at one instant (a key set is atomic, protocol.md §12.2): a
// grant needs every key free or its holder's lease possibly over (the
// earliest a lease can end is its acquire's invocation, or the moment its
// keys could all have become free before, plus the lease) and a token above
// every earlier one on each key; a release answered "released" needs the
// caller's token to hold every key; "not holder" needs some key held by
// another, free, or a lease possibly over.
func stepLock(g groupState, in lockIn, out lockOut) (bool, groupState) {
	start := in.call
	for _, k := range in.keys {
		if s := g.get(k); s.held && s.freeAt > start {
			start = s.freeAt
		}
	}
	set := func(f func(s lockState) lockState) groupState {
		n := g
		for _, k := range in.keys {
			n = n.with(k, f(n.get(k)))
		}
		return n
	}
	switch in.kind {
	case 'A':
		switch out.outcome {
		case Granted:
			for _, k := range in.keys {
				if s := g.get(k); out.token <= s.last || s.held && in.ret < s.freeAt {
					return false, g
				}
			}
			return true, set(func(lockState) lockState {
				return lockState{held: true, token: out.token, freeAt: start + in.lease, last: out.token}
			})
		case Unknown:
			return true, set(func(s lockState) lockState {
				return lockState{held: true, token: 0, freeAt: start + in.lease, last: s.last}
			})
		}
		return true, g
	case 'R':
		mine, over := true, false // every key held with the token; some lease possibly over
		for _, k := range in.keys {
			s := g.get(k)
			mine = mine && s.held && s.token != 0 && s.token == in.token
			over = over || s.held && in.ret >= s.freeAt
		}
		free := func(s lockState) lockState { return lockState{last: s.last} }
		switch out.outcome {
		case Released:
			if !mine {
				return false, g
			}
			return true, set(free)
		case NotHolder:
			if !mine {
				return true, g
			}
			if over {
				return true, set(free) // the lease had ended
			}
			return false, g
		case Unknown:
			if mine {
				return true, set(free)
			}
			return true, g
		}
		return true, g
	}
	return false, g
}

// partitionByKeys groups the operations by the keys that sets link
// (union-find), each group in history order, the groups by their least key.
func partitionByKeys(history []porcupine.Operation) [][]porcupine.Operation {
	parent := map[string]string{}
	var find func(k string) string
	find = func(k string) string {
		p, ok := parent[k]
		if !ok {
			parent[k] = k
			return k
		}
		if p == k {
			return k
		}
		r := find(p)
		parent[k] = r
		return r
	}
	for _, op := range history {
		keys := op.Metadata.(Op).KeyList()
		r := find(keys[0])
		for _, k := range keys[1:] {
			if q := find(k); q != r {
				if q < r {
					q, r = r, q
				}
				parent[q] = r // the least key is the root
			}
		}
	}
	byRoot := map[string][]porcupine.Operation{}
	var roots []string
	for _, op := range history {
		r := find(op.Metadata.(Op).KeyList()[0])
		if _, ok := byRoot[r]; !ok {
			roots = append(roots, r)
		}
		byRoot[r] = append(byRoot[r], op)
	}
	sort.Strings(roots)
	out := make([][]porcupine.Operation, 0, len(roots))
	for _, r := range roots {
		out = append(out, byRoot[r])
	}
	return out
}

// LockModel is the sequential specification of a group of keys (stepLock),
// one partition per group (partitionByKeys).
func LockModel() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByKeys,
		Init:      func() any { return groupState(nil) },
		Step: func(st, input, output any) (bool, any) {
			return stepLock(st.(groupState), input.(lockIn), output.(lockOut))
		},
		Equal: func(a, b any) bool { return slices.Equal(a.(groupState), b.(groupState)) },
		Hash: func(st any) uint64 {
			var h uint64
			for _, ks := range st.(groupState) {
				s := ks.s
				x := s.token*0x9E3779B97F4A7C15 ^ uint64(s.freeAt) ^ s.last<<1
				if s.held {
					x ^= 1
				}
				h = h*31 + x
			}
			return h
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(lockIn), output.(lockOut)
			k := strings.Join(in.keys, ",")
			if in.kind == 'A' {
				return fmt.Sprintf("acquire(%s, lease %v) → %s %d", k, time.Duration(in.lease), out.outcome, out.token)
			}
			return fmt.Sprintf("release(%s, %d) → %s", k, in.token, out.outcome)
		},
		DescribeState: func(st any) string {
			var b strings.Builder
			for _, ks := range st.(groupState) {
				s := ks.s
				if !s.held {
					fmt.Fprintf(&b, "%s free (last %d); ", ks.key, s.last)
				} else {
					fmt.Fprintf(&b, "%s held by %d until ≥%v (last %d); ", ks.key, s.token, time.Duration(s.freeAt), s.last)
				}
			}
			if b.Len() == 0 {
				return "all free"
			}
			return strings.TrimSuffix(b.String(), "; ")
		},
	}
}

// PorcupineOps converts the history: operations without effect (timeouts,
// refusals) are left out; indeterminate ones never return.
func PorcupineOps(ops []Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range ops {
		switch o.Outcome {
		case TimedOut, Refused:
			continue
		}
		in := lockIn{kind: o.Kind, keys: o.KeyList(), lease: int64(o.Lease), call: int64(o.Call), ret: int64(o.Return)}
		res := lockOut{outcome: o.Outcome}
		if o.Kind == 'R' {
			in.token = o.Token
		} else if o.Outcome == Granted {
			res.token = o.Token
		}
		ret := int64(o.Return)
		if o.Outcome == Unknown {
			ret = math.MaxInt64
			in.ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{ClientId: o.Worker, Input: in, Call: int64(o.Call), Output: res, Return: ret, Metadata: o})
	}
	return out
}

package clustertest

import (
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

func grant(w int, key string, tok uint64, call, ret, lease time.Duration) Op {
	return Op{Worker: w, Kind: 'A', Key: key, Lease: lease, Token: tok, Call: call, Return: ret, Deadline: call + lease, Outcome: Granted}
}

func release(w int, key string, tok uint64, call, ret time.Duration, o Outcome) Op {
	return Op{Worker: w, Kind: 'R', Key: key, Token: tok, Call: call, Return: ret, Outcome: o}
}

func unknownAcquire(w int, key string, call, ret, lease time.Duration) Op {
	return Op{Worker: w, Kind: 'A', Key: key, Lease: lease, Call: call, Return: ret, Outcome: Unknown}
}

func violationsOf(ops ...Op) []string {
	h := NewHistory()
	for _, o := range ops {
		h.Add(o)
	}
	v, _ := h.Violations(10*time.Second, "")
	return v
}

func expectNone(t *testing.T, name string, ops ...Op) {
	t.Helper()
	if v := violationsOf(ops...); len(v) > 0 {
		t.Errorf("%s: want no violation, got %v", name, v)
	}
}

func expectSome(t *testing.T, name, want string, ops ...Op) {
	t.Helper()
	v := violationsOf(ops...)
	for _, x := range v {
		if strings.Contains(x, want) {
			return
		}
	}
	t.Errorf("%s: want a violation containing %q, got %v", name, want, v)
}

// TestCheckerAcceptsLegalHistories: the checks accept what the protocol
// allows: handoffs, expiries, stale releases answered N, indeterminate
// acquires that may or may not have taken the lock.
func TestCheckerAcceptsLegalHistories(t *testing.T) {
	expectNone(t, "sequential",
		grant(0, "k", 10, 0, 5*ms, time.Second),
		release(0, "k", 10, 20*ms, 25*ms, Released),
		grant(1, "k", 11, 30*ms, 35*ms, time.Second),
		release(1, "k", 11, 40*ms, 45*ms, Released),
	)
	expectNone(t, "handoff to a waiter",
		grant(0, "k", 10, 0, 5*ms, time.Second),
		grant(1, "k", 11, 10*ms, 60*ms, time.Second), // queued, granted at the release
		release(0, "k", 10, 50*ms, 55*ms, Released),
	)
	expectNone(t, "expiry then a new holder; the stale release gets N",
		grant(0, "k", 10, 0, 5*ms, 100*ms),
		grant(1, "k", 11, 50*ms, 160*ms, time.Second),
		release(0, "k", 10, 170*ms, 175*ms, NotHolder),
		release(1, "k", 11, 180*ms, 185*ms, Released),
	)
	expectNone(t, "indeterminate acquire that did not take effect",
		unknownAcquire(0, "k", 0, 5*ms, time.Second),
		grant(1, "k", 10, 10*ms, 15*ms, time.Second),
		release(1, "k", 10, 20*ms, 25*ms, Released),
	)
	expectNone(t, "indeterminate acquire that held the key until its lease ended",
		unknownAcquire(0, "k", 0, 5*ms, 100*ms),
		grant(1, "k", 10, 10*ms, 120*ms, time.Second),
	)
	expectNone(t, "indeterminate release",
		grant(0, "k", 10, 0, 5*ms, time.Second),
		release(0, "k", 10, 10*ms, 20*ms, Unknown),
		grant(1, "k", 11, 30*ms, 35*ms, time.Second),
	)
	expectNone(t, "keys are independent",
		grant(0, "a", 10, 0, 5*ms, time.Second),
		grant(1, "b", 11, 1*ms, 6*ms, time.Second),
	)
}

// TestCheckerFindsViolations: each kind of unsafe behaviour is reported.
func TestCheckerFindsViolations(t *testing.T) {
	expectSome(t, "two holders at once", "porcupine",
		grant(0, "k", 10, 0, 5*ms, time.Second),
		grant(1, "k", 11, 10*ms, 15*ms, time.Second),
	)
	expectSome(t, "two holders at once (intervals)", "mutual exclusion",
		grant(0, "k", 10, 0, 5*ms, time.Second),
		grant(1, "k", 11, 10*ms, 15*ms, time.Second),
	)
	expectSome(t, "a lease ended early", "porcupine",
		grant(0, "k", 10, 0, 5*ms, time.Second),
		grant(1, "k", 11, 100*ms, 500*ms, time.Second),
	)
	expectSome(t, "token issued twice", "issued twice",
		grant(0, "a", 10, 0, 5*ms, time.Second),
		grant(1, "b", 10, 10*ms, 15*ms, time.Second),
	)
	expectSome(t, "token went backwards across keys", "token order",
		grant(0, "a", 20, 0, 5*ms, time.Second),
		grant(1, "b", 10, 10*ms, 15*ms, time.Second),
	)
	expectSome(t, "token went backwards on a key", "porcupine",
		grant(0, "k", 20, 0, 5*ms, time.Second),
		release(0, "k", 20, 10*ms, 15*ms, Released),
		grant(1, "k", 10, 20*ms, 25*ms, time.Second),
	)
	expectSome(t, "a stale release freed the new holder's lock", "porcupine",
		grant(0, "k", 10, 0, 5*ms, 50*ms),
		grant(1, "k", 11, 100*ms, 105*ms, time.Second),
		release(0, "k", 10, 110*ms, 115*ms, Released),
	)
	expectSome(t, "N to the live holder", "porcupine",
		grant(0, "k", 10, 0, 5*ms, time.Second),
		release(0, "k", 10, 10*ms, 15*ms, NotHolder),
	)
	expectSome(t, "grant while an indeterminate acquire may hold it, then the later holder overlaps", "porcupine",
		grant(0, "k", 10, 0, 5*ms, time.Second),
		unknownAcquire(1, "k", 1*ms, 6*ms, time.Second),
		release(0, "k", 10, 10*ms, 15*ms, Released),
		grant(2, "k", 11, 20*ms, 25*ms, time.Second),
		grant(3, "k", 12, 30*ms, 35*ms, time.Second),
	)
}

func TestFenceRejectsLowerTokens(t *testing.T) {
	f := NewFence()
	dl := time.Now().Add(time.Minute)
	if !f.Write("k", 5, dl) || !f.Write("k", 6, dl) || !f.Write("k", 6, dl) {
		t.Fatal("increasing writes refused")
	}
	if f.Write("k", 5, dl) {
		t.Fatal("a lower token was accepted")
	}
	if f.Write("k", 7, time.Now().Add(-time.Second)) {
		t.Fatal("a write after the deadline happened")
	}
	if len(f.Rejected()) != 1 || f.Writes() != 3 {
		t.Fatalf("rejected %v, writes %d", f.Rejected(), f.Writes())
	}
}

func grantSet(w int, keys []string, tok uint64, call, ret, lease time.Duration) Op {
	o := grant(w, keys[0], tok, call, ret, lease)
	o.Keys = keys
	return o
}

func releaseSet(w int, keys []string, tok uint64, call, ret time.Duration, o Outcome) Op {
	r := release(w, keys[0], tok, call, ret, o)
	r.Keys = keys
	return r
}

// TestCheckerKeySets (issue 30, protocol.md §12.2): the model takes a key
// set as one atomic operation on all its keys, mixed with single keys on
// the same keys: handoffs between sets and single keys, expiry of a set
// freeing every key, indeterminate set acquires; and it finds a set held
// twice with a single key, a set released by a single-key holder's token,
// and — what checking each key alone cannot see — a set granted at two
// different instants on its two keys.
func TestCheckerKeySets(t *testing.T) {
	ab, bc := []string{"a", "b"}, []string{"b", "c"}
	expectNone(t, "set, then single keys after its release",
		grantSet(0, ab, 10, 0, 5*ms, time.Second),
		grant(1, "a", 11, 1*ms, 30*ms, time.Second), // queued behind the set
		grant(2, "b", 12, 2*ms, 31*ms, time.Second),
		releaseSet(0, ab, 10, 20*ms, 25*ms, Released),
		release(1, "a", 11, 40*ms, 45*ms, Released),
		release(2, "b", 12, 40*ms, 45*ms, Released),
	)
	expectNone(t, "overlapping sets hand b over",
		grantSet(0, ab, 10, 0, 5*ms, time.Second),
		grantSet(1, bc, 11, 1*ms, 30*ms, time.Second),
		releaseSet(0, ab, 10, 20*ms, 25*ms, Released),
		grant(2, "a", 12, 35*ms, 40*ms, time.Second),
		releaseSet(1, bc, 11, 50*ms, 55*ms, Released),
	)
	expectNone(t, "a set's lease ends on every key; its stale release gets N",
		grantSet(0, ab, 10, 0, 5*ms, 50*ms),
		grant(1, "a", 11, 60*ms, 65*ms, time.Second),
		grant(2, "b", 12, 60*ms, 66*ms, time.Second),
		releaseSet(0, ab, 10, 70*ms, 75*ms, NotHolder),
	)
	expectNone(t, "indeterminate set acquire that did not take effect",
		Op{Worker: 0, Kind: 'A', Key: "a", Keys: ab, Lease: time.Second, Call: 0, Return: 5 * ms, Outcome: Unknown},
		grant(1, "b", 10, 10*ms, 15*ms, time.Second),
		release(1, "b", 10, 20*ms, 25*ms, Released),
	)

	expectSome(t, "a single key granted while a set holds it", "porcupine",
		grantSet(0, ab, 10, 0, 5*ms, time.Second),
		grant(1, "b", 11, 10*ms, 15*ms, time.Second),
	)
	expectSome(t, "a set granted while a single key holds one of its keys", "mutual exclusion",
		grant(0, "b", 10, 0, 5*ms, time.Second),
		grantSet(1, ab, 11, 10*ms, 15*ms, time.Second),
	)
	expectSome(t, "a set released O while a key went to another", "porcupine",
		grantSet(0, ab, 10, 0, 5*ms, 20*ms),
		grant(1, "b", 11, 30*ms, 35*ms, time.Second),
		releaseSet(0, ab, 10, 40*ms, 45*ms, Released),
	)
	// a: the set can only be granted after 10's release (≥ 20 ms); b: it
	// must precede token 12's grant (≤ 5 ms). Each key alone has a
	// linearization, the two together do not: the set was not atomic.
	v := violationsOf(
		grant(0, "a", 10, 0, 5*ms, time.Second),
		release(0, "a", 10, 20*ms, 25*ms, Released),
		grantSet(1, ab, 11, 0, 100*ms, 1*ms),
		grant(2, "b", 12, 0, 5*ms, time.Second),
		release(2, "b", 12, 6*ms, 8*ms, Released),
	)
	if len(v) != 1 || !strings.Contains(v[0], "porcupine") {
		t.Errorf("a set granted at different instants on its keys: got %v, want the porcupine violation only", v)
	}
}

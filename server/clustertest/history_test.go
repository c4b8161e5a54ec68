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

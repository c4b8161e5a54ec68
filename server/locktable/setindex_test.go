package locktable

import (
	"math/rand/v2"
	"testing"
)

// setIndex against a map under random puts and deletes (tokens clustered,
// as real ones are, so probe runs wrap and shift): every get agrees, the
// size agrees, and it shrinks back once emptied.
func TestSetIndexMatchesMap(t *testing.T) {
	var x setIndex
	ref := map[uint64]*heldSet{}
	r := rand.New(rand.NewPCG(1, 2))
	sets := make([]*heldSet, 64)
	for i := range sets {
		sets[i] = &heldSet{n: i}
	}
	for step := range 300000 {
		tok := 1 + r.Uint64N(20000)
		if step > 200000 || r.IntN(3) == 0 {
			x.del(tok)
			delete(ref, tok)
		} else {
			hs := sets[r.IntN(len(sets))]
			x.put(tok, hs)
			ref[tok] = hs
		}
		if step%997 == 0 {
			for tok := uint64(0); tok <= 20001; tok++ {
				if got, want := x.get(tok), ref[tok]; got != want {
					t.Fatalf("step %d: get(%d) = %v, want %v", step, tok, got, want)
				}
			}
		}
		if x.n != len(ref) {
			t.Fatalf("step %d: n = %d, want %d", step, x.n, len(ref))
		}
	}
	for tok := range ref {
		x.del(tok)
		delete(ref, tok)
		if x.get(tok) != nil || x.n != len(ref) {
			t.Fatalf("del(%d): still found, or n = %d, want %d", tok, x.n, len(ref))
		}
	}
	// up to ≈ 13 k sets grew it far above shrinkAbove; emptied, it shrinks back
	if len(ref) != 0 || len(x.toks) != shrinkAbove {
		t.Fatalf("emptied: %d left, %d slots", len(ref), len(x.toks))
	}
}

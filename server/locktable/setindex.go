package locktable

import "math/bits"

// setIndex is the held key sets by token (Table.sets): open addressing with
// linear probing and backward-shift deletion, no tombstones. Issue 35: the
// map's insert at every set grant and delete at every set release were 7 %
// of the server's CPU in the set2 row. Tokens are never 0 (0 marks an empty
// slot). It grows at load 1/2 and, above shrinkAbove slots, shrinks to half
// below 1/8, so memory falls back after a burst of sets; not below: a table
// whose sets in flight swing between none and hundreds at every batch (the
// set2 row) would resize at every swing.
type setIndex struct {
	toks  []uint64 // 0 = empty slot
	sets  []*heldSet
	n     int
	shift uint8 // 64 - log2(len(toks))
}

// shrinkAbove is the size (slots, 16 bytes each) setIndex never shrinks below.
const shrinkAbove = 4096

// home is tok's first slot (Fibonacci hashing: tokens are consecutive).
func (x *setIndex) home(tok uint64) int { return int((tok * 0x9E3779B97F4A7C15) >> x.shift) }

// find is tok's slot, or -1.
func (x *setIndex) find(tok uint64) int {
	if x.n == 0 || tok == 0 {
		return -1
	}
	mask := len(x.toks) - 1
	for i := x.home(tok); ; i = (i + 1) & mask {
		switch x.toks[i] {
		case tok:
			return i
		case 0:
			return -1
		}
	}
}

// get is the held set of token tok, nil when none.
func (x *setIndex) get(tok uint64) *heldSet {
	if i := x.find(tok); i >= 0 {
		return x.sets[i]
	}
	return nil
}

// put records hs as the held set of token tok (≠ 0), replacing any.
func (x *setIndex) put(tok uint64, hs *heldSet) {
	if i := x.find(tok); i >= 0 {
		x.sets[i] = hs
		return
	}
	if (x.n+1)*2 > len(x.toks) {
		x.resize(max(16, 2*len(x.toks)))
	}
	mask := len(x.toks) - 1
	i := x.home(tok)
	for x.toks[i] != 0 {
		i = (i + 1) & mask
	}
	x.toks[i], x.sets[i] = tok, hs
	x.n++
}

// del forgets the held set of token tok, if any.
func (x *setIndex) del(tok uint64) {
	i := x.find(tok)
	if i < 0 {
		return
	}
	mask := len(x.toks) - 1
	for j := (i + 1) & mask; x.toks[j] != 0; j = (j + 1) & mask {
		// the entry at j stays unless the hole at i lies on its probe path
		// (cyclically between its home h and j)
		if h := x.home(x.toks[j]); (j-h)&mask >= (j-i)&mask {
			x.toks[i], x.sets[i] = x.toks[j], x.sets[j]
			i = j
		}
	}
	x.toks[i], x.sets[i] = 0, nil
	x.n--
	if len(x.toks) > shrinkAbove && x.n*8 < len(x.toks) {
		x.resize(len(x.toks) / 2)
	}
}

func (x *setIndex) resize(size int) {
	toks, sets := x.toks, x.sets
	x.toks, x.sets = make([]uint64, size), make([]*heldSet, size)
	x.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	mask := size - 1
	for k, tok := range toks {
		if tok != 0 {
			i := x.home(tok)
			for x.toks[i] != 0 {
				i = (i + 1) & mask
			}
			x.toks[i], x.sets[i] = tok, sets[k]
		}
	}
}

// each calls fn with every held set (in slot order: for checks, never for
// output).
func (x *setIndex) each(fn func(tok uint64, hs *heldSet)) {
	for i, tok := range x.toks {
		if tok != 0 {
			fn(tok, x.sets[i])
		}
	}
}

package wire

import "testing"

// printable8 against the byte rule for every value of two bytes at every
// pair of places (the other six printable): an error in the word tests
// (a borrow, a bound off by one) shows as a mismatch.
func TestPrintable8(t *testing.T) {
	printable := func(c byte) bool { return c >= 0x20 && c < 0x7f }
	for p := range 8 {
		for q := p + 1; q < 8; q++ {
			for a := range 256 {
				for b := range 256 {
					w := [8]byte{'k', 'k', 'k', 'k', 'k', 'k', 'k', 'k'}
					w[p], w[q] = byte(a), byte(b)
					x := uint64(0)
					for i := 7; i >= 0; i-- {
						x = x<<8 | uint64(w[i])
					}
					if got, want := printable8(x), printable(byte(a)) && printable(byte(b)); got != want {
						t.Fatalf("printable8(%q) = %v", w, got)
					}
				}
			}
		}
	}
}

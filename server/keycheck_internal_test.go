package server

import (
	"testing"

	"github.com/ticketing/ticketing/client/wire"
)

// printableASCII is a fast path of wire.ValidKey: whatever it accepts, the
// codec accepts too.
func TestPrintableASCIIAgreesWithValidKey(t *testing.T) {
	keys := [][]byte{nil, {}, []byte("a"), []byte("orders/42"), []byte("bench:0000000001"), []byte("é"), {0x7f}, {0x1f},
		[]byte("abcdefg\x7f"), []byte("abcdefgh\x00"), []byte("        "), []byte("~~~~~~~~~"), make([]byte, 251)}
	for b := 0; b < 256; b++ {
		for _, pos := range []int{0, 3, 7, 8, 12} {
			k := []byte("0123456789abcdef")[:max(pos+1, 9)]
			k = append([]byte(nil), k...)
			k[pos] = byte(b)
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if printableASCII(k) && !wire.ValidKey(k) {
			t.Errorf("%q: fast path accepts a key the codec rejects", k)
		}
		ascii := len(k) >= 1 && len(k) <= wire.MaxKeyLen
		for _, c := range k {
			ascii = ascii && c >= 0x20 && c < 0x7f
		}
		if printableASCII(k) != ascii {
			t.Errorf("%q: printableASCII = %v, want %v", k, !ascii, ascii)
		}
	}
}

func FuzzPrintableASCII(f *testing.F) {
	f.Add([]byte("bench:0000000001"))
	f.Add([]byte("a\x7fb"))
	f.Fuzz(func(t *testing.T, k []byte) {
		if printableASCII(k) && !wire.ValidKey(k) {
			t.Fatalf("%q accepted by the fast path only", k)
		}
	})
}

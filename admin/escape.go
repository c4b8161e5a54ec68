package admin

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// EscapeKey returns k ready to show to a human: unchanged when every
// character is a visible, non-space graphic character (and k does not start
// with a double quote), else quoted and escaped like strconv.Quote (control
// characters, invisible format characters such as bidirectional overrides
// and zero-width spaces, invalid UTF-8). So a key is never shown raw when
// its raw form could hide or fake characters, and a quoted form is never
// mistaken for a raw key. Spaces alone also cause quoting, so one table
// cell stays one shell word.
func EscapeKey(k string) string {
	if plainKey(k) {
		return k
	}
	return strconv.Quote(k)
}

func plainKey(k string) bool {
	if k == "" || k[0] == '"' {
		return false
	}
	for i, r := range k {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(k[i:]); n <= 1 {
				return false // invalid UTF-8
			}
		}
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) || !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

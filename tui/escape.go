package tui

import (
	"strconv"
	"unicode/utf8"

	"github.com/ticketing/ticketing/admin"
)

// Nothing a server sends reaches the screen raw: a lock key (or a node id,
// role, leader address, error text) must never be able to drive the
// operator's terminal with control characters, nor fake the layout with
// bidirectional overrides or invisible characters.

// escape shows a key or a name: admin.EscapeKey, the one rendering of keys
// shared with `ticketing locks` (unchanged when plainly visible, else
// quoted with Go escapes).
func escape(s string) string { return admin.EscapeKey(s) }

// escapeText shows free text (error messages, reasons): unchanged when it
// is valid UTF-8 of printable characters and ASCII spaces, else quoted with
// Go escapes.
func escapeText(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// quoted is s in double quotes with Go escapes (a filter prefix).
func quoted(s string) string { return strconv.Quote(s) }

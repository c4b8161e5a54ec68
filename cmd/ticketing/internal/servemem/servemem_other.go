//go:build !linux

// Package servemem bounds the resident set that `ticketing serve` keeps of
// its own executable; see servemem_linux.go. Elsewhere it does nothing.
package servemem

// Split: see servemem_linux.go (always false here).
var Split bool

// Trim does nothing outside Linux (and reports false).
func Trim() bool { return false }

package main

import (
	"os"
	"runtime/debug"
)

// Memory defaults of `ticketing serve` (docs/benchmarks.md, "Memory").
//
// The request path allocates nothing, so the heap only grows when keys are
// created; GOGC 50 keeps that growth at 1.5× the live heap instead of 2×,
// which holds the server's RSS flat under load. The soft limit makes the
// collector work harder before the heap passes it, without capping it
// (1 M held keys still fit: the runtime never fails an allocation for it).
// GOGC and GOMEMLIMIT in the environment override both, as usual.
const (
	serveGOGC       = 50
	serveMemLimitMB = 64
)

// tuneServeMemory applies the defaults above and then releases the pages
// that only start-up needed (see trimStartupPages).
func tuneServeMemory() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(serveMemLimitMB << 20)
	}
	trimStartupPages()
}

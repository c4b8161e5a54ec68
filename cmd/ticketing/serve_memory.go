package main

import (
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter/pkg/twwidth"
)

// Memory defaults of `ticketing serve` (docs/benchmarks.md, "Memory").
//
// The request path allocates nothing, so the heap only grows when keys are
// created. GOGC 50 keeps that growth at 1.5× the live heap instead of 2×:
// filling 1 M held keys peaks at 242 MB instead of 257 MB, for about 10 %
// more server CPU while the table grows and none once it stops. No default
// memory limit: the live heap grows with the held keys (about 240 bytes
// each, bounded by --max-keys), and a limit below it makes the collector run
// back to back (measured: a 64 MiB limit made the 1 M-key fill 3× slower).
// GOGC and GOMEMLIMIT in the environment override this, as usual.
const serveGOGC = 50

// tuneServeMemory applies the default above, releases the pages that only
// start-up needed (see trimStartupPages) and starts the optional profile.
//
// Package initializers of the whole binary run in `serve` too (Go runs every
// linked package's init); the largest heap they keep is tablewriter's width
// cache (twwidth: an 8,192-entry map, 0.66 MB), which only the CLI's tables
// use. Serve drops it and returns the freed heap to the OS before serving
// load, so neither its pages nor the collector's headroom for it stay
// resident (docs/benchmarks.md "Round two").
func tuneServeMemory() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	twwidth.SetCacheCapacity(0) // serve renders no tables
	// Trim before and after the collection: the pages the collector reads
	// (stack maps in pclntab, type data) add to start-up's, not on top.
	trimStartupPages()
	debug.FreeOSMemory()
	trimStartupPages()
	profileFromEnv()
}

// profileFromEnv writes a CPU profile of the running server when
// TICKETING_CPUPROFILE names a file, for TICKETING_CPUPROFILE_SECONDS
// (default 30) from start-up, and a heap profile when TICKETING_MEMPROFILE
// names a file, TICKETING_MEMPROFILE_SECONDS (default 30) after start-up:
// how docs/benchmarks.md's server profiles were taken
// (`go tool pprof bin/ticketing FILE`). A "%p" in either file name becomes
// the process id, so the nodes of a local cluster write files of their own.
func profileFromEnv() {
	if path := profilePath("TICKETING_MEMPROFILE"); path != "" {
		time.AfterFunc(envSeconds("TICKETING_MEMPROFILE_SECONDS"), func() {
			f, err := os.Create(path)
			if err != nil {
				return
			}
			defer f.Close()
			_ = pprof.Lookup("heap").WriteTo(f, 0)
		})
	}
	path := profilePath("TICKETING_CPUPROFILE")
	if path == "" {
		return
	}
	d := envSeconds("TICKETING_CPUPROFILE_SECONDS")
	f, err := os.Create(path)
	if err != nil {
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return
	}
	time.AfterFunc(d, func() {
		pprof.StopCPUProfile()
		f.Close()
	})
}

func profilePath(name string) string {
	return strings.ReplaceAll(os.Getenv(name), "%p", strconv.Itoa(os.Getpid()))
}

// envSeconds reads a whole number of seconds from the environment variable
// name; 30 s when unset or not a positive number.
func envSeconds(name string) time.Duration {
	secs, err := strconv.Atoi(os.Getenv(name))
	if err != nil || secs <= 0 {
		secs = 30
	}
	return time.Duration(secs) * time.Second
}

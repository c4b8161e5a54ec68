package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/ticketing/ticketing/cmd/ticketing/internal/servemem"
)

// trimStartupPages drops this process's resident pages of the executable's
// read-only segments (code and read-only data). The binary holds every
// command of the CLI, the TUI and the cluster; running the init functions of
// all its packages touches nearly every 64 KiB block of it, and the kernel
// maps whole blocks at a time (fault-around), so an idle server would keep
// some 10 MB of code resident that it never runs again. The pages are clean
// and backed by the file (the kernel refuses writes to a running executable),
// so MADV_DONTNEED only unmaps them: whatever the server does run faults back
// in from the page cache. The writable data segment is never touched.
//
// In `ticketing serve` the segments were recorded (and split into one-page
// VMAs, so a fault maps one page, not 64 KiB) by package servemem before
// the other packages' initializers ran: servemem.Trim drops them. The scan
// of /proc/self/maps below is the fallback for a process servemem did not
// recognize as serve (tests that call Main in-process).
func trimStartupPages() {
	if servemem.Trim() {
		return
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	type span struct{ start, end uintptr }
	var spans []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-00a24000 r-xp 00000000 fd:01 123 /path/to/ticketing
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe {
			continue
		}
		if perm := fields[1]; perm != "r-xp" && perm != "r--p" {
			continue // writable (data, bss) or shared: never
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			continue
		}
		spans = append(spans, span{uintptr(s), uintptr(e)})
	}
	for _, sp := range spans {
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, sp.start, sp.end-sp.start, syscall.MADV_DONTNEED)
	}
}

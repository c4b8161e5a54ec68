// Package servemem bounds the resident set that `ticketing serve` keeps of
// its own executable (docs/benchmarks.md, "Round two": server RSS).
//
// The one ticketing binary holds the server, the CLI, the TUI, the cluster
// and deploy (18 MB). When the kernel maps a page of a file on a read fault
// it also maps the neighbouring pages already in the page cache, up to
// 64 KiB around the fault (fault-around), bounded by the mapping (VMA). Go
// runs the init functions of every package linked in, spread over the whole
// binary, and the server's own working set (the runtime, net, the lock
// table, the pclntab entries a stack scan reads) is spread too, so 64 KiB
// per touched page made a server map 11 MB of the binary before main and
// 8 MB under load, of which it reads 3–3.5 MB.
//
// This package's init runs before nearly every other package's (it imports
// only syscall; Go initializes packages in dependency order, ties by import
// path). When the process is `ticketing serve` it
//
//   - records the executable's read-only segments (code; read-only data and
//     pclntab),
//   - splits them into one-page VMAs by setting MADV_NOHUGEPAGE on every
//     other page (VMAs with different flags never merge; no huge page is
//     wanted for them anyway), so that a fault maps the one page it needs,
//   - and drops the pages the runtime's start-up mapped so far
//     (MADV_DONTNEED: they are clean, file-backed, and refault from the
//     page cache).
//
// The cost: about 4,300 VMAs for the 17 MB of read-only segments (kernel
// memory, about 200 bytes each, not part of RSS), some 15 ms of madvise
// calls at start, and one minor fault per page instead of per 64 KiB of
// the binary. Other commands (short-lived CLI processes) are untouched.
// TICKETING_EXEC_SPLIT=0 in the environment turns the split off (the early
// drop and Trim still happen).
package servemem

import "syscall"

type span struct{ lo, hi uintptr }

// spans are the executable's read-only mappings, recorded at init when the
// process is `ticketing serve`; nil otherwise.
var spans []span

// Split reports whether init split the read-only segments into one-page
// VMAs.
var Split bool

func init() {
	if !isServe() {
		return
	}
	spans = readOnlySpans()
	Split = !envIs("TICKETING_EXEC_SPLIT", "0")
	for _, sp := range spans {
		if Split {
			for a := sp.lo + pageSize; a < sp.hi; a += 2 * pageSize {
				_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, a, pageSize, syscall.MADV_NOHUGEPAGE)
			}
		}
	}
	Trim()
}

const pageSize = 4096

// Trim drops this process's resident pages of the executable's read-only
// segments (MADV_DONTNEED): whatever the server runs again faults back in
// from the page cache, one page at a time once split. A no-op outside
// `ticketing serve` (it then returns false). The writable data segment is
// never touched.
func Trim() bool {
	for _, sp := range spans {
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, sp.lo, sp.hi-sp.lo, syscall.MADV_DONTNEED)
	}
	return len(spans) > 0
}

// isServe reports whether this process is `ticketing serve`: its first
// argument that is not a flag is "serve" (os.Args is not set up yet).
func isServe() bool { return isServeCmdline(readFile("/proc/self/cmdline", 4096)) }

// isServeCmdline is isServe on the NUL-separated argv of /proc/PID/cmdline.
func isServeCmdline(b []byte) bool {
	first := true // argv[0]
	for len(b) > 0 {
		n := 0
		for n < len(b) && b[n] != 0 {
			n++
		}
		arg := string(b[:n])
		if n < len(b) {
			b = b[n+1:]
		} else {
			b = nil
		}
		if first {
			first = false
			continue
		}
		if arg == "" || arg[0] == '-' {
			continue
		}
		return arg == "serve"
	}
	return false
}

func envIs(key, val string) bool {
	v, ok := syscall.Getenv(key)
	return ok && v == val
}

// readOnlySpans lists the executable's r-xp and r--p mappings from
// /proc/self/maps (lines "lo-hi perms offset dev inode path").
func readOnlySpans() []span {
	var exe [4096]byte
	n, err := syscall.Readlink("/proc/self/exe", exe[:])
	if err != nil || n <= 0 {
		return nil
	}
	path := string(exe[:n])
	b := readFile("/proc/self/maps", 1<<20)
	var out []span
	for len(b) > 0 {
		n := 0
		for n < len(b) && b[n] != '\n' {
			n++
		}
		line := b[:n]
		if n < len(b) {
			b = b[n+1:]
		} else {
			b = nil
		}
		if sp, ok := parseMapsLine(line, path); ok {
			out = append(out, sp)
		}
	}
	return out
}

// parseMapsLine returns the span of a read-only, private mapping of path.
func parseMapsLine(line []byte, path string) (span, bool) {
	f := fields(line, 6)
	if len(f) < 6 || string(f[5]) != path {
		return span{}, false
	}
	if p := string(f[1]); p != "r-xp" && p != "r--p" {
		return span{}, false
	}
	var lo, hi uintptr
	var ok1, ok2 bool
	for i, c := range f[0] {
		if c == '-' {
			lo, ok1 = parseHex(f[0][:i])
			hi, ok2 = parseHex(f[0][i+1:])
			break
		}
	}
	if !ok1 || !ok2 || hi <= lo || lo%pageSize != 0 || hi%pageSize != 0 {
		return span{}, false
	}
	return span{lo, hi}, true
}

// fields splits line at runs of spaces into at most n fields; the last one
// keeps the rest of the line (a path may hold spaces).
func fields(line []byte, n int) [][]byte {
	var out [][]byte
	for len(line) > 0 && len(out) < n {
		for len(line) > 0 && line[0] == ' ' {
			line = line[1:]
		}
		if len(line) == 0 {
			break
		}
		if len(out) == n-1 {
			out = append(out, line)
			break
		}
		i := 0
		for i < len(line) && line[i] != ' ' {
			i++
		}
		out = append(out, line[:i])
		line = line[i:]
	}
	return out
}

func parseHex(b []byte) (uintptr, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uintptr
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uintptr(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uintptr(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

func readFile(name string, limit int) []byte {
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 4096)
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), 2*cap(buf))
			copy(nb, buf)
			buf = nb
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if n <= 0 || err != nil {
			break
		}
		buf = buf[:len(buf)+n]
	}
	return buf
}

package servemem

import (
	"encoding/binary"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// The helper process: this test binary re-run with "serve" as its first
// argument that is not a flag, so init treats it as `ticketing serve`.
const helperEnv = "SERVEMEM_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper())
	}
	os.Exit(m.Run())
}

func runHelper(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "serve")
	cmd.Env = append(append(os.Environ(), helperEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestServeFaultMapsOnePage: in a `serve` process, reading one byte of the
// executable's read-only data maps that page, not the 64 KiB block around
// it (fault-around), which is how the binary's resident pages stay near
// the ones the server uses. Without the split every page of the block that
// the page cache holds is mapped by the one fault.
func TestServeFaultMapsOnePage(t *testing.T) {
	if out := runHelper(t); out != "ok" {
		t.Fatal(out)
	}
}

// TestNotServeUntouched: any other command keeps its mappings as the kernel
// made them (no split, nothing recorded, Trim a no-op).
func TestNotServeUntouched(t *testing.T) {
	// this process's first argument that is not a flag is not "serve"
	if Split || len(spans) != 0 || Trim() {
		t.Fatalf("split %v, spans %d in a process that is not serve", Split, len(spans))
	}
	if n := exeMappings(t); n > 16 {
		t.Fatalf("%d mappings of the executable in a process that is not serve", n)
	}
}

func TestIsServeArgs(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		want    bool
	}{
		{"ticketing\x00serve\x00--listen\x00:0\x00", true},
		{"ticketing\x00serve", true},
		{"/usr/bin/ticketing\x00--log-level=debug\x00serve\x00", true},
		{"ticketing\x00acquire\x00serve\x00", false},
		{"ticketing\x00", false},
		{"ticketing", false},
		{"", false},
		{"ticketing\x00servers\x00", false},
	} {
		if got := isServeCmdline([]byte(tc.cmdline)); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.cmdline, got, tc.want)
		}
	}
}

func TestParseMapsLine(t *testing.T) {
	const exe = "/usr/local/bin/ticketing"
	for _, tc := range []struct {
		line string
		ok   bool
		sp   span
	}{
		{"00400000-00c1f000 r-xp 00000000 fe:00 9978534                            /usr/local/bin/ticketing", true, span{0x400000, 0xc1f000}},
		{"00c1f000-014f1000 r--p 0081f000 fe:00 9978534 /usr/local/bin/ticketing", true, span{0xc1f000, 0x14f1000}},
		{"014f1000-015cf000 rw-p 010f1000 fe:00 9978534 /usr/local/bin/ticketing", false, span{}},
		{"00400000-00c1f000 r-xp 00000000 fe:00 9978534 /usr/local/bin/ticketing (deleted)", false, span{}},
		{"00400000-00c1f000 r-xp 00000000 fe:00 9978534 /other", false, span{}},
		{"7fb19cec2000-7fb19cec4000 r-xp 00000000 00:00 0                          [vdso]", false, span{}},
		{"12950f000000-12950f400000 rw-p 00000000 00:00 0 ", false, span{}},
		{"00c1f000-00400000 r--p 0 fe:00 1 /usr/local/bin/ticketing", false, span{}},
		{"garbage", false, span{}},
	} {
		sp, ok := parseMapsLine([]byte(tc.line), exe)
		if ok != tc.ok || sp != tc.sp {
			t.Errorf("%q: %v %#x, want %v %#x", tc.line, ok, sp, tc.ok, tc.sp)
		}
	}
}

// helper runs in the child: checks that init split and trimmed, then faults
// one page in the middle of the largest read-only span.
func helper() int {
	fail := func(msg string) int {
		os.Stdout.WriteString(msg + "\n")
		return 0
	}
	if !Split || len(spans) == 0 {
		return fail("init did not split the read-only segments of a serve process")
	}
	big := spans[0]
	for _, sp := range spans {
		if sp.hi-sp.lo > big.hi-big.lo {
			big = sp
		}
	}
	const block = 16 // pages of fault-around (64 KiB)
	lo := (big.lo + (big.hi-big.lo)/2) &^ (block*pageSize - 1)
	if lo < big.lo || lo+block*pageSize > big.hi {
		return fail("read-only span too small")
	}
	Trim()
	target := lo + 7*pageSize
	// Read one byte at target through the kernel (a pipe write copies
	// from our memory: the same fault path as a load).
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		return fail(err.Error())
	}
	_, _, errno := syscall.Syscall(syscall.SYS_WRITE, uintptr(p[1]), target, 1)
	if errno != 0 {
		return fail("write from the page: " + errno.Error())
	}
	present, err := presentPages(lo, block)
	if err != nil {
		return fail(err.Error())
	}
	if !present[7] {
		return fail("the read page is not mapped")
	}
	n := 0
	for i, ok := range present {
		if ok && i != 7 {
			n++
		}
	}
	// Without the split the fault maps every neighbour in the page cache
	// (15 here); allow the runtime a few of its own.
	if n > 4 {
		return fail("one fault mapped " + itoa(n) + " neighbouring pages of the 64 KiB block")
	}
	os.Stdout.WriteString("ok\n")
	return 0
}

func presentPages(lo uintptr, n int) ([]bool, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 8*n)
	if _, err := f.ReadAt(buf, int64(lo/pageSize*8)); err != nil {
		return nil, err
	}
	out := make([]bool, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[8*i:])>>63 == 1
	}
	return out, nil
}

func exeMappings(t *testing.T) int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(l, " "+exe) {
			n++
		}
	}
	return n
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

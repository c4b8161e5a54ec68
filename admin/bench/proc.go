package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// ProcMem is a process's memory from /proc/PID/status, in bytes.
type ProcMem struct {
	RSS  int64 `json:"rss_bytes"`      // VmRSS: resident now
	Peak int64 `json:"rss_peak_bytes"` // VmHWM: peak resident since start (or the last clear_refs 5)
}

// ReadProcMem reads VmRSS and VmHWM of pid (Linux).
func ReadProcMem(pid int) (ProcMem, error) {
	var m ProcMem
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	found := 0
	for sc.Scan() {
		line := sc.Bytes()
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			dst = &m.RSS
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			dst = &m.Peak
		default:
			continue
		}
		f := bytes.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return m, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		*dst = kb << 10
		found++
	}
	if found < 2 {
		return m, fmt.Errorf("/proc/%d/status: no VmRSS/VmHWM", pid)
	}
	return m, nil
}

// ReadProcCPU returns the user+system CPU time pid has used, in seconds
// (/proc/PID/stat fields 14 and 15, in clock ticks of 1/100 s).
func ReadProcCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// the command name (field 2) may hold spaces: fields restart after ')'
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return float64(ut+st) / 100, nil
}

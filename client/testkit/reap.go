package testkit

import (
	"sync"
	"syscall"
)

// Every process group the testkit started, for KillAll.
var (
	groupsMu sync.Mutex
	groups   = map[int]bool{}
)

// procAttr puts a child in its own process group, killed if the runner dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func track(pgid int) {
	groupsMu.Lock()
	groups[pgid] = true
	groupsMu.Unlock()
}

func untrack(pgid int) {
	groupsMu.Lock()
	delete(groups, pgid)
	groupsMu.Unlock()
}

// KillAll kills every process group still running (the runner calls it on
// SIGINT/SIGTERM).
func KillAll() {
	groupsMu.Lock()
	defer groupsMu.Unlock()
	for g := range groups {
		syscall.Kill(-g, syscall.SIGKILL)
	}
}

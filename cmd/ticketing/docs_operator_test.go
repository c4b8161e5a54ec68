package main

import (
	"os"
	"strings"
	"testing"
)

// The operator docs state what happens to clients in the failures an
// operator meets (issue #28 items 3 and 11); this keeps the statements
// from being lost in an edit: each must stay in its file.
func TestOperatorDocsStateFailureModes(t *testing.T) {
	for file, musts := range map[string][]string{
		"../../docs/cluster.md": {
			"Queued waiters on a leader crash end Indeterminate", "exit **5**",
			"Queued waiters survive a transfer",
			"One voter with a bad clock stops new grants cluster-wide", "What to do:",
			"A full-cluster outage lengthens held leases by its length",
		},
		"../../docs/operations.md": {
			"Restarts and held locks", "B RECOVERING", "no data dir: held\n  locks are forgotten on a restart",
			"clean\n  shutdown",
		},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range musts {
			if !strings.Contains(string(b), m) {
				t.Errorf("%s no longer says %q", file, m)
			}
		}
	}
}

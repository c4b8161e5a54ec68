//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EDeployRemoveDeletes (#12 item 17 deploy): `deploy --remove ID`
// deletes the node's files it says it removed (its env file and, with TLS,
// its key pair), says so, and tells what it cannot delete (the node's copy
// on its host, its data); every other file stays.
func TestE2EDeployRemoveDeletes(t *testing.T) {
	bin := ticketingBin(t)
	t.Parallel()
	out := filepath.Join(t.TempDir(), "cluster")
	run := func(args ...string) string {
		t.Helper()
		b, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	run("deploy", "--nodes", "127.0.0.1,127.0.0.1,127.0.0.1", "--format", "env", "--tls-dir", "/etc/ticketing/tls", "--out", out)
	gone := []string{"n2.env", "tls/n2.crt", "tls/n2.key"}
	kept := []string{"n1.env", "n3.env", "tls/n1.crt", "tls/n1.key", "tls/ca.crt", "client.env", "deploy.json", "secrets/client.token"}
	for _, f := range append(gone, kept...) {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatalf("before --remove: %v", err)
		}
	}
	msg := run("deploy", "--remove", "n2", "--out", out)
	for _, f := range gone {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			t.Errorf("--remove n2 left %s:\n%s", f, msg)
		}
		if !strings.Contains(msg, f) || !strings.Contains(msg, "deleted") {
			t.Errorf("--remove n2 does not say it deleted %s:\n%s", f, msg)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("--remove n2 deleted %s", f)
		}
	}
	if !strings.Contains(msg, "delete its copy of n2.env and its data directory") {
		t.Errorf("--remove n2 does not say what is left to delete on the node's host:\n%s", msg)
	}
	// The shell format's start script goes too.
	sh := filepath.Join(t.TempDir(), "shell")
	run("deploy", "--nodes", "127.0.0.1,127.0.0.1,127.0.0.1", "--format", "shell", "--out", sh)
	if msg := run("deploy", "--remove", "n2", "--out", sh); !strings.Contains(msg, "n2.sh") {
		t.Errorf("--remove n2 (shell) does not mention n2.sh:\n%s", msg)
	}
	for _, f := range []string{"n2.env", "n2.sh"} {
		if _, err := os.Stat(filepath.Join(sh, f)); err == nil {
			t.Errorf("--remove n2 (shell) left %s", f)
		}
	}
	// A later run neither lists n2's files nor brings them back.
	msg = run("deploy", "--add", "127.0.0.1", "--out", out)
	if strings.Contains(msg, "n2.") {
		t.Errorf("a run after --remove mentions n2's files:\n%s", msg)
	}
	for _, f := range gone {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			t.Errorf("--add brought back %s", f)
		}
	}
}

// e2eTransferUnknownID (#12 item 17 transfer-leader): a transfer to an id
// that is not a member says the id is unknown and lists the members; one to
// the leader says it leads already. Both are usage errors (exit 2).
func e2eTransferUnknownID(t *testing.T, e *e2e, leaderID string) {
	t.Helper()
	p := e.expect(ExitUsage, "node", "transfer-leader", "--id", "n9")
	oneStderrLine(t, p)
	if !strings.Contains(p.err.String(), `unknown node id "n9": the members are n1, n2, n3`) {
		t.Errorf("transfer-leader --id n9: %s", p.err.String())
	}
	p = e.expect(ExitUsage, "node", "transfer-leader", "--id", leaderID)
	if !strings.Contains(p.err.String(), leaderID+" is the leader already") {
		t.Errorf("transfer-leader --id %s (the leader): %s", leaderID, p.err.String())
	}
}

// e2eNoLeaderElected (#12 item 17 no leader): with a majority of the
// voters down, a lock request says that no leader is elected and why that
// may be, not "N consecutive redirects (last to "")".
func e2eNoLeaderElected(t *testing.T, e *e2e) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := e.run("acquire", "e2e/no-leader", "--timeout", "2s")
		if strings.Contains(p.err.String(), "redirects (last to") || strings.Contains(p.err.String(), "consecutive redirects") {
			t.Fatalf("jargon: %s", p.err.String())
		}
		if p.code == ExitBusy && strings.Contains(p.err.String(), "no leader elected") &&
			strings.Contains(p.err.String(), "a majority of the nodes is down") {
			oneStderrLine(t, p)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"no leader elected\" within 30s: exit %d %s", p.code, p.err.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

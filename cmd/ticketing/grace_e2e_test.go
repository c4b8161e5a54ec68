//go:build unix

package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// serveProc starts `ticketing serve` on addr with args and waits until it
// answers status.
func (e *e2e) serveProc(addr string, args ...string) *proc {
	e.t.Helper()
	p := e.start("", append([]string{"serve", "--listen", addr}, args...)...)
	e.eventually(30*time.Second, 0, "status", "--addr", addr, "--timeout", "1s")
	return p
}

func (e *e2e) statusJSON(addr string) wire.StatusReply {
	e.t.Helper()
	p := e.expect(0, "status", "--addr", addr, "-o", "json")
	var st wire.StatusReply
	if err := json.Unmarshal([]byte(p.out.String()), &st); err != nil {
		e.t.Fatalf("status json: %v\n%s", err, p.out.String())
	}
	return st
}

// A single node with --data-dir keeps mutual exclusion across an unclean
// restart (issue #28 item 3): hold, kill -9, restart; acquires are answered
// busy RECOVERING (exit 4) until the old lease has ended, then granted with
// a larger token; a release of the forgotten token answers N (exit 6);
// status and health show the recovery and its end; the log says when it
// ends. A clean SIGTERM with nothing held needs no grace on the next start.
func TestE2ERestartGrace(t *testing.T) {
	bin := ticketingBin(t)
	t.Parallel()
	e := newWorld(t, bin, "")
	addr := hp("127.0.0.1", freePorts(t, 1)[0])
	data := e.path("data")
	args := []string{"--data-dir", data, "--max-lease", "3s"}
	srv := e.serveProc(addr, args...)

	held := e.expect(0, "acquire", "k", "--lease", "3s", "--addr", addr)
	old := e.token(held)
	oldEnd := held.start.Add(3 * time.Second) // the server granted after held.start
	srv.kill9(t)

	srv = e.serveProc(addr, args...)
	if !strings.Contains(srv.err.String(), "RECOVERING") {
		t.Errorf("start-up log does not mention the recovery:\n%s", srv.err.String())
	}
	st := e.statusJSON(addr)
	if st.CanGrant || !strings.Contains(st.Reason, "RECOVERING") || st.RecoveringUntilMS < oldEnd.UnixMilli() {
		t.Errorf("status during the grace: can_grant %v, reason %q, recovering_until_ms %d (old lease ends %d)",
			st.CanGrant, st.Reason, st.RecoveringUntilMS, oldEnd.UnixMilli())
	}
	if p := e.run("health", "--addr", addr); p.code == 0 || !strings.Contains(p.out.String()+p.err.String(), "RECOVERING") {
		t.Errorf("health during the grace: exit %d, %s%s", p.code, p.out.String(), p.err.String())
	}
	if p := e.run("release", "k", strconv.FormatUint(old, 10), "--addr", addr); p.code != ExitNotHolder {
		t.Errorf("release of the forgotten token: exit %d, want %d; %s", p.code, ExitNotHolder, p.err.String())
	}
	busy := 0
	var granted *proc
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		p := e.run("acquire", "k", "-n", "--lease", "3s", "--addr", addr)
		if p.code == 0 {
			granted = p
			break
		}
		if p.code != ExitBusy || !strings.Contains(p.err.String(), "RECOVERING") {
			t.Fatalf("acquire during the grace: exit %d, stderr %q; want exit 4 RECOVERING", p.code, p.err.String())
		}
		busy++
		time.Sleep(100 * time.Millisecond)
	}
	if granted == nil {
		t.Fatal("never granted after the grace")
	}
	if granted.end.Before(oldEnd) {
		t.Fatalf("granted at %v, before the old lease's end %v", granted.end, oldEnd)
	}
	if busy == 0 {
		t.Fatal("no acquire was answered RECOVERING")
	}
	if tok := e.token(granted); tok <= old {
		t.Fatalf("token after the restart %d, not above %d", tok, old)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(srv.err.String(), "restart grace over") }, "the log saying the grace ended")
	if st := e.statusJSON(addr); !st.CanGrant || st.RecoveringUntilMS != 0 {
		t.Errorf("status after the grace: can_grant %v, reason %q, recovering_until_ms %d", st.CanGrant, st.Reason, st.RecoveringUntilMS)
	}

	// Clean: release everything, SIGTERM, restart: granted at once.
	e.expect(0, "release", "k", strconv.FormatUint(e.token(granted), 10), "--addr", addr)
	_ = syscall.Kill(srv.cmd.Process.Pid, syscall.SIGTERM)
	if code := srv.wait(t); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, srv.err.String())
	}
	if !strings.Contains(srv.err.String(), "no restart grace") {
		t.Errorf("the clean shutdown is not logged:\n%s", srv.err.String())
	}
	srv = e.serveProc(addr, args...)
	e.expect(0, "acquire", "k", "-n", "--lease", "3s", "--addr", addr)
	if strings.Contains(srv.err.String(), "RECOVERING") {
		t.Errorf("a start after a clean shutdown recovers:\n%s", srv.err.String())
	}

	// Without --data-dir, the start-up log says that held locks are forgotten.
	addr2 := hp("127.0.0.1", freePorts(t, 1)[0])
	mem := e.serveProc(addr2)
	if strings.Count(mem.err.String(), "held locks are forgotten on a restart") != 1 {
		t.Errorf("the log of a server without a data dir:\n%s", mem.err.String())
	}
}

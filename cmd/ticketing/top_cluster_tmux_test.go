//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTopFollowsMembershipInTmux (issue #28 item 10) runs `ticketing top` in
// a tmux pane against a real 3-node loopback cluster, adds a node (n4) and
// removes a follower, and reads the screen: the new member appears (its
// address in the table, "member n4 joined the view" in the events), the
// removed one leaves the view with an event instead of staying DOWN
// forever, and the events are in time order. Every wait is on the screen,
// bounded.
func TestTopFollowsMembershipInTmux(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping a cluster end-to-end test")
	}
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed")
	}
	c := startE2ECluster(t, 2) // n4: client and peer port
	e := c.e
	e.eventually(45*time.Second, 0, "health", "--timeout", "2s")

	sock := fmt.Sprintf("tk-top-members-%d", os.Getpid())
	tm := func(args ...string) (string, error) {
		cmd := exec.Command(tmux, append([]string{"-L", sock, "-f", "/dev/null"}, args...)...)
		cmd.Env = append(os.Environ(), "TERM=xterm-256color")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	cmdline := shellQuote(e.bin) + " top --interval 200ms --addr " + strings.Join(c.clients, ",")
	if out, err := tm("new-session", "-d", "-x", "160", "-y", "60", "-s", "top", "env -u TICKETING_TOKEN -u TICKETING_ADMIN_TOKEN "+cmdline); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })
	var screen string
	waitScreen := func(what string, ok func(string) bool) {
		t.Helper()
		found := false
		t.Cleanup(func() {
			if !found {
				t.Logf("the last screen:\n%s", screen)
			}
		})
		waitFor(t, 45*time.Second, func() bool {
			screen, _ = tm("capture-pane", "-p", "-t", "top")
			found = ok(screen)
			return found
		}, "top's screen to show "+what)
	}
	waitScreen("the three nodes, one a leader", func(s string) bool {
		for _, a := range c.clients {
			if rowWith(s, a, "leader") == "" && rowWith(s, a, "follower") == "" {
				return false
			}
		}
		return strings.Contains(s, "leader")
	})

	// n4 joins and is added as a voter: top was given n1-n3 only.
	n4c, n4p := c.addr(6), c.addr(7)
	c.nodes["n4"] = e.start("", "serve", "--node-id", "n4", "--listen", n4c, "--peer-listen", n4p, "--join", "--log-level", "warn")
	e.eventually(20*time.Second, 0, "ping", "--addr", n4c, "--count", "1", "--timeout", "1s")
	e.expect(0, "node", "add", "--id", "n4", "--peer-addr", n4p, "--client-addr", n4c, "--voter")
	waitScreen("the new member n4 with its row and a membership event", func(s string) bool {
		return strings.Contains(s, "member n4 joined the view") &&
			(rowWith(s, n4c, "follower") != "" || rowWith(s, n4c, "leader") != "" || rowWith(s, n4c, "learner") != "")
	})

	// A follower of the first three is removed and killed: it leaves the view.
	victim := e.waitLeader(15*time.Second, "").follower()
	if victim.ClientAddr == n4c {
		for _, n := range e.nodeList().Nodes {
			if n.ID != victim.ID && n.Role == "follower" {
				victim = n
				break
			}
		}
	}
	e.expect(0, "node", "remove", "--id", victim.ID)
	c.nodes[victim.ID].kill9(t)
	waitScreen("the removed "+victim.ID+" dropped with an event", func(s string) bool {
		return rowWith(s, victim.ClientAddr, "no longer a member of the cluster") != ""
	})
	// The table no longer lists it (the event line does), and it is not DOWN.
	for _, l := range strings.Split(screen, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), victim.ClientAddr) {
			t.Errorf("the removed node still has a row: %q\n%s", l, screen)
		}
		if strings.Contains(l, victim.ClientAddr) && strings.Contains(l, "DOWN") {
			t.Errorf("the removed node is shown DOWN: %q", l)
		}
	}
	// The events, oldest first: their times never go back.
	stamp := regexp.MustCompile(`^\s*(\d\d:\d\d:\d\d) `)
	var last string
	n := 0
	for _, l := range strings.Split(screen[strings.Index(screen, "events"):], "\n") {
		if m := stamp.FindStringSubmatch(l); m != nil {
			n++
			if m[1] < last {
				t.Errorf("events out of time order: %s after %s\n%s", m[1], last, screen)
			}
			last = m[1]
		}
	}
	if n < 3 {
		t.Errorf("only %d events on screen:\n%s", n, screen)
	}
}

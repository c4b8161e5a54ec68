//go:build unix

package main

// End-to-end tests of the shell defects of issue #12: each runs the real
// binary and fails without its fix.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/server"
)

// TestE2ERunChildEnvNoAdminToken (#12 item 4): the command gets neither
// admin credential, keeps the client token it was given, and finds the
// fencing token under TICKETING_FENCING_TOKEN; a nested ticketing call
// authenticates with the inherited client token.
func TestE2ERunChildEnvNoAdminToken(t *testing.T) {
	e := newE2E(t, func(c *server.Config) { c.ClientToken, c.AdminToken = "cli-secret", "adm-secret" })
	af := filepath.Join(e.dir, "admin.token")
	if err := os.WriteFile(af, []byte("adm-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.env = append(e.env, "TICKETING_TOKEN=cli-secret", "TICKETING_ADMIN_TOKEN=adm-secret", "TICKETING_ADMIN_TOKEN_FILE="+af)
	p := e.expect(0, "run", "envk", "--", "sh", "-c", `
test -z "${TICKETING_ADMIN_TOKEN+x}" || { echo "admin token inherited" >&2; exit 11; }
test -z "${TICKETING_ADMIN_TOKEN_FILE+x}" || { echo "admin token file inherited" >&2; exit 12; }
test "$TICKETING_TOKEN" = cli-secret || { echo "client token replaced" >&2; exit 13; }
case "$TICKETING_FENCING_TOKEN" in ''|*[!0-9]*) echo "no fencing token" >&2; exit 14;; esac
t=$("$0" acquire nested -n) || exit 15
"$0" release nested "$t" || exit 16`, e.bin)
	if p.err.Len() != 0 {
		t.Errorf("stderr %q", p.err.String())
	}
}

// TestE2ERunStopScheduleFitsLease (#12 item 2): with a 4 s lease and a
// command that ignores SIGTERM, the command's last sign of life comes
// before the next holder's grant; a --kill-grace that cannot fit is exit 2
// naming the numbers.
func TestE2ERunStopScheduleFitsLease(t *testing.T) {
	e := newE2E(t, nil)
	p := e.expect(ExitUsage, "run", "sched", "--lease", "4s", "--kill-grace", "5s", "--", "true")
	oneStderrLine(t, p)
	if s := p.err.String(); !strings.Contains(s, "--lease 4s") || !strings.Contains(s, "--kill-grace 5s") {
		t.Errorf("stderr %q does not name the numbers", s)
	}

	r := e.start("", "run", "sched", "--lease", "4s", "--", "sh", "-c",
		`trap "" TERM; while :; do date +%s%N >> beat; sleep 0.05; done`)
	waitFile(t, e.path("beat"))
	next := e.expect(0, "acquire", "sched", "--wait", "30s", "--lease", "10s", "-o", "json")
	var j struct {
		Deadline time.Time `json:"deadline"`
	}
	if err := json.Unmarshal([]byte(next.out.String()), &j); err != nil {
		t.Fatal(err)
	}
	granted := j.Deadline.Add(-10 * time.Second) // at or before the grant
	if code := r.wait(t); code != ExitLeaseLost {
		t.Fatalf("run exit %d, want 9: %s", code, r.err.String())
	}
	lines := strings.Fields(e.readFile("beat"))
	ns, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if last := time.Unix(0, ns); !last.Before(granted) {
		t.Errorf("the command ran until %v, %v after the next holder's grant", last.Format(time.StampMilli), last.Sub(granted))
	}
}

// TestE2EConflictQuiet (#12 item 6): with -E a conflict exits with the
// chosen code and writes nothing (cron mails nothing); without -E, a -n
// failure says the key is held, not that it timed out.
func TestE2EConflictQuiet(t *testing.T) {
	e := newE2E(t, nil)
	e.expect(0, "acquire", "q", "--lease", "60s")
	for _, args := range [][]string{
		{"acquire", "q", "-n", "-E", "0"},
		{"run", "q", "-n", "-E", "0", "--", "sh", "-c", "echo ran"},
		{"acquire", "q", "--wait", "0.2", "-E", "0"},
	} {
		p := e.expect(0, args...)
		if p.err.Len() != 0 || p.out.Len() != 0 {
			t.Errorf("%v: stdout %q stderr %q, want silence", args, p.out.String(), p.err.String())
		}
	}
	p := e.expect(75, "run", "q", "-n", "-E", "75", "--", "true")
	if p.err.Len() != 0 {
		t.Errorf("-E 75: stderr %q", p.err.String())
	}
	for _, cmd := range [][]string{{"acquire", "q", "-n"}, {"run", "q", "-n", "--", "true"}} {
		p := e.expect(ExitTimeout, cmd...)
		oneStderrLine(t, p)
		if s := p.err.String(); !strings.Contains(s, "is held") || strings.Contains(s, "timed out") {
			t.Errorf("%v: stderr %q, want it to say the key is held", cmd, s)
		}
	}
}

// TestE2EJSONTokensAreStrings (#12 item 5): no JSON output of any command
// carries a token as a JSON number (jq would round it above 2^53).
func TestE2EJSONTokensAreStrings(t *testing.T) {
	e := newE2E(t, nil)
	e.expect(0, "acquire", "j", "--lease", "60s", "-o", "json")
	numeric := regexp.MustCompile(`"[a-z_]*token[a-z_]*"\s*:\s*-?[0-9]`)
	quoted := regexp.MustCompile(`"token"\s*:\s*"[0-9]+"`)
	sawLocksToken := false
	for _, args := range [][]string{
		{"acquire", "j2", "-o", "json"},
		{"locks", "-o", "json"},
		{"status", "-o", "json"},
		{"health", "-o", "json"},
		{"ping", "-c", "1", "-o", "json"},
		{"node", "list", "-o", "json", "--timeout", "2s"},
		{"clock-skew", "-o", "json", "--timeout", "2s"},
	} {
		p := e.run(args...)
		if m := numeric.FindString(p.out.String()); m != "" {
			t.Errorf("%v: a numeric token in its JSON: %s", args, m)
		}
		if args[0] == "locks" {
			sawLocksToken = quoted.MatchString(p.out.String())
		}
	}
	if !sawLocksToken {
		t.Error("locks -o json shows no token string")
	}
}

// TestE2EAddrNeverWorks (#12 item 9): an address that can never work is
// exit 2 at once; an unknown host is exit 7 right after resolution fails,
// not after the whole --timeout.
func TestE2EAddrNeverWorks(t *testing.T) {
	e := newE2E(t, nil)
	for _, tc := range []struct {
		code int
		args []string
	}{
		{ExitUsage, []string{"acquire", "k", "--addr", "127.0.0.1:74700", "--timeout", "30s"}},
		{ExitUsage, []string{"status", "--addr", "127.0.0.1:0", "--timeout", "30s"}},
		{ExitUsage, []string{"locks", "--addr", ":7470", "--timeout", "30s"}},
		{ExitUsage, []string{"release", "k", "1", "--addr", "[::1", "--timeout", "30s"}},
		{ExitConnect, []string{"acquire", "k", "--addr", "no-such-host.invalid:7470", "--timeout", "30s"}},
		{ExitConnect, []string{"status", "--addr", "no-such-host.invalid:7470", "--timeout", "30s"}},
	} {
		p := e.expect(tc.code, tc.args...)
		oneStderrLine(t, p)
		if el := p.end.Sub(p.start); el > 15*time.Second {
			t.Errorf("%v took %v (--timeout 30s): want at once", tc.args, el)
		}
	}
}

// TestE2EUsageOneLineAndVersion (#12 item 13): a usage error is one line
// (no "Run '… --help' for usage."), and `ticketing --version` works.
func TestE2EUsageOneLineAndVersion(t *testing.T) {
	e := newE2E(t, nil)
	for _, args := range [][]string{
		{"acquire"}, {"acquire", "k", "--bogus"}, {"nosuchcommand"}, {"status", "extra"}, {"acquire", "k", "--lease"},
	} {
		p := e.expect(ExitUsage, args...)
		oneStderrLine(t, p)
	}
	p := e.expect(0, "--version")
	if !strings.HasPrefix(p.out.String(), "ticketing ") {
		t.Errorf("--version printed %q", p.out.String())
	}
}

// TestE2ETokenPrecedenceAndAdminHint (#12 item 12): --token on the command
// line wins over TICKETING_TOKEN_FILE from the environment; --token with
// --token-file is exit 2; an admin command refused with the client token
// says the admin token is needed.
func TestE2ETokenPrecedenceAndAdminHint(t *testing.T) {
	e := newE2E(t, func(c *server.Config) { c.ClientToken, c.AdminToken = "right-client", "right-admin" })
	wrong := e.path("wrong.token")
	if err := os.WriteFile(wrong, []byte("wrong-client\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.env = append(e.env, "TICKETING_TOKEN_FILE="+wrong)
	p := e.expect(0, "acquire", "tp", "--token", "right-client")
	e.expect(0, "release", "tp", strings.TrimSpace(p.out.String()), "--token", "right-client")
	oneStderrLine(t, e.expect(ExitUsage, "acquire", "tp", "--token", "right-client", "--token-file", wrong))

	p = e.expect(ExitAuth, "status", "--token", "right-client")
	oneStderrLine(t, p, "right-client", "right-admin")
	if !strings.Contains(p.err.String(), "admin token") {
		t.Errorf("stderr %q does not say an admin token is needed", p.err.String())
	}
	e.expect(0, "status", "--token", "right-client", "--admin-token", "right-admin")
}

// TestE2ELimitsNamed (#12 items 11, 17 key): a lease or wait above the
// server's limit names the limit and the serve flag; a key too long does
// not echo the whole key.
func TestE2ELimitsNamed(t *testing.T) {
	e := newE2E(t, func(c *server.Config) { c.MaxLease, c.MaxWait = time.Minute, time.Minute })
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"acquire", "lim", "--lease", "2h"}, "--max-lease"},
		{[]string{"run", "lim", "--lease", "2h", "--", "true"}, "--max-lease"},
		{[]string{"acquire", "lim", "--wait", "2h"}, "--max-wait"},
	} {
		p := e.expect(ExitUsage, tc.args...)
		oneStderrLine(t, p)
		if !strings.Contains(p.err.String(), tc.want) {
			t.Errorf("%v: stderr %q does not name %s", tc.args, p.err.String(), tc.want)
		}
	}
	long := strings.Repeat("k", 300)
	p := e.expect(ExitUsage, "acquire", long)
	oneStderrLine(t, p)
	if strings.Contains(p.err.String(), long[:100]) || !strings.Contains(p.err.String(), "300 bytes") {
		t.Errorf("stderr %q", p.err.String())
	}
}

// TestE2EDeployForceKeepsTLS (#12 item 8): docs/operations.md §4 (a TLS
// deployment) then §6 (token rotation with --force, without --tls-dir)
// keeps TLS: the units still load the certificates and client.env still
// names the CA and the client certificate.
func TestE2EDeployForceKeepsTLS(t *testing.T) {
	bin := ticketingBin(t)
	t.Parallel()
	out := filepath.Join(t.TempDir(), "prod")
	nodes := "db1.example.com,db2.example.com,db3.example.com"
	run := func(args ...string) string {
		t.Helper()
		b, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	run("deploy", "--nodes", nodes, "--format", "systemd", "--tls-dir", "/etc/ticketing/tls", "--out", out)
	tlsFiles := func() (unit, env string) {
		t.Helper()
		matches, _ := filepath.Glob(filepath.Join(out, "*.service"))
		if len(matches) == 0 {
			t.Fatalf("no unit in %s", out)
		}
		u, _ := os.ReadFile(matches[0])
		c, _ := os.ReadFile(filepath.Join(out, "client.env"))
		return string(u), string(c)
	}
	u0, c0 := tlsFiles()
	if !strings.Contains(u0, "LoadCredential") || !strings.Contains(c0, "TICKETING_TLS_CA") {
		t.Fatalf("the TLS deployment has no TLS:\n%s\n%s", u0, c0)
	}
	note := run("deploy", "--nodes", nodes, "--format", "systemd", "--out", out, "--force")
	u1, c1 := tlsFiles()
	if !strings.Contains(u1, "LoadCredential") || !strings.Contains(c1, "TICKETING_TLS_CA") || !strings.Contains(c1, "TICKETING_TLS_CERT") {
		t.Errorf("--force dropped TLS:\n%s\n%s", u1, c1)
	}
	if !strings.Contains(note, "kept") {
		t.Errorf("no note that TLS was kept: %s", note)
	}
}

// TestE2ETLSVerifyFailureNamed (#12 item 10): a server certificate that
// does not verify is reported as such (x509 …, naming the address), not as
// "no connection to any server within …".
func TestE2ETLSVerifyFailureNamed(t *testing.T) {
	bin := ticketingBin(t)
	dir := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if b, err := exec.Command(bin, "deploy", "--nodes", "127.0.0.1", "--tls-dir", "/etc/ticketing/tls", "--out", filepath.Join(dir, d)).CombinedOutput(); err != nil {
			t.Fatalf("deploy: %v\n%s", err, b)
		}
	}
	e := newE2E(t, func(c *server.Config) {
		c.TLSCertFile, c.TLSKeyFile = filepath.Join(dir, "a", "tls", "n1.crt"), filepath.Join(dir, "a", "tls", "n1.key")
	})
	p := e.expect(ExitConnect, "acquire", "tls", "--tls-ca", filepath.Join(dir, "b", "tls", "ca.crt"), "--timeout", "3s")
	oneStderrLine(t, p)
	addr := strings.TrimPrefix(e.env[0], "TICKETING_ADDR=")
	if s := p.err.String(); !strings.Contains(s, "x509") || !strings.Contains(s, addr) {
		t.Errorf("stderr %q: want the x509 reason and the address", s)
	}
	e.expect(0, "acquire", "tls", "--tls-ca", filepath.Join(dir, "a", "tls", "ca.crt"))
	p = e.expect(ExitConnect, "status", "--tls-ca", filepath.Join(dir, "b", "tls", "ca.crt"), "--timeout", "3s")
	if !strings.Contains(p.err.String(), "x509") {
		t.Errorf("status stderr %q", p.err.String())
	}
}

// TestE2EPingNoHeaderBeforeError (#12 item 17 ping): a ping that gets no
// answer prints no table header, only the one error line.
func TestE2EPingNoHeaderBeforeError(t *testing.T) {
	e := newE2E(t, nil)
	port := freePorts(t, 1)[0]
	p := e.expect(ExitConnect, "ping", "--addr", hp("127.0.0.1", port), "--timeout", "1s", "-c", "1")
	if p.out.Len() != 0 {
		t.Errorf("stdout %q, want nothing", p.out.String())
	}
	oneStderrLine(t, p)
}

// TestE2EBenchAddrList (#12 item 7): bench takes the --addr list every
// command takes (a comma-separated list, the first answering server or the
// cluster's leader), and -o json works.
func TestE2EBenchAddrList(t *testing.T) {
	e := newE2E(t, nil)
	addr := strings.TrimPrefix(e.env[0], "TICKETING_ADDR=")
	dead := hp("127.0.0.1", freePorts(t, 1)[0])
	p := e.expect(0, "bench", "--addr", dead+","+addr, "--duration", "0.5s", "--conns", "1", "--pipeline", "1", "--keys", "10", "--progress=false", "--server-stats=false", "-o", "json")
	var res struct {
		Addr     string            `json:"addr"`
		Outcomes map[string]uint64 `json:"outcomes"`
	}
	if err := json.Unmarshal([]byte(p.out.String()), &res); err != nil {
		t.Fatalf("bench -o json: %v: %s", err, p.out.String())
	}
	if res.Addr != addr || res.Outcomes["G"] == 0 {
		t.Errorf("bench drove %s with outcomes %v, want %s with grants", res.Addr, res.Outcomes, addr)
	}
	oneStderrLine(t, e.expect(ExitUsage, "bench", "--addr", "127.0.0.1:74700", "--duration", "0.5s"))
}

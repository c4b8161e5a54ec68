//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ticketing/ticketing/server"
)

// docExample is one documented shell example, made runnable.
type docExample struct {
	where string
	sh    string   // the snippet, after the substitutions
	env   []string // KEY=VALUE lines of a crontab
	guard bool     // guards a critical section: when the lock is held, nothing past it may run
	bare  bool     // runs without the test's TICKETING_* and with cron's PATH (crontabs, systemd units)
	code  int      // exit code when held (guard examples)
}

// TestE2EDocShellExamples (#12 item 1) runs every shell example of
// README.md, docs/cli.md and the acquire/run --help Examples that takes a
// lock: with the lock free the guarded work runs, and with the lock held by
// someone else nothing past the guard runs (the old `acquire -n -E 0 ||
// exit` fell through). Substitutions: paths of the examples' programs
// become stubs that log, the token file a real one, the cluster addresses
// the test server, and waits 1 s.
func TestE2EDocShellExamples(t *testing.T) {
	// A distinct admin token: an admin query (health) with only the client
	// token fails, as on a real deployment.
	e := newE2E(t, func(c *server.Config) { c.ClientToken, c.AdminToken = "doc-client-token", "doc-admin-token" })
	tokFile, adminTokFile := e.path("token"), e.path("admin.token")
	if err := os.WriteFile(tokFile, []byte("doc-client-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(adminTokFile, []byte("doc-admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stubs := e.path("stubs")
	if err := os.Mkdir(stubs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nightly-report", "backup.sh", "migrate-db", "roll-out", "report.sh", "generate"} {
		if err := os.WriteFile(filepath.Join(stubs, n), []byte("#!/bin/sh\necho \"$0 $*\" >> \"$STUBLOG\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	addr := strings.TrimPrefix(e.env[0], "TICKETING_ADDR=")
	binDir := filepath.Dir(e.bin)
	subst := strings.NewReplacer(
		// The install location of docs/operations.md §1 is the test binary's.
		"PATH=/usr/local/bin:", "PATH="+binDir+":"+stubs+":",
		"/usr/local/bin/ticketing", e.bin,
		"/etc/ticketing/admin.token", adminTokFile,
		"/usr/local/bin/nightly-report", filepath.Join(stubs, "nightly-report"),
		"/usr/local/bin/backup.sh", filepath.Join(stubs, "backup.sh"),
		"./migrate-db", filepath.Join(stubs, "migrate-db"),
		"./roll-out", filepath.Join(stubs, "roll-out"),
		"./report.sh", filepath.Join(stubs, "report.sh"),
		"/etc/ticketing/token", tokFile,
		"locks1:7470,locks2:7470,locks3:7470", addr,
		"n1:7470,n2:7470,n3:7470", addr,
		"/usr/bin/ticketing", "ticketing",
		"--wait 2m", "--wait 1s", "--wait 30s", "--wait 1s",
	)

	// The runnable blocks also: the quick start's "make build" and
	// "serve &" are the test's binary (bin/ticketing) and server;
	// scripts/ are the tree's; cluster-local.sh gets free ports and a
	// state directory of the test's.
	root, _ := filepath.Abs("../..")
	if err := os.MkdirAll(e.path("bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.bin, e.path("bin/ticketing")); err != nil {
		t.Fatal(err)
	}
	runSubst := strings.NewReplacer("make build", "true", "bin/ticketing serve &", "true", "scripts/", root+"/scripts/")
	clusterBase, clusterDir := depFreeRange(t, 6), e.path("cluster-local")
	t.Cleanup(func() {
		c := exec.Command("bash", root+"/scripts/cluster-local.sh", "stop")
		c.Env = append(os.Environ(), "TICKETING_CLUSTER_DIR="+clusterDir, "TICKETING_CLUSTER_PORT="+strconv.Itoa(clusterBase), "TICKETING_BIN="+e.bin)
		c.Run() // a runnable block that failed half-way leaves no node behind
	})

	var exs []docExample
	for _, doc := range []string{"../../README.md", "../../docs/cli.md"} {
		exs = append(exs, docExamples(t, doc, subst)...)
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	for _, doc := range append(docs, "../../README.md") {
		for _, ex := range runnableBlocks(t, doc, subst) {
			ex.sh = runSubst.Replace(ex.sh)
			ex.env = []string{"TICKETING_ADMIN_TOKEN_FILE=" + adminTokFile, "TICKETING_BIN=" + e.bin,
				"TICKETING_CLUSTER_DIR=" + clusterDir, "TICKETING_CLUSTER_PORT=" + strconv.Itoa(clusterBase)}
			exs = append(exs, ex)
		}
	}
	for _, cmd := range []string{"acquire", "run"} {
		p := e.expect(0, cmd, "--help")
		_, ex, ok := strings.Cut(p.out.String(), "\nExamples:\n")
		if !ok {
			t.Fatalf("%s --help has no Examples", cmd)
		}
		ex, _, _ = strings.Cut(ex, "\n\n")
		for _, l := range strings.Split(ex, "\n") {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			d := docExample{where: cmd + " --help: " + l, sh: subst.Replace(l), guard: !strings.Contains(l, "| jq")}
			if strings.HasPrefix(l, "ticketing run") && strings.Contains(l, "-E 0") {
				d.code = 0
			}
			exs = append(exs, d)
		}
	}
	if len(exs) < 8 {
		t.Fatalf("found only %d examples", len(exs))
	}

	path := filepath.Dir(e.bin) + ":" + stubs + ":" + os.Getenv("PATH")
	for i, ex := range exs {
		if strings.Contains(ex.sh, "jq") {
			if _, err := exec.LookPath("jq"); err != nil {
				continue
			}
		}
		for _, held := range []bool{true, false} { // held first: a free run of a fragment may keep its lock
			if held && !ex.guard {
				continue
			}
			log := e.path("stublog")
			os.Remove(log)
			var k, tok string
			if key := regexp.MustCompile(`ticketing (?:acquire|run) ("\$key"|\S+)`).FindStringSubmatch(ex.sh); key != nil {
				if k = key[1]; k == `"$key"` {
					k = "deploy/web"
				}
			}
			if held {
				if k == "" {
					t.Fatalf("%s: no key", ex.where)
				}
				tok = strings.TrimSpace(e.expect(0, "acquire", k, "--lease", "60s", "--token-file", tokFile).out.String())
			}
			script := ex.sh
			if !strings.Contains(script, "ticketing run") {
				// acquire guards what follows it: the marker is that.
				script += "\necho entered-past-the-guard ${token:-} >> \"$STUBLOG\""
			}
			c := exec.Command("sh", "-c", script)
			c.Dir = e.dir
			c.Env = append([]string{"PATH=" + path, "STUBLOG=" + log, "TICKETING_TOKEN_FILE=" + tokFile, "TICKETING_ADDR=" + addr, "TICKETING_WAIT=1s", "HOME=" + e.dir}, ex.env...)
			if ex.bare {
				// cron's environment: PATH=/usr/bin:/bin and the crontab's
				// lines; a systemd unit's: nothing of the test's.
				c.Env = append([]string{"PATH=/usr/bin:/bin", "STUBLOG=" + log, "HOME=" + e.dir}, ex.env...)
			}
			out, err := c.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			ran, _ := os.ReadFile(log)
			switch {
			case !held && (code != 0 || len(ran) == 0):
				t.Errorf("example %d (%s), lock free: exit %d, work ran: %q; output %s", i, ex.where, code, ran, out)
			case held && len(ran) != 0:
				t.Errorf("example %d (%s), lock held: ran past the guard: %q (exit %d)", i, ex.where, ran, code)
			case held && ex.code == 0 && strings.Contains(ex.sh, "-E 0") && (code != 0 || len(out) != 0):
				t.Errorf("example %d (%s), lock held: exit %d, output %q; want 0 and silence", i, ex.where, code, out)
			}
			if held {
				e.expect(0, "release", k, tok, "--token-file", tokFile)
			} else if f := strings.Fields(string(ran)); len(f) == 2 && f[0] == "entered-past-the-guard" {
				e.run("release", k, f[1], "--token-file", tokFile) // a fragment that keeps its lock
			}
		}
	}
}

// docExamples are the lock-taking shell examples of a Markdown file: the
// crontab lines of ```cron blocks and the ```sh blocks that run acquire or
// run (not the build or server start-up sequences).
func docExamples(t *testing.T, path string, subst *strings.Replacer) []docExample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var exs []docExample
	blocks := regexp.MustCompile("(?ms)^```(sh|cron)\n(.*?)^```").FindAllStringSubmatch(string(b), -1)
	for _, m := range blocks {
		lang, body := m[1], m[2]
		switch {
		case lang == "cron":
			var env []string
			for _, l := range strings.Split(body, "\n") {
				l = strings.TrimSpace(l)
				switch {
				case l == "" || strings.HasPrefix(l, "#"):
				case regexp.MustCompile(`^[A-Z_]+=`).MatchString(l):
					env = append(env, subst.Replace(l))
				default:
					f := strings.Fields(l) // min hour dom mon dow user command...
					if len(f) < 7 {
						t.Fatalf("%s: crontab line %q", path, l)
					}
					exs = append(exs, docExample{where: path + ": " + l, sh: subst.Replace(strings.Join(f[6:], " ")), env: env, guard: true, bare: true})
				}
			}
		case strings.Contains(body, "ticketing acquire") || strings.Contains(body, "ticketing run") || strings.Contains(body, "ticketing health"):
			if strings.Contains(body, "serve &") {
				continue // the quick start: starts its own server
			}
			unit := strings.Contains(body, "ExecStartPre=")
			body = strings.ReplaceAll(body, "ExecStartPre=", "")
			exs = append(exs, docExample{where: path + ": " + strings.SplitN(strings.TrimSpace(body), "\n", 2)[0] + " …", sh: subst.Replace(body),
				guard: !strings.Contains(body, "ticketing health"), code: 3, bare: unit})
		}
	}
	return exs
}

// runnableBlocks are the ```sh blocks of a Markdown file marked runnable
// (issue #28 item 8): a line "<!-- runnable -->" right before the fence.
// Each must exit 0 against the test's server (TICKETING_ADDR and
// TICKETING_TOKEN_FILE set), after the substitutions.
func runnableBlocks(t *testing.T, path string, subst *strings.Replacer) []docExample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var exs []docExample
	for _, m := range regexp.MustCompile("(?ms)^<!-- runnable -->\n```sh\n(.*?)^```").FindAllStringSubmatch(string(b), -1) {
		exs = append(exs, docExample{where: path + " (runnable): " + strings.SplitN(strings.TrimSpace(m[1]), "\n", 2)[0] + " …", sh: subst.Replace(m[1])})
	}
	return exs
}

// docShellExempt are the Markdown files whose shell blocks the doc tests do
// not walk: docs/benchmarks*.md are generated from measured runs by the
// bench scripts (issue #36 item 2), whose command lines they quote.
var docShellExempt = map[string]bool{"benchmarks.md": true, "benchmarks-history.md": true}

// A shell block is run by a test, or marked as one that cannot run here.
var (
	shellFence   = regexp.MustCompile("(?ms)^((?:<!--[^\n]*-->\n)?)```(sh|bash|shell|console|cron|zsh)\n(.*?)^```")
	bareFence    = regexp.MustCompile("(?ms)^```\n(.*?)^```")
	notRunnable  = regexp.MustCompile(`^<!-- not runnable: (\S.*\S) -->$`)
	shellCommand = regexp.MustCompile(`(?m)^\s*(\$ |(ticketing|make|scripts/\S+|go|sudo|curl|kill|export|install|systemctl|docker) )`)
)

// TestEveryDocShellBlockRunOrMarked (issue #28 item 8): every shell example
// of README.md and docs/*.md is run by a test against a real server or is
// marked "<!-- not runnable: REASON -->" on the line before its fence. Run
// are: blocks marked "<!-- runnable -->" (TestE2EDocShellExamples runs
// them, each must exit 0), "<!-- ops-check -->" (TestOperationsDoc runs
// them as one session) and the lock-taking examples docExamples finds
// (crontabs and blocks with acquire, run or health: TestE2EDocShellExamples
// runs them with the lock free and held). A block that is none of these
// fails, as does a fence without a language whose lines are commands.
func TestEveryDocShellBlockRunOrMarked(t *testing.T) {
	docs, _ := filepath.Glob("../../docs/*.md")
	docs = append(docs, "../../README.md")
	lockExamples := map[string]bool{}
	for _, doc := range []string{"../../README.md", "../../docs/cli.md"} {
		for _, ex := range docExamples(t, doc, strings.NewReplacer()) {
			lockExamples[ex.where] = true
		}
	}
	n := 0
	for _, doc := range docs {
		if docShellExempt[filepath.Base(doc)] {
			continue
		}
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range shellFence.FindAllStringSubmatchIndex(text, -1) {
			n++
			marker, lang, body := text[m[2]:m[3]], text[m[4]:m[5]], text[m[6]:m[7]]
			line := strings.Count(text[:m[0]], "\n") + 1 + strings.Count(marker, "\n")
			marker = strings.TrimSpace(marker)
			where := fmt.Sprintf("%s:%d", strings.TrimPrefix(doc, "../../"), line)
			switch {
			case marker == "<!-- runnable -->" && lang != "cron":
			case strings.HasPrefix(marker, "<!-- ops-check") && filepath.Base(doc) == "operations.md":
			case notRunnable.MatchString(marker):
			case marker == "" && isLockExample(doc, body, lang, lockExamples):
			default:
				t.Errorf("%s: a %s block that no test runs: mark it <!-- runnable --> (it must exit 0 against the test's server) or <!-- not runnable: REASON --> (systemd, an install as root, several hosts…); marker %q", where, lang, marker)
			}
		}
		for _, m := range bareFence.FindAllStringSubmatchIndex(text, -1) {
			if body := text[m[2]:m[3]]; shellCommand.MatchString(body) && !strings.Contains(body, "[") {
				t.Errorf("%s:%d: a fence without a language holding commands: label it sh (and run or mark it) or text", strings.TrimPrefix(doc, "../../"), strings.Count(text[:m[0]], "\n")+1)
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d shell blocks", n)
	}
}

// isLockExample reports whether docExamples runs this block (its where
// names the block's first line).
func isLockExample(doc, body, lang string, lockExamples map[string]bool) bool {
	if lang == "cron" {
		for _, l := range strings.Split(body, "\n") {
			if lockExamples[doc+": "+strings.TrimSpace(l)] {
				return true
			}
		}
		return false
	}
	b := strings.ReplaceAll(body, "ExecStartPre=", "")
	return lockExamples[doc+": "+strings.SplitN(strings.TrimSpace(b), "\n", 2)[0]+" …"]
}

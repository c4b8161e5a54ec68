// Command runner runs the client testkit matrix (docs/clients.md): every
// selected language's driver against a single node, a 3-node cluster and a
// mutual-TLS server, plus fault proxies and scripted fake servers.
//
//	go run ./client/testkit/cmd/runner [-langs go,python] [-modes single,cluster,tls] [-run REGEX] [-bin bin/ticketing] [-json] [-markdown docs/clients.md]
//
// Exit status 1 when any cell failed, 2 on bad usage or setup.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/ticketing/ticketing/client/testkit"
)

func main() {
	langs := flag.String("langs", "", "comma-separated languages (default: all; those without a driver or toolchain are reported as skipped, Go always runs)")
	bin := flag.String("bin", "", "ticketing binary (default: $TICKETING_BIN, else <root>/bin/ticketing)")
	run := flag.String("run", "", "only scenarios matching this regular expression")
	modes := flag.String("modes", strings.Join(testkit.AllModes, ","), "comma-separated modes: single, cluster, tls")
	asJSON := flag.Bool("json", false, "print the cells as JSON instead of the table")
	md := flag.String("markdown", "", "also write the matrix as markdown between the testkit markers of this file")
	root := flag.String("root", "", "repository root (default: found from the working directory)")
	goDriver := flag.String("go-driver", "", "Go driver executable (default: <root>/client/testkit/driver)")
	list := flag.Bool("list", false, "list the scenarios and exit")
	from := flag.String("from", "", "render the cells of an earlier -json run (file) instead of running")
	quiet := flag.Bool("q", false, "no progress lines on stderr")
	knownPath := flag.String("known", "", "known-failures list (default: <root>/"+testkit.KnownFailuresFile+"; \"none\": none)")
	flag.Parse()
	if *list {
		for _, s := range testkit.ScenarioNames() {
			fmt.Println(s)
		}
		return
	}
	r := *root
	if r == "" {
		r = findRoot()
	}
	var known *testkit.KnownFailures
	if *knownPath != "none" {
		p := *knownPath
		if p == "" {
			p = filepath.Join(r, testkit.KnownFailuresFile)
		}
		var err error
		if known, err = testkit.LoadKnownFailures(p); err != nil {
			fmt.Fprintln(os.Stderr, "runner:", err)
			os.Exit(2)
		}
	}
	if *from != "" {
		b, err := os.ReadFile(*from)
		var out []testkit.Outcome
		if err == nil {
			err = json.Unmarshal(b, &out)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "runner: -from:", err)
			os.Exit(2)
		}
		for i := range out {
			out[i].Known, out[i].KnownLine = "", 0
			switch out[i].Status {
			case testkit.KnownFail:
				out[i].Status = testkit.Fail
			case testkit.XPass:
				out[i].Status = testkit.Pass
			}
			known.Mark(&out[i])
		}
		finish(out, *asJSON, *md)
		return
	}
	b := *bin
	if b == "" {
		b = os.Getenv("TICKETING_BIN")
	}
	if b == "" {
		b = filepath.Join(r, "bin", "ticketing")
	}
	if _, err := os.Stat(b); err != nil {
		fmt.Fprintf(os.Stderr, "runner: ticketing binary %s: %v (run `make build`, or pass -bin)\n", b, err)
		os.Exit(2)
	}
	var filter *regexp.Regexp
	if *run != "" {
		var err error
		if filter, err = regexp.Compile(*run); err != nil {
			fmt.Fprintf(os.Stderr, "runner: -run: %v\n", err)
			os.Exit(2)
		}
	}
	names := testkit.LangNames()
	if *langs != "" {
		names = split(*langs)
	}
	isLang := map[string]bool{}
	for _, l := range testkit.LangNames() {
		isLang[l] = true
	}
	var ls []testkit.Lang
	for _, n := range names {
		if !isLang[n] {
			fmt.Fprintf(os.Stderr, "runner: unknown language %q (%s)\n", n, strings.Join(testkit.LangNames(), ", "))
			os.Exit(2)
		}
		l := testkit.Discover(r, n)
		if n == "go" && *goDriver != "" {
			l = testkit.Lang{Name: "go", Driver: *goDriver}
		}
		ls = append(ls, l)
	}
	ms := split(*modes)
	for _, m := range ms {
		if m != "single" && m != "cluster" && m != "tls" {
			fmt.Fprintf(os.Stderr, "runner: unknown mode %q (single, cluster, tls)\n", m)
			os.Exit(2)
		}
	}
	dir, err := os.MkdirTemp("", "testkit-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "runner:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(dir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "runner: interrupted: killing every server and driver")
		testkit.KillAll()
		os.RemoveAll(dir)
		os.Exit(130)
	}()
	cfg := testkit.Config{Bin: b, Langs: ls, Modes: ms, Filter: filter, Dir: dir, Known: known}
	if !*quiet {
		cfg.Log = os.Stderr
	}
	out := testkit.Run(cfg)
	os.RemoveAll(dir)
	finish(out, *asJSON, *md)
}

func finish(out []testkit.Outcome, asJSON bool, md string) {
	if asJSON {
		testkit.WriteJSON(os.Stdout, out)
	} else {
		testkit.WriteTable(os.Stdout, out, false)
	}
	if md != "" {
		if err := writeMarkdown(md, out); err != nil {
			fmt.Fprintln(os.Stderr, "runner:", err)
			os.Exit(2)
		}
	}
	if testkit.Failed(out) {
		os.Exit(1)
	}
}

const (
	beginMark = "<!-- testkit:matrix:begin -->"
	endMark   = "<!-- testkit:matrix:end -->"
)

// writeMarkdown replaces the text between the markers of path (appending
// them when absent) with the matrix.
func writeMarkdown(path string, out []testkit.Outcome) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var tb bytes.Buffer
	testkit.WriteTable(&tb, out, true)
	block := beginMark + "\n" + tb.String() + endMark
	s := string(old)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(endMark):]
	} else {
		s += "\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func findRoot() string {
	d, _ := os.Getwd()
	for p := d; ; p = filepath.Dir(p) {
		if b, err := os.ReadFile(filepath.Join(p, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/ticketing/ticketing\n")) {
			return p
		}
		if filepath.Dir(p) == p {
			return d
		}
	}
}

package testkit

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// KnownFailuresFile is the one list of cells expected to fail until a
// language's issue lands, relative to the repository root.
const KnownFailuresFile = "client/testkit/known-failures.txt"

// Cell statuses set from the known-failures list (known.go).
const (
	// KnownFail: a listed cell that failed. Shown with the title of the issue
	// that will fix it; it does not fail the run.
	KnownFail = "KNOWN-FAIL"
	// XPass: a listed cell that passed. Loud (remove its line), but it does
	// not fail the run: a flaky cell that passes once must not turn CI red.
	XPass = "XPASS"
)

// KnownFailure is one line of the known-failures file:
//
//	<lang> <mode|*> <scenario|*>  # <title of the issue that will fix it>
type KnownFailure struct {
	Lang, Mode, Scenario string
	Title                string
	Line                 int
}

func (k KnownFailure) matches(lang, mode, scenario string) bool {
	return k.Lang == lang && (k.Mode == "*" || k.Mode == mode) && (k.Scenario == "*" || k.Scenario == scenario)
}

// KnownFailures is the parsed list.
type KnownFailures struct {
	Path    string
	Entries []KnownFailure
}

// LoadKnownFailures reads the list at path (a missing file is an empty list).
func LoadKnownFailures(path string) (*KnownFailures, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return &KnownFailures{Path: path}, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseKnownFailures(path, b)
}

// ParseKnownFailures parses the file format: one cell pattern per line,
// blank lines and lines starting with # ignored. Every entry needs its
// issue title after " # "; a line naming an unknown language, mode or
// scenario, or a cell listed twice, is an error (a typo must not hide a
// failure or keep a dead line).
func ParseKnownFailures(path string, b []byte) (*KnownFailures, error) {
	kf := &KnownFailures{Path: path}
	scs := map[string]bool{"*": true}
	for _, s := range ScenarioNames() {
		scs[s] = true
	}
	modes := map[string]bool{"*": true}
	for _, m := range AllModes {
		modes[m] = true
	}
	langs := map[string]bool{}
	for _, l := range AllLangs {
		langs[l] = true
	}
	for _, v := range Variants {
		langs[v.Name] = true
	}
	seen := map[[3]string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cells, title, ok := strings.Cut(line, "#")
		title = strings.TrimSpace(title)
		f := strings.Fields(cells)
		switch {
		case !ok || title == "":
			return nil, fmt.Errorf("%s:%d: no issue title (`<lang> <mode|*> <scenario|*>  # <issue title>`)", path, n)
		case len(f) != 3:
			return nil, fmt.Errorf("%s:%d: want `<lang> <mode|*> <scenario|*>`, got %q", path, n, strings.TrimSpace(cells))
		case !langs[f[0]]:
			return nil, fmt.Errorf("%s:%d: unknown language %q", path, n, f[0])
		case !modes[f[1]]:
			return nil, fmt.Errorf("%s:%d: unknown mode %q (single, cluster, tls or *)", path, n, f[1])
		case !scs[f[2]]:
			return nil, fmt.Errorf("%s:%d: unknown scenario %q (runner -list)", path, n, f[2])
		}
		k := [3]string{f[0], f[1], f[2]}
		if p, dup := seen[k]; dup {
			return nil, fmt.Errorf("%s:%d: %s %s %s already listed on line %d", path, n, f[0], f[1], f[2], p)
		}
		seen[k] = n
		kf.Entries = append(kf.Entries, KnownFailure{Lang: f[0], Mode: f[1], Scenario: f[2], Title: title, Line: n})
	}
	return kf, sc.Err()
}

// Lookup is the entry listing the cell, if any.
func (kf *KnownFailures) Lookup(lang, mode, scenario string) (KnownFailure, bool) {
	if kf == nil {
		return KnownFailure{}, false
	}
	for _, k := range kf.Entries {
		if k.matches(lang, mode, scenario) {
			return k, true
		}
	}
	return KnownFailure{}, false
}

// Mark turns a listed cell's Fail into KnownFail and its Pass into XPass
// (setting Known to the issue title). Skip and NA cells stay as they are.
func (kf *KnownFailures) Mark(o *Outcome) {
	k, ok := kf.Lookup(o.Lang, o.Mode, o.Scenario)
	if !ok {
		return
	}
	switch o.Status {
	case Fail:
		o.Status, o.Known = KnownFail, k.Title
	case Pass:
		o.Status, o.Known = XPass, k.Title
		o.KnownLine = k.Line
	}
}

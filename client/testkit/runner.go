package testkit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// AllLangs are the official clients, in the matrix's column order.
var AllLangs = []string{"go", "python", "js", "rust", "java", "kotlin", "c", "cpp", "ruby", "csharp"}

// AllModes are the deployments.
var AllModes = []string{"single", "cluster", "tls"}

// Lang is one client under test.
type Lang struct {
	Name   string
	Driver string   // executable
	Env    []string // added to the driver's environment
	Skip   string   // non-empty: not available, and why (with the install command)
}

// CIScript is the ci.sh providing lang's toolchain: client/<lang>/ci.sh, or
// for kotlin and cpp without their own, java's and c's.
func CIScript(root, lang string) string {
	if p := filepath.Join(root, "client", lang, "ci.sh"); fileExists(p) {
		return p
	}
	switch lang {
	case "kotlin":
		lang = "java"
	case "cpp":
		lang = "c"
	}
	return filepath.Join(root, "client", lang, "ci.sh")
}

// DriverPath is the testkit.md path of lang's driver under the repo root.
func DriverPath(root, lang string) string {
	if lang == "go" {
		return filepath.Join(root, "client", "testkit", "driver")
	}
	return filepath.Join(root, "client", lang, "testkit", "driver")
}

// Discover resolves a language: its driver must exist and its `ci.sh
// toolchain` pass (Go needs neither check beyond the driver).
func Discover(root, name string) Lang {
	l := Lang{Name: name, Driver: DriverPath(root, name)}
	if name != "go" {
		ci := CIScript(root, name)
		if _, err := os.Stat(ci); err != nil {
			l.Skip = fmt.Sprintf("no %s yet (client not written)", rel(root, ci))
			return l
		}
		cmd := exec.Command(ci, "toolchain")
		cmd.Dir = filepath.Dir(ci)
		out, err := cmd.CombinedOutput()
		if err != nil {
			msg := strings.TrimSpace(string(out))
			if msg == "" {
				msg = err.Error()
			}
			l.Skip = "toolchain missing: " + oneLine(msg)
			return l
		}
	}
	if st, err := os.Stat(l.Driver); err != nil || st.Mode()&0o111 == 0 {
		l.Skip = fmt.Sprintf("driver %s not built: run `make drivers LANGS=%s`", rel(root, l.Driver), name)
	}
	return l
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

func oneLine(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	s = strings.Join(lines, "; ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Scenario is one named check, run against each selected language.
type Scenario struct {
	Name string
	// Modes it runs in (nil: every mode). Scenarios against a fake server or
	// a proxy run in "single" only: they do not depend on the deployment.
	Modes []string
	Run   func(t *T)
}

func (s Scenario) runsIn(mode string) bool {
	if s.Modes == nil {
		return true
	}
	for _, m := range s.Modes {
		if m == mode {
			return true
		}
	}
	return false
}

// Status of one cell.
const (
	Pass = "pass"
	Fail = "FAIL"
	Skip = "skip"
	NA   = "-"
)

// Outcome is one matrix cell.
type Outcome struct {
	Lang     string  `json:"lang"`
	Mode     string  `json:"mode"`
	Scenario string  `json:"scenario"`
	Status   string  `json:"status"`
	Reason   string  `json:"reason,omitempty"`
	Seconds  float64 `json:"seconds"`
}

// Config of a run.
type Config struct {
	Bin       string
	Langs     []Lang // Langs[i].Skip set: reported, not run
	Modes     []string
	Filter    *regexp.Regexp // nil: every scenario
	Dir       string         // scratch directory
	Log       io.Writer      // progress lines (nil: none)
	Scenarios []Scenario     // nil: Scenarios()
}

// failure is raised by T.Fatalf.
type failure struct{ msg string }

var keySeq atomic.Int64

// T is a scenario's handle on one run.
type T struct {
	Env      *Env
	Lang     Lang   // the language under test
	Langs    []Lang // every language being run (for cross-language scenarios)
	Scenario string
	cleanups []func()
	drivers  []*Driver
}

// Fatalf fails the scenario.
func (t *T) Fatalf(format string, args ...any) {
	panic(failure{fmt.Sprintf(format, args...)})
}

// Check fails the scenario on err.
func (t *T) Check(err error) {
	if err != nil {
		t.Fatalf("%v", err)
	}
}

// Cleanup registers f to run at the end of the scenario (last first).
func (t *T) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

// Key is a key unique to this scenario run.
func (t *T) Key(suffix string) string {
	return fmt.Sprintf("tk/%s/%s/%s/%d/%s", t.Env.Mode, t.Lang.Name, t.Scenario, keySeq.Add(1), suffix)
}

// Driver starts a driver of lang (not connected).
func (t *T) Driver(l Lang) *D {
	d, err := StartDriver(l.Name, l.Driver, l.Env)
	t.Check(err)
	t.drivers = append(t.drivers, d)
	return &D{t: t, d: d, Lang: l.Name}
}

// Connected starts a driver of lang connected to the environment.
func (t *T) Connected(l Lang) *D {
	d := t.Driver(l)
	d.MustConnect(t.Env.Addrs, t.Env.Token, t.Env.TLSSpec())
	return d
}

// D wraps a driver with failing helpers.
type D struct {
	t    *T
	d    *Driver
	Lang string
}

// Raw is the underlying driver.
func (d *D) Raw() *Driver { return d.d }

// Send sends a command.
func (d *D) Send(cmd map[string]any) *Pending {
	p, err := d.d.Send(cmd)
	d.t.Check(err)
	return p
}

// Call sends a command and waits up to timeout for its answer.
func (d *D) Call(cmd map[string]any, timeout time.Duration) Result {
	r, err := d.Send(cmd).Wait(timeout)
	d.t.Check(err)
	return r
}

// Connect sends connect and returns the answer.
func (d *D) Connect(addrs []string, token any, tls any, timeoutMS int) Result {
	c := map[string]any{"cmd": "connect", "addrs": addrs, "token": nil, "tls": tls}
	if s, ok := token.(string); ok && s != "" {
		c["token"] = s
	}
	if timeoutMS > 0 {
		c["connect_timeout_ms"] = timeoutMS
	}
	return d.Call(c, 30*time.Second)
}

// MustConnect connects or fails the scenario.
func (d *D) MustConnect(addrs []string, token any, tls any) {
	if r := d.Connect(addrs, token, tls, 0); !r.OK {
		d.t.Fatalf("%s: connect failed: %s", d.Lang, r)
	}
}

// AcquireCmd is an acquire command.
func AcquireCmd(key string, leaseMS, waitMS int64) map[string]any {
	return map[string]any{"cmd": "acquire", "key": key, "lease_ms": leaseMS, "wait_ms": waitMS}
}

// Acquire sends an acquire and waits for it (wait + 20 s at most).
func (d *D) Acquire(key string, leaseMS, waitMS int64) Result {
	return d.Call(AcquireCmd(key, leaseMS, waitMS), time.Duration(waitMS)*time.Millisecond+20*time.Second)
}

// MustAcquire acquires or fails the scenario; it returns the token.
func (d *D) MustAcquire(key string, leaseMS, waitMS int64) Result {
	r := d.Acquire(key, leaseMS, waitMS)
	if !r.OK || r.Token == "" {
		d.t.Fatalf("%s: acquire %q: want a grant, got %s", d.Lang, key, r)
	}
	return r
}

// Release sends a release and waits for it.
func (d *D) Release(key, token string) Result {
	return d.Call(map[string]any{"cmd": "release", "key": key, "token": token}, 20*time.Second)
}

// MustRelease releases or fails the scenario.
func (d *D) MustRelease(key, token string) {
	if r := d.Release(key, token); !r.OK {
		d.t.Fatalf("%s: release %q: want ok, got %s", d.Lang, key, r)
	}
}

// Expect fails unless r is an error of one of kinds.
func (t *T) Expect(r Result, what string, kinds ...string) {
	if r.OK {
		t.Fatalf("%s: want error %s, got ok: %s", what, strings.Join(kinds, " or "), r)
	}
	for _, k := range kinds {
		if r.Error == k {
			return
		}
	}
	t.Fatalf("%s: want error %s, got %s", what, strings.Join(kinds, " or "), r)
}

// Run runs the matrix and returns every cell.
func Run(cfg Config) []Outcome {
	scs := cfg.Scenarios
	if scs == nil {
		scs = Scenarios()
	}
	var out []Outcome
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	var active []Lang
	for _, l := range cfg.Langs {
		if l.Skip == "" {
			active = append(active, l)
		}
	}
	for _, mode := range cfg.Modes {
		var sel []Scenario
		for _, s := range scs {
			if cfg.Filter == nil || cfg.Filter.MatchString(s.Name) {
				sel = append(sel, s)
			}
		}
		var env *Env
		var envErr error
		needEnv := false
		for _, s := range sel {
			needEnv = needEnv || s.runsIn(mode)
		}
		if needEnv && len(active) > 0 {
			dir, err := os.MkdirTemp(cfg.Dir, "env-"+mode+"-")
			if err == nil {
				logf("== starting %s environment", mode)
				env, envErr = StartEnv(mode, cfg.Bin, dir)
			} else {
				envErr = err
			}
		}
		for _, l := range cfg.Langs {
			for _, s := range sel {
				o := Outcome{Lang: l.Name, Mode: mode, Scenario: s.Name}
				switch {
				case !s.runsIn(mode):
					o.Status = NA
				case l.Skip != "":
					o.Status, o.Reason = Skip, l.Skip
				case envErr != nil:
					o.Status, o.Reason = Fail, "environment: "+envErr.Error()
				default:
					start := time.Now()
					o.Status, o.Reason = runOne(env, l, active, s)
					o.Seconds = time.Since(start).Seconds()
					logf("%-6s %-7s %-32s %s %5.1fs %s", l.Name, mode, s.Name, o.Status, o.Seconds, firstLine(o.Reason))
				}
				out = append(out, o)
			}
		}
		if env != nil {
			env.Close()
		}
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func runOne(env *Env, l Lang, all []Lang, s Scenario) (status, reason string) {
	t := &T{Env: env, Lang: l, Langs: all, Scenario: s.Name}
	defer func() {
		// Every driver is stopped; a driver that does not exit 0 on EOF fails the scenario.
		var stopErr string
		for i := len(t.cleanups) - 1; i >= 0; i-- {
			t.cleanups[i]()
		}
		for _, d := range t.drivers {
			if err := d.Stop(10 * time.Second); err != nil && stopErr == "" {
				stopErr = err.Error()
			}
			if v := d.ProtocolViolation(); v != "" && stopErr == "" {
				stopErr = d.Lang + " driver broke the line protocol: " + v
			}
		}
		if status == Pass && stopErr != "" {
			status, reason = Fail, stopErr
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(failure); ok {
				status, reason = Fail, f.msg
				return
			}
			status, reason = Fail, fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	s.Run(t)
	return Pass, ""
}

// Failed reports whether any cell failed.
func Failed(out []Outcome) bool {
	for _, o := range out {
		if o.Status == Fail {
			return true
		}
	}
	return false
}

// WriteJSON writes the cells as a JSON array.
func WriteJSON(w io.Writer, out []Outcome) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteTable writes one table per mode (scenario × language), then the
// failures with their reasons and the skipped languages with why.
func WriteTable(w io.Writer, out []Outcome, markdown bool) {
	modes, langs, scs := axes(out)
	cell := map[[3]string]Outcome{}
	for _, o := range out {
		cell[[3]string{o.Mode, o.Lang, o.Scenario}] = o
	}
	for _, m := range modes {
		if markdown {
			fmt.Fprintf(w, "\n**%s**\n\n| scenario | %s |\n|---|%s\n", m, strings.Join(langs, " | "), strings.Repeat("---|", len(langs)))
		} else {
			fmt.Fprintf(w, "\n== mode %s\n%-34s", m, "scenario")
			for _, l := range langs {
				fmt.Fprintf(w, " %-7s", l)
			}
			fmt.Fprintln(w)
		}
		for _, s := range scs {
			if markdown {
				fmt.Fprintf(w, "| %s |", s)
			} else {
				fmt.Fprintf(w, "%-34s", s)
			}
			for _, l := range langs {
				st := cell[[3]string{m, l, s}].Status
				if st == "" {
					st = NA
				}
				if markdown {
					fmt.Fprintf(w, " %s |", st)
				} else {
					fmt.Fprintf(w, " %-7s", st)
				}
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
	nf := 0
	for _, o := range out {
		if o.Status == Fail {
			if nf == 0 {
				fmt.Fprintln(w, "Failures:")
			}
			nf++
			reason := indent(o.Reason)
			if markdown {
				reason = "`" + strings.ReplaceAll(firstLine(o.Reason), "`", "'") + "`"
			}
			fmt.Fprintf(w, "- %s/%s/%s: %s\n", o.Lang, o.Mode, o.Scenario, reason)
		}
	}
	skipped := map[string]string{}
	for _, o := range out {
		if o.Status == Skip {
			skipped[o.Lang] = o.Reason
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintln(w, "Skipped languages:")
		for _, l := range langs {
			if r, ok := skipped[l]; ok {
				fmt.Fprintf(w, "- %s: %s\n", l, r)
			}
		}
	}
	pass, fail, skip := 0, 0, 0
	for _, o := range out {
		switch o.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		case Skip:
			skip++
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", pass, fail, skip)
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }

func axes(out []Outcome) (modes, langs, scs []string) {
	seen := map[string]bool{}
	add := func(list *[]string, kind, v string) {
		if !seen[kind+v] {
			seen[kind+v] = true
			*list = append(*list, v)
		}
	}
	for _, o := range out {
		add(&modes, "m", o.Mode)
		add(&langs, "l", o.Lang)
		add(&scs, "s", o.Scenario)
	}
	order := map[string]int{}
	for i, l := range AllLangs {
		order[l] = i
	}
	sort.SliceStable(langs, func(i, j int) bool { return order[langs[i]] < order[langs[j]] })
	return
}

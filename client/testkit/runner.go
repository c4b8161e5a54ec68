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

// Variant is a second API of a client (its own acquire/release/cancel code)
// run as a testkit language of its own: the runner starts the base
// language's driver with TESTKIT_VARIANT=<Env> in its environment, and the
// driver's `info` must then answer language <Name> (checked once per run,
// before any scenario: a driver that ignores the variable would otherwise
// pass the base API's cells under the variant's name).
type Variant struct {
	Name string // e.g. python-asyncio
	Base string // e.g. python
	Env  string // TESTKIT_VARIANT value, e.g. asyncio
}

// Variants are run after the official clients, in this order.
var Variants = []Variant{
	{"python-asyncio", "python", "asyncio"},
	{"rust-blocking", "rust", "blocking"},
	{"java-async", "java", "async"},
	{"c-queue", "c", "queue"},
}

// VariantOf is the variant named name.
func VariantOf(name string) (Variant, bool) {
	for _, v := range Variants {
		if v.Name == name {
			return v, true
		}
	}
	return Variant{}, false
}

// LangNames are every language and variant, in the matrix's column order.
func LangNames() []string {
	n := append([]string(nil), AllLangs...)
	for _, v := range Variants {
		n = append(n, v.Name)
	}
	return n
}

// AllModes are the deployments.
var AllModes = []string{"single", "cluster", "tls"}

// Lang is one client under test.
type Lang struct {
	Name   string
	Driver string   // executable
	Env    []string // added to the driver's environment
	Skip   string   // non-empty: not available, and why (with the install command)
	// Broken: non-empty when the driver cannot be run as this language (a
	// variant whose driver does not implement it): every cell fails with it.
	Broken string
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
// toolchain` pass (Go needs neither check beyond the driver). A variant is
// its base language's driver with TESTKIT_VARIANT set, probed with `info`.
func Discover(root, name string) Lang {
	if v, ok := VariantOf(name); ok {
		l := Discover(root, v.Base)
		l.Name = name
		l.Env = append(l.Env, "TESTKIT_VARIANT="+v.Env)
		if l.Skip == "" {
			l.Broken = ProbeVariant(l)
		}
		return l
	}
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

// ProbeVariant starts l's driver and checks that `info` names l.Name: ""
// when it does, else why not.
func ProbeVariant(l Lang) string {
	d, err := StartDriver(l.Name, l.Driver, l.Env)
	if err != nil {
		return err.Error()
	}
	defer d.Stop(10 * time.Second)
	p, err := d.Send(map[string]any{"cmd": "info"})
	if err != nil {
		return err.Error()
	}
	r, err := p.Wait(60 * time.Second)
	switch {
	case err != nil:
		return oneLine(err.Error())
	case r.Language != l.Name:
		return fmt.Sprintf("the driver does not implement this variant: started with %s, its info names language %q, not %q (client/testkit/README.md, \"Variants\")", strings.Join(l.Env, " "), r.Language, l.Name)
	}
	return ""
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
	// Known is the title of the issue that will fix the cell, for a cell
	// listed in known-failures.txt (status KnownFail or XPass).
	Known     string `json:"known,omitempty"`
	KnownLine int    `json:"known_line,omitempty"`
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
	Known     *KnownFailures // cells expected to fail (nil: none)
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

// Call sends a command and waits up to timeout for its answer. An answer
// `unsupported` fails the scenario at once (a missing feature is a failing
// cell, never a pass or a skip).
func (d *D) Call(cmd map[string]any, timeout time.Duration) Result {
	p := d.Send(cmd)
	r, err := p.Wait(timeout)
	d.t.Check(err)
	d.t.NoUnsupported(p, r)
	return r
}

// NoUnsupported fails the scenario when r answers `unsupported`.
func (t *T) NoUnsupported(p *Pending, r Result) {
	if !r.OK && r.Error == "unsupported" {
		t.Fatalf("the driver answered unsupported to %s: %s", cmdString(p.Cmd), r)
	}
}

// Wait waits for p's answer (failing the scenario when none comes within
// timeout, or when it is `unsupported`).
func (t *T) Wait(p *Pending, timeout time.Duration) Result {
	r, err := p.Wait(timeout)
	t.Check(err)
	t.NoUnsupported(p, r)
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
		if l.Skip == "" && l.Broken == "" {
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
				case l.Broken != "":
					o.Status, o.Reason = Fail, l.Broken
					cfg.Known.Mark(&o)
				case envErr != nil:
					o.Status, o.Reason = Fail, "environment: "+envErr.Error()
					cfg.Known.Mark(&o)
				default:
					start := time.Now()
					o.Status, o.Reason = runOne(env, l, active, s)
					o.Seconds = time.Since(start).Seconds()
					cfg.Known.Mark(&o)
					known := ""
					if o.Known != "" {
						known = " [known: " + o.Known + "]"
					}
					logf("%-6s %-7s %-32s %s %5.1fs %s%s", l.Name, mode, s.Name, o.Status, o.Seconds, firstLine(o.Reason), known)
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

// Failed reports whether any cell failed outside the known failures
// (KnownFail and XPass cells do not fail a run).
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
// failures with their reasons, the known failures with the issue that will
// fix them, the listed cells that passed (XPASS), the skipped languages with
// why, and the counts.
func WriteTable(w io.Writer, out []Outcome, markdown bool) {
	modes, langs, scs := axes(out)
	cell := map[[3]string]Outcome{}
	for _, o := range out {
		cell[[3]string{o.Mode, o.Lang, o.Scenario}] = o
	}
	width := map[string]int{}
	for _, l := range langs {
		width[l] = max(len(l), len(KnownFail))
	}
	for _, m := range modes {
		if markdown {
			fmt.Fprintf(w, "\n**%s**\n\n| scenario | %s |\n|---|%s\n", m, strings.Join(langs, " | "), strings.Repeat("---|", len(langs)))
		} else {
			fmt.Fprintf(w, "\n== mode %s\n%-34s", m, "scenario")
			for _, l := range langs {
				fmt.Fprintf(w, " %-*s", width[l], l)
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
					fmt.Fprintf(w, " %-*s", width[l], st)
				}
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
	reasonOf := func(o Outcome) string {
		if markdown {
			return "`" + strings.ReplaceAll(firstLine(o.Reason), "`", "'") + "`"
		}
		return indent(o.Reason)
	}
	section := func(title string, want string, line func(o Outcome) string) {
		n := 0
		for _, o := range out {
			if o.Status != want {
				continue
			}
			if n == 0 {
				fmt.Fprintln(w, title)
			}
			n++
			fmt.Fprintf(w, "- %s/%s/%s: %s\n", o.Lang, o.Mode, o.Scenario, line(o))
		}
	}
	section("Failures:", Fail, reasonOf)
	section("Known failures (listed in "+KnownFailuresFile+"; they do not fail the run):", KnownFail, func(o Outcome) string {
		return "[" + o.Known + "] " + reasonOf(o)
	})
	section("XPASS (listed in "+KnownFailuresFile+" but passed):", XPass, func(o Outcome) string {
		return fmt.Sprintf("passed: remove it from known-failures.txt (line %d, %s)", o.KnownLine, o.Known)
	})
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
	c := Count(out)
	fmt.Fprintf(w, "\n%d passed, %d failed, %d known failures, %d xpass, %d skipped\n", c[Pass], c[Fail], c[KnownFail], c[XPass], c[Skip])
}

// Count is the number of cells per status.
func Count(out []Outcome) map[string]int {
	c := map[string]int{}
	for _, o := range out {
		c[o.Status]++
	}
	return c
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
	for i, l := range LangNames() {
		order[l] = i
	}
	sort.SliceStable(langs, func(i, j int) bool { return order[langs[i]] < order[langs[j]] })
	return
}

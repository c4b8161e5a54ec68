package testkit_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/testkit"
)

const title32 = "Python, JavaScript/TypeScript and Ruby clients: the edge rules, protocol 1.1, packaging, and what a new user hit"

// TestKnownFailuresMarking: a listed failing cell is KNOWN-FAIL with its
// issue title and does not fail the run; a listed passing cell is XPASS
// ("remove it from known-failures.txt") and does not fail the run; any
// other FAIL fails it; the summary counts each.
func TestKnownFailuresMarking(t *testing.T) {
	kf, err := testkit.ParseKnownFailures("kf.txt", []byte(`
# comment
python single info  # `+title32+`
ruby * bad_input  # `+title32+`
python-asyncio * *  # `+title32+`
`))
	if err != nil {
		t.Fatal(err)
	}
	cells := []testkit.Outcome{
		{Lang: "python", Mode: "single", Scenario: "info", Status: testkit.Fail, Reason: "info: language \"py\""},
		{Lang: "ruby", Mode: "cluster", Scenario: "bad_input", Status: testkit.Pass},
		{Lang: "python-asyncio", Mode: "tls", Scenario: "wait0_try_once", Status: testkit.Fail, Reason: "no driver"},
		{Lang: "python", Mode: "cluster", Scenario: "info", Status: testkit.Pass},
		{Lang: "ruby", Mode: "single", Scenario: "info", Status: testkit.Skip, Reason: "toolchain missing"},
	}
	for i := range cells {
		kf.Mark(&cells[i])
	}
	want := []string{testkit.KnownFail, testkit.XPass, testkit.KnownFail, testkit.Pass, testkit.Skip}
	for i, o := range cells {
		if o.Status != want[i] {
			t.Errorf("cell %s/%s/%s: %s, want %s", o.Lang, o.Mode, o.Scenario, o.Status, want[i])
		}
	}
	if testkit.Failed(cells) {
		t.Error("known failures and XPASS failed the run")
	}
	var sb strings.Builder
	testkit.WriteTable(&sb, cells, false)
	out := sb.String()
	for _, s := range []string{
		"KNOWN-FAIL", "XPASS",
		"- python/single/info: [" + title32 + "] info: language",
		"- ruby/cluster/bad_input: passed: remove it from known-failures.txt (line 4, " + title32 + ")",
		"1 passed, 0 failed, 2 known failures, 1 xpass, 1 skipped",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	// An unlisted FAIL fails the run.
	cells = append(cells, testkit.Outcome{Lang: "js", Mode: "single", Scenario: "info", Status: testkit.Fail})
	kf.Mark(&cells[len(cells)-1])
	if !testkit.Failed(cells) {
		t.Error("an unlisted FAIL did not fail the run")
	}
}

func TestKnownFailuresParseErrors(t *testing.T) {
	for _, bad := range []string{
		"python single info",                     // no title
		"python single info  #   ",               // empty title
		"python single  # t",                     // two fields
		"pithon single info  # t",                // unknown language
		"python local info  # t",                 // unknown mode
		"python single no_such_scenario  # t",    // unknown scenario
		"python * info  # t\npython * info  # t", // listed twice
	} {
		if _, err := testkit.ParseKnownFailures("kf.txt", []byte(bad)); err == nil {
			t.Errorf("%q: parsed without an error", bad)
		}
	}
}

// TestKnownFailuresFile: the repository's list parses (known languages,
// modes and scenarios, each line with its issue title).
func TestKnownFailuresFile(t *testing.T) {
	kf, err := testkit.LoadKnownFailures(filepath.Join("..", "..", testkit.KnownFailuresFile))
	if err != nil {
		t.Fatal(err)
	}
	titles := []string{
		"Protocol 1.1: ", "Python, JavaScript/TypeScript and Ruby clients: ", "Rust, C and C++ clients: ",
		"Java, Kotlin and C# clients: ",
	}
	for _, k := range kf.Entries {
		ok := false
		for _, p := range titles {
			ok = ok || strings.HasPrefix(k.Title, p)
		}
		if !ok {
			t.Errorf("line %d: %q is not the title of an open client issue (30, 32, 33, 34)", k.Line, k.Title)
		}
		if k.Lang == "go" && !strings.HasPrefix(k.Title, "Protocol 1.1: ") {
			t.Errorf("line %d: a Go cell may only wait for issue 30", k.Line)
		}
	}
	if _, err := os.Stat(filepath.Join("..", "..", testkit.KnownFailuresFile)); err != nil {
		t.Fatal(err)
	}
}

// TestUnsupportedAndBrokenVariantFail: a driver answering `unsupported` is a
// FAIL (never a pass or skip), and a variant whose driver ignores
// TESTKIT_VARIANT fails every cell (a KNOWN-FAIL when listed).
func TestUnsupportedAndBrokenVariantFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	bin, drv := build(t)
	v := testkit.Lang{Name: "python-asyncio", Driver: drv, Env: []string{"TESTKIT_VARIANT=asyncio"}}
	if v.Broken = testkit.ProbeVariant(v); !strings.Contains(v.Broken, "does not implement this variant") {
		t.Fatalf("probe of the Go driver as python-asyncio: %q", v.Broken)
	}
	kf, err := testkit.ParseKnownFailures("kf.txt", []byte("python-asyncio * *  # "+title32+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc := []testkit.Scenario{{Name: "unsupported_cmd", Modes: []string{"single"}, Run: func(t *testkit.T) {
		d := t.Connected(t.Lang)
		d.Call(map[string]any{"cmd": "no_such_command"}, 10*time.Second)
	}}}
	out := testkit.Run(testkit.Config{Bin: bin, Langs: []testkit.Lang{{Name: "go", Driver: drv}, v},
		Modes: []string{"single"}, Dir: t.TempDir(), Scenarios: sc, Known: kf})
	if len(out) != 2 {
		t.Fatalf("cells: %+v", out)
	}
	if o := out[0]; o.Status != testkit.Fail || !strings.Contains(o.Reason, "unsupported") {
		t.Errorf("go answering unsupported: %s %q, want FAIL", o.Status, o.Reason)
	}
	if o := out[1]; o.Status != testkit.KnownFail || o.Known != title32 || !strings.Contains(o.Reason, "does not implement") {
		t.Errorf("broken variant: %+v, want KNOWN-FAIL with the title", o)
	}
}

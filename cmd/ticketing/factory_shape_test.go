package main

import (
	"context"
	"slices"
	"testing"

	"github.com/ticketing/ticketing/admin/bench"
	"github.com/ticketing/ticketing/cmd/ticketing/internal/deploy"
)

// argv → options for bench, bench-report and deploy, built like every other
// command (issue #36 item 7): one constructor with an options struct and a
// run func the test replaces.
func TestNewCmdBenchAndDeployOptions(t *testing.T) {
	clearEnv(t)
	ios, _, _ := testIO("")

	var b *BenchOptions
	err := execCmd(t, newCmdBench(newFactory(ios), func(_ context.Context, _ *IO, o *BenchOptions) error { b = o; return nil }),
		"--addr", "h1:1,h2:2", "--conns", "3", "--mode", "try", "-o", "json", "--progress=false", "--token", "c")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Addrs, []string{"h1:1", "h2:2"}) || b.Config.Conns != 3 || b.Config.Mode != bench.ModeTry ||
		b.Output != "json" || b.Config.Token != "c" || b.Config.Progress != nil {
		t.Errorf("bench: %+v", *b)
	}
	if err := execCmd(t, newCmdBench(newFactory(ios), nil), "--conns", "0"); exitCodeForTest(err) != ExitUsage {
		t.Errorf("bench --conns 0: %v, want exit %d", err, ExitUsage)
	}

	var r *BenchReportOptions
	if err := execCmd(t, newCmdBenchReport(newFactory(ios), func(_ context.Context, _ *IO, o *BenchReportOptions) error { r = o; return nil }),
		"--budget", "a.json", "b.json"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Files, []string{"a.json", "b.json"}) || !r.Budget || r.Oneline {
		t.Errorf("bench-report: %+v", *r)
	}

	var d *deploy.Options
	if err := execCmd(t, newCmdDeploy(newFactory(ios), func(_ context.Context, _ *IO, o *deploy.Options) error { d = o; return nil }),
		"--nodes", "a, b,c", "--format", "compose", "--client-port", "8000"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Hosts, []string{"a", "b", "c"}) || d.Format != deploy.FormatCompose || d.ClientPort != 8000 {
		t.Errorf("deploy: %+v", *d)
	}
}

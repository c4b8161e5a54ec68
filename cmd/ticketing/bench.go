package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/admin/bench"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// BenchOptions is `ticketing bench` after flags and environment are merged.
type BenchOptions struct {
	Config     bench.Config // checked (Validate); Addr is set by the run
	Addrs      []string     // --addr: the run drives the leader found through them
	Output     string       // text or json
	CPUProfile string       // the load generator's CPU profile ("" none)
}

func newCmdBench(fac *Factory, runF func(context.Context, *IO, *BenchOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runBench
	}
	def := bench.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a running server",
		Long: `Load-test a running server with raw, pipelined wire frames.

Modes:
  pairs  each of conns × pipeline slots repeats acquire → release on keys of
         its own share of the key space (always free), or, for a --contention
         share of the acquires, on one of --hot-keys shared keys (with --wait
         they queue and are handed off in FIFO order)
  try    every key is held first; then a storm of try-acquires (wait 0) on them
  fill   acquire every key once and keep it held (memory per held key with
         --server-pid); released at the end unless --keep

An acquire answered G or T and a release answered O or N each count as one
op. Refusals (B, U, E) are counted apart (they count toward --ops, so a
refusing server cannot keep the run going); a redirect (M: the node is not,
or no longer, the leader) is never an op, and the connection slot that got
it stops (a release it interrupted is redone on the leader at the end).
A connection lost mid-run (the server stopped or crashed) ends the run: the
report covers it until then, says so ("lost"), and the locks whose release
was in flight are released on the leader found through --addr.
Exit 1 when no acquire was granted, or when a connection was lost. Keys are
16 bytes, so every request is 32 bytes and every answer 16 (the floor
server's shapes, see scripts/bench-floor.sh). Ends with ops/s, outcomes by
status, HDR latency quantiles (send → answer), the server's peak RSS
(--server-pid: VmHWM) and, for one hot key with --wait, handoffs/s and the
FIFO check (max wait vs queue length × mean hold time).
With --set-size N (2..16, mode pairs) every acquire is one key set of N
distinct keys (S, protocol.md §12.2) and every release one X; the server
must announce KEY_SETS (§12.1).

Examples:
  ticketing bench --conns 8 --pipeline 64 --keys 10000 --duration 10s
  ticketing bench --conns 64 --pipeline 1
  ticketing bench --conns 100 --pipeline 1 --hot-keys 1 --wait 30s
  ticketing bench --set-size 4 --conns 8 --pipeline 16
  ticketing bench --mode fill --keys 1000000 --conns 4 --pipeline 256 --server-pid $(pidof ticketing)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := benchOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	f := cmd.Flags()
	f.String("addr", def.Addr, "server address(es) host:port, comma-separated (a cluster: any of its nodes; bench drives the leader)")
	f.String("token", "", "client token (prefer --token-file or TICKETING_TOKEN)")
	f.String("token-file", "", "file holding the client token")
	f.String("admin-token", "", "admin token for the status query (default: the client token)")
	f.String("admin-token-file", "", "file holding the admin token")
	f.String("role", "client", "role of the load connections: client or admin")
	f.Int("conns", def.Conns, "connections")
	f.Int("pipeline", def.Pipeline, "requests in flight per connection")
	f.Int("keys", def.Keys, "key-space size")
	f.Int("hot-keys", 0, "number of shared hot keys (pairs)")
	f.Float64("contention", 0, "share of acquires on the hot keys, 0..1 (default 1 with --hot-keys)")
	durationFlag(cmd, "duration", "", def.Duration.String(), "measured run time (when --ops is 0)")
	f.Uint64("ops", 0, "stop after this many measured ops instead of --duration")
	durationFlag(cmd, "warmup", "", "0s", "unmeasured run before the measurement")
	durationFlag(cmd, "lease", "", def.Lease.String(), "lease of every acquire")
	durationFlag(cmd, "wait", "", "0s", "wait of every acquire (0 = try once)")
	durationFlag(cmd, "hold", "", "0s", "hold each granted lock this long before releasing it")
	f.String("mode", string(def.Mode), "pairs, try or fill")
	f.Int("set-size", def.SetSize, "keys per acquire and release (pairs): 1 = A/R, 2..16 = key sets S/X (protocol 1.1)")
	f.Bool("keep", false, "fill: leave the keys held at the end")
	f.StringP("output", "o", "text", "output format: text or json")
	f.Int("server-pid", 0, "server process id: report its peak RSS (VmHWM) and RSS from /proc")
	f.Bool("server-stats", true, "query the server's admin status before and after (handoff counts)")
	f.String("label", def.Label, "name of the target in the report")
	f.Uint64("seed", 0, "key-choice seed")
	f.Bool("progress", true, "live progress line on stderr")
	f.String("cpuprofile", "", "write the load generator's CPU profile to this file")
	_ = f.MarkHidden("cpuprofile")
	f.String("conn-label", "", "send this label (protocol 1.1 L) on every load connection, as the official clients do")
	_ = f.MarkHidden("conn-label")
	return cmd
}

func benchOptions(fac *Factory, cmd *cobra.Command) (*BenchOptions, error) {
	ios := fac.IO
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	cfg := bench.DefaultConfig()
	st := newSettings(cmd, v)
	addrs := setting(st, "addr", parseAddrList)
	cfg.Token = st.secret("token", "token-file")
	cfg.AdminToken = st.secret("admin-token", "admin-token-file")
	switch st.oneOf("role", "client", "admin", "1", "2") {
	case "client", "1":
		cfg.Role = wire.RoleClient
	case "admin", "2":
		cfg.Role = wire.RoleAdmin
	}
	cfg.Conns = st.int("conns")
	cfg.Pipeline = st.int("pipeline")
	cfg.Keys = st.int("keys")
	cfg.HotKeys = st.int("hot-keys")
	cfg.Contention = st.float("contention")
	cfg.Duration = st.duration("duration")
	cfg.Ops = st.uint64("ops")
	cfg.Warmup = st.duration("warmup")
	cfg.Lease = st.duration("lease")
	cfg.Wait = st.duration("wait")
	cfg.Hold = st.duration("hold")
	cfg.Mode = bench.Mode(st.oneOf("mode", string(bench.ModePairs), string(bench.ModeTry), string(bench.ModeFill)))
	cfg.Keep = st.bool("keep")
	cfg.SetSize = st.int("set-size")
	cfg.ConnLabel = st.str("conn-label")
	cfg.ServerPID = st.int("server-pid")
	cfg.ServerStats = st.bool("server-stats")
	cfg.Label = st.str("label")
	cfg.Seed = st.uint64("seed")
	output := st.oneOf("output", "text", "json")
	progress := st.bool("progress")
	cpuprofile := st.str("cpuprofile")
	if st.err != nil {
		return nil, st.err
	}
	if progress {
		cfg.Progress = ios.ErrOut
		cfg.ProgressTTY = isTerminal(ios.ErrOut)
	}
	if err := cfg.Validate(); err != nil {
		return nil, withExit(ExitUsage, err)
	}
	return &BenchOptions{Config: cfg, Addrs: addrs, Output: output, CPUProfile: cpuprofile}, nil
}

func runBench(ctx context.Context, ios *IO, opts *BenchOptions) error {
	cfg, addrs, output := opts.Config, opts.Addrs, opts.Output
	if ctx == nil {
		ctx = context.Background()
	}
	var err error
	if p := opts.CPUProfile; p != "" {
		f, err := os.Create(p)
		if err != nil {
			return usageError("--cpuprofile: %v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.Addr, err = benchTarget(ctx, addrs, cfg); err != nil {
		return err
	}
	cfg.FindLeader = func(ctx context.Context) (string, error) {
		return benchTarget(ctx, addrs, cfg)
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		var op *net.OpError
		switch {
		case errors.Is(err, bench.ErrConfig):
			return withExit(ExitUsage, err)
		case errors.Is(err, bench.ErrRejected):
			return withExit(ExitAuth, err)
		case errors.As(err, &op) && op.Op == "dial":
			return withExit(ExitConnect, err)
		}
		return err
	}
	if output == "json" {
		err = res.WriteJSON(ios.Out)
	} else {
		err = res.WriteText(ios.Out)
	}
	if err == nil && cfg.Mode != bench.ModeTry && res.Outcomes["G"] == 0 {
		// Redirects, refusals and errors are not throughput.
		why := ""
		switch {
		case res.Redirects > 0 && res.RedirectedTo != "":
			why = fmt.Sprintf(": it is not the cluster's leader (%d redirects to %s)", res.Redirects, res.RedirectedTo)
		case res.Redirects > 0:
			why = fmt.Sprintf(": it is not the cluster's leader, and no leader is elected (%d redirects)", res.Redirects)
		}
		return withExit(ExitError, fmt.Errorf("bench: no acquire was granted by %s%s", cfg.Addr, why))
	}
	if err == nil && res.Lost != "" {
		return withExit(ExitError, fmt.Errorf("bench: the run was cut short: %s", res.Lost))
	}
	return err
}

// benchTarget is the one address bench drives, from an --addr list as every
// command takes it: the cluster's leader (found through any node), or the
// first single server that answers. A single address that cannot be asked
// (no admin role, say) is driven as given.
func benchTarget(ctx context.Context, addrs []string, cfg bench.Config) (string, error) {
	tok := cfg.AdminToken
	if tok == "" {
		tok = cfg.Token
	}
	view, err := admin.Discover(ctx, addrs, cfg.DialTimeout, client.WithAdminToken(tok), client.WithDialTimeout(cfg.DialTimeout))
	switch {
	case err != nil && len(addrs) == 1:
		return addrs[0], nil
	case err != nil:
		return "", err
	case view.Single:
		for _, n := range view.Nodes {
			if n.Status != nil {
				return n.ClientAddr, nil
			}
		}
		return addrs[0], nil
	case view.LeaderAddr != "":
		return view.LeaderAddr, nil
	}
	return "", withExit(ExitBusy, fmt.Errorf("bench: no cluster leader found through %s", strings.Join(addrs, ",")))
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// BenchReportOptions is `ticketing bench-report` after flags are parsed.
type BenchReportOptions struct {
	Files   []string // JSON results of ticketing bench
	Oneline bool     // one line per run
	Budget  bool     // add the budget table
}

func newCmdBenchReport(fac *Factory, runF func(context.Context, *IO, *BenchReportOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runBenchReport
	}
	cmd := &cobra.Command{
		Use:    "bench-report FILE...",
		Short:  "Tabulate `ticketing bench --output json` results (used by scripts/bench-*.sh)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		Long: `Read JSON results of ticketing bench (and of scripts/redisbench) and print one
Markdown table: per workload and target, the median ops/s over repeated runs,
the spread, latency quantiles, peak server RSS and the ratio of the first
target of each workload to the others (ticketing ÷ redis, ticketing ÷ floor).
--budget adds the budget table (docs/benchmarks.md); --oneline prints one
line per run instead.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := fac.Config(cmd)
			if err != nil {
				return err
			}
			st := newSettings(cmd, v)
			opts := &BenchReportOptions{Files: args, Oneline: st.bool("oneline"), Budget: st.bool("budget")}
			if st.err != nil {
				return st.err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	cmd.Flags().Bool("oneline", false, "one line per run")
	cmd.Flags().Bool("budget", false, "add the budget table")
	return cmd
}

func runBenchReport(_ context.Context, ios *IO, opts *BenchReportOptions) error {
	var all []*bench.Result
	for _, name := range opts.Files {
		f, err := os.Open(name)
		if err != nil {
			return usageError("%v", err)
		}
		rs, err := bench.ReadResults(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		all = append(all, rs...)
	}
	if opts.Oneline {
		for _, r := range all {
			fmt.Fprintln(ios.Out, r.Oneline())
		}
		return nil
	}
	if err := bench.Compare(ios.Out, all); err != nil {
		return err
	}
	if opts.Budget {
		fmt.Fprintln(ios.Out)
		return bench.WriteBudget(ios.Out, all)
	}
	return nil
}

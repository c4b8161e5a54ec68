package main

import (
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// IO is the command's I/O (a factory in the cli/cli sense): commands never
// touch os.Stdin/Stdout/Stderr directly, so tests drive them with buffers.
type IO struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// Main runs the CLI with args and returns the process exit code. It is the
// only place that maps errors to exit codes (exitCode).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ios := &IO{In: stdin, Out: stdout, ErrOut: stderr}
	root := newRootCmd(newFactory(ios))
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return exitCode(root.Execute(), stderr)
}

// newRootCmd builds the command tree. Every command is listed here: none
// registers itself.
func newRootCmd(fac *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:           "ticketing",
		Short:         "A dedicated distributed lock server and its operations toolkit",
		Long:          "Ticketing: a distributed lock server (FIFO queues, leases, fencing tokens) and the CLI around it.\n\n" + exitCodesHelp,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// With Args set cobra does not reject unknown subcommands itself
		// (legacyArgs); this RunE does, as a usage error.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	root.SetVersionTemplate("ticketing {{.Version}}\n")
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(
		newCmdServe(fac, nil),
		newCmdAcquire(fac, nil),
		newCmdRelease(fac, nil),
		newCmdRun(fac, nil),
		newCmdStatus(fac, nil),
		newCmdLocks(fac, nil),
		newCmdHealth(fac, nil),
		newCmdPing(fac, nil),
		newCmdClockSkew(fac, nil),
		newCmdTop(fac, nil),
		newCmdNode(fac),
		newCmdBench(fac, nil),
		newCmdBenchReport(fac, nil),
		newCmdDeploy(fac, nil),
		newCmdCompletion(fac),
		newCmdMan(fac),
		newCmdVersion(fac),
		newCmdRunGuard(fac),
	)
	markUsageErrors(root)
	return root
}

// markUsageErrors makes cobra's own flag and argument errors usage errors
// (exit 2) on every command of the tree: flag errors through
// SetFlagErrorFunc, argument-count errors by wrapping each command's Args.
func markUsageErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return withExit(ExitUsage, err)
	})
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return withExit(ExitUsage, err)
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		markUsageErrors(c)
	}
}

// newViper binds a command's flags to TICKETING_<NAME> environment variables
// (dashes become underscores) and, when --config is given, a config file.
// Precedence: flag > env > config file > default. viper stays in cmd/.
func newViper(cmd *cobra.Command) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvPrefix("TICKETING")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	var bindErr error
	bind := func(f *pflag.Flag) {
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = err
		}
	}
	cmd.Flags().VisitAll(bind)
	cmd.InheritedFlags().VisitAll(bind)
	if bindErr != nil {
		return nil, usageError("%v", bindErr)
	}
	// Only commands with a --config flag (serve) read a config file: a
	// TICKETING_CONFIG meant for the server must not feed client commands.
	if f := v.GetString("config"); f != "" && cmd.Flags().Lookup("config") != nil {
		v.SetConfigFile(f)
		if err := v.ReadInConfig(); err != nil {
			return nil, usageError("config file %s: %v", f, err)
		}
		if err := checkConfigKeys(cmd, f); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// checkConfigKeys refuses a config file key that is not a setting of cmd
// (issue #28 item 2: tls_cert: gave a plaintext server). Keys are the flag
// names, spelled as the flags are (tls-cert, max-lease), case-insensitive;
// an unknown key is exit 2 naming it and the closest known key.
func checkConfigKeys(cmd *cobra.Command, file string) error {
	cv := viper.New()
	cv.SetConfigFile(file)
	if err := cv.ReadInConfig(); err != nil {
		return usageError("config file %s: %v", file, err)
	}
	var known []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" && f.Name != "help" {
			known = append(known, f.Name)
		}
	})
	keys := cv.AllKeys()
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		return usageError("invalid configuration: config file %s: unknown key %q (did you mean %q? the keys are the flag names, e.g. tls-cert)",
			file, k, closest(k, known))
	}
	return nil
}

// closest is the known name nearest to k: the same name with '_' or '.'
// for '-' first, else the least edit distance.
func closest(k string, known []string) string {
	norm := strings.NewReplacer("_", "-", ".", "-").Replace(k)
	best, bestD := "", -1
	for _, c := range known {
		if c == norm {
			return c
		}
		if d := editDistance(norm, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

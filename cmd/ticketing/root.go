package main

import (
	"io"
	"os"
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
		newCmdBench(fac),
		newCmdBenchReport(fac),
		newCmdDeploy(fac),
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
	}
	return v, nil
}

// readSecret returns the value of flag/env name, or the trimmed contents of
// the file named by fileName when that is set (so secrets stay out of ps).
func readSecret(v *viper.Viper, name, fileName string) (string, error) {
	if fileName != "" {
		if f := v.GetString(fileName); f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return "", usageError("--%s: %v", fileName, err)
			}
			return strings.TrimSpace(string(b)), nil
		}
	}
	return v.GetString(name), nil
}

package main

import (
	"errors"
	"fmt"
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
// only place that maps errors to exit codes.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ios := &IO{In: stdin, Out: stdout, ErrOut: stderr}
	root := newRootCmd(ios)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err != nil && isCobraUsageError(err) {
		fmt.Fprintf(stderr, "ticketing: %s\n", err)
		if cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ExitUsage
	}
	return exitCode(err, stderr)
}

// isCobraUsageError tells cobra's own argument/flag errors (which carry no
// exit code) from command errors.
func isCobraUsageError(err error) bool {
	var ee *exitError
	if errors.As(err, &ee) {
		return false
	}
	for _, cm := range exitCodeMappers {
		if _, ok := cm(err); ok {
			return false
		}
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "invalid argument", "flag needs an argument", "accepts ", "requires at least", "requires at most", "bad flag syntax", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func newRootCmd(ios *IO) *cobra.Command {
	root := &cobra.Command{
		Use:           "ticketing",
		Short:         "A dedicated distributed lock server and its operations toolkit",
		Long:          "Ticketing: a distributed lock server (FIFO queues, leases, fencing tokens) and the CLI around it.\n\n" + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(newCmdServe(ios, nil))
	root.AddCommand(newCmdVersion(ios))
	for _, add := range extraCommands {
		root.AddCommand(add(ios))
	}
	return root
}

// extraCommands lets each command file register itself (init), so adding a
// command does not touch this file.
var extraCommands []func(*IO) *cobra.Command

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

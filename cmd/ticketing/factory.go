package main

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// Factory is what every command is built from (cli/cli's cmdutil.Factory):
// the streams, the configuration (a viper local to the command), the
// connection settings and the dialers. Commands take one Factory rather
// than repeating these lines; tests build one around buffers and fakes.
type Factory struct {
	IO *IO

	// Signals is where commands that wait (acquire, run) hear SIGINT/SIGTERM.
	Signals signalSource

	// LockClient and AdminClient return the connectors for merged
	// connection settings; tests substitute fakes.
	LockClient  func(ConnOptions) func(context.Context) (lockClient, error)
	AdminClient func(ConnOptions) func(context.Context, []string) (adminClient, error)
}

// newFactory is the production factory around ios.
func newFactory(ios *IO) *Factory {
	return &Factory{
		IO:          ios,
		Signals:     osSignals,
		LockClient:  lockDialer,
		AdminClient: adminDialer,
	}
}

// Config binds cmd's flags to TICKETING_<NAME> environment variables and,
// for commands with --config, a config file (flag > env > file > default).
// Each call returns a new viper: no configuration is global.
func (f *Factory) Config(cmd *cobra.Command) (*viper.Viper, error) { return newViper(cmd) }

// Conn merges the connection flags, TICKETING_* variables and secret files.
func (f *Factory) Conn(cmd *cobra.Command, v *viper.Viper) (ConnOptions, error) {
	return connOptions(cmd, v)
}

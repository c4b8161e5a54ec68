package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client/wire"
)

func init() {
	extraCommands = append(extraCommands, func(ios *IO) *cobra.Command { return newCmdHealth(ios, nil) })
}

// HealthOptions is `ticketing health` after flags and environment are merged.
type HealthOptions struct {
	Conn   ConnOptions
	Output string

	Check func(ctx context.Context, addrs []string) []admin.HealthResult
}

// healthJSON is one address of health's --output json.
type healthJSON struct {
	Addr    string            `json:"addr"`
	Healthy bool              `json:"healthy"`
	Reason  string            `json:"reason,omitempty"`
	RTTUS   int64             `json:"rtt_us"`
	Status  *wire.StatusReply `json:"status,omitempty"`
}

func newCmdHealth(ios *IO, runF func(context.Context, *IO, *HealthOptions) error) *cobra.Command {
	if runF == nil {
		runF = runHealth
	}
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check that every server can grant locks (for monitoring)",
		Long: `Check every address in --addr: the handshake, a ping and a status query must
succeed and the server must report that it can grant a fresh acquire (not
draining, not at a hard limit such as max keys or max connections). Prints
one line per address; exits 0 when all are healthy, otherwise with the code
of the first failure (7 cannot connect, 8 authentication, 4 cannot grant).
Needs the admin token (default: the client token).`,
		Example: `  ticketing health --addr n1:7470,n2:7470,n3:7470 || alert
  # systemd: ExecStartPost=/usr/bin/ticketing health --timeout 2s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := healthOptions(cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

func healthOptions(cmd *cobra.Command) (*HealthOptions, error) {
	v, err := newViper(cmd)
	if err != nil {
		return nil, err
	}
	opts := &HealthOptions{}
	if opts.Output, err = getOutput(v); err != nil {
		return nil, err
	}
	if opts.Conn, err = connOptions(cmd, v); err != nil {
		return nil, err
	}
	copts := opts.Conn.clientOptions(true)
	opts.Check = func(ctx context.Context, addrs []string) []admin.HealthResult {
		return admin.Health(ctx, addrs, copts...)
	}
	return opts, nil
}

func runHealth(ctx context.Context, ios *IO, opts *HealthOptions) error {
	ctx, cancel := withTimeout(ctx, 2*opts.Conn.Timeout)
	defer cancel()
	res := opts.Check(ctx, opts.Conn.Addrs)
	var err error
	if opts.Output == "json" {
		out := make([]healthJSON, len(res))
		for i, r := range res {
			out[i] = healthJSON{Addr: r.Addr, Healthy: r.Healthy, Reason: reasonLine(r), RTTUS: r.RTT.Microseconds(), Status: r.Status}
		}
		err = writeJSON(ios, out)
	} else {
		err = renderTable(ios.Out, nil, healthRows(res))
	}
	if err != nil {
		return err
	}
	return healthExit(res)
}

// reasonLine is r's reason on one line, without package prefixes.
func reasonLine(r admin.HealthResult) string {
	if r.Reason == "" {
		return ""
	}
	return oneLine(errors.New(r.Reason))
}

// healthRows: one line per address, "ADDR ok rtt" or "ADDR FAIL reason".
func healthRows(res []admin.HealthResult) [][]string {
	rows := make([][]string, 0, len(res))
	for _, r := range res {
		if r.Healthy {
			rows = append(rows, []string{r.Addr, "ok", "rtt " + fmtRTT(r.RTT)})
			continue
		}
		rows = append(rows, []string{r.Addr, "FAIL", reasonLine(r)})
	}
	return rows
}

// healthExit: nil when all are healthy, else the exit code of the first
// failure (its error's code, or 4 for a node that cannot grant). The lines
// printed already say why, so nothing more goes to stderr.
func healthExit(res []admin.HealthResult) error {
	for _, r := range res {
		if r.Healthy {
			continue
		}
		code := ExitBusy
		if r.Err != nil {
			code = ExitError
			if c, ok := clientExitCode(r.Err); ok {
				code = c
			}
		}
		return withExit(code, nil)
	}
	return nil
}

// fmtRTT renders a round trip with µs precision below 10 ms.
func fmtRTT(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

package main

import (
	"context"
	"regexp"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/cmd/ticketing/internal/deploy"
)

// The command is thin: flags into deploy.Options; planning, rendering and
// writing are package deploy's.

func newCmdDeploy(fac *Factory, runF func(context.Context, *IO, *deploy.Options) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runDeploy
	}
	cmd := &cobra.Command{
		Use:   "deploy --nodes HOST[,HOST...] [--format env|shell|docker|compose|systemd] [--tls-dir DIR] [--out DIR]",
		Short: "Generate the configuration and start commands of a 1-, 3- or 5-node deployment",
		Long: `Generate everything a deployment needs, correct by construction: node ids
(n1, n2, ...), ports, advertised addresses, the peer list, fresh tokens
(client, admin, peer) from a CSPRNG, and per node an env file plus, by
--format:

  env      the env files only (TICKETING_* variables for ` + "`ticketing serve`" + `)
  shell    a start script per node (nX.sh: loads nX.env, execs ticketing serve)
  docker   a ` + "`docker run`" + ` line per node (nX.docker.sh; host network)
  compose  compose.yaml: every node a container on this docker host
  systemd  the unit template ticketing@.service (instance = node id)

A HOST is a name or address the clients and the other nodes reach the node
at; HOST:PORT sets its client port (its peer port is PORT+1). Nodes that
share a host get consecutive pairs of ports from --client-port and
--peer-port. There are 1, 3 or 5 nodes: an even count is refused (a cluster
of 2 or 4 survives no more failures than one of 1 or 3).

Without --out, the plan is printed with secrets redacted and nothing is
written. With --out DIR the files are written there: secrets (tokens, env
files, TLS keys) with mode 0600, never printed unless --show-secrets. DIR
also gets client.env (TICKETING_ADDR and token files for the CLI) and
deploy.json (the plan, no secrets). Running deploy again on the same DIR
reuses its tokens and TLS files and never overwrites a secret silently:
--force draws new tokens (rotation); a TLS file is issued again only when
deleted.

--tls-dir DIR is where the TLS files are on each node: ca.crt, ID.crt,
ID.key; with --out they are generated under OUT/tls (a private CA, a
certificate per node for its host names, and client.crt/client.key for the
CLI: peers verify each other with the CA, so clients need a certificate too).

--add HOST adds one node to the deployment in --out: it gets the next id and
an env file with TICKETING_JOIN=true (the same tokens); start it, then run the
printed ` + "`ticketing node add`" + ` (docs/operations.md, replacing a node). --remove ID
takes a node out of the deployment (client.env, compose) after
` + "`ticketing node remove`" + `; its id and ports are not used again.`,
		Example: `  # the plan for three hosts, nothing written:
  ticketing deploy --nodes db1.example.com,db2.example.com,db3.example.com --format systemd
  # three nodes on this machine, started by scripts:
  ticketing deploy --nodes 127.0.0.1,127.0.0.1,127.0.0.1 --format shell --out ./cluster
  # a compose cluster published on this host:
  ticketing deploy --nodes 127.0.0.1,127.0.0.1,127.0.0.1 --format compose --out ./cluster`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := deployOptions(fac, cmd)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	deploy.DefineFlags(cmd.Flags(), defaultImage())
	_ = cmd.RegisterFlagCompletionFunc("format", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return deploy.Formats, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func runDeploy(_ context.Context, ios *IO, opts *deploy.Options) error {
	return deploy.Run(deploy.Streams{Out: ios.Out, ErrOut: ios.ErrOut}, opts)
}

// defaultImage is the tag `make image` gives this version's image
// (ticketing:latest for an unstamped build).
func defaultImage() string {
	if version == "dev" || version == "" {
		return "ticketing:latest"
	}
	return "ticketing:" + imageTag(version)
}

// imageTag makes a version usable as an image tag (as the Makefile does).
func imageTag(v string) string {
	t := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(v, "-")
	if t == "" || t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

func deployOptions(fac *Factory, cmd *cobra.Command) (*deploy.Options, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	// Every setting from the flag or TICKETING_<NAME>, strictly (issue #28 item 1).
	st := newSettings(cmd, v)
	o := deploy.OptionsFrom(deploySettings{st}, "ticketing "+versionString())
	if st.err != nil {
		return nil, st.err
	}
	return o, nil
}

// deploySettings gives deploy.OptionsFrom the strict settings.
type deploySettings struct{ st *settings }

func (d deploySettings) Str(name string) string { return d.st.str(name) }
func (d deploySettings) Bool(name string) bool  { return d.st.bool(name) }
func (d deploySettings) Int(name string) int    { return d.st.int(name) }
func (d deploySettings) OneOf(name string, values ...string) string {
	return d.st.oneOf(name, values...)
}

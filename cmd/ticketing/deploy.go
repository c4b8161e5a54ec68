package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// `ticketing deploy`: the start-command generator (issue #8). From a list of
// hosts it derives node ids, ports, advertised addresses, the peer list and
// fresh tokens, and writes per node an env file plus, by format, a start
// script, a `docker run` line, a compose file or a systemd unit. Secrets go
// only to files of mode 0600 under --out; stdout shows them only with
// --show-secrets. Existing secrets are reused, never replaced silently.

// Deploy formats.
const (
	fmtEnv     = "env"
	fmtShell   = "shell"
	fmtDocker  = "docker"
	fmtCompose = "compose"
	fmtSystemd = "systemd"
)

var deployFormats = []string{fmtEnv, fmtShell, fmtDocker, fmtCompose, fmtSystemd}

// Fixed ports inside a container (compose); the host side is the node's port.
const (
	containerClientPort = 7470
	containerPeerPort   = 7471
	containerDataDir    = "/data"
	containerTLSDir     = "/etc/ticketing/tls"
	// containerUID is the image's non-root user (deploy/Dockerfile).
	containerUID = 65532
)

// deployRand is the CSPRNG the tokens come from (tests replace it).
var deployRand io.Reader = rand.Reader

// deployNode is one node of the plan (deploy.json keeps them).
type deployNode struct {
	ID         string `json:"id"`
	Host       string `json:"host"`
	ClientPort int    `json:"client_port"`
	PeerPort   int    `json:"peer_port"`
	// Join: added to a running cluster with --add (TICKETING_JOIN, then
	// `ticketing node add`); not one of the bootstrap voters.
	Join bool `json:"join,omitempty"`
	// Removed: taken out with --remove (after `ticketing node remove`). It
	// stays in the plan: it is one of the initial voters every bootstrap env
	// file names, and its id and ports are not reused.
	Removed bool `json:"removed,omitempty"`
}

// deploySpec is everything the generated files derive from, except secrets.
// It is written to OUT/deploy.json so that --add can extend the plan.
type deploySpec struct {
	Format   string       `json:"format"`
	Nodes    []deployNode `json:"nodes"`
	TLSDir   string       `json:"tls_dir,omitempty"`
	DataDir  string       `json:"data_dir,omitempty"` // base: a node's is DataDir/ID ("" with InMemory)
	InMemory bool         `json:"in_memory,omitempty"`
	Image    string       `json:"image,omitempty"`
	Binary   string       `json:"binary,omitempty"`
	By       string       `json:"generated_by,omitempty"`
}

// deploySecrets are the three role tokens (protocol.md §1.2).
type deploySecrets struct {
	Client, Admin, Peer string
}

const redacted = "<redacted>"

func redactedSecrets() deploySecrets {
	return deploySecrets{Client: redacted, Admin: redacted, Peer: redacted}
}

// deployFile is one file of the plan.
type deployFile struct {
	Name    string // relative to --out
	Mode    fs.FileMode
	Secret  bool   // holds a secret: never overwritten without --force
	Content []byte // with the real secrets
	Shown   []byte // with secrets redacted (what the plan prints)
	Note    string // for the summary
}

// DeployOptions are `ticketing deploy`'s flags after checking.
type DeployOptions struct {
	Hosts       []string
	Format      string
	TLSDir      string
	Out         string
	ShowSecrets bool
	Force       bool
	ClientPort  int
	PeerPort    int
	DataDir     string
	InMemory    bool
	Image       string
	Binary      string
	Add         string
	Remove      string
}

func newCmdDeploy(fac *Factory) *cobra.Command {
	ios := fac.IO
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
			return runDeploy(ios, opts)
		},
	}
	f := cmd.Flags()
	f.String("nodes", "", "hosts of the nodes, comma-separated: HOST or HOST:CLIENT_PORT (1, 3 or 5)")
	f.String("format", fmtEnv, "env, shell, docker, compose or systemd")
	f.String("tls-dir", "", "directory of the TLS files on each node (enables TLS; generated under --out/tls)")
	f.String("out", "", "write the files into this directory (default: print the plan, secrets redacted)")
	f.Bool("show-secrets", false, "also print the secrets (tokens) on stdout")
	f.Bool("force", false, "replace the tokens in --out with fresh ones (token rotation; TLS files are kept)")
	f.Int("client-port", 7470, "client port (nodes on the same host count up in steps of 2)")
	f.Int("peer-port", 7471, "peer port (nodes on the same host count up in steps of 2)")
	f.String("data-dir", "", "base of the nodes' data directories: durable raft state under DIR/ID (default /var/lib/ticketing; containers: a volume at /data)")
	f.Bool("in-memory", false, "no data directory: a restarted node rejoins under a new id (docs/operations.md)")
	f.String("image", defaultImage(), "container image (docker, compose), as make image tags it")
	f.String("binary", "", "path of the ticketing binary on the nodes (default: ticketing on PATH; systemd: /usr/local/bin/ticketing)")
	f.String("add", "", "add one node on `HOST` to the deployment in --out (joins a running cluster)")
	f.String("remove", "", "take node `ID` out of the deployment in --out (after ticketing node remove)")
	_ = cmd.RegisterFlagCompletionFunc("format", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return deployFormats, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
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

// safeValue: values go unquoted into env files that systemd, docker
// --env-file, compose and sh all read the same way.
var safeValue = regexp.MustCompile(`^[A-Za-z0-9_./:@%+,=\[\]-]*$`)

func deployOptions(fac *Factory, cmd *cobra.Command) (*DeployOptions, error) {
	f := cmd.Flags()
	o := &DeployOptions{}
	nodes, _ := f.GetString("nodes")
	o.Format, _ = f.GetString("format")
	o.TLSDir, _ = f.GetString("tls-dir")
	o.Out, _ = f.GetString("out")
	o.ShowSecrets, _ = f.GetBool("show-secrets")
	o.Force, _ = f.GetBool("force")
	o.ClientPort, _ = f.GetInt("client-port")
	o.PeerPort, _ = f.GetInt("peer-port")
	o.DataDir, _ = f.GetString("data-dir")
	o.InMemory, _ = f.GetBool("in-memory")
	o.Image, _ = f.GetString("image")
	o.Binary, _ = f.GetString("binary")
	o.Add, _ = f.GetString("add")
	o.Remove, _ = f.GetString("remove")
	for _, h := range strings.Split(nodes, ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.Hosts = append(o.Hosts, h)
		}
	}
	if o.Add != "" || o.Remove != "" {
		if o.Add != "" && o.Remove != "" {
			return nil, usageError("--add and --remove: one change at a time")
		}
		if o.Out == "" {
			return nil, usageError("--add and --remove need --out, the directory of the existing deployment")
		}
		if len(o.Hosts) > 0 {
			return nil, usageError("--add/--remove and --nodes: give one (--add and --remove change the deployment in --out)")
		}
		if o.Force {
			return nil, usageError("--add/--remove and --force: membership changes keep the cluster's tokens; rotate them separately")
		}
		return o, nil
	}
	switch n := len(o.Hosts); n {
	case 0:
		return nil, usageError("--nodes: give the hosts of 1, 3 or 5 nodes")
	case 1, 3, 5:
	default:
		return nil, usageError("--nodes: %d nodes; a deployment has 1, 3 or 5 (a cluster of %d tolerates no more failures than one of %d)", n, n, n-1)
	}
	if !contains(deployFormats, o.Format) {
		return nil, usageError("--format %q: want one of %s", o.Format, strings.Join(deployFormats, ", "))
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"--client-port", o.ClientPort}, {"--peer-port", o.PeerPort}} {
		if p.v < 1 || p.v > 65535-10 {
			return nil, usageError("%s %d: want 1..65525", p.name, p.v)
		}
	}
	if o.InMemory && o.DataDir != "" {
		return nil, usageError("--in-memory and --data-dir: give one")
	}
	for _, p := range []struct{ name, v string }{{"--tls-dir", o.TLSDir}, {"--data-dir", o.DataDir}, {"--binary", o.Binary}, {"--image", o.Image}} {
		if p.v != "" && !safeValue.MatchString(p.v) {
			return nil, usageError("%s %q: only letters, digits and ./:_@%%+- (it goes unquoted into env files)", p.name, p.v)
		}
	}
	for _, p := range []struct{ name, v string }{{"--tls-dir", o.TLSDir}, {"--data-dir", o.DataDir}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			return nil, usageError("%s %q: want an absolute path (it is a path on the nodes)", p.name, p.v)
		}
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// splitNodeHost parses HOST, HOST:PORT, [V6]:PORT or a bare IPv6 address.
func splitNodeHost(s string) (host string, port int, err error) {
	if h, p, e := net.SplitHostPort(s); e == nil {
		n, e := strconv.Atoi(p)
		if e != nil || n < 1 || n > 65534 {
			return "", 0, fmt.Errorf("%q: port %q: want 1..65534 (the peer port is PORT+1)", s, p)
		}
		host, port = h, n
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	}
	if host == "" {
		return "", 0, fmt.Errorf("%q: empty host", s)
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() {
			return "", 0, fmt.Errorf("%q is a wildcard address: name an address clients and peers can reach", s)
		}
		return host, port, nil
	}
	if !regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`).MatchString(host) || len(host) > 253 {
		return "", 0, fmt.Errorf("%q is not a host name or IP address", s)
	}
	return host, port, nil
}

// layoutNodes assigns ids and ports to hosts: an explicit HOST:PORT keeps
// its port (peer PORT+1); otherwise the k-th node on a host gets the base
// ports + 2k, skipping pairs already taken on that host. oneHost: every node
// publishes on the same machine (compose), whatever name it is reached by.
func layoutNodes(hosts []string, clientBase, peerBase int, existing []deployNode, oneHost bool) ([]deployNode, error) {
	key := func(h string) string {
		if oneHost {
			return "docker-host"
		}
		return strings.ToLower(h)
	}
	used := map[string]bool{} // host:port in use
	next := map[string]int{}  // next k per host
	ids := map[string]bool{}
	mark := func(n deployNode) error {
		for _, p := range []int{n.ClientPort, n.PeerPort} {
			k := net.JoinHostPort(key(n.Host), strconv.Itoa(p))
			if used[k] {
				return fmt.Errorf("--nodes: two nodes on %s", hp(n.Host, p))
			}
			used[k] = true
		}
		ids[n.ID] = true
		return nil
	}
	for _, n := range existing {
		if err := mark(n); err != nil {
			return nil, err
		}
	}
	seq := len(existing)
	for {
		if !ids[fmt.Sprintf("n%d", seq+1)] {
			break
		}
		seq++
	}
	type parsed struct {
		host string
		port int
	}
	var ps []parsed
	for _, h := range hosts {
		host, port, err := splitNodeHost(h)
		if err != nil {
			return nil, fmt.Errorf("--nodes: %v", err)
		}
		ps = append(ps, parsed{host, port})
	}
	// Explicit ports first, so that automatic ones avoid them.
	out := make([]deployNode, len(ps))
	for i, p := range ps {
		if p.port == 0 {
			continue
		}
		out[i] = deployNode{Host: p.host, ClientPort: p.port, PeerPort: p.port + 1}
		if err := mark(out[i]); err != nil {
			return nil, err
		}
	}
	for i, p := range ps {
		if p.port != 0 {
			continue
		}
		h := key(p.host)
		for k := next[h]; ; k++ {
			c, pp := clientBase+2*k, peerBase+2*k
			if c > 65535 || pp > 65535 {
				return nil, fmt.Errorf("--nodes: no free ports left on %s", p.host)
			}
			if used[net.JoinHostPort(h, strconv.Itoa(c))] || used[net.JoinHostPort(h, strconv.Itoa(pp))] {
				continue
			}
			out[i] = deployNode{Host: p.host, ClientPort: c, PeerPort: pp}
			next[h] = k + 1
			break
		}
		if err := mark(out[i]); err != nil {
			return nil, err
		}
	}
	for i := range out {
		seq++
		for ids[fmt.Sprintf("n%d", seq)] {
			seq++
		}
		out[i].ID = fmt.Sprintf("n%d", seq)
		ids[out[i].ID] = true
	}
	return out, nil
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// bindHost is the listen host for a node reached at host: the host itself
// when it is loopback (nothing else can reach it anyway), else every
// interface (the advertised name may be a NAT or DNS name the host does not own).
func bindHost(host string) string {
	if isLoopbackHost(host) {
		return host
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		return "::"
	}
	return "0.0.0.0"
}

func hp(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// Derived addresses of a node for the spec's format.
func (s *deploySpec) container() bool { return s.Format == fmtCompose }

func (s *deploySpec) cluster() bool { return len(s.Nodes) > 1 }

func (s *deploySpec) listen(n deployNode) string {
	if s.container() {
		return hp("0.0.0.0", containerClientPort)
	}
	return hp(bindHost(n.Host), n.ClientPort)
}

func (s *deploySpec) peerListen(n deployNode) string {
	if s.container() {
		return hp("0.0.0.0", containerPeerPort)
	}
	return hp(bindHost(n.Host), n.PeerPort)
}

func (s *deploySpec) advertise(n deployNode) string { return hp(n.Host, n.ClientPort) }

func (s *deploySpec) peerAdvertise(n deployNode) string {
	if s.container() {
		return hp(n.ID, containerPeerPort) // the service name on the compose network
	}
	return hp(n.Host, n.PeerPort)
}

// live are the nodes not removed.
func (s *deploySpec) live() []deployNode {
	var out []deployNode
	for _, n := range s.Nodes {
		if !n.Removed {
			out = append(out, n)
		}
	}
	return out
}

// peers are the initial voters (TICKETING_PEERS of the bootstrap nodes),
// removed ones included: the list must stay what the cluster began with.
func (s *deploySpec) peers() string {
	var ps []string
	for _, n := range s.Nodes {
		if !n.Join {
			ps = append(ps, n.ID+"="+s.peerAdvertise(n))
		}
	}
	return strings.Join(ps, ",")
}

func (s *deploySpec) dataDir(n deployNode) string {
	switch {
	case s.InMemory:
		return ""
	case s.Format == fmtDocker || s.Format == fmtCompose:
		return containerDataDir
	}
	return filepath.Join(s.DataDir, n.ID)
}

// tlsPath is where the node reads TLS file name.
func (s *deploySpec) tlsPath(name string) string {
	if s.container() {
		return containerTLSDir + "/" + name
	}
	return s.TLSDir + "/" + name
}

func (s *deploySpec) binary() string {
	if s.Binary != "" {
		return s.Binary
	}
	if s.Format == fmtSystemd {
		return "/usr/local/bin/ticketing"
	}
	return "ticketing"
}

func (s *deploySpec) clientAddrs() string {
	var as []string
	for _, n := range s.live() {
		as = append(as, s.advertise(n))
	}
	return strings.Join(as, ",")
}

// ---------------------------------------------------------------------------
// Rendering

type envWriter struct{ b bytes.Buffer }

func (w *envWriter) comment(format string, a ...any) {
	for _, l := range strings.Split(fmt.Sprintf(format, a...), "\n") {
		w.b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
	}
}

func (w *envWriter) set(k, v string) { fmt.Fprintf(&w.b, "%s=%s\n", k, v) }

// nodeEnv is a node's env file: every setting of `ticketing serve` as a
// TICKETING_* variable, secrets included.
func (s *deploySpec) nodeEnv(n deployNode, sec deploySecrets) []byte {
	var w envWriter
	role := "single node"
	if s.cluster() {
		role = fmt.Sprintf("cluster of %d", s.bootstrapCount())
		if n.Join {
			role = "joins the cluster (then: ticketing node add)"
		}
	}
	w.comment("Ticketing node %s on %s (%s). Generated by `ticketing deploy` (%s).", n.ID, n.Host, role, s.By)
	w.comment("Holds the tokens: keep it mode 0600. Read by `ticketing serve` as its environment\n(systemd EnvironmentFile=, docker --env-file, compose env_file, or set -a; . FILE).")
	w.set("TICKETING_NODE_ID", n.ID)
	w.set("TICKETING_LISTEN", s.listen(n))
	if s.cluster() {
		w.set("TICKETING_ADVERTISE", s.advertise(n))
		w.set("TICKETING_PEER_LISTEN", s.peerListen(n))
		w.set("TICKETING_PEER_ADVERTISE", s.peerAdvertise(n))
		if n.Join {
			w.comment("Not a bootstrap voter: it waits until `ticketing node add` adds it.")
			w.set("TICKETING_JOIN", "true")
		} else {
			w.comment("The initial voters. Bootstrap happens once: a node that has raft state skips it.")
			w.set("TICKETING_PEERS", s.peers())
			w.set("TICKETING_BOOTSTRAP", "true")
		}
	}
	if d := s.dataDir(n); d != "" {
		if s.cluster() {
			w.comment("Durable raft state: the node may restart under its id. If it is ever lost,\nthe node must not come back under this id (docs/operations.md, replacing a node).")
		}
		w.set("TICKETING_DATA_DIR", d)
	} else if s.cluster() {
		w.comment("In memory: after a restart this node is refused under its id; it rejoins under a new one.")
	}
	if s.TLSDir != "" && s.Format != fmtSystemd {
		w.set("TICKETING_TLS_CERT", s.tlsPath(n.ID+".crt"))
		w.set("TICKETING_TLS_KEY", s.tlsPath(n.ID+".key"))
		w.set("TICKETING_TLS_CLIENT_CA", s.tlsPath("ca.crt"))
		w.comment("For the CLI run on the node itself (ticketing ping/status with this file loaded):")
		w.set("TICKETING_TLS_CA", s.tlsPath("ca.crt"))
	}
	w.set("TICKETING_LOG_LEVEL", "info")
	w.set("TICKETING_TOKEN", sec.Client)
	w.set("TICKETING_ADMIN_TOKEN", sec.Admin)
	if s.cluster() {
		w.set("TICKETING_PEER_TOKEN", sec.Peer)
	}
	return w.b.Bytes()
}

func (s *deploySpec) bootstrapCount() int {
	c := 0
	for _, n := range s.Nodes {
		if !n.Join {
			c++
		}
	}
	return c
}

// clientEnv configures the CLI on the operator's machine (no secrets: the
// token files are named, not copied).
func (s *deploySpec) clientEnv(outAbs string) []byte {
	var w envWriter
	w.comment("Ticketing CLI settings for this deployment (no secrets: token files are referenced).\nLoad with: set -a; . %s; set +a", filepath.Join(outAbs, "client.env"))
	w.set("TICKETING_ADDR", s.clientAddrs())
	w.set("TICKETING_TOKEN_FILE", filepath.Join(outAbs, "secrets", "client.token"))
	w.set("TICKETING_ADMIN_TOKEN_FILE", filepath.Join(outAbs, "secrets", "admin.token"))
	if s.TLSDir != "" {
		w.set("TICKETING_TLS_CA", filepath.Join(outAbs, "tls", "ca.crt"))
		w.set("TICKETING_TLS_CERT", filepath.Join(outAbs, "tls", "client.crt"))
		w.set("TICKETING_TLS_KEY", filepath.Join(outAbs, "tls", "client.key"))
	}
	return w.b.Bytes()
}

func (s *deploySpec) shellScript(n deployNode) []byte {
	return []byte(fmt.Sprintf(`#!/bin/sh
# Ticketing node %[1]s: run on %[2]s. Generated by `+"`ticketing deploy`"+` (%[4]s).
# Starts `+"`ticketing serve`"+` in the foreground with %[1]s.env as its environment;
# SIGTERM stops it cleanly (a leader hands over first). TICKETING_BIN overrides the binary.
set -eu
set -a
. "$(dirname "$0")/%[1]s.env"
set +a
exec "${TICKETING_BIN:-%[3]s}" serve "$@"
`, n.ID, n.Host, s.binary(), s.By))
}

func (s *deploySpec) dockerScript(n deployNode) []byte {
	var vols []string
	if s.dataDir(n) != "" {
		vols = append(vols, fmt.Sprintf("  -v ticketing-%s:%s \\\n", n.ID, containerDataDir))
	}
	if s.TLSDir != "" {
		vols = append(vols, fmt.Sprintf("  -v %s:%s:ro \\\n", s.TLSDir, s.TLSDir))
	}
	return []byte(fmt.Sprintf(`#!/bin/sh
# Ticketing node %[1]s: run on %[2]s. Generated by `+"`ticketing deploy`"+` (%[5]s).
# Host networking: the node listens on the host's ports %[3]d (clients) and %[4]d (peers).
# The image is built with `+"`make image`"+` (or loaded with docker load); nothing is pulled.
set -eu
cd "$(dirname "$0")"
exec docker run -d --name ticketing-%[1]s --restart on-failure --pull never \
  --network host --env-file ./%[1]s.env \
  --stop-timeout 30 \
%[6]s  %[7]s serve
`, n.ID, n.Host, n.ClientPort, n.PeerPort, s.By, strings.Join(vols, ""), s.Image))
}

// composeYAML is the compose file: every node a service on one docker host,
// peers on the compose network by service name, client ports published.
func (s *deploySpec) composeYAML() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Ticketing, %d node(s) on this docker host. Generated by `ticketing deploy` (%s).\n", len(s.live()), s.By)
	b.WriteString("# Start: docker-compose -f compose.yaml up -d   (the image comes from `make image`; nothing is pulled)\n")
	b.WriteString("# Clients reach the nodes at " + s.clientAddrs() + ".\n")
	b.WriteString("services:\n")
	for _, n := range s.live() {
		pub := fmt.Sprintf("%d:%d", n.ClientPort, containerClientPort)
		if isLoopbackHost(n.Host) {
			pub = hp(n.Host, n.ClientPort) + ":" + strconv.Itoa(containerClientPort)
		}
		fmt.Fprintf(&b, "  %s:\n", n.ID)
		fmt.Fprintf(&b, "    image: %q\n", s.Image)
		b.WriteString("    pull_policy: never\n")
		b.WriteString("    command: [\"serve\"]\n")
		fmt.Fprintf(&b, "    hostname: %s\n", n.ID)
		fmt.Fprintf(&b, "    env_file: [\"%s.env\"]\n", n.ID)
		fmt.Fprintf(&b, "    ports: [%q]\n", pub)
		var vols []string
		if s.dataDir(n) != "" {
			vols = append(vols, fmt.Sprintf("%q", n.ID+"-data:"+containerDataDir))
		}
		if s.TLSDir != "" {
			vols = append(vols, fmt.Sprintf("%q", "./tls:"+containerTLSDir+":ro"))
		}
		if len(vols) > 0 {
			fmt.Fprintf(&b, "    volumes: [%s]\n", strings.Join(vols, ", "))
		}
		b.WriteString("    restart: on-failure\n")
		b.WriteString("    stop_grace_period: 30s\n")
		b.WriteString("    healthcheck:\n")
		b.WriteString("      test: [\"CMD\", \"/ticketing\", \"ping\", \"--count\", \"1\", \"--timeout\", \"2s\"]\n")
		b.WriteString("      interval: 10s\n      timeout: 5s\n      retries: 3\n")
	}
	var vnames []string
	for _, n := range s.live() {
		if s.dataDir(n) != "" {
			vnames = append(vnames, n.ID+"-data")
		}
	}
	if len(vnames) > 0 {
		b.WriteString("volumes:\n")
		for _, v := range vnames {
			fmt.Fprintf(&b, "  %s: {}\n", v)
		}
	}
	return b.Bytes()
}

// systemdUnit is the template unit ticketing@.service; the instance is the
// node id, its settings in /etc/ticketing/ID.env.
func (s *deploySpec) systemdUnit() []byte {
	return renderSystemdUnit(s.binary(), s.stateDirectory(), s.TLSDir, s.By)
}

// stateDirectory is the unit's StateDirectory= for the data dir base
// (systemd creates /var/lib/<it> for the dynamic user).
func (s *deploySpec) stateDirectory() string {
	if s.InMemory {
		return ""
	}
	return strings.TrimPrefix(s.DataDir, "/var/lib/")
}

func renderSystemdUnit(binary, stateDir, tlsDir, by string) []byte {
	var b bytes.Buffer
	gen := "Generated by `ticketing deploy`"
	if by != "" {
		gen += " (" + by + ")"
	}
	fmt.Fprintf(&b, `# Ticketing node %%i: the unit template for every node. %s.
# Install: /etc/systemd/system/ticketing@.service, the node's env file as
# /etc/ticketing/%%i.env (mode 0600, root), then: systemctl enable --now ticketing@n1
# Type=notify: ticketing serve reports READY=1 once it serves, pings the
# watchdog and says STOPPING=1 when told to stop (SIGTERM: a leader hands over).
[Unit]
Description=Ticketing lock server (node %%i)
Documentation=https://github.com/ticketing/ticketing/blob/main/docs/operations.md
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
NotifyAccess=main
EnvironmentFile=/etc/ticketing/%%i.env
`, gen)
	exec := binary + " serve"
	if tlsDir != "" {
		// The dynamic user cannot read root's 0600 key: systemd hands the
		// files over as credentials (%d is their directory).
		fmt.Fprintf(&b, "LoadCredential=tls.crt:%s/%%i.crt\n", tlsDir)
		fmt.Fprintf(&b, "LoadCredential=tls.key:%s/%%i.key\n", tlsDir)
		fmt.Fprintf(&b, "LoadCredential=ca.crt:%s/ca.crt\n", tlsDir)
		exec += " --tls-cert %d/tls.crt --tls-key %d/tls.key --tls-client-ca %d/ca.crt"
	}
	fmt.Fprintf(&b, "ExecStart=%s\n", exec)
	b.WriteString(`ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2s
TimeoutStartSec=60s
TimeoutStopSec=30s
WatchdogSec=10s
LimitNOFILE=65536
`)
	if stateDir != "" {
		fmt.Fprintf(&b, "StateDirectory=%s\nStateDirectoryMode=0700\n", stateDir)
	}
	b.WriteString(`# Hardening
DynamicUser=yes
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM
CapabilityBoundingSet=
AmbientCapabilities=
UMask=0077

[Install]
WantedBy=multi-user.target
`)
	return b.Bytes()
}

// files renders the whole plan. outAbs is the absolute --out ("" for the
// plan only, then shown as OUT).
func (s *deploySpec) files(sec deploySecrets, outAbs string) []deployFile {
	if outAbs == "" {
		outAbs = "OUT"
	}
	red := redactedSecrets()
	var files []deployFile
	add := func(name string, mode fs.FileMode, secret bool, real, shown []byte, note string) {
		files = append(files, deployFile{Name: name, Mode: mode, Secret: secret, Content: real, Shown: shown, Note: note})
	}
	tok := func(name, v, note string) {
		add("secrets/"+name, 0o600, true, []byte(v+"\n"), []byte(redacted+"\n"), note)
	}
	tok("client.token", sec.Client, "client token")
	tok("admin.token", sec.Admin, "admin token")
	if s.cluster() {
		tok("peer.token", sec.Peer, "peer token")
	}
	for _, n := range s.live() {
		add(n.ID+".env", 0o600, true, s.nodeEnv(n, sec), s.nodeEnv(n, red), "node "+n.ID+" on "+n.Host)
		switch s.Format {
		case fmtShell:
			b := s.shellScript(n)
			add(n.ID+".sh", 0o755, false, b, b, "start "+n.ID+" on "+n.Host)
		case fmtDocker:
			b := s.dockerScript(n)
			add(n.ID+".docker.sh", 0o755, false, b, b, "docker run "+n.ID+" on "+n.Host)
		}
	}
	switch s.Format {
	case fmtCompose:
		b := s.composeYAML()
		add("compose.yaml", 0o644, false, b, b, "compose file")
	case fmtSystemd:
		b := s.systemdUnit()
		add("ticketing@.service", 0o644, false, b, b, "systemd unit template")
	}
	ce := s.clientEnv(outAbs)
	add("client.env", 0o644, false, ce, ce, "CLI settings (set -a; . client.env; set +a)")
	js, _ := json.MarshalIndent(s, "", "  ")
	js = append(js, '\n')
	add("deploy.json", 0o644, false, js, js, "the plan (for --add)")
	return files
}

// ---------------------------------------------------------------------------
// Running

func runDeploy(ios *IO, o *DeployOptions) error {
	spec, err := buildSpec(o)
	if err != nil {
		return err
	}
	if o.Out == "" {
		return printPlan(ios, o, spec)
	}
	return writeDeployment(ios, o, spec)
}

func buildSpec(o *DeployOptions) (*deploySpec, error) {
	by := "ticketing " + versionString()
	if o.Add != "" {
		return addToSpec(o, by)
	}
	if o.Remove != "" {
		return removeFromSpec(o, by)
	}
	spec := &deploySpec{Format: o.Format, TLSDir: o.TLSDir, InMemory: o.InMemory, Image: o.Image, Binary: o.Binary, By: by}
	if !o.InMemory {
		spec.DataDir = o.DataDir
		if spec.DataDir == "" {
			spec.DataDir = "/var/lib/ticketing"
		}
		if o.Format == fmtSystemd && !strings.HasPrefix(spec.DataDir, "/var/lib/") {
			return nil, usageError("--data-dir %s: the systemd unit keeps state in /var/lib/... (StateDirectory= of its dynamic user)", spec.DataDir)
		}
	}
	if o.Format != fmtDocker && o.Format != fmtCompose {
		spec.Image = ""
	}
	nodes, err := layoutNodes(o.Hosts, o.ClientPort, o.PeerPort, nil, o.Format == fmtCompose)
	if err != nil {
		return nil, withExit(ExitUsage, err)
	}
	spec.Nodes = nodes
	return spec, nil
}

func loadSpec(out, flag string) (*deploySpec, error) {
	b, err := os.ReadFile(filepath.Join(out, "deploy.json"))
	if err != nil {
		return nil, usageError("%s: no deployment in %s (%v): run deploy with --nodes first", flag, out, err)
	}
	var spec deploySpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, usageError("%s: %s/deploy.json: %v", flag, out, err)
	}
	if !spec.cluster() {
		return nil, usageError("%s: the deployment in %s is a single node; a single node does not grow into a cluster", flag, out)
	}
	return &spec, nil
}

// removeFromSpec marks node o.Remove removed.
func removeFromSpec(o *DeployOptions, by string) (*deploySpec, error) {
	spec, err := loadSpec(o.Out, "--remove")
	if err != nil {
		return nil, err
	}
	found := false
	for i, n := range spec.Nodes {
		if n.ID == o.Remove && !n.Removed {
			spec.Nodes[i].Removed, found = true, true
		}
	}
	if !found {
		return nil, usageError("--remove: no node %q in %s", o.Remove, o.Out)
	}
	if len(spec.live()) < 2 {
		return nil, usageError("--remove: %s would leave %d node(s)", o.Remove, len(spec.live()))
	}
	spec.By = by
	return spec, nil
}

// addToSpec extends the deployment in --out by one joining node.
func addToSpec(o *DeployOptions, by string) (*deploySpec, error) {
	sp, err := loadSpec(o.Out, "--add")
	if err != nil {
		return nil, err
	}
	spec := *sp
	if len(spec.live()) >= 7 {
		return nil, usageError("--add: %s already has %d nodes (remove the replaced ones with --remove first)", o.Out, len(spec.live()))
	}
	// Automatic ports for the new node follow the deployment's base ports.
	base := spec.Nodes[0]
	for _, n := range spec.Nodes {
		if n.ClientPort < base.ClientPort {
			base = n
		}
	}
	nodes, err := layoutNodes([]string{o.Add}, base.ClientPort, base.PeerPort, spec.Nodes, spec.Format == fmtCompose)
	if err != nil {
		return nil, withExit(ExitUsage, fmt.Errorf("--add: %v", strings.TrimPrefix(err.Error(), "--nodes: ")))
	}
	nodes[0].Join = true
	spec.Nodes = append(spec.Nodes, nodes[0])
	spec.By = by
	return &spec, nil
}

// genSecrets draws fresh tokens: 32 bytes of the CSPRNG each, hex.
func genSecrets() (deploySecrets, error) {
	var s deploySecrets
	for _, p := range []*string{&s.Client, &s.Admin, &s.Peer} {
		b := make([]byte, 32)
		if _, err := io.ReadFull(deployRand, b); err != nil {
			return s, fmt.Errorf("deploy: random: %w", err)
		}
		*p = hex.EncodeToString(b)
	}
	return s, nil
}

func printPlan(ios *IO, o *DeployOptions, spec *deploySpec) error {
	sec, err := genSecrets()
	if err != nil {
		return err
	}
	w := ios.Out
	what := "secrets redacted (--show-secrets prints the generated ones)"
	if o.ShowSecrets {
		what = "secrets shown: these tokens are written nowhere; --out writes a fresh set"
	}
	fmt.Fprintf(w, "# Plan: %d node(s), format %s. Nothing written (--out DIR writes it); %s.\n", len(spec.Nodes), spec.Format, what)
	for _, f := range spec.files(sec, "") {
		fmt.Fprintf(w, "\n==> OUT/%s (mode %04o%s) <==\n", f.Name, f.Mode, map[bool]string{true: ", secret", false: ""}[f.Secret])
		if o.ShowSecrets {
			w.Write(f.Content)
		} else {
			w.Write(f.Shown)
		}
	}
	if spec.TLSDir != "" {
		fmt.Fprintf(w, "\n==> OUT/tls/ (generated) <==\nca.crt, ca.key (0600), client.crt, client.key (0600)")
		for _, n := range spec.Nodes {
			fmt.Fprintf(w, ", %s.crt, %s.key (0600)", n.ID, n.ID)
		}
		fmt.Fprintf(w, "\ninstalled on each node under %s\n", spec.TLSDir)
	}
	return nil
}

// readSecrets loads the tokens already in out/secrets ("" where missing).
func readSecrets(out string) (deploySecrets, []string, error) {
	var s deploySecrets
	var found []string
	for _, p := range []struct {
		name string
		v    *string
	}{{"client.token", &s.Client}, {"admin.token", &s.Admin}, {"peer.token", &s.Peer}} {
		b, err := os.ReadFile(filepath.Join(out, "secrets", p.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return s, nil, err
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return s, nil, fmt.Errorf("%s is empty", filepath.Join(out, "secrets", p.name))
		}
		if !safeValue.MatchString(v) {
			return s, nil, fmt.Errorf("%s: the token has characters an env file cannot hold unquoted", filepath.Join(out, "secrets", p.name))
		}
		*p.v = v
		found = append(found, p.name)
	}
	return s, found, nil
}

// envSecretLines are the secret-bearing lines of an env file.
var envSecretLine = regexp.MustCompile(`(?m)^TICKETING_(TOKEN|ADMIN_TOKEN|PEER_TOKEN)=(.*)$`)

func secretLines(b []byte) map[string]string {
	m := map[string]string{}
	for _, x := range envSecretLine.FindAllSubmatch(b, -1) {
		m[string(x[1])] = string(x[2])
	}
	return m
}

func writeDeployment(ios *IO, o *DeployOptions, spec *deploySpec) error {
	outAbs, err := filepath.Abs(o.Out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(outAbs, "secrets"), 0o700); err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	_ = os.Chmod(filepath.Join(outAbs, "secrets"), 0o700)
	existing, found, err := readSecrets(outAbs)
	if err != nil {
		return usageError("deploy: %v", err)
	}
	fresh, err := genSecrets()
	if err != nil {
		return err
	}
	if (o.Add != "" || o.Remove != "") && (existing.Client == "" || existing.Admin == "" || existing.Peer == "") {
		return usageError("%s/secrets lacks the deployment's tokens (every node shares them)", outAbs)
	}
	sec := fresh
	var kept []string
	if !o.Force {
		if existing.Client != "" {
			sec.Client = existing.Client
		}
		if existing.Admin != "" {
			sec.Admin = existing.Admin
		}
		if existing.Peer != "" {
			sec.Peer = existing.Peer
		}
		kept = found
	}
	files := spec.files(sec, outAbs)
	// Refuse before writing anything: an existing file with a different secret.
	if !o.Force {
		for _, f := range files {
			if !f.Secret {
				continue
			}
			old, err := os.ReadFile(filepath.Join(outAbs, f.Name))
			if err != nil {
				continue
			}
			olds, news := secretLines(old), secretLines(f.Content)
			for _, k := range sortedKeys(olds) {
				if nv, ok := news[k]; ok && nv != olds[k] {
					return usageError("deploy: %s holds a TICKETING_%s that differs from %s/secrets; not overwriting a secret (move the file away, or --force for fresh tokens everywhere)", filepath.Join(outAbs, f.Name), k, outAbs)
				}
			}
		}
	}
	var tlsNotes []string
	if spec.TLSDir != "" {
		tlsNotes, err = ensureTLS(filepath.Join(outAbs, "tls"), spec)
		if err != nil {
			return err
		}
	}
	type result struct{ name, mode, state, note string }
	var res []result
	for _, f := range files {
		state, err := writeDeployFile(filepath.Join(outAbs, f.Name), f.Content, f.Mode, f.Secret)
		if err != nil {
			return err
		}
		if f.Secret && strings.HasPrefix(f.Name, "secrets/") && contains(kept, strings.TrimPrefix(f.Name, "secrets/")) {
			state = "kept"
		}
		res = append(res, result{f.Name, fmt.Sprintf("%04o", f.Mode), state, f.Note})
	}
	w := ios.Out
	fmt.Fprintf(w, "Wrote %s: %d node(s), format %s.\n", outAbs, len(spec.live()), spec.Format)
	for _, r := range res {
		fmt.Fprintf(w, "  %-22s %s  %-9s %s\n", r.name, r.mode, r.state, r.note)
	}
	for _, n := range tlsNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if len(kept) > 0 && !o.Force {
		fmt.Fprintf(ios.ErrOut, "deploy: kept the existing tokens in %s/secrets (--force replaces them)\n", outAbs)
	}
	if o.Force && len(found) > 0 {
		fmt.Fprintf(ios.ErrOut, "deploy: --force: replaced the tokens in %s/secrets; every node and client needs the new ones\n", outAbs)
	}
	for _, n := range spec.Nodes {
		if n.Removed && exists(filepath.Join(outAbs, n.ID+".env")) {
			fmt.Fprintf(w, "  %-22s        removed   no longer generated: delete it (and %s's data) once the node is gone\n", n.ID+".env", n.ID)
		}
	}
	fmt.Fprintln(w)
	if o.Remove != "" {
		fmt.Fprintf(w, "Removed %s from the deployment: client.env no longer names it.\n", o.Remove)
		fmt.Fprintf(w, "It must never start again under its id; `ticketing node remove --id %s` takes it out of the cluster.\n", o.Remove)
		fmt.Fprintf(w, "Reload the CLI settings: set -a; . %s/client.env; set +a\n", outAbs)
	} else {
		nextSteps(w, spec, outAbs, o.Add != "")
	}
	if o.ShowSecrets {
		fmt.Fprintf(w, "\nSecrets (--show-secrets):\n  client token: %s\n  admin token:  %s\n", sec.Client, sec.Admin)
		if spec.cluster() {
			fmt.Fprintf(w, "  peer token:   %s\n", sec.Peer)
		}
	}
	return nil
}

// writeDeployFile writes content with mode, atomically (a temp file in the
// same directory, renamed). It reports "new", "updated" or "unchanged".
func writeDeployFile(path string, content []byte, mode fs.FileMode, secret bool) (string, error) {
	state := "new"
	if old, err := os.ReadFile(path); err == nil {
		if bytes.Equal(old, content) {
			if err := os.Chmod(path, mode); err != nil {
				return "", err
			}
			return "unchanged", nil
		}
		state = "updated"
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil { // before any byte is written
		tmp.Close()
		return "", err
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return "", err
	}
	if secret {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return "", err
		}
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return state, nil
}

func nextSteps(w io.Writer, s *deploySpec, out string, added bool) {
	fmt.Fprintln(w, "Next:")
	var nodes []deployNode
	for _, n := range s.live() {
		if !added || n.Join && n.ID == s.Nodes[len(s.Nodes)-1].ID {
			nodes = append(nodes, n)
		}
	}
	if s.TLSDir != "" {
		fmt.Fprintf(w, "  - copy %s/tls/{ca.crt,ID.crt,ID.key} to %s on each node (keys mode 0600", out, s.TLSDir)
		if s.Format == fmtDocker {
			fmt.Fprintf(w, ", owned by uid %d for the container", containerUID)
		}
		fmt.Fprintln(w, ")")
	}
	switch s.Format {
	case fmtEnv:
		for _, n := range nodes {
			fmt.Fprintf(w, "  - on %s: (set -a; . ./%s.env; set +a; exec %s serve)\n", n.Host, n.ID, s.binary())
		}
	case fmtShell:
		for _, n := range nodes {
			fmt.Fprintf(w, "  - on %s: %s/%s.sh   (with %s.env next to it)\n", n.Host, out, n.ID, n.ID)
		}
	case fmtDocker:
		for _, n := range nodes {
			fmt.Fprintf(w, "  - on %s: %s/%s.docker.sh   (with %s.env next to it; image %s)\n", n.Host, out, n.ID, n.ID, s.Image)
		}
	case fmtCompose:
		if added {
			fmt.Fprintf(w, "  - docker-compose -f %s/compose.yaml up -d %s\n", out, nodes[0].ID)
		} else {
			fmt.Fprintf(w, "  - docker-compose -f %s/compose.yaml up -d   (image %s: make image)\n", out, s.Image)
		}
	case fmtSystemd:
		fmt.Fprintf(w, "  - on every node: install -m 0644 %s/ticketing@.service /etc/systemd/system/ && systemctl daemon-reload\n", out)
		for _, n := range nodes {
			fmt.Fprintf(w, "  - on %s: install -D -m 0600 %s/%s.env /etc/ticketing/%s.env && systemctl enable --now ticketing@%s\n", n.Host, out, n.ID, n.ID, n.ID)
		}
	}
	fmt.Fprintf(w, "  - then, here: set -a; . %s/client.env; set +a; ticketing status\n", out)
	if added {
		n := nodes[0]
		fmt.Fprintf(w, "  - once %s runs, add it (admin): ticketing node add --id %s --peer-addr %s --client-addr %s --voter\n",
			n.ID, n.ID, s.peerAdvertise(n), s.advertise(n))
	}
}

// sortedKeys is for deterministic messages.
func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

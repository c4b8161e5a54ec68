package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Deploy formats.
const (
	FormatEnv     = "env"
	FormatShell   = "shell"
	FormatDocker  = "docker"
	FormatCompose = "compose"
	FormatSystemd = "systemd"
)

var Formats = []string{FormatEnv, FormatShell, FormatDocker, FormatCompose, FormatSystemd}

// Fixed ports inside a container (compose); the host side is the node's port.
const (
	containerClientPort = 7470
	containerPeerPort   = 7471
	containerDataDir    = "/data"
	containerTLSDir     = "/etc/ticketing/tls"
	// containerUID is the image's non-root user (deploy/Dockerfile).
	containerUID = 65532
)

// Node is one node of the plan (deploy.json keeps them).
type Node struct {
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

// Spec is everything the generated files derive from, except secrets.
// It is written to OUT/deploy.json so that --add can extend the plan.
type Spec struct {
	Format string `json:"format"`
	Nodes  []Node `json:"nodes"`
	TLSDir string `json:"tls_dir,omitempty"`
	// TLSKeyType is the key type of the generated certificates: ecdsa
	// ("" in a deploy.json written before it) or rsa.
	TLSKeyType string `json:"tls_key_type,omitempty"`
	DataDir    string `json:"data_dir,omitempty"` // base: a node's is DataDir/ID ("" with InMemory)
	InMemory   bool   `json:"in_memory,omitempty"`
	Image      string `json:"image,omitempty"`
	Binary     string `json:"binary,omitempty"`
	By         string `json:"generated_by,omitempty"`
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
func layoutNodes(hosts []string, clientBase, peerBase int, existing []Node, oneHost bool) ([]Node, error) {
	key := func(h string) string {
		if oneHost {
			return "docker-host"
		}
		return strings.ToLower(h)
	}
	used := map[string]bool{} // host:port in use
	next := map[string]int{}  // next k per host
	ids := map[string]bool{}
	mark := func(n Node) error {
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
	out := make([]Node, len(ps))
	for i, p := range ps {
		if p.port == 0 {
			continue
		}
		out[i] = Node{Host: p.host, ClientPort: p.port, PeerPort: p.port + 1}
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
			out[i] = Node{Host: p.host, ClientPort: c, PeerPort: pp}
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
func (s *Spec) container() bool { return s.Format == FormatCompose }

func (s *Spec) cluster() bool { return len(s.Nodes) > 1 }

func (s *Spec) listen(n Node) string {
	if s.container() {
		return hp("0.0.0.0", containerClientPort)
	}
	return hp(bindHost(n.Host), n.ClientPort)
}

func (s *Spec) peerListen(n Node) string {
	if s.container() {
		return hp("0.0.0.0", containerPeerPort)
	}
	return hp(bindHost(n.Host), n.PeerPort)
}

func (s *Spec) advertise(n Node) string { return hp(n.Host, n.ClientPort) }

func (s *Spec) peerAdvertise(n Node) string {
	if s.container() {
		return hp(n.ID, containerPeerPort) // the service name on the compose network
	}
	return hp(n.Host, n.PeerPort)
}

// live are the nodes not removed.
func (s *Spec) live() []Node {
	var out []Node
	for _, n := range s.Nodes {
		if !n.Removed {
			out = append(out, n)
		}
	}
	return out
}

// peers are the initial voters (TICKETING_PEERS of the bootstrap nodes),
// removed ones included: the list must stay what the cluster began with.
func (s *Spec) peers() string {
	var ps []string
	for _, n := range s.Nodes {
		if !n.Join {
			ps = append(ps, n.ID+"="+s.peerAdvertise(n))
		}
	}
	return strings.Join(ps, ",")
}

func (s *Spec) dataDir(n Node) string {
	switch {
	case s.InMemory:
		return ""
	case s.Format == FormatDocker || s.Format == FormatCompose:
		return containerDataDir
	}
	return filepath.Join(s.DataDir, n.ID)
}

// tlsPath is where the node reads TLS file name.
func (s *Spec) tlsPath(name string) string {
	if s.container() {
		return containerTLSDir + "/" + name
	}
	return s.TLSDir + "/" + name
}

func (s *Spec) binary() string {
	if s.Binary != "" {
		return s.Binary
	}
	if s.Format == FormatSystemd {
		return "/usr/local/bin/ticketing"
	}
	return "ticketing"
}

func (s *Spec) clientAddrs() string {
	var as []string
	for _, n := range s.live() {
		as = append(as, s.advertise(n))
	}
	return strings.Join(as, ",")
}

// files renders the whole plan. outAbs is the absolute --out ("" for the
// plan only, then shown as OUT).
func (s *Spec) files(sec deploySecrets, outAbs string) []deployFile {
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
		case FormatShell:
			b := s.shellScript(n)
			add(n.ID+".sh", 0o755, false, b, b, "start "+n.ID+" on "+n.Host)
		case FormatDocker:
			b := s.dockerScript(n)
			add(n.ID+".docker.sh", 0o755, false, b, b, "docker run "+n.ID+" on "+n.Host)
		}
	}
	switch s.Format {
	case FormatCompose:
		b := s.composeYAML()
		add("compose.yaml", 0o644, false, b, b, "compose file")
	case FormatSystemd:
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

func buildSpec(o *Options) (*Spec, error) {
	by := o.By
	if o.Add != "" {
		return addToSpec(o, by)
	}
	if o.Remove != "" {
		return removeFromSpec(o, by)
	}
	spec := &Spec{Format: o.Format, TLSDir: o.TLSDir, TLSKeyType: o.TLSKeyType, InMemory: o.InMemory, Image: o.Image, Binary: o.Binary, By: by}
	if !o.InMemory {
		spec.DataDir = o.DataDir
		if spec.DataDir == "" {
			spec.DataDir = "/var/lib/ticketing"
		}
		if o.Format == FormatSystemd && !strings.HasPrefix(spec.DataDir, "/var/lib/") {
			return nil, usageError("--data-dir %s: the systemd unit keeps state in /var/lib/... (StateDirectory= of its dynamic user)", spec.DataDir)
		}
	}
	if o.Format != FormatDocker && o.Format != FormatCompose {
		spec.Image = ""
	}
	nodes, err := layoutNodes(o.Hosts, o.ClientPort, o.PeerPort, nil, o.Format == FormatCompose)
	if err != nil {
		return nil, usageErr(err)
	}
	spec.Nodes = nodes
	if err := sameNodeCount(o.Out, len(nodes)); err != nil {
		return nil, err
	}
	return spec, nil
}

// sameNodeCount refuses a --nodes re-run over an existing deployment in out
// with another number of nodes (issue #28 item 6: the new nodes got
// bootstrap env files and then showed as removed): membership changes go
// through --add and --remove.
func sameNodeCount(out string, n int) error {
	if out == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(out, "deploy.json"))
	if err != nil {
		return nil // a new deployment
	}
	var prev Spec
	if json.Unmarshal(b, &prev) != nil {
		return usageError("--nodes: %s/deploy.json is not a deployment plan", out)
	}
	active := 0
	for _, nd := range prev.Nodes {
		if !nd.Removed {
			active++
		}
	}
	if active != n {
		return usageError("--nodes: the deployment in %s has %d node(s), not %d: a re-run keeps the node count; change membership with --add HOST or --remove ID (docs/operations.md §5)", out, active, n)
	}
	return nil
}

func loadSpec(out, flag string) (*Spec, error) {
	b, err := os.ReadFile(filepath.Join(out, "deploy.json"))
	if err != nil {
		return nil, usageError("%s: no deployment in %s (%v): run deploy with --nodes first", flag, out, err)
	}
	var spec Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, usageError("%s: %s/deploy.json: %v", flag, out, err)
	}
	if !spec.cluster() {
		return nil, usageError("%s: the deployment in %s is a single node; a single node does not grow into a cluster", flag, out)
	}
	return &spec, nil
}

// removeFromSpec marks node o.Remove removed.
func removeFromSpec(o *Options, by string) (*Spec, error) {
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
func addToSpec(o *Options, by string) (*Spec, error) {
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
	nodes, err := layoutNodes([]string{o.Add}, base.ClientPort, base.PeerPort, spec.Nodes, spec.Format == FormatCompose)
	if err != nil {
		return nil, usageErr(fmt.Errorf("--add: %v", strings.TrimPrefix(err.Error(), "--nodes: ")))
	}
	nodes[0].Join = true
	spec.Nodes = append(spec.Nodes, nodes[0])
	spec.By = by
	return &spec, nil
}

// SafeValue: values go unquoted into env files that systemd, docker
// --env-file, compose and sh all read the same way.
var SafeValue = regexp.MustCompile(`^[A-Za-z0-9_./:@%+,=\[\]-]*$`)

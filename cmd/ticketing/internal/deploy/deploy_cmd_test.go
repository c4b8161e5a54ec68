package deploy

// Tests of `ticketing deploy` that need no running server (issue #36 item 9:
// they lived in cmd/ticketing): every format for 1, 3 and 5 nodes parses
// (env files, compose YAML, the systemd unit, the scripts); modes,
// redaction, refusals, re-runs, --add and --remove. cmd/ticketing keeps what
// needs the command: that `ticketing serve` accepts every generated
// configuration (deploy_test.go), and deploy_e2e_test.go and
// deploy_container_test.go, which start what deploy generates.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// ExitUsage is the exit code cmd/ticketing gives a *UsageError.
const ExitUsage = 2

// flagSettings are the parsed flags alone (cmd/ticketing adds TICKETING_*).
type flagSettings struct{ f *pflag.FlagSet }

func (s flagSettings) Str(name string) string { v, _ := s.f.GetString(name); return v }
func (s flagSettings) Bool(name string) bool  { v, _ := s.f.GetBool(name); return v }
func (s flagSettings) Int(name string) int    { v, _ := s.f.GetInt(name); return v }
func (s flagSettings) OneOf(name string, _ ...string) string {
	v, _ := s.f.GetString(name)
	return v // Run checks it
}

// depRun runs `deploy ARGS...` as cmd/ticketing does (DefineFlags,
// OptionsFrom, Run) and returns the exit code it would give and the output.
func depRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if len(args) == 0 || args[0] != "deploy" {
		t.Fatalf("depRun %v: not a deploy command", args)
	}
	fs := pflag.NewFlagSet("deploy", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	DefineFlags(fs, "ticketing:latest")
	if err := fs.Parse(args[1:]); err != nil {
		return ExitUsage, "", "ticketing: " + err.Error() + "\n"
	}
	var out, errOut bytes.Buffer
	err := Run(Streams{Out: &out, ErrOut: &errOut}, OptionsFrom(flagSettings{fs}, "ticketing test"))
	var ue *UsageError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &ue):
		code = ExitUsage
	default:
		code = 1
	}
	fmt.Fprintf(&errOut, "ticketing: %v\n", err)
	return code, out.String(), errOut.String()
}

var depEnvLine = regexp.MustCompile(`^(TICKETING_[A-Z_]+)=(.*)$`)

// depParseEnv parses an env file the strict way all its readers agree on:
// comments, blank lines and KEY=VALUE with an unquoted, space-free value.
func depParseEnv(t *testing.T, path string) (map[string]string, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for ln := 1; sc.Scan(); ln++ {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		g := depEnvLine.FindStringSubmatch(l)
		if g == nil {
			t.Fatalf("%s:%d: not KEY=VALUE: %q", path, ln, l)
		}
		if !SafeValue.MatchString(g[2]) {
			t.Fatalf("%s:%d: value needs quoting: %q", path, ln, l)
		}
		if _, dup := m[g[1]]; dup {
			t.Fatalf("%s:%d: %s set twice", path, ln, g[1])
		}
		m[g[1]] = g[2]
		order = append(order, g[1])
	}
	return m, order
}

func depMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func depReadToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func depHosts(n int, h string) string {
	hs := make([]string, n)
	for i := range hs {
		hs[i] = h
	}
	return strings.Join(hs, ",")
}

func TestDeployRefusesNodeCounts(t *testing.T) {
	for _, n := range []int{0, 2, 4, 6} {
		args := []string{"deploy", "--format", "env"}
		if n > 0 {
			args = append(args, "--nodes", depHosts(n, "127.0.0.1"))
		}
		dir := t.TempDir()
		code, out, errOut := depRun(t, append(args, "--out", dir)...)
		if code != ExitUsage {
			t.Errorf("%d nodes: exit %d, want %d (stderr %q)", n, code, ExitUsage, errOut)
		}
		if n > 0 && !strings.Contains(errOut, "1, 3 or 5") {
			t.Errorf("%d nodes: stderr %q does not say 1, 3 or 5", n, errOut)
		}
		if out != "" {
			t.Errorf("%d nodes: stdout %q", n, out)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%d nodes: wrote %d files", n, len(ents))
		}
	}
	for _, bad := range [][]string{
		{"--nodes", "0.0.0.0,b,c"},                // wildcard advertised
		{"--nodes", "a b,c,d"},                    // not a host
		{"--nodes", "a:7470,a:7470,b"},            // same address twice
		{"--nodes", "a,b,c", "--format", "k8s"},   // unknown format
		{"--nodes", "a,b,c", "--data-dir", "rel"}, // relative path
		{"--nodes", "a,b,c", "--tls-dir", "/x y"}, // unsafe in an env file
		{"--nodes", "a,b,c", "--in-memory", "--data-dir", "/d"},
		{"--nodes", "a", "--in-memory"}, // a single node always has a data dir (#28 item 3)
		{"--nodes", "a,b,c", "--format", "systemd", "--data-dir", "/srv/t"},
		{"--add", "d"}, // --add without --out
	} {
		if code, _, errOut := depRun(t, append([]string{"deploy"}, bad...)...); code != ExitUsage {
			t.Errorf("deploy %v: exit %d, want %d (%s)", bad, code, ExitUsage, errOut)
		}
	}
}

// TestDeployFormats writes every format for 1, 3 and 5 nodes and parses
// every file it wrote.
func TestDeployFormats(t *testing.T) {
	hostSets := map[int]string{
		1: "db1.example.com",
		3: "10.0.0.1,10.0.0.2,10.0.0.3",
		5: "127.0.0.1,127.0.0.1,127.0.0.1,h4.example.com,h5.example.com:9000",
	}
	self, _ := os.Executable()
	for _, n := range []int{1, 3, 5} {
		for _, format := range Formats {
			for _, tls := range []bool{false, true} {
				name := fmt.Sprintf("%d-%s", n, format)
				if tls {
					name += "-tls"
				}
				t.Run(name, func(t *testing.T) {
					dir := t.TempDir()
					args := []string{"deploy", "--nodes", hostSets[n], "--format", format, "--out", dir, "--binary", self}
					if tls {
						args = append(args, "--tls-dir", "/etc/ticketing/tls")
					}
					code, out, errOut := depRun(t, args...)
					if code != 0 {
						t.Fatalf("exit %d: %s", code, errOut)
					}
					depCheckDeployment(t, dir, n, format, tls, out+errOut)
				})
			}
		}
	}
}

func depCheckDeployment(t *testing.T, dir string, n int, format string, tls bool, printed string) {
	t.Helper()
	var spec Spec
	b, err := os.ReadFile(filepath.Join(dir, "deploy.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("deploy.json: %v", err)
	}
	if len(spec.Nodes) != n || spec.Format != format {
		t.Fatalf("deploy.json: %d nodes, format %s", len(spec.Nodes), spec.Format)
	}
	// Secrets: 0600, in a 0700 directory, never printed.
	if m := depMode(t, filepath.Join(dir, "secrets")); m != 0o700 {
		t.Errorf("secrets/ mode %o", m)
	}
	tokens := map[string]string{}
	names := []string{"client", "admin"}
	if n > 1 {
		names = append(names, "peer")
	}
	for _, name := range names {
		p := filepath.Join(dir, "secrets", name+".token")
		if m := depMode(t, p); m != 0o600 {
			t.Errorf("%s mode %o, want 600", p, m)
		}
		tok := depReadToken(t, p)
		if len(tok) != 64 {
			t.Errorf("%s: %d characters, want 64 hex", p, len(tok))
		}
		if _, err := hex.DecodeString(tok); err != nil {
			t.Errorf("%s: not hex", p)
		}
		if strings.Contains(printed, tok) {
			t.Errorf("the %s token was printed", name)
		}
		tokens[name] = tok
	}
	if tokens["client"] == tokens["admin"] || n > 1 && (tokens["peer"] == tokens["admin"] || tokens["peer"] == tokens["client"]) {
		t.Error("tokens are not distinct")
	}
	// Env files: parse, and serve accepts them as its environment.
	advertised := map[string]bool{}
	for _, node := range spec.Nodes {
		p := filepath.Join(dir, node.ID+".env")
		if m := depMode(t, p); m != 0o600 {
			t.Errorf("%s mode %o, want 600", p, m)
		}
		env, _ := depParseEnv(t, p)
		if env["TICKETING_TOKEN"] != tokens["client"] || env["TICKETING_ADMIN_TOKEN"] != tokens["admin"] {
			t.Errorf("%s: tokens differ from secrets/", p)
		}
		if n > 1 && env["TICKETING_PEER_TOKEN"] != tokens["peer"] {
			t.Errorf("%s: peer token differs from secrets/", p)
		}
		// cmd/ticketing's TestDeployServeAcceptsEveryFormat checks that serve accepts it.
		if env["TICKETING_NODE_ID"] != node.ID {
			t.Errorf("%s: node id %q", p, env["TICKETING_NODE_ID"])
		}
		if n > 1 {
			if a := env["TICKETING_ADVERTISE"]; advertised[a] || a != hp(node.Host, node.ClientPort) {
				t.Errorf("%s: advertise %s, want %s once", p, a, hp(node.Host, node.ClientPort))
			}
			advertised[env["TICKETING_ADVERTISE"]] = true
		}
	}
	// client.env names every node and the token files.
	ce, _ := depParseEnv(t, filepath.Join(dir, "client.env"))
	if got := len(strings.Split(ce["TICKETING_ADDR"], ",")); got != n {
		t.Errorf("client.env: %d addresses", got)
	}
	if depReadToken(t, ce["TICKETING_TOKEN_FILE"]) != tokens["client"] || depReadToken(t, ce["TICKETING_ADMIN_TOKEN_FILE"]) != tokens["admin"] {
		t.Error("client.env: token files")
	}
	if tls {
		depCheckTLS(t, dir, spec)
	}
	switch format {
	case FormatShell, FormatDocker:
		for _, node := range spec.Nodes {
			name := node.ID + ".sh"
			if format == FormatDocker {
				name = node.ID + ".docker.sh"
			}
			p := filepath.Join(dir, name)
			if m := depMode(t, p); m != 0o755 {
				t.Errorf("%s mode %o", p, m)
			}
			if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
				t.Errorf("sh -n %s: %v\n%s", p, err, out)
			}
			b, _ := os.ReadFile(p)
			if !strings.Contains(string(b), node.ID+".env") {
				t.Errorf("%s does not load %s.env", p, node.ID)
			}
			if format == FormatDocker && !strings.Contains(string(b), "--pull never") {
				t.Errorf("%s may pull", p)
			}
		}
	case FormatCompose:
		depCheckCompose(t, filepath.Join(dir, "compose.yaml"), spec)
	case FormatSystemd:
		depCheckUnit(t, filepath.Join(dir, "ticketing@.service"), tls)
	}
	// Nothing else with a secret is readable by others.
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		for _, tok := range tokens {
			if bytes.Contains(b, []byte(tok)) && fi.Mode().Perm() != 0o600 {
				t.Errorf("%s holds a token with mode %o", p, fi.Mode().Perm())
			}
		}
		if strings.HasSuffix(p, ".key") && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: key with mode %o", p, fi.Mode().Perm())
		}
		return nil
	})
}

type depComposeFile struct {
	Services map[string]struct {
		Image      string   `yaml:"image"`
		PullPolicy string   `yaml:"pull_policy"`
		Command    []string `yaml:"command"`
		EnvFile    []string `yaml:"env_file"`
		Ports      []string `yaml:"ports"`
		Volumes    []string `yaml:"volumes"`
		Restart    string   `yaml:"restart"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func depCheckCompose(t *testing.T, path string, spec Spec) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cf depComposeFile
	var generic map[string]any
	if err := yaml.Unmarshal(b, &generic); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(cf.Services) != len(spec.Nodes) {
		t.Fatalf("compose.yaml: %d services", len(cf.Services))
	}
	ports := map[string]bool{}
	for _, node := range spec.Nodes {
		s, ok := cf.Services[node.ID]
		if !ok {
			t.Fatalf("compose.yaml: no service %s", node.ID)
		}
		if s.Image != spec.Image || s.PullPolicy != "never" || len(s.Command) != 1 || s.Command[0] != "serve" || s.Restart != "on-failure" {
			t.Errorf("compose.yaml %s: %+v", node.ID, s)
		}
		if len(s.EnvFile) != 1 || s.EnvFile[0] != node.ID+".env" {
			t.Errorf("compose.yaml %s: env_file %v", node.ID, s.EnvFile)
		}
		if len(s.Ports) != 1 || ports[s.Ports[0]] {
			t.Errorf("compose.yaml %s: ports %v", node.ID, s.Ports)
		}
		ports[s.Ports[0]] = true
		for _, v := range s.Volumes {
			if name, _, _ := strings.Cut(v, ":"); !strings.HasPrefix(name, ".") {
				if _, ok := cf.Volumes[name]; !ok {
					t.Errorf("compose.yaml %s: volume %s not declared", node.ID, name)
				}
			}
		}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		cmd := exec.Command("docker-compose", "-f", path, "config", "-q")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("docker-compose config: %v\n%s", err, out)
		}
	}
}

// depCheckUnit verifies a unit with systemd-analyze when there is one,
// else checks its structure.
func depCheckUnit(t *testing.T, path string, tls bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]map[string][]string{}
	var cur string
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			cur = l[1 : len(l)-1]
			sections[cur] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || cur == "" {
				t.Fatalf("%s:%d: %q", path, i+1, l)
			}
			sections[cur][k] = append(sections[cur][k], v)
		}
	}
	want := map[string]map[string]string{
		"Unit":    {"Description": "", "After": "network-online.target"},
		"Service": {"Type": "notify", "EnvironmentFile": "/etc/ticketing/%i.env", "Restart": "on-failure", "WatchdogSec": "", "DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "ExecStart": "", "LimitNOFILE": ""},
		"Install": {"WantedBy": "multi-user.target"},
	}
	for sec, kv := range want {
		for k, v := range kv {
			got := sections[sec][k]
			if len(got) == 0 || v != "" && got[0] != v {
				t.Errorf("%s: [%s] %s=%v, want %q", path, sec, k, got, v)
			}
		}
	}
	if tls && len(sections["Service"]["LoadCredential"]) != 3 {
		t.Errorf("%s: TLS files not passed as credentials", path)
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("no systemd-analyze: structural check only")
		return
	}
	// verify wants an instance of the template, by its file name.
	inst := filepath.Join(t.TempDir(), "ticketing@n1.service")
	if err := os.WriteFile(inst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", inst).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("ticketing@")) {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func depCheckTLS(t *testing.T, dir string, spec Spec) {
	t.Helper()
	for _, name := range append(depNodeIDs(spec), "client", "ca") {
		crt, key := filepath.Join(dir, "tls", name+".crt"), filepath.Join(dir, "tls", name+".key")
		p, err := depLoadPair(crt, key)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m := depMode(t, key); m != 0o600 {
			t.Errorf("%s mode %o", key, m)
		}
		if name == "ca" {
			continue
		}
		ca, _ := depLoadPair(filepath.Join(dir, "tls", "ca.crt"), filepath.Join(dir, "tls", "ca.key"))
		if err := p.cert.CheckSignatureFrom(ca.cert); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, node := range spec.Nodes {
		p, _ := depLoadPair(filepath.Join(dir, "tls", node.ID+".crt"), filepath.Join(dir, "tls", node.ID+".key"))
		if err := p.cert.VerifyHostname(node.Host); err != nil {
			t.Errorf("%s: %v", node.ID, err)
		}
		if err := p.cert.VerifyHostname(node.ID); err != nil { // compose service name
			t.Errorf("%s: %v", node.ID, err)
		}
	}
}

func depNodeIDs(spec Spec) []string {
	var ids []string
	for _, n := range spec.Nodes {
		ids = append(ids, n.ID)
	}
	return ids
}

// depFixedRand makes the generated tokens known to the test.
type depFixedRand struct{ b byte }

func (r *depFixedRand) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.b
		r.b++
	}
	return len(p), nil
}

func TestDeploySecretsNeverPrinted(t *testing.T) {
	saved := Rand
	t.Cleanup(func() { Rand = saved })
	// The first three tokens depFixedRand produces.
	var want []string
	r := &depFixedRand{}
	for range 3 {
		b := make([]byte, 32)
		r.Read(b)
		want = append(want, hex.EncodeToString(b))
	}
	count := func(s string) int {
		c := 0
		for _, w := range want {
			if strings.Contains(s, w) {
				c++
			}
		}
		return c
	}
	for _, format := range Formats {
		// The plan: redacted, unless --show-secrets.
		Rand = &depFixedRand{}
		code, out, errOut := depRun(t, "deploy", "--nodes", "a,b,c", "--format", format)
		if code != 0 || count(out+errOut) != 0 || !strings.Contains(out, "<redacted>") {
			t.Errorf("%s plan: exit %d, %d secrets shown", format, code, count(out+errOut))
		}
		Rand = &depFixedRand{}
		_, out, _ = depRun(t, "deploy", "--nodes", "a,b,c", "--format", format, "--show-secrets")
		if count(out) != 3 {
			t.Errorf("%s plan --show-secrets: %d of 3 secrets shown", format, count(out))
		}
		// Written: the summary shows none, unless --show-secrets.
		Rand = &depFixedRand{}
		dir := t.TempDir()
		code, out, errOut = depRun(t, "deploy", "--nodes", "a,b,c", "--format", format, "--out", dir)
		if code != 0 || count(out+errOut) != 0 {
			t.Errorf("%s --out: exit %d, %d secrets printed", format, code, count(out+errOut))
		}
		if depReadToken(t, filepath.Join(dir, "secrets", "client.token")) != want[0] {
			t.Fatalf("%s: the tokens are not the ones the test expects", format)
		}
		_, out, _ = depRun(t, "deploy", "--nodes", "a,b,c", "--format", format, "--out", dir, "--show-secrets")
		if count(out) != 3 {
			t.Errorf("%s --out --show-secrets: %d of 3 secrets shown", format, count(out))
		}
	}
}

func TestDeployNeverOverwritesSecrets(t *testing.T) {
	dir := t.TempDir()
	run := func(extra ...string) (int, string, string) {
		return depRun(t, append([]string{"deploy", "--nodes", "127.0.0.1,127.0.0.1,127.0.0.1", "--format", "shell", "--out", dir, "--tls-dir", "/etc/t"}, extra...)...)
	}
	if code, _, errOut := run(); code != 0 {
		t.Fatal(errOut)
	}
	snapshot := func() map[string]string {
		m := map[string]string{}
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && (fi.Mode().Perm() == 0o600) {
				b, _ := os.ReadFile(p)
				m[p] = string(b)
			}
			return nil
		})
		return m
	}
	first := snapshot()
	if len(first) < 3+3+5 { // tokens, env files, keys
		t.Fatalf("only %d secret files", len(first))
	}
	// Twice: same secrets, and it says so.
	code, out, errOut := run()
	if code != 0 || !strings.Contains(errOut, "kept the existing tokens") || !strings.Contains(out, "kept") {
		t.Fatalf("second run: exit %d\n%s\n%s", code, out, errOut)
	}
	if second := snapshot(); !depMapsEqual(first, second) {
		t.Fatal("second run changed a secret file")
	}
	// A changed layout reuses the tokens too.
	if code, _, errOut := run("--client-port", "8000", "--peer-port", "8001"); code != 0 {
		t.Fatal(errOut)
	}
	env, _ := depParseEnv(t, filepath.Join(dir, "n1.env"))
	if env["TICKETING_LISTEN"] != "127.0.0.1:8000" || env["TICKETING_TOKEN"] != depReadToken(t, filepath.Join(dir, "secrets", "client.token")) {
		t.Fatalf("re-layout: %v", env)
	}
	// An env file whose secret differs from secrets/ is not overwritten.
	p := filepath.Join(dir, "n2.env")
	b, _ := os.ReadFile(p)
	edited := regexp.MustCompile(`(?m)^TICKETING_PEER_TOKEN=.*$`).ReplaceAllString(string(b), "TICKETING_PEER_TOKEN=handmade")
	os.WriteFile(p, []byte(edited), 0o600)
	code, _, errOut = run("--client-port", "8000", "--peer-port", "8001")
	if code != ExitUsage || !strings.Contains(errOut, "not overwriting a secret") {
		t.Fatalf("edited secret: exit %d: %s", code, errOut)
	}
	if b2, _ := os.ReadFile(p); string(b2) != edited {
		t.Fatal("the edited env file was overwritten")
	}
	// --force replaces the tokens, and says so; it keeps the TLS files.
	oldTok := depReadToken(t, filepath.Join(dir, "secrets", "client.token"))
	oldKey, _ := os.ReadFile(filepath.Join(dir, "tls", "n1.key"))
	code, _, errOut = run("--force")
	if code != 0 || !strings.Contains(errOut, "replaced the tokens") {
		t.Fatalf("--force: exit %d: %s", code, errOut)
	}
	if depReadToken(t, filepath.Join(dir, "secrets", "client.token")) == oldTok {
		t.Fatal("--force kept the token")
	}
	if key, _ := os.ReadFile(filepath.Join(dir, "tls", "n1.key")); !bytes.Equal(key, oldKey) {
		t.Fatal("--force replaced a TLS key")
	}
	// A deleted certificate is issued again by the same CA; a stray one is refused.
	os.Remove(filepath.Join(dir, "tls", "n2.crt"))
	os.Remove(filepath.Join(dir, "tls", "n2.key"))
	if code, _, errOut := run(); code != 0 {
		t.Fatal(errOut)
	}
	if _, err := depLoadPair(filepath.Join(dir, "tls", "n2.crt"), filepath.Join(dir, "tls", "n2.key")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "tls", "n3.key"))
	if code, _, errOut := run(); code != ExitUsage || !strings.Contains(errOut, "not replacing") {
		t.Fatalf("lone certificate: exit %d %s", code, errOut)
	}
}

func depMapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestDeployAdd(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := depRun(t, "deploy", "--nodes", "127.0.0.1,127.0.0.1,127.0.0.1", "--format", "systemd", "--out", dir); code != 0 {
		t.Fatal(errOut)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "n1.env"))
	code, out, errOut := depRun(t, "deploy", "--add", "127.0.0.1", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "ticketing node add --id n4 --peer-addr 127.0.0.1:7477 --client-addr 127.0.0.1:7476 --voter") {
		t.Errorf("no node add command in:\n%s", out)
	}
	env, _ := depParseEnv(t, filepath.Join(dir, "n4.env"))
	if env["TICKETING_JOIN"] != "true" || env["TICKETING_PEERS"] != "" || env["TICKETING_BOOTSTRAP"] != "" || env["TICKETING_NODE_ID"] != "n4" {
		t.Errorf("n4.env: %v", env)
	}
	if env["TICKETING_PEER_TOKEN"] != depReadToken(t, filepath.Join(dir, "secrets", "peer.token")) {
		t.Error("n4 has another peer token")
	}
	after, _ := os.ReadFile(filepath.Join(dir, "n1.env"))
	if !bytes.Equal(before, after) {
		t.Error("--add changed n1.env")
	}
	ce, _ := depParseEnv(t, filepath.Join(dir, "client.env"))
	if !strings.HasSuffix(ce["TICKETING_ADDR"], ",127.0.0.1:7476") {
		t.Errorf("client.env: %s", ce["TICKETING_ADDR"])
	}
	// --remove: client.env and compose forget n2, the bootstrap list does not.
	code, out, errOut = depRun(t, "deploy", "--remove", "n2", "--out", dir)
	if code != 0 || !strings.Contains(out, "n2.env") {
		t.Fatalf("--remove: exit %d\n%s%s", code, out, errOut)
	}
	ce, _ = depParseEnv(t, filepath.Join(dir, "client.env"))
	if strings.Contains(ce["TICKETING_ADDR"], "127.0.0.1:7472") || len(strings.Split(ce["TICKETING_ADDR"], ",")) != 3 {
		t.Errorf("client.env after --remove: %s", ce["TICKETING_ADDR"])
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "n1.env")); !bytes.Equal(before, after) {
		t.Error("--remove changed n1.env (its bootstrap peers must stay)")
	}
	if code, _, _ := depRun(t, "deploy", "--remove", "n2", "--out", dir); code != ExitUsage {
		t.Errorf("second --remove n2: exit %d", code)
	}
	// The next node does not reuse n2's id or ports.
	if code, out, _ = depRun(t, "deploy", "--add", "127.0.0.1", "--out", dir); code != 0 || !strings.Contains(out, "--id n5 --peer-addr 127.0.0.1:7479") {
		t.Errorf("--add after --remove: %s", out)
	}
	// A single node does not grow.
	one := t.TempDir()
	depRun(t, "deploy", "--nodes", "a", "--out", one)
	if code, _, _ := depRun(t, "deploy", "--add", "b", "--out", one); code != ExitUsage {
		t.Errorf("--add to a single node: exit %d", code)
	}
}

// TestDeployStaticFiles keeps the checked-in deploy/ files in step with the
// generator and checks them like generated ones.
// TICKETING_UPDATE_DEPLOY=1 rewrites deploy/ticketing@.service.
func TestDeployStaticFiles(t *testing.T) {
	unit := filepath.Join("..", "..", "..", "..", "deploy", "ticketing@.service")
	want := RenderSystemdUnit("/usr/local/bin/ticketing", "ticketing", "", "")
	if os.Getenv("TICKETING_UPDATE_DEPLOY") == "1" {
		os.WriteFile(unit, want, 0o644)
	}
	got, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what deploy generates (TICKETING_UPDATE_DEPLOY=1 go test -run TestDeployStaticFiles rewrites it)", unit)
	}
	checkSystemdUnitStructure := func() {
		// systemd-analyze verify needs the binary to exist: check a copy
		// naming one that does.
		self, _ := os.Executable()
		b := bytes.ReplaceAll(got, []byte("/usr/local/bin/ticketing"), []byte(self))
		p := filepath.Join(t.TempDir(), "ticketing@.service")
		os.WriteFile(p, b, 0o644)
		depCheckUnit(t, p, false)
	}
	checkSystemdUnitStructure()

	compose := filepath.Join("..", "..", "..", "..", "deploy", "compose.yaml")
	b, err := os.ReadFile(compose)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			PullPolicy  string            `yaml:"pull_policy"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", compose, err)
	}
	if len(doc.Services) != 3 {
		t.Fatalf("%s: %d services", compose, len(doc.Services))
	}
	for id, s := range doc.Services {
		if s.PullPolicy != "never" {
			t.Errorf("%s: %s may pull", compose, id)
		}
		if got := depExpandCompose(s.Environment["TICKETING_NODE_ID"]); got != id {
			t.Errorf("%s: service %s has TICKETING_NODE_ID %q", compose, id, got)
		}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		cmd := exec.Command("docker-compose", "-f", compose, "config", "-q")
		cmd.Env = append(os.Environ(), "TICKETING_TOKEN=a", "TICKETING_ADMIN_TOKEN=b", "TICKETING_PEER_TOKEN=c")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("docker-compose config: %v\n%s", err, out)
		}
	}
}

// depExpandCompose substitutes ${VAR:-default} and ${VAR:?msg} as compose
// would with only the tokens set.
func depExpandCompose(v string) string {
	re := regexp.MustCompile(`\$\{([A-Z0-9_]+)(:-|:\?)([^}]*)\}`)
	return re.ReplaceAllStringFunc(v, func(m string) string {
		g := re.FindStringSubmatch(m)
		if strings.HasSuffix(g[1], "TOKEN") {
			return strings.ToLower(g[1]) + "-value"
		}
		if g[2] == ":-" {
			return g[3]
		}
		return ""
	})
}

type depPair struct{ cert *x509.Certificate }

// depLoadPair loads a certificate and checks its key matches.
func depLoadPair(certPath, keyPath string) (*depPair, error) {
	kp, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		return nil, err
	}
	return &depPair{cert: c}, nil
}

// A --nodes re-run over an existing deployment keeps its node count (issue
// #28 item 6: 3 → 5 wrote bootstrap env files for n4 and n5, which then
// showed as removed); --add and --remove change membership.
func TestDeployRerunKeepsNodeCount(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := depRun(t, "deploy", "--nodes", "10.0.0.1,10.0.0.2,10.0.0.3", "--out", dir); code != 0 {
		t.Fatalf("first deploy: exit %d: %s", code, errOut)
	}
	code, _, errOut := depRun(t, "deploy", "--nodes", "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5", "--out", dir)
	if code != ExitUsage || !strings.Contains(errOut, "has 3 node(s), not 5") || !strings.Contains(errOut, "--add") {
		t.Fatalf("re-run with 5 nodes: exit %d %q, want 2 pointing to --add", code, errOut)
	}
	for _, f := range []string{"n4.env", "n5.env"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("the refused re-run wrote %s", f)
		}
	}
	// The same count (token rotation, say) is a re-run as before.
	if code, _, errOut := depRun(t, "deploy", "--nodes", "10.0.0.1,10.0.0.2,10.0.0.3", "--out", dir, "--force"); code != 0 {
		t.Fatalf("re-run with 3 nodes: exit %d: %s", code, errOut)
	}
}

// --tls-key-type picks the key type of every generated certificate (issue
// #28 item 7: the C# client on Mono cannot use ECDSA); ecdsa is the
// default, and a node added later gets the deployment's type.
func TestDeployTLSKeyType(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want x509.PublicKeyAlgorithm
	}{{nil, x509.ECDSA}, {[]string{"--tls-key-type", "rsa"}, x509.RSA}, {[]string{"--tls-key-type", "ecdsa"}, x509.ECDSA}} {
		dir := t.TempDir()
		args := append([]string{"deploy", "--nodes", "10.0.0.1,10.0.0.2,10.0.0.3", "--out", dir, "--tls-dir", "/etc/ticketing/tls"}, tc.args...)
		if code, _, errOut := depRun(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		if code, _, errOut := depRun(t, "deploy", "--out", dir, "--add", "10.0.0.4"); code != 0 {
			t.Fatalf("%v --add: exit %d: %s", tc.args, code, errOut)
		}
		for _, name := range []string{"ca", "n1", "n4", "client"} {
			kp, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls", name+".crt"), filepath.Join(dir, "tls", name+".key"))
			if err != nil {
				t.Fatalf("%v: %s: %v", tc.args, name, err)
			}
			c, err := x509.ParseCertificate(kp.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if c.PublicKeyAlgorithm != tc.want {
				t.Errorf("%v: %s.crt has a %v key, want %v", tc.args, name, c.PublicKeyAlgorithm, tc.want)
			}
		}
	}
	if code, _, errOut := depRun(t, "deploy", "--nodes", "a,b,c", "--tls-key-type", "dsa"); code != ExitUsage || !strings.Contains(errOut, "ecdsa or rsa") {
		t.Fatalf("--tls-key-type dsa: exit %d %q", code, errOut)
	}
}

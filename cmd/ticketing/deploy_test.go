package main

// What of `ticketing deploy` needs the command (issue #36 item 9: the
// generator's own tests are in cmd/ticketing/internal/deploy): that
// `ticketing serve` accepts every configuration deploy generates, for every
// format, 1, 3 and 5 nodes, with and without TLS, a node added with --add,
// and the checked-in deploy/compose.yaml. deploy_e2e_test.go starts what it
// generates; deploy_container_test.go does so with docker.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ticketing/ticketing/cmd/ticketing/internal/deploy"
)

// depRun runs the CLI in-process.
func depRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errOut)
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
		if !deploy.SafeValue.MatchString(g[2]) {
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

// depServeConfig checks that env is a configuration `ticketing serve`
// accepts (flags, env, Validate), and returns it.
func depServeConfig(t *testing.T, env map[string]string) *ServeOptions {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	defer func() {
		for k := range env {
			os.Setenv(k, "") // viper treats empty as unset
		}
	}()
	var got *ServeOptions
	ios, _, _ := testIO("")
	cmd := newCmdServe(newFactory(ios), func(_ context.Context, _ *IO, o *ServeOptions) error { got = o; return nil })
	if err := execCmd(t, cmd); err != nil {
		t.Fatalf("serve refuses the generated environment: %v\n%v", err, env)
	}
	return got
}

func depReadToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestDeployServeAcceptsEveryFormat: every env file deploy writes is a
// configuration serve accepts, naming the node, its tokens, data dir, TLS
// files and cluster (bootstrap peers, a distinct advertised address).
func TestDeployServeAcceptsEveryFormat(t *testing.T) {
	clearEnv(t)
	hostSets := map[int]string{
		1: "db1.example.com",
		3: "10.0.0.1,10.0.0.2,10.0.0.3",
		5: "127.0.0.1,127.0.0.1,127.0.0.1,h4.example.com,h5.example.com:9000",
	}
	for _, n := range []int{1, 3, 5} {
		for _, format := range deploy.Formats {
			for _, tls := range []bool{false, true} {
				name := fmt.Sprintf("%d-%s", n, format)
				if tls {
					name += "-tls"
				}
				t.Run(name, func(t *testing.T) {
					dir := t.TempDir()
					args := []string{"deploy", "--nodes", hostSets[n], "--format", format, "--out", dir}
					if tls {
						args = append(args, "--tls-dir", "/etc/ticketing/tls")
					}
					if code, _, errOut := depRun(t, args...); code != 0 {
						t.Fatalf("exit %d: %s", code, errOut)
					}
					depCheckServeAccepts(t, dir, n, format, tls)
				})
			}
		}
	}
}

func depCheckServeAccepts(t *testing.T, dir string, n int, format string, tls bool) {
	t.Helper()
	var spec deploy.Spec
	b, err := os.ReadFile(filepath.Join(dir, "deploy.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("deploy.json: %v", err)
	}
	client, admin := depReadToken(t, filepath.Join(dir, "secrets", "client.token")), depReadToken(t, filepath.Join(dir, "secrets", "admin.token"))
	for _, node := range spec.Nodes {
		p := filepath.Join(dir, node.ID+".env")
		env, _ := depParseEnv(t, p)
		cfg := depServeConfig(t, env).Config
		if cfg.NodeID != node.ID || cfg.ClientToken != client || cfg.AdminToken != admin {
			t.Errorf("%s: serve sees node %q and other tokens", p, cfg.NodeID)
		}
		if format == deploy.FormatDocker || format == deploy.FormatCompose {
			if cfg.DataDir != "/data" {
				t.Errorf("%s: data dir %q", p, cfg.DataDir)
			}
		} else if cfg.DataDir != "/var/lib/ticketing/"+node.ID {
			t.Errorf("%s: data dir %q", p, cfg.DataDir)
		}
		if tls && format != deploy.FormatSystemd && (cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" || cfg.TLSClientCAFile == "") {
			t.Errorf("%s: TLS not configured", p)
		}
		if n == 1 {
			if cfg.Cluster != nil {
				t.Errorf("%s: a single node in cluster mode", p)
			}
			continue
		}
		if cc := cfg.Cluster; cc == nil || len(cc.Peers) != n || !cc.Bootstrap || cc.Advertise != hp(node.Host, node.ClientPort) {
			t.Errorf("%s: cluster config %+v", p, cc)
		}
	}
}

// A node added with --add joins: serve sees no bootstrap and no peers.
func TestDeployAddServeAccepts(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	if code, _, errOut := depRun(t, "deploy", "--nodes", "127.0.0.1,127.0.0.1,127.0.0.1", "--format", "systemd", "--out", dir); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := depRun(t, "deploy", "--add", "127.0.0.1", "--out", dir); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	env, _ := depParseEnv(t, filepath.Join(dir, "n4.env"))
	opts := depServeConfig(t, env)
	if opts.Config.Cluster == nil || opts.Config.Cluster.Bootstrap || len(opts.Config.Cluster.Peers) != 0 || opts.Config.NodeID != "n4" {
		t.Errorf("n4 serve config: %+v", opts.Config.Cluster)
	}
}

// Each service of the checked-in deploy/compose.yaml is a configuration
// serve accepts (the generator's check of the file is TestDeployStaticFiles
// in cmd/ticketing/internal/deploy).
func TestDeployStaticComposeServeAccepts(t *testing.T) {
	compose := filepath.Join("..", "..", "deploy", "compose.yaml")
	b, err := os.ReadFile(compose)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", compose, err)
	}
	clearEnv(t)
	for id, s := range doc.Services {
		env := map[string]string{}
		for k, v := range s.Environment {
			env[k] = depExpandCompose(v)
		}
		cfg := depServeConfig(t, env).Config
		if cfg.NodeID != id || cfg.Cluster == nil || len(cfg.Cluster.Peers) != 3 {
			t.Errorf("%s: service %s: %+v", compose, id, cfg)
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

func TestCompletionAndMan(t *testing.T) {
	for shell, marker := range map[string]string{"bash": "bash completion V2 for ticketing", "zsh": "#compdef ticketing", "fish": "complete -c ticketing"} {
		code, out, errOut := depRun(t, "completion", shell)
		if code != 0 || !strings.Contains(out, marker) {
			t.Errorf("completion %s: exit %d, %q… %s", shell, code, depFirstLine(out), errOut)
		}
	}
	if code, _, _ := depRun(t, "completion", "tcsh"); code != ExitUsage {
		t.Errorf("completion tcsh: exit %d", code)
	}
	if _, out, _ := depRun(t, "--help"); !regexp.MustCompile(`(?m)^\s+completion\s`).MatchString(out) || !regexp.MustCompile(`(?m)^\s+deploy\s`).MatchString(out) {
		t.Errorf("--help does not list completion and deploy:\n%s", out)
	}
	// Flag values complete: --format.
	if _, out, _ := depRun(t, "__complete", "deploy", "--format", ""); !strings.Contains(out, "compose") {
		t.Errorf("deploy --format does not complete: %q", out)
	}
	dir := t.TempDir()
	code, out, errOut := depRun(t, "man", "--dir", dir)
	if code != 0 {
		t.Fatalf("man: exit %d: %s", code, errOut)
	}
	for _, page := range []string{"ticketing.1", "ticketing-serve.1", "ticketing-deploy.1", "ticketing-completion.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil || !bytes.HasPrefix(bytes.TrimLeft(b, "\n"), []byte(".nh")) && !bytes.Contains(b, []byte(".TH \"TICKETING\"")) {
			t.Errorf("%s: %v %q", page, err, depFirstLine(string(b)))
		}
	}
	if !strings.Contains(out, "man pages") {
		t.Errorf("man: %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "ticketing-man.1")); err == nil {
		t.Error("the hidden man command has a page")
	}
}

func depFirstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

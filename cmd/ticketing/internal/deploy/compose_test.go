//go:build unix

package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The compose project starts as generated (issue #28 item 5): each
// container mounts only its own TLS files — ca.crt, ID.crt, ID.key, never
// ca.key — from a directory the container's user (uid 65532) can enter,
// and every file it reads is readable by that user; the env file's TLS
// paths are files of the mount.
func TestDeployComposeTLSMounts(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := depRun(t, "deploy", "--nodes", "127.0.0.1,127.0.0.1,127.0.0.1", "--format", "compose", "--tls-dir", "/etc/ticketing/tls", "--out", dir)
	if code != 0 {
		t.Fatalf("deploy: exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "to /etc/ticketing/tls on each node") {
		t.Errorf("the next steps tell to copy files compose never reads:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf struct {
		Services map[string]struct {
			Volumes []string `yaml:"volumes"`
			EnvFile []string `yaml:"env_file"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	const uid = 65532
	readable := func(fi os.FileInfo, bits os.FileMode) bool {
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid == uid {
			return fi.Mode().Perm()&(bits<<6) == bits<<6
		}
		return fi.Mode().Perm()&bits == bits
	}
	for id, svc := range cf.Services {
		var src string
		for _, v := range svc.Volumes {
			if s, ok := strings.CutSuffix(v, ":/etc/ticketing/tls:ro"); ok {
				src = filepath.Join(dir, s)
			}
		}
		if src == "" {
			t.Fatalf("%s: no TLS mount in %v", id, svc.Volumes)
		}
		fi, err := os.Stat(src)
		if err != nil {
			t.Fatal(err)
		}
		if !readable(fi, 0o5) {
			t.Errorf("%s: %s mode %v: uid %d cannot enter it", id, src, fi.Mode(), uid)
		}
		ents, _ := os.ReadDir(src)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
			fi, _ := os.Stat(filepath.Join(src, e.Name()))
			if !readable(fi, 0o4) {
				t.Errorf("%s: %s mode %v: uid %d cannot read it", id, e.Name(), fi.Mode(), uid)
			}
		}
		if want := []string{"ca.crt", id + ".crt", id + ".key"}; strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("%s: the mount holds %v, want exactly %v (never ca.key)", id, names, want)
		}
		env, _ := depParseEnv(t, filepath.Join(dir, svc.EnvFile[0]))
		for _, k := range []string{"TICKETING_TLS_CERT", "TICKETING_TLS_KEY", "TICKETING_TLS_CLIENT_CA"} {
			p, ok := strings.CutPrefix(env[k], "/etc/ticketing/tls/")
			if !ok {
				t.Errorf("%s: %s=%s is not under the mount", id, k, env[k])
				continue
			}
			if _, err := os.Stat(filepath.Join(src, p)); err != nil {
				t.Errorf("%s: %s=%s: not in the mount: %v", id, k, env[k], err)
			}
		}
	}
}

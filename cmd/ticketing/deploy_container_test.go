//go:build unix

package main

// Container tests: `make image` builds an image whose `ticketing serve`
// answers a real acquire/release from the host and whose `version` is the
// stamped one; the compose file `ticketing deploy --format compose`
// generates, and deploy/compose.yaml, each bring up a 3-node cluster that
// grants a lock through every node. They need a docker engine and
// docker-compose, and skip (saying why) without them or with -short.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
)

// depNeedDocker skips unless a docker engine answers.
func depNeedDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("container tests: skipped with -short")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("container tests: no docker client on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("container tests: no docker engine (docker info: %v: %s)", err, strings.TrimSpace(string(out)))
	}
}

func depDocker(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// depImage is an image built by depMakeImage.
type depImage struct {
	root  string // the repository
	tag   string // unique to this build: for names of containers and compose projects
	image string // ticketing-test:TAG
	ver   string // the version stamped into the binary
}

// depMakeImage builds the image with `make image` under a unique tag and a
// version the test can recognise, and removes it in t.Cleanup.
func depMakeImage(t *testing.T) depImage {
	t.Helper()
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	tag := "t" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	im := depImage{root: root, tag: tag, image: "ticketing-test:" + tag, ver: "v0.0.0-imagetest." + tag}
	depMakeMu.Lock()
	cmd := exec.Command("make", "-s", "image", "IMAGE="+im.image, "VERSION="+im.ver)
	cmd.Dir = root
	cmd.Env = depCleanEnv()
	out, err := cmd.CombinedOutput()
	depMakeMu.Unlock()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", im.image).Run() })
	return im
}

// depComposeCmd returns the compose command (docker-compose, or the docker
// compose plugin), or nil when there is none.
func depComposeCmd() []string {
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	if err := exec.Command("docker", "compose", "version").Run(); err == nil {
		return []string{"docker", "compose"}
	}
	return nil
}

// depCompose is a compose project a test brought up.
type depCompose struct {
	cmd     []string // depComposeCmd
	project string
	files   []string
	env     []string // added to the environment (without TICKETING_* of the test's own)
}

// run runs one compose command on the project.
func (c *depCompose) run(timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append([]string{}, c.cmd[1:]...)
	argv = append(argv, "-p", c.project)
	for _, f := range c.files {
		argv = append(argv, "-f", f)
	}
	cmd := exec.CommandContext(ctx, c.cmd[0], append(argv, args...)...)
	cmd.Env = append(depCleanEnv(), c.env...)
	return cmd.CombinedOutput()
}

// depComposeUp brings the project up (up -d) and, in t.Cleanup, shows the
// last log lines when the test failed and takes it down with its volumes.
func depComposeUp(t *testing.T, c *depCompose) *depCompose {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := c.run(time.Minute, "logs", "--tail", "30")
			t.Logf("compose logs:\n%s", logs)
		}
		if out, err := c.run(2*time.Minute, "down", "-v", "-t", "10"); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})
	if out, err := c.run(3*time.Minute, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	return c
}

func TestContainer(t *testing.T) {
	depNeedDocker(t)
	im := depMakeImage(t)
	root, tag, image, ver := im.root, im.tag, im.image, im.ver

	t.Run("image", func(t *testing.T) {
		out := depDocker(t, time.Minute, "run", "--rm", image, "version")
		if !strings.Contains(out, "ticketing "+ver+" (") {
			t.Errorf("docker run --rm %s version: %q, want %s", image, out, ver)
		}
		if u := strings.TrimSpace(depDocker(t, time.Minute, "image", "inspect", "-f", "{{.Config.User}}", image)); u == "" || u == "0" || strings.HasPrefix(u, "root") || strings.HasPrefix(u, "0:") {
			t.Errorf("image user %q: want a non-root user", u)
		}
		// FROM scratch: the image is our three COPY layers (rootfs, data,
		// the binary), no base distribution.
		if n := strings.TrimSpace(depDocker(t, time.Minute, "image", "inspect", "-f", "{{len .RootFS.Layers}}", image)); n != "3" {
			t.Errorf("image has %s layers, want 3", n)
		}
		port := depFreePair(t)
		name := "ticketing-test-" + tag
		depDocker(t, time.Minute, "run", "-d", "--name", name, "-p", "127.0.0.1:"+strconv.Itoa(port)+":7470",
			"-e", "TICKETING_TOKEN=image-test-token", image)
		defer func() {
			if t.Failed() {
				logs, _ := exec.Command("docker", "logs", "--tail", "30", name).CombinedOutput()
				t.Logf("container log:\n%s", logs)
			}
			exec.Command("docker", "rm", "-f", name).Run()
		}()
		depLockVia(t, hp("127.0.0.1", port), "image-test", []client.Option{client.WithToken("image-test-token"), client.WithDialTimeout(5 * time.Second)}, time.Minute)
		// `ticketing serve` reports the stamped version too.
		code, sout, serr := depRun(t, "status", "--addr", hp("127.0.0.1", port), "--token", "image-test-token")
		if code != 0 || !strings.Contains(sout, ver) {
			t.Errorf("status: exit %d, %s %s", code, sout, serr)
		}
	})

	compose := depComposeCmd()
	if compose == nil {
		t.Log("no docker-compose: compose tests skipped")
		return
	}
	up := func(t *testing.T, project, file string, env []string, addrs []string, opts []client.Option) {
		t.Helper()
		depComposeUp(t, &depCompose{cmd: compose, project: project, files: []string{file}, env: env})
		for i, a := range addrs {
			depLockVia(t, a, fmt.Sprintf("compose-%d", i), opts, 90*time.Second)
		}
	}

	t.Run("compose-generated", func(t *testing.T) {
		dir := t.TempDir()
		var hs []string
		for range 3 {
			hs = append(hs, "127.0.0.1:"+strconv.Itoa(depFreePair(t)))
		}
		if code, _, errOut := depRun(t, "deploy", "--nodes", strings.Join(hs, ","), "--format", "compose", "--image", image, "--out", dir); code != 0 {
			t.Fatal(errOut)
		}
		up(t, "tkgen"+strings.ReplaceAll(tag, "-", ""), filepath.Join(dir, "compose.yaml"), nil, hs, depClientOpts(t, dir))
	})

	t.Run("compose-static", func(t *testing.T) {
		var env []string
		var addrs []string
		for i := range 3 {
			p := depFreePair(t)
			env = append(env, fmt.Sprintf("TICKETING_PORT_N%d=%d", i+1, p))
			addrs = append(addrs, hp("127.0.0.1", p))
		}
		env = append(env, "TICKETING_IMAGE="+image, "TICKETING_TOKEN=static-client", "TICKETING_ADMIN_TOKEN=static-admin", "TICKETING_PEER_TOKEN=static-peer")
		up(t, "tkstatic"+strings.ReplaceAll(tag, "-", ""), filepath.Join(root, "deploy", "compose.yaml"), env, addrs,
			[]client.Option{client.WithToken("static-client"), client.WithDialTimeout(5 * time.Second)})
	})
}

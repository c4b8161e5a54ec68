//go:build unix

package main

// End-to-end tests of the deployment tooling with the real binary on
// loopback: generated env files start working clusters (1, 3, 5 nodes, TLS,
// a node added with --add), serve speaks sd_notify, docs/operations.md's
// commands bring up a cluster (scripts/operations-check.sh), and `make
// release` builds what it promises. Skipped with -short.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
)

// depFreePair returns a port p with p and p+1 both free on 127.0.0.1.
func depFreePair(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no free pair of ports")
	return 0
}

// depNode is a started node process.
type depNode struct {
	id   string
	cmd  *exec.Cmd
	log  *syncBuf
	done chan struct{}
}

// depStartEnv starts `ticketing serve` with the env file as its whole
// environment (plus PATH and HOME), as systemd's EnvironmentFile= would.
func depStartEnv(t *testing.T, bin, envFile string) *depNode {
	t.Helper()
	env, order := depParseEnv(t, envFile)
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for _, k := range order {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	n := &depNode{id: env["TICKETING_NODE_ID"], cmd: cmd, log: &syncBuf{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = n.log, n.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-n.done
		if t.Failed() {
			t.Logf("--- %s log:\n%s", n.id, depTail(n.log.String(), 30))
		}
	})
	return n
}

func depTail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// stop sends SIGTERM and expects a clean exit.
func (n *depNode) stop(t *testing.T) {
	t.Helper()
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
		if st := n.cmd.ProcessState; st != nil && !st.Success() {
			t.Errorf("%s exited %v after SIGTERM:\n%s", n.id, st, depTail(n.log.String(), 20))
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM", n.id)
	}
}

// depClientOpts reads the CLI settings deploy wrote into client.env.
func depClientOpts(t *testing.T, dir string) []client.Option {
	t.Helper()
	ce, _ := depParseEnv(t, filepath.Join(dir, "client.env"))
	opts := []client.Option{
		client.WithToken(depReadToken(t, ce["TICKETING_TOKEN_FILE"])),
		client.WithAdminToken(depReadToken(t, ce["TICKETING_ADMIN_TOKEN_FILE"])),
		client.WithDialTimeout(5 * time.Second),
	}
	if ca := ce["TICKETING_TLS_CA"]; ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		kp, err := tls.LoadX509KeyPair(ce["TICKETING_TLS_CERT"], ce["TICKETING_TLS_KEY"])
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, client.WithTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}))
	}
	return opts
}

// depLockVia acquires and releases a lock with a client that knows only
// addr (it follows M to the leader), retrying until the cluster is up.
func depLockVia(t *testing.T, addr, key string, opts []client.Option, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		last = func() error {
			c, err := client.Dial(ctx, []string{addr}, opts...)
			if err != nil {
				return err
			}
			defer c.Close()
			l, err := c.Acquire(ctx, key, 10*time.Second, 5*time.Second)
			if err != nil {
				return err
			}
			if l.Token() == 0 {
				return fmt.Errorf("token 0")
			}
			return l.Release(ctx)
		}()
		cancel()
		if last == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no lock through %s within %v: %v", addr, within, last)
}

func TestDeployEnvClusterStarts(t *testing.T) {
	bin := ticketingBin(t)
	for _, tc := range []struct {
		n   int
		tls bool
		add bool
	}{{1, false, false}, {3, false, true}, {5, false, false}, {3, true, false}} {
		name := fmt.Sprintf("%d-nodes", tc.n)
		if tc.tls {
			name += "-tls"
		}
		if tc.add {
			name += "-add"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var hs []string
			for range tc.n {
				hs = append(hs, "127.0.0.1:"+strconv.Itoa(depFreePair(t)))
			}
			args := []string{"deploy", "--nodes", strings.Join(hs, ","), "--format", "env", "--out", dir, "--data-dir", filepath.Join(dir, "data")}
			if tc.tls {
				args = append(args, "--tls-dir", filepath.Join(dir, "tls"))
			}
			if code, _, errOut := depRun(t, args...); code != 0 {
				t.Fatal(errOut)
			}
			var nodes []*depNode
			for i := range tc.n {
				nodes = append(nodes, depStartEnv(t, bin, filepath.Join(dir, fmt.Sprintf("n%d.env", i+1))))
			}
			opts := depClientOpts(t, dir)
			// A lock through every node: followers answer M, the client follows.
			for i, h := range hs {
				depLockVia(t, h, fmt.Sprintf("deploy-%d", i), opts, 60*time.Second)
			}
			if tc.add {
				p := depFreePair(t)
				code, out, errOut := depRun(t, "deploy", "--add", "127.0.0.1:"+strconv.Itoa(p), "--out", dir)
				if code != 0 {
					t.Fatal(errOut)
				}
				if !strings.Contains(out, "ticketing node add --id n4") {
					t.Fatalf("no node add command:\n%s", out)
				}
				n4 := depStartEnv(t, bin, filepath.Join(dir, "n4.env"))
				nodes = append(nodes, n4)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				c, err := client.Dial(ctx, hs, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				var res map[string]any
				args := map[string]any{"id": "n4", "peer_addr": hp("127.0.0.1", p+1), "client_addr": hp("127.0.0.1", p), "voter": true}
				var aerr error
				for ctx.Err() == nil { // n4 may still be starting
					if aerr = c.Admin(ctx, "add-node", args, &res); aerr == nil {
						break
					}
					time.Sleep(300 * time.Millisecond)
				}
				if aerr != nil {
					t.Fatalf("add-node: %v", aerr)
				}
				depLockVia(t, hp("127.0.0.1", p), "deploy-added", opts, 60*time.Second)
			}
			for _, n := range nodes {
				n.stop(t)
			}
		})
	}
}

// TestServeSdNotify runs serve under a fake service manager: READY=1 once
// serving, WATCHDOG=1 at half WATCHDOG_USEC, STOPPING=1 on SIGTERM.
func TestServeSdNotify(t *testing.T) {
	bin := ticketingBin(t)
	sockDir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "notify")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := pc.ReadFromUnix(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=400000"}
	var log syncBuf
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	next := func(want string) string {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.Contains(m, want) {
					return m
				}
			case <-timeout:
				t.Fatalf("no %s within 20s; log:\n%s", want, log.String())
			}
		}
	}
	ready := next("READY=1")
	if !strings.Contains(ready, "MAINPID="+strconv.Itoa(cmd.Process.Pid)) || !strings.Contains(ready, "STATUS=serving on 127.0.0.1:") {
		t.Errorf("READY message %q", ready)
	}
	start := time.Now()
	next("WATCHDOG=1")
	next("WATCHDOG=1")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("two watchdog pings took %v; want about 400ms", d)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	next("STOPPING=1")
	if err := <-done; err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, log.String())
	}
}

func TestSdWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "10000000")
	t.Setenv("WATCHDOG_PID", "")
	if got := sdWatchdogInterval(); got != 10*time.Second {
		t.Errorf("interval %v", got)
	}
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()+1))
	if got := sdWatchdogInterval(); got != 0 {
		t.Errorf("watchdog meant for another pid: %v", got)
	}
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	t.Setenv("WATCHDOG_USEC", "junk")
	if got := sdWatchdogInterval(); got != 0 {
		t.Errorf("junk: %v", got)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if sdNotify("READY=1") {
		t.Error("sdNotify without a socket")
	}
}

// TestOperationsDoc runs docs/operations.md's commands (extracted by
// scripts/operations-check.sh) against the binary under test.
func TestOperationsDoc(t *testing.T) {
	bin := ticketingBin(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	port := depFreeRange(t, 8)
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "operations-check.sh"))
	cmd.Dir = root
	cmd.Env = append(depCleanEnv(), "TICKETING_BIN="+bin, "PORT="+strconv.Itoa(port), "WORK="+t.TempDir())
	var out syncBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("operations-check.sh: %v\n%s", err, out.String())
		}
	case <-time.After(4 * time.Minute):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-done
		t.Fatalf("operations-check.sh timed out\n%s", out.String())
	}
	t.Logf("operations-check.sh:\n%s", depTail(out.String(), 15))
	if !strings.Contains(out.String(), "operations-check: OK") {
		t.Errorf("no OK line")
	}
}

// depCleanEnv is the environment without TICKETING_* settings.
func depCleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TICKETING_") {
			env = append(env, kv)
		}
	}
	return env
}

// depFreeRange finds n consecutive free ports on 127.0.0.1 below Linux's
// ephemeral range (32768-60999): the OS never hands out these ports to the
// `:0` listeners and outgoing connections of the tests running beside this
// one, so the range stays free between this check and the script binding it
// (a base next to a `:0` port, as before, raced with them).
func depFreeRange(t *testing.T, n int) int {
	t.Helper()
	const lo, hi = 20000, 32000
	for range 200 {
		base := lo + rand.IntN(hi-lo-n)
		ok := true
		var ls []net.Listener
		for p := base; p < base+n; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

var depMakeMu sync.Mutex

// TestMakeRelease builds the release with the Makefile and checks the
// artifacts: static ELF binaries for linux/amd64 and linux/arm64, built with
// -trimpath and CGO off, stamped, and SHA256SUMS that match.
func TestMakeRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("no sha256sum")
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	dist := t.TempDir()
	ver := "v0.0.0-releasetest." + strconv.Itoa(os.Getpid())
	depMakeMu.Lock()
	cmd := exec.Command("make", "-s", "release", "DIST="+dist, "VERSION="+ver, "DATE=2026-01-02T03:04:05Z", "COMMIT=0123456789ab")
	cmd.Dir = root
	cmd.Env = depCleanEnv()
	out, err := cmd.CombinedOutput()
	depMakeMu.Unlock()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	rel := filepath.Join(dist, "release")
	sums, err := os.ReadFile(filepath.Join(rel, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("SHA256SUMS line %q", l)
		}
		listed[strings.TrimPrefix(f[1], "*")] = f[0]
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		name := "ticketing-" + ver + "-linux-" + arch
		p := filepath.Join(rel, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if listed[name] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SHA256SUMS says %q", name, listed[name])
		}
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ef.Machine != machine {
			t.Errorf("%s: machine %v", name, ef.Machine)
		}
		for _, prog := range ef.Progs {
			if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
				t.Errorf("%s: not static (%v)", name, prog.Type)
			}
		}
		ef.Close()
		bi, err := buildinfo.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || settings["GOARCH"] != arch {
			t.Errorf("%s: build settings %v", name, settings)
		}
		// -trimpath keeps -ldflags out of the build info: look for the
		// stamped strings themselves (and run the native one below).
		for _, x := range []string{ver, "0123456789ab", "2026-01-02T03:04:05Z"} {
			if !bytes.Contains(b, []byte(x)) {
				t.Errorf("%s: not stamped with %s", name, x)
			}
		}
		if bytes.Contains(b, []byte(root+"/")) {
			t.Errorf("%s holds the build directory %s (not -trimpath)", name, root)
		}
		if arch == runtime.GOARCH && runtime.GOOS == "linux" {
			out, err := exec.Command(p, "version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ticketing "+ver+" (0123456789ab, 2026-01-02T03:04:05Z)") {
				t.Errorf("%s version: %v %q", name, err, out)
			}
		}
	}
	if len(listed) != 2 {
		t.Errorf("SHA256SUMS lists %d files", len(listed))
	}
}

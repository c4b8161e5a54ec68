package testkit

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ticketing/ticketing/client"
)

// Server is one `ticketing serve` process in its own process group.
type Server struct {
	Addr   string
	cmd    *exec.Cmd
	logs   *ring
	exited chan struct{}
	once   sync.Once
}

var reServing = regexp.MustCompile(`msg=serving addr=(\S+)`)

// StartServer runs bin serve with args and waits for its "serving" log line.
func StartServer(bin string, args ...string) (*Server, error) {
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.SysProcAttr = procAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	track(cmd.Process.Pid)
	s := &Server{cmd: cmd, logs: &ring{}, exited: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.logs.add(line)
			if m := reServing.FindStringSubmatch(line); m != nil && !sent {
				ready <- m[1]
				sent = true
			}
		}
		cmd.Wait()
		close(s.exited)
	}()
	select {
	case a := <-ready:
		s.Addr = a
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("ticketing serve %s exited during start-up:\n%s", strings.Join(args, " "), s.logs)
	case <-time.After(30 * time.Second):
		s.Stop()
		return nil, fmt.Errorf("ticketing serve did not start within 30s:\n%s", s.logs)
	}
}

// Stop kills the server's process group and reaps it.
func (s *Server) Stop() {
	s.once.Do(func() {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		untrack(s.cmd.Process.Pid)
	})
}

// TLSFiles are the PEM files of a generated PKI.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	OtherCA                                          string // a CA that signed nothing here
	ServerName                                       string
}

// Env is the deployment a scenario runs against in one mode.
type Env struct {
	Mode    string   // single, cluster, tls
	Bin     string   // the ticketing binary
	Dir     string   // scratch directory
	Addrs   []string // client addresses
	Token   string
	TLS     *TLSFiles // tls mode: the server requires client certificates (mutual TLS)
	servers []*Server
	admin   *client.Client
}

// TLSSpec is the driver's `tls` field for this environment (nil without TLS).
func (e *Env) TLSSpec() any {
	if e.TLS == nil {
		return nil
	}
	return map[string]any{"ca": e.TLS.CA, "cert": e.TLS.ClientCert, "key": e.TLS.ClientKey, "server_name": e.TLS.ServerName}
}

// Admin is an admin client of the environment (the runner's own observer).
func (e *Env) Admin() *client.Client { return e.admin }

// Close stops every server.
func (e *Env) Close() {
	if e.admin != nil {
		e.admin.Close()
	}
	for _, s := range e.servers {
		s.Stop()
	}
}

// Logs of the servers (for failure reports).
func (e *Env) Logs() string {
	var b strings.Builder
	for i, s := range e.servers {
		fmt.Fprintf(&b, "--- server %d (%s)\n%s\n", i, s.Addr, s.logs)
	}
	return b.String()
}

func randomToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// StartEnv starts the deployment of mode in dir.
func StartEnv(mode, bin, dir string) (*Env, error) {
	e := &Env{Mode: mode, Bin: bin, Dir: dir, Token: randomToken()}
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte(e.Token+"\n"), 0o600); err != nil {
		return nil, err
	}
	var err error
	switch mode {
	case "single":
		err = e.startSingle(bin, "--token-file", tf)
	case "tls":
		if e.TLS, err = GenerateTLS(filepath.Join(dir, "pki")); err != nil {
			return nil, err
		}
		err = e.startSingle(bin, "--token-file", tf, "--tls-cert", e.TLS.ServerCert, "--tls-key", e.TLS.ServerKey, "--tls-client-ca", e.TLS.CA)
	case "cluster":
		err = e.startCluster(bin, tf)
	default:
		err = fmt.Errorf("unknown mode %q (single, cluster, tls)", mode)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	if err := e.waitReady(); err != nil {
		err = fmt.Errorf("%s: %w\n%s", mode, err, e.Logs())
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) startSingle(bin string, args ...string) error {
	s, err := StartServer(bin, append([]string{"--listen", "127.0.0.1:0", "--log-level", "info"}, args...)...)
	if err != nil {
		return err
	}
	e.servers = append(e.servers, s)
	e.Addrs = []string{s.Addr}
	return nil
}

// peerPort names a port for a cluster node's peer listener (a variable so
// that a test can hand out a taken one).
var peerPort = freePort

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	a := ln.Addr().String()
	ln.Close()
	return a, nil
}

// startCluster starts three bootstrapping nodes. Their peer ports must be
// named before any node starts (each node's --peers lists all three), so
// they come from listeners opened on :0 and closed again; another process
// (or one node's own --listen :0) can take such a port before its node
// binds it. A start that fails with "address already in use" is therefore
// tried again with fresh ports, at most three times in all.
func (e *Env) startCluster(bin, tf string) error {
	var err error
	for range 3 {
		var srv []*Server
		srv, err = startClusterOnce(bin, tf)
		if err == nil {
			for _, s := range srv {
				e.servers = append(e.servers, s)
				e.Addrs = append(e.Addrs, s.Addr)
			}
			return nil
		}
		for _, s := range srv {
			s.Stop()
		}
		if !strings.Contains(err.Error(), "address already in use") {
			return err
		}
	}
	return err
}

// startClusterOnce starts the three nodes on fresh peer ports: all of them
// on success; on failure the error and the nodes that did start.
func startClusterOnce(bin, tf string) ([]*Server, error) {
	var peers, peerAddrs []string
	for i := 1; i <= 3; i++ {
		a, err := peerPort()
		if err != nil {
			return nil, err
		}
		peerAddrs = append(peerAddrs, a)
		peers = append(peers, fmt.Sprintf("n%d=%s", i, a))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, 3)
	srv := make([]*Server, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := StartServer(bin, "--node-id", fmt.Sprintf("n%d", i+1), "--listen", "127.0.0.1:0",
				"--peer-listen", peerAddrs[i], "--peer-advertise", peerAddrs[i], "--peers", strings.Join(peers, ","),
				"--bootstrap", "--token-file", tf, "--log-level", "info")
			mu.Lock()
			srv[i], errs[i] = s, err
			mu.Unlock()
		}()
	}
	wg.Wait()
	var started []*Server
	for i := range 3 {
		if srv[i] != nil {
			started = append(started, srv[i])
		}
	}
	for _, err := range errs {
		if err != nil {
			return started, err
		}
	}
	return started, nil
}

// waitReady connects the admin observer and waits until a probe lock can be
// taken and released (a cluster has elected a leader with verified clocks).
func (e *Env) waitReady() error {
	opts := []client.Option{client.WithAdminToken(e.Token), client.WithDialTimeout(10 * time.Second)}
	if e.TLS != nil {
		cfg, err := e.TLS.ClientConfig(true)
		if err != nil {
			return err
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, e.Addrs, opts...)
	if err != nil {
		return err
	}
	e.admin = cl
	var last error
	for ctx.Err() == nil {
		l, err := cl.Acquire(ctx, "testkit/ready", time.Second, time.Second)
		if err == nil {
			return l.Release(ctx)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready within 60s: %v", last)
}

// QueueDepth is the number of acquires queued on key (admin `locks`).
func (e *Env) QueueDepth(key string) (int, error) {
	var rep struct {
		Locks []struct {
			Key        string `json:"key"`
			QueueDepth int    `json:"queue_depth"`
		} `json:"locks"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.admin.Admin(ctx, "locks", map[string]any{"prefix": key, "limit": 100}, &rep); err != nil {
		return 0, err
	}
	for _, l := range rep.Locks {
		if l.Key == key {
			return l.QueueDepth, nil
		}
	}
	return 0, nil
}

// QueuedUnder is the number of acquires queued on keys with prefix (admin `locks`).
func (e *Env) QueuedUnder(prefix string) (int, error) {
	var rep struct {
		Locks []struct {
			QueueDepth int `json:"queue_depth"`
		} `json:"locks"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.admin.Admin(ctx, "locks", map[string]any{"prefix": prefix, "limit": 10000}, &rep); err != nil {
		return 0, err
	}
	n := 0
	for _, l := range rep.Locks {
		n += l.QueueDepth
	}
	return n, nil
}

// ClientConfig is a tls.Config trusting the CA (with the client
// certificate when withCert).
func (f *TLSFiles) ClientConfig(withCert bool) (*tls.Config, error) {
	pemb, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemb)
	cfg := &tls.Config{RootCAs: pool, ServerName: f.ServerName}
	if withCert {
		c, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// GenerateTLS writes a CA, a server certificate for 127.0.0.1/localhost, a
// client certificate, and an unrelated CA into dir.
func GenerateTLS(dir string) (*TLSFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f := &TLSFiles{ServerName: "localhost"}
	caKey, caCert, err := newCA(dir, "ca", &f.CA)
	if err != nil {
		return nil, err
	}
	if _, _, err := newCA(dir, "other-ca", &f.OtherCA); err != nil {
		return nil, err
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	if err := leaf(dir, "server", srv, caCert, caKey, &f.ServerCert, &f.ServerKey); err != nil {
		return nil, err
	}
	cli := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "testkit-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := leaf(dir, "client", cli, caCert, caKey, &f.ClientCert, &f.ClientKey); err != nil {
		return nil, err
	}
	return f, nil
}

// RSA-2048, not ECDSA: Mono (the C# client on these machines) cannot parse
// EC public keys in certificates; every other client takes either.
func newCA(dir, name string, path *string) (*rsa.PrivateKey, *x509.Certificate, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "testkit " + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	*path = filepath.Join(dir, name+".pem")
	return key, cert, writePEM(*path, "CERTIFICATE", der)
}

func leaf(dir, name string, tmpl, ca *x509.Certificate, caKey *rsa.PrivateKey, certPath, keyPath *string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	*certPath = filepath.Join(dir, name+".pem")
	*keyPath = filepath.Join(dir, name+"-key.pem")
	if err := writePEM(*certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(*keyPath, "PRIVATE KEY", kder)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

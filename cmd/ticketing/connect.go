package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// Connection settings shared by every client command (acquire, release,
// run, status, locks, health, ping). They are flags of each of those
// commands rather than persistent flags of the root, because `serve` has
// flags of the same names (--token, --tls-cert …) that mean the server's side.

const (
	defaultAddr    = "127.0.0.1:7470"
	defaultTimeout = 5 * time.Second

	// envLeaseDeadline is set by `ticketing run` in its child's environment,
	// together with TICKETING_KEY and TICKETING_FENCING_TOKEN.
	envLeaseDeadline = "TICKETING_LEASE_DEADLINE"
)

// ConnOptions are the connection settings after flags and environment are merged.
type ConnOptions struct {
	Addrs      []string
	Token      string // client token ("" = none)
	AdminToken string // admin token ("" = use Token)
	TLS        *tls.Config
	Timeout    time.Duration // connect budget
}

// lookupEnv is os.LookupEnv; tests replace it.
var lookupEnv = os.LookupEnv

// envSet reports whether the variable is set and not empty (as viper sees it).
func envSet(name string) bool {
	v, ok := lookupEnv(name)
	return ok && v != ""
}

// addConnFlags adds the connection flags to a client command.
func addConnFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("addr", defaultAddr, "server address(es) host:port, comma-separated (a cluster: any of its nodes)")
	f.String("token", "", "client token (prefer --token-file: a flag value shows in ps)")
	f.String("token-file", "", "file holding the client token")
	f.String("admin-token", "", "admin token for status, locks, health (default: the client token)")
	f.String("admin-token-file", "", "file holding the admin token")
	f.String("tls-ca", "", "CA certificate file (PEM) to verify the server; enables TLS")
	f.String("tls-cert", "", "client certificate file (PEM) for mutual TLS; enables TLS")
	f.String("tls-key", "", "client private key file (PEM) for --tls-cert")
	f.String("tls-server-name", "", "server name to verify (default: the address's host); enables TLS")
	durationFlag(cmd, "timeout", "", defaultTimeout.String(), "connect budget: give up (exit 7) when no server answers within it")
}

// addOutputFlag adds --output to a command whose output is data.
func addOutputFlag(cmd *cobra.Command) {
	cmd.Flags().StringP("output", "o", "text", "output format: text or json")
}

// getOutput reads and checks --output.
func getOutput(cmd *cobra.Command, v *viper.Viper) (string, error) {
	st := newSettings(cmd, v)
	o := st.oneOf("output", "text", "json")
	return o, st.err
}

// connOptions merges the connection flags, TICKETING_* variables and secret files.
func connOptions(cmd *cobra.Command, v *viper.Viper) (ConnOptions, error) {
	var o ConnOptions
	st := newSettings(cmd, v)
	o.Addrs = setting(st, "addr", parseAddrList)
	o.Timeout = st.duration("timeout")
	if st.err != nil {
		return o, st.err
	}
	if o.Timeout <= 0 {
		return o, usageError("--timeout must be positive")
	}
	o.Token = flagSecret(st, "token", "token-file")
	if st.err != nil {
		return o, st.err
	}
	if insideRun(cmd, v) {
		// Inside `ticketing run`, TICKETING_TOKEN is the enclosing lock's
		// fencing token, not a credential: take the credential only from
		// --token or --token-file / TICKETING_TOKEN_FILE.
		o.Token = ""
	}
	o.AdminToken = flagSecret(st, "admin-token", "admin-token-file")
	if st.err != nil {
		return o, st.err
	}
	var err error
	if o.TLS, err = tlsConfig(st); err != nil {
		return o, err
	}
	return o, nil
}

// flagSecret is settings.secret with flag > env > file across the pair: a
// --token on the command line wins over a TICKETING_TOKEN_FILE from the
// environment; --token and --token-file together are a usage error.
func flagSecret(st *settings, name, fileName string) string {
	fl := st.cmd.Flags()
	if fl.Changed(name) && fl.Changed(fileName) {
		if st.err == nil {
			st.err = usageError("--%s and --%s: give one", name, fileName)
		}
		return ""
	}
	if fl.Changed(name) {
		return st.str(name)
	}
	return st.secret(name, fileName)
}

// adminAuthHint explains an authentication failure of an admin command
// that had no admin token: the client token was offered for role admin.
func adminAuthHint(err error, o ConnOptions) error {
	if err == nil || o.AdminToken != "" || !errors.Is(err, client.ErrAuth) {
		return err
	}
	return fmt.Errorf("%w: this command needs the admin token (--admin-token-file or TICKETING_ADMIN_TOKEN_FILE); the client token was tried", err)
}

// diagnoseTLS replaces a connect failure with TLS on by the reason when it
// is a TLS one (a certificate that does not verify, a handshake the server
// refuses): it retries the first address's TLS handshake alone, briefly.
func diagnoseTLS(err error, o ConnOptions, addrs []string) error {
	if o.TLS == nil || len(addrs) == 0 || !errors.Is(err, client.ErrConnect) {
		return err
	}
	cfg := o.TLS.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addrs[0])
	}
	d := &net.Dialer{Timeout: min(o.Timeout, 2*time.Second)}
	conn, terr := tls.DialWithDialer(d, "tcp", addrs[0], cfg)
	if terr == nil {
		conn.Close()
		return err
	}
	var ne net.Error
	if errors.As(terr, &ne) && ne.Timeout() || errors.Is(terr, syscall.ECONNREFUSED) {
		return err // not a TLS problem
	}
	return fmt.Errorf("%w: %s: TLS: %v", client.ErrConnect, addrs[0], terr)
}

// parseAddrList parses --addr: host:port addresses, comma-separated, at
// least one. An address that can never work (not host:port, an empty host,
// a port that is not 1..65535) is refused.
func parseAddrList(v string) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			return nil, fmt.Errorf("%q: want host:port", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q: port %q: want 1..65535", a, port)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, errors.New("no server address")
	}
	return addrs, nil
}

// resolveAll fails with exit 7 at once when no address's host resolves
// (every one an unknown host), instead of retrying for the whole
// --timeout; IP addresses and a host that resolves pass.
func resolveAll(ctx context.Context, addrs []string) error {
	var firstErr error
	for _, a := range addrs {
		host, _, _ := net.SplitHostPort(a)
		if net.ParseIP(host) != nil {
			return nil
		}
		_, err := net.DefaultResolver.LookupHost(ctx, host)
		var de *net.DNSError
		if err == nil || !errors.As(err, &de) || !de.IsNotFound {
			return nil // resolved, or not known to be unknown: let the dial decide
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("%w: %s: unknown host %q", client.ErrConnect, a, host)
		}
	}
	return firstErr
}

// insideRun reports whether the token came from TICKETING_TOKEN set by an
// enclosing `ticketing run` to the fencing token (the transition of
// childEnv: then TICKETING_TOKEN equals TICKETING_FENCING_TOKEN).
func insideRun(cmd *cobra.Command, v *viper.Viper) bool {
	if cmd.Flags().Changed("token") || v.GetString("token-file") != "" {
		return false
	}
	tok, ok := lookupEnv(envToken)
	fence, inRun := lookupEnv(envFencingToken)
	return ok && inRun && tok == fence
}

func tlsConfig(st *settings) (*tls.Config, error) {
	ca, cert, key, name := st.existingFile("tls-ca"), st.existingFile("tls-cert"), st.existingFile("tls-key"), st.str("tls-server-name")
	if st.err != nil {
		return nil, st.err
	}
	if ca == "" && cert == "" && key == "" && name == "" {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, usageError("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageError("--tls-ca %s: no PEM certificate found", ca)
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, usageError("--tls-cert and --tls-key go together")
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, usageError("--tls-cert/--tls-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}

// clientOptions are the client.Dial options for role client, or role admin
// (the admin token, defaulting to the client token as on the server).
func (o ConnOptions) clientOptions(asAdmin bool) []client.Option {
	opts := []client.Option{client.WithDialTimeout(o.Timeout)}
	if o.TLS != nil {
		opts = append(opts, client.WithTLS(o.TLS))
	}
	if asAdmin {
		tok := o.AdminToken
		if tok == "" {
			tok = o.Token
		}
		return append(opts, client.WithAdminToken(tok))
	}
	return append(opts, client.WithToken(o.Token))
}

// ---------------------------------------------------------------------------
// What the commands need from a connection, as interfaces so that tests
// substitute fakes (the cli/cli factory's HttpClient, in our terms).

// lockClient is what acquire, release and run use.
type lockClient interface {
	Acquire(ctx context.Context, key string, lease, wait time.Duration) (heldLock, error)
	Release(ctx context.Context, key string, token uint64) error
	// Drain waits for withdrawn acquires and background releases (client.Client.Drain).
	Drain(ctx context.Context) error
	Close() error
}

// setLocker is what acquire, release and run use for key sets (protocol.md
// §12.2); a lockClient without it cannot take sets.
type setLocker interface {
	AcquireSet(ctx context.Context, keys []string, lease, wait time.Duration) (heldLock, error)
	ReleaseSet(ctx context.Context, keys []string, token uint64) error
}

// heldLock is a granted lock (*client.Lock).
type heldLock interface {
	Key() string
	Token() uint64
	Deadline() time.Time
	Release(ctx context.Context) error
}

// adminClient is what status, locks and ping use.
type adminClient interface {
	Status(ctx context.Context) (wire.StatusReply, error)
	Locks(ctx context.Context, prefix string, limit int) (wire.LocksReply, error)
	Ping(ctx context.Context) (admin.PingResult, error)
	Close() error
}

// lockDialer returns the real connector for lock commands.
func lockDialer(o ConnOptions) func(context.Context) (lockClient, error) {
	return func(ctx context.Context) (lockClient, error) {
		if err := resolveAll(ctx, o.Addrs); err != nil {
			return nil, err
		}
		c, err := client.Dial(ctx, o.Addrs, o.clientOptions(false)...)
		if err != nil {
			return nil, diagnoseTLS(err, o, o.Addrs)
		}
		return realLockClient{c}, nil
	}
}

// adminDialer returns the real connector for admin commands: addrs is the
// whole --addr list (status, locks) or one address (ping).
func adminDialer(o ConnOptions) func(context.Context, []string) (adminClient, error) {
	return func(ctx context.Context, addrs []string) (adminClient, error) {
		if err := resolveAll(ctx, addrs); err != nil {
			return nil, err
		}
		c, err := client.Dial(ctx, addrs, o.clientOptions(true)...)
		if err != nil {
			return nil, adminAuthHint(diagnoseTLS(err, o, addrs), o)
		}
		return realAdminClient{c}, nil
	}
}

type realLockClient struct{ *client.Client }

func (c realLockClient) AcquireSet(ctx context.Context, keys []string, lease, wait time.Duration) (heldLock, error) {
	l, err := c.Client.AcquireSet(ctx, keys, lease, wait)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (c realLockClient) Acquire(ctx context.Context, key string, lease, wait time.Duration) (heldLock, error) {
	l, err := c.Client.Acquire(ctx, key, lease, wait)
	if err != nil {
		return nil, err
	}
	return l, nil
}

type realAdminClient struct{ c *client.Client }

func (a realAdminClient) Status(ctx context.Context) (wire.StatusReply, error) {
	return admin.Status(ctx, a.c)
}

func (a realAdminClient) Locks(ctx context.Context, prefix string, limit int) (wire.LocksReply, error) {
	return admin.Locks(ctx, a.c, prefix, limit)
}

func (a realAdminClient) Ping(ctx context.Context) (admin.PingResult, error) {
	return admin.Ping(ctx, a.c)
}

func (a realAdminClient) Close() error { return a.c.Close() }

// withTimeout bounds an admin operation by the connect budget (a server
// that accepts but never answers counts as unreachable).
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, d)
}

package server_test

// protocol.md §1: TLS 1.2+, mutual TLS, certificate reload, expiry.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
)

type testCert struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// newCert makes a certificate for cn valid notBefore..notAfter, signed by ca
// (self-signed when ca is nil). isCA makes a CA; client makes a client cert.
func newCert(tb testing.TB, cn string, ca *testCert, isCA, client bool, notBefore, notAfter time.Time) *testCert {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	switch {
	case isCA:
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	case client:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	return &testCert{
		cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}
}

func (c *testCert) tlsCert() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.cert.Raw}, PrivateKey: c.key, Leaf: c.cert}
}

// pki is a CA with a server certificate, written to files.
type pki struct {
	ca                 *testCert
	certFile, keyFile  string
	caFile             string
	pool               *x509.CertPool
	dir                string
	notBefore, notLate time.Time
}

func newPKI(tb testing.TB) *pki {
	tb.Helper()
	now := time.Now()
	p := &pki{dir: tb.TempDir(), notBefore: now.Add(-time.Hour), notLate: now.Add(365 * 24 * time.Hour)}
	p.ca = newCert(tb, "test CA", nil, true, false, p.notBefore, p.notLate)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca.cert)
	p.certFile = filepath.Join(p.dir, "server.pem")
	p.keyFile = filepath.Join(p.dir, "server.key")
	p.caFile = filepath.Join(p.dir, "ca.pem")
	writeFile(tb, p.caFile, p.ca.certPEM)
	p.writeServer(tb, "one", p.notLate)
	return p
}

// writeServer writes a server certificate named cn to the server files.
func (p *pki) writeServer(tb testing.TB, cn string, notAfter time.Time) {
	tb.Helper()
	p.writeServerFrom(tb, cn, p.notBefore, notAfter)
}

// writeServerFrom is writeServer with a chosen start of validity.
func (p *pki) writeServerFrom(tb testing.TB, cn string, notBefore, notAfter time.Time) {
	tb.Helper()
	sc := newCert(tb, cn, p.ca, false, false, notBefore, notAfter)
	writeFile(tb, p.certFile, sc.certPEM)
	writeFile(tb, p.keyFile, sc.keyPEM)
}

func (p *pki) client(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1", Certificates: certs}
}

// tlsDial connects and handshakes; it returns the error of either step.
func tlsDial(addr string, cfg *tls.Config) (*st.Conn, error) {
	c, err := st.DialRawErr(addr, cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Handshake(st.Options{Role: wire.RoleAdmin}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func peerCN(c *st.Conn) string {
	return c.NC.(*tls.Conn).ConnectionState().PeerCertificates[0].Subject.CommonName
}

func TestTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	s := startServer(t, func(c *server.Config) {
		c.TLSCertFile, c.TLSKeyFile = p.certFile, p.keyFile
		c.HandshakeTimeout = 500 * time.Millisecond
	})
	t.Run("tls client", func(t *testing.T) {
		c, err := tlsDial(s.Addr(), p.client())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs := c.NC.(*tls.Conn).ConnectionState()
		if cs.Version < tls.VersionTLS12 {
			t.Fatalf("TLS version %x", cs.Version)
		}
		c.TB = t
		tok := c.MustAcquire("tls", 1000)
		is(t, c.Release("tls", tok), wire.StatusReleased)
		// Requests right behind AUTH also work over TLS.
		raw, err := st.DialRawErr(s.Addr(), p.client())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		raw.TB = t
		h := raw.ReadHello()
		a := st.NewAuth(wire.RoleAdmin, "", &h)
		raw.Write(wire.AppendPing(wire.AppendAuth(nil, &a), 5))
		if w := raw.ReadWelcome(); !w.Accepted() {
			t.Fatal(w.Code)
		}
		expect(t, raw.Read(), wire.StatusPong, 0, 5)
	})
	t.Run("below TLS 1.2 refused", func(t *testing.T) {
		cfg := p.client()
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
		if c, err := tlsDial(s.Addr(), cfg); err == nil {
			c.Close()
			t.Fatal("a TLS 1.1 client was accepted")
		}
	})
	t.Run("plaintext client", func(t *testing.T) {
		c := st.DialRaw(t, s.Addr(), nil)
		a := wire.Auth{Role: wire.RoleAdmin}
		c.Write(append(wire.AppendAuth(nil, &a), wire.AppendPing(nil, 1)...))
		got, err := c.ReadAll()
		if err != nil {
			t.Fatalf("the server did not close a plaintext connection: %v", err)
		}
		if bytes.Contains(got, []byte("TKTS")) || bytes.Contains(got, []byte{'P', 0}) {
			t.Fatalf("a plaintext client got protocol bytes: % x", got)
		}
	})
	t.Run("plaintext client waiting for HELLO", func(t *testing.T) {
		// protocol.md §12.4: after 1 s without a byte, the TLS listener
		// writes the plaintext REJECT TLS_REQUIRED (reject_tls_required.hex)
		// and closes
		c := st.DialRaw(t, s.Addr(), nil)
		got, err := c.ReadAll()
		if err != nil || !bytes.Equal(got, wire.AppendReject(nil, wire.CodeTLSRequired)) {
			t.Fatalf("got % x, %v; want REJECT TLS_REQUIRED, then a close", got, err)
		}
	})
	t.Run("stalled TLS handshake", func(t *testing.T) {
		c := st.DialRaw(t, s.Addr(), nil)
		c.Write([]byte{0x16, 0x03, 0x01, 0x00}) // a record header, then nothing
		if got, err := c.ReadAll(); err != nil {
			t.Fatalf("not closed after the handshake timeout: % x %v", got, err)
		}
	})
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	s := startServer(t, func(c *server.Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = p.certFile, p.keyFile, p.caFile
	})
	now := time.Now()
	good := newCert(t, "client", p.ca, false, true, now.Add(-time.Hour), now.Add(time.Hour))
	otherCA := newCert(t, "other CA", nil, true, false, now.Add(-time.Hour), now.Add(time.Hour))
	stranger := newCert(t, "stranger", otherCA, false, true, now.Add(-time.Hour), now.Add(time.Hour))
	selfSigned := newCert(t, "self", nil, false, true, now.Add(-time.Hour), now.Add(time.Hour))

	c, err := tlsDial(s.Addr(), p.client(good.tlsCert()))
	if err != nil {
		t.Fatalf("a client with a certificate from the CA: %v", err)
	}
	c.TB = t
	c.Ping()
	c.Close()
	for name, cfg := range map[string]*tls.Config{
		"no client certificate":     p.client(),
		"certificate of another CA": p.client(stranger.tlsCert()),
		"self-signed client":        p.client(selfSigned.tlsCert()),
	} {
		if c, err := tlsDial(s.Addr(), cfg); err == nil {
			c.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestTLSCertificateExpiry(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.TLSCertFile, cfg.TLSKeyFile = p.certFile, p.keyFile

	p.writeServer(t, "expired", time.Now().Add(-time.Minute))
	if s, err := server.New(cfg); err == nil || !errors.Is(err, server.ErrConfig) {
		_ = s
		t.Fatalf("an expired certificate: New returned %v, want a config error", err)
	}
	// Not valid yet (issue #22 item 6): refused like an expired one, for
	// the client listener and (the same certificate) the peer listener.
	p.writeServerFrom(t, "future", time.Now().Add(time.Hour), time.Now().Add(48*time.Hour))
	if _, err := server.New(cfg); err == nil || !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "not valid before") {
		t.Fatalf("a not yet valid certificate: New returned %v, want a config error", err)
	}
	// Expired by the server's clock.
	p.writeServer(t, "valid today", time.Now().Add(48*time.Hour))
	late := cfg
	late.Now = fixedClock(time.Now().Add(72 * time.Hour))
	if _, err := server.New(late); err == nil {
		t.Fatal("a certificate expired by the server clock was accepted")
	}
	// About to expire: starts, warns in the log and exports the expiry.
	var logs lockedBuffer
	soon := cfg
	soon.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	soon.MetricsListen = "127.0.0.1:0"
	s, err := server.Start(context.Background(), soon)
	if err != nil {
		t.Fatalf("a certificate valid for 2 days: %v", err)
	}
	defer s.Close()
	if !strings.Contains(logs.String(), "expire") {
		t.Fatalf("no warning about the expiring certificate in the log: %q", logs.String())
	}
	body := scrape(t, s.MetricsAddr())
	if !strings.Contains(body, "ticketing_tls_cert_expiry_seconds") {
		t.Fatal("no ticketing_tls_cert_expiry_seconds metric")
	}
}

// ReloadTLS swaps the certificate for new connections without dropping
// existing ones, and keeps the old one when the new files are bad.
func TestReloadTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	s := startServer(t, func(c *server.Config) { c.TLSCertFile, c.TLSKeyFile = p.certFile, p.keyFile })
	c1, err := tlsDial(s.Addr(), p.client())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c1.TB = t
	if cn := peerCN(c1); cn != "one" {
		t.Fatalf("CN %q", cn)
	}
	tok := c1.MustAcquire("reload", 600000)

	p.writeServer(t, "two", p.notLate)
	if err := s.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	c2, err := tlsDial(s.Addr(), p.client())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.TB = t
	if cn := peerCN(c2); cn != "two" {
		t.Fatalf("after reload CN %q, want two", cn)
	}
	c1.Ping() // the old connection is still there
	is(t, c1.Release("reload", tok), wire.StatusReleased)

	p.writeServer(t, "expired", time.Now().Add(-time.Minute))
	if err := s.ReloadTLS(); err == nil {
		t.Fatal("reloading an expired certificate succeeded")
	}
	p.writeServerFrom(t, "future", time.Now().Add(time.Hour), p.notLate)
	if err := s.ReloadTLS(); err == nil || !strings.Contains(err.Error(), "not valid before") {
		t.Fatalf("reloading a not yet valid certificate: %v, want refused", err)
	}
	writeFile(t, p.keyFile, []byte("garbage"))
	if err := s.ReloadTLS(); err == nil {
		t.Fatal("reloading a bad key succeeded")
	}
	c3, err := tlsDial(s.Addr(), p.client())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if cn := peerCN(c3); cn != "two" {
		t.Fatalf("after failed reloads CN %q, want two (kept)", cn)
	}
	c1.Ping()
	c2.Ping()

	// Without TLS, ReloadTLS does nothing.
	if err := startServer(t, nil).ReloadTLS(); err != nil {
		t.Fatal(err)
	}
}

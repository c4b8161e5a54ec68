package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// selfSigned writes a self-signed certificate for 127.0.0.1/localhost.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ticketing-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestRealTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	srv := startServer(t, func(c *server.Config) {
		c.TLSCertFile, c.TLSKeyFile = certFile, keyFile
		c.ClientToken = "tls-token"
	})
	cl := dial(t, []string{srv.Addr()}, WithTLS(&tls.Config{RootCAs: pool}), WithToken("tls-token"))
	l, err := cl.Acquire(context.Background(), "tls/k", time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Plaintext to a TLS server: the server's REJECT TLS_REQUIRED (protocol.md
	// §12.4) says so, long before the dial timeout.
	start := time.Now()
	if _, err := Dial(context.Background(), []string{srv.Addr()}, WithToken("tls-token"), WithDialTimeout(20*time.Second)); !errors.Is(err, ErrTLS) ||
		!strings.Contains(err.Error(), "the server requires TLS") {
		t.Errorf("plaintext: %v, want ErrTLS (the server requires TLS)", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("plaintext: failed after %v, not at once", d)
	}
	// TLS to a plaintext server: "does not speak TLS".
	plain := startServer(t, nil)
	if _, err := Dial(context.Background(), []string{plain.Addr()}, WithTLS(&tls.Config{RootCAs: pool}), WithDialTimeout(20*time.Second)); !errors.Is(err, ErrTLS) ||
		!strings.Contains(err.Error(), "does not speak TLS") {
		t.Errorf("TLS to plaintext: %v, want ErrTLS (the server does not speak TLS)", err)
	}
	// An untrusted certificate: no connection either.
	if _, err := Dial(context.Background(), []string{srv.Addr()}, WithTLS(&tls.Config{}), WithToken("tls-token"), WithDialTimeout(10*time.Second)); !errors.Is(err, ErrConnect) || !errors.Is(err, ErrTLS) {
		t.Errorf("untrusted: %v, want ErrConnect and ErrTLS", err)
	}
}

// R5 (architecture.md "Client library behaviour"): a TLS mismatch is named
// and fails at once, not after the 10 s dial timeout: a plaintext client
// reading a TLS listener's REJECT TLS_REQUIRED (protocol.md §12.4), and a
// TLS client whose server speaks plaintext first.
func TestTLSMismatchNamedAtOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		greet []byte
		tls   bool
		want  string
	}{
		{"plaintext to TLS", wire.AppendReject(nil, wire.CodeTLSRequired), false, "requires TLS"},
		{"TLS to plaintext", wire.AppendHello(nil, &wire.Hello{}), true, "does not speak TLS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					nc, err := ln.Accept()
					if err != nil {
						return
					}
					nc.Write(c.greet)
					time.Sleep(100 * time.Millisecond)
					nc.Close()
				}
			}()
			opts := []Option{WithDialTimeout(10 * time.Second)}
			if c.tls {
				opts = append(opts, WithTLS(&tls.Config{InsecureSkipVerify: true}))
			}
			start := time.Now()
			_, err = Dial(context.Background(), []string{ln.Addr().String()}, opts...)
			if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Dial: %v, want ErrTLS saying %q", err, c.want)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Fatalf("failed after %v of a 10 s dial timeout: want at once", el)
			}
		})
	}
}

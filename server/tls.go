package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certWarnBefore is how long before expiry a certificate is warned about.
const certWarnBefore = 14 * 24 * time.Hour

// certStore holds the server certificate (and client CA) loaded from files,
// reloadable on SIGHUP without dropping connections.
type certStore struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger
	now                       func() time.Time

	mu       sync.RWMutex
	cert     *tls.Certificate
	notAfter time.Time
	pool     *x509.CertPool
}

func newCertStore(cfg Config, log *slog.Logger, now func() time.Time) (*certStore, error) {
	cs := &certStore{certFile: cfg.TLSCertFile, keyFile: cfg.TLSKeyFile, caFile: cfg.TLSClientCAFile, log: log, now: now}
	if err := cs.reload(); err != nil {
		return nil, err
	}
	return cs, nil
}

// reload reads the files; an expired or not yet valid certificate is
// refused, one expiring within 14 days is warned about.
func (cs *certStore) reload() error {
	cert, err := tls.LoadX509KeyPair(cs.certFile, cs.keyFile)
	if err != nil {
		return fmt.Errorf("%w: tls certificate: %v", ErrConfig, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("%w: tls certificate: %v", ErrConfig, err)
	}
	now := cs.now()
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("%w: tls certificate %s expired at %s", ErrConfig, cs.certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return fmt.Errorf("%w: tls certificate %s is not valid before %s", ErrConfig, cs.certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if leaf.NotAfter.Sub(now) < certWarnBefore {
		cs.log.Warn("tls certificate expires soon", "file", cs.certFile, "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	var pool *x509.CertPool
	if cs.caFile != "" {
		pem, err := os.ReadFile(cs.caFile)
		if err != nil {
			return fmt.Errorf("%w: tls client CA: %v", ErrConfig, err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: tls client CA %s: no certificate found", ErrConfig, cs.caFile)
		}
	}
	cert.Leaf = leaf
	cs.mu.Lock()
	cs.cert, cs.notAfter, cs.pool = &cert, leaf.NotAfter, pool
	cs.mu.Unlock()
	return nil
}

// expiry returns the current certificate's NotAfter.
func (cs *certStore) expiry() time.Time {
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	return cs.notAfter
}

func (cs *certStore) config() *tls.Config {
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cs.mu.RLock()
			defer cs.mu.RUnlock()
			return cs.cert, nil
		},
	}
	if cs.pool != nil {
		cfg.ClientCAs = cs.pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg
}

package deploy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLS material for `ticketing deploy --tls-dir`: a private CA, one
// certificate per node (server and client use: peers authenticate each
// other with it) for every name the node is reached by, and a client
// certificate for the CLI. Existing files are always kept: delete a file to
// have it issued again (all of tls/ for a new CA).

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 2 * 365 * 24 * time.Hour
)

type pemPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// Key types of --tls-key-type (issue #28 item 7: Mono's TLS, used by the C#
// client there, cannot use ECDSA certificates).
const (
	KeyECDSA = "ecdsa" // P-256, the default
	KeyRSA   = "rsa"   // 2048 bits
)

func newKey(typ string) (crypto.Signer, error) {
	if typ == KeyRSA {
		return rsa.GenerateKey(Rand, 2048)
	}
	return ecdsa.GenerateKey(elliptic.P256(), Rand)
}

// leafUsage is a leaf certificate's key usage: RSA keys may also encipher
// (TLS 1.2 RSA key exchange, which some stacks still pick).
func leafUsage(k crypto.Signer) x509.KeyUsage {
	if _, ok := k.(*rsa.PrivateKey); ok {
		return x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	return x509.KeyUsageDigitalSignature
}

// serial is a random 127-bit certificate serial number.
func serial() (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := Rand.Read(b); err != nil {
		return nil, err
	}
	b[0] &= 0x7f
	return new(big.Int).SetBytes(b), nil
}

func writePEM(path, typ string, der []byte, mode fs.FileMode) error {
	_, err := writeDeployFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode, mode == 0o600)
	return err
}

func writeKey(path string, k crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func loadPair(certPath, keyPath string) (*pemPair, error) {
	kp, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		return nil, err
	}
	s, ok := kp.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("key cannot sign")
	}
	return &pemPair{cert: c, key: s}, nil
}

// ensureTLS makes sure dir holds ca.crt/ca.key, ID.crt/ID.key per node and
// client.crt/client.key; it returns one summary line per file.
func ensureTLS(dir string, spec *Spec) ([]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var notes []string
	note := func(name, mode, state string) {
		notes = append(notes, fmt.Sprintf("%-22s %s  %-9s", "tls/"+name, mode, state))
	}
	caCrt, caKey := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	var ca *pemPair
	if exists(caCrt) || exists(caKey) {
		var err error
		if ca, err = loadPair(caCrt, caKey); err != nil {
			return nil, usageError("deploy: %s: the existing CA cannot sign certificates (%v); not replacing it (move %s away for a new CA and certificates)", dir, err, dir)
		}
		note("ca.crt", "0644", "kept")
		note("ca.key", "0600", "kept")
	} else {
		k, err := newKey(spec.TLSKeyType)
		if err != nil {
			return nil, err
		}
		sn, err := serial()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		tmpl := &x509.Certificate{
			SerialNumber:          sn,
			Subject:               pkix.Name{CommonName: "Ticketing CA", Organization: []string{"Ticketing deployment"}},
			NotBefore:             now.Add(-time.Hour),
			NotAfter:              now.Add(caValidity),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
			MaxPathLenZero:        true,
		}
		der, err := x509.CreateCertificate(Rand, tmpl, tmpl, k.Public(), k)
		if err != nil {
			return nil, err
		}
		c, _ := x509.ParseCertificate(der)
		if err := writeKey(caKey, k); err != nil {
			return nil, err
		}
		if err := writePEM(caCrt, "CERTIFICATE", der, 0o644); err != nil {
			return nil, err
		}
		ca = &pemPair{cert: c, key: k}
		note("ca.crt", "0644", "new")
		note("ca.key", "0600", "new")
	}
	issue := func(name string, dns []string, ips []net.IP, usage []x509.ExtKeyUsage) error {
		crt, key := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		if exists(crt) || exists(key) {
			if p, err := loadPair(crt, key); err == nil && p.cert.CheckSignatureFrom(ca.cert) == nil {
				note(name+".crt", "0644", "kept")
				note(name+".key", "0600", "kept")
				return nil
			}
			return usageError("deploy: %s and %s: not a pair signed by %s; not replacing them (delete both to have them issued again)", crt, key, filepath.Join(dir, "ca.crt"))
		}
		k, err := newKey(spec.TLSKeyType)
		if err != nil {
			return err
		}
		sn, err := serial()
		if err != nil {
			return err
		}
		now := time.Now()
		tmpl := &x509.Certificate{
			SerialNumber: sn,
			Subject:      pkix.Name{CommonName: name, Organization: []string{"Ticketing deployment"}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(leafValidity),
			KeyUsage:     leafUsage(k),
			ExtKeyUsage:  usage,
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(Rand, tmpl, ca.cert, k.Public(), ca.key)
		if err != nil {
			return err
		}
		if err := writeKey(key, k); err != nil {
			return err
		}
		if err := writePEM(crt, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		note(name+".crt", "0644", "new")
		note(name+".key", "0600", "new")
		return nil
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, n := range spec.live() {
		dns := []string{"localhost", n.ID}
		ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
		if ip := net.ParseIP(n.Host); ip != nil {
			if !ip.IsLoopback() {
				ips = append(ips, ip)
			}
		} else if n.Host != "localhost" {
			dns = append(dns, n.Host)
		}
		if err := issue(n.ID, dns, ips, both); err != nil {
			return nil, err
		}
	}
	if err := issue("client", nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}); err != nil {
		return nil, err
	}
	return notes, nil
}

// composeTLS gives each compose node a directory tls/ID holding only what
// it reads — ca.crt, ID.crt, ID.key, never ca.key — readable by the
// container's user (uid containerUID), which compose.yaml mounts (issue #28
// item 5: the whole 0700 tls/ of root-owned 0600 keys was mounted, so serve
// failed with "permission denied", and ca.key reached every container).
// The directory is 0755 and the certificates 0644; the key is 0600 owned by
// containerUID when deploy runs as root, else 0644 (with a note saying so:
// only a root deploy can give it to uid containerUID).
func composeTLS(dir string, spec *Spec) ([]string, error) {
	var notes []string
	for _, n := range spec.live() {
		nd := filepath.Join(dir, n.ID)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(nd, 0o755); err != nil {
			return nil, err
		}
		for _, f := range []struct {
			src, dst string
			key      bool
		}{{"ca.crt", "ca.crt", false}, {n.ID + ".crt", n.ID + ".crt", false}, {n.ID + ".key", n.ID + ".key", true}} {
			b, err := os.ReadFile(filepath.Join(dir, f.src))
			if err != nil {
				return nil, err
			}
			dst := filepath.Join(nd, f.dst)
			mode := fs.FileMode(0o644)
			if f.key {
				mode = 0o600
			}
			if err := os.WriteFile(dst+".tmp", b, mode); err != nil {
				return nil, err
			}
			if f.key {
				if err := os.Chown(dst+".tmp", containerUID, containerUID); err != nil {
					mode = 0o644 // not root: readable by the container's user only this way
				}
			}
			if err := os.Chmod(dst+".tmp", mode); err != nil {
				return nil, err
			}
			if err := os.Rename(dst+".tmp", dst); err != nil {
				return nil, err
			}
			if f.key && mode == 0o644 {
				notes = append(notes, fmt.Sprintf("%-22s 0644  for uid %d: deploy was not run as root, so the key is readable by every user of this host; as root: chown %d %s && chmod 0600 %s",
					"tls/"+n.ID+"/"+f.dst, containerUID, containerUID, dst, dst))
			}
		}
		notes = append(notes, fmt.Sprintf("%-22s 0755  %-9s ca.crt, %s.crt, %s.key for the %s container (mounted read-only)", "tls/"+n.ID+"/", "written", n.ID, n.ID, n.ID))
	}
	return notes, nil
}

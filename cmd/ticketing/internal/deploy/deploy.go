// Package deploy is `ticketing deploy`: the start-command generator. From a
// list of hosts it plans a deployment (node ids, ports, advertised
// addresses, the peer list, fresh tokens: plan.go), renders per node an env
// file plus, by format, a start script, a `docker run` line, a compose file
// or a systemd unit (one render_*.go per format), and writes the files
// (write.go; TLS material: tls.go). Secrets go only to files of mode 0600
// under the output directory; the printed plan shows them only with
// ShowSecrets. Existing secrets are reused, never replaced silently.
//
// The package knows no flags and no exit codes: errors a user can fix are
// *UsageError (the command maps them to exit 2).
package deploy

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Options are `ticketing deploy`'s flags (Run checks them).
type Options struct {
	Hosts       []string
	Format      string
	TLSDir      string
	TLSKeyType  string // ecdsa (default) or rsa
	Out         string
	ShowSecrets bool
	Force       bool
	ClientPort  int
	PeerPort    int
	DataDir     string
	InMemory    bool
	Image       string
	Binary      string
	Add         string
	Remove      string
	// By names the generator in the files (e.g. "ticketing v1.2.0").
	By string
}

// validate checks the options before anything is planned.
func (o *Options) validate() error {
	if o.Add != "" || o.Remove != "" {
		if o.Add != "" && o.Remove != "" {
			return usageError("--add and --remove: one change at a time")
		}
		if o.Out == "" {
			return usageError("--add and --remove need --out, the directory of the existing deployment")
		}
		if len(o.Hosts) > 0 {
			return usageError("--add/--remove and --nodes: give one (--add and --remove change the deployment in --out)")
		}
		if o.Force {
			return usageError("--add/--remove and --force: membership changes keep the cluster's tokens; rotate them separately")
		}
		return nil
	}
	switch n := len(o.Hosts); n {
	case 0:
		return usageError("--nodes: give the hosts of 1, 3 or 5 nodes")
	case 1, 3, 5:
	default:
		return usageError("--nodes: %d nodes; a deployment has 1, 3 or 5 (a cluster of %d tolerates no more failures than one of %d)", n, n, n-1)
	}
	if !contains(Formats, o.Format) {
		return usageError("--format %q: want one of %s", o.Format, strings.Join(Formats, ", "))
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"--client-port", o.ClientPort}, {"--peer-port", o.PeerPort}} {
		if p.v < 1 || p.v > 65535-10 {
			return usageError("%s %d: want 1..65525", p.name, p.v)
		}
	}
	switch o.TLSKeyType {
	case "", KeyECDSA, KeyRSA:
	default:
		return usageError("--tls-key-type %q: want ecdsa or rsa", o.TLSKeyType)
	}
	if o.InMemory && o.DataDir != "" {
		return usageError("--in-memory and --data-dir: give one")
	}
	if o.InMemory && len(o.Hosts) == 1 {
		// issue #28 item 3: the data dir holds a single node's lease
		// horizon, without which a restart forgets every held lock.
		return usageError("--in-memory: a single node without a data dir forgets every held lock when it restarts; deploy always gives it one (docs/operations.md \"Restarts and held locks\")")
	}
	for _, p := range []struct{ name, v string }{{"--tls-dir", o.TLSDir}, {"--data-dir", o.DataDir}, {"--binary", o.Binary}, {"--image", o.Image}} {
		if p.v != "" && !SafeValue.MatchString(p.v) {
			return usageError("%s %q: only letters, digits and ./:_@%%+- (it goes unquoted into env files)", p.name, p.v)
		}
	}
	for _, p := range []struct{ name, v string }{{"--tls-dir", o.TLSDir}, {"--data-dir", o.DataDir}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			return usageError("%s %q: want an absolute path (it is a path on the nodes)", p.name, p.v)
		}
	}
	return nil
}

// Run checks o, plans the deployment and prints the plan (o.Out == "") or
// writes the files under o.Out.
func Run(ios Streams, o *Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	if note := o.keepTLS(); note != "" {
		fmt.Fprintln(ios.ErrOut, note)
	}
	spec, err := buildSpec(o)
	if err != nil {
		return err
	}
	if o.Out == "" {
		return printPlan(ios, o, spec)
	}
	return writeDeployment(ios, o, spec)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Streams are where Run writes: the plan or summary on Out, notes on ErrOut.
type Streams struct {
	Out, ErrOut io.Writer
}

// UsageError is an error in the options or in the existing deployment that
// the user must fix (the command exits 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageError(format string, a ...any) error { return usageErr(fmt.Errorf(format, a...)) }

func usageErr(err error) error { return &UsageError{Err: err} }

// keepTLS keeps the TLS of the deployment in o.Out when a re-run (token
// rotation with --force, say) does not repeat --tls-dir: dropping TLS
// silently would leave nodes and clients without certificates. It returns
// the note to print ("" when nothing was kept).
func (o *Options) keepTLS() string {
	if o.Out == "" || o.TLSDir != "" || o.Add != "" || o.Remove != "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(o.Out, "deploy.json"))
	if err != nil {
		return ""
	}
	var prev Spec
	if json.Unmarshal(b, &prev) != nil || prev.TLSDir == "" {
		return ""
	}
	o.TLSDir = prev.TLSDir
	return fmt.Sprintf("deploy: %s/deploy.json has TLS (--tls-dir %s): kept (a deployment does not drop TLS on a re-run)", o.Out, prev.TLSDir)
}

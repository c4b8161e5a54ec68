package deploy

import (
	"strings"

	"github.com/spf13/pflag"
)

// Settings is where Options come from: cmd/ticketing's strict settings (the
// flag, else TICKETING_<NAME>; issue #28 item 1), or in this package's tests
// the parsed flags alone.
type Settings interface {
	Str(name string) string
	Bool(name string) bool
	Int(name string) int
	OneOf(name string, values ...string) string
}

// DefineFlags adds `ticketing deploy`'s flags to f; image is --image's default.
func DefineFlags(f *pflag.FlagSet, image string) {
	f.String("nodes", "", "hosts of the nodes, comma-separated: HOST or HOST:CLIENT_PORT (1, 3 or 5)")
	f.String("format", FormatEnv, "env, shell, docker, compose or systemd")
	f.String("tls-key-type", KeyECDSA, "key type of the generated TLS certificates: ecdsa or rsa (the C# client on Mono needs rsa)")
	f.String("tls-dir", "", "directory of the TLS files on each node (enables TLS; generated under --out/tls)")
	f.String("out", "", "write the files into this directory (default: print the plan, secrets redacted)")
	f.Bool("show-secrets", false, "also print the secrets (tokens) on stdout")
	f.Bool("force", false, "replace the tokens in --out with fresh ones (token rotation; TLS files are kept)")
	f.Int("client-port", 7470, "client port (nodes on the same host count up in steps of 2)")
	f.Int("peer-port", 7471, "peer port (nodes on the same host count up in steps of 2)")
	f.String("data-dir", "", "base of the nodes' data directories: durable raft state under DIR/ID (default /var/lib/ticketing; containers: a volume at /data)")
	f.Bool("in-memory", false, "no data directory: a restarted node rejoins under a new id (docs/operations.md)")
	f.String("image", image, "container image (docker, compose), as make image tags it")
	f.String("binary", "", "path of the ticketing binary on the nodes (default: ticketing on PATH; systemd: /usr/local/bin/ticketing)")
	f.String("add", "", "add one node on `HOST` to the deployment in --out (joins a running cluster)")
	f.String("remove", "", "take node `ID` out of the deployment in --out (after ticketing node remove)")
}

// OptionsFrom reads every setting DefineFlags defines; by names the generator.
func OptionsFrom(s Settings, by string) *Options {
	o := &Options{By: by}
	for _, h := range strings.Split(s.Str("nodes"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.Hosts = append(o.Hosts, h)
		}
	}
	o.Format = s.OneOf("format", Formats...)
	o.TLSDir = s.Str("tls-dir")
	o.TLSKeyType = s.OneOf("tls-key-type", KeyECDSA, KeyRSA)
	o.Out = s.Str("out")
	o.ShowSecrets = s.Bool("show-secrets")
	o.Force = s.Bool("force")
	o.ClientPort = s.Int("client-port")
	o.PeerPort = s.Int("peer-port")
	o.DataDir = s.Str("data-dir")
	o.InMemory = s.Bool("in-memory")
	o.Image = s.Str("image")
	o.Binary = s.Str("binary")
	o.Add = s.Str("add")
	o.Remove = s.Str("remove")
	return o
}

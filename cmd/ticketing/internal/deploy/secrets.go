package deploy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Rand is the CSPRNG the tokens come from (tests replace it).
var Rand io.Reader = rand.Reader

// deploySecrets are the three role tokens (protocol.md §1.2).
type deploySecrets struct {
	Client, Admin, Peer string
}

const redacted = "<redacted>"

func redactedSecrets() deploySecrets {
	return deploySecrets{Client: redacted, Admin: redacted, Peer: redacted}
}

// genSecrets draws fresh tokens: 32 bytes of the CSPRNG each, hex.
func genSecrets() (deploySecrets, error) {
	var s deploySecrets
	for _, p := range []*string{&s.Client, &s.Admin, &s.Peer} {
		b := make([]byte, 32)
		if _, err := io.ReadFull(Rand, b); err != nil {
			return s, fmt.Errorf("deploy: random: %w", err)
		}
		*p = hex.EncodeToString(b)
	}
	return s, nil
}

// readSecrets loads the tokens already in out/secrets ("" where missing).
func readSecrets(out string) (deploySecrets, []string, error) {
	var s deploySecrets
	var found []string
	for _, p := range []struct {
		name string
		v    *string
	}{{"client.token", &s.Client}, {"admin.token", &s.Admin}, {"peer.token", &s.Peer}} {
		b, err := os.ReadFile(filepath.Join(out, "secrets", p.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return s, nil, err
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return s, nil, fmt.Errorf("%s is empty", filepath.Join(out, "secrets", p.name))
		}
		if !SafeValue.MatchString(v) {
			return s, nil, fmt.Errorf("%s: the token has characters an env file cannot hold unquoted", filepath.Join(out, "secrets", p.name))
		}
		*p.v = v
		found = append(found, p.name)
	}
	return s, found, nil
}

// envSecretLines are the secret-bearing lines of an env file.
var envSecretLine = regexp.MustCompile(`(?m)^TICKETING_(TOKEN|ADMIN_TOKEN|PEER_TOKEN)=(.*)$`)

func secretLines(b []byte) map[string]string {
	m := map[string]string{}
	for _, x := range envSecretLine.FindAllSubmatch(b, -1) {
		m[string(x[1])] = string(x[2])
	}
	return m
}

//go:build unix

package main

// End-to-end tests of the shell defects of issue #12: each runs the real
// binary and fails without its fix.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ticketing/ticketing/server"
)

// TestE2ERunChildEnvNoAdminToken (#12 item 4): the command gets neither
// admin credential, keeps the client token it was given, and finds the
// fencing token under TICKETING_FENCING_TOKEN; a nested ticketing call
// authenticates with the inherited client token.
func TestE2ERunChildEnvNoAdminToken(t *testing.T) {
	e := newE2E(t, func(c *server.Config) { c.ClientToken, c.AdminToken = "cli-secret", "adm-secret" })
	af := filepath.Join(e.dir, "admin.token")
	if err := os.WriteFile(af, []byte("adm-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.env = append(e.env, "TICKETING_TOKEN=cli-secret", "TICKETING_ADMIN_TOKEN=adm-secret", "TICKETING_ADMIN_TOKEN_FILE="+af)
	p := e.expect(0, "run", "envk", "--", "sh", "-c", `
test -z "${TICKETING_ADMIN_TOKEN+x}" || { echo "admin token inherited" >&2; exit 11; }
test -z "${TICKETING_ADMIN_TOKEN_FILE+x}" || { echo "admin token file inherited" >&2; exit 12; }
test "$TICKETING_TOKEN" = cli-secret || { echo "client token replaced" >&2; exit 13; }
case "$TICKETING_FENCING_TOKEN" in ''|*[!0-9]*) echo "no fencing token" >&2; exit 14;; esac
t=$("$0" acquire nested -n) || exit 15
"$0" release nested "$t" || exit 16`, e.bin)
	if p.err.Len() != 0 {
		t.Errorf("stderr %q", p.err.String())
	}
}

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
)

// Key sets from the command line (protocol.md §12.2): acquire K1 K2 prints
// one token for both, locks shows the set as one holder, release K1 K2
// TOKEN frees both; a single release of one key of the set is refused.
func TestE2EKeySets(t *testing.T) {
	e := newE2E(t, nil)
	addr := strings.TrimPrefix(e.env[0], "TICKETING_ADDR=")
	tok := strings.TrimSpace(e.expect(0, "acquire", "acct/17", "acct/42", "--lease", "30s").out.String())
	lp := e.expect(0, "locks", "--prefix", "acct/")
	for _, k := range []string{"acct/17", "acct/42"} {
		found := false
		for _, l := range strings.Split(lp.out.String(), "\n") {
			if f := strings.Fields(l); len(f) >= 7 && f[0] == k && f[1] == tok && f[len(f)-1] == "acct/17,acct/42" {
				found = true
			}
		}
		if !found {
			t.Fatalf("locks does not show %s held by the set under %s:\n%s", k, tok, lp.out.String())
		}
	}
	e.expect(ExitNotHolder, "release", "acct/17", tok)
	e.expect(ExitTimeout, "acquire", "acct/42", "-n")
	e.expect(0, "release", "acct/42", "acct/17", tok)
	e.expect(0, "acquire", "acct/42", "-n")
	e.expect(ExitUsage, "acquire", "a", "a")
	// run takes a set too
	e.expect(0, "run", "job/a", "job/b", "--", "true")
	cl, err := client.Dial(context.Background(), []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if l, err := cl.TryAcquireSet(context.Background(), []string{"job/a", "job/b"}, time.Second); err != nil {
		t.Fatalf("the set after run: %v", err)
	} else {
		l.Release(context.Background())
	}
}

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ticketing/ticketing/client"
)

func TestNewCmdRelease(t *testing.T) {
	tests := []struct {
		name      string
		argv      []string
		wantToken uint64
		wantStdin bool
		wantCode  int
	}{
		{name: "token", argv: []string{"k", "1883260598695755776"}, wantToken: 1883260598695755776},
		{name: "stdin", argv: []string{"k", "-"}, wantStdin: true},
		{name: "flags", argv: []string{"k", "42", "--addr", "h:1", "--timeout", "2"}, wantToken: 42},
		{name: "not a number", argv: []string{"k", "abc"}, wantCode: ExitUsage},
		{name: "zero", argv: []string{"k", "0"}, wantCode: ExitUsage},
		{name: "overflow", argv: []string{"k", "18446744073709551616"}, wantCode: ExitUsage},
		{name: "missing token", argv: []string{"k"}, wantCode: ExitUsage},
		{name: "bad key", argv: []string{"", "1"}, wantCode: ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			var got *ReleaseOptions
			ios, _, _ := testIO("")
			err := execCmd(t, newCmdRelease(newFactory(ios), func(_ context.Context, _ *IO, o *ReleaseOptions) error { got = o; return nil }), tt.argv...)
			if tt.wantCode != 0 {
				if code := exitCodeForTest(err); code != tt.wantCode {
					t.Fatalf("err %v: code %d, want %d", err, code, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Key != "k" || got.Token != tt.wantToken || got.FromStdin != tt.wantStdin || got.Connect == nil {
				t.Errorf("got %+v", *got)
			}
		})
	}
}

func TestReleaseRun(t *testing.T) {
	for _, tt := range []struct {
		name      string
		token     uint64
		stdin     string
		err       error
		wantToken uint64
		code      int
	}{
		{name: "released", token: 7, wantToken: 7},
		{name: "stdin token", stdin: "  99\n", wantToken: 99},
		{name: "stdin acquire json", stdin: "{\n  \"key\": \"k\",\n  \"token\": \"1234\"\n}\n", wantToken: 1234},
		{name: "stdin json number", stdin: `{"token": 55}`, wantToken: 55},
		{name: "stdin empty", stdin: "", code: ExitUsage},
		{name: "stdin garbage", stdin: "secret-ish", code: ExitUsage},
		{name: "not holder", token: 7, err: &client.OpError{Op: "release", Key: "k", Err: client.ErrNotHolder}, wantToken: 7, code: ExitNotHolder},
		{name: "indeterminate", token: 7, err: &client.OpError{Op: "release", Key: "k", Err: fmt.Errorf("%w: not confirmed", client.ErrIndeterminate)}, wantToken: 7, code: ExitIndeterminate},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLocker{releaseErr: tt.err}
			ios, out, _ := testIO(tt.stdin)
			o := &ReleaseOptions{Conn: testConn(), Key: "k", Token: tt.token, FromStdin: tt.token == 0, Connect: f.connect}
			code, line := codeOf(runRelease(context.Background(), ios, o))
			if code != tt.code || out.Len() != 0 {
				t.Fatalf("code %d (%s), want %d; stdout %q", code, line, tt.code, out)
			}
			if tt.stdin == "secret-ish" && strings.Contains(line, "secret-ish") {
				t.Errorf("error line repeats the input: %s", line)
			}
			rel := f.releasedTokens()
			if tt.wantToken != 0 && (len(rel) != 1 || rel[0] != tt.wantToken) {
				t.Errorf("released %v, want [%d]", rel, tt.wantToken)
			}
		})
	}
}

// release takes exactly what acquire printed, in either output format
// (issue #28 item 9: with TICKETING_OUTPUT=json in the environment,
// `release KEY "$token"` exited 2 and the lock stayed held).
func TestReleaseTakesWhatAcquirePrinted(t *testing.T) {
	for _, output := range []string{"text", "json"} {
		t.Run(output, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("TICKETING_OUTPUT", output)
			fl := &fakeLocker{token: 1883260598695755776}
			ios, out, _ := testIO("")
			fac := newFactory(ios)
			fac.LockClient = func(ConnOptions) func(context.Context) (lockClient, error) { return fl.connect }
			acq := newCmdAcquire(fac, nil)
			if err := execCmd(t, acq, "jobs/a"); err != nil {
				t.Fatal(err)
			}
			printed := strings.TrimSuffix(out.String(), "\n") // as $(…) gives it
			rel := newCmdRelease(fac, nil)
			if err := execCmd(t, rel, "jobs/a", printed); err != nil {
				t.Fatalf("release jobs/a <acquire's %s output>: %v", output, err)
			}
			if got := fl.releasedTokens(); len(got) != 1 || got[0] != 1883260598695755776 {
				t.Fatalf("released %v", got)
			}
			// The JSON of another key is not this key's token.
			if output == "json" {
				err := execCmd(t, newCmdRelease(fac, nil), "jobs/b", printed)
				if code, line := codeOf(err); code != ExitUsage || !strings.Contains(line, "jobs/a") {
					t.Fatalf("release jobs/b <jobs/a's JSON>: exit %d %q, want 2", code, line)
				}
			}
		})
	}
}

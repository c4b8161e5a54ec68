package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
)

// ReleaseOptions is `ticketing release` after flags and environment are merged.
type ReleaseOptions struct {
	Conn      ConnOptions
	Key       string
	Keys      []string // a key set (protocol.md §12.2), nil for one key
	Token     uint64
	FromStdin bool // TOKEN was "-": read it from stdin

	Connect func(context.Context) (lockClient, error)
}

func newCmdRelease(fac *Factory, runF func(context.Context, *IO, *ReleaseOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runRelease
	}
	cmd := &cobra.Command{
		Use:   "release KEY [KEY...] TOKEN",
		Short: "Release a lock by its fencing token",
		Long: `Release the lock on KEY held under TOKEN. Any process that knows the token
may release it. Several KEYs release a key set (exactly the keys acquired
together, in any order). TOKEN is what acquire printed, in either output format (the
token, or its JSON); "-" reads it from stdin.

Exit 0 when released; 6 when TOKEN does not hold KEY (already released, or
the lease ended); 5 when the release could not be confirmed (the lock ends
with its lease at the latest). While no leader answers (a cluster without a
quorum) the release is retried for up to 5 s, whatever --timeout (the connect
budget) says, before exit 5.

` + exitCodesHelp,
		Example: `  ticketing release backups/db "$token"
  ticketing acquire k | ticketing release k -
  ticketing release acct/17 acct/42 "$token"`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := releaseOptions(fac, cmd, args)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	addConnFlags(cmd)
	return cmd
}

func releaseOptions(fac *Factory, cmd *cobra.Command, args []string) (*ReleaseOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	keys, tok := args[:len(args)-1], args[len(args)-1]
	opts := &ReleaseOptions{Key: keys[0]}
	if !wire.ValidKey([]byte(opts.Key)) {
		return nil, usageError("key %s: want 1..250 bytes of UTF-8 without control characters", admin.EscapeKey(opts.Key))
	}
	if len(keys) > 1 {
		if err := checkKeySet(keys); err != nil {
			return nil, err
		}
		opts.Keys, opts.Key = keys, strings.Join(keys, ",")
	}
	if tok == "-" {
		opts.FromStdin = true
	} else if opts.Token, err = tokenArg(tok, opts.Key, "TOKEN"); err != nil {
		return nil, err
	}
	if opts.Conn, err = fac.Conn(cmd, v); err != nil {
		return nil, err
	}
	opts.Connect = fac.LockClient(opts.Conn)
	return opts, nil
}

// parseToken parses a fencing token (a decimal u64 > 0). The error does not
// repeat the input.
func parseToken(s string) (uint64, error) {
	t, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || t == 0 {
		return 0, usageError("TOKEN: want the decimal fencing token printed by acquire")
	}
	return t, nil
}

// readToken reads a token from r: its first line, either the token or
// acquire's JSON output.
func readToken(r io.Reader) (uint64, error) {
	if r == nil {
		return 0, usageError("TOKEN -: no stdin")
	}
	b, err := io.ReadAll(io.LimitReader(bufio.NewReader(r), 64<<10))
	if err != nil {
		return 0, usageError("TOKEN -: reading stdin: %v", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, usageError("TOKEN -: stdin is empty")
	}
	if !strings.HasPrefix(s, "{") {
		if i := strings.IndexAny(s, "\r\n"); i >= 0 {
			s = s[:i]
		}
	}
	return tokenArg(s, "", "TOKEN -")
}

// tokenArg parses TOKEN as acquire printed it in either output format
// (issue #28 item 9: with TICKETING_OUTPUT=json in the environment,
// token=$(ticketing acquire k) holds the JSON): the decimal token, or
// acquire's JSON, whose key must then be key (when key is not "").
func tokenArg(s, key, what string) (uint64, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") {
		return parseToken(s)
	}
	var j struct {
		Key   *string         `json:"key"`
		Token json.RawMessage `json:"token"`
	}
	if json.Unmarshal([]byte(s), &j) != nil || len(j.Token) == 0 {
		return 0, usageError("%s: JSON without a token (want the decimal token or acquire's JSON)", what)
	}
	if key != "" && j.Key != nil && *j.Key != key {
		return 0, usageError("%s: acquire's JSON for key %s, not %s", what, admin.EscapeKey(*j.Key), admin.EscapeKey(key))
	}
	return parseToken(strings.Trim(string(j.Token), `"`))
}

func runRelease(ctx context.Context, ios *IO, opts *ReleaseOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	token := opts.Token
	if opts.FromStdin {
		var err error
		if token, err = readToken(ios.In); err != nil {
			return err
		}
	}
	cl, err := opts.Connect(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	if len(opts.Keys) > 1 {
		sl, ok := cl.(setLocker)
		if !ok {
			return client.ErrUnsupported
		}
		return sl.ReleaseSet(ctx, opts.Keys, token)
	}
	if err := cl.Release(ctx, opts.Key, token); err != nil {
		return err
	}
	return nil
}

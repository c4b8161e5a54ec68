package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// AcquireOptions is `ticketing acquire` after flags and environment are merged.
type AcquireOptions struct {
	Conn             ConnOptions
	Output           string
	Key              string   // the key, or a key set's keys joined by ","
	Keys             []string // the key set (protocol.md §12.2), or the one key
	Lease            time.Duration
	Wait             time.Duration // 0: try once (-n)
	ConflictExitCode int           // exit code when not acquired because the wait timed out
	ConflictSet      bool          // -E given: a conflict exits with it silently

	Connect func(context.Context) (lockClient, error)
	Signals signalSource
}

// acquireJSON is acquire's --output json. The token is a string: fencing
// tokens exceed 2^53, which JSON tools that use doubles would round.
type acquireJSON struct {
	Key      string   `json:"key"`
	Keys     []string `json:"keys,omitempty"` // a key set's keys
	Token    string   `json:"token"`
	LeaseMS  int64    `json:"lease_ms"`
	Deadline string   `json:"deadline"` // RFC 3339, the conservative local end of the lease
}

const lockFlagsHelp = `Durations take Go syntax (30s, 1m30s, 250ms) or plain seconds (2.5).`

func newCmdAcquire(fac *Factory, runF func(context.Context, *IO, *AcquireOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runAcquire
	}
	cmd := &cobra.Command{
		Use:   "acquire KEY [KEY...] [--lease D] [--wait D | -n]",
		Short: "Take a lock and print its fencing token",
		Long: `Take the lock on KEY and print its fencing token alone on stdout.

The lock outlives this process: it ends when ` + "`ticketing release KEY TOKEN`" + ` is
called (from any process) or when its lease runs out. Pass the token to
every resource the lock protects, which must reject tokens lower than the
highest it has seen.

Several KEYs (2 to 16) are one key set (protocol 1.1): all taken at once
under one token and one lease, and released together with
` + "`ticketing release KEY... TOKEN`" + `; sets never deadlock however they overlap.

Waits up to --wait for the lock (FIFO); -n tries once. Not acquired: exit 3
(timed out; -E changes it) or 4 (busy). A signal while waiting withdraws the
wait and exits 128+N.

` + lockFlagsHelp + "\n\n" + exitCodesHelp,
		Example: `  token=$(ticketing acquire backups/db --lease 10m --wait 30s) || exit
  token=$(ticketing acquire jobs/nightly -n -E 75) || { rc=$?; [ "$rc" -eq 75 ] && exit 0; exit "$rc"; }   # held: skip quietly
  ticketing acquire k -o json | jq -r .token
  token=$(ticketing acquire acct/17 acct/42 --lease 30s) || exit   # both accounts, one token`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := acquireOptions(fac, cmd, args)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	addLockFlags(cmd)
	addConnFlags(cmd)
	addOutputFlag(cmd)
	return cmd
}

// addLockFlags adds the flags acquire and run share.
func addLockFlags(cmd *cobra.Command) {
	durationFlag(cmd, "lease", "l", "30s", "lease: the lock ends this long after it is granted unless released")
	durationFlag(cmd, "wait", "w", "10s", "wait up to this long for the lock (the server's max_wait bounds it)")
	cmd.Flags().BoolP("nonblock", "n", false, "try once; do not wait (like --wait 0)")
	cmd.Flags().IntP("conflict-exit-code", "E", ExitTimeout, "exit code when the lock was not acquired because it was held (timed out)")
}

type lockArgs struct {
	Lease, Wait      time.Duration
	ConflictExitCode int
	ConflictSet      bool // -E given (flag or TICKETING_CONFLICT_EXIT_CODE)
}

func lockOptions(cmd *cobra.Command, v *viper.Viper, key string) (lockArgs, error) {
	var a lockArgs
	if !wire.ValidKey([]byte(key)) {
		return a, usageError("key %s: want 1..%d bytes of UTF-8 without control characters", shortKey(key), wire.MaxKeyLen)
	}
	st := newSettings(cmd, v)
	a.Lease = st.duration("lease")
	a.Wait = st.duration("wait")
	nonblock := st.bool("nonblock")
	a.ConflictExitCode = st.int("conflict-exit-code")
	if st.err != nil {
		return a, st.err
	}
	if a.Lease < time.Millisecond {
		return a, usageError("--lease must be at least 1ms")
	}
	if nonblock {
		if cmd.Flags().Changed("wait") && cmd.Flags().Changed("nonblock") {
			return a, usageError("--wait and --nonblock exclude each other")
		}
		a.Wait = 0
	}
	a.ConflictSet = st.source("conflict-exit-code") != "default"
	if a.ConflictExitCode < 0 || a.ConflictExitCode > 255 {
		return a, usageError("--conflict-exit-code %d: want 0..255", a.ConflictExitCode)
	}
	return a, nil
}

// shortKey is key escaped for a message, its first 40 bytes only when it
// is longer (with its length), so that an error line stays one short line.
func shortKey(key string) string {
	if len(key) <= 40 {
		return admin.EscapeKey(key)
	}
	return fmt.Sprintf("%s… (%d bytes)", admin.EscapeKey(strings.ToValidUTF8(key[:40], "")), len(key))
}

func acquireOptions(fac *Factory, cmd *cobra.Command, args []string) (*AcquireOptions, error) {
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	opts := &AcquireOptions{Key: strings.Join(args, ","), Keys: args, Signals: fac.Signals}
	la, err := lockOptions(cmd, v, args[0])
	if err != nil {
		return nil, err
	}
	if err := checkKeySet(args); err != nil {
		return nil, err
	}
	opts.Lease, opts.Wait, opts.ConflictExitCode, opts.ConflictSet = la.Lease, la.Wait, la.ConflictExitCode, la.ConflictSet
	if opts.Output, err = getOutput(cmd, v); err != nil {
		return nil, err
	}
	if opts.Conn, err = fac.Conn(cmd, v); err != nil {
		return nil, err
	}
	opts.Connect = fac.LockClient(opts.Conn)
	return opts, nil
}

// drainBudget bounds how long an interrupted command waits for its
// withdrawn acquire (and the release of a grant that won the race).
const drainBudget = 5 * time.Second

// acquireLock connects and acquires, withdrawing the wait when a signal
// arrives. It returns the client (to close) and the lock, or the signal
// that interrupted it, or the error. On error the client is closed.
func acquireLock(ctx context.Context, connect func(context.Context) (lockClient, error), signals signalSource,
	keys []string, lease, wait time.Duration) (lockClient, heldLock, error) {
	key := strings.Join(keys, ",")
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs, stopSigs := signals()
	w := watchSignals(sigs, cancel)
	cl, err := connect(ctx)
	var l heldLock
	if err == nil {
		if len(keys) == 1 {
			l, err = cl.Acquire(ctx, keys[0], lease, wait)
		} else if sl, ok := cl.(setLocker); ok {
			l, err = sl.AcquireSet(ctx, keys, lease, wait)
		} else {
			err = client.ErrUnsupported
		}
	}
	sig := w.stop()
	stopSigs()
	if sig == nil && err == nil {
		return cl, l, nil
	}
	if cl != nil {
		dctx, dcancel := context.WithTimeout(context.Background(), drainBudget)
		if err == nil {
			// The grant arrived with the signal: give it back.
			_ = l.Release(dctx)
		}
		_ = cl.Drain(dctx) // the cancel, or the release of a grant that won the race
		dcancel()
		cl.Close()
	}
	if sig != nil {
		return nil, nil, withExit(signalExit(sig), fmt.Errorf("%s while waiting for %s: not acquired (the wait was withdrawn)", signalName(sig), admin.EscapeKey(key)))
	}
	return nil, nil, err
}

// namedLimit names the server limit behind a range error the user can hit
// (BAD_LEASE, BAD_WAIT, BAD_KEY), with the serve flag that sets it and its
// default; other errors pass unchanged. The result keeps err's exit code.
func namedLimit(err error, lease, wait time.Duration) error {
	var pe *client.ProtocolError
	if !errors.As(err, &pe) {
		return err
	}
	def := server.DefaultConfig()
	switch pe.Code {
	case wire.CodeBadLease:
		return withExit(ExitUsage, fmt.Errorf("the server refused --lease %v: above its max lease (serve --max-lease, default %v)", lease, def.MaxLease))
	case wire.CodeBadWait:
		return withExit(ExitUsage, fmt.Errorf("the server refused --wait %v: above its max wait (serve --max-wait, default %v)", wait, def.MaxWait))
	case wire.CodeBadKey:
		return withExit(ExitUsage, fmt.Errorf("the server refused the key: keys are 1..%d bytes of UTF-8 without control characters", wire.MaxKeyLen))
	}
	return err
}

// notAcquired applies -E to an acquire that found the lock held: with -E
// the conflict exits with its code and says nothing (as flock(1) does);
// without, it says the key is held (exit 3).
func notAcquired(err error, key string, wait time.Duration, conflictExit int, conflictSet bool) error {
	if !errors.Is(err, client.ErrTimeout) {
		return err
	}
	if conflictSet {
		return withExit(conflictExit, nil)
	}
	if wait <= 0 {
		return withExit(conflictExit, fmt.Errorf("%s is held by another holder: not acquired (-n: tried once)", admin.EscapeKey(key)))
	}
	return withExit(conflictExit, fmt.Errorf("%s stayed held for the whole --wait %v: not acquired", admin.EscapeKey(key), wait))
}

func runAcquire(ctx context.Context, ios *IO, opts *AcquireOptions) error {
	if opts.Signals == nil {
		opts.Signals = osSignals
	}
	cl, l, err := acquireLock(ctx, opts.Connect, opts.Signals, opts.keys(), opts.Lease, opts.Wait)
	if err != nil {
		return notAcquired(namedLimit(err, opts.Lease, opts.Wait), opts.Key, opts.Wait, opts.ConflictExitCode, opts.ConflictSet)
	}
	defer cl.Close()
	if opts.Output == "json" {
		var keys []string
		if len(opts.Keys) > 1 {
			keys = opts.Keys
		}
		return writeJSON(ios, acquireJSON{
			Key:      l.Key(),
			Keys:     keys,
			Token:    strconv.FormatUint(l.Token(), 10),
			LeaseMS:  opts.Lease.Milliseconds(),
			Deadline: l.Deadline().UTC().Format(time.RFC3339Nano),
		})
	}
	_, err = fmt.Fprintln(ios.Out, l.Token())
	return err
}

func (o *AcquireOptions) keys() []string {
	if len(o.Keys) == 0 {
		return []string{o.Key}
	}
	return o.Keys
}

// checkKeySet checks the keys of acquire, run and release: one key, or a key
// set of 2 to 16 distinct keys (protocol.md §12.2).
func checkKeySet(keys []string) error {
	if len(keys) > wire.MaxSetKeys {
		return usageError("%d keys: a key set has at most %d", len(keys), wire.MaxSetKeys)
	}
	for i, k := range keys {
		if !wire.ValidKey([]byte(k)) {
			return usageError("key %s: want 1..%d bytes of UTF-8 without control characters", shortKey(k), wire.MaxKeyLen)
		}
		for _, o := range keys[:i] {
			if o == k {
				return usageError("key %s given twice: the keys of a set are distinct", shortKey(k))
			}
		}
	}
	return nil
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(ios *IO, v any) error {
	enc := json.NewEncoder(ios.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

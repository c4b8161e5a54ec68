//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
)

// Environment of run's child.
const (
	envKey          = "TICKETING_KEY"
	envFencingToken = "TICKETING_FENCING_TOKEN"
	// envToken is the client credential; run sets it to the fencing token
	// only when it is not set (transition, see childEnv).
	envToken          = "TICKETING_TOKEN"
	envAdminToken     = "TICKETING_ADMIN_TOKEN"
	envAdminTokenFile = "TICKETING_ADMIN_TOKEN_FILE"
)

// RunOptions is `ticketing run` after flags and environment are merged.
type RunOptions struct {
	Conn             ConnOptions
	Key              string   // the key, or a key set's keys joined by ","
	Keys             []string // the key set (protocol.md §12.2), or the one key
	Lease            time.Duration
	Wait             time.Duration
	ConflictExitCode int
	ConflictSet      bool          // -E given: a conflict exits with it silently
	KillGrace        time.Duration // SIGTERM → SIGKILL
	LeaseMargin      time.Duration // SIGTERM this long before the lease deadline
	Command          []string      // CMD ARGS…, run directly (no shell)
	Env              []string      // the child's base environment (os.Environ())

	Connect func(context.Context) (lockClient, error)
	Signals signalSource
}

func newCmdRun(fac *Factory, runF func(context.Context, *IO, *RunOptions) error) *cobra.Command {
	ios := fac.IO
	if runF == nil {
		runF = runRun
	}
	cmd := &cobra.Command{
		Use:   "run KEY [KEY...] [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Acquire the lock on KEY, run CMD directly (no shell) in its own process
group, release the lock when CMD exits, and exit with CMD's code (128+N when
a signal N killed it).

CMD's environment adds TICKETING_KEY, TICKETING_FENCING_TOKEN (pass it to
what the lock protects) and TICKETING_LEASE_DEADLINE (RFC 3339), and loses
TICKETING_ADMIN_TOKEN and TICKETING_ADMIN_TOKEN_FILE. A TICKETING_TOKEN
(the client token) is passed on, so ticketing commands inside CMD
authenticate; when none is set, TICKETING_TOKEN is the fencing token too
(deprecated: read TICKETING_FENCING_TOKEN), which ticketing commands inside
CMD do not take as a credential.

SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to CMD's process group.
If run itself is killed (even with SIGKILL), CMD's process group is killed
too: by the kernel (Linux) and by a guard process of run's. If CMD is
still running --lease-margin before the lease ends, its process group gets
SIGTERM, then SIGKILL after --kill-grace; the lock is released and run exits
9. The whole schedule fits inside the lease: the margin must be at least
--kill-grace + 500ms (a quarter of the lease when shorter) for reaping and
the release, else run refuses (exit 2). Defaults: --kill-grace 5s (a quarter
of a lease under 20s), margin --kill-grace + 1s (at most half the lease). Processes CMD leaves behind in its
group get the same treatment before the lock is released. A signal while
still waiting for the lock withdraws the wait and exits 128+N without
starting CMD.

` + lockFlagsHelp + "\n\n" + exitCodesHelp,
		Example: `  ticketing run backups/db --lease 1h --wait 0 -E 0 -- /usr/local/bin/backup.sh   # held: exit 0, backup.sh not run
  ticketing run reports --lease 5m -- sh -c 'generate --fence "$TICKETING_FENCING_TOKEN"'`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := runOptions(fac, cmd, args)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), ios, opts)
		},
	}
	addLockFlags(cmd)
	durationFlag(cmd, "kill-grace", "", "", "after SIGTERM, wait this long before SIGKILL (default 5s; a quarter of a lease under 20s)")
	durationFlag(cmd, "lease-margin", "", "", "send SIGTERM this long before the lease deadline (default: --kill-grace + 1s, at most half the lease; at least --kill-grace + 500ms)")
	addConnFlags(cmd)
	return cmd
}

func (o *RunOptions) keys() []string {
	if len(o.Keys) == 0 {
		return []string{o.Key}
	}
	return o.Keys
}

func runOptions(fac *Factory, cmd *cobra.Command, args []string) (*RunOptions, error) {
	dash := cmd.ArgsLenAtDash()
	if dash < 1 || len(args) <= dash {
		return nil, usageError("usage: ticketing run KEY [KEY...] [flags] -- CMD [ARGS...] (the -- is required)")
	}
	v, err := fac.Config(cmd)
	if err != nil {
		return nil, err
	}
	opts := &RunOptions{Key: strings.Join(args[:dash], ","), Keys: args[:dash], Command: args[dash:], Env: os.Environ(), Signals: fac.Signals}
	la, err := lockOptions(cmd, v, args[0])
	if err != nil {
		return nil, err
	}
	if err := checkKeySet(opts.Keys); err != nil {
		return nil, err
	}
	opts.Lease, opts.Wait, opts.ConflictExitCode, opts.ConflictSet = la.Lease, la.Wait, la.ConflictExitCode, la.ConflictSet
	if opts.KillGrace, opts.LeaseMargin, err = stopSchedule(cmd, v, opts.Lease,
		cmd.Flags().Changed("kill-grace") || envSet("TICKETING_KILL_GRACE"),
		cmd.Flags().Changed("lease-margin") || envSet("TICKETING_LEASE_MARGIN")); err != nil {
		return nil, err
	}
	if opts.Conn, err = fac.Conn(cmd, v); err != nil {
		return nil, err
	}
	opts.Connect = fac.LockClient(opts.Conn)
	return opts, nil
}

// defaultKillGrace is --kill-grace's default, for leases of 20 s and more
// (a shorter lease gets a quarter of it).
const defaultKillGrace = 5 * time.Second

// stopSlack is what the stop schedule leaves after SIGKILL for reaping the
// group and releasing the lock: 500 ms, a quarter of the lease when shorter.
func stopSlack(lease time.Duration) time.Duration { return min(500*time.Millisecond, lease/4) }

// stopSchedule reads --kill-grace and --lease-margin and checks that the
// whole stop schedule fits inside the lease, counted from the client's
// deadline: SIGTERM at deadline − margin, SIGKILL grace later, and the
// stopSlack for reap and release before the deadline. Defaults: grace 5 s
// (a quarter of a lease under 20 s), margin grace + 1 s (at most half the
// lease). A combination that cannot fit is a usage error naming the numbers.
func stopSchedule(cmd *cobra.Command, v *viper.Viper, lease time.Duration, graceSet, marginSet bool) (grace, margin time.Duration, err error) {
	grace = min(defaultKillGrace, lease/4)
	if graceSet {
		if grace, err = getDuration(cmd, v, "kill-grace"); err != nil {
			return 0, 0, err
		}
	}
	margin = min(grace+time.Second, lease/2)
	if marginSet {
		if margin, err = getDuration(cmd, v, "lease-margin"); err != nil {
			return 0, 0, err
		}
		if margin >= lease {
			return 0, 0, usageError("--lease-margin %v must be less than --lease %v", margin, lease)
		}
	}
	if slack := stopSlack(lease); margin < grace+slack {
		return 0, 0, usageError("--lease %v: the stop schedule does not fit: --lease-margin %v must be at least --kill-grace %v + %v (reap and release) before the lease ends",
			lease, margin, grace, slack)
	}
	return grace, margin, nil
}

// childEnv is base without the variables run sets and without the admin
// credentials (the command gets no more authority than a client), plus the
// lock's: TICKETING_KEY, TICKETING_FENCING_TOKEN, TICKETING_LEASE_DEADLINE.
// A TICKETING_TOKEN of base is the client credential and stays, so that a
// ticketing command inside CMD authenticates; only when base has none,
// TICKETING_TOKEN is also set to the fencing token (the documented
// transition for scripts written before TICKETING_FENCING_TOKEN).
func childEnv(base []string, l heldLock) []string {
	env := make([]string, 0, len(base)+4)
	credential := false
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case envKey, envFencingToken, envLeaseDeadline, envAdminToken, envAdminTokenFile:
			continue
		case envToken:
			if v == "" {
				continue
			}
			credential = true
		}
		env = append(env, kv)
	}
	fence := strconv.FormatUint(l.Token(), 10)
	if !credential {
		env = append(env, envToken+"="+fence)
	}
	return append(env,
		envKey+"="+l.Key(),
		envFencingToken+"="+fence,
		// Rounded down: the lease cannot end before it.
		envLeaseDeadline+"="+l.Deadline().UTC().Truncate(time.Second).Format(time.RFC3339),
	)
}

// releaseBudget bounds the final release (the client retries for 5 s).
const releaseBudget = 10 * time.Second

func runRun(ctx context.Context, ios *IO, opts *RunOptions) error {
	if opts.Signals == nil {
		opts.Signals = osSignals
	}
	// Watch signals from the start; acquireLock takes them while waiting,
	// the loop below forwards them once CMD runs.
	sigs, stopSigs := opts.Signals()
	defer stopSigs()
	cl, l, err := acquireLock(ctx, opts.Connect, func() (<-chan os.Signal, func()) { return sigs, func() {} },
		opts.keys(), opts.Lease, opts.Wait)
	if err != nil {
		return notAcquired(namedLimit(err, opts.Lease, opts.Wait), opts.Key, opts.Wait, opts.ConflictExitCode, opts.ConflictSet)
	}
	defer cl.Close()
	leaseLost := false
	release := func() {
		rctx, cancel := context.WithTimeout(context.Background(), releaseBudget)
		defer cancel()
		err := l.Release(rctx)
		if err != nil && !(leaseLost && errors.Is(err, client.ErrNotHolder)) {
			fmt.Fprintf(ios.ErrOut, "ticketing: warning: %s\n", oneLine(err))
		}
	}

	killAt := l.Deadline().Add(-opts.LeaseMargin)
	if !time.Now().Before(killAt) {
		leaseLost = true
		release()
		return withExit(ExitLeaseLost, fmt.Errorf("lease of %s ends within --lease-margin of its grant: %s not started", admin.EscapeKey(opts.Key), opts.Command[0]))
	}

	c := exec.Command(opts.Command[0], opts.Command[1:]...)
	c.Env = childEnv(opts.Env, l)
	c.Stdin, c.Stdout, c.Stderr = ios.In, ios.Out, ios.ErrOut
	c.WaitDelay = time.Second // stdio copies, when not files: do not wait on grandchildren
	tty := setProcAttr(c, ios.In)
	guard := startGuard(ios.ErrOut)
	if err := c.Start(); err != nil {
		guard.done()
		release()
		code := ExitError
		switch {
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
			code = 127
		case errors.Is(err, os.ErrPermission):
			code = 126
		}
		return withExit(code, fmt.Errorf("run %s: %w", opts.Command[0], err))
	}
	pgid := c.Process.Pid
	guard.watch(pgid)
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()

	leaseTimer := time.NewTimer(time.Until(killAt))
	defer leaseTimer.Stop()
	var graceC <-chan time.Time
	var waitErr error
loop:
	for {
		select {
		case s := <-sigs:
			if n, ok := s.(syscall.Signal); ok {
				_ = signalGroup(pgid, n)
			}
		case <-leaseTimer.C:
			select {
			case waitErr = <-waited: // CMD ended just in time
				break loop
			default:
			}
			leaseLost = true
			fmt.Fprintf(ios.ErrOut, "ticketing: lease of %s ends in %v: stopping %s (SIGTERM, SIGKILL after %v)\n",
				admin.EscapeKey(opts.Key), time.Until(l.Deadline()).Round(time.Millisecond), opts.Command[0], opts.KillGrace)
			_ = signalGroup(pgid, syscall.SIGTERM)
			graceC = time.After(opts.KillGrace)
		case <-graceC:
			_ = signalGroup(pgid, syscall.SIGKILL)
			graceC = nil
		case waitErr = <-waited:
			break loop
		}
	}
	tty.restore()
	// Nothing of CMD's may go on outside the lock: stop what it left in its
	// group, with SIGKILL no later than the lease-lost schedule would send it.
	stopGroup(pgid, max(0, min(opts.KillGrace, time.Until(killAt.Add(opts.KillGrace)))))
	guard.done()
	release()

	if leaseLost {
		return withExit(ExitLeaseLost, fmt.Errorf("lease of %s lost: %s stopped", admin.EscapeKey(opts.Key), opts.Command[0]))
	}
	return childExit(c.ProcessState, waitErr)
}

// childExit passes the child's exit status through: its code, or 128+N
// when signal N ended it.
func childExit(ps *os.ProcessState, waitErr error) error {
	if ps == nil {
		return waitErr
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return withExit(128+int(ws.Signal()), nil)
	}
	if code := ps.ExitCode(); code != 0 {
		return withExit(code, nil)
	}
	return nil
}

// signalGroup sends sig to the process group pgid.
func signalGroup(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }

// killAlive reports whether process group pgid still has a member
// (zombies included).
func killAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// stopGroup ends what is left of process group pgid: SIGTERM, then SIGKILL
// after grace. It returns at once when the group is empty.
func stopGroup(pgid int, grace time.Duration) {
	if !groupAlive(pgid) {
		return
	}
	_ = signalGroup(pgid, syscall.SIGTERM)
	if waitGroupGone(pgid, grace) {
		return
	}
	_ = signalGroup(pgid, syscall.SIGKILL)
	waitGroupGone(pgid, time.Second)
}

func waitGroupGone(pgid int, d time.Duration) bool {
	end := time.Now().Add(d)
	for groupAlive(pgid) {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

package main

import (
	"errors"
	"fmt"
	"io"
)

// Exit codes (stable; README "Exit codes" and `ticketing --help`).
const (
	ExitOK            = 0 // success
	ExitError         = 1 // unexpected error
	ExitUsage         = 2 // usage or configuration error
	ExitTimeout       = 3 // not acquired: timed out (overridable with -E)
	ExitBusy          = 4 // not acquired: busy
	ExitIndeterminate = 5 // outcome unknown: do not enter the critical section
	ExitNotHolder     = 6 // release: not the holder
	ExitConnect       = 7 // cannot connect
	ExitAuth          = 8 // authentication failed
	ExitLeaseLost     = 9 // run: lease lost, child stopped
)

const exitCodesHelp = `Exit codes:
  0  success
  1  unexpected error
  2  usage or configuration error
  3  not acquired: timed out (overridable with -E/--conflict-exit-code)
  4  not acquired: busy (a server limit, clock unhealthy, or no cluster leader or quorum)
  5  indeterminate: the outcome is unknown; do not enter the critical section
  6  release: not the holder
  7  cannot connect
  8  authentication failed
  9  run: lease lost, child stopped
  run passes the child's exit code through otherwise (128+N when killed by signal N).`

// exitError carries an exit code chosen by a command.
type exitError struct {
	code int
	err  error // nil: exit silently with code
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// withExit attaches an exit code to err.
func withExit(code int, err error) error { return &exitError{code: code, err: err} }

// usageError marks a usage or configuration error (exit 2).
func usageError(format string, a ...any) error {
	return withExit(ExitUsage, fmt.Errorf(format, a...))
}

// exitCode maps an error to the process exit code and prints one line on
// stderr (never a stack trace, never a token).
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	code := ExitError
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.err == nil {
			return code
		}
	} else if c, ok := clientExitCode(err); ok {
		code = c
	}
	fmt.Fprintf(stderr, "ticketing: %s\n", oneLine(err))
	return code
}

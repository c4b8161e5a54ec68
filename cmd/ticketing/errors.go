package main

import (
	"context"
	"errors"
	"strings"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/cmd/ticketing/internal/deploy"
)

// clientExitCode is the one mapping from client (and admin, deploy) errors to the
// documented exit codes. Order matters where an error matches two
// sentinels: an indeterminate outcome wins over everything (the caller must
// not assume either way), authentication over connection failures.
func clientExitCode(err error) (int, bool) {
	var pe *client.ProtocolError
	var ue *deploy.UsageError
	switch {
	case errors.As(err, &ue):
		return ExitUsage, true
	case errors.Is(err, client.ErrIndeterminate):
		return ExitIndeterminate, true
	case errors.Is(err, client.ErrAuth):
		return ExitAuth, true
	case errors.Is(err, client.ErrConnect):
		return ExitConnect, true
	case errors.Is(err, client.ErrTimeout):
		return ExitTimeout, true
	case errors.Is(err, client.ErrBusy), errors.Is(err, client.ErrNoLeader):
		return ExitBusy, true
	case errors.Is(err, client.ErrNotHolder):
		return ExitNotHolder, true
	case errors.Is(err, client.ErrInvalidArgument):
		return ExitUsage, true
	case errors.As(err, &pe):
		switch pe.Code {
		case wire.CodeBadKey, wire.CodeBadLease, wire.CodeBadWait:
			return ExitUsage, true // e.g. a lease above the server's max_lease
		case wire.CodeNotPermitted:
			return ExitAuth, true // the credentials' role may not do this
		}
		return ExitError, true
	case errors.Is(err, context.DeadlineExceeded):
		// An admin query bounded by --timeout got no answer.
		return ExitConnect, true
	}
	return 0, false
}

// oneLine is err's message on one line, without the package prefixes
// ("ticketing: ") that wrapped errors repeat.
func oneLine(err error) string {
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "ticketing: ", "")
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/ticketing/ticketing/client"
)

// dialNode is Dial for a one-shot query of a node (discovery): a node that
// refuses the connection (nothing listens at addr), or a host name that
// does not exist, fails at once instead of costing the whole dial timeout.
//
// client.Dial keeps retrying a refused address with backoff until its dial
// timeout (a server may be starting), which is right for a client but makes
// a stopped node cost an operator command the whole --timeout. So a plain
// TCP connection is tried alongside, and its refusal (or an unknown host)
// ends the dial; every other outcome (connected, timed out, unreachable
// network) leaves the answer to client.Dial, so dialNode never takes longer
// than Dial.
func dialNode(ctx context.Context, addr string, opts []client.Option) (*client.Client, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type dialed struct {
		c   *client.Client
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		c, err := Dial(ctx, addr, opts...)
		done <- dialed{c, err}
	}()
	refused := make(chan error, 1)
	go func() {
		if err := Refused(ctx, addr); err != nil {
			refused <- err
		}
	}()
	select {
	case r := <-done:
		return r.c, r.err
	case err := <-refused:
		cancel()
		if r := <-done; r.err == nil {
			return r.c, nil // it answered after all (it was starting)
		}
		return nil, &client.OpError{Op: "dial", Err: fmt.Errorf("%w: no connection to any server: %w", client.ErrConnect, err)}
	}
}

// Refused tries a plain TCP connection to addr and returns its error when
// nothing listens there (connection refused) or the host name does not
// exist: a node that cannot answer whatever the dial timeout. It returns
// nil for every other outcome (connected, timed out, unreachable network),
// where a node may yet answer. The connection, if made, is closed before
// any handshake (the server closes it silently).
func Refused(ctx context.Context, addr string) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return err
		}
		return nil
	}
	nc.Close()
	return nil
}

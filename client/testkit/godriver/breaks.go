package main

import (
	"net"
	"strings"
	"sync"
	"time"

	"github.com/ticketing/ticketing/client/testkit/fault"
	"github.com/ticketing/ticketing/client/wire"
)

// Deliberately broken behaviours, selected by TESTKIT_BREAK (comma-separated),
// used only by the testkit's own tests to prove each scenario catches a
// faulty client. Some are emulated in the driver, the others by a relay the
// driver puts between its client and each server address (plain TCP only):
//
//	resend-after-drop   an indeterminate acquire is sent again
//	ignore-moved        (relay) M answers reach the client as E: M is not followed
//	release-without-O   release answers ok without waiting for O
//	ignore-queued       deadline_in_ms ignores G's queued time
//	deadline-from-receive deadline_in_ms counts the lease from the answer
//	info-wrong-lang     info names another language
//	no-cancel           cancel does nothing
//	retry-busy          a B answer is retried within the wait
//	fast-reconnect      (relay) the server is re-dialled every 20 ms after a loss
//	single-conn         (relay) one connection per address only
//	token-float         tokens pass through a float64
//	with-lock-leak      with_lock does not release when the scope fails
//	with-lock-never-release with_lock never releases
//	report-first-token  every grant reports the first token seen
//	no-close            close does not close the client
//	auth-as-connect     an auth failure is reported as connect
//	no-validate         invalid arguments are reported as internal
//	wait0-as-wait       wait 0 becomes a 5 s wait
//	lease-x10           leases are ten times longer
//	wait-plus-3s        a failed acquire answers 3 s late
//	serialize           commands run one at a time
//	release-wrong-token release sends token+1
//	tls-insecure        the server certificate is not verified
//	flip-flags          (relay) requests carry a nonzero flags field
//	drop-releases       (relay) R requests are never sent
//	no-jitter           (relay) connection attempts to the addresses reach them all at once (a barrier)
//	no-answer-allowance an unanswered acquire waits an hour past its wait
//	no-wait             every acquire is sent with wait 0
//	tls-as-connect      a TLS failure is reported as connect
//	release-lease-twice release_lease always sends the release
//	exit-keeps-scopes   on stdin EOF the client closes with scopes still open
//	ending-at-deadline  lease_ending ignores the margin
//	try-raises          try_acquire reports not acquired as an error
//	ignore-min-remaining min_remaining_ms is not passed to the client
//	terse-errors        error messages are only the kind
//	no-label            connect ignores label
type breaks map[string]bool

func parseBreaks(s string) breaks {
	b := breaks{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			b[f] = true
		}
	}
	return b
}

func (b breaks) has(name string) bool { return b[name] }

type relay struct {
	p    *fault.Proxy
	stop chan struct{}
}

func (r *relay) Close() {
	close(r.stop)
	r.p.Close()
}

// wrapAddrs puts a relay in front of each address when a relay break is on.
func (d *driver) wrapAddrs(addrs []string) ([]string, error) {
	if !d.brk.has("ignore-moved") && !d.brk.has("single-conn") && !d.brk.has("fast-reconnect") &&
		!d.brk.has("flip-flags") && !d.brk.has("drop-releases") && !d.brk.has("no-jitter") {
		return addrs, nil
	}
	bar := &barrier{n: len(addrs), open: make(chan struct{})}
	var out []string
	for _, a := range addrs {
		p, err := fault.Listen(a, true)
		if err != nil {
			return nil, err
		}
		r := &relay{p: p, stop: make(chan struct{})}
		if d.brk.has("single-conn") {
			p.MaxLinks = 1
		}
		if d.brk.has("no-jitter") {
			p.BeforeDial = bar.wait
		}
		p.OnResponse = func(f *fault.Frame) fault.Verdict {
			if d.brk.has("ignore-moved") && f.Resp.Status == wire.StatusMoved {
				f.Raw = wire.AppendError(nil, f.Resp.ReqID, wire.CodeBadOp, "moved (ignored by the broken driver)")
			}
			return fault.Pass
		}
		p.OnRequest = func(f *fault.Frame) fault.Verdict {
			if d.brk.has("drop-releases") && f.Req.Op == wire.OpRelease {
				return fault.Drop
			}
			if d.brk.has("flip-flags") {
				f.Raw[3] |= 1
			}
			return fault.Pass
		}
		p.Start()
		if d.brk.has("fast-reconnect") {
			go func() {
				t := time.NewTicker(20 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-r.stop:
						return
					case <-t.C:
						if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
							c.Close()
						}
					}
				}
			}()
		}
		d.mu.Lock()
		d.relays = append(d.relays, r)
		d.mu.Unlock()
		out = append(out, p.Addr())
	}
	return out, nil
}

// barrier releases the dials of all n relays together (break no-jitter):
// each waits until all n have one pending, or 3 s.
type barrier struct {
	mu      sync.Mutex
	n, seen int
	open    chan struct{}
}

func (b *barrier) wait() {
	b.mu.Lock()
	b.seen++
	ch := b.open
	if b.seen >= b.n {
		close(b.open)
		b.open, b.seen = make(chan struct{}), 0
	}
	b.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(3 * time.Second):
	}
}

// Command godriver is the Go client's testkit driver (../../shared/design/testkit.md,
// docs/clients.md): JSON lines on stdin, one result per command on stdout, in
// completion order, every command on the one client made by "connect".
//
// It uses only the public API of package client. TESTKIT_BREAK selects a
// deliberately broken behaviour (see breaks.go), used by the testkit's own
// tests to prove that each scenario detects a faulty client.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ticketing/ticketing/client"
)

type tlsSpec struct {
	CA         string `json:"ca"`
	Cert       string `json:"cert"`
	Key        string `json:"key"`
	ServerName string `json:"server_name"`
}

type command struct {
	ID               int64    `json:"id"`
	Cmd              string   `json:"cmd"`
	Addrs            []string `json:"addrs"`
	Token            *string  `json:"token"`
	TLS              *tlsSpec `json:"tls"`
	ConnectTimeoutMS int64    `json:"connect_timeout_ms"`
	Key              *jsonKey `json:"key"`
	Keys             []string `json:"keys"`
	Label            *string  `json:"label"`
	AnswerAllowMS    int64    `json:"answer_allowance_ms"`
	MinRemainingMS   int64    `json:"min_remaining_ms"`
	MarginMS         int64    `json:"margin_ms"`
	KeyHex           *string  `json:"key_hex"`
	LeaseMS          int64    `json:"lease_ms"`
	WaitMS           int64    `json:"wait_ms"`
	HoldMS           int64    `json:"hold_ms"`
	Fail             bool     `json:"fail"`
	Target           int64    `json:"target"`
}

type driver struct {
	out   *bufio.Writer
	outMu sync.Mutex
	brk   breaks

	mu      sync.Mutex
	cl      *client.Client
	relays  []*relay
	pending map[int64]context.CancelFunc
	wg      sync.WaitGroup
	serial  sync.Mutex              // break "serialize"
	first   string                  // break "report-first-token"
	locks   map[string]*client.Lock // by token: the leases this driver acquired (release_lease, lease_ending)
}

func main() {
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix("godriver: ")
	d := &driver{out: bufio.NewWriter(os.Stdout), pending: map[int64]context.CancelFunc{}, locks: map[string]*client.Lock{}, brk: parseBreaks(os.Getenv("TESTKIT_BREAK"))}
	terseErrors = d.brk.has("terse-errors")
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var c command
		if err := json.Unmarshal(line, &c); err != nil {
			log.Printf("bad command line: %v", err)
			d.reply(map[string]any{"id": c.ID, "ok": false, "error": "internal", "message": "bad JSON: " + err.Error()})
			continue
		}
		d.dispatch(c)
	}
	// EOF ends the program: scopes still open end (their leases are
	// released, R10), every pending command ends, then the client closes.
	d.mu.Lock()
	cl := d.cl
	if !d.brk.has("exit-keeps-scopes") {
		for _, cancel := range d.pending {
			cancel()
		}
	}
	d.mu.Unlock()
	if d.brk.has("exit-keeps-scopes") && cl != nil {
		cl.Close()
	}
	d.wg.Wait()
	if cl != nil {
		cl.Close()
	}
	d.closeRelays()
}

func (d *driver) reply(m map[string]any) {
	b, err := json.Marshal(m)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"id":%v,"ok":false,"error":"internal","message":"marshal"}`, m["id"]))
	}
	d.outMu.Lock()
	d.out.Write(b)
	d.out.WriteByte('\n')
	d.out.Flush()
	d.outMu.Unlock()
}

func okReply(id int64, fields map[string]any) map[string]any {
	m := map[string]any{"id": id, "ok": true}
	for k, v := range fields {
		m[k] = v
	}
	return m
}

var terseErrors bool // break terse-errors

func errReply(id int64, kind string, code int, msg string) map[string]any {
	if terseErrors {
		msg = kind
	}
	m := map[string]any{"id": id, "ok": false, "error": kind, "message": msg}
	if code != 0 {
		m["code"] = code
	}
	return m
}

func (d *driver) dispatch(c command) {
	switch c.Cmd {
	case "connect":
		// Synchronous: later commands use the client it makes.
		d.reply(d.connect(c))
	case "cancel":
		d.mu.Lock()
		cancel := d.pending[c.Target]
		d.mu.Unlock()
		if cancel != nil && !d.brk.has("no-cancel") {
			cancel()
		}
		d.reply(okReply(c.ID, nil))
	case "info":
		v := "dev"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
		lang := "go"
		if d.brk.has("info-wrong-lang") {
			lang = "golang"
		}
		d.reply(okReply(c.ID, map[string]any{"language": lang, "client_version": v, "runtime": runtime.Version()}))
	case "close":
		d.mu.Lock()
		cl := d.cl
		d.mu.Unlock()
		if cl != nil && !d.brk.has("no-close") {
			cl.Close()
		}
		d.reply(okReply(c.ID, nil))
	case "acquire", "release", "with_lock", "acquire_set", "release_set", "release_lease", "lease_ending", "try_acquire":
		ctx, cancel := context.WithCancel(context.Background())
		d.mu.Lock()
		d.pending[c.ID] = cancel
		cl := d.cl
		d.mu.Unlock()
		d.wg.Add(1)
		run := func() {
			defer d.wg.Done()
			defer func() {
				d.mu.Lock()
				delete(d.pending, c.ID)
				d.mu.Unlock()
				cancel()
			}()
			if d.brk.has("serialize") {
				d.serial.Lock()
				defer d.serial.Unlock()
			}
			if cl == nil {
				d.reply(errReply(c.ID, "closed", 0, "no client: connect first"))
				return
			}
			d.reply(d.run(ctx, cl, c))
		}
		if d.brk.has("serialize") {
			run()
		} else {
			go run()
		}
	default:
		d.reply(errReply(c.ID, "unsupported", 0, "unknown cmd "+strconv.Quote(c.Cmd)))
	}
}

func (d *driver) connect(c command) map[string]any {
	d.mu.Lock()
	old := d.cl
	d.cl = nil
	d.mu.Unlock()
	if old != nil {
		old.Close()
	}
	d.closeRelays()
	var opts []client.Option
	if c.Token != nil && *c.Token != "" {
		opts = append(opts, client.WithToken(*c.Token))
	}
	if c.ConnectTimeoutMS > 0 {
		opts = append(opts, client.WithDialTimeout(time.Duration(c.ConnectTimeoutMS)*time.Millisecond))
	}
	if c.AnswerAllowMS > 0 && !d.brk.has("no-answer-allowance") {
		opts = append(opts, client.WithAnswerAllowance(ms(c.AnswerAllowMS)))
	}
	if d.brk.has("no-answer-allowance") {
		opts = append(opts, client.WithAnswerAllowance(time.Hour))
	}
	if c.Label != nil && !d.brk.has("no-label") {
		opts = append(opts, client.WithLabel(*c.Label)) // protocol.md §12.3
	}
	if c.TLS != nil {
		cfg := &tls.Config{ServerName: c.TLS.ServerName}
		if c.TLS.CA != "" {
			pem, err := os.ReadFile(c.TLS.CA)
			if err != nil {
				return errReply(c.ID, "tls", 0, err.Error())
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return errReply(c.ID, "tls", 0, "no certificate in "+c.TLS.CA)
			}
			cfg.RootCAs = pool
		}
		if c.TLS.Cert != "" {
			crt, err := tls.LoadX509KeyPair(c.TLS.Cert, c.TLS.Key)
			if err != nil {
				return errReply(c.ID, "tls", 0, err.Error())
			}
			cfg.Certificates = []tls.Certificate{crt}
		}
		if d.brk.has("tls-insecure") {
			cfg.InsecureSkipVerify = true
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	addrs, err := d.wrapAddrs(c.Addrs)
	if err != nil {
		return errReply(c.ID, "internal", 0, err.Error())
	}
	ctx := context.Background()
	cl, err := client.Dial(ctx, addrs, opts...)
	if err != nil {
		kind, code := classify(err)
		if kind == "auth" && d.brk.has("auth-as-connect") {
			kind = "connect"
		}
		if kind == "tls" && d.brk.has("tls-as-connect") {
			kind = "connect"
		}
		return errReply(c.ID, kind, code, err.Error())
	}
	d.mu.Lock()
	d.cl = cl
	d.mu.Unlock()
	return okReply(c.ID, nil)
}

func (d *driver) key(c command) (string, error) {
	if c.KeyHex != nil {
		b, err := hex.DecodeString(*c.KeyHex)
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
	if c.Key != nil {
		return string(*c.Key), nil
	}
	return "", nil
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func (d *driver) run(ctx context.Context, cl *client.Client, c command) map[string]any {
	key, err := d.key(c)
	if err != nil {
		return errReply(c.ID, "invalid", 0, "key_hex: "+err.Error())
	}
	switch c.Cmd {
	case "acquire":
		return d.acquire(ctx, cl, c, key)
	case "try_acquire":
		r := d.acquire(ctx, cl, c, key)
		if r["ok"] == true {
			r["acquired"] = true
		} else if r["error"] == "timeout" && !d.brk.has("try-raises") {
			return okReply(c.ID, map[string]any{"acquired": false})
		}
		return r
	case "acquire_set": // protocol.md §12.2
		l, err := cl.AcquireSet(ctx, c.Keys, ms(c.LeaseMS), ms(c.WaitMS))
		if err != nil {
			return d.errResult(c.ID, ctx, err)
		}
		tok := strconv.FormatUint(l.Token(), 10)
		d.mu.Lock()
		d.locks[tok] = l
		d.mu.Unlock()
		return okReply(c.ID, map[string]any{"token": tok, "deadline_in_ms": time.Until(l.Deadline()).Milliseconds()})
	case "release_set":
		if c.Token == nil {
			return errReply(c.ID, "invalid", 0, "release_set without token")
		}
		tok, err := d.parseToken(*c.Token)
		if err != nil {
			return errReply(c.ID, "invalid", 0, "token: "+err.Error())
		}
		if err := cl.ReleaseSet(ctx, c.Keys, tok); err != nil {
			return d.errResult(c.ID, ctx, err)
		}
		return okReply(c.ID, nil)
	case "release_lease":
		l, bad := d.lease(c)
		if bad != nil {
			return bad
		}
		already := l.Released()
		var err error
		if d.brk.has("release-lease-twice") {
			err = cl.Release(ctx, l.Key(), l.Token())
		} else {
			err = l.Release(ctx)
		}
		if err != nil {
			return d.errResult(c.ID, ctx, err)
		}
		return okReply(c.ID, map[string]any{"already": already})
	case "lease_ending":
		l, bad := d.lease(c)
		if bad != nil {
			return bad
		}
		ch := l.Ending(ms(c.MarginMS))
		if d.brk.has("ending-at-deadline") {
			ch = l.Done()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return errReply(c.ID, "cancelled", 0, "lease_ending cancelled")
		}
		return okReply(c.ID, map[string]any{"remaining_ms": time.Until(l.Deadline()).Milliseconds()})
	case "release":
		if c.Token == nil {
			return errReply(c.ID, "invalid", 0, "release without token")
		}
		tok, err := d.parseToken(*c.Token)
		if err != nil {
			return errReply(c.ID, "invalid", 0, "token: "+err.Error())
		}
		if d.brk.has("release-wrong-token") {
			tok++
		}
		if d.brk.has("release-without-O") {
			go cl.Release(context.Background(), key, tok)
			time.Sleep(50 * time.Millisecond)
			return okReply(c.ID, nil)
		}
		if err := cl.Release(ctx, key, tok); err != nil {
			return d.errResult(c.ID, ctx, err)
		}
		return okReply(c.ID, nil)
	default: // with_lock
		var tok uint64
		if d.brk.has("with-lock-never-release") {
			l, err := cl.Acquire(ctx, key, ms(c.LeaseMS), ms(c.WaitMS))
			if err != nil {
				return d.errResult(c.ID, ctx, err)
			}
			time.Sleep(ms(c.HoldMS))
			return okReply(c.ID, map[string]any{"token": strconv.FormatUint(l.Token(), 10)})
		}
		err := withLock(ctx, cl, key, ms(c.LeaseMS), ms(c.WaitMS), !d.brk.has("with-lock-leak"), func(l *client.Lock) error {
			tok = l.Token()
			select { // the hold ends early when the program exits (stdin EOF): the scope ends
			case <-time.After(ms(c.HoldMS)):
			case <-ctx.Done():
			}
			if c.Fail {
				return errScopeFailed
			}
			return nil
		})
		if err != nil && !errors.Is(err, errScopeFailed) {
			return d.errResult(c.ID, ctx, err)
		}
		return okReply(c.ID, map[string]any{"token": strconv.FormatUint(tok, 10)})
	}
}

var errScopeFailed = errors.New("godriver: the scope failed on purpose")

// withLock is the Go form of a scoped lock: a closure run while the lock is
// held, the lock released on every exit (defer), also on a panic.
func withLock(ctx context.Context, cl *client.Client, key string, lease, wait time.Duration, release bool, fn func(*client.Lock) error) error {
	l, err := cl.Acquire(ctx, key, lease, wait)
	if err != nil {
		return err
	}
	if release {
		defer l.Release(context.Background())
	} else {
		defer func() {
			if !errors.Is(err, errScopeFailed) {
				l.Release(context.Background())
			}
		}()
	}
	err = fn(l)
	return err
}

// lease is the lease object this driver acquired with c's token, or the
// error reply.
func (d *driver) lease(c command) (*client.Lock, map[string]any) {
	if c.Token == nil {
		return nil, errReply(c.ID, "invalid", 0, c.Cmd+" without token")
	}
	d.mu.Lock()
	l := d.locks[*c.Token]
	d.mu.Unlock()
	if l == nil {
		return nil, errReply(c.ID, "invalid", 0, c.Cmd+": no lease with token "+*c.Token+" was acquired by this driver")
	}
	return l, nil
}

func (d *driver) parseToken(s string) (uint64, error) {
	if d.brk.has("token-float") {
		f, err := strconv.ParseFloat(s, 64)
		return uint64(f), err
	}
	return strconv.ParseUint(s, 10, 64)
}

func (d *driver) acquire(ctx context.Context, cl *client.Client, c command, key string) map[string]any {
	lease, wait := ms(c.LeaseMS), ms(c.WaitMS)
	if d.brk.has("no-wait") {
		wait = 0
	}
	if d.brk.has("wait0-as-wait") && c.WaitMS == 0 {
		wait = 5 * time.Second
	}
	if d.brk.has("lease-x10") {
		lease *= 10
	}
	sent := time.Now()
	var opts []client.AcquireOption
	if c.MinRemainingMS > 0 && !d.brk.has("ignore-min-remaining") {
		opts = append(opts, client.MinRemaining(ms(c.MinRemainingMS)))
	}
	l, err := cl.Acquire(ctx, key, lease, wait, opts...)
	for err != nil && d.brk.has("retry-busy") && errors.Is(err, client.ErrBusy) && time.Since(sent) < wait {
		time.Sleep(20 * time.Millisecond)
		l, err = cl.Acquire(ctx, key, lease, wait-time.Since(sent))
	}
	if err != nil && d.brk.has("resend-after-drop") && errors.Is(err, client.ErrIndeterminate) && ctx.Err() == nil {
		l, err = cl.Acquire(ctx, key, lease, wait)
	}
	if err != nil {
		if d.brk.has("wait-plus-3s") {
			time.Sleep(3 * time.Second)
		}
		return d.errResult(c.ID, ctx, err)
	}
	tok := strconv.FormatUint(l.Token(), 10)
	d.mu.Lock()
	d.locks[tok] = l
	d.mu.Unlock()
	if d.brk.has("token-float") {
		tok = strconv.FormatFloat(float64(l.Token()), 'f', 0, 64)
	}
	if d.brk.has("report-first-token") {
		d.mu.Lock()
		if d.first == "" {
			d.first = tok
		}
		tok = d.first
		d.mu.Unlock()
	}
	dl := time.Until(l.Deadline())
	if d.brk.has("ignore-queued") {
		dl = time.Until(sent.Add(lease))
	}
	if d.brk.has("deadline-from-receive") {
		dl = lease
	}
	return okReply(c.ID, map[string]any{"token": tok, "deadline_in_ms": dl.Milliseconds()})
}

func (d *driver) errResult(id int64, ctx context.Context, err error) map[string]any {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return errReply(id, "cancelled", 0, err.Error())
	}
	kind, code := classify(err)
	if kind == "invalid" && d.brk.has("no-validate") {
		kind = "internal"
	}
	if d.brk.has("auth-as-connect") && kind == "auth" {
		kind = "connect"
	}
	return errReply(id, kind, code, err.Error())
}

// classify maps a client error to a testkit error kind and the protocol code.
func classify(err error) (string, int) {
	var be *client.BusyError
	var pe *client.ProtocolError
	var re *client.RejectError
	switch {
	case errors.Is(err, client.ErrClosed):
		return "closed", 0
	case errors.Is(err, client.ErrInsufficientLease):
		return "insufficient_lease", 0
	case errors.Is(err, context.Canceled):
		return "cancelled", 0
	case errors.Is(err, client.ErrIndeterminate):
		return "indeterminate", 0
	case errors.Is(err, client.ErrTimeout):
		return "timeout", 0
	case errors.As(err, &be):
		return "busy", int(be.Code)
	case errors.Is(err, client.ErrNoLeader):
		return "busy", 5 // NO_QUORUM: no leader within the hop limit and the wait
	case errors.Is(err, client.ErrNotHolder):
		return "not_holder", 0
	case errors.As(err, &pe):
		return "invalid", int(pe.Code)
	case errors.Is(err, client.ErrInvalidArgument):
		return "invalid", 0
	case errors.Is(err, client.ErrAuth):
		code := 0
		if errors.As(err, &re) {
			code = int(re.Code)
		}
		return "auth", code
	case errors.As(err, &re):
		return "busy", int(re.Code)
	case errors.Is(err, client.ErrTLS) || isTLS(err):
		return "tls", 0
	case errors.Is(err, client.ErrUnsupported):
		return "unsupported", 0
	case errors.Is(err, client.ErrConnect):
		return "connect", 0
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "protocol", 0
	}
	return "internal", 0
}

func isTLS(err error) bool {
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var ve *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	if errors.Is(err, client.ErrTLS) || errors.As(err, &ue) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &ve) || errors.As(err, &rh) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "tls:") || strings.Contains(s, "x509:") || strings.Contains(s, "TLS handshake")
}

func (d *driver) closeRelays() {
	d.mu.Lock()
	rs := d.relays
	d.relays = nil
	d.mu.Unlock()
	for _, r := range rs {
		r.Close()
	}
}

// jsonKey is a JSON string decoded as the driver's key: like encoding/json,
// except that a lone UTF-16 surrogate escape (\ud800 without its pair) is
// kept as its 3-byte (WTF-8) encoding instead of being replaced by U+FFFD.
// A Go string cannot hold a lone surrogate; these bytes are what a Go
// program that got one from elsewhere would pass, and they are not UTF-8,
// so the client must refuse them (R8), as a Java or C# client must refuse
// the lone surrogate itself.
type jsonKey string

func (k *jsonKey) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if !strings.Contains(strings.ToLower(string(b)), `\ud`) {
		*k = jsonKey(s)
		return nil
	}
	raw := string(b[1 : len(b)-1])
	var out []byte
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			out = append(out, raw[i])
			continue
		}
		i++
		switch raw[i] {
		case 'u':
			v, err := strconv.ParseUint(raw[i+1:i+5], 16, 32)
			if err != nil {
				return err
			}
			i += 4
			r := rune(v)
			if r >= 0xd800 && r < 0xdc00 && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo, err := strconv.ParseUint(raw[i+3:i+7], 16, 32); err == nil && lo >= 0xdc00 && lo < 0xe000 {
					r = 0x10000 + (r-0xd800)<<10 + rune(lo-0xdc00)
					i += 6
				}
			}
			if r >= 0xd800 && r < 0xe000 { // lone: WTF-8
				out = append(out, byte(0xe0|r>>12), byte(0x80|(r>>6)&0x3f), byte(0x80|r&0x3f))
			} else {
				out = utf8.AppendRune(out, r)
			}
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case 'r':
			out = append(out, '\r')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		default: // " \\ /
			out = append(out, raw[i])
		}
	}
	*k = jsonKey(out)
	return nil
}

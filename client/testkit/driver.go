// Package testkit is the cross-language client test runner: it starts real
// servers (single node, a 3-node cluster, TLS), fault proxies and scripted
// fake servers (package fault), drives every official client through its
// driver (JSON lines, ../../shared/design/testkit.md, docs/clients.md) and
// reports a language × scenario matrix.
package testkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Result is one answer line of a driver.
type Result struct {
	ID           int64  `json:"id"`
	OK           bool   `json:"ok"`
	Error        string `json:"error"`
	Code         int    `json:"code"`
	Message      string `json:"message"`
	Token        string `json:"token"`
	DeadlineInMS *int64 `json:"deadline_in_ms"`
	Language     string `json:"language"`

	At  time.Time       `json:"-"` // when the runner read it
	Raw json.RawMessage `json:"-"`
}

func (r Result) String() string {
	if r.Raw != nil {
		return string(r.Raw)
	}
	return fmt.Sprintf("%+v", struct {
		ID    int64
		OK    bool
		Error string
	}{r.ID, r.OK, r.Error})
}

// Driver is one running driver process.
type Driver struct {
	Lang string
	cmd  *exec.Cmd
	pgid int

	wmu   sync.Mutex
	stdin io.WriteCloser

	mu      sync.Mutex
	nextID  int64
	waiting map[int64]chan Result
	done    chan struct{} // closed when stdout ends
	stderr  *ring
	exited  chan struct{}
	badLine string
}

// ring keeps the last lines of a stream.
type ring struct {
	mu    sync.Mutex
	lines []string
}

func (r *ring) add(s string) {
	r.mu.Lock()
	r.lines = append(r.lines, s)
	if len(r.lines) > 60 {
		r.lines = r.lines[len(r.lines)-60:]
	}
	r.mu.Unlock()
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// StartDriver runs path (with env added) in its own process group.
func StartDriver(lang, path string, env []string) (*Driver, error) {
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = procAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start driver %s: %w", path, err)
	}
	track(cmd.Process.Pid)
	d := &Driver{Lang: lang, cmd: cmd, pgid: cmd.Process.Pid, stdin: stdin, waiting: map[int64]chan Result{},
		done: make(chan struct{}), stderr: &ring{}, exited: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			d.stderr.add(sc.Text())
		}
	}()
	go func() {
		defer wg.Done()
		defer close(d.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var r Result
			if err := json.Unmarshal(line, &r); err != nil {
				d.mu.Lock()
				if d.badLine == "" {
					d.badLine = string(line)
				}
				d.mu.Unlock()
				continue
			}
			r.At = time.Now()
			r.Raw = append(json.RawMessage(nil), line...)
			d.mu.Lock()
			ch := d.waiting[r.ID]
			delete(d.waiting, r.ID)
			if ch == nil && d.badLine == "" {
				d.badLine = "answer to an unknown or already answered id: " + string(line)
			}
			d.mu.Unlock()
			if ch != nil {
				ch <- r
			}
		}
	}()
	go func() {
		wg.Wait()
		cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// Pending is a command sent and not yet answered.
type Pending struct {
	d    *Driver
	ID   int64
	Cmd  map[string]any
	ch   chan Result
	res  *Result
	Sent time.Time
}

// Send writes a command (its id is assigned here) and returns at once.
func (d *Driver) Send(cmd map[string]any) (*Pending, error) {
	d.mu.Lock()
	d.nextID++
	id := d.nextID
	ch := make(chan Result, 1)
	d.waiting[id] = ch
	d.mu.Unlock()
	c := map[string]any{"id": id}
	for k, v := range cmd {
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	p := &Pending{d: d, ID: id, Cmd: c, ch: ch, Sent: time.Now()}
	d.wmu.Lock()
	_, err = d.stdin.Write(append(b, '\n'))
	d.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%s driver: write: %w%s", d.Lang, err, d.tail())
	}
	return p, nil
}

// Wait waits up to timeout for the answer.
func (p *Pending) Wait(timeout time.Duration) (Result, error) {
	if p.res != nil {
		return *p.res, nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-p.ch:
		p.res = &r
		return r, nil
	case <-t.C:
		return Result{}, fmt.Errorf("%s driver: no answer to %s within %v%s", p.d.Lang, cmdString(p.Cmd), timeout, p.d.tail())
	case <-p.d.done:
		select {
		case r := <-p.ch:
			p.res = &r
			return r, nil
		default:
		}
		return Result{}, fmt.Errorf("%s driver exited before answering %s%s", p.d.Lang, cmdString(p.Cmd), p.d.tail())
	}
}

// Answered reports whether the answer has arrived (without waiting).
func (p *Pending) Answered() bool {
	if p.res != nil {
		return true
	}
	select {
	case r := <-p.ch:
		p.res = &r
		return true
	default:
		return false
	}
}

func cmdString(c map[string]any) string {
	b, _ := json.Marshal(c)
	s := string(b)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func (d *Driver) tail() string {
	s := d.stderr.String()
	d.mu.Lock()
	bad := d.badLine
	d.mu.Unlock()
	if bad != "" {
		s = "unparsable stdout line: " + bad + "\n" + s
	}
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return "\n    driver stderr: " + strings.Join(lines, "\n    ")
}

// ProtocolViolation is a bad stdout line (not JSON, or an answer to an
// unknown id), or "".
func (d *Driver) ProtocolViolation() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.badLine
}

// Stop closes stdin (the driver closes its client and exits 0), waits up to
// grace, then kills the whole process group. It reports a non-zero exit.
func (d *Driver) Stop(grace time.Duration) error {
	d.wmu.Lock()
	d.stdin.Close()
	d.wmu.Unlock()
	select {
	case <-d.exited:
	case <-time.After(grace):
		syscall.Kill(-d.pgid, syscall.SIGKILL)
		<-d.exited
		untrack(d.pgid)
		return fmt.Errorf("%s driver did not exit within %v of stdin EOF", d.Lang, grace)
	}
	syscall.Kill(-d.pgid, syscall.SIGKILL) // stragglers of the group
	untrack(d.pgid)
	if st := d.cmd.ProcessState; st != nil && !st.Success() {
		return fmt.Errorf("%s driver exited with %v on stdin EOF%s", d.Lang, st, d.tail())
	}
	return nil
}

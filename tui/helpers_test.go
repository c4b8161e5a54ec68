package tui

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/ticketing/ticketing/client/wire"
)

// fakeSource is a Source whose answers the test sets per address. Locks
// answers like the server: the keys under the prefix, deepest queue first,
// at most limit, with total and truncated.
type fakeSource struct {
	mu        sync.Mutex
	status    map[string]wire.StatusReply
	locks     map[string][]wire.LockEntry
	down      map[string]error
	ignorePfx bool                     // answer every key whatever the prefix
	members   map[string][]wire.Member // the members query per address (none: an error, as an old server)
	calls     []string                 // "status ADDR", "locks ADDR PREFIX LIMIT"
}

func newFakeSource() *fakeSource {
	return &fakeSource{status: map[string]wire.StatusReply{}, locks: map[string][]wire.LockEntry{}, down: map[string]error{}}
}

func (f *fakeSource) Status(_ context.Context, addr string) (wire.StatusReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "status "+addr)
	if err := f.down[addr]; err != nil {
		return wire.StatusReply{}, err
	}
	st, ok := f.status[addr]
	if !ok {
		return wire.StatusReply{}, errors.New("dial tcp " + addr + ": connect: connection refused")
	}
	return st, nil
}

func (f *fakeSource) Locks(_ context.Context, addr, prefix string, limit int) (wire.LocksReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("locks %s %q %d", addr, prefix, limit))
	if err := f.down[addr]; err != nil {
		return wire.LocksReply{}, err
	}
	var out []wire.LockEntry
	for _, e := range f.locks[addr] {
		if f.ignorePfx || strings.HasPrefix(e.Key, prefix) {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b wire.LockEntry) int {
		if a.QueueDepth != b.QueueDepth {
			return b.QueueDepth - a.QueueDepth
		}
		return strings.Compare(a.Key, b.Key)
	})
	r := wire.LocksReply{Total: len(out)}
	if len(out) > limit {
		out, r.Truncated = out[:limit], true
	}
	r.Locks = out
	return r, nil
}

// Members implements MemberSource.
func (f *fakeSource) Members(_ context.Context, addr string) ([]wire.Member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "members "+addr)
	ms, ok := f.members[addr]
	if !ok {
		return nil, errors.New("members: not answered")
	}
	return ms, nil
}

func (f *fakeSource) setMembers(addr string, ms ...wire.Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.members == nil {
		f.members = map[string][]wire.Member{}
	}
	f.members[addr] = ms
}

func (f *fakeSource) set(addr string, st wire.StatusReply, locks ...wire.LockEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status[addr] = st
	f.locks[addr] = locks
	delete(f.down, addr)
}

func (f *fakeSource) setDown(addr string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[addr] = err
}

func (f *fakeSource) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// sgr matches the colour/attribute sequences (SGR) that lipgloss writes.
var sgr = regexp.MustCompile("\x1b\\[[0-9;:]*m")

// plain is a rendered view without its SGR sequences: the screen as text,
// what a terminal without colours or attributes shows (stable goldens).
// Any other escape sequence stays.
func plain(view string) string { return sgr.ReplaceAllString(view, "") }

// t0 is the fake clock's start.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// harness drives a Model the way a tea.Program would, synchronously: the
// commands an Update returns are run at once and their messages fed back,
// except the clock's, which the test advances with tick (no sleeping).
type harness struct {
	t     *testing.T
	m     *Model
	src   *fakeSource
	now   time.Time
	quit  bool
	ticks int // ticks the model scheduled
}

func newHarness(t *testing.T, addrs []string, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, src: newFakeSource(), now: t0}
	cfg := Config{
		Addrs:  addrs,
		Source: h.src,
		Now:    func() time.Time { return h.now },
	}
	cfg.Tick = func(time.Duration, func(time.Time) tea.Msg) tea.Cmd {
		h.ticks++
		return nil // the test sends the ticks
	}
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	return h
}

// send applies msg and runs what it starts.
func (h *harness) send(msg tea.Msg) {
	h.t.Helper()
	_, cmd := h.m.Update(msg)
	h.run(cmd)
}

func (h *harness) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	switch msg := cmd().(type) {
	case nil:
	case tea.BatchMsg:
		for _, c := range msg {
			h.run(c)
		}
	case tea.QuitMsg:
		h.quit = true
	default:
		h.send(msg)
	}
}

// view is the screen's content as plain text (see plain).
func (h *harness) view() string { return plain(h.m.View().Content) }

// start runs Init (the first tick at h.now).
func (h *harness) start() { h.run(h.m.Init()) }

// tick advances the clock by d and delivers the tick; the polls it starts
// are answered before tick returns.
func (h *harness) tick(d time.Duration) {
	h.now = h.now.Add(d)
	h.send(tickMsg(h.now))
}

func (h *harness) size(w, ht int) { h.send(tea.WindowSizeMsg{Width: w, Height: ht}) }

// press sends keys: "q", "/", "enter", "down", "pgdown", … or a text.
func (h *harness) press(keys ...string) {
	for _, k := range keys {
		h.send(keyMsg(k))
	}
}

// typeText sends each rune as a key press.
func (h *harness) typeText(s string) {
	for _, r := range s {
		h.send(tea.KeyPressMsg{Code: r, Text: string(r)})
	}
}

// keyMsg is the key press bubbletea delivers for k (see press).
func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "pgup":
		return tea.KeyPressMsg{Code: tea.KeyPgUp}
	case "pgdown":
		return tea.KeyPressMsg{Code: tea.KeyPgDown}
	case "home":
		return tea.KeyPressMsg{Code: tea.KeyHome}
	case "end":
		return tea.KeyPressMsg{Code: tea.KeyEnd}
	case "space":
		return tea.KeyPressMsg{Code: tea.KeySpace, Text: " "}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	case "ctrl+u":
		return tea.KeyPressMsg{Code: 'u', Mod: tea.ModCtrl}
	}
	r := []rune(k)
	if len(r) != 1 {
		panic("keyMsg: unknown key " + k)
	}
	return tea.KeyPressMsg{Code: r[0], Text: k}
}

// status is a healthy single node's status.
func status(uptime time.Duration, c wire.AdminCounters) wire.StatusReply {
	return wire.StatusReply{
		NodeID: "n1", Role: wire.NodeSingle, UptimeMS: uptime.Milliseconds(),
		Keys: 0, Holders: 0, Waiters: 0, Connections: 4, Counters: c, CanGrant: true,
	}
}

// rowKeys are the keys of the table, in order.
func (h *harness) rowKeys() []string {
	rs, _, _ := h.m.rows()
	var ks []string
	for _, r := range rs {
		ks = append(ks, r.Key)
	}
	return ks
}

// eventTexts are the event log's texts, oldest first.
func (h *harness) eventTexts() []string {
	var out []string
	for _, e := range h.m.events {
		out = append(out, e.text)
	}
	return out
}

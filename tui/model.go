package tui

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/ticketing/ticketing/client/wire"
)

// Config configures the dashboard. Zero fields take the defaults below.
type Config struct {
	// Addrs are the nodes to watch ("host:port"), shown in this order.
	Addrs []string
	// Source answers the admin queries (AdminSource in production).
	Source Source
	// Interval between polls. Default 1 s.
	Interval time.Duration
	// Timeout bounds one poll of one node (status then locks). Default
	// twice the interval, at least 1 s. A node whose poll is still running
	// when the next tick comes is skipped for that tick.
	Timeout time.Duration
	// Prefix is the initial key filter (`/` changes it).
	Prefix string
	// Limit is the `locks` limit per node: the server returns the Limit
	// keys with the deepest queues, which `s` then re-sorts. Default 100.
	Limit int
	// SpikeDepth is the smallest rise of a key's queue depth between two
	// polls that is logged as a spike (the depth must also at least double).
	// Default 3.
	SpikeDepth int
	// Context ends the polls in flight when it is done. Default Background.
	Context context.Context
	// Now and Tick are the clock: Now gives the first tick, Tick schedules
	// the next one (tea.Tick by default). Tests replace both.
	Now  func() time.Time
	Tick func(time.Duration, func(time.Time) tea.Msg) tea.Cmd
}

// Defaults.
const (
	DefaultInterval   = time.Second
	DefaultLimit      = wire.LocksDefaultLimit
	DefaultSpikeDepth = 3
	minInterval       = 100 * time.Millisecond
	historySpan       = time.Minute // the sparkline's span
	maxEvents         = 200
)

// Errors of Config.Validate.
var (
	ErrNoAddrs   = errors.New("tui: no node address")
	ErrNoSource  = errors.New("tui: no source")
	ErrBadConfig = errors.New("tui: bad config")
)

func (c *Config) setDefaults() {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout == 0 {
		c.Timeout = max(2*c.Interval, time.Second)
	}
	if c.Limit == 0 {
		c.Limit = DefaultLimit
	}
	if c.SpikeDepth == 0 {
		c.SpikeDepth = DefaultSpikeDepth
	}
	if c.Context == nil {
		c.Context = context.Background()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Tick == nil {
		c.Tick = tea.Tick
	}
}

// Validate checks a Config after defaults.
func (c Config) Validate() error {
	switch {
	case len(c.Addrs) == 0:
		return ErrNoAddrs
	case c.Source == nil:
		return ErrNoSource
	case c.Interval < minInterval:
		return fmt.Errorf("%w: interval %v below %v", ErrBadConfig, c.Interval, minInterval)
	case c.Timeout <= 0:
		return fmt.Errorf("%w: timeout %v", ErrBadConfig, c.Timeout)
	case c.Limit < 1 || c.Limit > wire.LocksMaxLimit:
		return fmt.Errorf("%w: limit %d not in 1..%d", ErrBadConfig, c.Limit, wire.LocksMaxLimit)
	case c.SpikeDepth < 1:
		return fmt.Errorf("%w: spike depth %d", ErrBadConfig, c.SpikeDepth)
	}
	seen := map[string]bool{}
	for _, a := range c.Addrs {
		if a == "" || seen[a] {
			return fmt.Errorf("%w: empty or repeated address %q", ErrBadConfig, a)
		}
		seen[a] = true
	}
	return nil
}

// sortMode is the order of the keys table; `s` cycles through them.
type sortMode int

const (
	sortDepth sortMode = iota // queue depth, deepest first (the server's order)
	sortWait                  // oldest waiter age, oldest first
	sortLease                 // lease remaining, soonest expiry first
	sortKey                   // key, A to Z
	sortToken                 // fencing token, newest first
	numSorts
)

func (s sortMode) String() string {
	return [...]string{"depth", "oldest wait", "lease", "key", "token"}[s]
}

// rates are per-second rates of the status counters.
type rates struct {
	Grants, Handoffs, Releases, Timeouts, Expiries float64
}

func (r rates) add(o rates) rates {
	return rates{r.Grants + o.Grants, r.Handoffs + o.Handoffs, r.Releases + o.Releases,
		r.Timeouts + o.Timeouts, r.Expiries + o.Expiries}
}

// sample is what rates are computed from: counters at a time.
type sample struct {
	at       time.Time
	uptimeMS int64
	c        wire.AdminCounters
}

// computeRates returns the rates between two samples of one node. The
// interval is the node's own uptime delta (immune to polling jitter) when
// it advanced, else the poll times'. reset reports that a counter went down
// or the uptime went back (the node restarted): there is no rate across a
// reset, only a new baseline.
func computeRates(prev, cur sample) (r rates, ok, reset bool) {
	p, c := prev.c, cur.c
	if cur.uptimeMS < prev.uptimeMS || c.Grants < p.Grants || c.Handoffs < p.Handoffs ||
		c.Releases < p.Releases || c.Timeouts < p.Timeouts || c.Expiries < p.Expiries {
		return rates{}, false, true
	}
	var dt time.Duration
	if cur.uptimeMS > prev.uptimeMS && prev.uptimeMS > 0 {
		dt = time.Duration(cur.uptimeMS-prev.uptimeMS) * time.Millisecond
	} else {
		dt = cur.at.Sub(prev.at)
	}
	if dt <= 0 {
		return rates{}, false, false
	}
	sec := dt.Seconds()
	per := func(a, b uint64) float64 { return float64(b-a) / sec }
	return rates{
		Grants:   per(p.Grants, c.Grants),
		Handoffs: per(p.Handoffs, c.Handoffs),
		Releases: per(p.Releases, c.Releases),
		Timeouts: per(p.Timeouts, c.Timeouts),
		Expiries: per(p.Expiries, c.Expiries),
	}, true, false
}

// node is what the dashboard knows of one address.
type node struct {
	addr      string
	polled    bool // an answer (good or not) has arrived
	reachable bool
	inflight  bool      // a poll is running
	since     time.Time // when reachable last changed
	err       string    // the last error, when unreachable
	authFail  bool      // the last error was an authentication failure
	notMember bool      // reachable, but not in the leader's membership

	status    wire.StatusReply // the last good status
	hasStatus bool

	locks       wire.LocksReply
	locksPrefix string // the prefix locks were asked for
	hasLocks    bool

	last     sample // the baseline of the rates
	hasLast  bool
	rates    rates
	hasRates bool
}

// eventKind colours an event.
type eventKind int

const (
	evInfo eventKind = iota
	evDown
	evUp
	evSpike
	evLeader
)

// event is one line of the event log.
type event struct {
	at   time.Time
	node string
	kind eventKind
	text string
}

// Model is the dashboard's state. Create it with New; run it with Run (or
// any tea.Program).
type Model struct {
	cfg   Config
	keys  keyMap
	help  help.Model
	st    styles
	nodes []*node

	width, height int
	now           time.Time // the last tick

	history []float64 // grants/s per tick, oldest first; NaN: unknown
	histCap int

	events []event

	sortBy   sortMode
	filter   string // applied key prefix
	editing  bool   // the filter prompt is open
	input    []rune // the prompt's text
	paused   bool
	showHelp bool
	offset   int // first key row shown
}

// Default size before the first WindowSizeMsg.
const (
	defaultWidth  = 80
	defaultHeight = 24
)

// New returns the model for cfg (defaults applied, then validated).
func New(cfg Config) (*Model, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Addrs = append([]string(nil), cfg.Addrs...)
	m := &Model{
		cfg:     cfg,
		keys:    defaultKeys(),
		help:    help.New(),
		st:      newStyles(true),
		width:   defaultWidth,
		height:  defaultHeight,
		filter:  cfg.Prefix,
		histCap: int(math.Ceil(float64(historySpan) / float64(cfg.Interval))),
	}
	bold, faint := lipgloss.NewStyle().Bold(true), lipgloss.NewStyle().Faint(true)
	m.help.Styles = help.Styles{
		ShortKey:       bold,
		ShortDesc:      faint,
		ShortSeparator: faint,
		Ellipsis:       faint,
		FullKey:        bold,
		FullDesc:       lipgloss.NewStyle(),
		FullSeparator:  faint,
	}
	m.help.ShortSeparator = " · "
	for _, a := range cfg.Addrs {
		m.nodes = append(m.nodes, &node{addr: a})
	}
	return m, nil
}

// Init starts the clock: the first tick comes at once and starts the polls.
// It also asks the terminal for its background colour (the answer, a
// tea.BackgroundColorMsg, picks the light or dark colours; none keeps the
// dark ones).
func (m *Model) Init() tea.Cmd {
	return tea.Batch(nowCmd(m.cfg.Now), tea.RequestBackgroundColor)
}

func (m *Model) node(addr string) *node {
	for _, n := range m.nodes {
		if n.addr == addr {
			return n
		}
	}
	return nil
}

// logEvent appends to the event log, dropping the oldest beyond maxEvents.
func (m *Model) logEvent(at time.Time, addr string, kind eventKind, format string, a ...any) {
	// In time order: polls answer out of order (a slow node's answer to
	// an earlier tick arrives after a fast node's to a later one).
	ev := event{at: at, node: addr, kind: kind, text: fmt.Sprintf(format, a...)}
	i := len(m.events)
	for i > 0 && m.events[i-1].at.After(at) {
		i--
	}
	m.events = slices.Insert(m.events, i, ev)
	if len(m.events) > maxEvents {
		m.events = append(m.events[:0], m.events[len(m.events)-maxEvents:]...)
	}
}

// authoritative are the nodes whose locks and counters the dashboard shows:
// the reachable leaders when there are any (in a cluster every node holds
// the same table, and only the leader's view is current), else every
// reachable node (single nodes, each its own table).
func (m *Model) authoritative() []*node {
	var leaders, all []*node
	for _, n := range m.nodes {
		if !n.reachable || !n.hasStatus {
			continue
		}
		all = append(all, n)
		if n.status.Role == wire.NodeLeader {
			leaders = append(leaders, n)
		}
	}
	if len(leaders) > 0 {
		return leaders
	}
	return all
}

// totalRates sums the authoritative nodes' rates; ok is false when none has
// a rate yet.
func (m *Model) totalRates() (r rates, ok bool) {
	for _, n := range m.authoritative() {
		if n.hasRates {
			r, ok = r.add(n.rates), true
		}
	}
	return r, ok
}

// row is one line of the keys table.
type row struct {
	node string
	wire.LockEntry
}

// rows are the keys table: the authoritative nodes' keys under the filter,
// in the sort order; total counts the matching keys (beyond the limit too,
// when the server said); multi tells that they come from several nodes.
func (m *Model) rows() (rs []row, total int, multi bool) {
	srcs := 0
	for _, n := range m.authoritative() {
		if !n.hasLocks {
			continue
		}
		srcs++
		shown := 0
		for _, e := range n.locks.Locks {
			if strings.HasPrefix(e.Key, m.filter) {
				rs = append(rs, row{node: n.addr, LockEntry: e})
				shown++
			}
		}
		if n.locksPrefix == m.filter {
			total += max(n.locks.Total, shown)
		} else { // asked with another prefix: only what is here is known
			total += shown
		}
	}
	slices.SortStableFunc(rs, func(a, b row) int {
		var c int
		switch m.sortBy {
		case sortDepth:
			c = cmp.Compare(b.QueueDepth, a.QueueDepth)
		case sortWait:
			c = cmp.Or(cmp.Compare(b.OldestWaiterAgeMS, a.OldestWaiterAgeMS), cmp.Compare(b.QueueDepth, a.QueueDepth))
		case sortLease:
			c = cmp.Compare(a.LeaseRemainingMS, b.LeaseRemainingMS)
		case sortToken:
			c = cmp.Compare(b.Token, a.Token)
		}
		return cmp.Or(c, strings.Compare(a.Key, b.Key), strings.Compare(a.node, b.node))
	})
	return rs, total, srcs > 1
}

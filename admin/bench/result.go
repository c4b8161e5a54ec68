package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ticketing/ticketing/client/wire"
)

// Latency summarizes an HDR histogram, in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
}

// Summarize reads the quantiles of h (recorded in ns).
func Summarize(h *hdrhistogram.Histogram) Latency {
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.TotalCount(),
		Mean:  h.Mean() / 1e3,
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		Max:   us(h.Max()),
	}
}

// NewHistogram returns a histogram for latencies in ns (1 ns .. 1 h, 3
// significant digits), for drivers outside this package (Redis).
func NewHistogram() *hdrhistogram.Histogram { return newHist() }

// RecordLatency records d into h, clamped to the histogram's range.
func RecordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(int64(d), histMin), histMax))
}

// ServerDelta is the change of the server's admin counters over the run.
// The counters are wire.AdminCounters' (their JSON members inline).
type ServerDelta struct {
	wire.AdminCounters
	KeysAfter int64 `json:"keys_after"`
}

// Fairness is the hot-key FIFO check: with Contenders slots all queueing on
// one key, a waiter has at most QueueLen holders ahead of it, each holding
// for MeanHold on average (run time ÷ grants), so no waiter starves when
// MaxWait stays within Bound = QueueLen × MeanHold (OK).
//
// Time is noisy on a shared machine (a descheduled holder stretches every
// wait behind it), so the order is counted too: fencing tokens rise by one
// per grant, so token − (highest token seen when the acquire was written) − 1
// counts the grants that went to others between a waiter's send and its
// grant. The server's queue is FIFO, so that count exceeds Contenders only
// when the server read the acquire late — others' acquires, sent after it,
// were queued before it (SendOrder false). MaxQueuedMS is the server's own
// figure for the longest time in its queue (the G header, 16 ms floor).
//
// A wait runs from the acquire's write (stamped just before the write
// syscall, after encoding) to the read that returned its grant, so it
// includes the generator's own wake-up, as any client's would. Gaps are the
// times between consecutive grants (tokens t-1 and t) as the generator read
// them: one handoff each (the holder's release, the server, the grant, the
// next holder's wake-up). A stall of the chain is one long gap, and it
// lengthens every wait in progress, so a max wait far above the bound with a
// p99.9 near it and a long max gap is a stall shared by the whole queue,
// not an unfair order.
type Fairness struct {
	Contenders   int        `json:"contenders"`
	QueueLen     int        `json:"queue_len"`
	MeanHoldUS   float64    `json:"mean_hold_us"`
	BoundUS      float64    `json:"bound_us"`
	MaxWaitUS    float64    `json:"max_wait_us"`
	P50WaitUS    float64    `json:"p50_wait_us"`
	P99WaitUS    float64    `json:"p99_wait_us"`
	P999WaitUS   float64    `json:"p999_wait_us"`
	Ratio        float64    `json:"max_wait_over_bound"`
	Gaps         *GrantGaps `json:"grant_gaps,omitempty"`
	MaxOvertaken uint64     `json:"max_overtaken"`
	SendOrder    bool       `json:"send_order_kept"`
	MaxQueuedMS  int64      `json:"max_server_queued_ms"`
	OK           bool       `json:"ok"`
}

// GrantGaps is the distribution of the times between consecutive grants of
// the hot key (Fairness).
type GrantGaps struct {
	Count  int64   `json:"count"`
	P50US  float64 `json:"p50_us"`
	P99US  float64 `json:"p99_us"`
	P999US float64 `json:"p999_us"`
	MaxUS  float64 `json:"max_us"`
}

// Result is one run's report (`--output json` prints it as is).
type Result struct {
	Label      string  `json:"label"`
	Addr       string  `json:"addr"`
	Mode       Mode    `json:"mode"`
	Conns      int     `json:"conns"`
	Pipeline   int     `json:"pipeline"`
	Keys       int     `json:"keys"`
	HotKeys    int     `json:"hot_keys"`
	Contention float64 `json:"contention"`
	SetSize    int     `json:"set_size,omitempty"` // keys per acquire (S/X) when above 1
	LeaseMS    int64   `json:"lease_ms"`
	WaitMS     int64   `json:"wait_ms"`
	HoldUS     int64   `json:"hold_us"`
	Started    string  `json:"started"`

	Seconds      float64           `json:"seconds"`
	Ops          uint64            `json:"ops"`                     // completed: acquires answered G or T + releases answered O or N
	Refused      uint64            `json:"refused"`                 // answered B, U or E: in outcomes, not in ops (they count toward --ops)
	Redirects    uint64            `json:"redirects"`               // answered M (not the leader): never ops; the slot stops
	RedirectedTo string            `json:"redirected_to,omitempty"` // the leader the last M named
	Acquires     uint64            `json:"acquires"`
	Releases     uint64            `json:"releases"`
	OpsPerS      float64           `json:"ops_per_sec"`
	Outcomes     map[string]uint64 `json:"outcomes"` // "G", "O", "T", "B:QUEUE_FULL", "E:BAD_KEY", "C:O", ...
	Errors       uint64            `json:"errors"`
	Writes       uint64            `json:"writes"` // the generator's write syscalls: Ops ÷ Writes is its mean batch

	Latency        Latency `json:"latency"`         // every op, send → response
	AcquireLatency Latency `json:"acquire_latency"` // acquires only (includes time queued)

	// CPU time over the measured run: this load generator's, and the
	// server's (--server-pid). Per op they hardly move with machine noise,
	// unlike ops/s.
	BenchCPUSeconds  float64 `json:"bench_cpu_s"`
	BenchCPUPerOpUS  float64 `json:"bench_cpu_us_per_op"`
	ServerCPUSeconds float64 `json:"server_cpu_s,omitempty"`
	ServerCPUPerOpUS float64 `json:"server_cpu_us_per_op,omitempty"`

	ServerPID      int          `json:"server_pid,omitempty"`
	ServerMemStart *ProcMem     `json:"server_mem_start,omitempty"`
	ServerMem      *ProcMem     `json:"server_mem,omitempty"` // at the end (fill: right after filling)
	BytesPerKey    float64      `json:"bytes_per_held_key,omitempty"`
	Server         *ServerDelta `json:"server,omitempty"`
	HandoffsPerS   float64      `json:"handoffs_per_sec,omitempty"`
	Fairness       *Fairness    `json:"fairness,omitempty"`
	Note           string       `json:"note,omitempty"`
	// Lost says that a connection failed mid-run (the server stopped or
	// crashed) and the run ended there; "" for a run that ended as asked.
	Lost string `json:"lost,omitempty"`
}

func outcomeName(st wire.Status, code wire.Code) string {
	if code == 0 {
		return string(rune(st))
	}
	return string(rune(st)) + ":" + code.String()
}

// WriteJSON prints r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText prints r for people.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s bench: %s, %d conns × %d pipelined, %d keys", r.Label, r.Mode, r.Conns, r.Pipeline, r.Keys)
	if r.HotKeys > 0 {
		fmt.Fprintf(&b, ", %d hot keys (%.0f%% of acquires)", r.HotKeys, r.Contention*100)
	}
	if r.SetSize > 1 {
		fmt.Fprintf(&b, ", sets of %d keys", r.SetSize)
	}
	fmt.Fprintf(&b, ", lease %v, wait %v", time.Duration(r.LeaseMS)*time.Millisecond, time.Duration(r.WaitMS)*time.Millisecond)
	if r.HoldUS > 0 {
		fmt.Fprintf(&b, ", hold %v", time.Duration(r.HoldUS)*time.Microsecond)
	}
	fmt.Fprintf(&b, " → %s\n", r.Addr)
	fmt.Fprintf(&b, "  duration    %.2f s\n", r.Seconds)
	fmt.Fprintf(&b, "  ops         %s (acquire %s, release %s)\n", group(r.Ops), group(r.Acquires), group(r.Releases))
	fmt.Fprintf(&b, "  throughput  %s ops/s\n", group(uint64(r.OpsPerS+0.5)))
	if r.Refused > 0 || r.Redirects > 0 {
		fmt.Fprintf(&b, "  not ops     refused %s (B, U, E), redirected %s (M)\n", group(r.Refused), group(r.Redirects))
	}
	keys := make([]string, 0, len(r.Outcomes))
	for k := range r.Outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "  outcomes   ")
	for _, k := range keys {
		fmt.Fprintf(&b, " %s %s", k, group(r.Outcomes[k]))
	}
	fmt.Fprintf(&b, "\n  errors      %d\n", r.Errors)
	if r.Writes > 0 {
		fmt.Fprintf(&b, "  batches     %.1f requests per write\n", float64(r.Ops)/float64(r.Writes))
	}
	writeLat := func(name string, l Latency) {
		fmt.Fprintf(&b, "  %-11s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", name,
			us(l.P50), us(l.P90), us(l.P99), us(l.P999), us(l.Max))
	}
	writeLat("latency", r.Latency)
	if r.WaitMS > 0 || r.HotKeys > 0 {
		writeLat("acquire", r.AcquireLatency)
	}
	if r.ServerMem != nil {
		fmt.Fprintf(&b, "  server RSS  peak %s (VmHWM), now %s", mb(r.ServerMem.Peak), mb(r.ServerMem.RSS))
		if r.ServerMemStart != nil {
			fmt.Fprintf(&b, ", at start %s", mb(r.ServerMemStart.RSS))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  cpu         bench %.2f s (%.2f µs/op)", r.BenchCPUSeconds, r.BenchCPUPerOpUS)
	if r.ServerCPUSeconds > 0 {
		fmt.Fprintf(&b, ", server %.2f s (%.2f µs/op)", r.ServerCPUSeconds, r.ServerCPUPerOpUS)
	}
	b.WriteString("\n")
	if r.BytesPerKey > 0 {
		fmt.Fprintf(&b, "  per key     %.0f bytes of RSS per held key\n", r.BytesPerKey)
	}
	if s := r.Server; s != nil {
		fmt.Fprintf(&b, "  server      grants +%s, handoffs +%s, timeouts +%s, busy +%s, errors +%s, keys now %d\n",
			group(s.Grants), group(s.Handoffs), group(s.Timeouts), group(s.Busy), group(s.Errors), s.KeysAfter)
	}
	if r.HandoffsPerS > 0 {
		fmt.Fprintf(&b, "  handoffs    %s/s\n", group(uint64(r.HandoffsPerS+0.5)))
	}
	if f := r.Fairness; f != nil {
		order := "every waiter served in send order"
		if !f.SendOrder {
			order = "some acquires were read late and queued behind later ones"
		}
		fmt.Fprintf(&b, "  fairness    max wait %s (p99 %s) vs queue %d × mean hold %s = %s (max/bound %.2f)\n",
			us(f.MaxWaitUS), us(f.P99WaitUS), f.QueueLen, us(f.MeanHoldUS), us(f.BoundUS), f.Ratio)
		if f.BoundUS > 0 {
			fmt.Fprintf(&b, "  wait/bound  p50 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n",
				f.P50WaitUS/f.BoundUS, f.P99WaitUS/f.BoundUS, f.P999WaitUS/f.BoundUS, f.Ratio)
		}
		if g := f.Gaps; g != nil {
			fmt.Fprintf(&b, "  grant gaps  p50 %s  p99 %s  p99.9 %s  max %s (time between consecutive grants)\n",
				us(g.P50US), us(g.P99US), us(g.P999US), us(g.MaxUS))
		}
		fmt.Fprintf(&b, "  order       at most %d grants went to others between a waiter's send and its grant (send order: ≤ %d): %s; longest in the server's queue ≥ %d ms\n",
			f.MaxOvertaken, f.Contenders, order, f.MaxQueuedMS)
	}
	if r.Lost != "" {
		fmt.Fprintf(&b, "  lost        %s\n", r.Lost)
	}
	if r.Note != "" {
		fmt.Fprintf(&b, "  note        %s\n", r.Note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func us(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.2fms", v/1e3)
	}
	return fmt.Sprintf("%.0fµs", v)
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

// group formats n with thousands separators.
func group(n uint64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

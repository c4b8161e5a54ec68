package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Args renders the `ticketing bench` flags that reproduce r's workload.
func (r *Result) Args() string {
	s := fmt.Sprintf("--mode %s --conns %d --pipeline %d --keys %d", r.Mode, r.Conns, r.Pipeline, r.Keys)
	if r.HotKeys > 0 {
		s += fmt.Sprintf(" --hot-keys %d", r.HotKeys)
		if r.Contention < 1 {
			s += fmt.Sprintf(" --contention %g", r.Contention)
		}
	}
	if r.WaitMS > 0 {
		s += fmt.Sprintf(" --wait %dms", r.WaitMS)
	}
	if r.HoldUS > 0 {
		s += fmt.Sprintf(" --hold %dus", r.HoldUS)
	}
	return s
}

// Oneline is a one-line summary of r (the scripts print one per run).
func (r *Result) Oneline() string {
	s := fmt.Sprintf("%-9s %-44s %12s ops/s  p50 %s p99 %s max %s", r.Label, r.Shape(), group(uint64(r.OpsPerS)),
		us(r.Latency.P50), us(r.Latency.P99), us(r.Latency.Max))
	if r.ServerCPUPerOpUS > 0 {
		s += fmt.Sprintf("  server %.2f µs/op", r.ServerCPUPerOpUS)
	}
	if r.ServerMem != nil {
		s += "  RSS peak " + mb(r.ServerMem.Peak)
	}
	if r.BytesPerKey > 0 {
		s += fmt.Sprintf("  %.0f B/key", r.BytesPerKey)
	}
	if f := r.Fairness; f != nil {
		s += fmt.Sprintf("  handoffs %s/s, max wait %s vs bound %s, %d ahead since send (%d contenders)", group(uint64(r.HandoffsPerS)), us(f.MaxWaitUS), us(f.BoundUS), f.MaxOvertaken, f.Contenders)
	}
	return s
}

// Budget targets (issue 5).
const (
	BudgetPipelinedOps   = 2_000_000
	BudgetPipelinedFloor = 0.5
	BudgetVsRedis        = 4.0
	BudgetUnpipelined    = 0.9
	BudgetP99US          = 150
	BudgetRSS            = 10 << 20
)

type runs []*Result

func (rs runs) pick(label string, match func(*Result) bool) runs {
	var out runs
	for _, r := range rs {
		if r.Label == label && match(r) {
			out = append(out, r)
		}
	}
	return out
}

func (rs runs) ops() []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.OpsPerS
	}
	return v
}

func (rs runs) medianOps() float64 { return median(rs.ops()) }

func spread(v []float64) string {
	if len(v) == 0 {
		return ""
	}
	return fmt.Sprintf("%s – %s, %d runs", group(uint64(slices.Min(v))), group(uint64(slices.Max(v))), len(v))
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

func shape(mode Mode, conns, pipeline int, hot bool) func(*Result) bool {
	return func(r *Result) bool {
		return r.Mode == mode && r.Conns == conns && r.Pipeline == pipeline && (r.HotKeys > 0) == hot && (hot || r.Keys == 10000)
	}
}

// WriteBudget prints the budget table of issue 5 from every result it finds:
// each row's figure (median over runs, with the spread), its same-run
// reference (floor, Redis) and whether the target is met.
func WriteBudget(w io.Writer, results []*Result) error {
	all := runs(results)
	var b strings.Builder
	b.WriteString("| workload | `ticketing bench` flags | result (median; spread) | same run | target | |\n|---|---|---|---|---|---|\n")

	if t := all.pick("ticketing", shape(ModePairs, 8, 64, false)); len(t) > 0 {
		tm := t.medianOps()
		ref := ""
		okOps := tm >= BudgetPipelinedOps
		floor := all.pick("floor", shape(ModePairs, 8, 64, false))
		if len(floor) > 0 {
			fm := floor.medianOps()
			ref += fmt.Sprintf("floor %s ops/s (%s): ticketing = %.0f %% of it", group(uint64(fm)), spread(floor.ops()), 100*tm/fm)
			okOps = okOps || tm >= BudgetPipelinedFloor*fm
		}
		okRedis := true
		redis := all.pick("redis", shape(ModePairs, 8, 64, false))
		if len(redis) > 0 {
			rm := redis.medianOps()
			ref += fmt.Sprintf("; Redis %s ops/s (%s): ticketing = %.1f×", group(uint64(rm)), spread(redis.ops()), tm/rm)
			okRedis = tm >= BudgetVsRedis*rm
		} else {
			ref += "; Redis not in this run (scripts/bench-vs-redis.sh)"
			okRedis = false
		}
		fmt.Fprintf(&b, "| pairs, 8 conns × pipeline 64, 10 k keys | `%s` | %s ops/s (%s) | %s | ≥ 2,000,000 ops/s (or ≥ 50 %% of the floor) and ≥ 4× Redis | %s ops, %s Redis |\n",
			t[0].Args(), group(uint64(tm)), spread(t.ops()), ref, verdict(okOps), verdict(okRedis))
	}

	if t := all.pick("ticketing", shape(ModePairs, 64, 1, false)); len(t) > 0 {
		tm := t.medianOps()
		ref, ok := "no floor in this run", false
		if floor := all.pick("floor", shape(ModePairs, 64, 1, false)); len(floor) > 0 {
			fm := floor.medianOps()
			ref = fmt.Sprintf("floor %s ops/s (%s): ticketing = %.0f %% of it", group(uint64(fm)), spread(floor.ops()), 100*tm/fm)
			ok = tm >= BudgetUnpipelined*fm
		}
		fmt.Fprintf(&b, "| pairs, 64 conns, pipeline 1 | `%s` | %s ops/s (%s) | %s | ≥ 90 %% of the floor | %s |\n",
			t[0].Args(), group(uint64(tm)), spread(t.ops()), ref, verdict(ok))
	}

	if t := all.pick("ticketing", shape(ModePairs, 1, 1, false)); len(t) > 0 {
		p99 := make([]float64, len(t))
		for i, r := range t {
			p99[i] = r.Latency.P99
		}
		m := median(p99)
		ref := ""
		if floor := all.pick("floor", shape(ModePairs, 1, 1, false)); len(floor) > 0 {
			fp := make([]float64, len(floor))
			for i, r := range floor {
				fp[i] = r.Latency.P99
			}
			ref = fmt.Sprintf("floor p99 %s (%s – %s)", us(median(fp)), us(slices.Min(fp)), us(slices.Max(fp)))
		}
		fmt.Fprintf(&b, "| pairs, 1 conn, pipeline 1 | `%s` | p99 %s (%s – %s, %d runs); p50 %s; %s ops/s | %s | p99 ≤ 150 µs | %s |\n",
			t[0].Args(), us(m), us(slices.Min(p99)), us(slices.Max(p99)), len(t), us(t[0].Latency.P50), group(uint64(t.medianOps())), ref, verdict(m <= BudgetP99US))
	}

	hot := all.pick("ticketing", func(r *Result) bool { return r.Fairness != nil })
	if len(hot) > 0 {
		hs := make([]float64, len(hot))
		timeOK, order := true, true
		var maxWait, bound, ratio float64
		var ahead uint64
		var queued int64
		contenders := 0
		for i, r := range hot {
			hs[i] = r.HandoffsPerS
			f := r.Fairness
			timeOK = timeOK && f.OK
			order = order && f.SendOrder
			if f.Ratio > ratio {
				ratio, maxWait, bound = f.Ratio, f.MaxWaitUS, f.BoundUS
			}
			ahead = max(ahead, f.MaxOvertaken)
			queued = max(queued, f.MaxQueuedMS)
			contenders = f.Contenders
		}
		orderS := "every acquire served in send order"
		if !order {
			orderS = fmt.Sprintf("some acquires read late by the server and queued behind later ones (≤ %d grants ahead vs %d contenders)", ahead, contenders)
		}
		ref := "—"
		if floor := all.pick("floor", func(r *Result) bool { return r.Fairness != nil }); len(floor) > 0 {
			// scripts/floor --hotkey: the same FIFO handoff, no lock table
			fs := make([]float64, len(floor))
			fr := 0.0
			for i, r := range floor {
				fs[i] = r.HandoffsPerS
				fr = max(fr, r.Fairness.Ratio)
			}
			ref = fmt.Sprintf("hot-key floor %s handoffs/s (%s): ticketing = %.0f %% of it; its worst max wait %.2f× the bound",
				group(uint64(median(fs))), spread(fs), 100*median(hs)/median(fs), fr)
		}
		fmt.Fprintf(&b, "| 1 hot key, %d conns each acquire(wait)+release | `%s` | %s handoffs/s (%s); worst max wait %s vs queue × mean hold %s (%.2f×); longest in the server's queue ≥ %d ms; %s | %s | handoffs/s reported; FIFO, max wait ≤ queue length × hold time | %s |\n",
			contenders, hot[0].Args(), group(uint64(median(hs))), spread(hs), us(maxWait), us(bound), ratio, queued, orderS, ref, verdict(timeOK))
	}

	var peak int64
	var peakRow string
	for _, r := range all {
		if r.Label == "ticketing" && r.Keys <= 10000 && r.ServerMem != nil && r.ServerMem.Peak > peak {
			peak, peakRow = r.ServerMem.Peak, r.Shape()
		}
	}
	if peak > 0 {
		fmt.Fprintf(&b, "| server RSS peak (VmHWM) in the rows above | `--server-pid` | %s (in %s) | — | ≤ 10 MB | %s |\n",
			mb(peak), peakRow, verdict(peak <= BudgetRSS))
	}

	for _, r := range all.pick("ticketing", func(r *Result) bool { return r.Mode == ModeFill }) {
		if r.ServerMem == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s distinct held keys | `%s --lease %dms` | RSS %s (peak %s), %.0f bytes per held key (RSS growth ÷ keys) | idle server %s | reported | reported |\n",
			group(r.Outcomes["G"]), r.Args(), r.LeaseMS, mb(r.ServerMem.RSS), mb(r.ServerMem.Peak), r.BytesPerKey, mb(startRSS(r)))
	}
	b.WriteString("| request path allocations | `go test ./server ./admin/bench -run '^$' -bench . -benchmem` | see the Go benchmarks | — | 0 allocs/op | — |\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func startRSS(r *Result) int64 {
	if r.ServerMemStart == nil {
		return 0
	}
	return r.ServerMemStart.RSS
}

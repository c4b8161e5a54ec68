package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// ReadResults decodes a stream of JSON Results (as `--output json` prints).
func ReadResults(r io.Reader) ([]*Result, error) {
	dec := json.NewDecoder(r)
	var out []*Result
	for {
		var res Result
		err := dec.Decode(&res)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, &res)
	}
}

// Shape names a workload: the mode, connections, pipeline depth, key space
// and contention, everything but the target.
func (r *Result) Shape() string {
	s := fmt.Sprintf("%s %d×%d, %d keys", r.Mode, r.Conns, r.Pipeline, r.Keys)
	if r.HotKeys > 0 {
		s += fmt.Sprintf(", %d hot (%.0f%%)", r.HotKeys, r.Contention*100)
	}
	if r.WaitMS > 0 {
		s += fmt.Sprintf(", wait %dms", r.WaitMS)
	}
	if r.HoldUS > 0 {
		s += fmt.Sprintf(", hold %dµs", r.HoldUS)
	}
	return s
}

type group3 struct {
	shape, label string
	runs         []*Result
}

// Compare prints a Markdown table of results: one row per workload and
// target with the median ops/s over repeated runs, its spread (min – max), the
// median latency quantiles, the highest server RSS peak, and the ratio of the
// first target of that workload to this one (e.g. ticketing ÷ redis).
func Compare(w io.Writer, results []*Result) error {
	var groups []*group3
	find := func(shape, label string) *group3 {
		for _, g := range groups {
			if g.shape == shape && g.label == label {
				return g
			}
		}
		g := &group3{shape: shape, label: label}
		groups = append(groups, g)
		return g
	}
	for _, r := range results {
		g := find(r.Shape(), r.Label)
		g.runs = append(g.runs, r)
	}
	var b strings.Builder
	b.WriteString("| workload | target | runs | ops/s (median) | spread (min – max) | p50 | p99 | max | server CPU/op | server RSS peak | first ÷ this |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	firstOf := map[string]float64{}
	firstLabel := map[string]string{}
	for _, g := range groups {
		ops := make([]float64, len(g.runs))
		p50 := make([]float64, len(g.runs))
		p99 := make([]float64, len(g.runs))
		var mx float64
		var peak int64
		cpu := make([]float64, 0, len(g.runs))
		for i, r := range g.runs {
			ops[i], p50[i], p99[i] = r.OpsPerS, r.Latency.P50, r.Latency.P99
			if r.ServerCPUPerOpUS > 0 {
				cpu = append(cpu, r.ServerCPUPerOpUS)
			}
			mx = max(mx, r.Latency.Max)
			if r.ServerMem != nil {
				peak = max(peak, r.ServerMem.Peak)
			}
		}
		med := median(ops)
		ratio := "—"
		if f, ok := firstOf[g.shape]; ok {
			if med > 0 {
				ratio = fmt.Sprintf("%.2f (%s ÷ %s)", f/med, firstLabel[g.shape], g.label)
			}
		} else {
			firstOf[g.shape], firstLabel[g.shape] = med, g.label
		}
		rss := "—"
		if peak > 0 {
			rss = mb(peak)
		}
		cpuS := "—"
		if len(cpu) > 0 {
			cpuS = fmt.Sprintf("%.2f µs", median(cpu))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s – %s (±%.0f%%) | %s | %s | %s | %s | %s | %s |\n",
			g.shape, g.label, len(g.runs), group(uint64(med)), group(uint64(slices.Min(ops))), group(uint64(slices.Max(ops))),
			spreadPct(ops, med), us(median(p50)), us(median(p99)), us(mx), cpuS, rss, ratio)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spreadPct is half the range as a share of the median.
func spreadPct(v []float64, med float64) float64 {
	if med == 0 || len(v) == 0 {
		return 0
	}
	return (slices.Max(v) - slices.Min(v)) / 2 / med * 100
}

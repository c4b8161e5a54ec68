package server_test

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// scrape GETs /metrics without keeping a connection alive.
func scrape(tb testing.TB, addr string) string {
	tb.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: long}).Get("http://" + addr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// series returns the sorted series names (with labels) of a scrape, and the
// value of each ticketing_ series.
func series(body string) ([]string, map[string]string) {
	var names []string
	vals := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		names = append(names, line[:i])
		if strings.HasPrefix(line, "ticketing_") {
			vals[line[:i]] = line[i+1:]
		}
	}
	sort.Strings(names)
	return names, vals
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" })
	if s.MetricsAddr() == "" {
		t.Fatal("no metrics address")
	}
	c := dial(t, s)
	c.Ping() // registered by the server
	before, vals := series(scrape(t, s.MetricsAddr()))
	for _, m := range []string{
		"ticketing_keys", "ticketing_holders", "ticketing_waiters", "ticketing_connections",
		"ticketing_grants_total", "ticketing_handoffs_total", "ticketing_timeouts_total",
		"ticketing_releases_total", "ticketing_not_holder_total", "ticketing_expiries_total",
		"ticketing_busy_total", "ticketing_errors_total",
	} {
		if _, ok := vals[m]; !ok {
			t.Errorf("metric %s missing", m)
		}
	}
	if vals["ticketing_grants_total"] != "0" || vals["ticketing_connections"] != "1" {
		t.Fatalf("grants %s connections %s", vals["ticketing_grants_total"], vals["ticketing_connections"])
	}
	// Many keys, some queued on: the set of series stays the same.
	var b []byte
	for i := range 500 {
		b = wire.AppendAcquire(b, uint32(i+1), fmt.Sprintf("metric-key-%d", i), 60000, 0)
	}
	c.Write(b)
	for range 500 {
		is(t, c.Read(), wire.StatusGranted)
	}
	c.Write(wire.AppendAcquire(nil, 9999, "metric-key-1", 60000, 60000))
	waitDepth(t, c, "metric-key-1", 1)
	body := scrape(t, s.MetricsAddr())
	after, vals := series(body)
	if strings.Contains(body, "metric-key") {
		t.Fatal("a key name appears in the metrics")
	}
	if vals["ticketing_grants_total"] != "500" || vals["ticketing_keys"] != "500" || vals["ticketing_waiters"] != "1" {
		t.Fatalf("grants %s keys %s waiters %s", vals["ticketing_grants_total"], vals["ticketing_keys"], vals["ticketing_waiters"])
	}
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Fatalf("the series changed with the number of keys: %d before, %d after", len(before), len(after))
	}
}

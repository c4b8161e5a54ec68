package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// collector exports admin `status` as Prometheus metrics, read at scrape
// time (no cost on the request path). The set of series is fixed: no key
// names in labels, however many keys exist.
type collector struct {
	s     *Server
	descs map[string]*prometheus.Desc
}

var metricHelp = []struct{ name, help string }{
	{"keys", "Keys held or queued on."},
	{"holders", "Held keys."},
	{"waiters", "Queued acquires."},
	{"connections", "Client connections past the handshake."},
	{"grants_total", "Grants (first grants and handoffs)."},
	{"handoffs_total", "Grants handed directly to a queued waiter."},
	{"timeouts_total", "Acquires answered T."},
	{"releases_total", "Releases answered O."},
	{"not_holder_total", "Releases and cancels answered N."},
	{"expiries_total", "Leases that ran out."},
	{"busy_total", "Acquires answered B."},
	{"errors_total", "Requests answered E."},
	{"auth_failures_total", "Handshakes answered REJECT AUTH_FAILED (wrong token)."},
	{"handshaking", "Connections still in the handshake (capped apart from max_connections)."},
	{"handshake_evictions_total", "Handshaking connections closed to admit newer ones at a handshake cap."},
	{"draining", "1 while shutting down."},
	{"uptime_seconds", "Seconds since start."},
	{"tls_cert_expiry_seconds", "Seconds until the TLS certificate expires (absent without TLS)."},
}

func newCollector(s *Server) *collector {
	c := &collector{s: s, descs: map[string]*prometheus.Desc{}}
	for _, m := range metricHelp {
		c.descs[m.name] = prometheus.NewDesc("ticketing_"+m.name, m.help, nil, nil)
	}
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Status()
	g := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v)
	}
	k := func(name string, v uint64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, float64(v))
	}
	g("keys", float64(st.Keys))
	g("holders", float64(st.Holders))
	g("waiters", float64(st.Waiters))
	g("connections", float64(st.Connections))
	k("grants_total", st.Counters.Grants)
	k("handoffs_total", st.Counters.Handoffs)
	k("timeouts_total", st.Counters.Timeouts)
	k("releases_total", st.Counters.Releases)
	k("not_holder_total", st.Counters.NotHolder)
	k("expiries_total", st.Counters.Expiries)
	k("busy_total", st.Counters.Busy)
	k("errors_total", st.Counters.Errors)
	k("auth_failures_total", st.Counters.AuthFailures)
	g("handshaking", float64(c.s.handshaking()))
	k("handshake_evictions_total", c.s.handshakeEvictions.Load())
	d := 0.0
	if st.Draining {
		d = 1
	}
	g("draining", d)
	g("uptime_seconds", float64(st.UptimeMS)/1000)
	if c.s.certs != nil {
		g("tls_cert_expiry_seconds", time.Until(c.s.certs.expiry()).Seconds())
	}
}

// bearer requires "Authorization: Bearer <token>" (compared in constant
// time) before next; 401 otherwise.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ticketing metrics"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) startMetrics(ctx context.Context) error {
	if s.cfg.MetricsListen == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(s), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	var h http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if tok := s.cfg.MetricsToken; tok != "" {
		h = bearer(tok, h)
	}
	mux.Handle("/metrics", h)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("server: metrics listen %s: %w", s.cfg.MetricsListen, err)
	}
	s.metrics = &http.Server{Handler: mux, Addr: ln.Addr().String(), ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.metrics.Serve(ln)
	}()
	return nil
}

package faulttest

import (
	"testing"
	"time"

	"github.com/ticketing/ticketing/server/clustertest"
)

func TestSmokeWorkload(t *testing.T) {
	needBinary(t)
	c := clustertest.StartProcs(t, bin, 3, clustertest.ProcOptions{})
	w := &clustertest.Workload{Addrs: c.ClientAddrs()}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := w.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("history: %s; errors %v; fenced writes %d", w.H.Summary(), w.Errors(), w.F.Writes())
	v, notes := w.H.Violations(30*time.Second, "")
	for _, n := range notes {
		t.Log(n)
	}
	for _, x := range v {
		t.Error(x)
	}
	c.WaitSameTables(20 * time.Second)
}

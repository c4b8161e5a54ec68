package main

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/ticketing/ticketing/admin/bench"
	"github.com/ticketing/ticketing/server"
)

func TestScratchHeap(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	s, err := server.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bc := bench.DefaultConfig()
	bc.Addr = s.Addr()
	bc.Conns, bc.Pipeline, bc.HotKeys, bc.Wait, bc.Duration = 100, 1, 1, 30*time.Second, 2*time.Second
	if os.Getenv("SCRATCH") == "pairs" {
		bc.Conns, bc.Pipeline, bc.HotKeys, bc.Wait = 8, 64, 0, 0
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		runtime.GC()
		f, _ := os.Create("/root/bw/heap.prof")
		pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}()
	r, err := bench.Run(context.Background(), bc)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.OpsPerS)
}

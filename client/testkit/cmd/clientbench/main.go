// Command clientbench measures acquire+release pairs through ONE
// client.Client against the server at $TICKETING_ADDR (token in
// $TICKETING_TOKEN, may be empty), for $BENCH_SECONDS (default 5) each with
// 64 callers and with 1 caller. Caller i uses key bench/go/<i>. It prints one
// line per configuration, as every client's `ci.sh bench` does:
//
//	BENCH {"lang":"go","api":"blocking","callers":64,"pairs":123456,"seconds":5.0,"pairs_per_sec":24691.2}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client"
)

func main() {
	addr := os.Getenv("TICKETING_ADDR")
	if addr == "" {
		fmt.Fprintln(os.Stderr, "clientbench: TICKETING_ADDR is not set")
		os.Exit(2)
	}
	secs := 5.0
	if s := os.Getenv("BENCH_SECONDS"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "clientbench: BENCH_SECONDS %q: want a positive number\n", s)
			os.Exit(2)
		}
		secs = v
	}
	var opts []client.Option
	if tok := os.Getenv("TICKETING_TOKEN"); tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	ctx := context.Background()
	cl, err := client.Dial(ctx, strings.Split(addr, ","), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientbench:", err)
		os.Exit(1)
	}
	defer cl.Close()
	for _, callers := range []int{64, 1} {
		pairs, el, err := run(ctx, cl, callers, time.Duration(secs*float64(time.Second)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "clientbench:", err)
			os.Exit(1)
		}
		b, _ := json.Marshal(map[string]any{"lang": "go", "api": "blocking", "callers": callers, "pairs": pairs,
			"seconds": round(el.Seconds(), 3), "pairs_per_sec": round(float64(pairs)/el.Seconds(), 1)})
		fmt.Printf("BENCH %s\n", b)
	}
}

func round(v float64, d int) float64 {
	p := 1.0
	for range d {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

func run(ctx context.Context, cl *client.Client, callers int, d time.Duration) (int64, time.Duration, error) {
	var pairs atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "bench/go/" + strconv.Itoa(i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := cl.Acquire(ctx, key, 10*time.Second, 5*time.Second)
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				pairs.Add(1)
			}
		}()
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	el := time.Since(start)
	if e, ok := firstErr.Load().(error); ok {
		return 0, el, e
	}
	return pairs.Load(), el, nil
}

// Command redisbench runs the lock workload of `ticketing bench --mode pairs`
// against Redis, for scripts/bench-vs-redis.sh: the usual Redis lock recipe
// through a well-known Go client (github.com/redis/go-redis/v9), with the
// same connections, pipeline depth, key space and key names:
//
//	acquire: SET key token NX PX lease_ms   (OK = granted, nil = held: "T")
//	release: EVALSHA of
//	         if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end
//	         (1 = released "O", 0 = not the holder "N")
//
// Each connection keeps pipeline slots; a slot alternates acquire and release
// like Ticketing's, but go-redis pipelines are synchronous, so a connection
// sends one round of pipeline commands (one per slot), waits for all the
// answers, and sends the next round. It prints the same JSON Result as
// `ticketing bench --output json`, so `ticketing bench-report` tabulates both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"

	"github.com/ticketing/ticketing/admin/bench"
)

const releaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Redis address")
	conns := flag.Int("conns", 8, "connections")
	pipeline := flag.Int("pipeline", 64, "commands in flight per connection")
	keys := flag.Int("keys", 10000, "key-space size")
	duration := flag.Duration("duration", 10*time.Second, "measured run time")
	warmup := flag.Duration("warmup", 0, "unmeasured run before the measurement")
	lease := flag.Duration("lease", 30*time.Second, "lease (PX) of every acquire")
	serverPID := flag.Int("server-pid", 0, "redis-server pid: report its peak RSS and CPU")
	label := flag.String("label", "redis", "name of the target in the report")
	flag.Parse()
	res, err := run(*addr, *conns, *pipeline, *keys, *duration, *warmup, *lease, *serverPID, *label)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisbench:", err)
		os.Exit(1)
	}
	if err := res.WriteJSON(os.Stdout); err != nil {
		os.Exit(1)
	}
}

type slot struct {
	releasing bool
	cursor    uint64
	key       string
	token     string
}

type worker struct {
	slots              []slot
	hist, acq          *hdrhistogram.Histogram
	ops, acqs, rels    uint64
	granted, held      uint64
	released, notOwner uint64
	errs               uint64
	seq                uint64
	id                 int
}

func run(addr string, conns, depth, keys int, duration, warmup, lease time.Duration, pid int, label string) (*bench.Result, error) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, PoolSize: conns, MinIdleConns: conns, MaxRetries: -1,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
	})
	defer rdb.Close()
	sha, err := rdb.ScriptLoad(ctx, releaseScript).Result()
	if err != nil {
		return nil, err
	}
	total := uint64(conns * depth)
	var stop atomic.Bool
	var phase atomic.Int32
	if warmup == 0 {
		phase.Store(1)
	}
	workers := make([]*worker, conns)
	errc := make(chan error, conns)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range workers {
		w := &worker{slots: make([]slot, depth), hist: bench.NewHistogram(), acq: bench.NewHistogram(), id: i}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := w.run(ctx, rdb, sha, uint64(i*depth), total, uint64(keys), lease, &stop, &phase); err != nil {
				errc <- err
				stop.Store(true)
			}
		}()
	}
	res := &bench.Result{
		Label: label, Addr: addr, Mode: bench.ModePairs, Conns: conns, Pipeline: depth, Keys: keys,
		LeaseMS: lease.Milliseconds(), Started: time.Now().UTC().Format(time.RFC3339), Outcomes: map[string]uint64{},
	}
	var mem0 *bench.ProcMem
	if pid > 0 {
		m, err := bench.ReadProcMem(pid)
		if err != nil {
			return nil, err
		}
		mem0 = &m
	}
	close(start)
	if warmup > 0 {
		time.Sleep(warmup)
		phase.Store(1)
	}
	t0 := time.Now()
	cpu0, scpu0 := selfCPU(), serverCPU(pid)
	select {
	case <-time.After(duration):
	case err := <-errc:
		stop.Store(true)
		wg.Wait()
		return nil, err
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(t0)
	cpu1, scpu1 := selfCPU(), serverCPU(pid)
	close(errc)
	for err := range errc {
		return nil, err
	}
	hist, acq := bench.NewHistogram(), bench.NewHistogram()
	for _, w := range workers {
		hist.Merge(w.hist)
		acq.Merge(w.acq)
		res.Ops += w.ops
		res.Acquires += w.acqs
		res.Releases += w.rels
		res.Errors += w.errs
		res.Outcomes["G"] += w.granted
		res.Outcomes["T"] += w.held
		res.Outcomes["O"] += w.released
		res.Outcomes["N"] += w.notOwner
	}
	for k, v := range res.Outcomes {
		if v == 0 {
			delete(res.Outcomes, k)
		}
	}
	res.Seconds = elapsed.Seconds()
	res.OpsPerS = float64(res.Ops) / res.Seconds
	res.Latency = bench.Summarize(hist)
	res.AcquireLatency = bench.Summarize(acq)
	if res.Ops > 0 {
		res.BenchCPUSeconds = cpu1 - cpu0
		res.BenchCPUPerOpUS = res.BenchCPUSeconds * 1e6 / float64(res.Ops)
		if pid > 0 {
			res.ServerCPUSeconds = scpu1 - scpu0
			res.ServerCPUPerOpUS = res.ServerCPUSeconds * 1e6 / float64(res.Ops)
		}
	}
	if pid > 0 {
		res.ServerPID = pid
		res.ServerMemStart = mem0
		if m, err := bench.ReadProcMem(pid); err == nil {
			res.ServerMem = &m
		}
	}
	res.Note = "go-redis v9 pipelines: one synchronous round of pipeline commands per connection at a time"
	return res, nil
}

// run drives one connection: rounds of one command per slot.
func (w *worker) run(ctx context.Context, rdb *redis.Client, sha string, first, total, keys uint64, lease time.Duration, stop *atomic.Bool, phase *atomic.Int32) error {
	pipe := rdb.Pipeline()
	cmds := make([]redis.Cmder, len(w.slots))
	leaseMS := lease.Milliseconds()
	measuring := phase.Load() == 1
	for !stop.Load() || w.holding() {
		if !measuring && phase.Load() == 1 {
			measuring = true
			w.hist.Reset()
			w.acq.Reset()
			w.ops, w.acqs, w.rels, w.granted, w.held, w.released, w.notOwner, w.errs = 0, 0, 0, 0, 0, 0, 0, 0
		}
		stopping := stop.Load()
		n := 0
		for i := range w.slots {
			s := &w.slots[i]
			if s.releasing {
				cmds[i] = pipe.EvalSha(ctx, sha, []string{s.key}, s.token)
				n++
				continue
			}
			cmds[i] = nil
			if stopping {
				continue
			}
			g := first + uint64(i)
			k := g + s.cursor*total
			if keys < total {
				k = (g + s.cursor*total) % keys
			} else if k >= keys {
				s.cursor = 0
				k = g
			}
			s.cursor++
			s.key = keyName(k)
			w.seq++
			s.token = strconv.Itoa(w.id) + "-" + strconv.FormatUint(w.seq, 10)
			cmds[i] = pipe.Do(ctx, "set", s.key, s.token, "nx", "px", leaseMS)
			n++
		}
		if n == 0 {
			break
		}
		t := time.Now()
		_, err := pipe.Exec(ctx)
		lat := time.Since(t)
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, c := range cmds {
			if c == nil {
				continue
			}
			s := &w.slots[i]
			w.ops++
			bench.RecordLatency(w.hist, lat)
			if s.releasing {
				w.rels++
				s.releasing = false
				switch v, err := c.(*redis.Cmd).Int64(); {
				case err != nil:
					w.errs++
				case v == 1:
					w.released++
				default:
					w.notOwner++
				}
				continue
			}
			w.acqs++
			bench.RecordLatency(w.acq, lat)
			switch _, err := c.(*redis.Cmd).Result(); {
			case err == nil:
				w.granted++
				s.releasing = true
			case errors.Is(err, redis.Nil):
				w.held++
			default:
				w.errs++
			}
		}
	}
	return nil
}

func (w *worker) holding() bool {
	for i := range w.slots {
		if w.slots[i].releasing {
			return true
		}
	}
	return false
}

// keyName is bench's key for index k: "bench:" and 10 digits.
func keyName(k uint64) string {
	var b [16]byte
	copy(b[:], "bench:")
	for i := 15; i >= 6; i-- {
		b[i] = byte('0' + k%10)
		k /= 10
	}
	return string(b[:])
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func serverCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	s, _ := bench.ReadProcCPU(pid)
	return s
}

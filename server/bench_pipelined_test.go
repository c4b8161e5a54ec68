package server_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// The server request path over real loopback sockets, pipelined like
// `ticketing bench` (docs/benchmarks.md): conns connections, each sending
// rounds of depth acquires on distinct free keys, then the depth releases.
// One op is one acquire or one release. allocs/op counts the whole process
// (server and this raw client, which allocates nothing per op), so it is the
// server's request path allocations: 0.
//
//	go test ./server -run '^$' -bench ServerPipelined -benchmem
func BenchmarkServerPipelined(b *testing.B) {
	for _, sh := range []struct{ conns, depth int }{{1, 64}, {8, 64}} {
		b.Run(fmt.Sprintf("conns=%d/depth=%d", sh.conns, sh.depth), func(b *testing.B) {
			benchPipelined(b, sh.conns, sh.depth)
		})
	}
}

// BenchmarkServerUnpipelined: one connection, one request in flight: the
// round-trip cost per op.
func BenchmarkServerUnpipelined(b *testing.B) { benchPipelined(b, 1, 1) }

func benchPipelined(b *testing.B, conns, depth int) {
	s := startServer(b, func(c *server.Config) { c.Shards = server.DefaultConfig().Shards })
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = rawDial(b, s.Addr())
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	rounds := b.N / (2 * depth * conns)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for ci, nc := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pipelinedRounds(nc, ci, depth, max(rounds, 1)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// pipelinedRounds runs rounds of depth acquires then depth releases on keys
// private to connection ci. It allocates nothing per round.
func pipelinedRounds(nc net.Conn, ci, depth, rounds int) error {
	var key [16]byte
	copy(key[:], "bench/c00/k00000")
	key[7] = byte('0' + ci/10%10)
	key[8] = byte('0' + ci%10)
	wbuf := make([]byte, 0, depth*32)
	rbuf := make([]byte, depth*16)
	tokens := make([]uint64, depth)
	setKey := func(i int) {
		key[11] = byte('0' + i/10000%10)
		key[12] = byte('0' + i/1000%10)
		key[13] = byte('0' + i/100%10)
		key[14] = byte('0' + i/10%10)
		key[15] = byte('0' + i%10)
	}
	for r := 0; r < rounds; r++ {
		wbuf = wbuf[:0]
		for i := 0; i < depth; i++ {
			setKey(i)
			wbuf = wire.AppendRequestHeader(wbuf, wire.OpAcquire, 16, 0, uint32(i), 30000<<32)
			wbuf = append(wbuf, key[:]...)
		}
		if _, err := nc.Write(wbuf); err != nil {
			return err
		}
		if _, err := io.ReadFull(nc, rbuf); err != nil {
			return err
		}
		for i := 0; i < depth; i++ {
			h := rbuf[i*16 : i*16+16]
			if h[0] != byte(wire.StatusGranted) {
				return fmt.Errorf("acquire answered %c (code %d)", h[0], h[1])
			}
			tokens[binary.BigEndian.Uint32(h[4:8])] = binary.BigEndian.Uint64(h[8:16])
		}
		wbuf = wbuf[:0]
		for i := 0; i < depth; i++ {
			setKey(i)
			wbuf = wire.AppendRequestHeader(wbuf, wire.OpRelease, 16, 0, uint32(i), tokens[i])
			wbuf = append(wbuf, key[:]...)
		}
		if _, err := nc.Write(wbuf); err != nil {
			return err
		}
		if _, err := io.ReadFull(nc, rbuf); err != nil {
			return err
		}
		for i := 0; i < depth; i++ {
			if rbuf[i*16] != byte(wire.StatusReleased) {
				return fmt.Errorf("release answered %c", rbuf[i*16])
			}
		}
	}
	return nil
}

func rawDial(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	var b [wire.AuthLen]byte
	if _, err := io.ReadFull(nc, b[:wire.HelloLen]); err != nil {
		tb.Fatal(err)
	}
	h, err := wire.ParseHello(b[:wire.HelloLen])
	if err != nil {
		tb.Fatal(err)
	}
	a := wire.Auth{Role: wire.RoleClient}
	a.Proof = wire.ClientProof(nil, a.Role, &h.Nonce, &a.Nonce)
	if _, err := nc.Write(wire.AppendAuth(b[:0], &a)); err != nil {
		tb.Fatal(err)
	}
	if _, err := io.ReadFull(nc, b[:wire.WelcomeLen]); err != nil {
		tb.Fatal(err)
	}
	if w, err := wire.ParseWelcome(b[:wire.WelcomeLen]); err != nil || !w.Accepted() {
		tb.Fatalf("handshake: %v %v", w, err)
	}
	return nc
}

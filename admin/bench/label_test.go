package bench

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// With ConnLabel a load connection asks for the features and sends L
// (protocol.md §12.3) before its first lock request, and fails against a
// server that does not announce LABELS.
func TestDialLoadSendsTheLabel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		features wire.Features
		wantErr  bool
	}{{"labels", wire.FeatureLabels, false}, {"1.0 server", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan string, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				var h wire.Hello
				c.Write(wire.AppendHello(nil, &h))
				if _, err := io.ReadFull(c, make([]byte, wire.AuthLen)); err != nil {
					return
				}
				c.Write(wire.AppendWelcome(nil, &wire.Welcome{Status: wire.WelcomeAccepted, MaxInflight: 16}))
				var buf []byte
				tmp := make([]byte, 256)
				for {
					n, err := c.Read(tmp)
					buf = append(buf, tmp[:n]...)
					for {
						req, used, perr := wire.ParseRequest(buf)
						if perr != nil || used == 0 {
							break
						}
						switch req.Op {
						case wire.OpPing:
							c.Write(wire.AppendPongFeatures(nil, req.ReqID, tc.features, 0))
						case wire.OpLabel:
							got <- string(req.Key)
							c.Write(wire.AppendStatus(nil, wire.StatusReleased, wire.CodeNone, req.ReqID))
						}
						buf = buf[used:]
					}
					if err != nil {
						return
					}
				}
			}()
			cfg := DefaultConfig()
			cfg.Addr, cfg.ConnLabel, cfg.DialTimeout = ln.Addr().String(), "bench/7 go/test", 5*time.Second
			nc, _, err := dialLoad(context.Background(), &cfg, cfg.Addr)
			if tc.wantErr {
				if err == nil {
					nc.Close()
					t.Fatal("a server without LABELS was given a label")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			select {
			case l := <-got:
				if l != cfg.ConnLabel {
					t.Fatalf("label %q, want %q", l, cfg.ConnLabel)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no L sent")
			}
		})
	}
}

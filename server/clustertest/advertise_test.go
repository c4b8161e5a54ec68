package clustertest

import (
	"context"
	"crypto/rand"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/admin"
	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
)

// A wrong --advertise is caught (issue #13 item 3): each node checks at
// start that its advertised client address reaches itself by the HELLO's
// server nonce, so neither a closed port nor another server that speaks the
// protocol passes; the node's status then cannot grant, naming the address,
// and `health` fails with that reason. The node advertising itself passes.
func TestAdvertiseSelfCheck(t *testing.T) {
	// A foreign server: accepts and sends a well-formed HELLO with a nonce
	// of its own.
	foreign, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	go func() {
		for {
			nc, err := foreign.Accept()
			if err != nil {
				return
			}
			var h wire.Hello
			_, _ = rand.Read(h.Nonce[:])
			_, _ = nc.Write(wire.AppendHello(nil, &h))
			time.Sleep(100 * time.Millisecond)
			nc.Close()
		}
	}()
	closedLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := closedLn.Addr().String()
	closedLn.Close()

	bad := map[int]string{0: foreign.Addr().String(), 1: closed}
	const tok = "advertise-test-token-0123456789abcdef"
	c := Start(t, 3, Options{Token: tok, Mutate: func(i int, cfg *server.Config) {
		cfg.AdminToken = tok + "-admin"
		if a, ok := bad[i]; ok {
			cfg.Cluster.Advertise = a
		}
	}})
	cases := []struct {
		node int
		want string // in status reason and health; "" = passes
	}{
		{0, "another ticketing server answers there"},
		{1, "does not reach this node"},
		{2, ""},
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, tc := range cases {
		n := c.Nodes[tc.node]
		var st wire.StatusReply
		for {
			st = n.Srv.Status()
			if tc.want == "" || strings.Contains(st.Reason, tc.want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if tc.want == "" {
			if strings.Contains(st.Reason, "advertised") || n.Srv.AdvertiseError() != "" {
				t.Errorf("%s advertising itself: %q / %q", n.ID, st.Reason, n.Srv.AdvertiseError())
			}
			continue
		}
		if st.CanGrant || !strings.Contains(st.Reason, bad[tc.node]) || !strings.Contains(st.Reason, tc.want) {
			t.Errorf("%s advertising %s: can_grant %v reason %q, want false naming the address and %q", n.ID, bad[tc.node], st.CanGrant, st.Reason, tc.want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hr := admin.Health(ctx, []string{n.Client}, client.WithAdminToken(tok+"-admin"))
		cancel()
		if len(hr) != 1 || hr[0].Healthy || !strings.Contains(hr[0].Reason, tc.want) {
			t.Errorf("health of %s: %+v, want a failure naming %q", n.ID, hr, tc.want)
		}
	}
}

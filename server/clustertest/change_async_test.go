package clustertest

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// A changing admin command runs off the connection's reader (issue #36
// item 6): while add-node --voter waits for a learner that never catches up
// (nothing listens at its peer address: up to 60 s), the same connection's
// later requests are answered, before it. Its req_id stays outstanding
// meanwhile (§2.1 check 3). Before the fix the reader ran the change itself
// and answered nothing else until it ended (this test's 20 s bound).
func TestChangingAdminCommandDoesNotHoldUpItsConnection(t *testing.T) {
	c := Start(t, 3, Options{})
	l := c.WaitLeader(10 * time.Second)

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", l.Client)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	dl, _ := ctx.Deadline()
	_ = nc.SetDeadline(dl)
	if _, _, err := wire.ClientHandshake(nc, wire.RoleAdmin, nil); err != nil {
		t.Fatal(err)
	}
	add, _ := json.Marshal(map[string]any{
		"cmd": wire.CmdAddNode, "id": "never-caught-up", "peer_addr": deadAddr,
		"client_addr": "127.0.0.1:1", "voter": true,
	})
	status, _ := json.Marshal(map[string]any{"cmd": wire.CmdStatus})
	var b []byte
	b = wire.AppendQuery(b, 1, add)
	b = wire.AppendQuery(b, 1, status) // req_id 1 is still in use
	b = wire.AppendQuery(b, 2, status)
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}

	var buf []byte
	var tmp [4096]byte
	next := func() wire.Response {
		t.Helper()
		for {
			resp, n, err := wire.ParseResponse(buf)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				resp.Payload = append([]byte(nil), resp.Payload...)
				buf = buf[n:]
				return resp
			}
			m, err := nc.Read(tmp[:])
			if err != nil {
				t.Fatalf("no answer while add-node runs: %v", err)
			}
			buf = append(buf, tmp[:m]...)
		}
	}
	if r := next(); r.ReqID != 1 || r.Status != wire.StatusError || r.Code != wire.CodeDuplicateReqID {
		t.Fatalf("first answer: %c %v req %d %q, want E DUPLICATE_REQ_ID for req 1 (add-node outstanding)", r.Status, r.Code, r.ReqID, r.Payload)
	}
	r := next()
	if r.ReqID != 2 || r.Status != wire.StatusAdmin {
		t.Fatalf("second answer: %c %v req %d %q, want J status for req 2", r.Status, r.Code, r.ReqID, r.Payload)
	}
	var st wire.StatusReply
	if err := json.Unmarshal(r.Payload, &st); err != nil || st.Role != wire.NodeLeader {
		t.Fatalf("status: %+v %v", st, err)
	}
}

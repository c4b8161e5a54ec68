package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// TestFSMUnknownCommandFailsLoudly: an entry with a command this binary does
// not know (a newer version's, a corrupt log) is never skipped silently —
// that would leave this node's table apart from the others' — and nothing of
// the entry is applied before it stops.
func TestFSMUnknownCommandFailsLoudly(t *testing.T) {
	for _, tc := range []struct {
		name string
		data func() []byte
		want string
	}{
		{"unknown op after a valid one", func() []byte {
			return AppendBatch(nil, &Batch{Time: 1e18, Cmds: []Command{
				{Op: OpAcquire, Conn: ConnID(1, 1), ReqID: 1, Key: []byte("k"), Arg: wire.AcquireArg(1000, 0)},
				{Op: 99, Conn: 1},
			}})
		}, "unknown command op 99"},
		{"op 0", func() []byte { return AppendBatch(nil, &Batch{Cmds: []Command{{Op: 0}}}) }, "unknown command op 0"},
		{"garbage", func() []byte { return []byte{1, 2, 3} }, "malformed log entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out recorder
			f := NewFSM(locktable.Limits{MaxKeys: 10, MaxWaiters: 10, MaxWaitersPerKey: 10}, &out)
			f.tokens.Restore(100) // a started domain: an acquire would grant
			func() {
				defer func() {
					r := recover()
					if r == nil || !strings.Contains(r.(string), tc.want) {
						t.Fatalf("recovered %v, want a panic naming %q", r, tc.want)
					}
				}()
				f.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Data: tc.data()})
			}()
			if len(out) != 0 || f.Applied() != 0 {
				t.Fatalf("part of the entry was applied: %+v, applied %d", out, f.Applied())
			}
		})
	}
	if _, err := DecodeBatch(AppendBatch(nil, &Batch{Cmds: []Command{{Op: opMax + 1}}})); !errors.Is(err, errBadBatch) {
		t.Fatalf("DecodeBatch: %v", err)
	}
}

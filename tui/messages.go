package tui

import (
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// tickMsg is the clock: it carries the current time, and every interval one
// arrives (from Config.Tick). It is the only way time enters the model.
type tickMsg time.Time

// pollMsg is the answer of one node to one poll: its `status` and, when that
// succeeded, its `locks` for prefix. err is set when either query failed.
type pollMsg struct {
	addr   string
	at     time.Time // the tick that started the poll
	prefix string    // the prefix the locks were asked for
	status wire.StatusReply
	locks  wire.LocksReply
	err    error
	// members is the leader's membership (a cluster leader, through a
	// MemberSource); hasMembers says it was asked and answered.
	members    []wire.Member
	hasMembers bool
}

package wire

// Admin query commands and reply shapes (protocol.md §8). They are part of the
// wire contract, so both the server (which encodes them) and the client side
// (admin/, tui/, cmd/) use these one definitions. Times are integers in ms
// (_ms) or µs (_us); counters are cumulative since start. Replies may carry
// more members than listed here; decoders ignore unknown members.

// Admin command names (the `cmd` member of a Q body).
const (
	CmdStatus         = "status"
	CmdLocks          = "locks"
	CmdTime           = "time"
	CmdMembers        = "members"
	CmdAddNode        = "add-node"
	CmdRemoveNode     = "remove-node"
	CmdTransferLeader = "transfer-leader"
)

// Node roles in `status` and `members`.
const (
	NodeSingle   = "single"
	NodeLeader   = "leader"
	NodeFollower = "follower"
	NodeLearner  = "learner"
	NodeRemoved  = "removed" // this node learned it was removed from the configuration
)

// Locks query bounds (§8).
const (
	LocksDefaultLimit = 100
	LocksMaxLimit     = 10000
)

// AdminCounters are the cumulative counters of `status`: the one list of the
// server's counters. The lock table counts the events of its own (every
// member but Errors and AuthFailures, server/locktable Counters); the server
// adds the rest; admin/bench reports the change over a run.
type AdminCounters struct {
	Grants    uint64 `json:"grants"`
	Handoffs  uint64 `json:"handoffs"`
	Timeouts  uint64 `json:"timeouts"`
	Releases  uint64 `json:"releases"`
	NotHolder uint64 `json:"not_holder"`
	Expiries  uint64 `json:"expiries"`
	Busy      uint64 `json:"busy"`
	Errors    uint64 `json:"errors"`
	Cancels   uint64 `json:"cancels"`
	// AuthFailures counts handshakes answered REJECT AUTH_FAILED (a wrong
	// token): token guessing shows here.
	AuthFailures uint64 `json:"auth_failures"`
}

// Add accumulates o into c.
func (c *AdminCounters) Add(o AdminCounters) {
	c.Grants += o.Grants
	c.Handoffs += o.Handoffs
	c.Timeouts += o.Timeouts
	c.Releases += o.Releases
	c.NotHolder += o.NotHolder
	c.Expiries += o.Expiries
	c.Busy += o.Busy
	c.Errors += o.Errors
	c.Cancels += o.Cancels
	c.AuthFailures += o.AuthFailures
}

// Since is the change from an earlier reading b to c.
func (c AdminCounters) Since(b AdminCounters) AdminCounters {
	return AdminCounters{
		Grants: c.Grants - b.Grants, Handoffs: c.Handoffs - b.Handoffs, Timeouts: c.Timeouts - b.Timeouts,
		Releases: c.Releases - b.Releases, NotHolder: c.NotHolder - b.NotHolder, Expiries: c.Expiries - b.Expiries,
		Busy: c.Busy - b.Busy, Errors: c.Errors - b.Errors, Cancels: c.Cancels - b.Cancels,
		AuthFailures: c.AuthFailures - b.AuthFailures,
	}
}

// StatusReply is the reply to `status`.
type StatusReply struct {
	NodeID      string        `json:"node_id"`
	Role        string        `json:"role"`   // single, leader, follower, learner
	Leader      string        `json:"leader"` // leader's client address, "" when unknown
	UptimeMS    int64         `json:"uptime_ms"`
	Keys        int64         `json:"keys"`    // keys held or queued on
	Holders     int64         `json:"holders"` // held keys
	Waiters     int64         `json:"waiters"` // queued acquires
	Connections int64         `json:"connections"`
	Counters    AdminCounters `json:"counters"`

	// Extensions (not required by §8).
	Version        string `json:"version,omitempty"`
	Draining       bool   `json:"draining"`
	MaxKeys        int64  `json:"max_keys"`
	MaxWaiters     int64  `json:"max_waiters"`
	MaxConnections int64  `json:"max_connections"`
	// CanGrant is false when a fresh acquire on a free key would be refused
	// (draining, at max_keys, at max_connections, no quorum, clock unhealthy).
	CanGrant bool   `json:"can_grant"`
	Reason   string `json:"reason,omitempty"` // why CanGrant is false
	// RecoveringUntilMS is set while a single node with a data dir is in
	// its restart grace after an unclean stop (acquires answered B
	// RECOVERING): the end of the grace, Unix ms. Absent otherwise.
	RecoveringUntilMS int64 `json:"recovering_until_ms,omitempty"`

	// Cluster extensions (issue #7); absent on a single node.
	LeaderID      string       `json:"leader_id,omitempty"`
	Term          uint64       `json:"term,omitempty"`
	CommitIndex   uint64       `json:"commit_index,omitempty"`
	AppliedIndex  uint64       `json:"applied_index,omitempty"`
	LastIndex     uint64       `json:"last_index,omitempty"`
	LastContactMS int64        `json:"last_contact_ms,omitempty"` // since the last contact with the leader (followers)
	Incarnation   uint32       `json:"incarnation,omitempty"`     // this process's id; changes on every start
	Durable       bool         `json:"durable,omitempty"`         // raft state on disk
	ClientAddr    string       `json:"client_addr,omitempty"`     // this node's advertised client address
	Clock         *ClockStatus `json:"clock,omitempty"`
}

// ClockStatus is a cluster node's clock health (issue #7): the leader
// samples every other node; followers report Sampled false.
type ClockStatus struct {
	Healthy     bool        `json:"healthy"`
	Reason      string      `json:"reason,omitempty"`
	MaxSkewMS   int64       `json:"max_skew_ms"`
	Sampled     bool        `json:"sampled"`
	LocalUnixUS int64       `json:"local_unix_us"`
	Nodes       []ClockNode `json:"nodes"`
}

// ClockNode is one node's clock as the leader measured it: offset = its
// clock − the leader's, bound = |offset| + rtt/2.
type ClockNode struct {
	ID       string `json:"id"`
	OffsetUS int64  `json:"offset_us"`
	BoundUS  int64  `json:"bound_us"`
	RTTUS    int64  `json:"rtt_us"`
	AgeMS    int64  `json:"age_ms"`
	Healthy  bool   `json:"healthy"`
	Err      string `json:"err,omitempty"`
}

// Measured reports whether the leader ever sampled this node's clock (a
// sample has a round trip; a node only ever tried has none, and its offset
// and bound mean nothing).
func (c *ClockNode) Measured() bool { return c.RTTUS > 0 }

// AddNodeQuery is the body of `add-node`.
type AddNodeQuery struct {
	Cmd        string `json:"cmd"`
	ID         string `json:"id"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
	Voter      bool   `json:"voter"`
}

// LeaderReply is the reply to `transfer-leader`.
type LeaderReply struct {
	Leader string `json:"leader"`
}

// LockEntry is one key of a `locks` reply.
type LockEntry struct {
	Key               string `json:"key"`
	Token             uint64 `json:"token"`
	LeaseRemainingMS  int64  `json:"lease_remaining_ms"`
	QueueDepth        int    `json:"queue_depth"`
	OldestWaiterAgeMS int64  `json:"oldest_waiter_age_ms"`
	// Protocol 1.1 (§12.3): who holds it and who waits.
	Holder  *ConnInfo    `json:"holder,omitempty"`
	Set     []string     `json:"set,omitempty"`     // every key of the holding key set, in S order
	Waiters []WaiterInfo `json:"waiters,omitempty"` // the first 8 waiters, in queue order
}

// ConnInfo names a connection in `locks` (§12.3): its label ("" when none)
// and its remote address as the server sees it ("" when unknown).
type ConnInfo struct {
	Label string `json:"label"`
	Addr  string `json:"addr"`
}

// WaiterInfo is one waiter in a `locks` row (§12.3).
type WaiterInfo struct {
	Label    string   `json:"label"`
	Addr     string   `json:"addr"`
	WaitedMS int64    `json:"waited_ms"`
	Set      []string `json:"set,omitempty"`
}

// LocksQuery is the body of a `locks` query.
type LocksQuery struct {
	Cmd    string `json:"cmd"`
	Prefix string `json:"prefix,omitempty"`
	Limit  int    `json:"limit,omitempty"` // default 100, max 10,000
}

// LocksReply is the reply to `locks`: keys sorted by queue_depth descending, then key.
type LocksReply struct {
	Total     int         `json:"total"`
	Truncated bool        `json:"truncated"`
	Locks     []LockEntry `json:"locks"`
	// ClockUnverified: this node is a cluster leader whose clock is not
	// verified within max_clock_skew: lease_remaining_ms is as it will
	// enforce it, which may differ from the holder's own deadline.
	ClockUnverified bool `json:"clock_unverified,omitempty"`
}

// TimeReply is the reply to `time`.
type TimeReply struct {
	UnixUS int64 `json:"unix_us"`
}

// Member is one entry of `members`.
type Member struct {
	ID            string `json:"id"`
	ClientAddr    string `json:"client_addr"`
	PeerAddr      string `json:"peer_addr"`
	Role          string `json:"role"`
	Voter         bool   `json:"voter"`
	LastContactMS int64  `json:"last_contact_ms"`
}

// MembersReply is the reply to `members`, `add-node` and `remove-node`.
type MembersReply struct {
	Members []Member `json:"members"`
}

package server

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// adminQuery is the union of the arguments of every §8 command. Pointer
// fields tell "absent" from zero.
type adminQuery struct {
	Cmd    *string `json:"cmd"`
	Prefix *string `json:"prefix"`
	Limit  *int    `json:"limit"`
	// cluster membership
	ID         *string `json:"id"`
	PeerAddr   *string `json:"peer_addr"`
	ClientAddr *string `json:"client_addr"`
	Voter      *bool   `json:"voter"`
}

// adminQueryFields are the JSON member names of adminQuery.
var adminQueryFields = func() map[string]bool {
	t := reflect.TypeFor[adminQuery]()
	names := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	return names
}()

// decodeAdminQuery decodes a Q body (§2.1 check 8): a JSON object with a
// string member "cmd". Member names match exactly: encoding/json alone folds
// case ("CMD" would set cmd), so the object is split into members first and
// only those named exactly like a field are decoded.
func decodeAdminQuery(body []byte, q *adminQuery) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		return false
	}
	exact := make(map[string]json.RawMessage, len(m))
	for name, raw := range m {
		if adminQueryFields[name] {
			exact[name] = raw
		}
	}
	b, err := json.Marshal(exact)
	if err != nil || json.Unmarshal(b, q) != nil {
		return false
	}
	return q.Cmd != nil
}

func isChanging(cmd string) bool {
	return cmd == wire.CmdAddNode || cmd == wire.CmdRemoveNode || cmd == wire.CmdTransferLeader
}

func knownCmd(cmd string) bool {
	switch cmd {
	case wire.CmdStatus, wire.CmdLocks, wire.CmdTime, wire.CmdMembers:
		return true
	}
	return isChanging(cmd)
}

// query answers an admin query (protocol.md §2.1 checks 4, 5, 8 and §8).
func (c *conn) query(req *wire.Request) {
	if c.role == wire.RoleClient {
		c.replyError(req.ReqID, wire.CodeNotPermitted)
		return
	}
	if req.KeyLen != 0 || req.ArgLow() != 0 || req.BodyLen() == 0 {
		c.replyErrorMsg(req.ReqID, wire.CodeBadAdmin, "Q header: key_len and bytes 12..16 must be 0, body_len 1..65536")
		return
	}
	var q adminQuery
	if !decodeAdminQuery(req.Body, &q) {
		c.replyErrorMsg(req.ReqID, wire.CodeBadAdmin, "body must be a JSON object with a string member \"cmd\"")
		return
	}
	cmd := *q.Cmd
	if !knownCmd(cmd) {
		c.replyErrorMsg(req.ReqID, wire.CodeBadAdmin, "unknown cmd")
		return
	}
	if isChanging(cmd) {
		if c.role != wire.RoleAdmin {
			c.replyError(req.ReqID, wire.CodeNotPermitted)
			return
		}
		c.clusterChange(req.ReqID, cmd, &q)
		return
	}
	var reply any
	switch cmd {
	case wire.CmdStatus:
		st := c.s.Status()
		reply = &st
	case wire.CmdTime:
		reply = &wire.TimeReply{UnixUS: c.s.now().UnixMicro()}
	case wire.CmdMembers:
		ms, err := c.s.lock.members()
		if err != nil {
			c.replyErrorMsg(req.ReqID, wire.CodeInternal, err.Error())
			return
		}
		reply = &wire.MembersReply{Members: ms}
	case wire.CmdLocks:
		limit := wire.LocksDefaultLimit
		if q.Limit != nil {
			limit = *q.Limit
		}
		if limit < 1 || limit > wire.LocksMaxLimit {
			c.replyErrorMsg(req.ReqID, wire.CodeBadAdmin, fmt.Sprintf("limit must be 1..%d", wire.LocksMaxLimit))
			return
		}
		prefix := ""
		if q.Prefix != nil {
			prefix = *q.Prefix
		}
		lr := c.s.Locks(prefix, limit)
		reply = &lr
	}
	out, err := json.Marshal(reply)
	if err != nil || len(out) > wire.MaxAdminReply {
		c.replyErrorMsg(req.ReqID, wire.CodeInternal, "reply too large")
		return
	}
	c.wbuf = wire.AppendAdmin(c.wbuf, req.ReqID, out)
}

// Status is the admin `status` reply of this node (§8).
func (s *Server) Status() wire.StatusReply {
	var ctr locktable.Counters
	var holders int64
	s.lock.eachTable(func(t *locktable.Table, _ int64) {
		ctr.Add(t.Counters())
		holders += int64(t.Holders())
	})
	ctr.Busy += s.busyExtra.Load()
	ctr.Errors = s.errorsCount.Load()
	ctr.AuthFailures = s.authFailCount.Load()
	keys, waiters := s.lock.counts()
	st := wire.StatusReply{
		NodeID:         s.cfg.NodeID,
		Role:           wire.NodeSingle,
		UptimeMS:       time.Since(s.start).Milliseconds(),
		Keys:           keys,
		Holders:        holders,
		Waiters:        waiters,
		Connections:    s.live.Load(),
		Counters:       ctr,
		Version:        s.cfg.Version,
		Draining:       s.draining.Load(),
		MaxKeys:        int64(s.cfg.MaxKeys),
		MaxWaiters:     int64(s.cfg.MaxWaiters),
		MaxConnections: int64(s.cfg.MaxConnections),
		CanGrant:       true,
	}
	s.lock.status(&st)
	rec, until := s.grace.recovering(s.nanotime())
	if rec {
		st.RecoveringUntilMS = until.UnixMilli()
	}
	switch {
	case st.Draining:
		st.CanGrant, st.Reason = false, "draining (shutting down)"
	case rec:
		st.CanGrant, st.Reason = false, "RECOVERING after an unclean stop: acquires answered busy until "+until.UTC().Format(time.RFC3339)+" (the end of every lease granted before the stop)"
	case st.Keys >= st.MaxKeys:
		st.CanGrant, st.Reason = false, "at max_keys"
	case s.live.Load() >= int64(s.cfg.MaxConnections):
		st.CanGrant, st.Reason = false, "at max_connections"
	default:
		if r := s.lock.cantGrant(&st); r != "" {
			st.CanGrant, st.Reason = false, r
		}
	}
	return st
}

// Locks is the admin `locks` reply: held keys starting with prefix, sorted by
// queue depth descending then key, at most limit of them. Memory is bounded by
// limit however many keys exist.
func (s *Server) Locks(prefix string, limit int) wire.LocksReply {
	h := &lockHeap{}
	total := 0
	s.lock.eachTable(func(t *locktable.Table, now int64) {
		t.Locks(now, prefix, func(li locktable.LockInfo) bool {
			total++
			e := wire.LockEntry{
				Key: li.Key, Token: li.Token, LeaseRemainingMS: li.LeaseRemainingMS,
				QueueDepth: li.QueueDepth, OldestWaiterAgeMS: li.OldestWaiterAgeMS,
				Set: li.Set,
			}
			label, addr := "", ""
			if li.Token != 0 {
				label, addr = s.connLabel(li.HolderConn)
			}
			e.Holder = &wire.ConnInfo{Label: label, Addr: addr}
			for _, w := range li.Waiters {
				label, addr := s.connLabel(w.Conn)
				e.Waiters = append(e.Waiters, wire.WaiterInfo{Label: label, Addr: addr, WaitedMS: w.WaitedMS, Set: w.Set})
			}
			e.LeaseRemainingMS = s.lock.leaseRemainingMS(t, &li, now)
			if h.Len() < limit {
				heap.Push(h, e)
			} else if before(e, (*h)[0]) {
				(*h)[0] = e
				heap.Fix(h, 0)
			}
			return true
		})
	})
	out := make([]wire.LockEntry, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(wire.LockEntry)
	}
	return wire.LocksReply{Total: total, Truncated: total > len(out), Locks: out, ClockUnverified: s.lock.clockUnverified()}
}

// connLabel is the label and remote address of connection id: the open
// connection's, else what the cluster replicated for it (a connection of
// another node, or of an earlier leader: §12.3), else "".
func (s *Server) connLabel(id uint64) (label, addr string) {
	s.connsMu.RLock()
	c := s.conns[id]
	s.connsMu.RUnlock()
	if c == nil {
		label, addr, _ = s.lock.replicatedLabel(id)
		return label, addr
	}
	return c.labelAddr()
}

// before is the `locks` order: deeper queue first, then key ascending.
func before(a, b wire.LockEntry) bool {
	if a.QueueDepth != b.QueueDepth {
		return a.QueueDepth > b.QueueDepth
	}
	return a.Key < b.Key
}

// lockHeap keeps the best `limit` entries with the worst at the root.
type lockHeap []wire.LockEntry

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return before(h[j], h[i]) }
func (h lockHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lockHeap) Push(x any)        { *h = append(*h, x.(wire.LockEntry)) }
func (h *lockHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// clusterChange answers add-node, remove-node or transfer-leader (§8).
// The change itself may block for up to 60 s (a membership change commits
// through the raft log; a transfer waits for the new leader), so it runs on
// its own goroutine: the reader goes on with the connection's other
// requests, and the answer is delivered like a queued acquire's. Its req_id
// is outstanding meanwhile (§2.1 check 3).
func (c *conn) clusterChange(reqID uint32, cmd string, q *adminQuery) {
	run, err := c.s.lock.change(cmd, q)
	var mv *movedError
	switch {
	case errors.As(err, &mv):
		c.wbuf = wire.AppendMoved(c.wbuf, reqID, mv.leader)
		return
	case err != nil:
		c.replyErrorMsg(reqID, wire.CodeBadAdmin, err.Error())
		return
	}
	c.addChange(reqID)
	c.s.wg.Add(1)
	go func() {
		defer c.s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		go func() {
			select {
			case <-c.s.closed: // Shutdown: stop waiting for the change
				cancel()
			case <-ctx.Done():
			}
		}()
		reply, err := run(ctx)
		var frame []byte
		if err != nil {
			c.s.errorsCount.Add(1)
			frame = wire.AppendError(nil, reqID, wire.CodeBadAdmin, err.Error())
		} else {
			out, _ := json.Marshal(reply)
			frame = wire.AppendAdmin(nil, reqID, out)
		}
		c.deliverChange(reqID, frame)
	}()
}

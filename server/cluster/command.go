// Package cluster puts the lock table behind hashicorp/raft: lock commands
// (acquire, release, cancel, expiry, wait timeout, connection gone) carry the
// leader's time and go through the raft log in batches (group commit); every
// node applies them to the same server/locktable; only the leader answers
// connections and decides expiries. See docs/architecture.md "Cluster".
package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Op is a replicated command kind.
type Op uint8

// Replicated commands. Lock ops mirror the wire ops; the rest are the
// leader's decisions (expiry, wait timeout, a connection gone) and
// bookkeeping (leader start, node metadata).
const (
	OpAcquire     Op = 1
	OpRelease     Op = 2
	OpCancel      Op = 3
	OpExpire      Op = 4  // key, token
	OpWaitTimeout Op = 5  // owner
	OpDropConn    Op = 6  // owner.Conn
	OpLeaderStart Op = 7  // key = leader meta (JSON), arg = incarnation
	OpNodeMeta    Op = 8  // key = node meta (JSON)
	OpAcquireSet  Op = 9  // key = count ‖ the S body (protocol.md §12.2), arg as OpAcquire
	OpReleaseSet  Op = 10 // key = count ‖ the X body, arg = token
	OpLabel       Op = 11 // conn's label (protocol.md §12.3): key = label_len u8 ‖ label ‖ remote addr (labels.go)
	opMax         Op = OpLabel
)

// Command is one replicated command. Conn values carry the owning node's
// incarnation in their top 24 bits (see IncarnationOf).
type Command struct {
	Op    Op
	Conn  uint64
	ReqID uint32
	Key   []byte
	Arg   uint64 // the request's arg (wire.AcquireArg, the token, wire.CancelArg); expire: token
}

// IncarnationBits is how many top bits of a connection id name the node
// process (its incarnation) that owns the connection.
const IncarnationBits = 24

// IncarnationOf returns the incarnation part of a connection id.
func IncarnationOf(conn uint64) uint32 { return uint32(conn >> (64 - IncarnationBits)) }

// ConnID makes a connection id from an incarnation and a local counter.
func ConnID(incarnation uint32, local uint64) uint64 {
	return uint64(incarnation)<<(64-IncarnationBits) | local&(1<<(64-IncarnationBits)-1)
}

// Batch is one raft log entry: commands applied in order at one instant.
type Batch struct {
	Time int64 // leader's wall clock, ns since the Unix epoch
	Cmds []Command
}

const batchMagic = 0xB1

var errBadBatch = errors.New("cluster: malformed log entry")

// AppendBatch encodes b: magic, time, count, then per command
// op u8 | conn u64 | req_id u32 | arg u64 | key_len u16 | key.
// It grows dst once, to the exact size: raft keeps the entry's bytes in
// its log, so spare capacity would be held with them.
func AppendBatch(dst []byte, b *Batch) []byte {
	n := 13
	for i := range b.Cmds {
		n += 23 + len(b.Cmds[i].Key)
	}
	if dst == nil {
		dst = make([]byte, 0, n)
	} else {
		dst = slices.Grow(dst, n)
	}
	dst = append(dst, batchMagic)
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.Time))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b.Cmds)))
	for i := range b.Cmds {
		dst = appendCommand(dst, &b.Cmds[i])
	}
	return dst
}

// batchHeaderLen is the entry's header: magic, time, count.
const batchHeaderLen = 13

// appendCommand appends one command's encoding (AppendBatch's, after the
// header).
func appendCommand(dst []byte, c *Command) []byte {
	dst = append(dst, byte(c.Op))
	dst = binary.BigEndian.AppendUint64(dst, c.Conn)
	dst = binary.BigEndian.AppendUint32(dst, c.ReqID)
	dst = binary.BigEndian.AppendUint64(dst, c.Arg)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(c.Key)))
	return append(dst, c.Key...)
}

// putBatchHeader writes the header of an entry of n commands at time t
// into dst[:batchHeaderLen].
func putBatchHeader(dst []byte, t int64, n int) {
	dst[0] = batchMagic
	binary.BigEndian.PutUint64(dst[1:9], uint64(t))
	binary.BigEndian.PutUint32(dst[9:13], uint32(n))
}

// commandsPrefix returns how many bytes of p, a sequence of encoded
// commands (appendCommand's), hold its first n commands.
func commandsPrefix(p []byte, n int) int {
	off := 0
	for range n {
		off += 23 + int(binary.BigEndian.Uint16(p[off+21:off+23]))
	}
	return off
}

// DecodeBatch decodes an entry made by AppendBatch. Keys alias data.
func DecodeBatch(data []byte) (Batch, error) { return decodeBatchInto(nil, data) }

// decodeBatchInto is DecodeBatch with the commands decoded into cmds[:0]
// when it has room (the state machine reuses one slice for every entry).
func decodeBatchInto(cmds []Command, data []byte) (Batch, error) {
	var b Batch
	if len(data) < 13 || data[0] != batchMagic {
		return b, errBadBatch
	}
	b.Time = int64(binary.BigEndian.Uint64(data[1:9]))
	n := binary.BigEndian.Uint32(data[9:13])
	p := data[13:]
	if uint64(n) > uint64(len(p))/23 {
		return b, fmt.Errorf("%w: %d commands in %d bytes", errBadBatch, n, len(p))
	}
	if uint64(cap(cmds)) >= uint64(n) {
		b.Cmds = cmds[:n]
	} else {
		b.Cmds = make([]Command, n)
	}
	for i := range b.Cmds {
		if len(p) < 23 {
			return b, errBadBatch
		}
		c := &b.Cmds[i]
		c.Op = Op(p[0])
		if c.Op < OpAcquire || c.Op > opMax {
			return b, fmt.Errorf("%w: unknown command op %d", errBadBatch, c.Op)
		}
		c.Conn = binary.BigEndian.Uint64(p[1:9])
		c.ReqID = binary.BigEndian.Uint32(p[9:13])
		c.Arg = binary.BigEndian.Uint64(p[13:21])
		kl := int(binary.BigEndian.Uint16(p[21:23]))
		p = p[23:]
		if len(p) < kl {
			return b, errBadBatch
		}
		c.Key = p[:kl:kl]
		p = p[kl:]
	}
	if len(p) != 0 {
		return b, errBadBatch
	}
	return b, nil
}

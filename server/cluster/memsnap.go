package cluster

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// memSnapshotStore keeps a node's latest snapshot in memory (a node
// without a data dir), in chunks of snapChunk bytes. raft's
// InmemSnapshotStore writes into one bytes.Buffer: its doublings leave up
// to twice the snapshot's size allocated and as much again as garbage, for
// a snapshot of every held lock (docs/benchmarks.md "Cluster throughput
// and memory"). A snapshot becomes the latest only when its sink closes:
// one that failed (Cancel) never replaces a good one.
type memSnapshotStore struct {
	mu     sync.Mutex
	latest *memSnapshot // nil until the first snapshot closes
}

// Chunks double from snapFirstChunk up to snapChunk bytes: a node
// snapshots several times a second under load (every SnapshotBytes of
// log), mostly a few held keys, and a full MiB for each of those
// snapshots was most of a node's allocation and so of its collections
// (docs/benchmarks.md "Cluster").
const (
	snapChunk      = 1 << 20
	snapFirstChunk = 16 << 10
)

type memSnapshot struct {
	meta   raft.SnapshotMeta
	chunks [][]byte // immutable once closed
}

func newMemSnapshotStore() *memSnapshotStore { return &memSnapshotStore{} }

// Create implements raft.SnapshotStore.
func (m *memSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("cluster: unsupported snapshot version %d", version)
	}
	return &memSnapshotSink{store: m, snap: &memSnapshot{meta: raft.SnapshotMeta{
		Version: version, ID: fmt.Sprintf("%d-%d", term, index), Index: index, Term: term,
		Configuration: configuration, ConfigurationIndex: configurationIndex,
	}}}, nil
}

// List implements raft.SnapshotStore: the latest snapshot, if any.
func (m *memSnapshotStore) List() ([]*raft.SnapshotMeta, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.latest == nil {
		return []*raft.SnapshotMeta{}, nil
	}
	meta := m.latest.meta
	return []*raft.SnapshotMeta{&meta}, nil
}

// Open implements raft.SnapshotStore.
func (m *memSnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	m.mu.Lock()
	s := m.latest
	m.mu.Unlock()
	if s == nil || s.meta.ID != id {
		return nil, nil, fmt.Errorf("cluster: no snapshot %q", id)
	}
	rs := make([]io.Reader, len(s.chunks))
	for i, c := range s.chunks {
		rs[i] = bytes.NewReader(c)
	}
	meta := s.meta
	return &meta, io.NopCloser(io.MultiReader(rs...)), nil
}

type memSnapshotSink struct {
	store *memSnapshotStore
	snap  *memSnapshot
	done  bool
}

func (s *memSnapshotSink) Write(p []byte) (int, error) {
	if s.done {
		return 0, fmt.Errorf("cluster: write to a closed snapshot")
	}
	n := len(p)
	for len(p) > 0 {
		last := len(s.snap.chunks) - 1
		if last < 0 || len(s.snap.chunks[last]) == cap(s.snap.chunks[last]) {
			size := snapChunk
			if last < 0 {
				size = snapFirstChunk
			} else if c := 2 * cap(s.snap.chunks[last]); c < snapChunk {
				size = c
			}
			s.snap.chunks = append(s.snap.chunks, make([]byte, 0, size))
			last++
		}
		c := s.snap.chunks[last]
		k := min(len(p), cap(c)-len(c))
		s.snap.chunks[last] = append(c, p[:k]...)
		p = p[k:]
	}
	s.snap.meta.Size += int64(n)
	return n, nil
}

// Close makes the snapshot the store's latest (the previous one is freed).
func (s *memSnapshotSink) Close() error {
	if s.done {
		return nil
	}
	s.done = true
	if last := len(s.snap.chunks) - 1; last >= 0 && cap(s.snap.chunks[last])-len(s.snap.chunks[last]) > snapChunk/8 {
		s.snap.chunks[last] = bytes.Clone(s.snap.chunks[last]) // no spare MiB kept with it
	}
	s.store.mu.Lock()
	s.store.latest = s.snap
	s.store.mu.Unlock()
	return nil
}

func (s *memSnapshotSink) ID() string { return s.snap.meta.ID }

// Cancel drops the snapshot: the store keeps its latest.
func (s *memSnapshotSink) Cancel() error {
	s.done = true
	s.snap.chunks = nil
	return nil
}

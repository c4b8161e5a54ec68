package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// tokenFile holds the persisted fencing-token ceiling: 8 bytes big-endian,
// every token issued is ≤ it (protocol.md §6).
const tokenFile = "token-ceiling"

// persistentTokens is a TokenSource that reserves tokens in blocks: before any
// token of a block is issued, the block's end is written and fsynced, so a
// restart continues above every token ever issued even if the wall clock
// stepped back.
type persistentTokens struct {
	last  atomic.Uint64
	ceil  atomic.Uint64
	mu    sync.Mutex
	path  string
	block uint64
	fatal func(error)
}

func openPersistentTokens(dir string, first, block uint64, fatal func(error)) (*persistentTokens, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	p := &persistentTokens{path: filepath.Join(dir, tokenFile), block: max(block, 1), fatal: fatal}
	b, err := os.ReadFile(p.path)
	switch {
	case err == nil && len(b) == 8:
		if prev := binary.BigEndian.Uint64(b); prev >= first {
			first = prev + 1
		}
	case err == nil:
		return nil, fmt.Errorf("data dir: %s is corrupt (%d bytes, want 8)", p.path, len(b))
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("data dir: %w", err)
	}
	p.last.Store(first - 1)
	p.ceil.Store(first - 1)
	if err := p.persist(first - 1 + p.block); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	return p, nil
}

// Next implements locktable.TokenSource.
func (p *persistentTokens) Next() uint64 {
	n := p.last.Add(1)
	if n <= p.ceil.Load() {
		return n
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for n > p.ceil.Load() {
		if err := p.persist(n + p.block - 1); err != nil {
			p.fatal(err)
		}
	}
	return n
}

// persist writes ceil durably (writeDurable) and then publishes it.
func (p *persistentTokens) persist(ceil uint64) error {
	if err := writeDurable(p.path, ceil); err != nil {
		return err
	}
	p.ceil.Store(ceil)
	return nil
}
